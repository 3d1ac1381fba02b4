"""The log cleaner: compaction of `cleanup.policy=compact` logs (Kafka's LogCleaner, Cleaner,
LogCleanerManager and CleanerConfig).

One cleaning of a log:
1. The dirty section is [first dirty offset, first uncleanable offset): from the log's entry in
   the `cleaner-offset-checkpoint` of its log dir (or the log start offset) up to the lowest of
   the active segment's base offset, the last stable offset (which is at most the high
   watermark) and the base offset of the first segment with a record newer than
   `min.compaction.lag.ms`.
2. An `OffsetMap` of the latest offset of every key of the dirty section is built, bounded by
   `log.cleaner.dedupe.buffer.size / log.cleaner.threads` and the load factor; when it fills
   up, only the prefix it covers is cleaned this time (the checkpoint advances that far).
   Records of aborted transactions are not mapped.
3. Every segment below the map's end, clean ones included, is rewritten, in groups whose total
   log and index sizes fit one segment (Kafka's groupSegmentsBySize), into one `.cleaned`
   segment per group: a record is kept when no later offset of its key is mapped, and a
   tombstone (null value) only until the delete horizon of its batch (KIP-534: the first
   cleaning that keeps a tombstone stamps the batch with `now + delete.retention.ms`; a later
   cleaning past that time drops it). Kept records stay in their batch, at their offset, with
   the batch's attributes, producer id/epoch, base sequence, last offset and codec
   (MemoryRecords.filterTo); a batch left without records is dropped, unless it is the last
   batch of an active producer or of the cleaned range (kept empty). Records of aborted
   transactions go; a COMMIT/ABORT marker goes once no data of its transaction remains and
   its own delete horizon has passed.
4. The group's output is swapped in (`Log.replace_segments`: `.cleaned` -> `.swap` -> live), so
   a crash at any point leaves a valid log (the loader deletes `.cleaned` files and completes
   `.swap` ones). A truncation below the active segment since the cleaning read the log stops
   it at its next step and refuses its swaps and checkpoint (`LogCleaner.on_truncation`).

`LogCleaner` runs `log.cleaner.threads` threads that each take the dirtiest compacted log
(dirty ratio above `min.cleanable.dirty.ratio`, or older than `max.compaction.lag.ms`), clean
it, and record the new first dirty offset in the checkpoint; with nothing to do they wait
`log.cleaner.backoff.ms`. Cleaning reads only inactive segments without the log's lock; appends
go on meanwhile (they only touch the active segment), and the swap takes the lock briefly.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import operator
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.protocol.errors import KafkaError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    NO_PRODUCER_ID,
    BatchHeader,
    ControlRecordType,
    RecordBatchBuilder,
    TimestampType,
    decode_control_key,
    decode_keys,
    decode_records,
    write_crc,
)
from odradek.protocol.records.batch import HEADER_STRUCT, LOG_OVERHEAD, MAGIC_V2
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.log import Log
from odradek.storage.offset_map import OffsetMap
from odradek.storage.segment import CLEANED_SUFFIX, LogSegment
from odradek.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# Fault injection for crash tests (never set in production): when set to a number of
# milliseconds, every cleaner thread logs each step of a cleaning ("started", "map_built", "segment",
# "cleaned", "swap", "old_deleted", "swapped", "checkpointed") and sleeps that long there, so that a SIGKILL
# lands inside a cleaning, between any two of its steps.
STEP_PAUSE_ENV = "ODRADEK_CLEANER_STEP_PAUSE_MS"
INT32_MAX = 0x7FFFFFFF
_DOUBLE_MAX = 1.7976931348623157e308


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's `log.cleaner.*` settings (Kafka's CleanerConfig)."""

    num_threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 524_288
    max_io_bytes_per_second: float = _DOUBLE_MAX
    backoff_ms: int = 15_000
    enable_cleaner: bool = True

    @classmethod
    def from_broker_config(cls, get: Callable[[str], Any]) -> CleanerConfig:
        return cls(num_threads=int(get("log.cleaner.threads")),
                   dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size")),
                   dedupe_buffer_load_factor=float(get("log.cleaner.io.buffer.load.factor")),
                   io_buffer_size=int(get("log.cleaner.io.buffer.size")),
                   max_io_bytes_per_second=float(get("log.cleaner.io.max.bytes.per.second")),
                   backoff_ms=int(get("log.cleaner.backoff.ms")),
                   enable_cleaner=bool(get("log.cleaner.enable")))


def thread_count_error(new: int, current: int) -> str | None:
    """Why `log.cleaner.threads` may not change from `current` to `new` at run time (Kafka's
    LogCleaner.validateReconfiguration: at least 1, at most halved or doubled), or None."""
    if new < 1:
        return "Log cleaner threads should be at least 1"
    if new < current // 2:
        return f"Log cleaner threads cannot be reduced to less than half the current value " \
            f"{current}"
    if new > current * 2:
        return f"Log cleaner threads cannot be increased to more than double the current " \
            f"value {current}"
    return None


class Throttler:
    """Sleeps so the bytes reported stay under `rate` bytes/second (Kafka's Throttler: the
    rate is checked every `check_interval_ms`)."""

    def __init__(self, rate: float, check_interval_ms: int = 300,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, *,
                 yield_gil: bool = True) -> None:
        self.rate = rate
        self.yield_gil = yield_gil
        self.check_interval_s = check_interval_ms / 1000
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0

    def maybe_throttle(self, observed: int) -> None:
        # Called once a batch: the cleaner's Python work holds the GIL, and a thread waking
        # from I/O (the broker's network loop) would wait for the interpreter's switch
        # interval (5 ms) each time; yielding here bounds that wait to one batch's work.
        # (Not in a cleaner process: no other thread there to yield to.)
        if self.yield_gil:
            self._sleep(0)
        if self.rate >= _DOUBLE_MAX:
            return
        with self._lock:
            self._observed += observed
            elapsed = self._clock() - self._period_start
            if elapsed < self.check_interval_s:
                return
            if self._observed / elapsed > self.rate:
                self._sleep(self._observed / self.rate - elapsed)
            self._period_start = self._clock()
            self._observed = 0.0


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    map_messages_read: int = 0
    invalid_messages: int = 0
    buffer_utilization: float = 0.0


@dataclass
class _AbortedTxnState:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """Which transactions the cleaner is inside, as it walks the log in offset order (Kafka's
    CleanedTransactionMetadata): decides which batches belong to aborted transactions and when
    a marker may go, and collects the aborted transactions the cleaned txn index keeps."""

    def __init__(self) -> None:
        self._pending: list[AbortedTxn] = []  # sorted by first offset
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self.cleaned_index_entries: list[AbortedTxn] | None = None

    def add_aborted_transactions(self, txns: Iterable[AbortedTxn]) -> None:
        known = {(t.producer_id, t.first_offset) for t in self._pending}
        self._pending += [t for t in txns if (t.producer_id, t.first_offset) not in known]
        self._pending.sort(key=lambda t: t.first_offset)

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.pop(0)
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch_read(self, header: BatchHeader, control_type: ControlRecordType | None
                              ) -> bool:
        """True when the marker may be discarded (no data of its transaction was met)."""
        self._consume_aborted_up_to(header.last_offset)
        producer_id = header.producer_id
        if control_type is ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(producer_id, None)
            if state is not None and state.last_observed_batch_offset is not None:
                # Kept until the aborted batches are gone; readers still need its index entry.
                if self.cleaned_index_entries is not None:
                    self.cleaned_index_entries.append(state.txn)
                return False
            return True
        if control_type is ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, header: BatchHeader) -> bool:
        """True when the data batch belongs to an aborted transaction (to be discarded)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.last_observed_batch_offset = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False


def _control_type(view: memoryview, header: BatchHeader) -> ControlRecordType | None:
    for record in decode_records(view, 0, header):
        try:
            return decode_control_key(record[2])
        except Exception:  # an unknown control record: kept, like Kafka's UNKNOWN
            return None
    return None


def _empty_batch(header: BatchHeader) -> bytes:
    """A batch header with no records that keeps the batch's offsets and producer fields
    (Kafka's writeEmptyHeader): the producer state read back from the log stays the same."""
    attributes = header.attributes & 0x38  # timestamp type, transactional, control; no codec
    out = bytearray(BATCH_HEADER_SIZE)
    HEADER_STRUCT.pack_into(out, 0, header.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD,
                            header.partition_leader_epoch, MAGIC_V2, 0, attributes,
                            header.last_offset_delta, header.max_timestamp,
                            header.max_timestamp, header.producer_id, header.producer_epoch,
                            header.base_sequence, 0)
    write_crc(out, 0, BATCH_HEADER_SIZE)
    return bytes(out)


def step_pause_from_env() -> Callable[[str], None] | None:
    """The `STEP_PAUSE_ENV` hook, or None when the variable is unset."""
    value = os.environ.get(STEP_PAUSE_ENV)
    if not value:
        return None
    pause_s = float(value) / 1000
    logger.warning("%s=%s: the log cleaner pauses at each step (fault injection)",
                   STEP_PAUSE_ENV, value)

    def pause(step: str) -> None:
        logger.info("cleaner step %s", step)
        time.sleep(pause_s)

    return pause


class CleaningAbortedError(Exception):
    """The log changed under the cleaner (truncated, deleted, closed): nothing was swapped."""


class Cleaner:
    """Cleans one log at a time (one per cleaner thread, with its own offset map)."""

    def __init__(self, config: CleanerConfig | None = None, *,
                 throttler: Throttler | None = None,
                 on_step: Callable[[str], None] | None = None) -> None:
        self.config = config or CleanerConfig()
        memory = self.config.dedupe_buffer_size // max(self.config.num_threads, 1)
        self.offset_map = OffsetMap(memory, self.config.dedupe_buffer_load_factor)
        self.throttler = throttler or Throttler(self.config.max_io_bytes_per_second)
        # Of the cleaning in progress: where the offset map starts (every keyed record from
        # there to its end is in it) and which mapped batches hold tombstones.
        self._map_start = 0
        self._tombstone_batches: set[int] = set()
        # The log being cleaned and the truncation epoch it was read at (`Log.truncation_epoch`).
        self._cleaning: tuple[Log, int] | None = None
        # Test hook: called with "started", "map_built" (the offset map of a cleaning is complete),
        # "segment" (one source segment rewritten into the group's output), "cleaned" (a
        # group's output written and flushed), "swap", "old_deleted", "swapped" (see
        # Log.replace_segments).
        self.on_step = on_step

    def close(self) -> None:
        """Nothing to release (`ProcessCleaner.close` ends its child)."""

    def _step(self, name: str) -> None:
        if self.on_step is not None:
            self.on_step(name)
        # Kafka's checkDone, at each step rather than each batch: a truncation below the
        # active segment since the cleaning read the log ends it (its swaps would be refused).
        cleaning = self._cleaning
        if cleaning is not None and cleaning[0].truncation_epoch != cleaning[1]:
            raise CleaningAbortedError(f"{cleaning[0]} was truncated while it was cleaned")

    # -- one cleaning ----------------------------------------------------------------------
    def clean(self, log: Log, first_dirty_offset: int, first_uncleanable_offset: int,
              now_ms: int, stats: CleanerStats | None = None, *,
              truncation_epoch: int | None = None) -> int:
        """Cleans the log below `first_uncleanable_offset`; returns the new first dirty offset
        (the end of what the offset map covered). CleaningAbortedError when the log is
        truncated below its active segment after it was read at `truncation_epoch` (by
        default: now)."""
        epoch = log.truncation_epoch if truncation_epoch is None else truncation_epoch
        self._cleaning = (log, epoch)
        try:
            return self._clean(log, first_dirty_offset, first_uncleanable_offset, now_ms,
                               stats or CleanerStats())
        finally:
            self._cleaning = None

    def _clean(self, log: Log, first_dirty_offset: int, first_uncleanable_offset: int,
               now_ms: int, stats: CleanerStats) -> int:
        offset_map = self.offset_map
        self._step("started")
        self.build_offset_map(log, first_dirty_offset, first_uncleanable_offset, stats)
        self._step("map_built")
        end_offset = offset_map.latest_offset + 1
        if end_offset <= first_dirty_offset:
            return first_dirty_offset
        transactions = CleanedTransactionMetadata()
        segments = [s for s in log.log_segments()[:-1] if s.base_offset < end_offset]
        for group in self.group_segments_by_size(segments, log.config.segment_bytes,
                                                 log.config.segment_index_bytes,
                                                 first_uncleanable_offset):
            self._clean_segments(log, group, now_ms, stats, transactions,
                                 first_uncleanable_offset)
        stats.buffer_utilization = offset_map.utilization
        return end_offset

    def build_offset_map(self, log: Log, start: int, end: int, stats: CleanerStats) -> None:
        offset_map = self.offset_map
        offset_map.clear()
        self._tombstone_batches.clear()
        self._map_start = start
        segments = [s for s in log.log_segments()
                    if s.base_offset < end and s is not log.active_segment]
        segments = [s for i, s in enumerate(segments)
                    if i + 1 == len(segments) or segments[i + 1].base_offset > start]
        transactions = CleanedTransactionMetadata()
        transactions.add_aborted_transactions(log.collect_aborted_transactions(start, end))
        for index, segment in enumerate(segments):
            next_start = segments[index + 1].base_offset if index + 1 < len(segments) else end
            if self._map_segment(segment, start, end, transactions, stats):
                return  # full: the map covers a prefix
            offset_map.update_latest_offset(next_start - 1)

    def _map_segment(self, segment: LogSegment, start: int, end: int,
                     transactions: CleanedTransactionMetadata, stats: CleanerStats) -> bool:
        offset_map = self.offset_map
        found = segment.translate_offset(start) if start > segment.base_offset else None
        begin = found[0] if found is not None else 0
        for position, header, view in segment.iter_valid_batches(segment.size):
            if position < begin:
                continue
            if header.base_offset >= end:
                break
            self.throttler.maybe_throttle(header.size)
            stats.map_bytes_read += header.size
            if header.is_control:
                transactions.on_control_batch_read(header, _control_type(view, header))
            elif not transactions.on_batch_read(header):
                found = decode_keys(view, 0, header)
                stats.map_messages_read += len(found.keys)
                if header.base_offset < start or found.null_keys:
                    # Rare: a batch across the first dirty offset, or records without a key.
                    full = offset_map.put_all([
                        (key, offset) for key, offset in zip(found.keys, found.offsets)
                        if key is not None and offset >= start])
                else:  # the common case: no Python loop over the records
                    full = offset_map.put_batch(found.keys, found.offsets, found.key_bytes)
                if full:
                    return True
                if found.null_values:
                    self._tombstone_batches.add(header.base_offset)
            if header.last_offset >= start:
                offset_map.update_latest_offset(header.last_offset)
        return False

    @staticmethod
    def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                               first_uncleanable_offset: int) -> list[list[LogSegment]]:
        """Consecutive segments whose total log size and index sizes each fit one segment, and
        whose offsets fit one segment's 32-bit relative offsets (Kafka's groupSegmentsBySize)."""
        groups: list[list[LogSegment]] = []
        index = 0
        while index < len(segments):
            group = [segments[index]]
            log_size = group[0].size
            index_size = group[0].offset_index.size_in_bytes
            time_index_size = group[0].time_index.size_in_bytes
            index += 1
            while index < len(segments):
                candidate = segments[index]
                last_offset = (segments[index + 1].base_offset - 1 if index + 1 < len(segments)
                               else first_uncleanable_offset - 1)
                if not (log_size + candidate.size <= max_size
                        and index_size + candidate.offset_index.size_in_bytes <= max_index_size
                        and time_index_size + candidate.time_index.size_in_bytes
                        <= max_index_size
                        and (candidate.size == 0
                             or last_offset - group[0].base_offset <= INT32_MAX)):
                    break
                group.append(candidate)
                log_size += candidate.size
                index_size += candidate.offset_index.size_in_bytes
                time_index_size += candidate.time_index.size_in_bytes
                index += 1
            groups.append(group)
        return groups

    def _clean_segments(self, log: Log, group: list[LogSegment], now_ms: int,
                        stats: CleanerStats, transactions: CleanedTransactionMetadata,
                        upper_bound_offset: int) -> None:
        config = log.config
        base = group[0].base_offset
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            (log.dir / f"{base:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
        cleaned = LogSegment(log.dir, base, index_interval_bytes=config.index_interval_bytes,
                             max_index_size=config.segment_index_bytes,
                             created_ms=log.clock(), suffix=CLEANED_SUFFIX, active=True)
        aborted_entries: list[AbortedTxn] = []
        transactions.cleaned_index_entries = aborted_entries
        last_records = log.last_records_of_active_producers()
        try:
            for index, segment in enumerate(group):
                upper = (group[index + 1].base_offset if index + 1 < len(group)
                         else segment.read_next_offset())
                transactions.add_aborted_transactions(
                    log.collect_aborted_transactions(segment.base_offset, upper))
                self._clean_into(segment, cleaned, config.delete_retention_ms, now_ms, stats,
                                 transactions, last_records, upper_bound_offset)
                self._step("segment")
            for txn in aborted_entries:
                cleaned.txn_index.append(txn)
            cleaned.on_become_inactive()
            cleaned.flush()
            modified = group[-1].last_modified_ms / 1000
            os.utime(cleaned.log_path, (modified, modified))
        except BaseException:
            cleaned.delete()
            raise
        finally:
            transactions.cleaned_index_entries = None
        try:
            self._step("cleaned")
        except CleaningAbortedError:
            cleaned.delete()
            raise
        epoch = self._cleaning[1] if self._cleaning is not None else None
        if not log.replace_segments(cleaned, group, self.on_step, truncation_epoch=epoch):
            raise CleaningAbortedError(f"{log} changed while it was cleaned")

    def _clean_into(self, source: LogSegment, dest: LogSegment, delete_retention_ms: int,
                    now_ms: int, stats: CleanerStats, transactions: CleanedTransactionMetadata,
                    last_records: Mapping[int, tuple[int | None, int]],
                    upper_bound_offset: int) -> None:
        offset_map = self.offset_map
        out: list[bytes | memoryview] = []
        batches: list[tuple[int, BatchHeader]] = []
        written = 0

        def emit(data: bytes | memoryview, header: BatchHeader | None = None) -> None:
            nonlocal written
            header = header or BatchHeader.parse(data)
            out.append(data)
            batches.append((written, header))
            written += header.size

        map_start, mapped_until = self._map_start, offset_map.latest_offset
        for _position, header, view in source.iter_valid_batches(source.size):
            self.throttler.maybe_throttle(header.size)
            stats.bytes_read += header.size
            stats.messages_read += header.records_count
            if header.is_control:
                can_discard = transactions.on_control_batch_read(header,
                                                                 _control_type(view, header))
                horizon = header.delete_horizon_ms
                discard_records = can_discard and horizon is not None and horizon <= now_ms
            else:
                can_discard = transactions.on_batch_read(header)
                discard_records = can_discard
            last_of_producer = False
            if header.producer_id != NO_PRODUCER_ID and header.producer_id in last_records:
                last_data_offset, epoch = last_records[header.producer_id]
                last_of_producer = (header.last_offset == last_data_offset
                                    if last_data_offset is not None
                                    else header.is_control and header.producer_epoch == epoch)
            retain_empty = last_of_producer or header.next_offset == upper_bound_offset
            if not header.is_control and not discard_records:
                # Most batches are dropped or kept whole: decided from the keys at most, the
                # batch copied with its bytes unchanged. A batch with tombstones (their delete
                # horizon decides) or keyless records, or partly kept, is rewritten below.
                if header.base_offset >= map_start and header.last_offset <= mapped_until:
                    # Every record of the batch is in the map: the offsets that are still the
                    # latest of their key decide, without even reading the keys.
                    live = offset_map.live_count(header.base_offset, header.last_offset)
                    tombstones = header.base_offset in self._tombstone_batches
                else:  # the clean section (or past the map): a record stays unless its key
                    # has a later offset in the map
                    found = decode_keys(view, 0, header)
                    live = sum(map(operator.ge, found.offsets, offset_map.get_many(found.keys)))
                    tombstones = found.null_values or found.null_keys
                if live == 0:
                    if retain_empty:
                        emit(_empty_batch(header))
                    continue
                if live == header.records_count and not tombstones:
                    emit(view, header)
                    stats.messages_written += live
                    continue
            records = decode_records(view, 0, header)
            if discard_records:
                kept: list[Any] = []
            elif header.is_control:
                kept = records
            else:
                kept = []
                horizon = header.delete_horizon_ms
                keep_deletes = horizon is None or now_ms < horizon
                mapped_until = offset_map.latest_offset
                latest = offset_map.get_many([record[2] for record in records
                                              if record[0] <= mapped_until])
                for record, latest_offset in zip(records, latest):
                    offset, key, value = record[0], record[2], record[3]
                    if key is None:
                        stats.invalid_messages += 1
                    elif offset >= latest_offset and (value is not None or keep_deletes):
                        kept.append(record)
                # Records past the map's end (it filled up mid-batch) are not cleaned yet.
                kept += records[len(latest):]
            contains_tombstones = not header.is_control and any(r[3] is None for r in kept)
            marker_of_empty_txn = can_discard and header.is_control
            needs_horizon = (contains_tombstones or marker_of_empty_txn) \
                and not header.has_delete_horizon
            if kept and len(kept) == len(records) and not needs_horizon:
                emit(bytes(view))
            elif kept:
                horizon = header.delete_horizon_ms
                if needs_horizon:
                    horizon = now_ms + delete_retention_ms
                emit(self._rebuild(header, kept, horizon))
            elif retain_empty:
                emit(_empty_batch(header))
            else:
                continue
            stats.messages_written += len(kept)
        if batches:
            dest.append(out, batches)
            stats.bytes_written += written
            self.throttler.maybe_throttle(written)

    @staticmethod
    def _rebuild(header: BatchHeader, kept: list[Any], delete_horizon_ms: int | None) -> bytes:
        """The kept records in a batch like the original (MemoryRecords'
        buildRetainedRecordsInto): same base and last offset, attributes, producer fields,
        leader epoch and codec."""
        builder = RecordBatchBuilder(
            base_offset=header.base_offset, producer_id=header.producer_id,
            producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
            is_transactional=header.is_transactional, is_control=header.is_control,
            partition_leader_epoch=header.partition_leader_epoch,
            timestamp_type=header.timestamp_type, compression=header.compression,
            delete_horizon_ms=delete_horizon_ms)
        for offset, timestamp, key, value, headers, *_ in kept:
            builder.append(timestamp, key, value, headers, offset=offset)
        builder.last_offset_override = header.last_offset
        data = bytearray(builder.build())
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            # The log append time is the batch's max timestamp, whatever records remain.
            rebuilt = BatchHeader.parse(data)
            rebuilt.max_timestamp = header.max_timestamp
            rebuilt.pack_into(data)
            write_crc(data, 0, len(data))
        return bytes(data)


@dataclass
class LogToClean:
    """A compacted log's cleanable section (Kafka's LogToClean)."""

    key: tuple[str, int]
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    need_compaction_now: bool = False
    # The log's `truncation_epoch` read before its checkpoint (None: when the cleaning starts).
    truncation_epoch: int | None = None
    clean_bytes: int = field(init=False)
    cleanable_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        segments = self.log.log_segments()
        bases = [s.base_offset for s in segments]
        # Cleaning stops at the start of the segment holding the first uncleanable offset.
        holding = max(bisect.bisect_right(bases, self.first_uncleanable_offset) - 1, 0)
        uncleanable_base = min(bases[holding], bases[-1])
        self.first_uncleanable_offset = uncleanable_base
        clean = dirty = 0
        for index, segment in enumerate(segments):
            next_base = bases[index + 1] if index + 1 < len(bases) else None
            if segment.base_offset >= uncleanable_base:
                break
            if next_base is not None and next_base <= self.first_dirty_offset:
                clean += segment.size
            else:
                dirty += segment.size
        self.clean_bytes, self.cleanable_bytes = clean, dirty

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(log: Log, last_clean_offset: int | None, now_ms: int) -> tuple[int, int]:
    """(first dirty offset, first uncleanable offset) (Kafka's cleanableOffsets)."""
    log_start = log.log_start_offset
    first_dirty = last_clean_offset if last_clean_offset is not None else log_start
    if first_dirty < log_start:
        # DeleteRecords or retention moved the log start past it (routine, so not logged,
        # when the log is `compact,delete`).
        if not log.config.delete:
            logger.warning("Resetting first dirty offset of %s-%d to log start offset %d "
                           "since the checkpointed offset %d is invalid.", log.topic,
                           log.partition, log_start, first_dirty)
        first_dirty = log_start
    elif first_dirty > log.log_end_offset:
        # Only a lost tail (a truncation's checkpoint lowering not written before a crash):
        # the whole log is dirty again.
        logger.warning("The last checkpoint dirty offset for partition %s-%d is %d, which is "
                       "larger than the log end offset %d. Resetting to the log start offset "
                       "%d.", log.topic, log.partition, first_dirty, log.log_end_offset,
                       log_start)
        first_dirty = log_start
    segments = log.log_segments()
    bounds = [log.last_stable_offset, segments[-1].base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for index, segment in enumerate(segments[:-1]):
            if segments[index + 1].base_offset <= first_dirty:
                continue
            if segment.largest_timestamp > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    return first_dirty, max(first_dirty, min(bounds))


def max_compaction_delay(log: Log, first_dirty_offset: int, now_ms: int) -> int:
    """How far past `max.compaction.lag.ms` the oldest dirty record is (0: not yet)."""
    segments = log.log_segments()
    first_timestamps = []
    for index, segment in enumerate(segments[:-1]):
        if segments[index + 1].base_offset <= first_dirty_offset:
            continue
        header = segment.first_batch_header()
        if header is not None and header.max_timestamp > 0:
            first_timestamps.append(header.max_timestamp)
    if not first_timestamps:
        return 0
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    earliest = min(first_timestamps)
    return clean_until - earliest if earliest < clean_until else 0


class LogCleaner:
    """The cleaner threads and their bookkeeping (Kafka's LogCleaner + LogCleanerManager):
    which logs are being cleaned, the per-dir `cleaner-offset-checkpoint` files."""

    def __init__(self, config: CleanerConfig,
                 logs: Callable[[], Mapping[tuple[str, int], tuple[Path, Log]]],
                 clock: Callable[[], int], *, on_step: Callable[[str], None] | None = None,
                 throttler: Throttler | None = None, isolated: bool = True) -> None:
        self.config = config
        # The threads clean in child processes (`cleaner_process`), off this interpreter.
        self.isolated = isolated
        self._cleaners: dict[int, Any] = {}  # thread number -> its Cleaner/ProcessCleaner
        self._logs = logs
        self.clock = clock
        self._lock = threading.Lock()
        self._in_progress: set[tuple[str, int]] = set()
        self._uncleanable: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        # Truncations not yet applied to the checkpoints (key -> lowest new log end): recorded
        # under a lock of their own, as `Log` reports them under its lock.
        self._truncation_lock = threading.Lock()
        self._truncations: dict[tuple[str, int], int] = {}
        self._threads: list[threading.Thread] = []
        # One throttler for all threads, as Kafka shares it.
        self.throttler = throttler or Throttler(config.max_io_bytes_per_second)
        self._on_step = on_step or step_pause_from_env()
        self.last_stats: CleanerStats | None = None
        self.runs = 0

    # -- checkpoints -----------------------------------------------------------------------
    def _checkpoint(self, directory: Path) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(directory / CLEANER_CHECKPOINT)

    def all_checkpoints(self) -> dict[tuple[str, int], int]:
        return self._read_checkpoints(self._logs())

    def _read_checkpoints(self, logs: Mapping[tuple[str, int], tuple[Path, Log]]
                          ) -> dict[tuple[str, int], int]:
        result: dict[tuple[str, int], int] = {}
        for directory in {directory for directory, _ in logs.values()}:
            try:
                result.update(self._checkpoint(directory).read())
            except (ValueError, OSError) as error:
                logger.warning("ignoring cleaner checkpoint of %s: %s", directory, error)
        return result

    def update_checkpoint(self, directory: Path, key: tuple[str, int], offset: int, *,
                          lower_only: bool = False) -> None:
        with self._lock:
            self._write_checkpoint(directory, key, offset, lower_only=lower_only)

    def _write_checkpoint(self, directory: Path, key: tuple[str, int], offset: int, *,
                          lower_only: bool = False) -> None:
        """(Under `_lock`.) Kafka's updateCheckpoints: the entries of the dir's live logs."""
        live = {k for k, (d, _) in self._logs().items() if d == directory}
        checkpoint = self._checkpoint(directory)
        try:
            current = checkpoint.read()
        except (ValueError, OSError):
            current = {}
        current = {k: v for k, v in current.items() if k in live}
        if lower_only and current.get(key, -1) <= offset:
            return
        current[key] = offset
        checkpoint.write(current)

    # -- truncation (Kafka's abortAndPauseCleaning + maybeTruncateCheckpoint) ----------------
    # A truncation below a log's active segment reports the new active segment's base here
    # (`Log.on_truncation`), then moves the log's `truncation_epoch`, under the log's lock.
    # A cleaning remembers the epoch it read the log at (before its checkpoint): from the
    # truncation on it stops at its next step, and the log refuses its swaps
    # (`Log.replace_segments`) and the checkpoint its end (`clean_filthiest_log`), so nothing
    # it built from the truncated data is swapped in; a cleaning selected during the
    # truncation is stopped the same way. The truncation itself does not wait for the
    # cleaner (it runs on the broker's event loop): Kafka's pause is the epoch.
    def on_truncation(self, key: tuple[str, int], active_base_offset: int) -> None:
        """A log was truncated below its active segment, whose base is now
        `active_base_offset`: the checkpoint must not stay above it, or records appended
        again there would count as clean. Recorded under a lock of its own (`Log` reports
        it under its lock); a cleaner thread writes it (`apply_truncations`), woken now."""
        with self._truncation_lock:
            previous = self._truncations.get(key)
            self._truncations[key] = active_base_offset if previous is None \
                else min(previous, active_base_offset)
        self._wakeup.set()

    def apply_truncations(self) -> None:
        """Lowers the checkpoints of the logs truncated since (not those being cleaned: the
        cleaning ends first, checkpointing nothing if the truncation came after it read the
        log, so the lowering applies to what it leaves)."""
        with self._truncation_lock:
            if not self._truncations:
                return
        with self._lock:
            logs = self._logs()
            with self._truncation_lock:
                for key in [key for key in self._truncations if key not in logs]:
                    del self._truncations[key]  # deleted logs
            for key, (directory, _log) in logs.items():
                if key in self._in_progress:
                    continue
                with self._truncation_lock:
                    offset = self._truncations.pop(key, None)
                if offset is not None:
                    self._write_checkpoint(directory, key, offset, lower_only=True)

    # -- selection -------------------------------------------------------------------------
    def grab_filthiest_log(self, now_ms: int) -> LogToClean | None:
        candidates = []
        with self._lock:
            logs = self._logs()
            # Epochs first: a truncation reports its lowering before it moves the epoch, so a
            # cleaning selected at an epoch starts from a checkpoint no higher than the
            # truncations of that epoch left.
            epochs = {key: log.truncation_epoch for key, (_directory, log) in logs.items()}
            with self._truncation_lock:
                truncated = dict(self._truncations)
            checkpoints = self._read_checkpoints(logs)
            for key, (directory, log) in logs.items():
                if not log.config.compact or key in self._in_progress \
                        or key in self._uncleanable:
                    continue
                last_clean = checkpoints.get(key)
                if last_clean is not None and key in truncated:
                    last_clean = min(last_clean, truncated[key])
                first_dirty, uncleanable = cleanable_offsets(log, last_clean, now_ms)
                if last_clean is not None and first_dirty != last_clean:
                    # Kafka's forceUpdateCheckpoint: an invalid checkpoint is replaced.
                    self._write_checkpoint(directory, key, first_dirty)
                delay = max_compaction_delay(log, first_dirty, now_ms)
                candidate = LogToClean(key, log, first_dirty, uncleanable, delay > 0,
                                       truncation_epoch=epochs[key])
                if candidate.total_bytes > 0 and (
                        (candidate.need_compaction_now and candidate.cleanable_bytes > 0)
                        or candidate.cleanable_ratio > log.config.min_cleanable_dirty_ratio):
                    candidates.append(candidate)
            if not candidates:
                return None
            filthiest = max(candidates, key=lambda c: c.cleanable_ratio)
            self._in_progress.add(filthiest.key)
            return filthiest

    def clean_filthiest_log(self, cleaner: Cleaner | None = None) -> bool:
        """Cleans the dirtiest cleanable log, if any; returns whether one was cleaned (or
        its cleaning aborted)."""
        now = self.clock()
        self.apply_truncations()
        candidate = self.grab_filthiest_log(now)
        if candidate is None:
            return False
        cleaner = cleaner or Cleaner(self.config, throttler=self.throttler,
                                     on_step=self._on_step)
        log = candidate.log
        try:
            stats = CleanerStats()
            started = time.monotonic()
            size_before = log.size_in_bytes
            end_offset = cleaner.clean(log, candidate.first_dirty_offset,
                                       candidate.first_uncleanable_offset, now, stats,
                                       truncation_epoch=candidate.truncation_epoch)
            with self._lock:  # as `apply_truncations`: the epoch check and the write at once
                if log.truncation_epoch != candidate.truncation_epoch:
                    raise CleaningAbortedError(f"{log} was truncated while it was cleaned")
                entry = self._logs().get(candidate.key)
                checkpointed = entry is not None and entry[1] is log
                if checkpointed:
                    self._write_checkpoint(entry[0], candidate.key, end_offset)
            if checkpointed and self._on_step is not None:
                self._on_step("checkpointed")
            self.last_stats = stats
            self.runs += 1
            logger.info("cleaned %s up to offset %d in %.3fs: %d -> %d bytes, read %d "
                        "messages, wrote %d", log, end_offset, time.monotonic() - started,
                        size_before, log.size_in_bytes, stats.messages_read,
                        stats.messages_written)
        except CleaningAbortedError as error:
            logger.info("cleaning aborted: %s", error)
        except KafkaError as error:  # closed or failed log
            logger.info("cleaning of %s stopped: %s", log, error)
        except Exception:
            # Kafka marks the partition uncleanable rather than retrying it forever.
            logger.exception("cleaning of %s failed; the partition is marked uncleanable", log)
            with self._lock:
                self._uncleanable.add(candidate.key)
        finally:
            with self._lock:
                self._in_progress.discard(candidate.key)
        return True

    # -- threads ---------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            self._start_threads()

    def _start_threads(self) -> None:
        for number in range(len(self._threads), self.config.num_threads):
            thread = threading.Thread(target=self._run, args=(number,),
                                      name=f"kafka-log-cleaner-thread-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def reconfigure(self, config: CleanerConfig) -> None:
        """Dynamic `log.cleaner.*` broker configs (Kafka's LogCleaner.reconfigure), applied
        from the next cleaning on: the throttle rate and backoff at once, a thread's offset
        map when its next cleaning starts (size, load factor), the thread count by starting
        threads or letting the extra ones end after their cleaning in progress."""
        with self._lock:
            refused = thread_count_error(config.num_threads, self.config.num_threads)
            if refused is not None:
                # As Kafka's broker applying a dynamic config its validateReconfiguration
                # refuses: logged, and the rest of the change applied.
                logger.error("log.cleaner.threads=%d not applied: %s", config.num_threads,
                             refused)
                config = dataclasses.replace(config, num_threads=self.config.num_threads)
            if config == self.config or self._stop.is_set():
                return
            logger.info("log cleaner reconfigured: %s", config)
            self.config = config
            self.throttler.rate = config.max_io_bytes_per_second
            self._threads = [t for t in self._threads if t.is_alive()]
            self._start_threads()
        self._wakeup.set()

    def _new_cleaner(self, number: int, config: CleanerConfig) -> Any:
        if self.isolated:
            from odradek.storage.cleaner_process import ProcessCleaner  # (imports this module)

            cleaner: Any = ProcessCleaner(config, throttler=self.throttler,
                                          on_step=self._on_step)
        else:
            cleaner = Cleaner(config, throttler=self.throttler, on_step=self._on_step)
        with self._lock:
            previous = self._cleaners.pop(number, None)
            if self._stop.is_set():
                cleaner.close()
                raise CleaningAbortedError("the log cleaner is shut down")
            self._cleaners[number] = cleaner
        if previous is not None:
            previous.close()
        return cleaner

    def _run(self, number: int) -> None:
        try:
            self._run_cleanings(number)
        except CleaningAbortedError:
            pass  # shut down while starting
        finally:
            with self._lock:
                cleaner = self._cleaners.pop(number, None)
            if cleaner is not None:
                cleaner.close()

    def _run_cleanings(self, number: int) -> None:
        config = self.config
        cleaner = self._new_cleaner(number, config)
        while not self._stop.is_set():
            if self.config is not config:
                config = self.config
                if number >= config.num_threads:
                    return  # fewer threads now
                if self.isolated:
                    cleaner.config = config  # sent with each job
                else:
                    cleaner = self._new_cleaner(number, config)
            try:
                cleaned = self.clean_filthiest_log(cleaner)
            except Exception:
                logger.exception("log cleaner iteration failed")
                cleaned = False
            if not cleaned:
                self._wakeup.wait(config.backoff_ms / 1000)
                self._wakeup.clear()

    def wake_up(self) -> None:
        """Ends the threads' backoff now (a config change, tests)."""
        self._wakeup.set()

    def is_cleaning(self, key: tuple[str, int]) -> bool:
        with self._lock:
            return key in self._in_progress

    def shutdown(self) -> None:
        """Stops the threads; a cleaning in progress in a child process is killed (nothing
        swapped after that), one in this process finishes its current group first."""
        with self._lock:
            self._stop.set()
            threads, self._threads = self._threads, []
            cleaners = list(self._cleaners.values())
        for cleaner in cleaners:
            cleaner.close()
        self._wakeup.set()
        for thread in threads:
            thread.join()
