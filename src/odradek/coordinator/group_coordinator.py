"""The classic group coordinator: membership, rebalances and committed offsets.

Kafka's GroupCoordinator (the classic protocol, as 3.8 runs it by default). A group moves
Empty -> PreparingRebalance -> CompletingRebalance -> Stable and back; JoinGroup and SyncGroup
answers wait (as futures) until the rebalance step they belong to completes. Every deadline is
a timer of the injected clock (`odradek.clock`; tests advance a manual one): a member's session
(reset by heartbeats, commits and joins), the rebalance timeout of a join phase, the initial
rebalance delay of a new group, the wait for SyncGroups after a join phase, the pending member
ids of MEMBER_ID_REQUIRED, and the periodic offset expiration. Writes go through the coordinator
runtime, which applies them once committed: OffsetCommit answers (and its offsets become
visible) after the commit, and the leader's assignment takes effect when the group's record is
committed, if the group is still in that generation. Transactional offset commits
(TxnOffsetCommit) stay pending under their producer id until the transaction coordinator's
marker is committed in the group's offsets partition (`on_transaction_completed`), and are
visible to OffsetFetch only if the transaction commits. Everything runs on the broker's event
loop; there are no locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock, TimerHandle
from odradek.coordinator.consumer_group_coordinator import (
    ClassicJoin,
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    TopicsView,
    consumer_group_tombstones,
)
from odradek.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    UNKNOWN_MEMBER_ID,
    Group,
    GroupState,
    Member,
    OffsetAndMetadata,
    TopicPartition,
    new_member_id,
)
from odradek.coordinator.metadata_manager import GroupMetadataManager, is_empty
from odradek.coordinator.records import LoadedPartition
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.coordinator.group")

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the group coordinator follows (Kafka's names in the comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = INT32_MAX  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    max_metadata_size: int = 4096  # offset.metadata.max.bytes
    #: KIP-848 consumer groups (group.consumer.*)
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)

    @classmethod
    def from_properties(cls, get: Callable[[str], Any]) -> GroupConfig:
        return cls(
            min_session_timeout_ms=int(get("group.min.session.timeout.ms")),
            max_session_timeout_ms=int(get("group.max.session.timeout.ms")),
            initial_rebalance_delay_ms=int(get("group.initial.rebalance.delay.ms")),
            max_size=int(get("group.max.size")),
            offsets_retention_ms=int(get("offsets.retention.minutes")) * 60_000,
            offsets_retention_check_interval_ms=int(get("offsets.retention.check.interval.ms")),
            max_metadata_size=int(get("offset.metadata.max.bytes")),
            consumer=ConsumerGroupConfig.from_properties(get),
        )


# ------------------------------------------------------------------------------------------
# requests and results (the handlers translate wire versions to and from these)


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = False  # JoinGroup v9+
    reason: str | None = None


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    #: for the leader: (member id, group instance id, metadata) of every member
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class GroupSummary:
    """What DescribeGroups says about a group."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


@dataclass
class GroupOverview:
    """What ListGroups says about a group."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


LeavingMember = tuple[str, str | None]  # (member id or "", group instance id)

#: verify(offsets partition, transactional id, producer id, producer epoch) -> NONE when the
#: producer's ongoing transaction includes that partition (AddOffsetsToTxn added it), else the
#: error (Kafka 4.0 asks the transaction coordinator before a TxnOffsetCommit's write,
#: transaction.partition.verification.enable)
TransactionVerifier = Callable[[int, str, int, int], Awaitable[ErrorCode]]


class GroupCoordinator:
    def __init__(self, config: GroupConfig, manager: GroupMetadataManager,
                 clock: Clock = SYSTEM_CLOCK, topics: TopicsView = dict) -> None:
        self.config = config
        self.manager = manager
        self.clock = clock
        self._active = False
        #: KIP-848 consumer groups (ConsumerGroupHeartbeat), in the same groups and partitions
        self.consumer_groups = ConsumerGroupCoordinator(
            config.consumer, manager, topics, clock=clock, is_active=lambda: self._active)
        # Online upgrade: the classic group's waiting members rejoin (into the consumer group).
        self.consumer_groups.on_upgraded = lambda group: self._drop_group(
            group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.consumer_groups.on_downgraded = self._downgraded
        self._expiration_timer: TimerHandle | None = None
        #: background work (partition loads, periodic expirations), cancelled on close
        self._tasks: set[asyncio.Task[Any]] = set()
        #: set by the transaction coordinator's wiring; None: TxnOffsetCommit is not verified
        self.transaction_verifier: TransactionVerifier | None = None

    def time_ms(self) -> int:
        return self.clock.time_ms()

    def _spawn(self, work: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._active = True
        self._schedule_offset_expiration()

    async def close(self) -> None:
        self._active = False
        if self._expiration_timer is not None:
            self._expiration_timer.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for partition in [*self.manager.owned, *self.manager.loading]:
            self.resign(partition)
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.consumer_groups.close()
        await self.manager.runtime.close()

    def elect(self, partition: int, log_: Any) -> asyncio.Future[Any]:
        """This broker now leads offsets partition `partition` (whose storage log is `log_`):
        its groups load in the background; an empty partition is ready at once. Electing a
        partition led already (a new leader epoch, a new log) starts it over."""
        if partition in self.manager.owned or partition in self.manager.loading:
            self.resign(partition)
        generation = self.manager.start_loading(partition)
        if is_empty(log_):
            self.manager.install(partition, generation, LoadedPartition())
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self._spawn(self._load(partition, log_, generation))

    async def _load(self, partition: int, log_: Any, generation: int) -> None:
        try:
            groups = await self.manager.load_partition(partition, log_, generation)
        except Exception:
            log.exception("loading offsets partition %d failed", partition)
            return
        for group in groups:
            # Members loaded with the group must heartbeat within their session timeout.
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        self.consumer_groups.on_loaded(groups)

    def resign(self, partition: int) -> None:
        """This broker no longer leads offsets partition `partition`."""
        for group in self.manager.unload_partition(partition):
            self._drop_group(group, ErrorCode.NOT_COORDINATOR)

    def _drop_group(self, group: Group, error: ErrorCode) -> None:
        self.consumer_groups.on_unloaded(group)
        for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            if timer is not None:
                timer.cancel()
        group.pending_members.clear()
        for member in group.members.values():
            self._cancel_heartbeat(member)
            self._answer_join(member, JoinResult(error, member.member_id))
            self._answer_sync(member, SyncResult(error))

    # ------------------------------------------------------------------------------ checks

    def _check(self, group_id: str | None, *, allow_empty_id: bool = False) -> ErrorCode:
        """Kafka's validateGroupStatus."""
        if group_id is None or (not group_id and not allow_empty_id):
            return ErrorCode.INVALID_GROUP_ID
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return self.manager.coordinator_error(group_id)

    @staticmethod
    def _check_member(group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's validateCurrentMember: the instance id (if any) maps to the member id, and
        the member id is in the group."""
        if group_instance_id is not None:
            known = group.static_member_id(group_instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.NONE
        return ErrorCode.NONE if group.has(member_id) else ErrorCode.UNKNOWN_MEMBER_ID

    # ------------------------------------------------------------------------------ JoinGroup

    async def join_group(self, request: JoinRequest) -> JoinResult:
        error = self._check(request.group_id)
        if error != ErrorCode.NONE:
            return JoinResult(error, request.member_id)
        config = self.config
        if not config.min_session_timeout_ms <= request.session_timeout_ms \
                <= config.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id)
        is_unknown = request.member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_group(request.group_id)
        if group is None:
            if not is_unknown:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id)
            group = self.manager.add_group(Group(request.group_id,
                                                 state_timestamp_ms=self.time_ms()))
        if group.consumer is not None:
            if not group.consumer.is_empty:
                return await self._join_consumer_group(request)
            group = self._convert_to_classic(group)
        if not self._accepts_joining_member(group, request.member_id):
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)
        if is_unknown:
            outcome = self._join_new_member(group, request)
        else:
            outcome = self._join_current_member(group, request)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        if isinstance(outcome, JoinResult):
            return outcome
        # Shielded: a closed connection must not cancel the group's bookkeeping.
        return await asyncio.shield(outcome)

    async def _join_consumer_group(self, request: JoinRequest) -> JoinResult:
        """A classic member joins a (non-empty) consumer group: a mixed group."""
        result = await self.consumer_groups.classic_join(ClassicJoin(
            group_id=request.group_id, member_id=request.member_id,
            instance_id=request.group_instance_id, client_id=request.client_id,
            client_host=request.client_host, session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type, protocols=list(request.protocols),
            require_known_member_id=request.require_known_member_id))
        if result.error != ErrorCode.NONE:
            return JoinResult(result.error, result.member_id)
        return JoinResult(ErrorCode.NONE, result.member_id, generation_id=result.generation_id,
                          protocol_type=CONSUMER_PROTOCOL_TYPE,
                          protocol_name=result.protocol_name, leader_id="", members=[])

    def _downgraded(self, group: Group) -> None:
        """A consumer group became this classic group (its last consumer-protocol member
        left): its members' sessions run, and it rebalances so they rejoin classically."""
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        self._prepare_rebalance(group, f"Downgrade group {group.group_id} from consumer to "
                                       "classic.")

    def _convert_to_classic(self, group: Group) -> Group:
        """An empty consumer group becomes a classic group (its records tombstoned, its
        offsets kept), as Kafka replaces an empty group of the other type on a join."""
        classic = Group(group.group_id, state_timestamp_ms=self.time_ms(),
                        offsets=group.offsets,
                        pending_offset_commits=group.pending_offset_commits,
                        pending_txn_offsets=group.pending_txn_offsets,
                        txn_offsets_in_flight=group.txn_offsets_in_flight)
        self.manager.remove_group(group)
        self.manager.add_group(classic)
        self.manager.write_tombstones(group.group_id, consumer_group_tombstones(group))
        return classic

    def _accepts_joining_member(self, group: Group, member_id: str) -> bool:
        """Kafka's acceptJoiningMember (group.max.size)."""
        max_size = self.config.max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        member = group.members.get(member_id)
        if group.state == GroupState.PREPARING_REBALANCE:
            return (member is not None and member.awaiting_join) or \
                group.num_awaiting_join < max_size
        return member is not None or len(group.members) < max_size

    def _join_new_member(self, group: Group, request: JoinRequest) -> JoinResult | asyncio.Future:
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, request.member_id)
        if not group.supports_protocols(request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, request.member_id)
        member_id = new_member_id(request.client_id, request.group_instance_id)
        if request.group_instance_id is not None:
            old_member_id = group.static_member_id(request.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(group, old_member_id, member_id, request)
            return self._add_member_and_rebalance(group, member_id, request)
        if request.require_known_member_id:
            # KIP-394: hand out the member id first, so a client that times out and retries
            # does not leave a ghost member behind.
            group.pending_members[member_id] = self.clock.call_later(
                request.session_timeout_ms / 1000, self._expire_pending_member, group,
                member_id)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        return self._add_member_and_rebalance(group, member_id, request)

    def _join_current_member(self, group: Group,
                             request: JoinRequest) -> JoinResult | asyncio.Future:
        member_id = request.member_id
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            timer = group.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            if request.group_instance_id is not None:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            return self._add_member_and_rebalance(group, member_id, request)
        error = self._check_member(group, member_id, request.group_instance_id)
        if error != ErrorCode.NONE:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        state = group.state
        if state == GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, request)
        if state == GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # A duplicate JoinGroup (e.g. a retry after a lost response): same answer.
                self._schedule_heartbeat(group, member)
                return self._join_result(group, member)
            return self._update_member_and_rebalance(group, member, request)
        if state == GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # The leader rejoins to pick up metadata changes; so does a member whose
                # subscription changed: both need a new assignment.
                return self._update_member_and_rebalance(group, member, request)
            self._schedule_heartbeat(group, member)
            return self._join_result(group, member)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    def _join_result(self, group: Group, member: Member, *, leader_id: str | None = None,
                     with_members: bool | None = None,
                     skip_assignment: bool = False) -> JoinResult:
        """A successful JoinGroup answer for the current generation. By default the leader
        gets the members' metadata, the others an empty list."""
        if with_members is None:
            with_members = group.is_leader(member.member_id)
        return JoinResult(
            error=ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=(group.leader_id if leader_id is None else leader_id) or "",
            skip_assignment=skip_assignment,
            members=group.current_member_metadata() if with_members else [],
        )

    def _add_member_and_rebalance(self, group: Group, member_id: str,
                                  request: JoinRequest) -> asyncio.Future:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=list(request.protocols),
            is_new=True,
        )
        future = asyncio.get_running_loop().create_future()
        member.join_future = future
        if group.state == GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id} (client reason: "
                                             f"{request.reason})")
        return future

    def _update_member_and_rebalance(self, group: Group, member: Member,
                                     request: JoinRequest) -> asyncio.Future:
        member.protocols = list(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        if member.join_future is None:
            member.join_future = asyncio.get_running_loop().create_future()
        future = member.join_future
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id} "
                                             f"(client reason: {request.reason})")
        return future

    def _replace_static_member(self, group: Group, old_member_id: str, new_member_id_: str,
                               request: JoinRequest) -> JoinResult | asyncio.Future:
        """A known group.instance.id joins without a member id (a restarted static member):
        it takes over the old membership. In a Stable group whose protocol stays the same this
        needs no rebalance: the member gets its previous assignment (KIP-345)."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        member = group.members[old_member_id]
        # Whatever the old incarnation still waits for is fenced.
        self._answer_join(member, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
        self._answer_sync(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.replace_static_member(instance_id, old_member_id, new_member_id_)
        member.protocols = list(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host
        self._schedule_heartbeat(group, member)
        state = group.state
        if state == GroupState.STABLE:
            if group.protocol_name != group.select_protocol():
                future = asyncio.get_running_loop().create_future()
                member.join_future = future
                self._prepare_rebalance(group, f"static member {instance_id} rejoined with "
                                               "a change of protocol")
                return future
            # The new member id is persisted first; the member gets its answer once that is
            # committed (Kafka's updateStaticMemberAndRebalance).
            future = asyncio.get_running_loop().create_future()
            member.join_future = future
            assignment = {m.member_id: m.assignment for m in group.members.values()}
            self.manager.store_group(group, assignment, lambda error: self._static_member_stored(
                group, member, old_member_id, new_member_id_, old, current_leader,
                request.supports_skip_assignment, error))
            return future
        future = asyncio.get_running_loop().create_future()
        member.join_future = future
        if state == GroupState.COMPLETING_REBALANCE:
            # The leader may already be assigning to the old member id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined while the "
                                           "group was completing a rebalance")
        return future

    def _static_member_stored(self, group: Group, member: Member, old_member_id: str,
                              new_member_id_: str, old: tuple[list[tuple[str, bytes]], int, int],
                              current_leader: str | None, supports_skip_assignment: bool,
                              error: ErrorCode) -> None:
        """The write of a static member's new member id completed (without a rebalance)."""
        instance_id = member.group_instance_id
        assert instance_id is not None
        if member.member_id != new_member_id_:
            return  # a later incarnation took over meanwhile: its own write answers it
        if error != ErrorCode.NONE:
            log.warning("could not persist the new member id of static member %s of group %s: "
                        "%s", instance_id, group.group_id, error.name)
            if self.manager.is_current(group) and group.members.get(new_member_id_) is member:
                # Revert: the old member id stays the member's.
                group.replace_static_member(instance_id, new_member_id_, old_member_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = old
                self._schedule_heartbeat(group, member)
            self._answer_join(member, JoinResult(error, UNKNOWN_MEMBER_ID))
            return
        log.info("static member %s of group %s rejoined as %s without a rebalance",
                 instance_id, group.group_id, new_member_id_)
        if group.is_leader(new_member_id_) and supports_skip_assignment:
            # KIP-814: the leader learns it leads, but must not compute a new assignment.
            self._answer_join(member, self._join_result(group, member, with_members=True,
                                                        skip_assignment=True))
            return
        # Older clients get the previous leader id, so the restarted leader does not assign
        # (its SyncGroup would not be propagated by a Stable group).
        self._answer_join(member, self._join_result(group, member,
                                                    leader_id=current_leader or "",
                                                    with_members=False))

    # ------------------------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync.clear()
        was_empty = group.state == GroupState.EMPTY
        group.transition_to(GroupState.PREPARING_REBALANCE, self.time_ms())
        log.info("preparing to rebalance group %s in state PreparingRebalance with old "
                 "generation %d (reason: %s)", group.group_id, group.generation_id, reason)
        if was_empty:
            # KIP-134: give the other members of a starting group a moment to join too.
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.initial_delay_active = True
            self._schedule_join_timer(group, delay, self._initial_join_expired, group, delay,
                                      remaining)
        else:
            self._schedule_join_timer(group, group.rebalance_timeout_ms(), self._complete_join,
                                      group)

    def _schedule_join_timer(self, group: Group, delay_ms: int,
                             callback: Callable[..., None], *args: Any) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_timer = self.clock.call_later(delay_ms / 1000, callback, *args)

    def _initial_join_expired(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            next_delay = min(delay_ms, remaining_ms)
            self._schedule_join_timer(group, next_delay, self._initial_join_expired, group,
                                      next_delay, max(remaining_ms - delay_ms, 0))
            return
        group.initial_delay_active = False
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == GroupState.PREPARING_REBALANCE and not group.initial_delay_active \
                and group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """The join phase ends (everyone rejoined, or the rebalance timeout passed)."""
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay_active = False
        for member in group.not_yet_rejoined():
            # Dynamic members that did not rejoin are out; static ones keep their place until
            # their session times out.
            if not member.is_static:
                self._cancel_heartbeat(member)
                group.remove(member.member_id)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them.
            self._schedule_join_timer(group, group.rebalance_timeout_ms(), self._complete_join,
                                      group)
            return
        group.init_next_generation(self.time_ms())
        if group.state == GroupState.EMPTY:
            # Nothing waits for this write: if it fails, the previous generation comes back on
            # reload, with no members to lose (the manager logs the failure).
            self.manager.store_group(group, {})
            return
        log.info("stabilized group %s generation %d (protocol %s) with %d members",
                 group.group_id, group.generation_id, group.protocol_name, len(group.members))
        for member in group.members.values():
            self._answer_join(member, self._join_result(group, member))
            member.is_new = False
            self._schedule_heartbeat(group, member)
        # Members that do not send SyncGroup within the rebalance timeout are removed.
        group.pending_sync = set(group.members)
        group.sync_timer = self.clock.call_later(
            group.rebalance_timeout_ms() / 1000, self._pending_sync_expired, group,
            group.generation_id)

    def _pending_sync_expired(self, group: Group, generation_id: int) -> None:
        group.sync_timer = None
        if group.generation_id != generation_id or not group.pending_sync or group.state not in (
                GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = sorted(group.pending_sync)
        group.pending_sync.clear()
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._cancel_heartbeat(member)
                self._answer_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                self._answer_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
                group.remove(member_id)
        self._prepare_rebalance(group, f"members {missing} did not send SyncGroup in time")

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if member_id not in group.pending_members:
            return
        del group.pending_members[member_id]
        if group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    # ------------------------------------------------------------------------------ answers

    @staticmethod
    def _answer_join(member: Member, result: JoinResult) -> None:
        future, member.join_future = member.join_future, None
        if future is not None and not future.done():
            future.set_result(result)

    @staticmethod
    def _answer_sync(member: Member, result: SyncResult) -> None:
        future, member.sync_future = member.sync_future, None
        if future is not None and not future.done():
            future.set_result(result)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.awaiting_sync:
                self._answer_sync(member, SyncResult(error, group.protocol_type,
                                                     group.protocol_name, member.assignment))
                self._schedule_heartbeat(group, member)

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    # ------------------------------------------------------------------------------ sessions

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        self._cancel_heartbeat(member)
        member.heartbeat_timer = self.clock.call_later(
            member.session_timeout_ms / 1000, self._session_expired, group, member)

    @staticmethod
    def _cancel_heartbeat(member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _session_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join or member.awaiting_sync:
            return  # the rebalance timeout of the phase it waits in covers it
        log.info("member %s in group %s has failed, removing it from the group",
                 member.member_id, group.group_id)
        self._remove_member_and_update_group(group, member,
                                             f"session of member {member.member_id} expired")

    def _remove_member_and_update_group(self, group: Group, member: Member,
                                        reason: str) -> None:
        self._answer_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        self._answer_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        self._cancel_heartbeat(member)
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    # ------------------------------------------------------------------------------ SyncGroup

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None,
                         assignments: Mapping[str, bytes]) -> SyncResult:
        error = self._check(group_id)
        if error != ErrorCode.NONE:
            return SyncResult(error)
        group = self.manager.get_group(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state == GroupState.DEAD:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.consumer is not None:
            error, name, assignment = self.consumer_groups.classic_sync(
                group, member_id, group_instance_id, generation_id, protocol_type,
                protocol_name)
            return SyncResult(error, CONSUMER_PROTOCOL_TYPE if error == ErrorCode.NONE else None,
                              name, assignment)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        error = self._check_member(group, member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        member = group.members[member_id]
        if group.state == GroupState.EMPTY:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        group.pending_sync.discard(member_id)
        if group.state == GroupState.STABLE:
            self._schedule_heartbeat(group, member)
            return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name,
                              member.assignment)
        # CompletingRebalance: wait for the leader's assignment.
        future = member.sync_future or asyncio.get_running_loop().create_future()
        member.sync_future = future
        if group.is_leader(member_id):
            assignment = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            self.manager.store_group(group, assignment, lambda error: self._assignment_stored(
                group, generation_id, assignment, error))
        return await asyncio.shield(future)

    def _assignment_stored(self, group: Group, generation_id: int, assignment: dict[str, bytes],
                           error: ErrorCode) -> None:
        """The leader's assignment was committed (or not). Members may have joined or left
        meanwhile: only a group still completing the same generation takes it (Kafka's
        doSyncGroup storeGroup callback)."""
        if not self.manager.is_current(group) or group.state != GroupState.COMPLETING_REBALANCE \
                or group.generation_id != generation_id:
            return
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, "the assignment could not be stored")
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(GroupState.STABLE, self.time_ms())

    # ------------------------------------------------------------------------------ Heartbeat

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> ErrorCode:
        error = self._check(group_id)
        if error != ErrorCode.NONE:
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            return self.consumer_groups.classic_heartbeat(group, member_id, group_instance_id,
                                                          generation_id)
        error = self._check_member(group, member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return error
        if group.state == GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        if group.state == GroupState.PREPARING_REBALANCE:
            self._schedule_heartbeat(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, member)
        return ErrorCode.NONE

    # ------------------------------------------------------------------------------ LeaveGroup

    def leave_group(self, group_id: str, members: Iterable[LeavingMember],
                    reason: str | None = None) -> tuple[ErrorCode, list[ErrorCode]]:
        """Top-level error and one error per leaving (member id, instance id)."""
        leaving = list(members)
        error = self._check(group_id)
        if error != ErrorCode.NONE:
            return error, [error] * len(leaving)
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, \
                [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(leaving)
        return ErrorCode.NONE, [self._leave(group, member_id, instance_id, reason)
                                for member_id, instance_id in leaving]

    async def leave_group_members(self, group_id: str, members: Iterable[LeavingMember],
                                  reason: str | None = None
                                  ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup: `leave_group`, or for a consumer group (classic members in it) the
        consumer group's fencing, which writes records and may downgrade the group."""
        leaving = list(members)
        group = self.manager.get_group(group_id) if self._check(group_id) == ErrorCode.NONE \
            else None
        if group is not None and group.consumer is not None:
            return ErrorCode.NONE, await self.consumer_groups.classic_leave(group_id, leaving)
        return self.leave_group(group_id, leaving, reason)

    def _leave(self, group: Group, member_id: str, instance_id: str | None,
               reason: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            # KIP-345: an admin removes a static member by its instance id.
            known = group.static_member_id(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = known
        elif group.is_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id in group.pending_members:
            timer = group.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            if group.state == GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(group)
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("member %s leaves group %s (reason: %s)", member_id, group.group_id, reason)
        self._remove_member_and_update_group(group, member, f"member {member_id} left "
                                                            f"(reason: {reason})")
        return ErrorCode.NONE

    # ------------------------------------------------------------------------------ offsets

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int,
                             offsets: Mapping[TopicPartition, OffsetAndMetadata],
                             api_version: int = 9) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: answers once the offsets are committed (or failed to be); they are
        visible to OffsetFetch from then on."""
        group, error = self._group_for_commit(group_id, member_id, group_instance_id,
                                              generation_id, transactional=False,
                                              api_version=api_version)
        if group is None:
            return dict.fromkeys(offsets, error)
        if group.consumer is not None:
            return await self._store(offsets, partial(self.manager.store_offsets, group))
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # Commits stay allowed while preparing: eager consumers commit before rejoining.
            self._schedule_heartbeat(group, group.members[member_id])
        return await self._store(offsets, partial(self.manager.store_offsets, group))

    async def txn_offset_commit(self, group_id: str, transactional_id: str, producer_id: int,
                                producer_epoch: int, member_id: str, generation_id: int,
                                group_instance_id: str | None,
                                offsets: Mapping[TopicPartition, OffsetAndMetadata],
                                ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: writes the offsets as part of the producer's transaction and
        answers once they are written; they become visible to OffsetFetch only when the
        transaction commits (`on_transaction_completed`). A group that does not exist is a
        simple group (generation -1); member, instance and generation are checked when given
        (v3+), the group's state is not (Kafka's validateOffsetCommit, transactional)."""
        if producer_id < 0:
            # No transaction can hold such a write (Kafka's verification answers this).
            return dict.fromkeys(offsets, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if self.transaction_verifier is not None:
            # Verified first, as Kafka's transactional write operation does; the group is
            # checked after, as it is then.
            error = self._check(group_id)
            if error == ErrorCode.NONE:
                error = await self.transaction_verifier(self.manager.partition_for(group_id),
                                                        transactional_id, producer_id,
                                                        producer_epoch)
            if error == ErrorCode.NETWORK_EXCEPTION:
                # Kafka 4.0: older clients retry this one without a coordinator lookup.
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            if error != ErrorCode.NONE:
                return dict.fromkeys(offsets, error)
        group, error = self._group_for_commit(group_id, member_id, group_instance_id,
                                              generation_id, transactional=True)
        if group is None:
            return dict.fromkeys(offsets, error)
        return await self._store(offsets, partial(self.manager.store_txn_offsets, group,
                                                  producer_id, producer_epoch))

    def _group_for_commit(self, group_id: str, member_id: str, group_instance_id: str | None,
                          generation_id: int, *, transactional: bool, api_version: int = 9,
                          ) -> tuple[Group | None, ErrorCode]:
        """The group an (Txn)OffsetCommit writes to (a simple group is created for a commit
        without a generation), or None and the error for every partition."""
        error = self._check(group_id, allow_empty_id=not transactional)
        if error != ErrorCode.NONE:
            return None, error
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return None, ErrorCode.ILLEGAL_GENERATION
            # A group that uses Kafka only to store offsets (assign mode, tools).
            group = self.manager.add_group(Group(group_id, state_timestamp_ms=self.time_ms()))
        if group.consumer is not None:
            # generation_id_or_member_epoch is the member epoch (Kafka's ConsumerGroup).
            error = self.consumer_groups.check_offset_commit(
                group, member_id, generation_id, api_version, transactional)
            return (group, error) if error == ErrorCode.NONE else (None, error)
        error = self._check_offset_commit(group, member_id, group_instance_id, generation_id,
                                          transactional)
        if error != ErrorCode.NONE:
            return None, error
        return group, ErrorCode.NONE

    async def _store(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     store: Callable[[dict[TopicPartition, OffsetAndMetadata]],
                                     Awaitable[ErrorCode]],
                     ) -> dict[TopicPartition, ErrorCode]:
        """Writes the offsets whose metadata fits offset.metadata.max.bytes in one batch; the
        others answer OFFSET_METADATA_TOO_LARGE."""
        max_size = self.config.max_metadata_size
        valid = {tp: offset for tp, offset in offsets.items()
                 if len(offset.metadata.encode()) <= max_size}
        results = dict.fromkeys(offsets, ErrorCode.OFFSET_METADATA_TOO_LARGE)
        if valid:
            error = await store(valid)
            results.update(dict.fromkeys(valid, error))
        return results

    def _check_offset_commit(self, group: Group, member_id: str, group_instance_id: str | None,
                             generation_id: int, transactional: bool = False) -> ErrorCode:
        """Kafka's validateOffsetCommit (ClassicGroup): transactional commits skip the checks
        of the group's state, as older TxnOffsetCommit versions carry no member."""
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state == GroupState.EMPTY:
            return ErrorCode.NONE  # a group used only to store offsets
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._check_member(group, member_id, group_instance_id)
            if error != ErrorCode.NONE:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional:
            return ErrorCode.UNKNOWN_MEMBER_ID  # only members may commit to a live group
        if not transactional and group.state == GroupState.COMPLETING_REBALANCE:
            # The member has its JoinGroup answer but not its assignment yet.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def complete_transaction(self, offsets_partition: int, producer_id: int,
                                   producer_epoch: int, coordinator_epoch: int,
                                   commit: bool) -> ErrorCode:
        """WriteTxnMarkers for offsets partition `offsets_partition`, as Kafka 4.0 does it:
        the group coordinator appends the marker itself, in line with its own writes to the
        partition, and once the marker is committed completes the producer's transactional
        offsets there (as `on_transaction_completed`). Returns NONE or the marker's error
        (NOT_LEADER_OR_FOLLOWER when this broker does not coordinate the partition)."""
        if not self._active:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return await self.manager.write_marker(offsets_partition, producer_id, producer_epoch,
                                               coordinator_epoch, commit)

    def on_transaction_completed(self, offsets_partition: int, producer_id: int,
                                 commit: bool) -> ErrorCode:
        """The transaction marker of `producer_id` is committed in offsets partition
        `offsets_partition` (the transaction coordinator's WriteTxnMarkers calls this): the
        producer's pending transactional offsets in that partition's groups become committed
        (commit) or are dropped (abort), behind the writes in flight there. Returns NONE, or
        the error to answer the marker with when this broker does not coordinate the
        partition (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS: a load replays the marker
        from the log), as Kafka's completeTransaction does."""
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.manager.runtime.error_for(offsets_partition)
        if error != ErrorCode.NONE:
            return error
        self.manager.complete_transaction(offsets_partition, producer_id, commit)
        return ErrorCode.NONE

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None,
                      require_stable: bool = False, member_id: str | None = None,
                      member_epoch: int = -1,
                      ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """The committed offsets of `partitions` (None: all the group has); None for a
        partition without one. With `require_stable` (OffsetFetch v7+), None too for a
        partition with offsets still being written or in an open transaction, which
        `unstable_partitions` names (it answers UNSTABLE_OFFSET_COMMIT). A consumer-protocol
        member (OffsetFetch v9+: `member_id`, `member_epoch`) must be in its current epoch."""
        error = self._check(group_id, allow_empty_id=True)
        if error != ErrorCode.NONE:
            return error, {}
        group = self.manager.get_group(group_id)
        if group is not None and group.consumer is not None:
            error = self.consumer_groups.check_offset_fetch(group, member_id, member_epoch)
            if error != ErrorCode.NONE:
                return error, {}
        offsets = group.offsets if group is not None and group.state != GroupState.DEAD else {}
        wanted = list(offsets) if partitions is None else list(partitions)
        unstable = self.unstable_partitions(group_id, wanted) if require_stable else set()
        return ErrorCode.NONE, {tp: None if tp in unstable else offsets.get(tp)
                                for tp in wanted}

    def unstable_partitions(self, group_id: str,
                            partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Which of `partitions` have offsets of an open transaction, or a commit being written
        (Kafka's hasPendingOffsetCommitsForTopicPartition): a fetch that requires stable
        offsets answers UNSTABLE_OFFSET_COMMIT for them, and the client retries."""
        group = self.manager.get_group(group_id)
        if group is None:
            return set()
        return {tp for tp in partitions
                if tp in group.pending_offset_commits or group.has_pending_txn_offset(tp)}

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition],
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: offsets of an Empty group, or of topics a live consumer group does
        not subscribe to. The offsets are gone at once; the answer waits for the tombstones'
        write (whose failure, as in Kafka, does not fail the request)."""
        error = self._check(group_id)
        if error != ErrorCode.NONE:
            return error, {}
        group = self.manager.get_group(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        wanted = list(dict.fromkeys(partitions))
        results: dict[TopicPartition, ErrorCode] = {}
        if group.state == GroupState.EMPTY:
            eligible = wanted
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = group.subscribed_topics()
            eligible = []
            for tp in wanted:
                # Unknown subscriptions count as subscribed to everything.
                if subscribed is None or tp.topic in subscribed:
                    results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            _, written = self.manager.cleanup_group(group, eligible)
            results.update(dict.fromkeys(eligible, ErrorCode.NONE))
            await written
        return ErrorCode.NONE, {tp: results[tp] for tp in wanted}

    def remove_offsets_of_topics(self, topics: set[str]) -> int:
        """Deleted topics take their committed (and pending) offsets with them: gone at once,
        tombstones written in the background."""
        removed = 0
        for group in list(self.manager.groups.values()):
            if not self.manager.is_owned(group.group_id):
                continue
            gone = [tp for tp in [*group.offsets, *group.pending_offset_commits,
                                  *_txn_partitions(group)]
                    if tp.topic in topics]
            if gone:
                removed += self.manager.cleanup_group(group, gone)[0]
        return removed

    def _schedule_offset_expiration(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000
        self._expiration_timer = self.clock.call_later(interval, self._run_offset_expiration)

    def _run_offset_expiration(self) -> None:
        self._spawn(self._expire_offsets_logged())
        if self._active:
            self._schedule_offset_expiration()

    async def _expire_offsets_logged(self) -> None:
        try:
            await self.expire_offsets()
        except Exception:
            log.exception("offset expiration failed")

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Removes expired offsets (and the Empty groups they leave with none) and waits for
        their tombstones; returns how many offsets expired."""
        now = self.time_ms() if now_ms is None else now_ms
        removed = 0
        writes = []
        for group in list(self.manager.groups.values()):
            if not self.manager.is_owned(group.group_id):
                continue
            count, written = self.manager.cleanup_group(
                group, group.expired_offsets(now, self.config.offsets_retention_ms))
            removed += count
            writes.append(written)
        if removed:
            log.info("removed %d expired offsets", removed)
        await asyncio.gather(*writes)
        return removed

    # ------------------------------------------------------------------------------ admin

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        dead = GroupSummary(group_id, GroupState.DEAD.value, "", "", [])
        error = self._check(group_id, allow_empty_id=True)
        if error != ErrorCode.NONE:
            return error, dead
        group = self.manager.get_group(group_id)
        if group is None or group.consumer is not None:
            # A consumer group is described by ConsumerGroupDescribe; DescribeGroups sees no
            # classic group under its id.
            return ErrorCode.NONE, dead
        stable = group.state == GroupState.STABLE
        members = [
            MemberSummary(
                member.member_id, member.group_instance_id, member.client_id,
                member.client_host,
                member.metadata(group.protocol_name) if stable else b"",
                member.assignment if stable else b"")
            for member in group.members.values()
        ]
        return ErrorCode.NONE, GroupSummary(
            group_id, group.state.value, group.protocol_type or "",
            (group.protocol_name or "") if stable else "", members)

    def classic_group_missing(self, group_id: str) -> str | None:
        """Why `group_id` names no classic group (Kafka's GroupIdNotFoundException message,
        which DescribeGroups v6+ answers with GROUP_ID_NOT_FOUND), or None when it does."""
        group = self.manager.get_group(group_id)
        if group is None or group.state == GroupState.DEAD:
            return f"Group {group_id} not found."
        if group.consumer is not None:
            return f"Group {group_id} is not a classic group."
        return None

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode, list[GroupOverview]]:
        wanted = {state.lower() for state in states}
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.manager.is_loading \
            else ErrorCode.NONE
        out = []
        for group in self.manager.groups.values():
            if group.state == GroupState.DEAD:
                continue
            state = group.consumer.state().value if group.consumer is not None \
                else group.state.value
            if not wanted or state.lower() in wanted:
                out.append(GroupOverview(group.group_id, group.protocol_type or "", state,
                                         group.group_type))
        return error, out

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """DeleteGroups of Empty groups: gone at once; the answer waits for the tombstones'
        write (whose failure, as in Kafka, does not fail the request)."""
        results: dict[str, ErrorCode] = {}
        writes = []
        for group_id in group_ids:
            error = self._check(group_id, allow_empty_id=True)
            if error != ErrorCode.NONE:
                results[group_id] = error
                continue
            group = self.manager.get_group(group_id)
            if group is None or group.state == GroupState.DEAD:
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state != GroupState.EMPTY:
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                group.transition_to(GroupState.DEAD, self.time_ms())
                _, written = self.manager.cleanup_group(
                    group, [*group.offsets, *group.pending_offset_commits,
                            *_txn_partitions(group)])
                writes.append(written)
                results[group_id] = ErrorCode.NONE
        await asyncio.gather(*writes)
        return results


def _txn_partitions(group: Group) -> list[TopicPartition]:
    """The partitions with offsets in the group's open transactions."""
    return [tp for by_producer in (group.pending_txn_offsets, group.txn_offsets_in_flight)
            for offsets in by_producer.values() for tp in offsets]

