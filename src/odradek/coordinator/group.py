"""A classic consumer group's state: members, generations, protocol choice, committed offsets.

This is Kafka's GroupMetadata and MemberMetadata: plain state and the rules that only look at
one group (which protocol the members share, who leads, which offsets have expired). The
coordinator drives it; nothing here does I/O or keeps time.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError
from odradek.protocol.primitives import Reader
from odradek.protocol.types import TopicPartition

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class GroupState(enum.Enum):
    """The states of a classic group; the values are what DescribeGroups/ListGroups say."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, text: str) -> GroupState | None:
        """A state name as ListGroups filters give it (case-insensitive); None if unknown."""
        lowered = text.lower()
        return next((state for state in cls if state.value.lower() == lowered), None)


_ALL_STATES = frozenset(GroupState)
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: _ALL_STATES,
}


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset as stored in an OffsetCommitValue."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only set by OffsetCommit v2-v4 with a retention time
    #: the offset of the batch that holds its record in __consumer_offsets (-1: not appended
    #: yet). When a transaction's offsets are committed, the newer record of a partition wins
    #: (Kafka compares the record offsets, as compaction keeps the newer one).
    record_offset: int = field(default=-1, compare=False)


@dataclass(eq=False)
class Member:
    """One member of a group (Kafka's MemberMetadata)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Set while the member waits for its JoinGroup / SyncGroup answer.
    join_future: Any = None
    sync_future: Any = None
    is_new: bool = False
    heartbeat_timer: Any = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        return next(name for name, _ in self.protocols if name in candidates)


def new_member_id(client_id: str, group_instance_id: str | None) -> str:
    """`<client.id>-<uuid>` (or `<group.instance.id>-<uuid>` for static members), as Kafka."""
    prefix = group_instance_id if group_instance_id is not None else client_id
    return f"{prefix}-{uuid.uuid4()}"


@dataclass(eq=False)
class Group:
    """A classic group's state (Kafka's GroupMetadata)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # member ids handed out with MEMBER_ID_REQUIRED -> their expiry timer
    pending_members: dict[str, Any] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_sync: set[str] = field(default_factory=set)
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # Offsets appended but not committed yet (Kafka's pendingOffsetCommits): the last one
    # staged per partition. They are not visible to OffsetFetch, but keep the group alive and
    # their partitions out of expiration; removing a partition's offsets drops them, so a
    # commit that lands after its tombstone was decided is not applied.
    pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = field(
        default_factory=dict)
    # Transactional offsets (TxnOffsetCommit) per producer id, once written, until the
    # producer's transaction marker commits or aborts them (Kafka's
    # pendingTransactionalOffsetCommits); and those still being written. Never visible to
    # OffsetFetch; they keep the group alive and their partitions out of expiration.
    pending_txn_offsets: dict[int, dict[TopicPartition, OffsetAndMetadata]] = field(
        default_factory=dict)
    txn_offsets_in_flight: dict[int, dict[TopicPartition, OffsetAndMetadata]] = field(
        default_factory=dict)
    new_member_added: bool = False
    join_timer: Any = None
    sync_timer: Any = None
    initial_delay_active: bool = False
    #: the KIP-848 consumer group state when this is a consumer-protocol group (a
    #: `consumer_group.ConsumerGroup`); None for a classic group
    consumer: Any = None

    @property
    def group_type(self) -> str:
        """What ListGroups says: `consumer` (KIP-848) or `classic`."""
        return "consumer" if self.consumer is not None else "classic"

    # -- state
    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise RuntimeError(f"group {self.group_id} cannot go from {self.state.value} to "
                               f"{state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # -- members
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def is_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A static member whose instance id now belongs to another member id."""
        if group_instance_id is None:
            return False
        known = self.static_members.get(group_instance_id)
        return known is not None and known != member_id

    def replace_static_member(self, group_instance_id: str, old_member_id: str,
                              new_member_id: str) -> Member:
        """A static member restarted: its membership (and assignment) moves to a new id."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for member in self.members.values() if member.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [member for member in self.members.values() if not member.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else make a rejoined member leader; False when no
        member has rejoined."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols
    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names)
        for member in members[1:]:
            common &= set(member.protocol_names)
        return common

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its preferred protocol among the common ones; most votes win
        (ties go to the protocol listed first by the longest-standing member)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise RuntimeError(f"no protocol common to the members of {self.group_id}")
        votes = Counter(member.vote(candidates) for member in self.members.values())
        order = next(iter(self.members.values())).protocol_names
        return max(candidates, key=lambda name: (votes[name], -order.index(name)))

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, instance id, metadata of the chosen protocol) for the leader."""
        return [(member.member_id, member.group_instance_id, member.metadata(self.protocol_name))
                for member in self.members.values()]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of a consumer group subscribe to; None when unknown."""
        if self.consumer is not None:
            return self.consumer.subscribed_topic_names()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None \
                or not self.members:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                subscription = decode_consumer_protocol(
                    m.ConsumerProtocolSubscription, member.metadata(self.protocol_name))
                topics.update(subscription.topics)
        except DecodeError:
            return None
        return topics

    # -- offsets
    @property
    def has_offsets(self) -> bool:
        """Committed or pending offsets, transactional ones too (an Empty group without any
        dies)."""
        return bool(self.offsets or self.pending_offset_commits or self.pending_txn_offsets
                    or self.txn_offsets_in_flight)

    def has_pending_txn_offset(self, tp: TopicPartition) -> bool:
        """Whether an open transaction holds (or is writing) an offset of `tp` (Kafka's
        hasPendingTransactionalOffsets)."""
        return any(tp in offsets for by_producer in (self.pending_txn_offsets,
                                                     self.txn_offsets_in_flight)
                   for offsets in by_producer.values())

    def has_open_transaction(self, producer_id: int) -> bool:
        return producer_id in self.pending_txn_offsets or producer_id in self.txn_offsets_in_flight

    def remove_pending_txn_offsets(self, tp: TopicPartition) -> None:
        """A tombstone of `tp` removes the open transactions' offsets of it too (Kafka's
        replay of an offset tombstone)."""
        for by_producer in (self.pending_txn_offsets, self.txn_offsets_in_flight):
            for producer_id, offsets in list(by_producer.items()):
                offsets.pop(tp, None)
                if not offsets:
                    del by_producer[producer_id]

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """Which offsets expire now (Kafka 2.1+, KIP-211): all of an Empty group once it has
        been empty for the retention time; of a Stable consumer group, those of topics it no
        longer subscribes to; of a group used only for commits, each retention after its last
        commit. An explicit expire timestamp (OffsetCommit v2-v4) wins."""
        subscribed: set[str] = set()
        if self.protocol_type is not None and self.state == GroupState.EMPTY:
            def base(entry: OffsetAndMetadata) -> int:
                return self.state_timestamp_ms if self.state_timestamp_ms >= 0 \
                    else entry.commit_timestamp
        elif self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.state == GroupState.STABLE:
            topics = self.subscribed_topics()
            if topics is None:
                return []
            subscribed = topics

            def base(entry: OffsetAndMetadata) -> int:
                return entry.commit_timestamp
        elif self.protocol_type is None:
            def base(entry: OffsetAndMetadata) -> int:
                return entry.commit_timestamp
        else:
            return []
        expired = []
        for tp, entry in self.offsets.items():
            if tp.topic in subscribed or tp in self.pending_offset_commits \
                    or self.has_pending_txn_offset(tp):
                continue
            if entry.expire_timestamp >= 0:
                if now_ms >= entry.expire_timestamp:
                    expired.append(tp)
            elif now_ms - base(entry) >= retention_ms:
                expired.append(tp)
        return expired


def decode_consumer_protocol(cls: Any, data: bytes) -> Any:
    """A ConsumerProtocolSubscription/Assignment: int16 version, then the body. Versions newer
    than ours are read with our newest schema (they only append fields), like Kafka does."""
    reader = Reader(data)
    if reader.remaining < 2:
        raise DecodeError(f"{cls.NAME}: missing version prefix")
    version = int.from_bytes(reader.buf[0:2], "big", signed=True)
    reader.pos = 2
    if version < cls.MIN_VERSION:
        raise DecodeError(f"{cls.NAME}: unknown version {version}")
    return cls.read(reader, min(version, cls.MAX_VERSION))
