"""One log segment: `<base>.log` plus its `.index`, `.timeindex` and (once a transaction
aborted in it) `.txnindex` (Kafka's LogSegment).

The segment file is a plain concatenation of record batches exactly as they travel on the wire.
Writes use `os.pwrite` at the segment's current size (works for preallocated files too), reads
use `os.pread`, so concurrent readers never share a file position with the writer.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from odradek.protocol.errors import CorruptRecordError, DecodeError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    iter_batches,
    verify_crc,
)
from odradek.storage.epoch import LeaderEpochFileCache
from odradek.storage.index import (
    NO_TIMESTAMP,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
)
from odradek.storage.txn_index import TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

INT32_MAX = 0x7FFFFFFF
_HEADER_CHUNK = 16 * 1024  # bytes read per pread when walking batch headers
_RECOVERY_CHUNK = 8 * 1024 * 1024  # bytes read per pread when validating whole batches


_IOV_MAX = 1024


def _pwrite_all(fd: int, buffers: list[bytes | bytearray | memoryview], position: int) -> int:
    """Writes the buffers back to back at `position` (pwritev, retrying short writes)."""
    pending = [memoryview(buffer).cast("B") for buffer in buffers]
    total = sum(len(view) for view in pending)
    while pending:
        group = pending[:_IOV_MAX]
        written = os.pwritev(fd, group, position)
        position += written
        done = 0
        while done < len(group) and written >= len(group[done]):
            written -= len(group[done])
            done += 1
        pending = pending[done:]
        if written:
            pending[0] = pending[0][written:]
    return total


def file_name(base_offset: int, suffix: str) -> str:
    """Kafka's 20-digit zero-padded offset file names."""
    return f"{base_offset:020d}{suffix}"


@dataclass
class FetchData:
    """A region of a segment file, ready for `os.sendfile(sock, file.fileno(), position, length)`.

    Holds whole batches only, from one segment. The first batch may start before
    `fetch_offset` (clients skip records below the offset they asked for). The file stays open
    until `file.delete.delay.ms` after the segment is deleted, so a region handed out just
    before a retention run or truncation can still be sent.
    """

    file: BinaryIO | None
    position: int
    length: int
    fetch_offset: int
    segment_base_offset: int
    first_batch_offset: int = -1  # base offset of the first batch in the region (-1: empty)
    last_offset: int = -1  # last offset of the last batch in the region (-1: empty)

    def __len__(self) -> int:
        return self.length

    @property
    def first_offset(self) -> int:
        """Base offset of the first batch in the region (-1 when empty)."""
        return self.first_batch_offset

    def read_bytes(self) -> bytes:
        """Materialises the region (for TLS or tests; the broker's fast path is sendfile)."""
        if self.file is None or self.length == 0:
            return b""
        data = os.pread(self.file.fileno(), self.length, self.position)
        while len(data) < self.length:  # pread may return short on some filesystems
            more = os.pread(self.file.fileno(), self.length - len(data),
                            self.position + len(data))
            if not more:
                break
            data += more
        return data

    @classmethod
    def empty(cls, fetch_offset: int, segment_base_offset: int = -1) -> FetchData:
        return cls(None, 0, 0, fetch_offset, segment_base_offset)


class LogSegment:
    """A segment's files and the bookkeeping needed to append, read, index and recover them."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, rolling_jitter_ms: int = 0, created_ms: int = 0,
                 preallocate_bytes: int = 0, suffix: str = "", active: bool = False,
                 must_exist: bool = False) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = created_ms
        self.log_path = directory / file_name(base_offset, LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(directory / file_name(base_offset, INDEX_SUFFIX + suffix),
                                        base_offset, max_index_size, writable=active)
        self.time_index = TimeIndex(directory / file_name(base_offset, TIME_INDEX_SUFFIX + suffix),
                                    base_offset, max_index_size, writable=active)
        self.txn_index = TransactionIndex(directory / file_name(base_offset,
                                                                TXN_INDEX_SUFFIX + suffix))
        self._file_lock = threading.Lock()
        self._file: BinaryIO | None = None
        exists = self.log_path.exists()
        if not exists and must_exist:  # (a reader of another process's segment)
            raise FileNotFoundError(f"no segment file {self.log_path}")
        if not exists:
            with open(self.log_path, "wb") as handle:
                if preallocate_bytes > 0:
                    os.ftruncate(handle.fileno(), preallocate_bytes)
            # Empty index files now; mapped (and preallocated) only once entries arrive.
            self.offset_index.create_empty_file()
            self.time_index.create_empty_file()
        # A preallocated file is longer than its data; the owner fixes `size` via recover().
        self._size = self.log_path.stat().st_size if exists else 0
        self._max_timestamp: TimestampOffset | None = None if exists else TimestampOffset(
            NO_TIMESTAMP, base_offset)
        self._rolling_based_timestamp: int | None = None
        self._bytes_since_last_index_entry = 0
        self.preallocated = preallocate_bytes > 0

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size})"

    # -- files -----------------------------------------------------------------------------
    @property
    def file(self) -> BinaryIO:
        """The open segment file (opened lazily so idle segments hold no descriptor)."""
        handle = self._file
        if handle is None:
            with self._file_lock:
                if self._file is None:
                    self._file = open(self.log_path, "r+b", buffering=0)
                handle = self._file
        return handle

    @property
    def size(self) -> int:
        return self._size

    def set_size(self, size: int) -> None:
        """Used by the loader for a file whose tail beyond `size` is not data (preallocated)."""
        self._size = size

    def _pread(self, length: int, position: int) -> bytes:
        return os.pread(self.file.fileno(), length, position)

    # -- append ----------------------------------------------------------------------------
    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def append(self, buffers: list[bytes | bytearray | memoryview],
               batches: list[tuple[int, BatchHeader]]) -> None:
        """Writes validated batches (`buffers` concatenated; batch positions relative to their
        start) and indexes them."""
        if not batches:
            return
        last_offset = batches[-1][1].last_offset
        if not self.can_hold_offset(last_offset):
            raise ValueError(f"offset {last_offset} does not fit segment {self.base_offset}")
        position = self._size
        total = _pwrite_all(self.file.fileno(), buffers, position)
        if position == 0:
            self._rolling_based_timestamp = batches[0][1].max_timestamp
        max_ts = self.max_timestamp_so_far()
        for relative_position, header in batches:
            if header.max_timestamp > max_ts.timestamp:
                max_ts = TimestampOffset(header.max_timestamp, header.last_offset)
                self._max_timestamp = max_ts
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(header.last_offset, position + relative_position)
                self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += header.size
        self._size = position + total

    # -- reads -----------------------------------------------------------------------------
    def iter_headers(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) for each complete batch in [start, end), reading only headers.

        Raises CorruptRecordError/DecodeError on garbage, stops at an incomplete tail.
        """
        position = start
        while end - position >= BATCH_HEADER_SIZE:
            chunk = self._pread(min(_HEADER_CHUNK, end - position), position)
            offset = 0
            while len(chunk) - offset >= BATCH_HEADER_SIZE:
                header = BatchHeader.parse(chunk, offset)
                if position + offset + header.size > end:
                    return
                yield position + offset, header
                offset += header.size
            if offset == 0:
                return  # the file is shorter than expected
            position += offset

    def translate_offset(self, offset: int, starting_position: int = 0,
                         end: int | None = None) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset >= `offset` (position, header), None if none."""
        entry = self.offset_index.lookup(offset)
        start = max(entry.position, starting_position)
        for position, header in self.iter_headers(start, self._size if end is None else end):
            if header.last_offset >= offset:
                return position, header
        return None

    def whole_batches_end(self, start: int, limit: int) -> tuple[int, BatchHeader | None]:
        """The largest batch boundary in [start, limit] and the batch ending there (None when
        that is `start`): an index lookup by position, then a scan of a few batch headers."""
        probe = limit
        while True:
            scan_from = max(start, self.offset_index.lookup_by_position(probe).position)
            end, last = scan_from, None
            for position, header in self.iter_headers(scan_from, limit):
                end, last = position + header.size, header
            if last is not None or scan_from == start:
                return end, last
            probe = scan_from - 1  # the indexed batch overruns the limit: start one entry back

    def read(self, start_offset: int, max_size: int, max_position: int,
             min_one_batch: bool) -> FetchData | None:
        """Whole batches from the one containing `start_offset`, within `max_position`.

        None when the segment has no batch with last offset >= start_offset below
        max_position (the caller moves to the next segment).
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, header = found
        budget = max(max_size, header.size) if min_one_batch else max_size
        limit = min(max_position, position + budget)
        if limit < position + header.size:  # above max_position, or larger than max_size
            return FetchData(self.file, position, 0, start_offset, self.base_offset)
        end, last = self.whole_batches_end(position + header.size, limit)
        return FetchData(self.file, position, end - position, start_offset, self.base_offset,
                         header.base_offset, (last or header).last_offset)

    def read_next_offset(self) -> int:
        """Offset after the last batch (base offset when empty)."""
        next_offset = self.base_offset
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        for _, header in self.iter_headers(start, self._size):
            next_offset = header.next_offset
        return next_offset

    def first_batch_header(self) -> BatchHeader | None:
        for _, header in self.iter_headers(0, self._size):
            return header
        return None

    # -- timestamps ------------------------------------------------------------------------
    def max_timestamp_so_far(self) -> TimestampOffset:
        """(max batch timestamp, last offset of that batch) in this segment."""
        if self._max_timestamp is None:
            self._max_timestamp = self._compute_max_timestamp()
        return self._max_timestamp

    def _compute_max_timestamp(self) -> TimestampOffset:
        # The time index covers every batch up to the last offset-index entry's batch (both are
        # appended together); scan the batches after it for anything larger.
        best = self.time_index.last_entry
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        for _, header in self.iter_headers(start, self._size):
            if header.max_timestamp > best.timestamp:
                best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime if no batch carries one (retention)."""
        timestamp = self.max_timestamp_so_far().timestamp
        if timestamp >= 0:
            return timestamp
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(self.log_path.stat().st_mtime * 1000)

    def rolling_based_timestamp(self) -> int | None:
        if self._rolling_based_timestamp is None and self._size > 0:
            header = self.first_batch_header()
            self._rolling_based_timestamp = header.max_timestamp if header else None
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: record-time based when timestamps exist, wall-clock otherwise."""
        first = self.rolling_based_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int
                                 ) -> tuple[int, BatchHeader] | None:
        """The first batch at/after starting_offset whose max timestamp >= `timestamp`."""
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for batch_position, header in self.iter_headers(position, self._size):
            if header.last_offset >= starting_offset and header.max_timestamp >= timestamp:
                return batch_position, header
        return None

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return self._pread(header.size, position)

    # -- recovery --------------------------------------------------------------------------
    def iter_valid_batches(self, end: int) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """(position, header, chunk view) for batches in [0, end), reading large chunks.

        CRC is not checked here; recover() does. Stops at an incomplete tail; raises
        CorruptRecordError on an impossible length or magic.
        """
        position = 0
        while end - position >= LOG_OVERHEAD:
            chunk = self._pread(min(_RECOVERY_CHUNK, end - position), position)
            consumed = 0
            for offset, header in iter_batches(chunk):
                yield position + offset, header, memoryview(chunk)[offset:offset + header.size]
                consumed = offset + header.size
            if consumed == 0:  # a batch larger than the chunk, or a torn tail
                if len(chunk) < BATCH_HEADER_SIZE:
                    return
                header = BatchHeader.parse(chunk, 0)
                if position + header.size > end:
                    return
                chunk = self._pread(header.size, position)
                if len(chunk) < header.size:
                    return
                yield position, header, memoryview(chunk)
                consumed = header.size
            position += consumed

    def recover(self, epoch_cache: LeaderEpochFileCache | None = None,
                min_offset: int | None = None) -> int:
        """Validates every batch, truncates at the first bad one, rebuilds both indexes.

        A batch is valid when its structure and CRC check out, its offsets are not below the
        previous batch's (or `min_offset`) and fit the segment. Returns the bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        file_size = os.fstat(self.file.fileno()).st_size
        expected = self.base_offset if min_offset is None else max(min_offset, self.base_offset)
        valid_bytes = last_index_entry = 0
        max_ts = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        first_timestamp: int | None = None
        try:
            for position, header, view in self.iter_valid_batches(file_size):
                verify_crc(view, 0, header)
                if (header.base_offset < expected or header.last_offset_delta < 0
                        or not self.can_hold_offset(header.last_offset)):
                    raise CorruptRecordError(f"batch at position {position} has offsets "
                                             f"{header.base_offset}..{header.last_offset}, "
                                             f"expected >= {expected}")
                if first_timestamp is None:
                    first_timestamp = header.max_timestamp
                if header.max_timestamp > max_ts.timestamp:
                    max_ts = TimestampOffset(header.max_timestamp, header.last_offset)
                if valid_bytes - last_index_entry > self.index_interval_bytes:
                    self.offset_index.append(header.last_offset, valid_bytes)
                    self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                    last_index_entry = valid_bytes
                valid_bytes += header.size
                expected = header.next_offset
                epoch = header.partition_leader_epoch
                if epoch_cache is not None and epoch >= 0 and (
                        epoch_cache.latest_epoch is None or epoch > epoch_cache.latest_epoch):
                    epoch_cache.assign(epoch, header.base_offset)
        except (CorruptRecordError, DecodeError):
            pass  # everything from here on is a torn or corrupt tail
        truncated = file_size - valid_bytes
        if truncated > 0:
            os.ftruncate(self.file.fileno(), valid_bytes)
        self._size = valid_bytes
        self.preallocated = False
        self._max_timestamp = max_ts
        self._rolling_based_timestamp = first_timestamp
        self._bytes_since_last_index_entry = valid_bytes - last_index_entry
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        return truncated

    def sanity_check(self) -> None:
        """Raises CorruptIndexError when an index is missing, the wrong size or out of order."""
        if not self.offset_index.path.exists() or not self.time_index.path.exists():
            raise CorruptIndexError(f"index files of segment {self.log_path} are missing")
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check(self._size)

    # -- truncation and life cycle ---------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Removes the batch containing `offset` and everything after it; returns bytes cut."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        cut = self._size - position
        os.ftruncate(self.file.fileno(), position)
        self._size = position
        self._bytes_since_last_index_entry = 0
        self._max_timestamp = None
        if position == 0:
            self._rolling_based_timestamp = None
        return cut

    def make_active(self) -> None:
        """Re-expands the indexes so this segment can take appends (after load/truncation)."""
        self.offset_index.make_writable()
        self.time_index.make_writable()

    def on_become_inactive(self) -> None:
        """On roll: final max-timestamp entry, trim indexes and any preallocated file tail."""
        max_ts = self.max_timestamp_so_far()
        self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._trim_file()

    def _trim_file(self) -> None:
        if self.preallocated:
            os.ftruncate(self.file.fileno(), self._size)
            self.preallocated = False

    def flush(self) -> None:
        os.fsync(self.file.fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self, active: bool = False) -> None:
        """Closes files; an active segment first writes its final time-index entry."""
        if active and self._size > 0:
            max_ts = self.max_timestamp_so_far()
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        if self._file is not None:
            self._trim_file()
        self.close_handlers()

    def close_handlers(self) -> None:
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self.txn_index.close()
        with self._file_lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Renames all files of the segment (e.g. '' -> '.deleted'); open handles stay valid."""
        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and name.endswith(old_suffix):
                name = name[: -len(old_suffix)]
            return path.with_name(name + new_suffix)

        _ = self.file  # open before renaming: a lazy open racing the rename would miss the file
        with self._file_lock:
            new_log_path = renamed(self.log_path)
            if self.log_path.exists():
                os.replace(self.log_path, new_log_path)
            self.log_path = new_log_path
        self.offset_index.rename(renamed(self.offset_index.path))
        self.time_index.rename(renamed(self.time_index.path))
        self.txn_index.rename(renamed(self.txn_index.path))

    def delete(self) -> None:
        """Closes and removes all files of the segment."""
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path,
                     self.txn_index.path):
            path.unlink(missing_ok=True)
