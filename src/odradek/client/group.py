"""The consumer's side of the classic group protocol (Kafka's ConsumerCoordinator).

`ConsumerCoordinator` keeps a subscribing consumer in its group:

* finds the group's coordinator (FindCoordinator) and finds it again after NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE or a lost connection;
* joins (JoinGroup, retried with the member id the coordinator hands out on
  MEMBER_ID_REQUIRED, KIP-394), assigns the partitions when it is the leader (the assignor
  the coordinator chose, over every member's ConsumerProtocolSubscription), and takes its
  share from SyncGroup into `SubscriptionState.assign_from_group`;
* heartbeats from a task on the client's loop every ``heartbeat.interval.ms``; a rebalance
  (REBALANCE_IN_PROGRESS) or a lost membership (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) makes
  the next `poll` rejoin; FENCED_INSTANCE_ID (a static member replaced) is fatal; without a
  successful heartbeat for ``session.timeout.ms`` the membership counts as lost; a consumer
  that does not poll for ``max.poll.interval.ms`` leaves the group (Kafka's behaviour);
* before rejoining it (auto-)commits; the eager protocol then revokes every partition
  (``on_partitions_revoked``), the cooperative one (KIP-429, when every configured assignor
  is cooperative) keeps them and revokes only what the new assignment takes away, rejoining
  at once to hand it over; a lost membership calls ``on_partitions_lost`` instead;
* commits offsets (OffsetCommit with the generation and member id) and reads committed ones
  (OffsetFetch, require_stable) for `GroupOffsetStore`;
* leaves (LeaveGroup) on unsubscribe and close, except as a static member
  (``group.instance.id``), which keeps its membership until its session times out.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from odradek.client.assignors import PartitionAssignor, Subscription, assignors_from_config
from odradek.client.cluster import Cluster
from odradek.client.config import ClientConfig
from odradek.client.connection import Connection
from odradek.client.errors import (
    KafkaConfigError,
    KafkaConnectionError,
    raise_for,
)
from odradek.client.offset_fetch import committed_offsets, offset_fetch_request
from odradek.client.retry import Deadline
from odradek.client.subscription import OffsetAndMetadata, SubscriptionState
from odradek.client.types import Node, TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError, ErrorCode, KafkaError
from odradek.protocol.primitives import Reader

__all__ = [
    "COMMIT_FAILED_MESSAGE",
    "ConsumerCoordinator",
    "ConsumerRebalanceListener",
    "GroupOffsetStore",
    "RebalanceListener",
]

log = logging.getLogger("odradek.client.group")

T = TypeVar("T")

_FIND_COORDINATOR_BATCHED = 4
_SUBSCRIPTION_VERSION = 3

#: errors after which the coordinator is looked up again
COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})
#: errors that end this member's membership (its partitions are lost, not revoked)
MEMBERSHIP_LOST_ERRORS = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})

COMMIT_FAILED_MESSAGE = (
    "Commit cannot be completed since the group has already rebalanced and assigned the "
    "partitions to another member. This means that the time between subsequent calls to "
    "poll() was longer than the configured max.poll.interval.ms, which typically implies that "
    "the poll loop is spending too much time message processing.")

class ConsumerRebalanceListener:
    """Kafka's ConsumerRebalanceListener; override what you need (plain or async methods).

    ``on_partitions_revoked`` runs before a rebalance takes the partitions away (commit
    there), ``on_partitions_assigned`` after the group assigned new ones, and
    ``on_partitions_lost`` when the membership was lost (the partitions may already belong
    to another member: do not commit); by default it calls ``on_partitions_revoked``."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(partitions)


#: A `ConsumerRebalanceListener`, or any object with some of its methods (a missing
#: ``on_partitions_lost`` falls back to ``on_partitions_revoked``, as in Kafka).
RebalanceListener = Any


def _decode_latest(cls: type[T], data: bytes) -> tuple[T, int]:
    """A versioned consumer-protocol blob; newer versions than ours only append fields, so
    they are read with our newest schema."""
    if len(data) < 2:
        raise DecodeError(f"{cls.NAME}: missing version prefix")  # type: ignore[attr-defined]
    version = int.from_bytes(data[:2], "big", signed=True)
    reader = Reader(data, 2)
    return cls.read(reader, min(version, cls.MAX_VERSION)), version  # type: ignore[attr-defined]


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(set(partitions)):
        grouped[tp.topic].append(tp.partition)
    return grouped


class ConsumerCoordinator:
    """Group membership of one consumer. Lives on the consumer's event loop."""

    def __init__(self, cluster: Cluster, config: ClientConfig,
                 subscriptions: SubscriptionState,
                 drop_partitions: Callable[[set[TopicPartition]], None],
                 wake: Callable[[], None]) -> None:
        self.cluster = cluster
        self.group_id: str = config["group.id"]
        self.group_instance_id: str | None = config["group.instance.id"] or None
        self.session_timeout_ms: int = config["session.timeout.ms"]
        self.heartbeat_interval_ms: int = config["heartbeat.interval.ms"]
        self.rebalance_timeout_ms: int = config["max.poll.interval.ms"]
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise KafkaConfigError("Heartbeat must be set lower than the session timeout")
        self.auto_commit: bool = config["enable.auto.commit"]
        self.auto_commit_interval_ms: int = config["auto.commit.interval.ms"]
        self.exclude_internal_topics: bool = config["exclude.internal.topics"]
        self.allow_auto_create_topics: bool = config["allow.auto.create.topics"]
        self.rack_id: str = config["client.rack"]
        self.assignors: list[PartitionAssignor] = assignors_from_config(
            config["partition.assignment.strategy"])
        # As in Kafka, the protocol every configured assignor supports: cooperative only when
        # all are (so "range, cooperative-sticky" stays eager, the upgrade path of KIP-429).
        self.cooperative = all(a.cooperative for a in self.assignors)
        self.subscriptions = subscriptions
        self._drop_partitions = drop_partitions
        self._wake = wake
        # -- subscription
        self.topics: list[str] = []
        self.pattern: re.Pattern[str] | None = None
        #: a SubscriptionPattern's regex, resolved by the coordinator (consumer protocol only)
        self.server_regex: str | None = None
        self.listener: RebalanceListener | None = None
        self.subscribed_topics: list[str] = []  # resolved (pattern) topics of the last join
        # -- membership
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.rejoin_needed = False
        self._partitions_lost = False
        self.coordinator: Node | None = None
        self._connection: Connection | None = None
        self._join_task: asyncio.Task[None] | None = None
        self._joining = False  # JoinGroup/SyncGroup in flight
        self._fatal_error: KafkaError | None = None
        self._last_assignment: list[TopicPartition] = []
        self._last_generation = -1
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._heartbeat_wakeup = asyncio.Event()
        self._last_heartbeat_ok = time.monotonic()
        self.last_poll = time.monotonic()
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None or self.server_regex is not None

    @property
    def stable(self) -> bool:
        return self.generation_id >= 0 and not self.rejoin_needed

    # ------------------------------------------------------------------------------ coordinator

    async def _find_coordinator(self, deadline: Deadline) -> Connection:
        connection = self._connection
        if connection is not None and connection.ready:
            return connection
        any_connection = await self.cluster.any_connection(deadline)
        version = any_connection.pick_version(m.FindCoordinatorRequest.API_KEY)
        if version >= _FIND_COORDINATOR_BATCHED:
            request = m.FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group_id])
        else:
            request = m.FindCoordinatorRequest(key=self.group_id, key_type=0)
        response = await any_connection.send(request, api_version=version,
                                             timeout_ms=self.cluster.request_timeout(deadline))
        if version >= _FIND_COORDINATOR_BATCHED:
            (found,) = response.coordinators
            raise_for(found.error_code, found.error_message)
            node = Node(found.node_id, found.host, found.port)
        else:
            raise_for(response.error_code, response.error_message)
            node = Node(response.node_id, response.host, response.port)
        self._discard_connection()
        self._connection = await self.cluster.open_dedicated((node.host, node.port), deadline)
        if node != self.coordinator:
            log.info("group %s: discovered coordinator %s:%d (id %d)", self.group_id,
                     node.host, node.port, node.id)
        self.coordinator = node
        return self._connection

    def mark_coordinator_unknown(self, reason: str) -> None:
        if self.coordinator is not None:
            log.info("group %s: coordinator %s:%d is unavailable or invalid (%s); will look "
                     "it up again", self.group_id, self.coordinator.host, self.coordinator.port,
                     reason)
        self.coordinator = None
        self._discard_connection()

    def _discard_connection(self) -> None:
        """Closes the coordinator's own connection (see `Cluster.open_dedicated`)."""
        connection, self._connection = self._connection, None
        if connection is not None and not connection.closed:
            task = asyncio.get_running_loop().create_task(connection.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _send(self, request: m.Message, deadline: Deadline, *,
                    timeout_ms: float | None = None, min_version: int | None = None) -> Any:
        connection = await self._find_coordinator(deadline)
        version = connection.pick_version(request.API_KEY,  # type: ignore[arg-type]
                                          min_version=min_version)
        try:
            return await connection.send(
                request, api_version=version,
                timeout_ms=timeout_ms or self.cluster.request_timeout(deadline))
        except KafkaConnectionError as error:
            self.mark_coordinator_unknown(error.message or "connection lost")
            raise

    async def _call(self, name: str, attempt: Callable[[Deadline], Awaitable[T]],
                    timeout_ms: float | None) -> T:
        """`attempt` against the coordinator, retried (finding the coordinator again after
        coordinator errors) until the deadline."""

        async def run(deadline: Deadline) -> T:
            try:
                return await attempt(deadline)
            except KafkaError as error:
                if error.code in COORDINATOR_ERRORS:
                    self.mark_coordinator_unknown(error.code.name)
                raise

        return await self.cluster.call(name, run, timeout_ms=timeout_ms)

    # ------------------------------------------------------------------------------ subscription

    def subscribe(self, topics: Iterable[str] | None, pattern: re.Pattern[str] | None,
                  listener: RebalanceListener | None, server_regex: str | None = None) -> None:
        self.topics = sorted(set(topics or ()))
        self.pattern = pattern
        self.server_regex = server_regex
        self.listener = listener
        self.request_rejoin("subscription changed")

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("group %s: member %s requests a rebalance: %s", self.group_id,
                     self.member_id, reason)
        self.rejoin_needed = True
        self._wake()

    async def _resolve_topics(self, deadline: Deadline) -> list[str]:
        if self.pattern is None:
            await self.cluster.refresh_metadata(
                set(self.topics) | set(self.cluster.metadata.topics),
                allow_auto_topic_creation=self.allow_auto_create_topics, deadline=deadline)
            return list(self.topics)
        await self.cluster.refresh_metadata(None, deadline=deadline)
        return sorted(
            name for name, topic in self.cluster.metadata.topics.items()
            if self.pattern.fullmatch(name)
            and not (self.exclude_internal_topics and topic.is_internal))

    async def pattern_changed(self) -> bool:
        """Whether the topics matching the pattern differ from the last join's (checked when
        the metadata is refreshed)."""
        if self.pattern is None or not self.stable:
            return False
        topics = await self._resolve_topics(self.cluster.deadline())
        return topics != self.subscribed_topics

    # ------------------------------------------------------------------------------ polling

    async def poll(self, deadline: Deadline) -> None:
        """Called by every `poll` of a consumer with a ``group.id``: joins (or rejoins) the
        group when subscribed and needed, waiting for it up to the deadline, and auto-commits
        when due."""
        self.last_poll = time.monotonic()
        self._check_heartbeat_task()
        if self._fatal_error is not None:
            raise self._fatal_error
        if self.subscribed and (self.rejoin_needed or self.generation_id < 0):
            if self._join_task is None:
                self._join_task = asyncio.get_running_loop().create_task(self._join())
            task = self._join_task
            await asyncio.wait([task], timeout=max(0.0, deadline.remaining_ms() / 1000))
            if task.done():
                self._join_task = None
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        # Manually assigned partitions are auto-committed too (as a simple consumer).
        if self.auto_commit and (self.stable or not self.subscribed) and \
                time.monotonic() >= self._next_auto_commit:
            self._auto_commit_async()

    def _check_heartbeat_task(self) -> None:
        task = self._heartbeat_task
        if task is not None and task.done():
            self._heartbeat_task = None
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    # ------------------------------------------------------------------------------ joining

    async def _join(self) -> None:
        """Revoke (eager), join, sync, install the assignment; retried until it succeeds or
        hits a fatal error."""
        await self._revoke_before_join()
        backoff = 0
        while not self._closed:
            deadline = Deadline(self.rebalance_timeout_ms + self.cluster.request_timeout_ms)
            try:
                if await self._join_once(deadline):
                    return
                backoff = 0
            except KafkaError as error:
                if not (error.retriable or error.code in COORDINATOR_ERRORS
                        or error.code in MEMBERSHIP_LOST_ERRORS
                        or error.code == ErrorCode.REBALANCE_IN_PROGRESS):
                    raise
                if error.code in COORDINATOR_ERRORS:
                    self.mark_coordinator_unknown(error.code.name)
                log.info("group %s: join failed (%s), retrying", self.group_id, error)
                await asyncio.sleep(self.cluster.retry_backoff.delay_ms(backoff) / 1000)
                backoff += 1

    async def _revoke_before_join(self) -> None:
        owned = self.subscriptions.assignment
        if self._partitions_lost:
            self._partitions_lost = False
            if owned:
                await self._invoke_listener("on_partitions_lost", owned)
            self._drop_partitions(self.subscriptions.assign_from_group([]))
        elif owned:
            if self.auto_commit and self.generation_id >= 0:
                await self._commit_before_revoke()
            if not self.cooperative:  # eager: give up everything before joining
                await self._invoke_listener("on_partitions_revoked", owned)
                self._drop_partitions(self.subscriptions.assign_from_group([]))

    async def _commit_before_revoke(self) -> None:
        if self._auto_commit_task is not None and not self._auto_commit_task.done():
            # An older async commit must not land after this one.
            await asyncio.gather(self._auto_commit_task, return_exceptions=True)
        try:
            await self.commit(self._positions(), timeout_ms=self.cluster.request_timeout_ms)
        except KafkaError as error:
            log.warning("group %s: committing offsets before the rebalance failed: %s",
                        self.group_id, error)

    def _positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(state.position,
                                      leader_epoch=state.position_epoch
                                      if state.position_epoch >= 0 else None)
                for tp, state in self.subscriptions.items() if state.position is not None}

    def _subscription_metadata(self, topics: list[str], assignor: PartitionAssignor) -> bytes:
        owned = _by_topic(self.subscriptions.assignment)
        user_data = getattr(assignor, "user_data", None)
        return m.encode_versioned(m.ConsumerProtocolSubscription(
            topics=topics,
            # the eager sticky assignor's memory: the last assignment (revoked by now)
            user_data=None if user_data is None else user_data(self._last_assignment,
                                                               self._last_generation),
            owned_partitions=[m.ConsumerProtocolSubscription.TopicPartition(
                topic=topic, partitions=parts) for topic, parts in owned.items()],
            generation_id=self.generation_id,
            rack_id=self.rack_id or None), _SUBSCRIPTION_VERSION)

    async def _join_once(self, deadline: Deadline) -> bool:
        """One JoinGroup + SyncGroup round; False when it must be tried again at once."""
        topics = await self._resolve_topics(deadline)
        self.subscribed_topics = topics
        protocols = [m.JoinGroupRequest.JoinGroupRequestProtocol(
            name=a.name, metadata=self._subscription_metadata(topics, a))
            for a in self.assignors]
        self.rejoin_needed = False
        self._joining = True
        try:
            return await self._join_and_sync(protocols, deadline)
        finally:
            self._joining = False

    async def _join_and_sync(self, protocols: list[Any], deadline: Deadline) -> bool:
        # The coordinator may hold the JoinGroup for the whole rebalance timeout.
        join_timeout = max(self.cluster.request_timeout_ms, self.rebalance_timeout_ms + 5_000)
        join = await self._send(m.JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type="consumer",
            protocols=protocols,
            reason="rebalance requested by the consumer"), deadline, timeout_ms=join_timeout)
        error = ErrorCode.from_code(join.error_code)
        if error == ErrorCode.MEMBER_ID_REQUIRED:  # KIP-394: join again with this id
            self.member_id = join.member_id
            self.rejoin_needed = True
            return False
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._reset_generation(reset_member_id=error == ErrorCode.UNKNOWN_MEMBER_ID)
            self.rejoin_needed = True
            return False
        if error != ErrorCode.NONE:
            self.rejoin_needed = True
            raise KafkaError(error)
        self.member_id = join.member_id
        generation = join.generation_id
        protocol = join.protocol_name or self.assignors[0].name
        assignments: list[Any] = []
        if join.leader == join.member_id and not join.skip_assignment:
            assignments = await self._assign(protocol, join.members, deadline)
        sync = await self._send(m.SyncGroupRequest(
            group_id=self.group_id, generation_id=generation, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type="consumer",
            protocol_name=protocol, assignments=assignments), deadline,
            timeout_ms=join_timeout)
        error = ErrorCode.from_code(sync.error_code)
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._reset_generation(reset_member_id=error == ErrorCode.UNKNOWN_MEMBER_ID)
        if error == ErrorCode.REBALANCE_IN_PROGRESS or error in MEMBERSHIP_LOST_ERRORS:
            self.rejoin_needed = True
            return False
        if error != ErrorCode.NONE:
            self.rejoin_needed = True
            raise KafkaError(error)
        assigned: list[TopicPartition] = []
        if sync.assignment:
            decoded, _ = _decode_latest(m.ConsumerProtocolAssignment, bytes(sync.assignment))
            assigned = [TopicPartition(t.topic, p) for t in decoded.assigned_partitions
                        for p in t.partitions]
        self.generation_id = generation
        self.protocol_name = protocol
        self._last_assignment, self._last_generation = list(assigned), generation
        self._last_heartbeat_ok = time.monotonic()
        owned = self.subscriptions.assignment
        revoked = owned - set(assigned)
        if revoked:  # cooperative: only what moves away, then rejoin for the hand-over
            # (the listener may commit them, with the new generation)
            await self._invoke_listener("on_partitions_revoked", revoked)
            self.rejoin_needed = True
        if self.rejoin_needed:  # a heartbeat error or resubscription during the sync
            log.info("group %s: rejoining right after generation %d", self.group_id,
                     generation)
        removed = self.subscriptions.assign_from_group(assigned)
        self._drop_partitions(removed)
        log.info("group %s: member %s joined generation %d (%s) with %d partition(s)",
                 self.group_id, self.member_id, generation, protocol, len(assigned))
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        self._start_heartbeat()
        self._joining = False
        await self._invoke_listener("on_partitions_assigned", set(assigned) - owned)
        self._wake()
        return True

    async def _assign(self, protocol: str, members: list[Any], deadline: Deadline
                      ) -> list[Any]:
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        if assignor is None:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"The coordinator chose assignor {protocol}, which this "
                             "consumer does not have")
        subscriptions: dict[str, Subscription] = {}
        versions = [_SUBSCRIPTION_VERSION]
        for member in members:
            decoded, version = _decode_latest(m.ConsumerProtocolSubscription,
                                              bytes(member.metadata))
            versions.append(version)
            subscriptions[member.member_id] = Subscription(
                topics=list(decoded.topics), user_data=decoded.user_data,
                owned_partitions=[TopicPartition(t.topic, p)
                                  for t in (decoded.owned_partitions or ()) for p in t.partitions],
                group_instance_id=member.group_instance_id,
                generation_id=decoded.generation_id if version >= 2 else -1,
                rack_id=decoded.rack_id if version >= 3 else None,
                member_id=member.member_id)
        all_topics = {topic for s in subscriptions.values() for topic in s.topics}
        await self.cluster.refresh_metadata(all_topics | set(self.cluster.metadata.topics),
                                            deadline=deadline)
        partitions_per_topic = {
            name: len(topic.partitions) for name, topic in self.cluster.metadata.topics.items()
            if name in all_topics and topic.error == ErrorCode.NONE and topic.partitions}
        result = assignor.assign(partitions_per_topic, subscriptions)
        # Every member must be able to read the assignment: the oldest version among them.
        version = max(0, min(versions))
        return [m.SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=member_id,
            assignment=m.encode_versioned(m.ConsumerProtocolAssignment(assigned_partitions=[
                m.ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=parts)
                for topic, parts in _by_topic(partitions).items()]), version))
            for member_id, partitions in result.items()]

    def _reset_generation(self, *, reset_member_id: bool) -> None:
        self.generation_id = -1
        self.protocol_name = None
        if reset_member_id:
            self.member_id = ""

    async def _invoke_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        listener = self.listener
        if listener is None:
            return
        callback = getattr(listener, name, None)
        if callback is None and name == "on_partitions_lost":
            callback = getattr(listener, "on_partitions_revoked", None)
        if callback is None:
            return
        try:
            result = callback(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception:
            # Kafka logs listener errors and carries on with the rebalance.
            log.exception("group %s: %s failed", self.group_id, name)

    # ------------------------------------------------------------------------------ heartbeats

    def _start_heartbeat(self) -> None:
        if self._heartbeat_task is None and not self._closed:
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while not self._closed:
            try:
                async with asyncio.timeout(interval):
                    await self._heartbeat_wakeup.wait()
            except TimeoutError:
                pass
            self._heartbeat_wakeup.clear()
            if self._closed:
                return
            if (time.monotonic() - self.last_poll) * 1000 > self.rebalance_timeout_ms \
                    and self.generation_id >= 0:
                log.warning("group %s: consumer poll timeout has expired (more than "
                            "max.poll.interval.ms=%d between polls); leaving the group",
                            self.group_id, self.rebalance_timeout_ms)
                await self.leave_group("consumer poll timeout has expired.")
                self._partitions_lost = True
                continue
            if self.generation_id < 0 or self._joining or self._fatal_error is not None:
                continue  # nothing to keep alive, or JoinGroup/SyncGroup under way
            # Heartbeats go on while a rebalance waits for this member's poll and while the
            # listener runs, so neither costs the membership before the rebalance timeout.
            await self._heartbeat_once()

    async def _heartbeat_once(self) -> None:
        generation = self.generation_id
        deadline = Deadline(self.cluster.request_timeout_ms)
        try:
            response = await self._send(m.HeartbeatRequest(
                group_id=self.group_id, generation_id=generation, member_id=self.member_id,
                group_instance_id=self.group_instance_id), deadline)
            error = ErrorCode.from_code(response.error_code)
        except KafkaError as exc:
            error = exc.code
        if generation != self.generation_id:
            return  # a rebalance finished meanwhile; this answer is about the old generation
        if error == ErrorCode.NONE:
            self._last_heartbeat_ok = time.monotonic()
        elif error == ErrorCode.REBALANCE_IN_PROGRESS:
            self._last_heartbeat_ok = time.monotonic()
            self.request_rejoin("group is rebalancing")
        elif error == ErrorCode.FENCED_INSTANCE_ID:
            self._fence()
        elif error in MEMBERSHIP_LOST_ERRORS:
            self._reset_generation(reset_member_id=error != ErrorCode.ILLEGAL_GENERATION)
            self._partitions_lost = True
            self.request_rejoin(f"heartbeat failed with {error.name}")
        else:
            if error in COORDINATOR_ERRORS or error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                self.mark_coordinator_unknown(error.name)
            if (time.monotonic() - self._last_heartbeat_ok) * 1000 > self.session_timeout_ms:
                # The coordinator has expired us by now.
                self._reset_generation(reset_member_id=False)
                self._partitions_lost = True
                self.request_rejoin("no successful heartbeat within session.timeout.ms")

    def _fence(self) -> None:
        """Another consumer took over this group.instance.id: fatal, as in Kafka."""
        self._fatal_error = KafkaError(ErrorCode.FENCED_INSTANCE_ID, (
            f"The consumer with group.instance.id {self.group_instance_id} was fenced by "
            "another instance with the same id"))
        self._reset_generation(reset_member_id=True)
        self._wake()

    # ------------------------------------------------------------------------------ offsets

    #: OffsetCommit's and OffsetFetch's lowest versions (the consumer protocol needs v9,
    #: whose requests carry the member epoch)
    commit_min_version = 2
    fetch_min_version = 2

    def _commit_identity(self) -> tuple[int, str, str | None]:
        """(generation or member epoch, member id, instance id) an OffsetCommit carries: the
        member's while subscribed, a simple consumer's (-1, "") with `assign`."""
        if not self.subscribed:
            return -1, "", None
        if self.generation_id < 0:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS,
                             "Offset commit cannot be completed since the consumer is "
                             "undergoing a rebalance for auto partition assignment.")
        return self.generation_id, self.member_id, self.group_instance_id

    def _commit_failed(self, error: ErrorCode, generation: int) -> None:
        """A commit found the membership gone: rejoin (classic protocol; the consumer
        protocol learns it from its heartbeats)."""
        if generation == self.generation_id:
            self._reset_generation(reset_member_id=error == ErrorCode.UNKNOWN_MEMBER_ID)
            self._partitions_lost = True
            self.request_rejoin(f"commit failed with {error.name}")

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *,
                     timeout_ms: float | None = None) -> None:
        """OffsetCommit as this member (generation and member id while subscribed; as a
        simple consumer, generation -1, with `assign`)."""
        if not offsets:
            return
        self._commit_identity()  # fails at once while no generation is known
        R = m.OffsetCommitRequest
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for tp, offset in sorted(offsets.items()):
            by_topic[tp.topic].append(R.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset.offset,
                committed_leader_epoch=-1 if offset.leader_epoch is None else offset.leader_epoch,
                committed_metadata=offset.metadata))
        topics = [R.OffsetCommitRequestTopic(name=name, partitions=parts)
                  for name, parts in by_topic.items()]

        async def attempt(deadline: Deadline) -> None:
            # The identity is read per attempt: a retry carries the newest member epoch.
            generation, member_id, instance_id = self._commit_identity()
            request = R(group_id=self.group_id, generation_id_or_member_epoch=generation,
                        member_id=member_id, group_instance_id=instance_id, topics=topics)
            response = await self._send(request, deadline, min_version=self.commit_min_version)
            for topic in response.topics:
                for p in topic.partitions:
                    error = ErrorCode.from_code(p.error_code)
                    if error == ErrorCode.NONE:
                        continue
                    if error == ErrorCode.FENCED_INSTANCE_ID:
                        self._fence()
                        raise KafkaError(error)
                    if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                                 ErrorCode.STALE_MEMBER_EPOCH) and self.subscribed:
                        self._commit_failed(error, generation)
                        raise KafkaError(error, COMMIT_FAILED_MESSAGE)
                    if error == ErrorCode.REBALANCE_IN_PROGRESS and self.subscribed:
                        self.request_rejoin("commit found the group rebalancing")
                        raise KafkaError(error, "Offset commit cannot be completed since the "
                                                "consumer group is rebalancing")
                    raise KafkaError(error)

        await self._call("commitOffsets", attempt, timeout_ms)

    def _auto_commit_async(self) -> None:
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        if self._auto_commit_task is not None and not self._auto_commit_task.done():
            return
        offsets = self._positions()
        if not offsets:
            return

        async def run() -> None:
            try:
                await self.commit(offsets, timeout_ms=self.cluster.request_timeout_ms)
            except KafkaError as error:
                log.warning("group %s: auto commit failed: %s", self.group_id, error)

        self._auto_commit_task = asyncio.get_running_loop().create_task(run())

    def _fetch_identity(self) -> tuple[str, int] | None:
        """(member id, member epoch) an OffsetFetch v9+ carries; None: not a member (the
        classic protocol's OffsetFetch names no member)."""
        return None

    async def fetch_committed(self, partitions: Iterable[TopicPartition], *,
                              timeout_ms: float | None = None
                              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch (require_stable: offsets of pending transactions are waited for)."""
        wanted = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        if not wanted:
            return {}
        grouped = _by_topic(wanted)

        async def attempt(deadline: Deadline) -> dict[TopicPartition, OffsetAndMetadata | None]:
            connection = await self._find_coordinator(deadline)
            version = connection.pick_version(m.OffsetFetchRequest.API_KEY,
                                              min_version=self.fetch_min_version)
            request = offset_fetch_request(self.group_id, grouped, True, version,
                                           member=self._fetch_identity())
            response = await self._send(request, deadline, min_version=version)
            found: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
            found.update(committed_offsets(response, version))
            return found

        return await self._call("fetchCommittedOffsets", attempt, timeout_ms)

    # ------------------------------------------------------------------------------ leaving

    async def leave_group(self, reason: str) -> None:
        """LeaveGroup (dynamic members only) and forget the generation."""
        if self.generation_id >= 0 or self.member_id:
            if self.group_instance_id is None and self.member_id and self.coordinator:
                try:
                    deadline = Deadline(self.cluster.request_timeout_ms)
                    connection = await self._find_coordinator(deadline)
                    version = connection.pick_version(m.LeaveGroupRequest.API_KEY)
                    if version >= 3:  # v3+ names members (batch leave, KIP-345)
                        request = m.LeaveGroupRequest(
                            group_id=self.group_id, members=[m.LeaveGroupRequest.MemberIdentity(
                                member_id=self.member_id, reason=reason)])
                    else:
                        request = m.LeaveGroupRequest(group_id=self.group_id,
                                                      member_id=self.member_id)
                    response = await self._send(request, deadline, min_version=version)
                    log.info("group %s: member %s left (%s): %s", self.group_id,
                             self.member_id, reason, ErrorCode.from_code(response.error_code).name)
                except KafkaError as error:
                    log.info("group %s: LeaveGroup failed: %s", self.group_id, error)
            self._reset_generation(reset_member_id=self.group_instance_id is None)
        if self.subscribed:
            self.rejoin_needed = True

    async def unsubscribe(self) -> None:
        """Revoke the assignment (committing first with auto commit), then leave."""
        if self._join_task is not None:
            self._join_task.cancel()
            await asyncio.gather(self._join_task, return_exceptions=True)
            self._join_task = None
        owned = self.subscriptions.assignment
        if owned and self.subscribed:
            if self.auto_commit and self.generation_id >= 0:
                await self._commit_before_revoke()
            await self._invoke_listener("on_partitions_revoked", owned)
        self.topics, self.pattern = [], None
        await self.leave_group("the consumer unsubscribed from all topics")
        self.rejoin_needed = False

    async def close(self) -> None:
        """Commit (auto commit), revoke and leave; then stop the background tasks."""
        if self._closed:
            return
        try:
            if self.subscribed:
                await self.unsubscribe()
            elif self.auto_commit and self.subscriptions.assignment:
                await self._commit_before_revoke()
        finally:
            self._closed = True
            self._heartbeat_wakeup.set()
            tasks = [t for t in (self._heartbeat_task, self._join_task, self._auto_commit_task)
                     if t is not None]
            for task in tasks:
                if task is not self._auto_commit_task:
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            connection, self._connection = self._connection, None
            if connection is not None:
                await connection.close()
            await asyncio.gather(*self._closing, return_exceptions=True)


class GroupOffsetStore:
    """The `OffsetStore` of a consumer with a ``group.id``: committed offsets from the
    group's coordinator."""

    def __init__(self, coordinator: ConsumerCoordinator) -> None:
        self.coordinator = coordinator

    async def initial_offsets(self, partitions: Iterable[TopicPartition]
                              ) -> dict[TopicPartition, OffsetAndMetadata]:
        found = await self.coordinator.fetch_committed(partitions)
        return {tp: offset for tp, offset in found.items() if offset is not None}

    async def committed(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self.coordinator.fetch_committed(partitions)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        await self.coordinator.commit(offsets)

