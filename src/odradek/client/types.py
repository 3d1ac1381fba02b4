"""Value types shared by the clients (admin, producer, consumer)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from odradek.protocol.errors import ErrorCode
from odradek.protocol.types import TopicPartition

__all__ = ["ConsumerGroupMetadata", "Node", "PartitionMetadata", "TopicMetadata", "TopicPartition"]


@dataclass(frozen=True)
class Node:
    """A broker as the cluster metadata describes it."""

    id: int
    host: str
    port: int
    rack: str | None = None

    def __str__(self) -> str:
        rack = f" rack: {self.rack}" if self.rack else ""
        return f"{self.host}:{self.port} (id: {self.id}{rack})"


@dataclass(frozen=True)
class PartitionMetadata:
    topic: str
    partition: int
    #: -1 when the partition has no leader
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.NONE

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    #: partition index -> metadata
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    error: ErrorCode = ErrorCode.NONE


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership, for a transactional producer's offsets (Kafka's
    ConsumerGroupMetadata): TxnOffsetCommit carries it so the group coordinator can fence a
    member that is no longer in the group."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
