"""Placeholder of the partition-leadership functions (being written on branch wt-repl);
replaced at merge."""

from __future__ import annotations

from typing import Any

from odradek.metadata.image import NO_LEADER, MetadataImage
from odradek.protocol import messages as m


def _live(image: MetadataImage, broker_id: int, excluded: int) -> bool:
    reg = image.brokers.get(broker_id)
    return (broker_id != excluded and reg is not None and not reg.fenced
            and not reg.in_controlled_shutdown)


def _remove_broker(image: MetadataImage, broker_id: int) -> list[Any]:
    records: list[Any] = []
    for topic in image.topics_by_id.values():
        for index, part in topic.partitions.items():
            if broker_id not in part.isr:
                continue
            isr = [r for r in part.isr if r != broker_id] or [broker_id]
            leader = part.leader
            if leader == broker_id:
                leader = next((r for r in part.replicas if r in isr
                               and _live(image, r, broker_id)), NO_LEADER)
            if isr == list(part.isr) and leader == part.leader:
                continue
            records.append(m.PartitionChangeRecord(
                partition_id=index, topic_id=topic.topic_id,
                isr=isr if isr != list(part.isr) else None,
                leader=leader if leader != part.leader else -2))
    return records


def handle_broker_fenced(image: MetadataImage, broker_id: int) -> list[Any]:
    return _remove_broker(image, broker_id)


def handle_broker_controlled_shutdown(image: MetadataImage, broker_id: int) -> list[Any]:
    return _remove_broker(image, broker_id)


def handle_broker_unfenced(image: MetadataImage, broker_id: int) -> list[Any]:
    records: list[Any] = []
    for topic in image.topics_by_id.values():
        for index, part in topic.partitions.items():
            if part.leader == NO_LEADER and broker_id in part.isr:
                records.append(m.PartitionChangeRecord(partition_id=index,
                                                       topic_id=topic.topic_id,
                                                       leader=broker_id))
    return records
