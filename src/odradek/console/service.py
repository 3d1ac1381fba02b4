"""The console's view of a cluster, as plain data, fetched with Odradek's admin and consumer
clients. The web layer (`app`) only renders what these functions return."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.client import AdminClient, NewTopic, OffsetSpec, TopicPartition
from odradek.client.admin_groups import GroupDescription, group_state
from odradek.client.admin_types import ClusterDescription, TopicDescription
from odradek.client.consumer import AsyncConsumer
from odradek.client.types import Node
from odradek.protocol.errors import KafkaError

#: How long one page may wait on the cluster before it shows an error instead.
PAGE_TIMEOUT_MS = 15_000
#: The most records the message browser shows at once.
MAX_BROWSE_RECORDS = 500


class GroupActiveError(Exception):
    """A reset asked of a group with active members (Kafka's tool refuses it the same way)."""


@dataclass(frozen=True)
class PartitionView:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    earliest: int | None
    latest: int | None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader is None

    @property
    def messages(self) -> int | None:
        if self.earliest is None or self.latest is None:
            return None
        return self.latest - self.earliest


@dataclass(frozen=True)
class TopicSummary:
    name: str
    is_internal: bool
    partitions: int
    replication_factor: int
    under_replicated: int
    offline: int


@dataclass(frozen=True)
class Overview:
    cluster: ClusterDescription
    brokers: list[Node]
    topics: list[TopicSummary]

    @property
    def partition_count(self) -> int:
        return sum(t.partitions for t in self.topics)

    @property
    def under_replicated(self) -> int:
        return sum(t.under_replicated for t in self.topics)

    @property
    def offline(self) -> int:
        return sum(t.offline for t in self.topics)


@dataclass(frozen=True)
class GroupPartitionView:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member: str

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.committed < 0 or self.log_end is None:
            return None
        return self.log_end - self.committed


@dataclass(frozen=True)
class GroupView:
    description: GroupDescription
    partitions: list[GroupPartitionView]

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


@dataclass(frozen=True)
class ResetRow:
    partition: TopicPartition
    current: int | None
    new: int


@dataclass(frozen=True)
class RecordView:
    offset: int
    timestamp: int
    key: str | None
    value: str | None
    headers: list[tuple[str, str | None]] = field(default_factory=list)


def _summary(description: TopicDescription) -> TopicSummary:
    parts = description.partitions
    return TopicSummary(
        name=description.name,
        is_internal=description.is_internal,
        partitions=len(parts),
        replication_factor=max((len(p.replicas) for p in parts), default=0),
        under_replicated=sum(1 for p in parts if len(p.isr) < len(p.replicas)),
        offline=sum(1 for p in parts if p.leader is None),
    )


class ConsoleService:
    """The cluster as the console shows it, over one admin client (and short-lived consumers
    for the message browser) built from `client_config`."""

    def __init__(self, client_config: Mapping[str, Any]) -> None:
        self.client_config = dict(client_config)
        self.admin = AdminClient(self.client_config)

    async def close(self) -> None:
        await self.admin.close()

    # -------------------------------------------------------------------------- cluster
    async def overview(self) -> Overview:
        cluster = await self.admin.describe_cluster(timeout_ms=PAGE_TIMEOUT_MS)
        topics = await self.topics(include_internal=True)
        return Overview(cluster, sorted(cluster.nodes, key=lambda n: n.id), topics)

    async def topics(self, include_internal: bool = False) -> list[TopicSummary]:
        listings = await self.admin.list_topics(include_internal=include_internal,
                                                timeout_ms=PAGE_TIMEOUT_MS)
        if not listings:
            return []
        described = await self.admin.describe_topics(list(listings), timeout_ms=PAGE_TIMEOUT_MS,
                                                     raise_errors=False)
        return [_summary(d) for d in described.values() if isinstance(d, TopicDescription)]

    # -------------------------------------------------------------------------- topics
    async def topic(self, name: str) -> tuple[TopicDescription, list[PartitionView]]:
        description = (await self.admin.describe_topics(
            [name], include_configs=True, timeout_ms=PAGE_TIMEOUT_MS))[name]
        tps = [TopicPartition(name, p.partition) for p in description.partitions]
        earliest, latest = await asyncio.gather(self._offsets(tps, OffsetSpec.earliest()),
                                                self._offsets(tps, OffsetSpec.latest()))
        views = [PartitionView(p.partition, p.leader, p.replicas, p.isr,
                               earliest.get(TopicPartition(name, p.partition)),
                               latest.get(TopicPartition(name, p.partition)))
                 for p in sorted(description.partitions, key=lambda p: p.partition)]
        return description, views

    async def _offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec
                       ) -> dict[TopicPartition, int]:
        """Offsets per partition; a partition whose lookup failed (e.g. offline) is left out."""
        wanted = {tp: spec for tp in partitions}
        if not wanted:
            return {}
        results = await self.admin.list_offsets(wanted, timeout_ms=PAGE_TIMEOUT_MS,
                                                raise_errors=False)
        return {tp: r.offset for tp, r in results.items() if not isinstance(r, KafkaError)}

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        await self.admin.create_topics([NewTopic(name, partitions, replication_factor)],
                                       timeout_ms=PAGE_TIMEOUT_MS)

    async def delete_topic(self, name: str) -> None:
        await self.admin.delete_topics([name], timeout_ms=PAGE_TIMEOUT_MS)

    # -------------------------------------------------------------------------- messages
    def consumer(self, auto_offset_reset: str = "none") -> AsyncConsumer:
        """A consumer without a group (the message browser's and each live tail's): reading
        must not commit offsets or join anything. The caller closes it."""
        config = {k: v for k, v in self.client_config.items() if k != "group.id"}
        return AsyncConsumer({**config, "enable.auto.commit": False,
                              "auto.offset.reset": auto_offset_reset})

    async def browse(self, topic: str, partition: int, *, offset: int | None, last: int,
                     limit: int, encoding: str, timestamp: int | None = None
                     ) -> tuple[list[RecordView], int, int]:
        """Up to `limit` records of a partition from `offset`, or from the first record at or
        after `timestamp` (ms), or else the last `last` ones, decoded per `encoding`; also the
        partition's earliest and latest offsets."""
        tp = TopicPartition(topic, partition)
        earliest = (await self._offsets([tp], OffsetSpec.earliest())).get(tp)
        latest = (await self._offsets([tp], OffsetSpec.latest())).get(tp)
        if earliest is None or latest is None:
            raise LookupError(f"partition {topic}-{partition} has no offsets (unknown or "
                              f"offline)")
        if timestamp is not None:
            found = (await self._offsets([tp], OffsetSpec(timestamp))).get(tp, -1)
            offset = latest if found < 0 else found  # -1: no record that late
        start = max(latest - last, earliest) if offset is None else max(offset, earliest)
        end = min(latest, start + limit)
        if start >= end:
            return [], earliest, latest
        records = []
        consumer = self.consumer()
        try:
            consumer.assign([tp])
            consumer.seek(tp, start)
            async with asyncio.timeout(PAGE_TIMEOUT_MS / 1000):
                while True:
                    batch = await consumer.poll(1000, max_records=end - start)
                    records.extend(r for r in batch if start <= r.offset < end)
                    # transaction markers and compacted gaps: the position passes them
                    if (records and records[-1].offset >= end - 1) or \
                            await consumer.position(tp) >= end:
                        break
        finally:
            await consumer.close()
        return [RecordView(r.offset, r.timestamp, decode(r.key, encoding),
                           decode(r.value, encoding),
                           [(name, decode(value, encoding)) for name, value in r.headers])
                for r in records[:limit]], earliest, latest

    # -------------------------------------------------------------------------- groups
    async def groups(self) -> list[Any]:
        return sorted(await self.admin.list_groups(timeout_ms=PAGE_TIMEOUT_MS),
                      key=lambda g: g.group_id)

    async def group(self, group_id: str) -> GroupView:
        description = (await self.admin.describe_groups(
            [group_id], timeout_ms=PAGE_TIMEOUT_MS))[group_id]
        committed = await self.admin.list_consumer_group_offsets(group_id,
                                                                 timeout_ms=PAGE_TIMEOUT_MS)
        owner = {tp: member.member_id for member in description.members
                 for tp in member.assignment}
        partitions = set(committed) | set(owner)
        log_end = await self._offsets(partitions, OffsetSpec.latest())
        rows = [GroupPartitionView(tp.topic, tp.partition,
                                   committed[tp].offset if tp in committed else None,
                                   log_end.get(tp), owner.get(tp, ""))
                for tp in sorted(partitions)]
        return GroupView(description, rows)

    async def reset_plan(self, group_id: str, topic: str | None, strategy: str,
                         offset: int | None) -> list[ResetRow]:
        """The offsets a reset would commit (Kafka's --reset-offsets --dry-run): for the
        group's committed partitions (of `topic` only, when given), or every partition of
        `topic` when the group has none of it; a requested offset is clamped to the log.
        Like `consumer-groups --reset-offsets`, only for a group without active members."""
        # A group that does not exist is reset like an inactive one (Kafka 4.0's tool).
        state = group_state((await self.admin.describe_groups(
            [group_id], timeout_ms=PAGE_TIMEOUT_MS, raise_errors=False))[group_id])
        if state not in ("Empty", "Dead"):
            raise GroupActiveError(f"Assignments can only be reset if the group '{group_id}' "
                                   f"is inactive, but the current state is {state}.")
        committed = await self.admin.list_consumer_group_offsets(group_id,
                                                                 timeout_ms=PAGE_TIMEOUT_MS)
        partitions = [tp for tp in committed if topic is None or tp.topic == topic]
        if not partitions and topic is not None:
            description = (await self.admin.describe_topics(
                [topic], timeout_ms=PAGE_TIMEOUT_MS))[topic]
            partitions = [TopicPartition(topic, p.partition) for p in description.partitions]
        earliest, latest = await asyncio.gather(self._offsets(partitions, OffsetSpec.earliest()),
                                                self._offsets(partitions, OffsetSpec.latest()))
        rows = []
        for tp in sorted(partitions):
            if tp not in earliest or tp not in latest:
                raise LookupError(f"no offsets for {tp.topic}-{tp.partition} (offline?)")
            if strategy == "earliest":
                new = earliest[tp]
            elif strategy == "latest":
                new = latest[tp]
            else:
                assert offset is not None
                new = min(max(offset, earliest[tp]), latest[tp])
            current = committed[tp].offset if tp in committed else None
            rows.append(ResetRow(tp, current, new))
        return rows

    async def apply_reset(self, group_id: str, rows: list[ResetRow]) -> None:
        """Commits the plan; the coordinator refuses while the group has active members."""
        await self.admin.alter_consumer_group_offsets(
            group_id, {row.partition: row.new for row in rows}, timeout_ms=PAGE_TIMEOUT_MS)


ENCODINGS = ("text", "json", "hex")


def decode(data: bytes | None, encoding: str) -> str | None:
    """Bytes as the message browser shows them: UTF-8 text (invalid bytes replaced),
    pretty-printed JSON (text when the bytes are not JSON) or hex."""
    if data is None:
        return None
    if encoding == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if encoding == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text
