"""One partition's log: ordered segments, appends, reads, roll, retention, truncation
(Kafka's UnifiedLog and LocalLog in one class; recovery lives in `loader`).

This is the one partition-log interface the layers above use (the replica manager, the
coordinators, the metadata quorum, the tools): they never reach past it to segments or indexes.
The log owns the offsets that describe it: log start offset, high watermark (moved only through
`maybe_increment_high_watermark` by a leader, or `update_high_watermark` by a follower or at
load), last stable offset, the leader-epoch cache, and the producer state of idempotent and
transactional producers, loaded with the log (on the log manager's recovery threads, not an
event loop). The producer state is snapshotted to `<offset>.snapshot` files (see
`producer_state`) at every segment roll and at a clean close; a load, a truncation and
retention keep those files consistent with the segments, so loading replays only the batch
headers after a snapshot.

Transactions (Kafka's UnifiedLog): transactional batches open a producer's transaction, a
COMMIT/ABORT marker (control batch) closes it; the last stable offset (LSO) is the first offset
of the oldest transaction not yet decided and replicated, capped by the high watermark. An
aborted transaction gets an entry in the `.txnindex` of the segment holding its marker
(`txn_index`), which read_committed fetches consult (`collect_aborted_transactions`). Replaying
batch headers into the producer state (at load, after a truncation) rewrites the txn index of
the replayed range, so recovery after a crash rebuilds it.
Reads say which isolation bounds them (`FetchIsolation`): the log end, the high watermark, or
the last stable offset.

Concurrency model: one writer at a time (appends, roll, truncation, segment deletion hold
`self._lock`), any number of concurrent readers without the lock. Readers take an immutable
snapshot of the segment list and of the end-of-log position (`_end`), both replaced wholesale by
the writer (copy-on-write), and read with `pread`, so a read never waits for an append.
`flush()` does its fsyncs outside the lock, so it can run on a worker thread while the event loop
keeps appending.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import functools
import logging
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import NO_PRODUCER_ID, BatchHeader, TimestampType
from odradek.protocol.records.record import iter_records
from odradek.storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA_FILE,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
    fsync_dir,
    fsync_file,
    topic_id_from_str,
    topic_id_to_str,
)
from odradek.storage.config import LONG_MAX, LogConfig
from odradek.storage.dir_failure import LogDirFailureChannel
from odradek.storage.epoch import LeaderEpochFileCache
from odradek.storage.loader import LogLoader
from odradek.storage.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    ProducerView,
    end_txn_marker_of,
)
from odradek.storage.scheduler import Clock, DeferredDeleter, system_clock_ms
from odradek.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    FetchData,
    LogSegment,
)
from odradek.storage.txn_index import AbortedTxn
from odradek.storage.validator import (
    AppendOrigin,
    ValidatedRecords,
    assign_offsets,
    validate_as_follower,
    validate_as_leader,
)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
NO_TIMESTAMP = -1

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

logger = logging.getLogger(__name__)

_DIR_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def parse_topic_partition(directory: str | os.PathLike[str]) -> tuple[str, int]:
    """`<topic>-<partition>` -> (topic, partition); topic names may contain '-'."""
    match = _DIR_NAME.match(Path(directory).name)
    if match is None:
        raise ValueError(f"{directory} is not a <topic>-<partition> log directory")
    return match["topic"], int(match["partition"])


def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class FetchIsolation(enum.Enum):
    """How far a read may go (Kafka's FetchIsolation)."""

    LOG_END = "log_end"  # replicas and internal readers: everything appended
    HIGH_WATERMARK = "high_watermark"  # consumers (read_uncommitted): what is committed
    TXN_COMMITTED = "txn_committed"  # read_committed consumers: below the last stable offset



_Method = TypeVar("_Method", bound=Callable[..., Any])


def _io_guarded(method: _Method) -> _Method:
    """A log change that fails with an OSError fails the log (`Log._io_failed`): the caller
    gets KAFKA_STORAGE_ERROR and the directory is reported offline."""
    @functools.wraps(method)
    def guarded(self: Log, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as error:
            raise self._io_failed(error) from error
    return guarded  # type: ignore[return-value]

class LogEnd(NamedTuple):
    """Next offset to assign and where it will be written (Kafka's LogOffsetMetadata)."""

    offset: int
    segment_base_offset: int
    position: int


class TimestampAndOffset(NamedTuple):
    """A ListOffsets answer: offset, timestamp (-1 if not applicable), leader epoch (-1)."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass
class AppendInfo:
    """What an append did (Kafka's LogAppendInfo)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    valid_bytes: int
    record_count: int
    batch_count: int
    batches: list[BatchHeader]  # headers as written (for producer-state bookkeeping)
    flush_needed: bool = False  # flush.messages reached and the log defers flushes
    duplicate: bool = False  # an idempotent retry: nothing written, offsets of the original

    @property
    def num_messages(self) -> int:
        return self.record_count


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    size: int
    path: str


class Log:
    """A partition's segmented log in `directory` (named `<topic>-<partition>`)."""

    def __init__(self, directory: str | os.PathLike[str], config: LogConfig | None = None, *,
                 recovery_point: int = 0, log_start_offset: int = 0,
                 had_clean_shutdown: bool = True, topic_id: uuid.UUID | str | None = None,
                 high_watermark: int | None = None, clock: Clock | None = None,
                 deleter: DeferredDeleter | None = None, inline_flush: bool = True,
                 dir_failures: LogDirFailureChannel | None = None) -> None:
        self.dir = Path(directory)
        self.dir_failures = dir_failures
        self.topic, self.partition = parse_topic_partition(self.dir)
        self.config = config if config is not None else LogConfig()
        self.clock = clock or system_clock_ms
        self._deleter = deleter if deleter is not None else DeferredDeleter()
        self._owns_deleter = deleter is None
        self.inline_flush = inline_flush
        self._lock = threading.RLock()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT))
        self._partition_metadata = PartitionMetadataFile(self.dir / PARTITION_METADATA_FILE)
        # Files written without fsync on the appending (event loop) thread: partition.metadata
        # and roll-time producer snapshots. The next flush, in the background, fsyncs them, as
        # Kafka's roll and topic-id assignment schedule theirs (KAFKA-15046).
        self._unsynced_files: list[Path] = []
        self._unsynced_lock = threading.Lock()  # leaf lock: taken by other threads' writes
        self._roll_flush_to = 0  # a roll asks the background flush for the segments below
        # The leader-epoch checkpoint too: a leadership change of many partitions would
        # otherwise fsync twice per partition on the event loop (a Kafka broker does it on its
        # metadata thread; Odradek has one loop for both).
        self.leader_epoch_cache.defer_sync = self._defer_sync
        self.topic_id = self._partition_metadata.read()
        if topic_id is not None:
            self.assign_topic_id(topic_id)
        loaded = LogLoader(self, recovery_point, log_start_offset, had_clean_shutdown).load()
        self._view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        self._set_segments(tuple(loaded.segments))
        active = self._segments[-1]
        self._end = LogEnd(loaded.next_offset, active.base_offset, active.size)
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self._high_watermark = 0
        self.producer_state = ProducerStateManager(self.dir)  # loaded below, with the segments
        self.update_high_watermark(high_watermark if high_watermark is not None else 0)
        self.recovered_bytes_truncated = loaded.truncated_bytes
        self.last_flush_ms = self.clock()
        self._dir_needs_flush = True  # new segment files' directory entries
        self._max_offset_cache: tuple[int, int, LogEnd] | None = None
        self._truncations = 0  # bumped by every truncation; invalidates position caches
        # The log cleaner's view of truncations (Kafka's LogManager.truncateTo, which aborts
        # and pauses the cleaning of a log it truncates below the active segment's base): such
        # a truncation calls `on_truncation` with the new active segment's base (the cleaner
        # lowers its checkpoint to it), then bumps `truncation_epoch`, both under the log's
        # lock. A cleaning that read the log at another epoch swaps nothing in
        # (`replace_segments`), so none of its output built from truncated data survives.
        self.on_truncation: Callable[[int], None] | None = None
        self._truncation_epoch = 0
        self._closed = False
        # After a crash the txn indexes of the recovered segments are rewritten from a replay
        # that starts at or below the first of them (Kafka's recoverSegment).
        self._load_producer_state(rebuild_from=loaded.recovered_from)
        # Snapshots of earlier clean closes are not needed any more (Kafka's stray snapshots).
        self.producer_state.remove_stray_snapshots(self._view[1])

    # -- state -----------------------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return self._end.offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def truncation_epoch(self) -> int:
        """How many truncations below the active segment's base the log has had (see
        `on_truncation`)."""
        return self._truncation_epoch

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's: the first unstable offset (of the oldest ongoing transaction, or of an
        ended one whose marker is not below the high watermark yet; at least the log start
        offset) when it is below the high watermark, else the high watermark."""
        high_watermark = self._high_watermark
        first_unstable = self.producer_state.first_unstable_offset
        if first_unstable is None:
            return high_watermark
        return min(max(first_unstable, self._log_start_offset), high_watermark)

    def update_high_watermark(self, offset: int) -> int:
        """Sets the high watermark (a follower takes its leader's; a log loads its checkpoint),
        clamped to [log start offset, log end offset]. Returns the new value."""
        self._set_high_watermark(min(max(offset, self._log_start_offset), self._end.offset))
        return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """A leader moves the high watermark forward only (to at most the log end offset);
        returns whether it moved."""
        new = min(offset, self._end.offset)
        if new > self._high_watermark:
            self._set_high_watermark(new)
            return True
        return False

    def _set_high_watermark(self, offset: int) -> None:
        self._high_watermark = offset
        self.producer_state.on_high_watermark_updated(offset)

    def isolation_limit(self, isolation: FetchIsolation) -> int:
        """The exclusive upper offset a read with `isolation` may return."""
        if isolation is FetchIsolation.HIGH_WATERMARK:
            return self._high_watermark
        if isolation is FetchIsolation.TXN_COMMITTED:
            return self.last_stable_offset
        return self._end.offset

    @property
    def _segments(self) -> tuple[LogSegment, ...]:
        return self._view[0]

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[SegmentInfo]:
        return [SegmentInfo(s.base_offset, s.size, str(s.log_path)) for s in self._segments]

    def log_segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._end.offset - self._recovery_point

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def _defer_sync(self, path: Path) -> None:
        """`path` was written (renamed into place) without fsync: the next flush makes it
        and the directory entry durable."""
        with self._unsynced_lock:
            if path not in self._unsynced_files:
                self._unsynced_files.append(path)
            self._dir_needs_flush = True

    def assign_topic_id(self, topic_id: uuid.UUID | str) -> None:
        """Writes partition.metadata; a log keeps the topic id it was created with."""
        new_id = topic_id_from_str(topic_id_to_str(topic_id))
        if self.topic_id is not None and self.topic_id != new_id:
            raise KafkaError(ErrorCode.INCONSISTENT_TOPIC_ID,
                             f"log {self.dir} has topic id {self.topic_id}, not {new_id}")
        if self.topic_id is None:
            self._partition_metadata.write(new_id, sync=False)
            self._defer_sync(self._partition_metadata.path)
            self.topic_id = new_id

    def update_config(self, config: LogConfig) -> None:
        """Dynamic topic config change: applies to future appends, rolls and retention."""
        self.config = config

    # -- append ----------------------------------------------------------------------------
    @_io_guarded
    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                         now_ms: int | None = None,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendInfo:
        """Validates, assigns offsets from the log end offset and writes the batches."""
        now = self.clock() if now_ms is None else now_ms
        config = self.config
        validated = validate_as_leader(records, config, now, origin)  # CRC outside the lock
        with self._lock:
            self._check_open()
            if not validated.batches:
                return self._empty_append_info()
            idempotent = [(position, header) for position, header in validated.batches
                          if header.producer_id != NO_PRODUCER_ID]
            if idempotent and origin is AppendOrigin.CLIENT:
                # Produce v3+ carries one batch; a retry of a batch already in the log is
                # answered with the original's offsets and writes nothing.
                duplicate = self.producer_state.find_duplicate(idempotent[0][1])
                if duplicate is not None:
                    info = self._empty_append_info()
                    info.first_offset, info.last_offset = (duplicate.first_offset,
                                                           duplicate.last_offset)
                    info.duplicate = True
                    return info
            for position, header in idempotent:
                marker = end_txn_marker_of(validated.records, position, header) \
                    if header.is_control else None
                self.producer_state.check_append(header, marker)
            patched = assign_offsets(validated, self._end.offset, leader_epoch, config, now)
            return self._append(patched, leader_epoch)

    @_io_guarded
    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Appends replicated batches with their offsets (which must follow the log end)."""
        with self._lock:
            self._check_open()
            validated = validate_as_follower(records, self.config, self._end.offset)
            if not validated.batches:
                return self._empty_append_info()
            return self._append(validated, None)

    def _empty_append_info(self) -> AppendInfo:
        return AppendInfo(-1, -1, NO_TIMESTAMP, -1, NO_TIMESTAMP, self._log_start_offset, 0, 0, 0,
                          [])

    def _append(self, validated: ValidatedRecords, leader_epoch: int | None) -> AppendInfo:
        segment = self._maybe_roll(validated)
        segment.append(validated.buffers(), validated.batches)
        info = AppendInfo(
            first_offset=validated.first_offset, last_offset=validated.last_offset,
            max_timestamp=validated.max_timestamp,
            offset_of_max_timestamp=validated.offset_of_max_timestamp,
            log_append_time=validated.log_append_time, log_start_offset=self._log_start_offset,
            valid_bytes=validated.size, record_count=validated.record_count,
            batch_count=len(validated.batches), batches=[h for _, h in validated.batches])
        self._end = LogEnd(info.last_offset + 1, segment.base_offset, segment.size)
        for position, header in validated.batches:
            if header.producer_id != NO_PRODUCER_ID:
                marker = end_txn_marker_of(validated.records, position, header) \
                    if header.is_control else None
                completed = self.producer_state.update(header, marker)
                if completed is not None:
                    self._index_completed(segment, completed)
        if leader_epoch is not None:
            self._maybe_assign_epoch(leader_epoch, info.first_offset)
        else:
            for _, header in validated.batches:
                self._maybe_assign_epoch(header.partition_leader_epoch, header.base_offset)
        if self.unflushed_messages >= self.config.flush_messages:
            if self.inline_flush:
                self.flush()
            else:
                info.flush_needed = True
        return info

    @staticmethod
    def _index_completed(segment: LogSegment, txn: CompletedTxn) -> None:
        """An aborted transaction goes into the txn index of the segment holding its marker."""
        if txn.is_aborted:
            segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset,
                                                txn.last_offset, txn.last_stable_offset))

    def _maybe_assign_epoch(self, epoch: int, start_offset: int) -> None:
        latest = self.leader_epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.leader_epoch_cache.assign(epoch, start_offset)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.dir} is closed")

    def _io_failed(self, error: OSError) -> KafkaError:
        """An I/O error while changing the log: no further writes (the files may hold a partial
        batch that only restart recovery can judge), the directory reported offline."""
        with self._lock:
            self._closed = True
        if self.dir_failures is not None:
            self.dir_failures.report(self.dir.parent, error)
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                          f"I/O error on log {self.dir}: {error}")

    # -- roll ------------------------------------------------------------------------------
    def _should_roll(self, segment: LogSegment, validated: ValidatedRecords, now_ms: int) -> bool:
        config = self.config
        if segment.size == 0:
            return not segment.can_hold_offset(validated.last_offset)
        waited = segment.time_waited_for_roll(now_ms, validated.max_timestamp)
        return (waited > config.segment_ms - segment.rolling_jitter_ms
                or segment.size > config.segment_bytes - validated.size
                or segment.offset_index.is_full() or segment.time_index.is_full()
                or not segment.can_hold_offset(validated.last_offset))

    def _maybe_roll(self, validated: ValidatedRecords) -> LogSegment:
        segment = self._segments[-1]
        if self._should_roll(segment, validated, self.clock()):
            segment = self.roll(max(validated.first_offset, self._end.offset))
        return segment

    def _new_segment(self, base_offset: int) -> LogSegment:
        config = self.config
        jitter = 0
        if config.segment_jitter_ms > 0:
            jitter = random.randrange(min(config.segment_jitter_ms, config.segment_ms))
        return LogSegment(
            self.dir, base_offset, index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes, rolling_jitter_ms=jitter,
            created_ms=self.clock(),
            preallocate_bytes=config.segment_bytes if config.preallocate else 0, active=True)

    @_io_guarded
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Starts a new active segment at max(expected_next_offset, log end offset)."""
        with self._lock:
            self._check_open()
            new_offset = max(expected_next_offset or 0, self._end.offset)
            old = self._segments[-1]
            if old.base_offset == new_offset:
                if old.size == 0:
                    return old  # rolling an empty segment changes nothing
                raise RuntimeError(f"segment {new_offset} already exists in {self.dir}")
            old.on_become_inactive()
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                # Kafka removes stale files of a previous incarnation at this offset.
                (self.dir / f"{new_offset:020d}{suffix}").unlink(missing_ok=True)
            segment = self._new_segment(new_offset)
            self._set_segments((*self._segments, segment))
            self._end = LogEnd(self._end.offset, segment.base_offset, 0)
            # Every batch below new_offset is in the producer state: a load can start here.
            if self.producer_state.take_snapshot(new_offset, sync=False):
                self._defer_sync(self.producer_state.snapshot_path(new_offset))
            self._dir_needs_flush = True  # the new files' directory entries
            self._roll_flush_to = new_offset
            return segment

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        # One attribute swap: readers see the old or the new list, never a mix.
        self._view = (segments, tuple(s.base_offset for s in segments))

    # -- read ------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True,
             isolation: FetchIsolation = FetchIsolation.LOG_END) -> FetchData:
        """Whole batches from one segment, starting with the batch holding `start_offset`.

        `isolation` bounds the batches returned (log end, high watermark or last stable
        offset); `max_offset` (exclusive) bounds them further, for internal readers that stop
        at an offset of their own. Raises KafkaError(OFFSET_OUT_OF_RANGE) when start_offset is
        below the log start offset or above the log end offset.
        """
        if isolation is not FetchIsolation.LOG_END:
            limit_offset = self.isolation_limit(isolation)
            max_offset = limit_offset if max_offset is None else min(max_offset, limit_offset)
        log_start = self._log_start_offset
        end = self._end  # read before the segment list: the list is never older than the end
        segments, bases = self._view
        if start_offset < max(log_start, bases[0]) or start_offset > end.offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {start_offset} is out of range for {self.topic}-"
                             f"{self.partition}: log start offset {log_start}, "
                             f"log end offset {end.offset}")
        if max_offset is not None and start_offset >= max_offset:
            return FetchData.empty(start_offset, end.segment_base_offset)
        limit = end if max_offset is None or max_offset >= end.offset else \
            self._position_of(max_offset, segments, bases)
        if start_offset >= limit.offset:
            return FetchData.empty(start_offset, limit.segment_base_offset)
        index = bisect.bisect_right(bases, start_offset) - 1
        index = max(index, 0)
        while index < len(segments):
            segment = segments[index]
            if segment.base_offset > limit.segment_base_offset:
                break
            max_position = (limit.position if segment.base_offset == limit.segment_base_offset
                            else segment.size)
            fetched = segment.read(start_offset, max_bytes, max_position, min_one_batch)
            if fetched is not None:
                return fetched
            index += 1
        return FetchData.empty(start_offset, limit.segment_base_offset)

    def _position_of(self, offset: int, segments: tuple[LogSegment, ...],
                     bases: tuple[int, ...]) -> LogEnd:
        """Where the batch holding `offset` starts (batches ending below it are readable)."""
        cached = self._max_offset_cache
        if cached is not None and cached[0] == offset and cached[1] == self._truncations:
            return cached[2]
        truncations = self._truncations
        result = self._locate(offset, segments, bases)
        self._max_offset_cache = (offset, truncations, result)
        return result

    def _locate(self, offset: int, segments: tuple[LogSegment, ...],
                bases: tuple[int, ...]) -> LogEnd:
        index = max(bisect.bisect_right(bases, offset) - 1, 0)
        for segment in segments[index:]:
            found = segment.translate_offset(offset)
            if found is not None:
                return LogEnd(offset, segment.base_offset, found[0])
        return self._end

    def position_of(self, offset: int) -> LogEnd:
        """Where the batch holding `offset` starts (the log end if none does): what a long
        poll computes once and then compares with the end of the readable region."""
        segments, bases = self._view
        return self._locate(offset, segments, bases)

    def readable_bytes(self, start: LogEnd, isolation: FetchIsolation) -> int:
        """Bytes readable from `start` (a `position_of`) up to the `isolation` limit, from
        segment sizes and the end position alone: no data is read (a long poll's min.bytes
        check on every wake-up)."""
        limit_offset = self.isolation_limit(isolation)
        if start.offset >= limit_offset:
            return 0
        segments, bases = self._view
        limit = self._end if limit_offset >= self._end.offset else \
            self._position_of(limit_offset, segments, bases)
        if limit.segment_base_offset == start.segment_base_offset:
            return max(limit.position - start.position, 0)
        total = 0
        for segment in segments[max(bisect.bisect_right(bases, start.offset) - 1, 0):]:
            if segment.base_offset > limit.segment_base_offset:
                break
            if segment.base_offset == start.segment_base_offset:
                total += max(segment.size - start.position, 0)
            elif segment.base_offset == limit.segment_base_offset:
                total += limit.position
            else:
                total += segment.size
        return total

    def read_records(self, start_offset: int, max_bytes: int = 1 << 20,
                     max_offset: int | None = None) -> bytes:
        """Convenience for internal consumers (coordinators, tests): the bytes of `read`."""
        return self.read(start_offset, max_bytes, max_offset).read_bytes()

    # -- ListOffsets -----------------------------------------------------------------------
    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2/-4 earliest, -1 latest, -3 max timestamp, else the first record
        whose timestamp >= `timestamp` (None if there is none)."""
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = self._log_start_offset
            epoch = self.leader_epoch_cache.epoch_for_offset(start)
            return TimestampAndOffset(start, NO_TIMESTAMP, -1 if epoch is None else epoch)
        if timestamp == LATEST_TIMESTAMP:
            epoch = self.leader_epoch_cache.latest_epoch
            return TimestampAndOffset(self._end.offset, NO_TIMESTAMP,
                                      -1 if epoch is None else epoch)
        segments = self._segments
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp_so_far().timestamp)
            max_ts = best.max_timestamp_so_far()
            if max_ts.timestamp < 0:
                return TimestampAndOffset(-1, NO_TIMESTAMP, -1)
            found = best.find_offset_by_timestamp(max_ts.timestamp, self._log_start_offset)
            if found is None:
                return None
            return self._record_at_timestamp(best, found, max_ts.timestamp, exact=True)
        if timestamp < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"unknown ListOffsets timestamp {timestamp}")
        for segment in segments:
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return self._record_at_timestamp(segment, found, timestamp, exact=False)
        return None

    # ListOffsets semantics used by Kafka clients' offsetsForTimes
    offset_for_timestamp = fetch_offset_by_timestamp

    def _record_at_timestamp(self, segment: LogSegment, found: tuple[int, BatchHeader],
                             timestamp: int, exact: bool) -> TimestampAndOffset:
        """Finds the record inside the batch (decoding only this one batch)."""
        position, header = found
        epoch = header.partition_leader_epoch
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            offset = max(header.base_offset, self._log_start_offset)
            return TimestampAndOffset(offset, header.max_timestamp, epoch)
        data = segment.read_batch(position, header)
        for record in iter_records(data, 0, header):
            if record.offset < self._log_start_offset:
                continue
            if (record.timestamp == timestamp) if exact else (record.timestamp >= timestamp):
                return TimestampAndOffset(record.offset, record.timestamp, epoch)
        return TimestampAndOffset(header.last_offset, header.max_timestamp, epoch)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset), (-1, -1) if unknown."""
        return self.leader_epoch_cache.end_offset_for(epoch, self._end.offset)

    # -- flush -----------------------------------------------------------------------------
    @_io_guarded
    def flush(self, up_to_offset: int | None = None) -> None:
        """fsyncs segments holding offsets in [recovery point, up_to_offset) and advances the
        recovery point. The fsyncs run outside the lock: appends continue meanwhile."""
        with self._lock:
            target = self._end.offset if up_to_offset is None else min(up_to_offset,
                                                                        self._end.offset)
            if target <= self._recovery_point and not self._dir_needs_flush and \
                    not self._unsynced_files:
                return
            segments, bases = self._view
            first = max(bisect.bisect_right(bases, self._recovery_point) - 1, 0)
            to_flush = [s for s in segments[first:] if s.base_offset < target]
            with self._unsynced_lock:
                flush_dir, self._dir_needs_flush = self._dir_needs_flush, False
                unsynced, self._unsynced_files = self._unsynced_files, []
            truncations = self._truncations
        for segment in to_flush:
            try:
                segment.flush()
            except (ValueError, OSError):
                if segment in self._segments:
                    raise  # only a segment deleted meanwhile may fail
        for path in unsynced:
            fsync_file(path)
        if flush_dir:
            fsync_dir(self.dir)
        with self._lock:
            if self._truncations == truncations and target > self._recovery_point:
                self._recovery_point = target
            self.last_flush_ms = self.clock()

    # -- retention -------------------------------------------------------------------------
    @_io_guarded
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention by time and size (cleanup.policy=delete) and by log start offset."""
        now = self.clock() if now_ms is None else now_ms
        deleted = self._delete_log_start_offset_breached_segments()
        if self.config.delete:
            deleted += self._delete_retention_size_breached_segments()
            deleted += self._delete_retention_ms_breached_segments(now)
        return deleted

    def _delete_retention_ms_breached_segments(self, now_ms: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete_segments_while(
            lambda segment, _next: now_ms - segment.largest_timestamp > retention_ms)

    def _delete_retention_size_breached_segments(self) -> int:
        retention_bytes = self.config.retention_bytes
        excess = self.size_in_bytes - retention_bytes
        if retention_bytes < 0 or excess < 0:
            return 0

        def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False

        return self._delete_segments_while(breached)

    def _delete_log_start_offset_breached_segments(self) -> int:
        return self._delete_segments_while(
            lambda _segment, following: following is not None
            and following.base_offset <= self._log_start_offset)

    def _delete_segments_while(
            self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Deletes the longest prefix of segments matching `predicate` that lies entirely
        below the high watermark (Kafka's deletableSegments + deleteSegments)."""
        with self._lock:
            self._check_open()
            segments = self._segments
            deletable: list[LogSegment] = []
            for index, segment in enumerate(segments):
                following = segments[index + 1] if index + 1 < len(segments) else None
                if following is None and segment.size == 0:
                    break
                upper = following.base_offset if following is not None else self._end.offset
                if not (self._high_watermark >= upper and predicate(segment, following)):
                    break
                deletable.append(segment)
            if not deletable:
                return 0
            if len(deletable) == len(segments):
                self.roll()  # always keep one segment: the new, empty active one
            self._remove_and_delete(deletable)
            self._increment_log_start_offset(self._segments[0].base_offset)
            # Snapshots go with their segments; the newest at or below the new first segment
            # stays: it remembers producers whose batches were just deleted.
            self.producer_state.delete_snapshots_before(self._segments[0].base_offset)
            return len(deletable)

    def _remove_and_delete(self, doomed: list[LogSegment]) -> None:
        """Drops segments from the view, renames them `.deleted`, deletes them later."""
        doomed_ids = {id(segment) for segment in doomed}
        self._set_segments(tuple(s for s in self._segments if id(s) not in doomed_ids))
        self._retire(doomed)

    # -- log cleaner ------------------------------------------------------------------------
    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """Producer id -> (last offset of its last data batch, or None when only a marker is
        known; epoch): the batches the cleaner keeps, if only empty, so that the producer
        state rebuilt from the log keeps every active producer (Kafka's
        lastRecordsOfActiveProducers)."""
        with self._lock:
            return {producer_id: (entry.batches[-1].last_offset if entry.batches else None,
                                  entry.epoch)
                    for producer_id, entry in self.producer_state.producers.items()}

    @_io_guarded
    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment],
                         on_step: Callable[[str], None] | None = None, *,
                         truncation_epoch: int | None = None) -> bool:
        """Swaps the cleaner's output `cleaned` (files `*.cleaned`, flushed) in for the
        segments `old` (Kafka's replaceSegments). Returns False, deleting `cleaned`, when the
        log changed meanwhile: a truncation, retention or deletion removed one of `old`, or
        (given the `truncation_epoch` the cleaning read the log at) a truncation below the
        active segment happened since.

        Crash safety: `.cleaned` -> `.swap` (durable) marks the output complete; the old
        segments are then renamed `.deleted` and the swap file takes their place. The loader
        deletes `.cleaned` leftovers and completes any `.swap` (see `loader`). Readers see the
        old or the new segment list (one attribute swap); the old files stay open until
        `file.delete.delay.ms` so reads already handed out finish."""
        step = on_step or (lambda _name: None)
        with self._lock:
            current = {id(segment) for segment in self._segments}
            if self._closed or not old or any(id(s) not in current for s in old) \
                    or old[-1] is self._segments[-1] or (
                        truncation_epoch is not None
                        and truncation_epoch != self._truncation_epoch):
                cleaned.delete()
                return False
            cleaned.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            fsync_dir(self.dir)
            step("swap")
            self._retire(old)
            step("old_deleted")
            cleaned.change_file_suffixes(SWAP_SUFFIX, "")
            doomed = {id(segment) for segment in old}
            replaced: list[LogSegment] = []
            for segment in self._segments:
                if id(segment) == id(old[0]):
                    replaced.append(cleaned)
                elif id(segment) not in doomed:
                    replaced.append(segment)
            self._set_segments(tuple(replaced))
            self._truncations += 1  # cached batch positions may point into replaced files
            fsync_dir(self.dir)
            step("swapped")
            return True

    def _retire(self, doomed: list[LogSegment]) -> None:
        # Open handles survive the rename, so in-flight reads finish; files go after the delay.
        due = self.clock() + self.config.file_delete_delay_ms
        for segment in doomed:
            segment.change_file_suffixes("", DELETED_SUFFIX)
            self._deleter.schedule(due, segment.delete)

    def _increment_log_start_offset(self, offset: int) -> None:
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self._recovery_point = max(self._recovery_point, offset)
            self._set_high_watermark(max(self._high_watermark, offset))

    @_io_guarded
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: moves the log start offset to `offset` (at most the high watermark)
        and deletes segments wholly below it. Returns the new log start offset."""
        with self._lock:
            self._check_open()
            if offset > self._high_watermark:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"cannot move the log start offset of {self.topic}-"
                                 f"{self.partition} to {offset}, beyond the high watermark "
                                 f"{self._high_watermark}")
            self._increment_log_start_offset(offset)
            self._delete_log_start_offset_breached_segments()
            return self._log_start_offset

    # -- truncation ------------------------------------------------------------------------
    @_io_guarded
    def truncate_to(self, target_offset: int) -> bool:
        """Removes everything at and after `target_offset` (follower truncation)."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {target_offset}")
        with self._lock:
            self._check_open()
            if target_offset >= self._end.offset:
                return False
            if self._segments[0].base_offset > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            # Within the active segment nothing a cleaning reads changes (Kafka's
            # needToStopCleaner).
            below_active = target_offset < self._segments[-1].base_offset
            with self._truncating_below_active() if below_active else contextlib.nullcontext():
                self._truncations += 1
                # Snapshots above the new end describe batches about to go: delete them first
                # (durably), so a crash midway never leaves one that the data contradicts.
                if self.producer_state.delete_snapshots_above(target_offset):
                    fsync_dir(self.dir)
                doomed = [s for s in self._segments if s.base_offset > target_offset]
                if doomed:
                    self._remove_and_delete(doomed)
                active = self._segments[-1]
                found = active.translate_offset(target_offset)
                new_end = target_offset
                if found is not None and found[1].base_offset < target_offset:
                    new_end = found[1].base_offset  # a batch is removed whole
                active.truncate_to(target_offset)
                active.make_active()
                self._end = LogEnd(new_end, active.base_offset, active.size)
                self.leader_epoch_cache.truncate_from_end(new_end)
                self._log_start_offset = min(self._log_start_offset, new_end)
                self._recovery_point = min(self._recovery_point, new_end)
                self._high_watermark = min(self._high_watermark, new_end)
                self._load_producer_state()
            return True

    @contextlib.contextmanager
    def _truncating_below_active(self) -> Iterator[None]:
        """Around a truncation that may remove what a cleaning read (under the log's lock):
        afterwards, even a failed one, the cleaner learns the new active segment's base and
        the epoch moves, in that order (a cleaning that sees the new epoch is selected with
        the lowered checkpoint)."""
        try:
            yield
        finally:
            listener = self.on_truncation
            if listener is not None:
                listener(self._segments[-1].base_offset)
            self._truncation_epoch += 1

    @_io_guarded
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Deletes all data; the log restarts empty at `new_offset`."""
        with self._lock:
            self._check_open()
            with self._truncating_below_active():
                self._truncations += 1
                self.producer_state.truncate_fully()  # before the data goes, as in truncate_to
                old = list(self._segments)
                self._retire(old)  # renamed first: the new segment may reuse a base offset
                segment = self._new_segment(new_offset)
                self._set_segments((segment,))
                self._end = LogEnd(new_offset, new_offset, 0)
                self.leader_epoch_cache.clear_and_flush()
                self._log_start_offset = new_offset
                self._recovery_point = new_offset
                self._high_watermark = new_offset
                self._dir_needs_flush = True

    # -- producer state --------------------------------------------------------------------
    def _load_producer_state(self, rebuild_from: int | None = None) -> None:
        """Loads the newest usable snapshot at or below the log end offset (deleting those
        above it; at or below `rebuild_from` when given) and replays the batch headers after
        it; without one, replays every batch. Only headers are read, and the one record of
        each transaction marker. The high watermark then settles which ended transactions
        are stable."""
        started = time.perf_counter()
        snapshot_offset = self.producer_state.reload(self._end.offset, at_most=rebuild_from)
        loaded = time.perf_counter()
        self._replay_producer_state(snapshot_offset)
        self.producer_state.on_high_watermark_updated(self._high_watermark)
        if self._end.offset > self._log_start_offset:
            # Kafka's line: what a restart cost, and whether a snapshot spared the scan.
            logger.info("%s: producer state recovery took %d ms for snapshot load (%s) and %d "
                        "ms for segment recovery from offset %d", self.dir.name,
                        (loaded - started) * 1000,
                        "none" if snapshot_offset is None else f"at offset {snapshot_offset}",
                        (time.perf_counter() - loaded) * 1000, snapshot_offset or 0)

    def _replay_producer_state(self, from_offset: int | None) -> None:
        """Records every batch with offsets at or after `from_offset` (all if None), and
        rewrites the txn index of that range from the markers met."""
        segments, bases = self._view
        first = 0 if from_offset is None else max(bisect.bisect_right(bases, from_offset) - 1, 0)
        producer_state = self.producer_state
        for segment in segments[first:]:
            start = 0
            segment.txn_index.truncate_to(max(from_offset or 0, segment.base_offset))
            if from_offset is not None and segment.base_offset < from_offset:
                found = segment.translate_offset(from_offset)  # index lookup, a few headers
                if found is None:
                    continue
                start = found[0]
            for position, header in segment.iter_headers(start, segment.size):
                if header.producer_id == NO_PRODUCER_ID or (
                        from_offset is not None and header.last_offset < from_offset):
                    continue
                marker = None
                if header.is_control:
                    marker = end_txn_marker_of(segment.read_batch(position, header), 0, header)
                completed = producer_state.update(header, marker)
                if completed is not None:
                    self._index_completed(segment, completed)

    # -- transactions ----------------------------------------------------------------------
    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether that producer's transaction in this partition is open at that epoch (the
        produce path's check that a transactional write joins an open transaction)."""
        return self.producer_state.has_ongoing_transaction(producer_id, producer_epoch)

    def active_producers(self) -> list[ProducerView]:
        return self.producer_state.active_producers()

    def remove_expired_producers(self, now_ms: int | None = None,
                                 expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forgets producers idle for `producer.id.expiration.ms`, except those with an open
        transaction (the log manager's periodic producer-expiration check)."""
        now = self.clock() if now_ms is None else now_ms
        with self._lock:
            return self.producer_state.remove_expired_producers(now, expiration_ms)

    def collect_aborted_transactions(self, start_offset: int, upper_offset: int
                                     ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_offset): the txn index
        entries whose marker is at or after `start_offset` and whose first offset is below
        `upper_offset`, from the segment holding `start_offset` on until an entry's last
        stable offset reaches `upper_offset` (Kafka's collectAbortedTransactions)."""
        segments, bases = self._view
        found: list[AbortedTxn] = []
        for segment in segments[max(bisect.bisect_right(bases, start_offset) - 1, 0):]:
            entries, complete = segment.txn_index.collect(start_offset, upper_offset)
            found += entries
            if complete:
                break
        return found

    def aborted_transactions_in(self, fetched: FetchData) -> list[AbortedTxn]:
        """What a read_committed consumer needs with `fetched`: the aborted transactions
        from the fetch offset to the last offset returned (from the region's last batch
        header, no record read)."""
        if fetched.length == 0 or fetched.last_offset < 0:
            return []
        return self.collect_aborted_transactions(fetched.fetch_offset, fetched.last_offset + 1)

    # -- life cycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Closes files (active segment trimmed, final time-index entry written)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # A clean close snapshots the state at the log end: the next load replays nothing.
            self.producer_state.take_snapshot(self._end.offset, sync_dir=True)
            segments = self._segments
            for segment in segments[:-1]:
                segment.close()
            segments[-1].close(active=True)
            if self._owns_deleter:
                self._deleter.run_all()

    def mark_deleted(self) -> None:
        """Rejects further writes; files stay open for in-flight reads until `close_handlers`."""
        with self._lock:
            self._closed = True

    def close_handlers(self) -> None:
        """Closes every open file without trimming (the log is being deleted)."""
        for segment in self._segments:
            segment.close_handlers()

    def close_and_flush(self) -> None:
        self.flush()
        self.close()

    def run_pending_deletes(self, now_ms: int | None = None) -> int:
        """For a standalone log (a LogManager runs its shared deleter on tick)."""
        return self._deleter.run_due(self.clock() if now_ms is None else now_ms)

    def rename_dir(self, new_dir: Path) -> None:
        """Moves the whole log (LogManager.delete_log); open files stay valid."""
        with self._lock:
            os.replace(self.dir, new_dir)
            self.dir = new_dir
            for segment in self._segments:
                segment.directory = new_dir
                segment.log_path = new_dir / segment.log_path.name
                segment.offset_index.path = new_dir / segment.offset_index.path.name
                segment.time_index.path = new_dir / segment.time_index.path.name
                segment.txn_index.path = new_dir / segment.txn_index.path.name
            self.leader_epoch_cache.move_checkpoint(new_dir / LEADER_EPOCH_CHECKPOINT)
            self.producer_state.move_to(new_dir)
            self._partition_metadata.path = new_dir / PARTITION_METADATA_FILE

    def background_flush_due(self) -> bool:
        """A roll's segments, new directory entries or files written without fsync wait for
        the background flush (`flush_rolled`)."""
        return (self._roll_flush_to > self._recovery_point or self._dir_needs_flush
                or bool(self._unsynced_files))

    def flush_rolled(self) -> None:
        """Kafka's flush at roll, run in the background: the segments below the last roll
        (not the active one), and what `background_flush_due` names."""
        self.flush(max(self._roll_flush_to, self._recovery_point))

    def needs_time_flush(self, now_ms: int) -> bool:
        return (self.config.flush_ms < LONG_MAX and self.unflushed_messages > 0
                and now_ms - self.last_flush_ms >= self.config.flush_ms)

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
                f"end={self._end.offset}, segments={len(self._segments)})")
