"""Partitions hosted by this broker: leadership, appends, reads, the high watermark, and the
commit boundary.

The replica manager follows the metadata image: when the image says this broker hosts a
partition, the partition's log is created/opened; when a topic disappears, its logs are deleted.
Appends and reads go through `Partition`, which checks leadership and epochs the way Kafka's
Partition class does, and the handlers reach storage only through this module.

Appended is not committed: an append returns a `PendingAppend` whose `committed` future
completes when the partition's high watermark passes the batch (Kafka's delayed produce). The
high watermark is the smallest log end offset in the ISR: the leader's own, and the positions
its followers report (`update_follower_fetch_state`). With one replica in the ISR it moves right
after the append, through the same path replication uses.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.commit import CommitWaiters, wait_for_commits
from odradek.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.server.purgatory import Purgatory
from odradek.server.quotas import ReplicationQuota
from odradek.server.replica_selector import ReplicaSelector, ReplicaView
from odradek.server.topic_stats import BrokerTopicStats
from odradek.storage import LogManager
from odradek.storage.config import LogConfig
from odradek.storage.log import FetchIsolation, Log, LogEnd, TimestampAndOffset
from odradek.storage.segment import FetchData
from odradek.storage.txn_index import AbortedTxn
from odradek.storage.validator import AppendOrigin

log = logging.getLogger("odradek.replica")

# ListOffsets special timestamps (the others are resolved by the storage log).
LATEST_TIMESTAMP = -1
LATEST_TIERED_TIMESTAMP = -5

NO_EPOCH = -1
ACKS_ALL = -1
LEADER_RECOVERED = 0  # LeaderRecoveryState (KIP-704); 1 is RECOVERING after an unclean election


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int


@dataclass(slots=True)
class PendingAppend:
    """An append done locally; for acks=all, `committed` completes when the high watermark
    passes `result.last_offset` (None when it already had, and for acks=0/1)."""

    partition: Partition
    result: AppendResult
    committed: asyncio.Future[int] | None

    def outcome(self) -> ErrorCode:
        """After the wait: NONE once committed, else why not (the caller's timeout when the
        future is still pending)."""
        future = self.committed
        if future is None:
            return ErrorCode.NONE
        if not future.done():
            return ErrorCode.REQUEST_TIMED_OUT
        error = future.exception()
        if error is not None:
            return error.code if isinstance(error, KafkaError) else \
                ErrorCode.UNKNOWN_SERVER_ERROR
        return self.partition.check_enough_replicas_after_append()


@dataclass(slots=True)
class ReadResult:
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FetchData | None = None  # a file region (sendfile-able)
    leader_epoch: int = -1
    diverging_epoch: tuple[int, int] | None = None
    preferred_read_replica: int = -1  # KIP-392: read from this replica instead
    # read_committed only: the aborted transactions overlapping the records returned (None
    # for other isolations, which Fetch answers with a null list).
    aborted_transactions: list[AbortedTxn] | None = None


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """Who is fetching (Fetch v11+ from a consumer, KIP-392): its rack (`client.rack`) and the
    listener it came in on (a preferred replica must be reachable there)."""

    rack_id: str
    listener: str


UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of a follower (Kafka's Replica): where its log ends, when it last
    fetched, and when it was last caught up with the leader's log end."""

    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = -1
    # The leader's log end offset when the follower last fetched: reaching it by the next
    # fetch means the follower was caught up at the last fetch's time.
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    broker_epoch: int = -1  # from the follower's fetch; AlterPartition names it (KIP-903)

    def update(self, fetch_offset: int, log_start_offset: int, now_ms: int,
               leader_end_offset: int, broker_epoch: int) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_end_offset = leader_end_offset
        self.last_fetch_ms = now_ms
        self.broker_epoch = broker_epoch

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        """Kafka's isCaughtUp: at the leader's log end, or was within the last `max_lag_ms`."""
        return (self.log_end_offset == leader_end_offset
                or now_ms - self.last_caught_up_ms <= max_lag_ms)

    def reset_for_new_leader(self, now_ms: int, in_sync: bool) -> None:
        """A new leader knows nothing of where its followers are; an ISR member gets a full
        lag period to show it is still caught up."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_end_offset = UNKNOWN_OFFSET
        self.last_fetch_ms = -1
        self.last_caught_up_ms = now_ms if in_sync else 0
        self.broker_epoch = -1


@dataclass(slots=True)
class IsrChange:
    """An ISR change the leader proposes to the controller (AlterPartition)."""

    partition: Partition
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: dict[int, int]
    # KIP-704: an expansion reports the leader recovered from an unclean election (Kafka's
    # prepareIsrExpand); a shrink keeps the state it has.
    leader_recovery_state: int = 0


class Transition(enum.Enum):
    """What a metadata change did to this broker's replica of a partition."""

    NONE = "none"
    BECAME_LEADER = "leader"
    BECAME_FOLLOWER = "follower"  # a new leader or leader epoch to fetch from
    LEADERLESS = "leaderless"


@dataclass(slots=True)
class IsrChangeStats:
    """Kafka's ReplicaManager meters IsrShrinksPerSec, IsrExpandsPerSec and
    FailedIsrUpdatesPerSec (server.metrics): the ISR changes partitions this broker leads
    proposed, counted once the controller's decision reaches the leader -- its AlterPartition
    answer, or the metadata when that comes first (here it often does: brokers long-poll the
    metadata log) -- as Kafka's Partition counts its pending shrinks and expansions."""

    shrinks: int = 0
    expands: int = 0
    failed: int = 0


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    broker_id: int
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = LEADER_RECOVERED
    followers: dict[int, FollowerState] = field(default_factory=dict)
    commits: CommitWaiters = field(default_factory=CommitWaiters)
    replica_lag_time_max_ms: int = 30_000
    # Whether a broker may join the ISR now (registered, unfenced, not shutting down, and of
    # the broker epoch given, -1 for any); the replica manager asks its metadata image.
    isr_eligible: Callable[[int, int], bool] = field(default=lambda _id, _epoch: True)
    # The ISR of an AlterPartition in flight (Kafka's pending state): the high watermark
    # counts its added members already (the "maximal ISR", KIP-497); nothing else is proposed
    # until the controller answers or the metadata moves on.
    pending_isr: tuple[int, ...] | None = None
    isr_stats: IsrChangeStats = field(default_factory=IsrChangeStats)
    leader_epoch_start_offset: int = 0
    # The leader epoch the replica fetcher is following (None: not following anyone).
    following_epoch: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    @property
    def min_insync_replicas(self) -> int:
        """Kafka's effectiveMinIsr: `min.insync.replicas`, but never more than the replicas
        there are."""
        return min(self.log.config.min_insync_replicas, max(1, len(self.replicas)))

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    def apply_registration(self, reg: PartitionRegistration, now_ms: int = 0) -> Transition:
        """Takes the partition's state from the metadata image (Kafka's makeLeader /
        makeFollower); returns what changed for this replica."""
        new_epoch = reg.leader_epoch != self.leader_epoch
        became_leader = reg.leader == self.broker_id and (not self.is_leader or new_epoch)
        lost_leadership = self.is_leader and reg.leader != self.broker_id
        leader_changed = reg.leader != self.leader or new_epoch
        self.leader = reg.leader
        self.leader_epoch = reg.leader_epoch
        if reg.partition_epoch != self.partition_epoch:
            if self.pending_isr is not None and not new_epoch and \
                    set(reg.isr) == set(self.pending_isr):
                self._count_isr_change(self.pending_isr)  # before its answer: decided
            self.pending_isr = None  # the controller decided; propose again from here
        self.partition_epoch = reg.partition_epoch
        self.replicas = reg.replicas
        self.isr = reg.isr
        self.leader_recovery_state = reg.leader_recovery_state
        if lost_leadership:
            self.commits.fail_all(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        if not self.is_leader:
            self.followers = {}
            self.pending_isr = None
            if reg.leader < 0:
                return Transition.LEADERLESS
            return Transition.BECAME_FOLLOWER if leader_changed else Transition.NONE
        self.followers = {r: self.followers.get(r) or FollowerState()
                          for r in reg.replicas if r != self.broker_id}
        if became_leader:
            # A new leader epoch starts at the current log end (Kafka's epoch cache entry).
            end = self.log.log_end_offset
            self.log.leader_epoch_cache.assign(reg.leader_epoch, end)
            self.leader_epoch_start_offset = end
            self.pending_isr = None
            self.following_epoch = None
            for replica, follower in self.followers.items():
                follower.reset_for_new_leader(now_ms, replica in reg.isr)
            self.commits.reset(self.log.high_watermark)
        self.maybe_increment_high_watermark(now_ms)
        return Transition.BECAME_LEADER if became_leader else Transition.NONE

    def maybe_increment_high_watermark(self, now_ms: int = 0) -> bool:
        """HW = the smallest log end offset among the maximal ISR (the leader's own included)
        and the followers caught up enough to join it (so a follower catching up is not
        outrun for ever), held while the ISR is below min.insync.replicas; moving it
        completes the appends waiting for it."""
        if not self.is_leader:
            return False
        if len(self.isr) < self.min_insync_replicas:
            # Kafka 3.7+ (KIP-966): below min.insync.replicas nothing becomes committed, so a
            # leader elected from the ISR later cannot lack what consumers were shown.
            return False
        leader_end = self.log.log_end_offset
        new_hw = leader_end
        isr = self.maximal_isr
        max_lag = self.replica_lag_time_max_ms
        for replica, follower in self.followers.items():
            if follower.log_end_offset >= new_hw:
                continue
            if replica in isr or (follower.is_caught_up(leader_end, now_ms, max_lag)
                                  and self.isr_eligible(replica, follower.broker_epoch)):
                new_hw = follower.log_end_offset
        if new_hw < 0:
            return False
        moved = self.log.maybe_increment_high_watermark(new_hw)
        if moved:
            self.commits.advance(self.log.high_watermark)
        return moved

    def follower_state(self, replica_id: int, current_leader_epoch: int) -> FollowerState:
        """The state of a follower that fetches from this leader; Kafka's errors for a broker
        that is not a replica (UNKNOWN_LEADER_EPOCH when it named an epoch: it may be a replica
        this leader has not heard of yet, as in a reassignment)."""
        follower = self.followers.get(replica_id)
        if follower is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_LEADER_EPOCH if current_leader_epoch != NO_EPOCH
                else ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"Replica {replica_id} is not recognized as a valid replica of "
                f"{self.topic}-{self.index} in leader epoch {self.leader_epoch} with "
                f"partition epoch {self.partition_epoch}")
        return follower

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    log_start_offset: int, leader_end_offset: int,
                                    broker_epoch: int, now_ms: int) -> tuple[bool, IsrChange | None]:
        """A follower fetched from `fetch_offset` (so it has everything below it). Returns
        whether the high watermark moved, and an ISR expansion to propose if the follower
        caught up."""
        follower = self.follower_state(replica_id, NO_EPOCH)
        previous_end = follower.log_end_offset
        follower.update(fetch_offset, log_start_offset, now_ms, leader_end_offset, broker_epoch)
        expansion = self._maybe_expand_isr(replica_id, follower)
        moved = previous_end != fetch_offset and self.maybe_increment_high_watermark(now_ms)
        return moved, expansion

    def _maybe_expand_isr(self, replica_id: int, follower: FollowerState) -> IsrChange | None:
        """Kafka's maybeExpandIsr: a follower joins the ISR once its log reaches the high
        watermark and the start of the current leader epoch (else it could lead without
        committed data between them)."""
        if self.pending_isr is not None or replica_id in self.isr:
            return None
        end = follower.log_end_offset
        if end < self.log.high_watermark or end < self.leader_epoch_start_offset:
            return None
        if not self.isr_eligible(replica_id, follower.broker_epoch):
            return None
        return self._propose_isr(self.isr + (replica_id,), LEADER_RECOVERED)

    def maybe_shrink_isr(self, now_ms: int) -> IsrChange | None:
        """Kafka's maybeShrinkIsr: followers not caught up within `replica.lag.time.max.ms`
        leave the ISR."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        leader_end = self.log.log_end_offset
        out_of_sync = []
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            if follower is None or not follower.is_caught_up(leader_end, now_ms,
                                                             self.replica_lag_time_max_ms):
                out_of_sync.append(replica)
        if not out_of_sync:
            return None
        new_isr = tuple(r for r in self.isr if r not in out_of_sync)
        log.info("%s-%d: shrinking ISR from %s to %s (leader end offset %d, high watermark "
                 "%d; out of sync: %s)", self.topic, self.index, list(self.isr), list(new_isr),
                 leader_end, self.log.high_watermark,
                 ", ".join(f"{r} (end offset {self.followers[r].log_end_offset if r in self.followers else -1})"
                           for r in out_of_sync))
        return self._propose_isr(new_isr, self.leader_recovery_state)

    def _propose_isr(self, new_isr: tuple[int, ...], leader_recovery_state: int) -> IsrChange:
        self.pending_isr = new_isr
        epochs = {r: (self.followers[r].broker_epoch if r in self.followers else -1)
                  for r in new_isr}
        return IsrChange(self, self.leader_epoch, self.partition_epoch, new_isr, epochs,
                         leader_recovery_state)

    def on_isr_change_answer(self, change: IsrChange, error: ErrorCode, isr: tuple[int, ...],
                             leader_epoch: int, partition_epoch: int, now_ms: int) -> bool:
        """The controller's answer to `change`; returns whether the high watermark moved."""
        if self.pending_isr != change.new_isr or self.leader_epoch != change.leader_epoch:
            return False  # the metadata moved on meanwhile; that state rules
        self.pending_isr = None
        # Kafka's handleAlterPartitionUpdate/-Error: an error, or an answer of another leader
        # epoch, is a failed update; an answer of an older partition epoch is ignored; else the
        # proposed change took effect (an equal epoch: the ISR was already so).
        if error != ErrorCode.NONE:
            self.isr_stats.failed += 1
            log.info("%s-%d: ISR change to %s refused: %s", self.topic, self.index,
                     list(change.new_isr), error.name)
            return False
        if leader_epoch != self.leader_epoch:
            self.isr_stats.failed += 1
        elif partition_epoch >= self.partition_epoch:
            self._count_isr_change(change.new_isr)
            if partition_epoch > self.partition_epoch:
                self.isr = isr
                self.partition_epoch = partition_epoch
        return self.maybe_increment_high_watermark(now_ms)

    def _count_isr_change(self, proposed: tuple[int, ...]) -> None:
        if len(proposed) > len(self.isr):
            self.isr_stats.expands += 1
        else:
            self.isr_stats.shrinks += 1

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        if current_leader_epoch == NO_EPOCH or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def check_enough_replicas_after_append(self) -> ErrorCode:
        if len(self.maximal_isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def append_as_leader(self, records: bytes | bytearray | memoryview, required_acks: int,
                         now_ms: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> PendingAppend:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        min_isr = self.min_insync_replicas
        if required_acks == ACKS_ALL and len(self.isr) < min_isr:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {set(self.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}",
            )
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch,
                                         now_ms=now_ms, origin=origin)
        result = AppendResult(info.first_offset, info.last_offset, info.log_append_time,
                              info.log_start_offset)
        if not info.duplicate:
            self.maybe_increment_high_watermark(now_ms)
        # Only acks=all waits for the commit (acks=0/1 are answered at once).
        committed = None if (required_acks != ACKS_ALL
                             or info.last_offset < self.log.high_watermark) \
            else self.commits.wait(info.last_offset)
        return PendingAppend(self, result, committed)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> int:
        """Appends what the leader sent (with its offsets); returns the new log end offset."""
        self.log.append_as_follower(records)
        return self.log.log_end_offset

    def readable_bytes(self, start: LogEnd, isolation: FetchIsolation) -> int:
        return self.log.readable_bytes(start, isolation)


class FollowerHooks(Protocol):
    """Who fetches for this broker's follower replicas (the replica fetcher manager)."""

    def follow(self, partitions: Iterable[Partition]) -> None: ...

    def unfollow(self, keys: Iterable[tuple[str, int]]) -> None: ...


# Sends ISR changes to the controller (the AlterPartition manager) and answers each.
IsrSubmit = Callable[[IsrChange], None]


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager, default_log_config: LogConfig,
                 clock: Clock = SYSTEM_CLOCK, *, replica_lag_time_max_ms: int = 30_000) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.default_log_config = default_log_config
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.by_topic_id: dict[uuid.UUID, str] = {}
        self.fetch_purgatory = Purgatory(clock)
        self.image: MetadataImage | None = None
        self.fetchers: FollowerHooks | None = None
        self.submit_isr_change: IsrSubmit | None = None
        # leader.replication.throttled.rate over leader.replication.throttled.replicas.
        self.leader_quota: ReplicationQuota | None = None
        self.replica_selector: ReplicaSelector | None = None  # replica.selector.class
        self.topic_stats = BrokerTopicStats()  # BrokerTopicMetrics (server.metrics)
        self.isr_stats = IsrChangeStats()

    # -- following the metadata image
    def log_config_for(self, image: MetadataImage, topic: str) -> LogConfig:
        return LogConfig.from_props(image.topic_config(topic), defaults=self.default_log_config)

    def isr_eligible(self, broker_id: int, broker_epoch: int) -> bool:
        """Kafka's isReplicaIsrEligible: registered, unfenced, not shutting down, and (when the
        follower's fetch named one) of the registered broker epoch."""
        image = self.image
        reg = image.brokers.get(broker_id) if image is not None else None
        return (reg is not None and not reg.fenced and not reg.in_controlled_shutdown
                and broker_epoch in (-1, reg.epoch))

    def prepare_image(self, image: MetadataImage) -> Callable[[], None] | None:
        """The metadata quorum's preparer: the logs of partitions that `image` places on
        this broker and that have none yet, to be created on a worker thread before the image
        is applied. Creating a log opens and writes several files per partition (tens of ms
        for a 50-partition topic, seconds on a slow disk), which on the event loop would stall
        every request; Kafka too creates them outside its request handlers."""
        previous = self.image
        missing: list[tuple[str, int, Any, Any]] = []
        for topic in image.topics_by_id.values():
            if previous is not None and previous.topics_by_id.get(topic.topic_id) is topic:
                continue
            config = None
            for index, reg in topic.partitions.items():
                if self.broker_id not in reg.replicas or (topic.name, index) in self.partitions:
                    continue
                if self.log_manager.get_log(topic.name, index) is not None:
                    continue
                config = config or self.log_config_for(image, topic.name)
                missing.append((topic.name, index, config, topic.topic_id))
        if not missing:
            return None

        def create_logs() -> None:
            for name, index, config, topic_id in missing:
                self.log_manager.get_or_create_log(name, index, config, topic_id)

        return create_logs

    def apply_image(self, image: MetadataImage) -> None:
        previous = self.image
        self.image = image
        live_ids = set(image.topics_by_id)
        follow: list[Partition] = []
        unfollow: list[tuple[str, int]] = []
        # Topics removed from the image: drop the partitions and delete their logs.
        if previous is not None:
            for topic_id, topic in previous.topics_by_id.items():
                if topic_id not in live_ids:
                    unfollow.extend(self._remove_topic(topic))
        brokers_changed = previous is None or previous.brokers is not image.brokers
        for topic in image.topics_by_id.values():
            previous_topic = previous.topics_by_id.get(topic.topic_id) if previous else None
            if previous_topic is topic:
                continue
            self._apply_topic(image, topic, follow, unfollow)
        if brokers_changed:
            # A follower's broker came back (or changed epoch): it may be eligible for the ISR
            # again; a follower whose leader moved listeners is reconnected by its fetcher.
            now = self.clock.time_ms()
            for partition in self.partitions.values():
                if partition.is_leader and partition.maybe_increment_high_watermark(now):
                    self.fetch_purgatory.notify(partition.key)
        if previous is not None and previous.configs is not image.configs:
            for topic in image.topics_by_id.values():
                if previous.topic_config(topic.name) != image.topic_config(topic.name):
                    self._update_config(image, topic)
        self.by_topic_id = {t.topic_id: t.name for t in image.topics_by_id.values()}
        if self.fetchers is not None:
            if unfollow:
                self.fetchers.unfollow(unfollow)
            if follow:
                self.fetchers.follow(follow)

    def _apply_topic(self, image: MetadataImage, topic: TopicImage, follow: list[Partition],
                     unfollow: list[tuple[str, int]]) -> None:
        config = None
        now = self.clock.time_ms()
        for index, reg in topic.partitions.items():
            key = (topic.name, index)
            if self.broker_id not in reg.replicas:
                if self._remove_partition(key, delete=True):
                    unfollow.append(key)
                continue
            partition = self.partitions.get(key)
            if partition is None:
                config = config or self.log_config_for(image, topic.name)
                storage_log = self.log_manager.get_or_create_log(
                    topic.name, index, config, topic.topic_id
                )
                partition = Partition(topic.name, index, topic.topic_id, storage_log,
                                      self.broker_id,
                                      replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                                      isr_eligible=self.isr_eligible,
                                      isr_stats=self.isr_stats)
                self.partitions[key] = partition
            transition = partition.apply_registration(reg, now)
            if transition is Transition.BECAME_FOLLOWER or (
                    transition is Transition.NONE and not partition.is_leader
                    and partition.leader >= 0 and partition.following_epoch is None):
                follow.append(partition)
            elif (transition in (Transition.BECAME_LEADER, Transition.LEADERLESS)
                  and partition.following_epoch is not None):
                partition.following_epoch = None
                unfollow.append(key)
            self.fetch_purgatory.notify(key)

    def _update_config(self, image: MetadataImage, topic: TopicImage) -> None:
        config = self.log_config_for(image, topic.name)
        for index in topic.partitions:
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                partition.log.update_config(config)

    def _remove_topic(self, topic: TopicImage) -> list[tuple[str, int]]:
        self.topic_stats.forget(topic.name)
        return [(topic.name, index) for index in topic.partitions
                if self._remove_partition((topic.name, index), delete=True)]

    def _remove_partition(self, key: tuple[str, int], delete: bool) -> bool:
        """Stops hosting a partition; returns whether it was hosted here."""
        partition = self.partitions.pop(key, None)
        if partition is not None:
            partition.following_epoch = None
            partition.commits.fail_all(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            if delete:
                self.log_manager.delete_log(*key)
        self.fetch_purgatory.notify(key)
        return partition is not None

    def shutdown(self) -> None:
        """Long polls answer now; appends still waiting for their commit fail (the client
        retries against the next leader)."""
        self.fetch_purgatory.close()
        for partition in self.partitions.values():
            partition.commits.fail_all(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                  "the broker is shutting down"))

    # -- lookups
    def get_partition(self, topic: str, index: int) -> tuple[Partition | None, ErrorCode]:
        partition = self.partitions.get((topic, index))
        if partition is not None:
            return partition, ErrorCode.NONE
        image = self.image
        topic_image = image.topics_by_name.get(topic) if image else None
        if topic_image is None or index not in topic_image.partitions:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER

    def leader_partition(self, topic: str, index: int,
                         current_leader_epoch: int = NO_EPOCH) -> tuple[Partition | None, ErrorCode]:
        partition, error = self.get_partition(topic, index)
        if partition is None:
            return None, error
        if not partition.is_leader:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        error = partition.check_leader_epoch(current_leader_epoch)
        if error != ErrorCode.NONE:
            return None, error
        return partition, ErrorCode.NONE

    def hosted_partition(self, topic: str, index: int,
                         current_leader_epoch: int = NO_EPOCH) -> tuple[Partition | None, ErrorCode]:
        """A replica hosted here, leader or follower, in the client's leader epoch (Kafka's
        getLocalLog without requireLeader: consumers of KIP-392 read from followers)."""
        partition, error = self.get_partition(topic, index)
        if partition is None:
            return None, error
        error = partition.check_leader_epoch(current_leader_epoch)
        if error != ErrorCode.NONE:
            return None, error
        return partition, ErrorCode.NONE

    def leader_partition_or_raise(self, topic: str, index: int,
                                  current_leader_epoch: int = NO_EPOCH) -> Partition:
        partition, error = self.leader_partition(topic, index, current_leader_epoch)
        if partition is None:
            raise KafkaError(error)
        return partition

    def partitions_of(self, topics: Iterable[str]) -> list[Partition]:
        wanted = set(topics)
        return [p for p in self.partitions.values() if p.topic in wanted]

    # -- produce
    def append(self, topic: str, index: int, records: bytes | bytearray | memoryview,
               required_acks: int, origin: AppendOrigin = AppendOrigin.CLIENT) -> PendingAppend:
        """Appends to the leader's log at once; the result's `committed` says when the high
        watermark passes it. Raises KafkaError when the append itself fails."""
        partition, error = self.get_partition(topic, index)
        if partition is None:
            raise KafkaError(error)
        # The partition checks leadership itself, where the append happens.
        pending = partition.append_as_leader(records, required_acks, self.clock.time_ms(),
                                             origin)
        self.fetch_purgatory.notify(partition.key)
        result = pending.result  # Kafka's numMessages: from the batch headers' offsets
        self.topic_stats.record_in(topic, result.last_offset - result.first_offset + 1,
                                   len(records))
        return pending

    async def wait_for_commit(self, pending: Iterable[PendingAppend],
                              timeout_ms: int) -> None:
        """The delayed produce: waits until every append is committed, failed, or
        `timeout_ms` passed; each `PendingAppend.outcome()` then tells which."""
        futures = [p.committed for p in pending if p.committed is not None]
        if futures:
            await wait_for_commits(futures, timeout_ms / 1000, self.clock)

    async def append_and_wait(self, topic: str, index: int,
                              records: bytes | bytearray | memoryview, timeout_ms: int,
                              origin: AppendOrigin = AppendOrigin.COORDINATOR) -> AppendResult:
        """Append with acks=all and wait for the commit (the coordinators' write path);
        raises KafkaError when the append fails or is not committed in time."""
        pending = self.append(topic, index, records, ACKS_ALL, origin)
        await self.wait_for_commit([pending], timeout_ms)
        error = pending.outcome()
        if error != ErrorCode.NONE:
            raise KafkaError(error, f"append to {topic}-{index} was not committed")
        return pending.result

    # -- replication, leader side
    def read_for_follower(self, topic: str, index: int, replica_id: int, broker_epoch: int,
                          fetch_offset: int, log_start_offset: int, max_bytes: int,
                          current_leader_epoch: int, min_one_batch: bool,
                          last_fetched_epoch: int) -> ReadResult:
        """A follower's fetch (Kafka's fetchRecords from a follower): read up to the log end,
        then record the follower's position, which may move the high watermark (completing
        acks=all produces) or let it join the ISR."""
        partition, error = self.leader_partition(topic, index, current_leader_epoch)
        if partition is None:
            return ReadResult(error)
        try:
            partition.follower_state(replica_id, current_leader_epoch)
        except KafkaError as exc:
            return ReadResult(exc.code)
        leader_end = partition.log.log_end_offset  # before the read: see Kafka's readRecords
        result = self._read_partition(partition, fetch_offset, max_bytes,
                                      FetchIsolation.LOG_END, min_one_batch,
                                      last_fetched_epoch)
        if self.leader_throttles(partition, replica_id):
            # Over the leader's replication quota: no data, but the fetch still counts as a
            # fetch (Kafka's shouldLeaderThrottle in readFromLog).
            result.records = None
        if result.error == ErrorCode.NONE and result.diverging_epoch is None:
            now = self.clock.time_ms()
            moved, expansion = partition.update_follower_fetch_state(
                replica_id, fetch_offset, log_start_offset, leader_end, broker_epoch, now)
            if moved:
                self.fetch_purgatory.notify(partition.key)
                result.high_watermark = partition.log.high_watermark
            if expansion is not None:
                self._submit(expansion)
        return result

    def leader_throttles(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: an out-of-ISR follower of a throttled partition gets
        no data while this broker's leader replication quota is exceeded."""
        quota = self.leader_quota
        return (quota is not None and replica_id not in partition.isr
                and quota.is_throttled(partition.topic, partition.index)
                and quota.is_quota_exceeded())

    def maybe_shrink_isrs(self) -> int:
        """Kafka's isr-expiration task (every replica.lag.time.max.ms / 2): followers that
        stopped keeping up leave the ISRs this broker leads. Returns how many were proposed."""
        now = self.clock.time_ms()
        proposed = 0
        for partition in list(self.partitions.values()):
            change = partition.maybe_shrink_isr(now)
            if change is not None:
                self._submit(change)
                proposed += 1
        return proposed

    def _submit(self, change: IsrChange) -> None:
        if self.submit_isr_change is None:
            change.partition.pending_isr = None  # nobody to ask (tests without a controller)
            return
        self.submit_isr_change(change)

    def on_isr_change_answer(self, change: IsrChange, error: ErrorCode,
                             isr: tuple[int, ...] = (), leader_epoch: int = -1,
                             partition_epoch: int = -1) -> None:
        partition = change.partition
        if self.partitions.get(partition.key) is not partition:
            return
        if partition.on_isr_change_answer(change, error, isr, leader_epoch, partition_epoch,
                                          self.clock.time_ms()):
            self.fetch_purgatory.notify(partition.key)

    # -- replication, follower side
    def follower_partition(self, key: tuple[str, int], leader_epoch: int) -> Partition | None:
        """The partition if this broker still follows it in `leader_epoch` (a fetch answer
        from an earlier epoch must not be appended)."""
        partition = self.partitions.get(key)
        if (partition is None or partition.is_leader or partition.leader_epoch != leader_epoch
                or partition.following_epoch != leader_epoch):
            return None
        return partition

    def append_as_follower(self, partition: Partition, records: bytes | bytearray | memoryview,
                           leader_high_watermark: int, leader_log_start_offset: int) -> None:
        """Appends what the leader sent and takes its high watermark (up to our log end) and
        log start offset (Kafka's processPartitionData)."""
        storage_log = partition.log
        if records:
            partition.append_as_follower(records)
        high_watermark = storage_log.high_watermark
        storage_log.update_high_watermark(min(leader_high_watermark, storage_log.log_end_offset))
        if storage_log.high_watermark != high_watermark:
            self.fetch_purgatory.notify(partition.key)  # consumers reading from this follower
        if leader_log_start_offset > storage_log.log_start_offset and \
                leader_log_start_offset <= storage_log.high_watermark:
            storage_log.delete_records_before(leader_log_start_offset)

    # -- fetch
    def read(self, topic: str, index: int, fetch_offset: int, max_bytes: int,
             current_leader_epoch: int, isolation: FetchIsolation, min_one_batch: bool,
             last_fetched_epoch: int = NO_EPOCH,
             client: ClientMetadata | None = None) -> ReadResult:
        """A consumer's read. Without `client` (Fetch before v11) only the leader answers; with
        it a follower serves up to its own high watermark, and a leader whose replica selector
        picks another replica names it instead of returning data (KIP-392)."""
        if client is None:
            partition, error = self.leader_partition(topic, index, current_leader_epoch)
        else:
            partition, error = self.hosted_partition(topic, index, current_leader_epoch)
        if partition is None:
            return ReadResult(error)
        if client is not None and partition.is_leader and self.replica_selector is not None:
            preferred = self._preferred_read_replica(partition, client, fetch_offset)
            if preferred is not None:
                storage_log = partition.log
                return ReadResult(ErrorCode.NONE, storage_log.high_watermark,
                                  storage_log.last_stable_offset, storage_log.log_start_offset,
                                  leader_epoch=partition.leader_epoch,
                                  preferred_read_replica=preferred)
        return self._read_partition(partition, fetch_offset, max_bytes, isolation,
                                    min_one_batch, last_fetched_epoch)

    def _preferred_read_replica(self, partition: Partition, client: ClientMetadata,
                                fetch_offset: int) -> int | None:
        """Kafka's findPreferredReadReplica: the selector chooses among the leader and the
        in-sync followers that hold `fetch_offset` and are reachable on the client's listener;
        None when it keeps the leader."""
        assert self.replica_selector is not None
        brokers = self.image.brokers if self.image is not None else {}
        own = brokers.get(self.broker_id)
        leader = ReplicaView(self.broker_id, own.rack if own else None,
                             partition.log.log_end_offset, 0)
        candidates = [leader]
        now = self.clock.time_ms()
        for replica_id, state in partition.followers.items():
            reg = brokers.get(replica_id)
            if (replica_id in partition.isr and reg is not None
                    and reg.endpoint(client.listener) is not None
                    and state.log_start_offset <= fetch_offset <= state.log_end_offset):
                candidates.append(ReplicaView(replica_id, reg.rack, state.log_end_offset,
                                              now - state.last_caught_up_ms))
        chosen = self.replica_selector.select(client.rack_id, leader, candidates)
        return None if chosen.broker_id == self.broker_id else chosen.broker_id

    @staticmethod
    def _read_partition(partition: Partition, fetch_offset: int, max_bytes: int,
                        isolation: FetchIsolation, min_one_batch: bool,
                        last_fetched_epoch: int) -> ReadResult:
        storage_log = partition.log
        hw = storage_log.high_watermark
        lso = storage_log.last_stable_offset
        result = ReadResult(ErrorCode.NONE, hw, lso, storage_log.log_start_offset,
                            leader_epoch=partition.leader_epoch)
        if last_fetched_epoch != NO_EPOCH:
            end_epoch, end_offset = storage_log.end_offset_for_epoch(last_fetched_epoch)
            if end_epoch != last_fetched_epoch or end_offset < fetch_offset:
                result.diverging_epoch = (end_epoch, end_offset)
                return result
        try:
            result.records = storage_log.read(fetch_offset, max_bytes, isolation=isolation,
                                              min_one_batch=min_one_batch)
        except KafkaError as exc:
            return ReadResult(exc.code, hw, lso, storage_log.log_start_offset)
        if isolation is FetchIsolation.TXN_COMMITTED:
            # Kafka's addAbortedTransactions: only read_committed reads pay for the lookup.
            result.aborted_transactions = storage_log.aborted_transactions_in(result.records)
        return result

    def fetch_position(self, topic: str, index: int, fetch_offset: int,
                       leader_only: bool = True) -> LogEnd | None:
        """Where a long poll's data starts (None when the partition cannot be read here;
        `leader_only` False: a follower replica may serve it, KIP-392)."""
        partition = self.partitions.get((topic, index))
        if partition is None or (leader_only and not partition.is_leader):
            return None
        return partition.log.position_of(fetch_offset)

    def readable_bytes(self, topic: str, index: int, start: LogEnd | None,
                       isolation: FetchIsolation, replica_id: int = -1,
                       leader_only: bool = True) -> int:
        """Bytes a long poll could return now from `start`; 1 when the partition is gone or
        no longer led here (an error is something to answer at once); 0 for a follower this
        broker throttles (Kafka's DelayedFetch does not count them)."""
        partition = self.partitions.get((topic, index))
        if start is None or partition is None or (leader_only and not partition.is_leader):
            return 1
        if replica_id >= 0 and self.leader_throttles(partition, replica_id):
            return 0
        return partition.readable_bytes(start, isolation)

    # -- offsets
    def offset_for_timestamp(self, topic: str, index: int, timestamp: int,
                             current_leader_epoch: int,
                             isolation: FetchIsolation) -> TimestampAndOffset:
        """ListOffsets: (offset, timestamp, leader epoch), (-1, -1, -1) when none matches;
        raises KafkaError when this broker cannot answer for the partition."""
        partition = self.leader_partition_or_raise(topic, index, current_leader_epoch)
        storage_log = partition.log
        if timestamp == LATEST_TIMESTAMP:
            # Consumers may only see up to the high watermark (or LSO).
            return TimestampAndOffset(storage_log.isolation_limit(isolation), -1,
                                      partition.leader_epoch)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(-1, -1, -1)  # no tiered storage
        found = storage_log.fetch_offset_by_timestamp(timestamp)
        if found is None or (found.offset >= storage_log.high_watermark and timestamp >= 0):
            return TimestampAndOffset(-1, -1, -1)
        return found

    def end_offset_for_epoch(self, topic: str, index: int, leader_epoch: int,
                             current_leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) of the leader's log."""
        partition = self.leader_partition_or_raise(topic, index, current_leader_epoch)
        return partition.log.end_offset_for_epoch(leader_epoch)

    def delete_records(self, topic: str, index: int, offset: int) -> int:
        """DeleteRecords: moves the log start offset up to `offset` (-1: the high watermark);
        returns the new low watermark."""
        partition = self.leader_partition_or_raise(topic, index)
        storage_log = partition.log
        target = storage_log.high_watermark if offset == -1 else offset
        if target < 0 or target > storage_log.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
        storage_log.delete_records_before(target)
        return storage_log.log_start_offset

    def log_dir_descriptions(self, wanted: set[tuple[str, int]] | None
                             ) -> dict[str, dict[str, list[tuple[int, int, int]]]]:
        """DescribeLogDirs: log dir -> topic -> (partition, size, offset lag) of the
        partitions hosted here."""
        by_dir: dict[str, dict[str, list[tuple[int, int, int]]]] = {
            str(d): {} for d in self.log_manager.log_dirs}
        for partition in self.partitions.values():
            if wanted is not None and partition.key not in wanted:
                continue
            storage_log = partition.log
            log_dir = str(self.log_manager.log_dir_of(partition.topic, partition.index))
            lag = max(0, storage_log.log_end_offset - storage_log.high_watermark)
            by_dir.setdefault(log_dir, {}).setdefault(partition.topic, []).append(
                (partition.index, storage_log.size_in_bytes, lag))
        return by_dir
