"""The consumer's side of the KIP-848 consumer group protocol (``group.protocol=consumer``;
Kafka 4.0's ConsumerMembershipManager and HeartbeatRequestManager).

`ConsumerGroupMembership` keeps a subscribing consumer in its group with ConsumerGroupHeartbeat
alone: the coordinator computes the assignment (``group.remote.assignor`` names the server
assignor, null: the group's default), and each heartbeat answer may carry the member's new
assignment, which the member reconciles:

* it revokes first what the new assignment no longer has (committing the consumed positions
  first with auto commit, then ``on_partitions_revoked``), then takes the new partitions
  (``on_partitions_assigned``); partitions it keeps are never stopped (the cooperative,
  incremental rebalance KIP-848 promises);
* it acknowledges at once: the next heartbeat, sent right away, reports what it owns now; the
  coordinator then moves it to the next epoch and hands it partitions others released;
* its member id is its own (a UUID, KIP-1082) for its lifetime; it joins with epoch 0;
* FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the membership is gone, its partitions are lost
  (``on_partitions_lost``, no commit) and it rejoins with epoch 0;
* FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION,
  GROUP_MAX_SIZE_REACHED, INVALID_REQUEST and the like are fatal: the next `poll` raises them;
* it leaves with epoch -1 (a static member, ``group.instance.id``, with -2) on unsubscribe and
  close, after revoking; a consumer that does not poll for ``max.poll.interval.ms`` leaves
  (its partitions lost) and rejoins at its next `poll`.

Offsets: OffsetCommit v9+ and OffsetFetch v9+ carry the member id and epoch; a commit that finds
a newer epoch (STALE_MEMBER_EPOCH, the epoch moved on meanwhile) is retried with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from odradek.client.cluster import Cluster
from odradek.client.config import ClientConfig
from odradek.client.errors import KafkaConnectionError
from odradek.client.group import COORDINATOR_ERRORS, ConsumerCoordinator
from odradek.client.retry import Deadline
from odradek.client.subscription import OffsetAndMetadata, SubscriptionState
from odradek.client.types import TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

__all__ = ["ConsumerGroupMembership"]

log = logging.getLogger("odradek.client.consumer_group_protocol")

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2
#: the heartbeat errors after which the member rejoins with epoch 0, its partitions lost
FENCED_ERRORS = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
#: retried after a backoff, as Kafka's HeartbeatRequestManager does
RETRIED_ERRORS = COORDINATOR_ERRORS | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
#: OffsetCommit and OffsetFetch of a consumer-protocol member (they carry the member epoch)
MEMBER_EPOCH_VERSION = 9
#: the first ConsumerGroupHeartbeat version with SubscribedTopicRegex
REGEX_VERSION = 1

#: topic id -> partitions
IdAssignment = dict[uuid.UUID, frozenset[int]]


class ConsumerGroupMembership(ConsumerCoordinator):
    """Group membership over ConsumerGroupHeartbeat. Lives on the consumer's event loop.
    `generation_id` is the member epoch while the member has one (-1 otherwise), so the
    consumer's group metadata and commits read it as they read a classic generation."""

    commit_min_version = MEMBER_EPOCH_VERSION
    fetch_min_version = MEMBER_EPOCH_VERSION

    def __init__(self, cluster: Cluster, config: ClientConfig,
                 subscriptions: SubscriptionState, drop_partitions: Any, wake: Any) -> None:
        super().__init__(cluster, config, subscriptions, drop_partitions, wake)
        self.remote_assignor: str | None = config["group.remote.assignor"] or None
        self.member_id = str(uuid.uuid4())
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = 0  # the coordinator says; the first heartbeat goes now
        #: the last assignment the coordinator sent (by topic id), until it is reconciled
        self._target: IdAssignment | None = None
        #: set when the poll timer expired: the member left and rejoins at the next poll
        self._left_for_poll_timeout = False
        #: what it owns changed: the next heartbeat (at once) acknowledges it
        self._ack_pending = False
        #: the pattern's topics are resolved again for the next heartbeat
        self._resolve_pattern = True
        #: what the last heartbeat said (None: the next one says everything)
        self._last_sent: dict[str, Any] | None = None
        #: whether on_partitions_assigned ran since the member (re)joined
        self._assigned_since_join = False

    @property
    def stable(self) -> bool:
        return self.member_epoch > 0 and self._target is None

    def _set_epoch(self, epoch: int) -> None:
        self.member_epoch = epoch
        self.generation_id = epoch if epoch > 0 else -1

    # ------------------------------------------------------------------------------ polling

    def request_rejoin(self, reason: str) -> None:
        """The subscription (or a pattern's topics) changed: the next heartbeat says so at
        once; the coordinator decides whether the assignment changes."""
        log.info("group %s: member %s sends its subscription now: %s", self.group_id,
                 self.member_id, reason)
        self._resolve_pattern = True
        self._heartbeat_wakeup.set()

    async def poll(self, deadline: Deadline) -> None:
        """Starts the heartbeats when subscribed; raises a fatal membership error;
        auto-commits when due. Never waits: assignments arrive in the background and wake the
        consumer's poll."""
        self.last_poll = time.monotonic()
        self._check_heartbeat_task()
        if self._fatal_error is not None:
            raise self._fatal_error
        if self.subscribed:
            if self._left_for_poll_timeout:
                self._left_for_poll_timeout = False
                self._heartbeat_wakeup.set()
            self._start_heartbeat()
        if self.auto_commit and (self.stable or not self.subscribed) and \
                time.monotonic() >= self._next_auto_commit:
            self._auto_commit_async()

    # ------------------------------------------------------------------------------ heartbeats

    async def _heartbeat_loop(self) -> None:
        backoff = 0
        while not self._closed and self.subscribed and self._fatal_error is None:
            if self._poll_timer_expired():
                await self._leave_for_poll_timeout()
            if self._left_for_poll_timeout:
                await self._heartbeat_wakeup.wait()
                self._heartbeat_wakeup.clear()
                continue
            error = await self._heartbeat_once()
            if self._closed or not self.subscribed:
                return
            if error in RETRIED_ERRORS:
                delay = self.cluster.retry_backoff.delay_ms(backoff) / 1000
                backoff += 1
            else:
                backoff = 0
                # Right away after a fence (the rejoin) or a reconciliation (the
                # acknowledgement).
                delay = 0 if error is not None or self._ack_pending \
                    else self.heartbeat_interval_ms / 1000
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await self._heartbeat_wakeup.wait()
                except TimeoutError:
                    pass
            self._heartbeat_wakeup.clear()

    def _poll_timer_expired(self) -> bool:
        return self.member_epoch > 0 and \
            (time.monotonic() - self.last_poll) * 1000 > self.rebalance_timeout_ms

    def _heartbeat_request(self) -> m.ConsumerGroupHeartbeatRequest:
        """The next heartbeat. As Kafka's client, only what changed since the last one is sent
        (null: unchanged); a join, or the first heartbeat after an error, sends everything."""
        R = m.ConsumerGroupHeartbeatRequest
        joining = self.member_epoch == JOIN_EPOCH
        full = joining or self._last_sent is None
        last = self._last_sent or {}
        names = sorted(set(self.subscribed_topics if self.pattern is not None else self.topics))
        owned = _by_topic_id(self.subscriptions.assignment, self.cluster)
        sent = {"names": names, "owned": owned, "assignor": self.remote_assignor,
                "regex": self.server_regex}

        def changed(key: str) -> bool:
            return full or last.get(key) != sent[key]

        request = R(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            instance_id=self.group_instance_id if full else None,
            rack_id=(self.rack_id or None) if full else None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=names if changed("names") else None,
            # As Kafka's client: the regex when it changed (or on a full heartbeat), "" to
            # drop one sent before.
            subscribed_topic_regex=(self.server_regex or "") if changed("regex") and (
                self.server_regex is not None or last.get("regex") is not None) else None,
            server_assignor=self.remote_assignor if changed("assignor") else None,
            topic_partitions=None if not changed("owned") else [] if joining else [
                R.TopicPartitions(topic_id=topic_id, partitions=sorted(parts))
                for topic_id, parts in sorted(owned.items(), key=lambda item: str(item[0]))])
        self._last_sent = sent
        return request

    async def _heartbeat_once(self) -> ErrorCode | None:
        """One heartbeat and what its answer asks; returns the error (None: none)."""
        deadline = Deadline(self.cluster.request_timeout_ms)
        try:
            if self.pattern is not None and (self._resolve_pattern
                                             or self.member_epoch == JOIN_EPOCH):
                self.subscribed_topics = await self._resolve_topics(deadline)
                self._resolve_pattern = False
            elif self.server_regex is not None:
                # The coordinator resolves the regex: the subscription is what it assigned.
                self.subscribed_topics = sorted({tp.topic for tp in self.subscriptions.assignment})
            elif self.pattern is None:
                self.subscribed_topics = list(self.topics)
            sent_epoch = self.member_epoch
            request = self._heartbeat_request()
            self._ack_pending = False
            # SubscribedTopicRegex came with ConsumerGroupHeartbeat v1.
            response = await self._send(request, deadline, min_version=(
                REGEX_VERSION if self.server_regex is not None else None))
            error = ErrorCode.from_code(response.error_code)
        except KafkaConnectionError:
            self._last_sent = None
            return ErrorCode.NETWORK_EXCEPTION
        except KafkaError as exc:
            error = exc.code
            response = None
        if error != ErrorCode.NONE:
            self._last_sent = None  # the next heartbeat is a full one
        if self._closed or not self.subscribed:
            return None
        if error == ErrorCode.NONE:
            assert response is not None
            self._last_heartbeat_ok = time.monotonic()
            if response.member_id:
                self.member_id = response.member_id
            if response.heartbeat_interval_ms > 0:
                self.heartbeat_interval_ms = response.heartbeat_interval_ms
            if sent_epoch != self.member_epoch:
                return None  # fenced meanwhile; this answer is about the old membership
            self._set_epoch(response.member_epoch)
            if response.assignment is not None:
                self._target = {tp.topic_id: frozenset(tp.partitions)
                                for tp in response.assignment.topic_partitions}
            if self._target is not None:
                await self._reconcile()
            return None
        if error in FENCED_ERRORS:
            log.info("group %s: member %s was fenced (%s) in epoch %d; rejoining",
                     self.group_id, self.member_id, error.name, self.member_epoch)
            await self._lose_partitions()
            return error
        if error in RETRIED_ERRORS:
            self.mark_coordinator_unknown(error.name)
            return error
        message = response.error_message if response is not None else None
        self._fatal_error = KafkaError(error, message)
        log.error("group %s: member %s: fatal heartbeat error %s: %s", self.group_id,
                  self.member_id, error.name, message)
        if error == ErrorCode.FENCED_INSTANCE_ID:
            self._fence()
        self._wake()
        return error

    # ------------------------------------------------------------------------------ reconciling

    async def _reconcile(self) -> None:
        """Moves the consumer to the coordinator's assignment: revoke, then assign. Topic ids
        the metadata does not know yet wait for a refresh (the next heartbeat tries again)."""
        target = self._target
        assert target is not None
        names = await self._topic_names(target)
        wanted = {TopicPartition(names[topic_id], p)
                  for topic_id, parts in target.items() if topic_id in names for p in parts}
        owned = self.subscriptions.assignment
        revoked = owned - wanted
        added = wanted - owned
        if revoked:
            if self.auto_commit:
                await self._commit_before_revoke()
            await self._invoke_listener("on_partitions_revoked", revoked)
        self._drop_partitions(self.subscriptions.assign_from_group(sorted(wanted)))
        if revoked or added:
            self._ack_pending = True
            log.info("group %s: member %s in epoch %d: revoked %d, assigned %d partition(s), "
                     "now %d", self.group_id, self.member_id, self.member_epoch, len(revoked),
                     len(added), len(wanted))
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        if len(names) == len(target):
            self._target = None
        if added or revoked or not self._assigned_since_join:
            # Kafka calls it after each reconciliation, and once after a join even when
            # nothing is assigned; not for a heartbeat that confirms the same assignment.
            self._assigned_since_join = True
            await self._invoke_listener("on_partitions_assigned", added)
        self._wake()

    async def _topic_names(self, target: Mapping[uuid.UUID, frozenset[int]]
                           ) -> dict[uuid.UUID, str]:
        names = {topic_id: self.cluster.metadata.topic_name(topic_id) for topic_id in target}
        if any(name is None for name in names.values()):
            try:
                await self.cluster.refresh_metadata(None, deadline=self.cluster.deadline())
            except KafkaError as error:
                log.debug("metadata refresh for the assignment failed: %s", error)
            names = {topic_id: self.cluster.metadata.topic_name(topic_id)
                     for topic_id in target}
        return {topic_id: name for topic_id, name in names.items() if name is not None}

    async def _lose_partitions(self) -> None:
        """The membership is gone: the partitions may be another member's already (no
        commit); rejoin with epoch 0 under the same member id."""
        owned = self.subscriptions.assignment
        self._set_epoch(JOIN_EPOCH)
        self._target = None
        self._assigned_since_join = False
        if owned:
            await self._invoke_listener("on_partitions_lost", owned)
        self._drop_partitions(self.subscriptions.assign_from_group([]))
        self._wake()

    async def _revoke_all(self) -> None:
        owned = self.subscriptions.assignment
        if owned:
            if self.auto_commit and self.member_epoch > 0:
                await self._commit_before_revoke()
            await self._invoke_listener("on_partitions_revoked", owned)
        self._drop_partitions(self.subscriptions.assign_from_group([]))

    # ------------------------------------------------------------------------------ leaving

    async def _leave_for_poll_timeout(self) -> None:
        log.warning("group %s: consumer poll timeout has expired (more than "
                    "max.poll.interval.ms=%d between polls); leaving the group",
                    self.group_id, self.rebalance_timeout_ms)
        await self._send_leave("consumer poll timeout has expired.")
        await self._lose_partitions()
        self._left_for_poll_timeout = True

    async def _send_leave(self, reason: str) -> None:
        if self.member_epoch <= 0:
            return  # not a member (never joined, fenced, or left already)
        epoch = LEAVE_STATIC_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH
        try:
            deadline = Deadline(self.cluster.request_timeout_ms)
            response = await self._send(m.ConsumerGroupHeartbeatRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
                instance_id=self.group_instance_id), deadline)
            log.info("group %s: member %s left (%s): %s", self.group_id, self.member_id,
                     reason, ErrorCode.from_code(response.error_code).name)
        except KafkaError as error:
            log.info("group %s: leaving failed: %s", self.group_id, error)
        self._set_epoch(JOIN_EPOCH)
        self._assigned_since_join = False

    async def leave_group(self, reason: str) -> None:
        await self._send_leave(reason)

    async def unsubscribe(self) -> None:
        """Revoke the assignment (committing first with auto commit), then leave."""
        task = self._heartbeat_task
        self._heartbeat_task = None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.subscribed and self._fatal_error is None:
            await self._revoke_all()
            self.topics, self.pattern, self.server_regex = [], None, None
            await self._send_leave("the consumer unsubscribed from all topics")
        self.topics, self.pattern, self.server_regex = [], None, None
        self._target = None

    # ------------------------------------------------------------------------------ offsets

    def _commit_failed(self, error: ErrorCode, generation: int) -> None:
        """The heartbeats find out about a lost membership; a commit only fails."""

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *,
                     timeout_ms: float | None = None) -> None:
        """OffsetCommit with the member epoch; STALE_MEMBER_EPOCH is retried once the epoch
        moved on (the commit raced with an epoch bump), as Kafka's commitSync does."""
        while True:
            epoch = self.member_epoch
            try:
                await super().commit(offsets, timeout_ms=timeout_ms)
                return
            except KafkaError as error:
                if error.code != ErrorCode.STALE_MEMBER_EPOCH or self.member_epoch == epoch \
                        or self.member_epoch <= 0:
                    raise

    async def fetch_committed(self, partitions: Any, *, timeout_ms: float | None = None
                              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch with the member epoch; retried when the epoch moved on meanwhile
        (STALE_MEMBER_EPOCH), as Kafka's client does."""
        wanted = list(partitions)
        while True:
            epoch = self.member_epoch
            try:
                return await super().fetch_committed(wanted, timeout_ms=timeout_ms)
            except KafkaError as error:
                if error.code != ErrorCode.STALE_MEMBER_EPOCH or self.member_epoch == epoch:
                    raise

    def _fetch_identity(self) -> tuple[str, int] | None:
        if self.subscribed and self.member_epoch > 0:
            return self.member_id, self.member_epoch
        return None


def _by_topic_id(partitions: set[TopicPartition], cluster: Cluster) -> IdAssignment:
    """The owned partitions by topic id (the heartbeat names topics by id)."""
    out: dict[uuid.UUID, set[int]] = {}
    for tp in partitions:
        topic = cluster.metadata.topics.get(tp.topic)
        if topic is not None and topic.topic_id is not None:
            out.setdefault(topic.topic_id, set()).add(tp.partition)
    return {topic_id: frozenset(parts) for topic_id, parts in out.items()}
