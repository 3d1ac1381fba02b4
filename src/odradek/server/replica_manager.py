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
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.commit import CommitWaiters, wait_for_commits
from odradek.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.server.purgatory import Purgatory
from odradek.storage import LogManager
from odradek.storage.config import LogConfig
from odradek.storage.log import FetchIsolation, Log, LogEnd, TimestampAndOffset
from odradek.storage.segment import FetchData
from odradek.storage.validator import AppendOrigin

log = logging.getLogger("odradek.replica")

# ListOffsets special timestamps (the others are resolved by the storage log).
LATEST_TIMESTAMP = -1
LATEST_TIERED_TIMESTAMP = -5

NO_EPOCH = -1
ACKS_ALL = -1


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int


@dataclass(slots=True)
class PendingAppend:
    """An append done locally; `committed` (None when already committed at append time)
    completes when the high watermark passes `result.last_offset`."""

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


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of a follower (Kafka's Replica): its log end offset."""

    log_end_offset: int = 0
    last_fetch_ms: int = -1


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
    followers: dict[int, FollowerState] = field(default_factory=dict)
    commits: CommitWaiters = field(default_factory=CommitWaiters)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    def apply_registration(self, reg: PartitionRegistration) -> None:
        became_leader = reg.leader == self.broker_id and (
            self.leader != self.broker_id or reg.leader_epoch != self.leader_epoch
        )
        lost_leadership = self.is_leader and reg.leader != self.broker_id
        self.leader = reg.leader
        self.leader_epoch = reg.leader_epoch
        self.partition_epoch = reg.partition_epoch
        self.replicas = reg.replicas
        self.isr = reg.isr
        self.followers = {r: self.followers.get(r) or FollowerState()
                          for r in reg.replicas if r != self.broker_id}
        if lost_leadership:
            self.commits.fail_all(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        if became_leader:
            # A new leader epoch starts at the current log end (Kafka's epoch cache entry).
            self.log.leader_epoch_cache.assign(reg.leader_epoch, self.log.log_end_offset)
            self.commits.reset(self.log.high_watermark)
        if self.is_leader:
            self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset in the ISR (the leader's own included); moving it
        completes the appends waiting for it."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.broker_id:
                follower = self.followers.get(replica)
                new_hw = min(new_hw, follower.log_end_offset if follower is not None else 0)
        moved = self.log.maybe_increment_high_watermark(new_hw)
        if moved:
            self.commits.advance(self.log.high_watermark)
        return moved

    def update_follower_fetch_state(self, replica_id: int, log_end_offset: int,
                                    now_ms: int) -> bool:
        """A follower fetched from `log_end_offset` (so it has everything below); returns
        whether the high watermark moved."""
        follower = self.followers.get(replica_id)
        if follower is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of {self.topic}-{self.index}")
        follower.log_end_offset = log_end_offset
        follower.last_fetch_ms = now_ms
        return self.maybe_increment_high_watermark()

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        if current_leader_epoch == NO_EPOCH or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def check_enough_replicas_after_append(self) -> ErrorCode:
        if len(self.isr) < self.min_insync_replicas:
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
            self.maybe_increment_high_watermark()
        committed = None if info.last_offset < self.log.high_watermark \
            else self.commits.wait(info.last_offset)
        return PendingAppend(self, result, committed)

    def readable_bytes(self, start: LogEnd, isolation: FetchIsolation) -> int:
        return self.log.readable_bytes(start, isolation)


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager, default_log_config: LogConfig,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.default_log_config = default_log_config
        self.clock = clock
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.by_topic_id: dict[uuid.UUID, str] = {}
        self.fetch_purgatory = Purgatory(clock)
        self.image: MetadataImage | None = None

    # -- following the metadata image
    def log_config_for(self, image: MetadataImage, topic: str) -> LogConfig:
        return LogConfig.from_props(image.topic_config(topic), defaults=self.default_log_config)

    def apply_image(self, image: MetadataImage) -> None:
        previous = self.image
        self.image = image
        live_ids = set(image.topics_by_id)
        # Topics removed from the image: drop the partitions and delete their logs.
        if previous is not None:
            for topic_id, topic in previous.topics_by_id.items():
                if topic_id not in live_ids:
                    self._remove_topic(topic)
        for topic in image.topics_by_id.values():
            previous_topic = previous.topics_by_id.get(topic.topic_id) if previous else None
            if previous_topic is topic:
                continue
            self._apply_topic(image, topic)
        if previous is not None and previous.configs is not image.configs:
            for topic in image.topics_by_id.values():
                if previous.topic_config(topic.name) != image.topic_config(topic.name):
                    self._update_config(image, topic)
        self.by_topic_id = {t.topic_id: t.name for t in image.topics_by_id.values()}

    def _apply_topic(self, image: MetadataImage, topic: TopicImage) -> None:
        config = None
        for index, reg in topic.partitions.items():
            if self.broker_id not in reg.replicas:
                self._remove_partition((topic.name, index), delete=True)
                continue
            key = (topic.name, index)
            partition = self.partitions.get(key)
            if partition is None:
                config = config or self.log_config_for(image, topic.name)
                storage_log = self.log_manager.get_or_create_log(
                    topic.name, index, config, topic.topic_id
                )
                partition = Partition(topic.name, index, topic.topic_id, storage_log,
                                      self.broker_id)
                self.partitions[key] = partition
            partition.apply_registration(reg)
            self.fetch_purgatory.notify(key)

    def _update_config(self, image: MetadataImage, topic: TopicImage) -> None:
        config = self.log_config_for(image, topic.name)
        for index in topic.partitions:
            partition = self.partitions.get((topic.name, index))
            if partition is not None:
                partition.log.update_config(config)

    def _remove_topic(self, topic: TopicImage) -> None:
        for index in topic.partitions:
            self._remove_partition((topic.name, index), delete=True)

    def _remove_partition(self, key: tuple[str, int], delete: bool) -> None:
        partition = self.partitions.pop(key, None)
        if partition is not None:
            partition.commits.fail_all(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            if delete:
                self.log_manager.delete_log(*key)
        self.fetch_purgatory.notify(key)

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

    def update_follower_fetch_state(self, topic: str, index: int, replica_id: int,
                                    log_end_offset: int) -> None:
        """A follower's fetch told the leader its position; a high watermark that moved wakes
        the long polls waiting for committed data."""
        partition = self.leader_partition_or_raise(topic, index)
        if partition.update_follower_fetch_state(replica_id, log_end_offset,
                                                 self.clock.time_ms()):
            self.fetch_purgatory.notify(partition.key)

    # -- fetch
    def read(self, topic: str, index: int, fetch_offset: int, max_bytes: int,
             current_leader_epoch: int, isolation: FetchIsolation, min_one_batch: bool,
             last_fetched_epoch: int = NO_EPOCH) -> ReadResult:
        partition, error = self.leader_partition(topic, index, current_leader_epoch)
        if partition is None:
            return ReadResult(error)
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
        return result

    def fetch_position(self, topic: str, index: int, fetch_offset: int) -> LogEnd | None:
        """Where a long poll's data starts (None when the partition cannot be read here)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            return None
        return partition.log.position_of(fetch_offset)

    def readable_bytes(self, topic: str, index: int, start: LogEnd | None,
                       isolation: FetchIsolation) -> int:
        """Bytes a long poll could return now from `start`; 1 when the partition is gone or
        no longer led here (an error is something to answer at once)."""
        partition = self.partitions.get((topic, index))
        if start is None or partition is None or not partition.is_leader:
            return 1
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
