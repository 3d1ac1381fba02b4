"""A consumer group of the KIP-848 protocol (ConsumerGroupHeartbeat): its state and its records.

Kafka's ConsumerGroup and ConsumerGroupMember. The state is exactly what the group's records in
`__consumer_offsets` say, and it changes only by replaying them (`replay`): the coordinator
computes the records of a heartbeat, writes them, and once they are committed replays them here,
as a load does. So a reloaded group is the group that was live.

The records (key version = Kafka's record type, value version 0):
  3 ConsumerGroupMetadata (group epoch), 4 ConsumerGroupPartitionMetadata (subscribed topics'
  metadata), 5 ConsumerGroupMemberMetadata (a member's subscription), 6
  ConsumerGroupTargetAssignmentMetadata (assignment epoch), 7
  ConsumerGroupTargetAssignmentMember (a member's target), 8
  ConsumerGroupCurrentMemberAssignment (a member's epochs, state and current partitions).
A null value is a tombstone. Assignments are kept by topic id, as the records hold them.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol import messages as m

#: topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]
Record = tuple[bytes, bytes | None]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
NO_PARTITION_EPOCH = -1

METADATA_KEY_VERSION = 3
PARTITION_METADATA_KEY_VERSION = 4
MEMBER_METADATA_KEY_VERSION = 5
TARGET_METADATA_KEY_VERSION = 6
TARGET_MEMBER_KEY_VERSION = 7
CURRENT_ASSIGNMENT_KEY_VERSION = 8
VALUE_VERSION = 0
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(3, 9))


class MemberState(enum.IntEnum):
    """Kafka's MemberState: the byte stored in ConsumerGroupCurrentMemberAssignment."""

    UNREVOKED_PARTITIONS = 0  # must revoke partitions before it gets its next epoch
    UNRELEASED_PARTITIONS = 1  # waits for partitions other members still hold
    STABLE = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    """What ConsumerGroupDescribe and ListGroups say (Kafka's ConsumerGroupState)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def freeze(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """`assignment` without empty topics, with immutable partition sets."""
    return {topic_id: frozenset(parts) for topic_id, parts in assignment.items() if parts}


def count(assignment: Assignment) -> int:
    return sum(len(parts) for parts in assignment.values())


@dataclass(frozen=True)
class ClassicMetadata:
    """What a member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a
    consumer group brings along (Kafka's ClassicMemberMetadata): its session timeout and the
    protocols (assignor name, subscription bytes) of its JoinGroup."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0] if self.protocols else ""


@dataclass(frozen=True)
class ConsumerMember:
    """One member (Kafka's ConsumerGroupMember): immutable, replaced on every change."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    pending_revocation: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    #: set for a member of the classic protocol (mixed groups, online upgrade)
    classic: ClassicMetadata | None = None

    @property
    def uses_classic(self) -> bool:
        return self.classic is not None

    def with_epoch(self, epoch: int, **changes: Any) -> ConsumerMember:
        """Kafka's updateMemberEpoch: the old epoch becomes the previous one."""
        return dataclasses.replace(self, member_epoch=epoch,
                                   previous_member_epoch=self.member_epoch, **changes)

    def same_subscription(self, other: ConsumerMember) -> bool:
        return (self.subscribed_topic_names == other.subscribed_topic_names
                and self.subscribed_topic_regex == other.subscribed_topic_regex
                and self.server_assignor == other.server_assignor)


@dataclass(eq=False)
class ConsumerGroup:
    """The consumer-protocol part of a group (attached to its `Group` as `consumer`)."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    #: the subscribed topics' metadata the target was computed for: name -> (id, partitions)
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    #: (topic id, partition) -> the epoch of the member that holds (or revokes) it
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    #: member id -> its session / rebalance timers (not state: the coordinator's)
    session_timers: dict[str, Any] = field(default_factory=dict)
    rebalance_timers: dict[str, Any] = field(default_factory=dict)

    # -- reading
    @property
    def is_empty(self) -> bool:
        return not self.members

    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or \
                    member.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def target_of(self, member_id: str) -> dict[uuid.UUID, frozenset[int]]:
        return self.target.get(member_id, {})

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), NO_PARTITION_EPOCH)

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def all_classic_except(self, member_id: str) -> bool:
        """Whether every member but `member_id` speaks the classic protocol (Kafka's
        allMembersUseClassicProtocolExcept)."""
        return all(member.uses_classic for mid, member in self.members.items()
                   if mid != member_id)

    def subscribed_topic_names(self) -> set[str]:
        """Every topic a member names (regex subscriptions resolve into the metadata)."""
        return set(self.subscription_metadata) | {
            name for member in self.members.values() for name in member.subscribed_topic_names}

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's computePreferredServerAssignor);
        `default` when none asks."""
        votes: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        if not votes:
            return default
        return max(votes, key=lambda name: (votes[name], name))

    # -- replay (the only way the state changes)
    def replay(self, key: Any, value: Any) -> None:
        """Applies one of the group's records (`value` None: a tombstone)."""
        if isinstance(key, m.ConsumerGroupMetadataKey):
            if value is not None:
                self.group_epoch = value.epoch
        elif isinstance(key, m.ConsumerGroupPartitionMetadataKey):
            self.subscription_metadata = {} if value is None else {
                t.topic_name: (t.topic_id, t.num_partitions) for t in value.topics}
        elif isinstance(key, m.ConsumerGroupMemberMetadataKey):
            self._replay_member_metadata(key.member_id, value)
        elif isinstance(key, m.ConsumerGroupTargetAssignmentMetadataKey):
            if value is not None:
                self.assignment_epoch = value.assignment_epoch
        elif isinstance(key, m.ConsumerGroupTargetAssignmentMemberKey):
            if value is None:
                self.target.pop(key.member_id, None)
            else:
                self.target[key.member_id] = freeze(
                    {t.topic_id: t.partitions for t in value.topic_partitions})
        elif isinstance(key, m.ConsumerGroupCurrentMemberAssignmentKey):
            self._replay_current_assignment(key.member_id, value)

    def _replay_member_metadata(self, member_id: str, value: Any) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._remove_partition_epochs(old)
                del self.members[member_id]
                if old.instance_id is not None and \
                        self.static_members.get(old.instance_id) == member_id:
                    del self.static_members[old.instance_id]
            return
        base = old if old is not None else ConsumerMember(member_id)
        member = dataclasses.replace(
            base, instance_id=value.instance_id, rack_id=value.rack_id,
            client_id=value.client_id, client_host=value.client_host,
            subscribed_topic_names=tuple(value.subscribed_topic_names or ()),
            subscribed_topic_regex=value.subscribed_topic_regex or None,
            server_assignor=value.server_assignor or None,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            classic=None if value.classic_member_metadata is None else ClassicMetadata(
                value.classic_member_metadata.session_timeout_ms,
                tuple((p.name, bytes(p.metadata))
                      for p in value.classic_member_metadata.supported_protocols)))
        self.members[member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id

    def _replay_current_assignment(self, member_id: str, value: Any) -> None:
        old = self.members.get(member_id)
        if old is None:
            if value is None:
                return
            old = ConsumerMember(member_id)
        self._remove_partition_epochs(old)
        if value is None:
            member = dataclasses.replace(old, member_epoch=0, previous_member_epoch=0,
                                         state=MemberState.STABLE, assigned={},
                                         pending_revocation={})
        else:
            member = dataclasses.replace(
                old, member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=MemberState(value.state),
                assigned=freeze({t.topic_id: t.partitions for t in value.assigned_partitions}),
                pending_revocation=freeze({t.topic_id: t.partitions
                                           for t in value.partitions_pending_revocation}))
        self.members[member_id] = member
        self._add_partition_epochs(member)

    def _add_partition_epochs(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, parts in assignment.items():
                for partition in parts:
                    self.partition_epochs[(topic_id, partition)] = member.member_epoch

    def _remove_partition_epochs(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, parts in assignment.items():
                for partition in parts:
                    if self.partition_epochs.get((topic_id, partition)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, partition)]


# ------------------------------------------------------------------------------------------
# records


def _key(record: Any, version: int) -> bytes:
    return m.encode_versioned(record, version)


def _value(record: Any) -> bytes:
    return m.encode_versioned(record, VALUE_VERSION)


def group_epoch_record(group_id: str, epoch: int) -> Record:
    return (_key(m.ConsumerGroupMetadataKey(group_id=group_id), METADATA_KEY_VERSION),
            _value(m.ConsumerGroupMetadataValue(epoch=epoch)))


def subscription_metadata_record(group_id: str,
                                 metadata: Mapping[str, tuple[uuid.UUID, int]]) -> Record:
    V = m.ConsumerGroupPartitionMetadataValue
    return (_key(m.ConsumerGroupPartitionMetadataKey(group_id=group_id),
                 PARTITION_METADATA_KEY_VERSION),
            _value(V(topics=[V.TopicMetadata(topic_id=topic_id, topic_name=name,
                                             num_partitions=partitions, partition_metadata=[])
                             for name, (topic_id, partitions) in sorted(metadata.items())])))


def member_metadata_record(group_id: str, member: ConsumerMember) -> Record:
    V = m.ConsumerGroupMemberMetadataValue
    classic = None if member.classic is None else V.ClassicMemberMetadata(
        session_timeout_ms=member.classic.session_timeout_ms,
        supported_protocols=[V.ClassicProtocol(name=name, metadata=data)
                             for name, data in member.classic.protocols])
    return (_key(m.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id),
                 MEMBER_METADATA_KEY_VERSION),
            _value(V(classic_member_metadata=classic,
                instance_id=member.instance_id, rack_id=member.rack_id,
                client_id=member.client_id, client_host=member.client_host,
                subscribed_topic_names=list(member.subscribed_topic_names),
                subscribed_topic_regex=member.subscribed_topic_regex,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                server_assignor=member.server_assignor)))


def _topic_partitions(cls: Any, assignment: Assignment) -> list[Any]:
    return [cls(topic_id=topic_id, partitions=sorted(parts))
            for topic_id, parts in sorted(assignment.items(), key=lambda item: str(item[0]))]


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    V = m.ConsumerGroupTargetAssignmentMemberValue
    return (_key(m.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
                 TARGET_MEMBER_KEY_VERSION),
            _value(V(topic_partitions=_topic_partitions(V.TopicPartition, assignment))))


def target_epoch_record(group_id: str, epoch: int) -> Record:
    return (_key(m.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
                 TARGET_METADATA_KEY_VERSION),
            _value(m.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch)))


def current_assignment_record(group_id: str, member: ConsumerMember) -> Record:
    V = m.ConsumerGroupCurrentMemberAssignmentValue
    return (_key(m.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id,
                                                           member_id=member.member_id),
                 CURRENT_ASSIGNMENT_KEY_VERSION),
            _value(V(member_epoch=member.member_epoch,
                     previous_member_epoch=member.previous_member_epoch,
                     state=int(member.state),
                     assigned_partitions=_topic_partitions(V.TopicPartitions, member.assigned),
                     partitions_pending_revocation=_topic_partitions(
                         V.TopicPartitions, member.pending_revocation))))


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member leaves: its current assignment, its target, then its metadata (Kafka's
    order, so a replay never sees an assignment without its member)."""
    return [
        (_key(m.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id),
              CURRENT_ASSIGNMENT_KEY_VERSION), None),
        (_key(m.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
              TARGET_MEMBER_KEY_VERSION), None),
        (_key(m.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id),
              MEMBER_METADATA_KEY_VERSION), None),
    ]


def group_tombstones(group_id: str) -> list[Record]:
    """The group itself is deleted (it has no members left)."""
    return [
        (_key(m.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
              TARGET_METADATA_KEY_VERSION), None),
        (_key(m.ConsumerGroupPartitionMetadataKey(group_id=group_id),
              PARTITION_METADATA_KEY_VERSION), None),
        (_key(m.ConsumerGroupMetadataKey(group_id=group_id), METADATA_KEY_VERSION), None),
    ]


def decode_record(key_bytes: bytes, value_bytes: bytes | None) -> tuple[Any, Any]:
    """(key, value or None) of a consumer group record."""
    key, key_version = m.decode_consumer_offsets_key(key_bytes)
    decoded = m.decode_consumer_offsets_value(value_bytes, key_version)
    return key, None if decoded is None else decoded[0]


def replay_records(group: ConsumerGroup, records: Iterable[Record]) -> None:
    for key_bytes, value_bytes in records:
        key, value = decode_record(key_bytes, value_bytes)
        group.replay(key, value)
