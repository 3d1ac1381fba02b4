"""Sparse offset and time indexes over one segment (Kafka's OffsetIndex and TimeIndex).

File formats are Kafka's (big-endian):
  `.index`      8-byte entries: int32 offset relative to the segment's base offset, int32 position
  `.timeindex` 12-byte entries: int64 timestamp, int32 relative offset

The active segment's index files are preallocated to `segment.index.bytes` (rounded down to a
whole number of entries) and trimmed to their entries when the segment rolls or closes. Indexes
are memory-mapped lazily, on first use, so thousands of idle partitions cost no mappings (each
Python mmap holds a duplicated file descriptor).

Concurrency: one writer (under the log's lock) appends while readers look up; a per-index lock
guards the mapping against being resized or closed under a reader.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the segment rebuilds it from the log."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


NO_TIMESTAMP = -1


class _MmapIndex:
    ENTRY = struct.Struct(">ii")  # overridden
    ENTRY_SIZE = 8

    def __init__(self, path: str | os.PathLike[str], base_offset: int, max_index_size: int,
                 writable: bool = False) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._writable = writable
        self._lock = threading.RLock()
        self._mmap: mmap.mmap | None = None
        self._opened = False
        self._entries = 0
        self._length = 0  # mapped file length in bytes

    # -- life cycle ------------------------------------------------------------------------
    @property
    def max_entries(self) -> int:
        return self.max_index_size // self.ENTRY_SIZE

    def _ensure_open(self) -> None:
        if self._opened:
            return
        with self._lock:
            if self._opened:
                return
            new_file = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                file_size = os.fstat(fd).st_size
                entries = file_size // self.ENTRY_SIZE
                if self._writable:
                    length = self.max_entries * self.ENTRY_SIZE
                    if file_size < length:
                        os.ftruncate(fd, length)  # sparse preallocation
                    else:
                        length = file_size
                else:
                    length = file_size
                self._length = length
                self._mmap = mmap.mmap(fd, length) if length > 0 else None
            finally:
                os.close(fd)
            # A preallocated file left by a crash has a zero-filled tail: not entries.
            self._entries = 0 if new_file else self._count_nonzero_entries(entries)
            self._opened = True

    def _count_nonzero_entries(self, upper: int) -> int:
        """Entries before the zero-filled tail (real entries are never all-zero bytes)."""
        if self._mmap is None:
            return 0
        zero = bytes(self.ENTRY_SIZE)
        low, high = 0, upper
        mm = self._mmap
        while low < high:  # find the first zero entry; zeros are only at the tail
            middle = (low + high) // 2
            start = middle * self.ENTRY_SIZE
            if mm[start:start + self.ENTRY_SIZE] == zero:
                high = middle
            else:
                low = middle + 1
        return low

    @property
    def entries(self) -> int:
        if self._unmapped_and_empty():
            return 0
        self._ensure_open()
        return self._entries

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    def _read_entry(self, slot: int) -> tuple[int, int]:
        assert self._mmap is not None
        return self.ENTRY.unpack_from(self._mmap, slot * self.ENTRY_SIZE)

    def _write_entry(self, first: int, second: int) -> None:
        with self._lock:
            if self._mmap is None or self._entries >= self._length // self.ENTRY_SIZE:
                raise IndexError(f"index {self.path} is full ({self._entries} entries)")
            self.ENTRY.pack_into(self._mmap, self._entries * self.ENTRY_SIZE, first, second)
            self._entries += 1

    def _largest_slot_at_most(self, key: int, field: int) -> int:
        """Slot of the largest entry whose `field` <= key, -1 if none (binary search)."""
        low, high = 0, self._entries - 1
        if high < 0 or self._read_entry(0)[field] > key:
            return -1
        while low < high:
            middle = (low + high + 1) // 2
            if self._read_entry(middle)[field] <= key:
                low = middle
            else:
                high = middle - 1
        return low

    def resize(self, new_size: int) -> None:
        """Remaps the file at `new_size` bytes (rounded down to whole entries)."""
        self._ensure_open()
        with self._lock:
            length = new_size - new_size % self.ENTRY_SIZE
            if length == self._length:
                return
            if self._mmap is not None:
                self._mmap.close()
                self._mmap = None
            fd = os.open(self.path, os.O_RDWR)
            try:
                os.ftruncate(fd, length)
                self._mmap = mmap.mmap(fd, length) if length > 0 else None
            finally:
                os.close(fd)
            self._length = length
            self._entries = min(self._entries, length // self.ENTRY_SIZE)

    def trim_to_valid_size(self) -> None:
        """Drops the preallocated tail (on roll and close) and stops further appends."""
        with self._lock:
            if not self._opened and self._file_is_trimmed():
                self._writable = False
                return
            self.resize(self.entries * self.ENTRY_SIZE)
            self._writable = False

    def _file_is_trimmed(self) -> bool:
        """An unmapped file holding exactly its entries (no preallocated zero tail)."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size % self.ENTRY_SIZE:
                    return False
                if size == 0:
                    return True
                handle.seek(size - self.ENTRY_SIZE)
                return handle.read(self.ENTRY_SIZE) != bytes(self.ENTRY_SIZE)
        except FileNotFoundError:
            return False

    def _append_unmapped(self, first: int, second: int) -> bool:
        """Appends one entry to a trimmed, unmapped file with a plain write (no mapping)."""
        if self._opened or not self._file_is_trimmed():
            return False
        with open(self.path, "ab") as handle:
            handle.write(self.ENTRY.pack(first, second))
        return True

    def make_writable(self) -> None:
        """Re-expands a trimmed index so the segment can take appends again (after load or
        truncation). An index not mapped yet is expanded when first used."""
        with self._lock:
            self._writable = True
            if self._opened:
                self.resize(max(self.max_entries * self.ENTRY_SIZE,
                                self._entries * self.ENTRY_SIZE))

    def create_empty_file(self) -> None:
        """Creates the file with no entries (new segment) without mapping it."""
        self.path.touch()

    def _unmapped_and_empty(self) -> bool:
        """True for an index never mapped whose file has no entries: answer without mapping."""
        if self._opened:
            return False
        try:
            return self.path.stat().st_size == 0
        except FileNotFoundError:
            return True

    def _peek_last_entry(self) -> tuple[int, int] | None:
        """The last entry of a trimmed, unmapped index without mapping it; None: map it."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size == 0:
                    return None
                if size % self.ENTRY_SIZE:
                    return None
                handle.seek(size - self.ENTRY_SIZE)
                raw = handle.read(self.ENTRY_SIZE)
        except FileNotFoundError:
            return None
        if raw == bytes(self.ENTRY_SIZE):
            return None  # preallocated tail: the mapping finds the real end
        return self.ENTRY.unpack(raw)

    def flush(self) -> None:
        with self._lock:
            if self._mmap is not None:
                self._mmap.flush()

    def close(self) -> None:
        with self._lock:
            if not self._opened:
                return
            if self._writable:
                self.trim_to_valid_size()
            self.close_handler()

    def close_handler(self) -> None:
        """Releases the mapping without trimming; reopened lazily on next use."""
        with self._lock:
            if self._mmap is not None:
                self._mmap.close()
                self._mmap = None
            self._opened = False

    def rename(self, new_path: Path) -> None:
        with self._lock:
            if self.path.exists():
                os.replace(self.path, new_path)
            self.path = new_path

    def delete(self) -> None:
        with self._lock:
            self.close_handler()
            self.path.unlink(missing_ok=True)

    def reset(self) -> None:
        """Drops every entry and makes the index writable at full size (before a rebuild)."""
        with self._lock:
            self.close_handler()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, 0)  # then re-extend: a sparse, zero-filled file
                os.ftruncate(fd, self.max_entries * self.ENTRY_SIZE)
            finally:
                os.close(fd)
            self._writable = True
            self._ensure_open()
            self._entries = 0

    def _truncate_to_slot(self, entries: int) -> None:
        with self._lock:
            if entries < self._entries and self._mmap is not None:
                start = entries * self.ENTRY_SIZE
                self._mmap[start:self._entries * self.ENTRY_SIZE] = bytes(
                    (self._entries - entries) * self.ENTRY_SIZE)
            self._entries = min(self._entries, entries)

    def _entries_bytes(self) -> bytes:
        """The entries' raw bytes; read from the file (no mapping) when not opened yet."""
        with self._lock:
            if self._opened:
                return self._mmap[:self._entries * self.ENTRY_SIZE] if self._mmap else b""
        data = self.path.read_bytes()
        data = data[:len(data) - len(data) % self.ENTRY_SIZE]
        # Drop a zero-filled preallocated tail: the last non-zero byte ends the last entry.
        entries = -(-len(data.rstrip(b"\0")) // self.ENTRY_SIZE)
        return data[:entries * self.ENTRY_SIZE]

    def sanity_check_file_size(self) -> None:
        """The cheap check done for every segment at load: whole entries only."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError as exc:
            raise CorruptIndexError(f"index file {self.path} is missing") from exc
        if size % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(f"index file {self.path} has size {size}, not a multiple "
                                    f"of the entry size {self.ENTRY_SIZE}")


def _strictly_increasing(values: list[int]) -> bool:
    return all(map(int.__lt__, values, values[1:]))


class OffsetIndex(_MmapIndex):
    """Maps offsets to file positions: entry = (last offset of a batch, position of that batch).

    An entry is written every `index.interval.bytes` of log, so a lookup lands at most that
    many bytes before the batch sought.
    """

    ENTRY = struct.Struct(">ii")
    ENTRY_SIZE = 8

    def entry(self, slot: int) -> OffsetPosition:
        self._ensure_open()
        with self._lock:
            relative, position = self._read_entry(slot)
        return OffsetPosition(self.base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        if self._unmapped_and_empty():
            return self.base_offset
        if not self._opened:
            peeked = self._peek_last_entry()
            if peeked is not None:
                return self.base_offset + peeked[0]
        self._ensure_open()
        with self._lock:
            if self._entries == 0:
                return self.base_offset
            return self.base_offset + self._read_entry(self._entries - 1)[0]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if not 0 <= relative <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} does not fit index with base {self.base_offset}")
        self._ensure_open()
        with self._lock:
            if self._entries and relative <= self._read_entry(self._entries - 1)[0]:
                raise ValueError(f"offset {offset} is not larger than the last offset "
                                 f"{self.last_offset} in index {self.path}")
            self._write_entry(relative, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= target, or (base offset, 0)."""
        if self._unmapped_and_empty():
            return OffsetPosition(self.base_offset, 0)
        self._ensure_open()
        with self._lock:
            slot = self._largest_slot_at_most(target_offset - self.base_offset, 0)
            if slot < 0:
                return OffsetPosition(self.base_offset, 0)
            relative, position = self._read_entry(slot)
        return OffsetPosition(self.base_offset + relative, position)

    def lookup_by_position(self, position: int) -> OffsetPosition:
        """Largest entry with position <= `position`, or (base offset, 0)."""
        if self._unmapped_and_empty():
            return OffsetPosition(self.base_offset, 0)
        self._ensure_open()
        with self._lock:
            slot = self._largest_slot_at_most(position, 1)
            if slot < 0:
                return OffsetPosition(self.base_offset, 0)
            relative, entry_position = self._read_entry(slot)
        return OffsetPosition(self.base_offset + relative, entry_position)

    def truncate_to(self, offset: int) -> None:
        """Removes entries with offset >= `offset`."""
        self._ensure_open()
        with self._lock:
            slot = self._largest_slot_at_most(offset - self.base_offset, 0)
            if slot < 0:
                keep = 0
            elif self._read_entry(slot)[0] == offset - self.base_offset:
                keep = slot
            else:
                keep = slot + 1
            self._truncate_to_slot(keep)

    def sanity_check(self, log_size: int) -> None:
        """Full check: offsets and positions strictly increasing and inside the log."""
        self.sanity_check_file_size()
        raw = self._entries_bytes()
        entries = struct.unpack(f">{len(raw) // 4}i", raw)
        offsets, positions = list(entries[0::2]), list(entries[1::2])
        if offsets and offsets[0] < 0:
            raise CorruptIndexError(f"index {self.path} has a negative relative offset")
        if not _strictly_increasing(offsets) or not _strictly_increasing(positions):
            raise CorruptIndexError(f"index {self.path} has entries out of order")
        if positions and (positions[0] < 0 or positions[-1] >= log_size):
            raise CorruptIndexError(f"index {self.path} points past the end of the log "
                                    f"({positions[-1]} >= {log_size})")


class TimeIndex(_MmapIndex):
    """Maps timestamps to offsets: entry = (max timestamp so far, offset of that record's batch).

    Entries are appended only when the max timestamp grows. The last slot is reserved for the
    final (max timestamp, offset) entry written when the segment becomes inactive.
    """

    ENTRY = struct.Struct(">qi")
    ENTRY_SIZE = 12

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def entry(self, slot: int) -> TimestampOffset:
        self._ensure_open()
        with self._lock:
            timestamp, relative = self._read_entry(slot)
        return TimestampOffset(timestamp, self.base_offset + relative)

    @property
    def last_entry(self) -> TimestampOffset:
        if self._unmapped_and_empty():
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        if not self._opened:
            peeked = self._peek_last_entry()
            if peeked is not None:
                return TimestampOffset(peeked[0], self.base_offset + peeked[1])
        self._ensure_open()
        with self._lock:
            if self._entries == 0:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            timestamp, relative = self._read_entry(self._entries - 1)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        with self._lock:
            last = self.last_entry  # no mapping needed for an empty or trimmed file
            has_entries = last.timestamp != NO_TIMESTAMP  # entries always have timestamps >= 0
            if has_entries and offset < last.offset:
                raise ValueError(f"offset {offset} is smaller than the last offset {last.offset} "
                                 f"in time index {self.path}")
            if has_entries and timestamp < last.timestamp:
                raise ValueError(f"timestamp {timestamp} is smaller than the last timestamp "
                                 f"{last.timestamp} in time index {self.path}")
            if timestamp <= last.timestamp:
                return
            if not skip_full_check and self.is_full():
                raise IndexError(f"time index {self.path} is full")
            relative = offset - self.base_offset
            if skip_full_check and self._append_unmapped(timestamp, relative):
                return  # the final entry on roll/close: no need to map a 10 MB file for it
            self._ensure_open()
            if self._mmap is None or self._entries >= self._length // self.ENTRY_SIZE:
                self.resize((self._entries + 1) * self.ENTRY_SIZE)
            self._write_entry(timestamp, relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, or (-1, base offset)."""
        if self._unmapped_and_empty():
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        self._ensure_open()
        with self._lock:
            slot = self._largest_slot_at_most(target_timestamp, 0)
            if slot < 0:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            timestamp, relative = self._read_entry(slot)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def truncate_to(self, offset: int) -> None:
        """Removes entries with offset >= `offset`."""
        self._ensure_open()
        with self._lock:
            keep = self._entries
            while keep > 0 and self._read_entry(keep - 1)[1] + self.base_offset >= offset:
                keep -= 1
            self._truncate_to_slot(keep)

    def sanity_check(self, log_size: int) -> None:
        """Full check: timestamps strictly increasing, offsets non-decreasing and >= base."""
        self.sanity_check_file_size()
        raw = self._entries_bytes()
        entries = struct.unpack(">" + "qi" * (len(raw) // self.ENTRY_SIZE), raw)
        timestamps, offsets = list(entries[0::2]), list(entries[1::2])
        if offsets and offsets[0] < 0:
            raise CorruptIndexError(f"time index {self.path} has a negative relative offset")
        if not _strictly_increasing(timestamps) or any(map(int.__gt__, offsets, offsets[1:])):
            raise CorruptIndexError(f"time index {self.path} has entries out of order")
