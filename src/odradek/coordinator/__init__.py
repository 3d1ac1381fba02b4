"""Coordinators: the group coordinator (classic consumer groups and committed offsets),
persisted in the compacted internal topic `__consumer_offsets`.

* `group`: a group's state (members, generations, protocol choice, offsets).
* `records`: the key/value records of `__consumer_offsets` and their replay.
* `runtime`: what every coordinator shares: the partitions it leads (loading, generations) and
  its writes, applied in memory only once committed, in append order.
* `metadata_manager`: which groups this broker coordinates; loading and persistence.
* `group_coordinator`: the protocol state machine (JoinGroup, SyncGroup, Heartbeat, ...).
"""

from odradek.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    Member,
    OffsetAndMetadata,
    TopicPartition,
)
from odradek.coordinator.group_coordinator import (
    GroupConfig,
    GroupCoordinator,
    GroupOverview,
    GroupSummary,
    JoinRequest,
    JoinResult,
    MemberSummary,
    SyncResult,
)
from odradek.coordinator.metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    java_string_hashcode,
    kafka_abs,
)
from odradek.coordinator.runtime import CoordinatorRuntime

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "OFFSETS_TOPIC",
    "CoordinatorRuntime",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "GroupMetadataManager",
    "GroupOverview",
    "GroupState",
    "GroupSummary",
    "JoinRequest",
    "JoinResult",
    "Member",
    "MemberSummary",
    "OffsetAndMetadata",
    "SyncResult",
    "TopicPartition",
    "java_string_hashcode",
    "kafka_abs",
]
