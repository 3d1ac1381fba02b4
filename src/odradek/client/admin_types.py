"""What the admin client takes and returns (Kafka's org.apache.kafka.clients.admin types)."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from odradek.client.types import Node, TopicPartition

# The config model's own types, re-exported as part of the admin API.
from odradek.config.describe import ConfigEntry, ConfigSource, ConfigSynonym
from odradek.config.types import ConfigType
from odradek.protocol.errors import KafkaError
from odradek.protocol.ids import uuid_to_kafka_str

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "CreatedTopic",
    "DeletedRecords",
    "IsolationLevel",
    "ListOffsetsResultInfo",
    "LogDirDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "PartitionReassignment",
    "ReplicaInfo",
    "TopicDescription",
    "TopicListing",
    "TopicPartitionInfo",
]


# ---------------------------------------------------------------------------------- configs


class ConfigResourceType(enum.IntEnum):
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


@dataclass(frozen=True)
class ConfigResource:
    """A config owner: a topic by name, a broker by id (``""`` for the cluster-wide default)."""

    type: ConfigResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | str = "") -> ConfigResource:
        return cls(ConfigResourceType.BROKER, str(node_id))

    @classmethod
    def group(cls, group_id: str) -> ConfigResource:
        return cls(ConfigResourceType.GROUP, group_id)

    @classmethod
    def client_metrics(cls, subscription: str) -> ConfigResource:
        return cls(ConfigResourceType.CLIENT_METRICS, subscription)

    def __str__(self) -> str:
        return f"ConfigResource(type={self.type.name}, name='{self.name}')"


class AlterConfigOpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class AlterConfigOp:
    """One incremental change: SET a value, DELETE an override, APPEND to / SUBTRACT from a
    list-typed config."""

    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET


# ---------------------------------------------------------------------------------- topics


@dataclass
class NewTopic:
    """A topic to create. -1 partitions/replication factor take the broker defaults;
    `replica_assignment` (partition -> broker ids) replaces both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: dict[int, list[int]] | None = None
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreatedTopic:
    """What CreateTopics reports back (counts and configs from v5 on, else -1 and {})."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: dict[str, ConfigEntry]


@dataclass(frozen=True)
class NewPartitions:
    """Grow a topic to `total_count` partitions; `assignments` lists the replicas of each new
    partition (None: the broker places them)."""

    total_count: int
    assignments: list[list[int]] | None = None


@dataclass(frozen=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID
    is_internal: bool


@dataclass(frozen=True)
class TopicPartitionInfo:
    partition: int
    #: None when the partition has no leader
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    #: Eligible leader replicas (KIP-966); None when the broker could not say (Metadata API)
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    leader_epoch: int = -1
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: list[TopicPartitionInfo]
    #: the topic's configs, when asked for (``include_configs=True``)
    configs: dict[str, ConfigEntry] | None = None

    @property
    def topic_id_str(self) -> str:
        """The topic id as Kafka prints it (22 characters of base64url)."""
        return uuid_to_kafka_str(self.topic_id)


@dataclass(frozen=True)
class PartitionReassignment:
    """An ongoing reassignment (Kafka's PartitionReassignment): every replica while it runs
    (the target and the ones being removed), the ones being added and being removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller: Node | None
    nodes: list[Node]


# ---------------------------------------------------------------------------------- offsets


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


@dataclass(frozen=True)
class OffsetSpec:
    """Which offset `list_offsets` looks up: a timestamp, or one of Kafka's special values."""

    timestamp: int

    EARLIEST_TIMESTAMP = -2
    LATEST_TIMESTAMP = -1
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL_TIMESTAMP = -4

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(cls.EARLIEST_TIMESTAMP)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(cls.LATEST_TIMESTAMP)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        """The offset of the record with the highest timestamp."""
        return cls(cls.MAX_TIMESTAMP)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        """The first offset whose timestamp is >= `timestamp_ms`."""
        if timestamp_ms < 0:
            raise ValueError("a timestamp to look up must not be negative")
        return cls(timestamp_ms)


@dataclass(frozen=True)
class ListOffsetsResultInfo:
    #: -1 when no such offset exists (e.g. a timestamp after the last record)
    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass(frozen=True)
class DeletedRecords:
    low_watermark: int


# ---------------------------------------------------------------------------------- log dirs


@dataclass(frozen=True)
class ReplicaInfo:
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    path: str
    error: KafkaError | None
    replicas: dict[TopicPartition, ReplicaInfo]
    #: None when the broker does not report it (before DescribeLogDirs v4)
    total_bytes: int | None = None
    usable_bytes: int | None = None
