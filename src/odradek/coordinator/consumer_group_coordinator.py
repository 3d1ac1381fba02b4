"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Kafka 4.0's GroupMetadataManager for consumer groups. A heartbeat (1) checks the request and
the member's epoch, (2) updates the member's subscription, bumping the group epoch when a
member joins, leaves or changes what it subscribes to, or when the subscribed topics' metadata
changes, (3) computes a new target assignment with the group's server assignor when the group
epoch is ahead of the assignment epoch, and (4) moves the member's current assignment towards
its target (`consumer_assignment.reconcile`). Each step is records; they are written through the
coordinator runtime and, once committed, replayed into the group (`ConsumerGroup.replay`), so a
load rebuilds exactly the live state. Heartbeats of one group are handled one at a time (a
group's next step is computed from the state its previous one committed); groups run
concurrently.

Timers (the injected clock): a member's session (`group.consumer.session.timeout.ms`, reset by
every heartbeat) and, while it must revoke partitions, its rebalance timeout; either expiring
fences the member out of the group.

Regular expressions (`subscribed_topic_regex`) have Kafka's re2j syntax (`topic_regex`: what re2j
refuses, backreferences, lookaround, possessive quantifiers, is refused with re2j's description)
and are matched against whole topic names (`fullmatch`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.config import group as group_config
from odradek.coordinator.consumer_assignment import (
    ASSIGNORS,
    AssignmentSpec,
    assignor_names,
    reconcile,
)
from odradek.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    NO_PARTITION_EPOCH,
    Assignment,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    Record,
    current_assignment_record,
    freeze,
    group_epoch_record,
    group_tombstones,
    member_metadata_record,
    member_tombstones,
    replay_records,
    subscription_metadata_record,
    target_epoch_record,
    target_member_record,
)
from odradek.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    Member,
    decode_consumer_protocol,
)
from odradek.coordinator.metadata_manager import GroupMetadataManager
from odradek.coordinator.records import group_key, group_record
from odradek.coordinator.topic_regex import Re2jSyntaxError, compile_re2j
from odradek.coordinator.topic_regex import description as regex_description
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError, ErrorCode, KafkaError

log = logging.getLogger("odradek.coordinator.consumer")

#: topic name -> (topic id, number of partitions) of the cluster's topics now
TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    #: group.consumer.migration.policy: which online conversions between classic and consumer
    #: groups are allowed (bidirectional, upgrade, downgrade, disabled)
    migration_policy: str = "bidirectional"
    classic_max_size: int = 2**31 - 1  # group.max.size (the classic groups' limit)

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "downgrade")

    @classmethod
    def from_properties(cls, get: Callable[[str], Any]) -> ConsumerGroupConfig:
        """From the broker's properties (Kafka's defaults for keys `get` does not know)."""
        def value(key: str, default: Any) -> Any:
            try:
                found = get(key)
            except KeyError:
                return default
            return default if found is None else found

        assignors = value("group.consumer.assignors", list(cls.assignors))
        if isinstance(assignors, str):
            assignors = [item for item in assignors.split(",") if item.strip()]
        return cls(
            session_timeout_ms=int(value("group.consumer.session.timeout.ms",
                                         cls.session_timeout_ms)),
            heartbeat_interval_ms=int(value("group.consumer.heartbeat.interval.ms",
                                            cls.heartbeat_interval_ms)),
            max_size=int(value("group.consumer.max.size", cls.max_size)),
            assignors=tuple(assignor_names(list(assignors))),
            migration_policy=_migration_policy(value("group.consumer.migration.policy",
                                                     cls.migration_policy)),
            classic_max_size=int(value("group.max.size", cls.classic_max_size)))


MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def _migration_policy(text: str) -> str:
    """Kafka's ConsumerGroupMigrationPolicy.parse: case-insensitive."""
    policy = str(text).strip().lower()
    if policy not in MIGRATION_POLICIES:
        raise ValueError(f"Invalid value {text} for configuration "
                         f"group.consumer.migration.policy: String must be one of: "
                         f"{', '.join(p.upper() for p in MIGRATION_POLICIES)}")
    return policy


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: what the client owns (None: not said in this heartbeat)
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    #: v0 lets the coordinator choose the member id of a joining member; v1 clients choose it
    version: int = 1
    #: a classic member's JoinGroup in a consumer group (mixed groups)
    classic: ClassicMetadata | None = None


@dataclass
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: None: the assignment did not change (the response carries none)
    assignment: Assignment | None = None


@dataclass
class DescribedMember:
    member: ConsumerMember
    target: Assignment


@dataclass
class DescribedGroup:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: list[DescribedMember] = field(default_factory=list)


@dataclass
class ClassicJoin:
    """A classic member's JoinGroup, for a group that is a consumer group."""

    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass
class ClassicJoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_name: str | None = None


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


def _invalid(message: str) -> _Refused:
    return _Refused(ErrorCode.INVALID_REQUEST, message)


class ConsumerGroupCoordinator:
    def __init__(self, config: ConsumerGroupConfig, manager: GroupMetadataManager,
                 topics: TopicsView, *, clock: Clock = SYSTEM_CLOCK,
                 is_active: Callable[[], bool] = lambda: True) -> None:
        self.config = config
        self.manager = manager
        self.topics = topics
        self.clock = clock
        self.is_active = is_active
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: set by the classic coordinator: a classic group was upgraded (its waiting JoinGroup
        #: and SyncGroup answers and timers end), a consumer group downgraded to this classic
        #: group (its members' sessions start and it rebalances)
        self.on_upgraded: Callable[[Group], None] = lambda group: None
        self.on_downgraded: Callable[[Group], None] = lambda group: None
        #: group id -> the group's dynamic configs (GROUP config resources: ConfigRecords in
        #: the metadata image), which override the broker's session timeout and heartbeat
        #: interval for that group; read at each heartbeat, as Kafka's GroupConfigManager
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}

    def session_timeout_ms(self, group_id: str) -> int:
        """consumer.session.timeout.ms of the group, else group.consumer.session.timeout.ms."""
        return group_config.effective_int(self.group_configs(group_id),
                                          group_config.CONSUMER_SESSION_TIMEOUT_MS,
                                          self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """consumer.heartbeat.interval.ms of the group, else the broker's."""
        return group_config.effective_int(self.group_configs(group_id),
                                          group_config.CONSUMER_HEARTBEAT_INTERVAL_MS,
                                          self.config.heartbeat_interval_ms)

    @property
    def default_assignor(self) -> str:
        return self.config.assignors[0]

    # ------------------------------------------------------------------------------ checks

    def _validate(self, req: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not req.group_id:
            raise _invalid("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            raise _invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            raise _invalid("RackId can't be empty.")
        if req.version >= 1 and not req.member_id:
            raise _invalid("MemberId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise _invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be "
                               "non-null when (re-)joining.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _invalid(f"MemberEpoch {req.member_epoch} is invalid.")
        if req.member_epoch != 0 and not req.member_id:
            raise _invalid("MemberId can't be empty.")
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise _Refused(ErrorCode.UNSUPPORTED_ASSIGNOR,
                           f"ServerAssignor {req.server_assignor} is not supported. Supported "
                           f"assignors: {', '.join(self.config.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                compile_re2j(req.subscribed_topic_regex)
            except (re.error, Re2jSyntaxError) as exc:
                raise _Refused(ErrorCode.INVALID_REGULAR_EXPRESSION,
                               f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a "
                               f"valid regular expression: {regex_description(exc)}.") from None

    def _coordinator_error(self, group_id: str) -> ErrorCode:
        if not self.is_active():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return self.manager.coordinator_error(group_id)

    # ------------------------------------------------------------------------------ heartbeat

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        try:
            self._validate(req)
            error = self._coordinator_error(req.group_id)
            if error != ErrorCode.NONE:
                raise _Refused(error)
            lock = self._locks.setdefault(req.group_id, asyncio.Lock())
            # Shielded: a closed connection must not cancel a step half written.
            return await asyncio.shield(self._locked(lock, req))
        except _Refused as refused:
            return HeartbeatResult(refused.error, refused.message)

    async def _locked(self, lock: asyncio.Lock, req: HeartbeatRequest) -> HeartbeatResult:
        async with lock:
            try:
                if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    return await self._leave(req)
                return await self._heartbeat(req)
            except _Refused as refused:
                return HeartbeatResult(refused.error, refused.message)

    def _consumer_group(self, req: HeartbeatRequest,
                        create: bool) -> tuple[Group, ConsumerGroup, list[Record]]:
        """The group the heartbeat is for: existing, new (for a joining member), an empty
        classic group replaced (its metadata tombstoned), or a classic group of consumers
        upgraded online (Kafka's getOrMaybeCreateConsumerGroup and convertToConsumerGroup).
        A converted group is a new `Group` holding the conversion's state already; it
        replaces the classic one once the records are written."""
        group = self.manager.get_group(req.group_id)
        if group is None or (group.consumer is None and create and _is_empty_classic(group)):
            if not create:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {req.group_id} not found.")
            fresh = self._new_group(req.group_id, group)
            converting = [(group_key(req.group_id), None)] if group is not None else []
            return fresh, fresh.consumer, converting
        if group.consumer is None:
            if create and self._can_upgrade(group):
                fresh = self._new_group(req.group_id, group)
                records = self._upgrade_records(group)
                replay_records(fresh.consumer, records)
                return fresh, fresh.consumer, records
            raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND,
                           f"Group {req.group_id} is not a consumer group.")
        return group, group.consumer, []

    def _new_group(self, group_id: str, replaced: Group | None) -> Group:
        fresh = Group(group_id, state_timestamp_ms=self.clock.time_ms(),
                      protocol_type=CONSUMER_PROTOCOL_TYPE)
        fresh.consumer = ConsumerGroup(group_id)
        if replaced is not None:  # the classic group's offsets stay
            fresh.offsets = replaced.offsets
            fresh.pending_offset_commits = replaced.pending_offset_commits
            fresh.pending_txn_offsets = replaced.pending_txn_offsets
            fresh.txn_offsets_in_flight = replaced.txn_offsets_in_flight
        return fresh

    def _can_upgrade(self, group: Group) -> bool:
        """Kafka's validateOnlineUpgrade."""
        if not self.config.upgrade_enabled:
            log.info("Cannot upgrade classic group %s to consumer group because the online "
                     "upgrade is disabled.", group.group_id)
            return False
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info("Cannot upgrade classic group %s to consumer group because the group "
                     "does not use the consumer embedded protocol.", group.group_id)
            return False
        if len(group.members) > self.config.max_size:
            log.info("Cannot upgrade classic group %s to consumer group because the group "
                     "size exceeds the consumer group maximum size.", group.group_id)
            return False
        return True

    def _upgrade_records(self, group: Group) -> list[Record]:
        """The classic group as consumer group records (Kafka's ConsumerGroup.fromClassicGroup):
        each member keeps its subscription and assignment in an epoch equal to the classic
        generation, which is the group epoch and the assignment epoch too."""
        group_id, generation = group.group_id, group.generation_id
        ids = {name: topic_id for name, (topic_id, _) in self.topics().items()}
        records: list[Record] = [(group_key(group_id), None)]
        members = []
        for classic in group.members.values():
            try:
                subscription = decode_consumer_protocol(
                    m.ConsumerProtocolSubscription, classic.metadata(group.protocol_name))
                assignment = decode_consumer_protocol(
                    m.ConsumerProtocolAssignment, classic.assignment) \
                    if classic.assignment else None
            except DecodeError as exc:
                raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND,
                               f"Cannot upgrade the classic group {group_id} to consumer group "
                               "because the embedded consumer protocol is malformed.") from exc
            assigned = freeze({ids[t.topic]: t.partitions
                               for t in (assignment.assigned_partitions if assignment else ())
                               if t.topic in ids})
            member = ConsumerMember(
                classic.member_id, instance_id=classic.group_instance_id,
                rack_id=getattr(subscription, "rack_id", None) or None,
                client_id=classic.client_id, client_host=classic.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=classic.rebalance_timeout_ms, member_epoch=generation,
                previous_member_epoch=generation, state=MemberState.STABLE, assigned=assigned,
                classic=ClassicMetadata(classic.session_timeout_ms, tuple(classic.protocols)))
            members.append(member)
            records.append(member_metadata_record(group_id, member))
        records.append(subscription_metadata_record(group_id,
                                                    self._subscription_metadata(members)))
        records.append(group_epoch_record(group_id, generation))
        for member in members:
            records.append(target_member_record(group_id, member.member_id, member.assigned))
        records.append(target_epoch_record(group_id, generation))
        for member in members:
            records.append(current_assignment_record(group_id, member))
        return records

    async def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        group, cg, records = self._consumer_group(req, create=req.member_epoch == 0)
        member, is_new = self._member(cg, req)
        if not is_new:
            _check_epoch(member, req.member_epoch, req.owned)
        final, assignment_changed = await self._update(group, cg, req, member, is_new, records)
        send_assignment = assignment_changed or req.owned is not None or req.member_epoch == 0
        return HeartbeatResult(
            ErrorCode.NONE, member_id=final.member_id, member_epoch=final.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(req.group_id),
            assignment=final.assigned if send_assignment else None)

    async def _update(self, group: Group, cg: ConsumerGroup, req: HeartbeatRequest,
                      member: ConsumerMember, is_new: bool,
                      records: list[Record]) -> tuple[ConsumerMember, bool]:
        """Steps (2) to (4) of a heartbeat or of a classic member's JoinGroup: the member's
        subscription, the group epoch, the target assignment, the member's reconciliation;
        written, and returned as the member is now (and whether its assignment changed)."""
        if is_new and len(cg.members) >= self.config.max_size:
            raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED,
                           f"The consumer group has reached its maximum capacity of "
                           f"{self.config.max_size} members.")
        updated = _updated(member, req)
        group_id = req.group_id
        members = {**cg.members, updated.member_id: updated}
        target = dict(cg.target)
        replaced = cg.static_member(req.instance_id) if is_new else None
        if replaced is not None:
            # A static member comes back under a new member id: it takes over the epoch and
            # the partitions its instance id left with, without a rebalance.
            members.pop(replaced.member_id)
            records.extend(member_tombstones(group_id, replaced.member_id))
            updated = dataclasses.replace(
                updated, member_epoch=replaced.previous_member_epoch,
                previous_member_epoch=replaced.previous_member_epoch, state=replaced.state,
                assigned=replaced.assigned, pending_revocation=replaced.pending_revocation)
            members[updated.member_id] = updated
            target[updated.member_id] = target.pop(replaced.member_id, {})
            records.append(member_metadata_record(group_id, updated))
            records.append(target_member_record(group_id, updated.member_id,
                                                target[updated.member_id]))
            bump = not updated.same_subscription(replaced)
        else:
            bump = is_new or not updated.same_subscription(member)
            if is_new or updated != member:
                records.append(member_metadata_record(group_id, updated))
        metadata = self._subscription_metadata(members.values())
        if metadata != cg.subscription_metadata:
            records.append(subscription_metadata_record(group_id, metadata))
            bump = True
        group_epoch = cg.group_epoch + 1 if bump else cg.group_epoch
        if bump:
            records.append(group_epoch_record(group_id, group_epoch))
        assignment_epoch = cg.assignment_epoch
        if group_epoch > assignment_epoch:
            target = self._assign(cg, members, metadata, target)
            for member_id, assignment in target.items():
                if cg.target.get(member_id) != assignment or member_id not in cg.target:
                    records.append(target_member_record(group_id, member_id, assignment))
            assignment_epoch = group_epoch
            records.append(target_epoch_record(group_id, assignment_epoch))
        reconciled = reconcile(updated, assignment_epoch, target.get(updated.member_id, {}),
                               cg.partition_epoch, req.owned)
        assignment_changed = (is_new or reconciled.assigned != member.assigned
                              or reconciled.member_epoch != member.member_epoch
                              or reconciled.state != member.state
                              or reconciled.pending_revocation != member.pending_revocation)
        if assignment_changed:
            records.append(current_assignment_record(group_id, reconciled))
        if records:
            await self._write(group, records)
        final = cg.members.get(reconciled.member_id, reconciled)
        self._schedule_session(group, final.member_id)
        self._schedule_rebalance_timeout(group, final, member)
        return final, assignment_changed

    def _member(self, cg: ConsumerGroup, req: HeartbeatRequest) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from, and whether it joins now."""
        member_id = req.member_id or str(uuid.uuid4())
        if req.instance_id is not None:
            existing = cg.static_member(req.instance_id)
            if req.member_epoch == 0:
                if existing is not None and existing.member_id == member_id:
                    return existing, False  # a retried join
                if existing is not None and \
                        existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise _Refused(ErrorCode.UNRELEASED_INSTANCE_ID,
                                   f"Static member {existing.member_id} with instance id "
                                   f"{req.instance_id} is not released yet.")
                return ConsumerMember(member_id), True
            if existing is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Instance id {req.instance_id} is unknown.")
            if existing.member_id != req.member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID,
                               f"Static member {req.member_id} with instance id "
                               f"{req.instance_id} is fenced by {existing.member_id}.")
            return existing, False
        member = cg.members.get(member_id)
        if member is None:
            if req.member_epoch != 0:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Member {req.member_id} is not a member of group "
                               f"{req.group_id}.")
            return ConsumerMember(member_id), True
        return member, False

    def _subscription_metadata(self, members: Iterable[ConsumerMember],
                               ) -> dict[str, tuple[uuid.UUID, int]]:
        """The existing topics the members subscribe to, by name or regex."""
        topics = self.topics()
        names: set[str] = set()
        patterns: set[str] = set()
        for member in members:
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                patterns.add(member.subscribed_topic_regex)
        for pattern in patterns:
            compiled = compile_re2j(pattern)
            names.update(name for name in topics if compiled.fullmatch(name))
        return {name: topics[name] for name in sorted(names) if name in topics}

    def _assign(self, cg: ConsumerGroup, members: Mapping[str, ConsumerMember],
                metadata: Mapping[str, tuple[uuid.UUID, int]],
                current: Mapping[str, Assignment]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        """The new target assignment (Kafka's TargetAssignmentBuilder with the group's
        preferred server assignor)."""
        subscriptions = {}
        for member_id, member in members.items():
            topic_names = set(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                compiled = compile_re2j(member.subscribed_topic_regex)
                topic_names.update(name for name in metadata if compiled.fullmatch(name))
            subscriptions[member_id] = frozenset(metadata[name][0] for name in topic_names
                                                 if name in metadata)
        votes = ConsumerGroup(cg.group_id, members=dict(members))
        assignor = ASSIGNORS[votes.preferred_assignor(self.default_assignor)]
        spec = AssignmentSpec(subscriptions=subscriptions,
                              partitions={topic_id: n for topic_id, n in metadata.values()},
                              current=current)
        result = assignor(spec)
        return {member_id: result.get(member_id, {}) for member_id in members}

    # ------------------------------------------------------------------------------ leaving

    async def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group, cg, _ = self._consumer_group(req, create=False)
        if req.instance_id is not None:
            member = cg.static_member(req.instance_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID,
                               f"Static member {req.member_id} with instance id "
                               f"{req.instance_id} is fenced by {member.member_id}.")
        else:
            member = cg.members.get(req.member_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                               f"Member {req.member_id} is not a member of group "
                               f"{req.group_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaves for now: it keeps its partitions until its session
            # expires or it comes back with its instance id.
            await self._write(group, [current_assignment_record(
                req.group_id, member.with_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH))])
            self._schedule_session(group, member.member_id)
            self._cancel(cg.rebalance_timers, member.member_id)
        else:
            await self._remove_member(group, member.member_id)
        return HeartbeatResult(ErrorCode.NONE, member_id=member.member_id,
                               member_epoch=req.member_epoch)

    async def _remove_member(self, group: Group, member_id: str) -> None:
        """Fences the member out: its records are tombstoned and the group epoch bumped (the
        target is recomputed at the next heartbeat). When only classic members remain, the
        group goes back to a classic group (online downgrade)."""
        cg = group.consumer
        assert cg is not None
        if self._can_downgrade(cg, member_id):
            classic = self._downgraded(group, member_id)
            if classic is not None:
                await self._write_downgrade(group, classic, member_id)
                return
        records = member_tombstones(group.group_id, member_id)
        remaining = [m for mid, m in cg.members.items() if mid != member_id]
        metadata = self._subscription_metadata(remaining)
        if metadata != cg.subscription_metadata:
            records.append(subscription_metadata_record(group.group_id, metadata))
        records.append(group_epoch_record(group.group_id, cg.group_epoch + 1))
        self._cancel(cg.session_timers, member_id)
        self._cancel(cg.rebalance_timers, member_id)
        await self._write(group, records)

    # ------------------------------------------------------------------------------ classic members

    def _current_consumer_group(self, group_id: str) -> tuple[Group, ConsumerGroup]:
        group = self.manager.get_group(group_id)
        if group is None or group.consumer is None:
            # Converted meanwhile: the classic member joins again and finds the classic group.
            raise _Refused(ErrorCode.REBALANCE_IN_PROGRESS)
        return group, group.consumer

    async def classic_join(self, req: ClassicJoin) -> ClassicJoinResult:
        """A classic member's JoinGroup in a consumer group (Kafka's
        classicGroupJoinToConsumerGroup): it becomes a member like any other, its subscription
        and owned partitions read from its JoinGroup metadata; the answer is at once, in its
        member epoch, and names no leader (the coordinator assigns: SyncGroup returns the
        member's partitions)."""
        lock = self._locks.setdefault(req.group_id, asyncio.Lock())
        return await asyncio.shield(self._classic_join_locked(lock, req))

    async def _classic_join_locked(self, lock: asyncio.Lock, req: ClassicJoin
                                   ) -> ClassicJoinResult:
        async with lock:
            try:
                return await self._classic_join(req)
            except _Refused as refused:
                return ClassicJoinResult(refused.error, req.member_id)

    async def _classic_join(self, req: ClassicJoin) -> ClassicJoinResult:
        group, cg = self._current_consumer_group(req.group_id)
        is_unknown = not req.member_id
        member_id = str(uuid.uuid4()) if is_unknown else req.member_id
        if member_id not in cg.members and len(cg.members) >= self.config.max_size:
            raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if not _supports_classic_protocols(cg, req.protocol_type, req.protocols):
            raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if is_unknown and req.require_known_member_id and req.instance_id is None:
            return ClassicJoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        existing = cg.members.get(member_id)
        if existing is not None and not existing.uses_classic:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        holder = cg.static_member(req.instance_id)
        if holder is not None and holder.member_id != member_id and not is_unknown:
            raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
        try:
            subscription = decode_consumer_protocol(m.ConsumerProtocolSubscription,
                                                    req.protocols[0][1])
        except DecodeError:
            raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL) from None
        ids = {name: topic_id for name, (topic_id, _) in self.topics().items()}
        owned = freeze({ids[t.topic]: t.partitions
                        for t in (getattr(subscription, "owned_partitions", None) or ())
                        if t.topic in ids})
        heartbeat = HeartbeatRequest(
            group_id=req.group_id, member_id=member_id,
            member_epoch=existing.member_epoch if existing is not None else 0,
            instance_id=req.instance_id,
            rack_id=getattr(subscription, "rack_id", None) or None,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=list(subscription.topics), owned=owned,
            client_id=req.client_id, client_host=req.client_host,
            classic=ClassicMetadata(req.session_timeout_ms, tuple(req.protocols)))
        member = existing if existing is not None else ConsumerMember(member_id)
        final, _ = await self._update(group, cg, heartbeat, member, existing is None, [])
        return ClassicJoinResult(ErrorCode.NONE, final.member_id, final.member_epoch,
                                 req.protocols[0][0])

    def _classic_member(self, cg: ConsumerGroup, member_id: str,
                        instance_id: str | None) -> ConsumerMember:
        """Kafka's checks of a classic member's SyncGroup, Heartbeat and LeaveGroup."""
        if instance_id is not None:
            member = cg.static_member(instance_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
            if member_id and member.member_id != member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
        else:
            member = cg.members.get(member_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        if not member.uses_classic:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        return member

    def classic_sync(self, group: Group, member_id: str, instance_id: str | None,
                     generation: int, protocol_type: str | None,
                     protocol_name: str | None) -> tuple[ErrorCode, str | None, bytes]:
        """A classic member's SyncGroup in a consumer group: (error, protocol name, its
        current assignment). It must be in its member epoch; a newer group epoch means
        rejoin first, unless it is revoking (Kafka's classicGroupSyncToConsumerGroup)."""
        cg = group.consumer
        assert cg is not None
        try:
            member = self._classic_member(cg, member_id, instance_id)
        except _Refused as refused:
            return refused.error, None, b""
        assert member.classic is not None
        if generation != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION, None, b""
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != member.classic.protocol_name):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, None, b""
        if cg.group_epoch > member.member_epoch and \
                member.state != MemberState.UNREVOKED_PARTITIONS:
            return ErrorCode.REBALANCE_IN_PROGRESS, None, b""
        self._schedule_session(group, member.member_id)
        names = {topic_id: name for name, (topic_id, _) in self.topics().items()}
        return ErrorCode.NONE, member.classic.protocol_name, \
            classic_assignment(member.assigned, names)

    def classic_heartbeat(self, group: Group, member_id: str, instance_id: str | None,
                          generation: int) -> ErrorCode:
        """A classic member's Heartbeat in a consumer group (Kafka's
        classicGroupHeartbeatToConsumerGroup): REBALANCE_IN_PROGRESS tells it to rejoin when
        the group epoch moved on, when it must revoke partitions, or when partitions it
        waits for were released."""
        cg = group.consumer
        assert cg is not None
        try:
            member = self._classic_member(cg, member_id, instance_id)
        except _Refused as refused:
            return refused.error
        if generation != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_session(group, member.member_id)
        if member.member_epoch < cg.group_epoch or \
                member.state == MemberState.UNREVOKED_PARTITIONS or \
                (member.state == MemberState.UNRELEASED_PARTITIONS
                 and not _waits_on_unreleased(cg, member)):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def classic_leave(self, group_id: str,
                            members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup in a consumer group: each named member (classic ones; an admin names a
        static member by its instance id alone) is fenced out, which may downgrade the
        group."""
        lock = self._locks.setdefault(group_id, asyncio.Lock())
        return await asyncio.shield(self._classic_leave_locked(lock, group_id, members))

    async def _classic_leave_locked(self, lock: asyncio.Lock, group_id: str,
                                    members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        async with lock:
            errors = []
            for member_id, instance_id in members:
                try:
                    group, cg = self._current_consumer_group(group_id)
                    if not member_id and instance_id is not None:
                        member = cg.static_member(instance_id)
                        if member is None:
                            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
                    else:
                        member = self._classic_member(cg, member_id, instance_id)
                    await self._remove_member(group, member.member_id)
                    errors.append(ErrorCode.NONE)
                except _Refused as refused:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID
                                  if refused.error == ErrorCode.REBALANCE_IN_PROGRESS
                                  else refused.error)
            return errors

    # ------------------------------------------------------------------------------ downgrade

    def _can_downgrade(self, cg: ConsumerGroup, leaving_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember."""
        if not cg.all_classic_except(leaving_id) or len(cg.members) <= 1:
            return False
        if not self.config.downgrade_enabled:
            log.info("Cannot downgrade consumer group %s to classic group because the online "
                     "downgrade is disabled.", cg.group_id)
            return False
        if len(cg.members) - 1 > self.config.classic_max_size:
            log.info("Cannot downgrade consumer group %s to classic group because its group "
                     "size is greater than classic group max size.", cg.group_id)
            return False
        return True

    def _downgraded(self, group: Group, leaving_id: str) -> Group | None:
        """The classic group the remaining (classic) members form (Kafka's
        ClassicGroup.fromConsumerGroup): Stable in a generation equal to the group epoch, each
        member with its current assignment; it rebalances once written."""
        cg = group.consumer
        assert cg is not None
        names = {topic_id: name for name, (topic_id, _) in self.topics().items()}
        classic = Group(group.group_id, state=GroupState.STABLE,
                        state_timestamp_ms=self.clock.time_ms(), generation_id=cg.group_epoch,
                        offsets=group.offsets,
                        pending_offset_commits=group.pending_offset_commits,
                        pending_txn_offsets=group.pending_txn_offsets,
                        txn_offsets_in_flight=group.txn_offsets_in_flight)
        for member in cg.members.values():
            if member.member_id == leaving_id or member.classic is None:
                continue
            classic.add(Member(
                member_id=member.member_id, group_instance_id=member.instance_id,
                client_id=member.client_id, client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                session_timeout_ms=member.classic.session_timeout_ms,
                protocol_type=CONSUMER_PROTOCOL_TYPE, protocols=list(member.classic.protocols),
                assignment=classic_assignment(member.assigned, names)))
        try:
            classic.protocol_name = classic.select_protocol()
        except RuntimeError:
            log.info("Cannot downgrade consumer group %s to classic group: its members share "
                     "no protocol.", group.group_id)
            return None
        return classic

    async def _write_downgrade(self, group: Group, classic: Group, leaving_id: str) -> None:
        cg = group.consumer
        assert cg is not None
        records: list[Record] = []
        for member_id in cg.members:
            records.extend(member_tombstones(group.group_id, member_id))
        records.extend(group_tombstones(group.group_id))
        records.append(group_record(classic, {mid: member.assignment
                                              for mid, member in classic.members.items()}))
        manager = self.manager

        def apply() -> None:
            if manager.get_group(group.group_id) is not group:
                return
            self.on_unloaded(group)
            manager.remove_group(group)
            manager.add_group(classic)
            log.info("group %s: downgraded from consumer to classic group (member %s left)",
                     group.group_id, leaving_id)
            self.on_downgraded(classic)

        try:
            await manager.runtime.write(manager.partition_for(group.group_id), records, apply)
        except KafkaError as exc:
            raise _Refused(exc.code) from None

    # ------------------------------------------------------------------------------ timers

    @staticmethod
    def _cancel(timers: dict[str, Any], member_id: str) -> None:
        timer = timers.pop(member_id, None)
        if timer is not None:
            timer.cancel()

    def _schedule_session(self, group: Group, member_id: str) -> None:
        cg = group.consumer
        if cg is None or member_id not in cg.members:
            return
        self._cancel(cg.session_timers, member_id)
        classic = cg.members[member_id].classic
        timeout_ms = self.session_timeout_ms(group.group_id) if classic is None \
            else classic.session_timeout_ms
        cg.session_timers[member_id] = self.clock.call_later(
            timeout_ms / 1000, self._expire, group, member_id, None)

    def _schedule_rebalance_timeout(self, group: Group, member: ConsumerMember,
                                    before: ConsumerMember) -> None:
        cg = group.consumer
        if cg is None:
            return
        if member.state != MemberState.UNREVOKED_PARTITIONS:
            self._cancel(cg.rebalance_timers, member.member_id)
            return
        if before.state == MemberState.UNREVOKED_PARTITIONS and \
                before.member_epoch == member.member_epoch and \
                member.member_id in cg.rebalance_timers:
            return  # still the same revocation: its deadline stands
        self._cancel(cg.rebalance_timers, member.member_id)
        cg.rebalance_timers[member.member_id] = self.clock.call_later(
            max(member.rebalance_timeout_ms, 0) / 1000, self._expire, group, member.member_id,
            member.member_epoch)

    def _expire(self, group: Group, member_id: str, revoking_epoch: int | None) -> None:
        """A session expired (`revoking_epoch` None) or a revocation took longer than the
        rebalance timeout: the member is fenced."""
        task = asyncio.get_running_loop().create_task(
            self._fence(group, member_id, revoking_epoch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fence(self, group: Group, member_id: str, revoking_epoch: int | None) -> None:
        lock = self._locks.setdefault(group.group_id, asyncio.Lock())
        async with lock:
            cg = group.consumer
            if cg is None or not self.manager.is_current(group):
                return
            member = cg.members.get(member_id)
            if member is None:
                return
            if revoking_epoch is not None and (
                    member.state != MemberState.UNREVOKED_PARTITIONS
                    or member.member_epoch != revoking_epoch):
                return
            log.info("group %s: member %s fenced (%s)", group.group_id, member_id,
                     "session expired" if revoking_epoch is None else "rebalance timeout")
            try:
                await self._remove_member(group, member_id)
            except _Refused as refused:
                log.warning("group %s: could not fence member %s: %s", group.group_id,
                            member_id, refused.error.name)

    def on_loaded(self, groups: Iterable[Group]) -> None:
        """Members of loaded groups must heartbeat within a session."""
        for group in groups:
            if group.consumer is not None:
                for member_id in group.consumer.members:
                    self._schedule_session(group, member_id)

    def on_unloaded(self, group: Group) -> None:
        cg = group.consumer
        if cg is None:
            return
        for timers in (cg.session_timers, cg.rebalance_timers):
            for timer in timers.values():
                timer.cancel()
            timers.clear()

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------------------ writes

    async def _write(self, group: Group, records: list[Record]) -> None:
        """Writes `records`; once committed they are replayed into the group (installing a
        new group). Raises _Refused with the coordinator error when the write fails."""
        manager = self.manager

        def apply() -> None:
            current = manager.get_group(group.group_id)
            if current is not group:
                if current is not None and current.consumer is None:
                    group.offsets = current.offsets  # a converted classic group
                    manager.remove_group(current)
                    if current.members:
                        self.on_upgraded(current)  # online upgrade
                manager.add_group(group)
            assert group.consumer is not None
            replay_records(group.consumer, records)
            sync_classic_state(group, self.clock.time_ms())
            for member_id in group.consumer.members:
                if member_id not in group.consumer.session_timers:
                    self._schedule_session(group, member_id)  # members of an upgrade

        try:
            await manager.runtime.write(manager.partition_for(group.group_id), records, apply)
        except KafkaError as exc:
            raise _Refused(exc.code) from None

    # ------------------------------------------------------------------------------ offsets

    def check_offset_commit(self, group: Group, member_id: str, member_epoch: int,
                            api_version: int, transactional: bool = False) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit: the member exists and commits in its
        current epoch (STALE_MEMBER_EPOCH otherwise); an admin commit (epoch < 0, no member)
        only to an empty group."""
        cg = group.consumer
        assert cg is not None
        if member_epoch < 0 and not member_id and cg.is_empty:
            return ErrorCode.NONE
        if member_epoch < 0 and not member_id and transactional:
            return ErrorCode.NONE
        member = cg.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.uses_classic:
            # A classic member commits with its generation, which is its member epoch, at
            # any version (Kafka's validateMemberEpoch for the classic protocol).
            return ErrorCode.NONE if member_epoch == member.member_epoch \
                else ErrorCode.ILLEGAL_GENERATION
        if not transactional and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def check_offset_fetch(self, group: Group, member_id: str | None,
                           member_epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetFetch: a request naming no member (an admin
        client, OffsetFetch before v9) is served; a member must exist and be in its epoch.
        An empty member id with a negative epoch counts as none (as a null one)."""
        cg = group.consumer
        assert cg is not None
        if member_epoch < 0 and not member_id:
            return ErrorCode.NONE
        member = cg.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # ------------------------------------------------------------------------------ describe

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        out = []
        for group_id in group_ids:
            error = self._coordinator_error(group_id)
            if error != ErrorCode.NONE:
                out.append(DescribedGroup(group_id, error))
                continue
            group = self.manager.get_group(group_id)
            if group is None or group.consumer is None or group.state == GroupState.DEAD:
                message = f"Group {group_id} not found." if group is None or \
                    group.state == GroupState.DEAD else \
                    f"Group {group_id} is not a consumer group."
                out.append(DescribedGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message))
                continue
            cg = group.consumer
            out.append(DescribedGroup(
                group_id, ErrorCode.NONE, state=cg.state().value, group_epoch=cg.group_epoch,
                assignment_epoch=cg.assignment_epoch,
                assignor=cg.preferred_assignor(self.default_assignor),
                members=[DescribedMember(member, cg.target_of(member.member_id))
                         for member in cg.members.values()]))
        return out


def classic_assignment(assigned: Assignment, names: Mapping[uuid.UUID, str]) -> bytes:
    """A member's partitions as a classic SyncGroup assignment (ConsumerProtocolAssignment;
    version 0, which every client reads: later versions add nothing to it)."""
    A = m.ConsumerProtocolAssignment
    return m.encode_versioned(A(assigned_partitions=[
        A.TopicPartition(topic=names[topic_id], partitions=sorted(parts))
        for topic_id, parts in sorted(assigned.items(), key=lambda item: names.get(item[0], ""))
        if topic_id in names]), 0)


def _supports_classic_protocols(cg: ConsumerGroup, protocol_type: str,
                                protocols: list[tuple[str, bytes]]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and a
    protocol every classic member has too."""
    names = {name for name, _ in protocols}
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    return all(names & {name for name, _ in member.classic.protocols}
               for member in cg.members.values() if member.classic is not None)


def _waits_on_unreleased(cg: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a partition of its target that it does not have yet is still held by another
    member (Kafka's waitingOnUnreleasedPartition)."""
    for topic_id, parts in cg.target_of(member.member_id).items():
        for partition in parts - member.assigned.get(topic_id, frozenset()):
            if cg.partition_epoch(topic_id, partition) != NO_PARTITION_EPOCH:
                return True
    return False


def _is_empty_classic(group: Group) -> bool:
    return group.consumer is None and not group.members and group.state in (
        GroupState.EMPTY, GroupState.DEAD)


def _check_epoch(member: ConsumerMember, received: int, owned: Assignment | None) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: a member ahead of its epoch, or behind it other
    than by one epoch with a subset of its partitions (a lost response), is fenced."""
    if received > member.member_epoch:
        raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                       f"The consumer group member has a greater member epoch ({received}) "
                       f"than the one known by the group coordinator ({member.member_epoch}). "
                       "The member must abandon all its partitions and rejoin.")
    if received < member.member_epoch and (
            received != member.previous_member_epoch or not _subset(owned, member.assigned)):
            raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                           f"The consumer group member has a smaller member epoch ({received}) "
                           f"than the one known by the group coordinator "
                           f"({member.member_epoch}). The member must abandon all its "
                           "partitions and rejoin.")


def _subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(parts <= assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items())


def _updated(member: ConsumerMember, req: HeartbeatRequest) -> ConsumerMember:
    """The member with what the heartbeat changes (null fields change nothing)."""
    changes: dict[str, Any] = {"client_id": req.client_id, "client_host": req.client_host}
    if req.instance_id is not None:
        changes["instance_id"] = req.instance_id
    if req.rack_id is not None:
        changes["rack_id"] = req.rack_id
    if req.rebalance_timeout_ms != -1:
        changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
    if req.subscribed_topic_names is not None:
        changes["subscribed_topic_names"] = tuple(sorted(set(req.subscribed_topic_names)))
    if req.subscribed_topic_regex is not None:
        changes["subscribed_topic_regex"] = req.subscribed_topic_regex or None
    if req.server_assignor is not None:
        changes["server_assignor"] = req.server_assignor or None
    if req.classic is not None:
        changes["classic"] = req.classic
    return dataclasses.replace(member, **changes)


def sync_classic_state(group: Group, now_ms: int) -> None:
    """The classic state the rest of the coordinator reads (offset expiration, deletion):
    Empty without members, Stable with."""
    cg = group.consumer
    if cg is None or group.state == GroupState.DEAD:
        return
    state = GroupState.EMPTY if cg.is_empty else GroupState.STABLE
    if group.state != state:
        group.state = state
        group.state_timestamp_ms = now_ms


def consumer_group_tombstones(group: Group) -> list[Record]:
    """What deleting an (empty) consumer group writes besides its offsets' tombstones."""
    return group_tombstones(group.group_id) if group.consumer is not None else []


__all__ = [
    "ClassicJoin", "ClassicJoinResult", "ConsumerGroupConfig", "ConsumerGroupCoordinator", "DescribedGroup", "DescribedMember",
    "HeartbeatRequest", "HeartbeatResult", "consumer_group_tombstones", "freeze",
    "sync_classic_state",
]
