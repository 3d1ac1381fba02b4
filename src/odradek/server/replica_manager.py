"""Partitions hosted by this broker: leadership, appends, reads, high watermark.

The replica manager follows the metadata image: when the image says this broker hosts a
partition, the partition's log is created/opened; when a topic disappears, its logs are deleted.
Appends and reads go through `Partition`, which checks leadership and epochs the way Kafka's
Partition class does. Replication to followers plugs in here (follower fetch positions feed
`maybe_advance_high_watermark`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from odradek.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import BATCH_HEADER_SIZE, NO_PRODUCER_ID, BatchHeader
from odradek.server.purgatory import Purgatory
from odradek.storage.config import LogConfig
from odradek.storage.producer_state import ProducerStateManager

log = logging.getLogger("odradek.replica")

# ListOffsets special timestamps (the others are resolved by the storage log).
LATEST_TIMESTAMP = -1
LATEST_TIERED_TIMESTAMP = -5

NO_EPOCH = -1


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int


@dataclass(slots=True)
class ReadResult:
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = None  # file region (sendfile-able) or bytes
    leader_epoch: int = -1
    diverging_epoch: tuple[int, int] | None = None


class Partition:
    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, storage_log: Any,
                 broker_id: int) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = storage_log
        self.broker_id = broker_id
        self.leader = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.producer_state: ProducerStateManager | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    def apply_registration(self, reg: PartitionRegistration) -> None:
        became_leader = reg.leader == self.broker_id and (
            self.leader != self.broker_id or reg.leader_epoch != self.leader_epoch
        )
        self.leader = reg.leader
        self.leader_epoch = reg.leader_epoch
        self.partition_epoch = reg.partition_epoch
        self.replicas = reg.replicas
        self.isr = reg.isr
        if became_leader:
            # A new leader epoch starts at the current log end (Kafka's epoch cache entry).
            self.log.leader_epoch_cache.assign(reg.leader_epoch, self.log.log_end_offset)
        if self.is_leader:
            self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> bool:
        """With only this broker in the ISR, every appended offset is replicated at once."""
        if self.isr == (self.broker_id,) or self.isr == () or len(self.replicas) <= 1:
            new_hw = self.log.log_end_offset
            if new_hw > self.log.high_watermark:
                self.log.high_watermark = new_hw
                return True
        return False

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        if current_leader_epoch == NO_EPOCH or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def _producer_state(self) -> ProducerStateManager:
        """Built on first use from the batch headers in the log (no record decoding)."""
        if self.producer_state is None:
            state = ProducerStateManager()
            state.rebuild(header for segment in self.log.log_segments()
                          for _pos, header in segment.iter_headers(0, segment.size))
            self.producer_state = state
        return self.producer_state

    def append_as_leader(self, records: Any, required_acks: int, min_isr: int) -> AppendResult:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.isr) < min_isr:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {set(self.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}",
            )
        # Produce v3+ carries exactly one batch; its header says whether it is idempotent.
        header = BatchHeader.parse(records, 0) if len(records) >= BATCH_HEADER_SIZE else None
        idempotent = header is not None and header.producer_id != NO_PRODUCER_ID
        if idempotent:
            duplicate = self._producer_state().find_duplicate(header)
            if duplicate is not None:
                return AppendResult(duplicate.first_offset, duplicate.last_offset, -1,
                                    self.log.log_start_offset)
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms())
        if idempotent:
            self.producer_state.record(header, info.first_offset, info.last_offset)
        self.maybe_advance_high_watermark()
        return AppendResult(info.first_offset, info.last_offset, info.log_append_time,
                            info.log_start_offset)


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: Any, default_log_config: LogConfig) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.default_log_config = default_log_config
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.by_topic_id: dict[uuid.UUID, str] = {}
        self.fetch_purgatory = Purgatory()
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
            config_changed = previous is None or (
                previous.topic_config(topic.name) != image.topic_config(topic.name)
            )
            self._apply_topic(image, topic, config_changed)
        if previous is not None and previous.configs is not image.configs:
            for topic in image.topics_by_id.values():
                if previous.topic_config(topic.name) != image.topic_config(topic.name):
                    self._update_config(image, topic)
        self.by_topic_id = {t.topic_id: t.name for t in image.topics_by_id.values()}

    def _apply_topic(self, image: MetadataImage, topic: TopicImage, config_changed: bool) -> None:
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
                partition = Partition(topic.name, index, topic.topic_id, storage_log, self.broker_id)
                self.partitions[key] = partition
            partition.apply_registration(reg)

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
        if partition is not None and delete:
            self.log_manager.delete_log(*key)
        self.fetch_purgatory.notify(key)

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

    # -- produce
    def append(self, topic: str, index: int, records: Any, required_acks: int) -> Any:
        partition, error = self.leader_partition(topic, index)
        if partition is None:
            raise KafkaError(error)
        min_isr = partition.log.config.min_insync_replicas
        info = partition.append_as_leader(records, required_acks, min_isr)
        self.fetch_purgatory.notify(partition.key)
        return info

    # -- fetch
    def read(self, topic: str, index: int, fetch_offset: int, max_bytes: int,
             current_leader_epoch: int, read_committed: bool, min_one_batch: bool,
             last_fetched_epoch: int = NO_EPOCH) -> ReadResult:
        partition, error = self.leader_partition(topic, index, current_leader_epoch)
        if partition is None:
            return ReadResult(error)
        storage_log = partition.log
        hw = storage_log.high_watermark
        lso = storage_log.last_stable_offset if hasattr(storage_log, "last_stable_offset") else hw
        result = ReadResult(ErrorCode.NONE, hw, lso, storage_log.log_start_offset,
                            leader_epoch=partition.leader_epoch)
        if last_fetched_epoch != NO_EPOCH:
            end_epoch, end_offset = storage_log.end_offset_for_epoch(last_fetched_epoch)
            if end_epoch != last_fetched_epoch or end_offset < fetch_offset:
                result.diverging_epoch = (end_epoch, end_offset)
                return result
        max_offset = lso if read_committed else hw
        try:
            data = storage_log.read(fetch_offset, max_bytes, max_offset=max_offset,
                                    min_one_batch=min_one_batch)
        except KafkaError as exc:
            return ReadResult(exc.code, hw, lso, storage_log.log_start_offset)
        result.records = data
        return result

    def fetchable_bytes(self, topic: str, index: int, fetch_offset: int,
                        read_committed: bool) -> int:
        """Cheap estimate of bytes available past fetch_offset (for min.bytes)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            return 1  # an error counts as something to return at once
        storage_log = partition.log
        limit = storage_log.last_stable_offset if read_committed and hasattr(
            storage_log, "last_stable_offset") else storage_log.high_watermark
        if fetch_offset >= limit:
            return 0
        try:
            return len(storage_log.read(fetch_offset, 1 << 30, max_offset=limit))
        except KafkaError:
            return 1

    def partitions_of(self, topics: Iterable[str]) -> list[Partition]:
        wanted = set(topics)
        return [p for p in self.partitions.values() if p.topic in wanted]
