"""Which groups this broker coordinates, and their persistence in `__consumer_offsets`.

Kafka's GroupMetadataManager: group G belongs to partition abs(hash(G)) % N of the offsets
topic; the leader of that partition coordinates G. When this broker becomes leader of an
offsets partition it replays the partition (last value per key wins, tombstones delete) into
groups; when it stops leading it drops them. Every change of a group's metadata or offsets is
one record batch written through the coordinator runtime (`runtime.py`): appended to its
partition, and applied in memory only once committed.

Transactional offset commits are written as transactional batches of the producer and kept
pending per producer id in their group; the producer's transaction marker, once committed in
the partition, completes them (`complete_transaction`): committed where their record is newer
than the partition's committed offset, or dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.coordinator.consumer_group import group_tombstones
from odradek.coordinator.group import Group, GroupState, OffsetAndMetadata, TopicPartition
from odradek.coordinator.records import (
    LoadedPartition,
    Record,
    group_key,
    group_record,
    offset_key,
    offset_record,
)
from odradek.coordinator.runtime import Appender, CoordinatorRuntime, append_error
from odradek.protocol.errors import ErrorCode, KafkaError

# java_string_hashcode and kafka_abs are part of this module's (and the package's) names.
from odradek.protocol.java import java_string_hashcode, kafka_abs
from odradek.protocol.records import Compression, build_control_batch

log = logging.getLogger("odradek.coordinator.metadata")

OFFSETS_TOPIC = "__consumer_offsets"

__all__ = ["OFFSETS_TOPIC", "Appender", "GroupMetadataManager", "append_error", "is_empty",
           "java_string_hashcode", "kafka_abs"]


def is_empty(log_: Any) -> bool:
    return log_.log_end_offset <= log_.log_start_offset


def _error_code(write: asyncio.Future[Any]) -> asyncio.Future[ErrorCode]:
    """The outcome of a runtime write as an error code (NONE once applied); never raises."""
    outcome: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

    def settle(done: asyncio.Future[Any]) -> None:
        if outcome.done():
            return  # the waiter gave up
        if done.cancelled():
            outcome.set_result(ErrorCode.NOT_COORDINATOR)
        elif isinstance(error := done.exception(), KafkaError):
            outcome.set_result(error.code)
        elif error is not None:
            outcome.set_result(ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            outcome.set_result(ErrorCode.NONE)

    write.add_done_callback(settle)
    return outcome


#: errors of a transactional append the producer must see as they are (its epoch is stale,
#: it was fenced, the transaction is not in a state to take the write), as Kafka 4.0's group
#: coordinator passes them through
_PRODUCER_ERRORS = frozenset({
    ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.TRANSACTION_ABORTABLE,
})


def txn_append_error(error: ErrorCode) -> ErrorCode:
    """The error a TxnOffsetCommit answers for a failed append."""
    if error in _PRODUCER_ERRORS:
        return error
    return append_error(error, for_offsets=True)


_COORDINATOR_ERRORS = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
})


def _marker_error(error: ErrorCode) -> ErrorCode:
    """The error WriteTxnMarkers answers for a marker of an offsets partition: the append's
    own, except that the transaction coordinator, which does not expect coordinator errors,
    retries NOT_LEADER_OR_FOLLOWER instead (as Kafka 4.0's KafkaApis translates them)."""
    return ErrorCode.NOT_LEADER_OR_FOLLOWER if error in _COORDINATOR_ERRORS else error


def _settled(error: ErrorCode) -> asyncio.Future[ErrorCode]:
    done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
    done.set_result(error)
    return done


class GroupMetadataManager:
    """Groups of the offsets partitions this broker leads, and their records."""

    def __init__(self, append: Appender, *, num_partitions: Callable[[], int],
                 clock: Clock = SYSTEM_CLOCK, compression: Compression = Compression.NONE,
                 load_buffer_size: int = 5 * 1024 * 1024) -> None:
        self.runtime = CoordinatorRuntime(append, clock=clock, compression=compression)
        self.clock = clock
        self._num_partitions = num_partitions
        self.load_buffer_size = load_buffer_size
        self.groups: dict[str, Group] = {}
        #: producer id -> the groups holding offsets of its open transaction (Kafka's
        #: openTransactionsByGroup, the other way round: a marker names the producer)
        self.txn_groups: dict[int, set[str]] = {}

    def time_ms(self) -> int:
        return self.clock.time_ms()

    # -- ownership
    @property
    def owned(self) -> dict[int, int]:
        """Offsets partitions coordinated here -> the generation they were loaded in."""
        return self.runtime.owned

    @property
    def loading(self) -> set[int]:
        return self.runtime.loading

    def partition_for(self, group_id: str) -> int:
        return kafka_abs(java_string_hashcode(group_id)) % self._num_partitions()

    def coordinator_error(self, group_id: str) -> ErrorCode:
        return self.runtime.error_for(self.partition_for(group_id))

    def is_owned(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.runtime.owned

    @property
    def is_loading(self) -> bool:
        return self.runtime.is_loading

    def start_loading(self, partition: int) -> int:
        """Marks `partition` as loading (requests for its groups answer
        COORDINATOR_LOAD_IN_PROGRESS); returns the generation `install` checks."""
        return self.runtime.start_loading(partition)

    def install(self, partition: int, generation: int,
                loaded: LoadedPartition) -> list[Group]:
        """Makes this broker the coordinator of `partition` with the groups replayed from it;
        nothing happens if the partition was unloaded or reloaded since `start_loading`."""
        if not self.runtime.is_current(partition, generation):
            return []
        groups = self._install(partition, loaded)
        self.runtime.complete_loading(partition, generation)
        return groups

    def _install(self, partition: int, loaded: LoadedPartition) -> list[Group]:
        now = self.time_ms()
        groups = []
        for group_id in loaded.group_ids():
            if self.partition_for(group_id) != partition:
                continue
            group = loaded.build_group(group_id, now)
            self.groups[group_id] = group
            for producer_id in group.pending_txn_offsets:
                self.txn_groups.setdefault(producer_id, set()).add(group_id)
            groups.append(group)
        return groups

    async def load_partition(self, partition: int, log_: Any,
                             generation: int | None = None) -> list[Group]:
        """Becomes the coordinator of `partition`: replays its log (off the event loop, unless
        it is empty) and returns the groups it holds."""
        if generation is None:
            generation = self.start_loading(partition)
        if is_empty(log_):
            return self.install(partition, generation, LoadedPartition())
        started = self.time_ms()

        def install(loaded: LoadedPartition) -> tuple[list[Group], int]:
            return self._install(partition, loaded), loaded.records

        installed = await self.runtime.load(partition, partial(self._replay, log_), install,
                                            generation)
        if installed is None:
            return []  # unloaded or reloaded meanwhile
        groups, records = installed
        log.info("loaded %d groups from %s-%d (%d records) in %d ms", len(groups),
                 OFFSETS_TOPIC, partition, records, self.time_ms() - started)
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
        """Stops coordinating `partition`; returns the groups dropped. Its writes not yet
        applied fail with NOT_COORDINATOR (after the groups are gone)."""
        dropped = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        for group in dropped:
            del self.groups[group.group_id]
            for producer_id in {*group.pending_txn_offsets, *group.txn_offsets_in_flight}:
                self._forget_txn_group(producer_id, group.group_id)
        self.runtime.unload(partition)
        return dropped

    # -- groups
    def get_group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def is_current(self, group: Group) -> bool:
        """Whether `group` is still the one coordinated here under its id."""
        return self.groups.get(group.group_id) is group

    def add_group(self, group: Group) -> Group:
        return self.groups.setdefault(group.group_id, group)

    def remove_group(self, group: Group) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # -- persistence
    def _write(self, group_id: str, records: list[Record], apply: Callable[..., Any],
               on_failure: Callable[[ErrorCode], Any] | None = None, *,
               for_offsets: bool = False, **options: Any) -> asyncio.Future[ErrorCode]:
        options.setdefault("map_error", partial(append_error, for_offsets=for_offsets))
        write = self.runtime.write(self.partition_for(group_id), records, apply,
                                   on_failure=on_failure, **options)
        return _error_code(write)

    def store_group(self, group: Group, assignment: dict[str, bytes],
                    on_stored: Callable[[ErrorCode], Any] | None = None,
                    ) -> asyncio.Future[ErrorCode]:
        """Persists the group's metadata as it is now, with `assignment` (member id -> bytes).
        Once the write is committed or failed, `on_stored(NONE or the coordinator error)`
        runs (whether or not anyone awaits the returned outcome)."""
        def stored() -> None:
            if on_stored is not None:
                on_stored(ErrorCode.NONE)

        def failed(error: ErrorCode) -> None:
            log.warning("could not store the metadata of group %s generation %d: %s",
                        group.group_id, group.generation_id, error.name)
            if on_stored is not None:
                on_stored(error)

        return self._write(group.group_id, [group_record(group, assignment)], stored, failed)

    def write_tombstones(self, group_id: str, records: list[Record]) -> asyncio.Future[ErrorCode]:
        """Writes records that only delete (a group changing type); failures are logged."""
        if not records:
            return _settled(ErrorCode.NONE)

        def failed(error: ErrorCode) -> None:
            log.warning("could not write tombstones for group %s: %s", group_id, error.name)

        return self._write(group_id, records, lambda: None, failed)

    def store_offsets(self, group: Group, offsets: dict[TopicPartition, OffsetAndMetadata],
                      ) -> asyncio.Future[ErrorCode]:
        """Persists `offsets` (one batch: all or nothing); they are applied to the group, and
        visible to OffsetFetch, once committed. Resolves to NONE or the coordinator error."""
        pending = group.pending_offset_commits
        pending.update(offsets)

        def committed(record_offset: int | None) -> None:
            for tp, offset in offsets.items():
                if tp not in pending:
                    continue  # removed (deleted, expired) while the commit was in flight
                group.offsets[tp] = _at(offset, record_offset)
                if pending[tp] is offset:
                    del pending[tp]

        def failed(error: ErrorCode) -> None:
            for tp, offset in offsets.items():
                if pending.get(tp) is offset:
                    del pending[tp]

        records = [offset_record(group.group_id, tp, offset) for tp, offset in offsets.items()]
        return self._write(group.group_id, records, committed, failed, for_offsets=True,
                           with_offset=True)

    def store_txn_offsets(self, group: Group, producer_id: int, producer_epoch: int,
                          offsets: dict[TopicPartition, OffsetAndMetadata],
                          ) -> asyncio.Future[ErrorCode]:
        """Persists `offsets` as part of the producer's transaction (one transactional batch);
        once committed they are pending under the producer id, until `complete_transaction`.
        Resolves to NONE or the error the producer sees."""
        in_flight = group.txn_offsets_in_flight.setdefault(producer_id, {})
        in_flight.update(offsets)
        self.txn_groups.setdefault(producer_id, set()).add(group.group_id)

        def settle(record_offset: int | None) -> None:
            staged = group.txn_offsets_in_flight.get(producer_id, {})
            for tp, offset in offsets.items():
                if staged.get(tp) is not offset:
                    continue  # removed (deleted, expired) or staged again meanwhile
                del staged[tp]
                if record_offset is not None:
                    group.pending_txn_offsets.setdefault(producer_id, {})[tp] = _at(
                        offset, record_offset)
            if not staged:
                group.txn_offsets_in_flight.pop(producer_id, None)
            if not group.has_open_transaction(producer_id):
                self._forget_txn_group(producer_id, group.group_id)

        def appended(record_offset: int | None) -> None:
            # The appender resolves to the batch's base offset; without it the commit could
            # not be ordered against the partition's committed offsets: 0 puts it first.
            settle(0 if record_offset is None else record_offset)

        def failed(error: ErrorCode) -> None:
            settle(None)

        records = [offset_record(group.group_id, tp, offset) for tp, offset in offsets.items()]
        return self._write(group.group_id, records, appended, failed, with_offset=True,
                           map_error=txn_append_error, producer_id=producer_id,
                           producer_epoch=producer_epoch)

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int, commit: bool) -> asyncio.Future[ErrorCode]:
        """Writes the producer's transaction marker into offsets partition `partition` in line
        with the coordinator's other writes there, and once it is committed completes the
        producer's transactional offsets (Kafka 4.0's completeTransaction: the group
        coordinator writes the markers of its own partitions). Resolves to NONE or the error:
        the append's (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...) or, when
        the partition is not coordinated here, NOT_LEADER_OR_FOLLOWER, which the transaction
        coordinator retries (Kafka translates the coordinator errors so)."""
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                    self.time_ms())
        write = self.runtime.write_batch(
            partition, batch, partial(self._complete_transaction, partition, producer_id,
                                      commit), map_error=_marker_error)
        outcome = _error_code(write)
        translated: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def translate(done: asyncio.Future[ErrorCode]) -> None:
            if not translated.done():
                translated.set_result(_marker_error(done.result()))

        outcome.add_done_callback(translate)
        return translated

    def complete_transaction(self, partition: int, producer_id: int,
                             commit: bool) -> asyncio.Future[ErrorCode]:
        """The producer's transaction marker is committed in offsets partition `partition`:
        once the writes in flight there are applied (those before the marker), the producer's
        pending offsets in the partition's groups become committed - where their record is
        newer than the committed offset of their partition, as in Kafka - or are dropped.
        Resolves to NONE, or the ownership error when the partition is not (or no longer)
        coordinated here."""
        return _error_code(self.runtime.run_after_writes(
            partition, partial(self._complete_transaction, partition, producer_id, commit)))

    def _complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        group_ids = self.txn_groups.get(producer_id, set())
        for group_id in [g for g in group_ids if self.partition_for(g) == partition]:
            group = self.groups.get(group_id)
            pending = group.pending_txn_offsets.pop(producer_id, None) if group else None
            if commit and pending:
                assert group is not None
                for tp, offset in pending.items():
                    current = group.offsets.get(tp)
                    if current is None or current.record_offset < offset.record_offset:
                        group.offsets[tp] = offset
            if group is None or not group.has_open_transaction(producer_id):
                self._forget_txn_group(producer_id, group_id)

    def _forget_txn_group(self, producer_id: int, group_id: str) -> None:
        group_ids = self.txn_groups.get(producer_id)
        if group_ids is not None:
            group_ids.discard(group_id)
            if not group_ids:
                del self.txn_groups[producer_id]

    def cleanup_group(self, group: Group, removed: Iterable[TopicPartition],
                      ) -> tuple[int, asyncio.Future[ErrorCode]]:
        """Removes offsets (committed or pending) at once and writes their tombstones; an Empty
        group left without offsets dies and its metadata is tombstoned too. Returns how many
        offsets were removed, and the outcome of the tombstones' write (failures are logged:
        the in-memory removal stands, the records come back on reload and expire again)."""
        removed = [tp for tp in dict.fromkeys(removed)
                   if tp in group.offsets or tp in group.pending_offset_commits
                   or group.has_pending_txn_offset(tp)]
        producers = {*group.pending_txn_offsets, *group.txn_offsets_in_flight}
        for tp in removed:
            group.offsets.pop(tp, None)
            group.pending_offset_commits.pop(tp, None)
            # The tombstone removes the open transactions' offsets too (Kafka's replay).
            group.remove_pending_txn_offsets(tp)
        for producer_id in producers:
            if not group.has_open_transaction(producer_id):
                self._forget_txn_group(producer_id, group.group_id)
        records: list[Record] = [(offset_key(group.group_id, tp), None) for tp in removed]
        if group.state == GroupState.EMPTY and not group.has_offsets:
            group.transition_to(GroupState.DEAD, self.time_ms())
        if group.state == GroupState.DEAD:
            self.remove_group(group)
            if group.consumer is not None:
                records.extend(group_tombstones(group.group_id))
            else:
                records.append((group_key(group.group_id), None))
        if not records:
            return 0, _settled(ErrorCode.NONE)

        def failed(error: ErrorCode) -> None:
            log.warning("could not write tombstones for group %s: %s", group.group_id,
                        error.name)

        return len(removed), self._write(group.group_id, records, lambda: None, failed)


def _at(offset: OffsetAndMetadata, record_offset: int | None) -> OffsetAndMetadata:
    """`offset` as appended at `record_offset` (its batch's base offset)."""
    return dataclasses.replace(offset, record_offset=-1 if record_offset is None
                               else record_offset)
