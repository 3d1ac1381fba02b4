"""The aborted-transaction index of one segment: `<base>.txnindex` (Kafka's TransactionIndex).

One entry per aborted transaction whose ABORT marker is in the segment, in marker order, each
34 bytes (Kafka's AbortedTxn, version 0)::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64 |
    last_stable_offset int64

`last_offset` is the marker's offset; `last_stable_offset` is the LSO right after the marker was
appended (the first offset of the oldest other ongoing transaction, else the marker's offset +
1). A read_committed fetch collects the entries overlapping the range it returns so the consumer
can drop the aborted batches; `last_stable_offset >= upper bound` tells that no later entry (in
this or a later segment) can matter, which ends the search.

The file is created lazily with the first entry, as Kafka does: most segments never see an
aborted transaction. The entries are kept in memory once read (34 bytes per abort).
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class CorruptTxnIndexError(ValueError):
    """A `.txnindex` file that is not a whole number of version-0 entries."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def encode(self) -> bytes:
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


def decode_txn_index(data: bytes, name: str = "txnindex") -> list[AbortedTxn]:
    if len(data) % ENTRY_SIZE:
        raise CorruptTxnIndexError(f"{name}: {len(data)} bytes is not a multiple of the "
                                   f"{ENTRY_SIZE}-byte entry size")
    entries = []
    for position in range(0, len(data), ENTRY_SIZE):
        version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
        if version != ABORTED_TXN_VERSION:
            raise CorruptTxnIndexError(f"{name}: unexpected aborted transaction version "
                                       f"{version} at position {position}")
        entries.append(AbortedTxn(producer_id, first, last, lso, version))
    return entries


def read_txn_index_file(path: Path) -> list[AbortedTxn]:
    return decode_txn_index(path.read_bytes(), str(path))


class TransactionIndex:
    """The `.txnindex` of one segment. One writer (under the log's lock); readers take the
    entry list, which the writer replaces wholesale on truncation (copy-on-write)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: tuple[AbortedTxn, ...] | None = None  # None: not read yet
        self._fd: int | None = None
        self._lock = threading.Lock()

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        entries = self._entries
        if entries is None:
            try:
                entries = tuple(read_txn_index_file(self.path))
            except FileNotFoundError:
                entries = ()
            self._entries = entries
        return entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"the last offset of appended transactions must increase: "
                             f"{txn.last_offset} after {entries[-1].last_offset} in {self.path}")
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            data = txn.encode()
            written = os.write(self._fd, data)
            if written != len(data):  # a short write of 34 bytes means a full disk
                raise OSError(f"short write to {self.path}")
        self._entries = (*entries, txn)

    def collect(self, fetch_offset: int, upper_bound_offset: int
                ) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset); True when the search is
        complete (an entry's LSO reaches the upper bound: later markers are beyond it)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drops the entries whose marker is at or after `offset`."""
        entries = self.entries
        keep = 0
        while keep < len(entries) and entries[keep].last_offset < offset:
            keep += 1
        if keep == len(entries):
            return
        if keep == 0:
            self.reset()
            return
        with self._lock, open(self.path, "r+b") as handle:
            handle.truncate(keep * ENTRY_SIZE)
        self._entries = entries[:keep]

    def reset(self) -> None:
        """No entries (the file goes; it comes back with the next entry)."""
        self.close()
        self.path.unlink(missing_ok=True)
        self._entries = ()

    def flush(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def rename(self, new_path: Path) -> None:
        with self._lock:
            if self.path.exists():
                os.replace(self.path, new_path)
            self.path = new_path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
