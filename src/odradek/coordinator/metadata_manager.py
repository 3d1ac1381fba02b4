"""Which groups this broker coordinates, and their persistence in `__consumer_offsets`.

Kafka's GroupMetadataManager: group G belongs to partition abs(hash(G)) % N of the offsets
topic; the leader of that partition coordinates G. When this broker becomes leader of an
offsets partition it replays the partition (last value per key wins, tombstones delete) into
groups; when it stops leading it drops them. Every change of a group's metadata or offsets is
one record batch appended to its partition, and is applied in memory only once appended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from odradek.coordinator.group import Group, GroupState, OffsetAndMetadata, TopicPartition
from odradek.coordinator.records import (
    LoadedPartition,
    Record,
    build_batch,
    group_key,
    group_record,
    offset_key,
    offset_record,
)
from odradek.protocol.errors import ErrorCode, KafkaError
# java_string_hashcode and kafka_abs are part of this module's (and the package's) names.
from odradek.protocol.java import java_string_hashcode, kafka_abs
from odradek.protocol.records import Compression

log = logging.getLogger("odradek.coordinator.metadata")

OFFSETS_TOPIC = "__consumer_offsets"

#: append(partition, batch bytes): appends as leader of that offsets partition; raises KafkaError
Appender = Callable[[int, bytes], Any]

_NOT_AVAILABLE_ON_APPEND = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
})
_NOT_COORDINATOR_ON_APPEND = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
})
_TOO_LARGE_ON_APPEND = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE,
})


def is_empty(log_: Any) -> bool:
    return log_.log_end_offset <= log_.log_start_offset


def append_error(error: ErrorCode, *, for_offsets: bool) -> ErrorCode:
    """The coordinator error a client sees for a failed append (Kafka's mapping)."""
    if error in _NOT_AVAILABLE_ON_APPEND:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in _NOT_COORDINATOR_ON_APPEND:
        return ErrorCode.NOT_COORDINATOR
    if error in _TOO_LARGE_ON_APPEND and for_offsets:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return ErrorCode.UNKNOWN_SERVER_ERROR


class GroupMetadataManager:
    """Groups of the offsets partitions this broker leads, and their records."""

    def __init__(self, append: Appender, *, num_partitions: Callable[[], int],
                 time_ms: Callable[[], int], compression: Compression = Compression.NONE,
                 load_buffer_size: int = 5 * 1024 * 1024) -> None:
        self._append = append
        self._num_partitions = num_partitions
        self.time_ms = time_ms
        self.compression = compression
        self.load_buffer_size = load_buffer_size
        self.groups: dict[str, Group] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self._load_generation: dict[int, int] = {}

    # -- ownership
    def partition_for(self, group_id: str) -> int:
        return kafka_abs(java_string_hashcode(group_id)) % self._num_partitions()

    def coordinator_error(self, group_id: str) -> ErrorCode:
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    @property
    def is_loading(self) -> bool:
        return bool(self.loading)

    def start_loading(self, partition: int) -> int:
        """Marks `partition` as loading (requests for its groups answer
        COORDINATOR_LOAD_IN_PROGRESS); returns the token `install` checks."""
        generation = self._load_generation.get(partition, 0) + 1
        self._load_generation[partition] = generation
        self.loading.add(partition)
        self.owned.discard(partition)
        return generation

    def install(self, partition: int, generation: int,
                loaded: LoadedPartition) -> list[Group]:
        """Makes this broker the coordinator of `partition` with the groups replayed from it;
        nothing happens if the partition was unloaded or reloaded since `start_loading`."""
        if self._load_generation.get(partition) != generation:
            return []
        self.loading.discard(partition)
        self.owned.add(partition)
        now = self.time_ms()
        groups = []
        for group_id in loaded.group_ids():
            if self.partition_for(group_id) != partition:
                continue
            group = loaded.build_group(group_id, now)
            self.groups[group_id] = group
            groups.append(group)
        return groups

    async def load_partition(self, partition: int, log_: Any,
                             generation: int | None = None) -> list[Group]:
        """Becomes the coordinator of `partition`: replays its log (off the event loop, unless
        it is empty) and returns the groups it holds."""
        if generation is None:
            generation = self.start_loading(partition)
        started = self.time_ms()
        try:
            loaded = await asyncio.to_thread(self._replay, log_) if not is_empty(log_) \
                else LoadedPartition()
        except Exception:
            if self._load_generation.get(partition) == generation:
                self.loading.discard(partition)
            raise
        groups = self.install(partition, generation, loaded)
        log.info("loaded %d groups from %s-%d (%d records) in %d ms", len(groups),
                 OFFSETS_TOPIC, partition, loaded.records, self.time_ms() - started)
        return groups

    def _replay(self, log_: Any) -> LoadedPartition:
        loaded = LoadedPartition()
        offset = log_.log_start_offset
        end = log_.log_end_offset
        while offset < end:
            data = log_.read(offset, self.load_buffer_size, max_offset=end).read_bytes()
            next_offset = loaded.apply_batches(data)
            if next_offset <= offset:
                break
            offset = next_offset
        return loaded

    def unload_partition(self, partition: int) -> list[Group]:
        """Stops coordinating `partition`; returns the groups dropped."""
        self._load_generation[partition] = self._load_generation.get(partition, 0) + 1
        self.owned.discard(partition)
        self.loading.discard(partition)
        dropped = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        for group in dropped:
            del self.groups[group.group_id]
        return dropped

    # -- groups
    def get_group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def add_group(self, group: Group) -> Group:
        return self.groups.setdefault(group.group_id, group)

    def remove_group(self, group: Group) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # -- persistence
    def _write(self, group_id: str, records: list[Record]) -> ErrorCode:
        """Appends `records` as one batch to the group's partition; NONE or the append error."""
        partition = self.partition_for(group_id)
        if partition not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        try:
            self._append(partition, build_batch(records, self.time_ms(), self.compression))
        except KafkaError as exc:
            log.warning("appending to %s-%d failed: %s", OFFSETS_TOPIC, partition, exc)
            return exc.code
        return ErrorCode.NONE

    def store_group(self, group: Group, assignment: dict[str, bytes]) -> ErrorCode:
        """Persists the group's metadata with `assignment` (member id -> bytes)."""
        error = self._write(group.group_id, [group_record(group, assignment)])
        return error if error == ErrorCode.NONE else append_error(error, for_offsets=False)

    def store_offsets(self, group: Group,
                      offsets: dict[TopicPartition, OffsetAndMetadata]) -> ErrorCode:
        """Persists `offsets` (one batch: all or nothing) and then applies them to the group."""
        records = [offset_record(group.group_id, tp, offset) for tp, offset in offsets.items()]
        error = self._write(group.group_id, records)
        if error != ErrorCode.NONE:
            return append_error(error, for_offsets=True)
        group.offsets.update(offsets)
        return ErrorCode.NONE

    def cleanup_group(self, group: Group, removed: Iterable[TopicPartition]) -> int:
        """Removes offsets (tombstones); an Empty group left without offsets dies and its
        metadata is tombstoned too. Returns how many offsets were removed."""
        removed = [tp for tp in removed if tp in group.offsets]
        for tp in removed:
            del group.offsets[tp]
        records: list[Record] = [(offset_key(group.group_id, tp), None) for tp in removed]
        if group.state == GroupState.EMPTY and not group.offsets:
            group.transition_to(GroupState.DEAD, self.time_ms())
        if group.state == GroupState.DEAD:
            self.remove_group(group)
            records.append((group_key(group.group_id), None))
        if records:
            error = self._write(group.group_id, records)
            if error != ErrorCode.NONE:
                # The in-memory removal stands; the records come back on reload and expire again.
                log.warning("could not write tombstones for group %s: %s", group.group_id,
                            error.name)
        return len(removed)
