"""Idempotent producer state of one partition (Kafka's ProducerStateManager, idempotence part).

For each producer id the partition remembers the epoch and the sequence ranges of its last
five batches, so a retried batch is recognised (and answered with its original offset) and a
gap or reordering is refused with OUT_OF_ORDER_SEQUENCE_NUMBER; a producer the partition has no
record of may start at any sequence, as in Kafka. The state is built from batch headers alone
(no record decoding).

Snapshots: `<offset>.snapshot` files in the partition directory hold the state of every batch
below `offset` (the log end offset when it was taken), so opening a log replays only the batch
headers after the newest usable snapshot instead of every segment. The file is Kafka's
ProducerSnapshot version 1::

    version int16 (1) | crc uint32 (CRC32C of everything after it) | entries: int32 count, then
    producer_id int64, epoch int16, last_sequence int32, last_offset int64, offset_delta int32,
    timestamp int64, coordinator_epoch int32, current_txn_first_offset int64   (46 bytes each)

Kafka writes one entry per producer (its last batch) and restores only that batch. We keep up
to five batches per producer and write one entry per cached batch, oldest first: a Kafka reader
keeps the last entry of a producer id (the newest batch), so the file stays readable by Kafka's
tools, and we lose nothing (retries of any of the last five batches are still recognised after
a restart). Every entry of a producer carries its coordinator epoch and the first offset of its
ongoing transaction (-1 if none), so a load restores the ongoing transactions (and with them
the last stable offset) without reading the log.

Transactions (Kafka's ProducerAppendInfo): a transactional data batch starts the producer's
transaction in this partition (its first offset) or continues it; a COMMIT/ABORT control batch
(a marker, written by the transaction coordinator or replicated) ends it. An ended transaction
stays "unreplicated" until the high watermark passes its marker: until then its first offset
still bounds the last stable offset. `first_unstable_offset` is the smallest first offset of
the ongoing and the unreplicated transactions.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from odradek.protocol.errors import ErrorCode, KafkaError, ProtocolError
from odradek.protocol.records import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    EndTxnMarker,
    decode_end_txn_marker,
)
from odradek.protocol.records.record import iter_records
from odradek.storage.checkpoint import fsync_dir

logger = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5  # max.in.flight.requests.per.connection upper bound with idempotence
INT32_MAX = 2**31 - 1

SNAPSHOT_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1
NO_COORDINATOR_EPOCH = -1
NO_TXN_FIRST_OFFSET = -1
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _VERSION.size + _CRC.size  # the CRC covers the entry array


class CorruptSnapshotError(ValueError):
    """A snapshot file that does not parse or fails its CRC; the message names the file."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer entry of a snapshot file (one batch of one producer)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_TXN_FIRST_OFFSET

    @property
    def first_sequence(self) -> int:
        """Kafka's BatchMetadata.firstSeq: last_sequence - offset_delta, wrapping like the
        sequences do (Kafka's DefaultRecordBatch.decrementSequence, quirks included)."""
        if self.last_sequence < self.offset_delta:
            return INT32_MAX - (self.offset_delta - self.last_sequence) + 1
        return self.last_sequence - self.offset_delta

    @property
    def has_batch(self) -> bool:
        """False for a producer known only by its epoch (e.g. after a control batch)."""
        return self.last_offset >= 0


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset_of(path: Path) -> int | None:
    """The offset a `<offset>.snapshot` file is named by; None for any other file."""
    name = path.name
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def encode_snapshot(entries: Sequence[SnapshotEntry]) -> bytes:
    body = bytearray(_COUNT.pack(len(entries)))
    for entry in entries:
        body += _ENTRY.pack(entry.producer_id, entry.producer_epoch, entry.last_sequence,
                            entry.last_offset, entry.offset_delta, entry.timestamp,
                            entry.coordinator_epoch, entry.current_txn_first_offset)
    return (_VERSION.pack(PRODUCER_SNAPSHOT_VERSION) + _CRC.pack(int(crc32c(body)))
            + bytes(body))


def decode_snapshot(data: bytes, name: str = "snapshot") -> list[SnapshotEntry]:
    """Parses a snapshot file's bytes; raises CorruptSnapshotError (messages as Kafka's)."""
    if len(data) < _ENTRIES_OFFSET + _COUNT.size:
        raise CorruptSnapshotError(f"Snapshot failed schema validation: {name} has "
                                   f"{len(data)} bytes, too short for a snapshot header")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    (stored,) = _CRC.unpack_from(data, _VERSION.size)
    computed = int(crc32c(memoryview(data)[_ENTRIES_OFFSET:]))
    if stored != computed:
        raise CorruptSnapshotError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                                   f"{stored}. Computed crc: {computed}")
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    start = _ENTRIES_OFFSET + _COUNT.size
    if count < 0 or len(data) != start + count * _ENTRY.size:
        raise CorruptSnapshotError(f"Snapshot failed schema validation: {name} announces "
                                   f"{count} entries in {len(data) - start} bytes")
    return [SnapshotEntry(*_ENTRY.unpack_from(data, start + index * _ENTRY.size))
            for index in range(count)]


def read_snapshot_file(path: Path) -> list[SnapshotEntry]:
    return decode_snapshot(path.read_bytes(), str(path))


def write_snapshot_file(path: Path, entries: Sequence[SnapshotEntry], sync: bool = True) -> None:
    """Atomically: `<name>.tmp` (a leftover the loader removes), fsync, rename. The caller
    makes the directory entry durable (fsync of the directory) when it needs to. Without
    `sync` the caller fsyncs the file later: until then a power loss may leave it torn, which
    the loader treats as a corrupt snapshot (skipped for an older one or a rebuild)."""
    tmp = path.with_name(path.name + ".tmp")
    data = encode_snapshot(entries)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_TXN_FIRST_OFFSET

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at `last_offset` (Kafka's CompletedTxn);
    `last_stable_offset` is the LSO right after the marker (what the txn index records)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class ProducerView:
    """One active producer of a partition, as DescribeProducers and the tools show it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def end_txn_marker_of(data: bytes | bytearray | memoryview, position: int,
                      header: BatchHeader) -> EndTxnMarker | None:
    """The COMMIT/ABORT marker in the control batch at `position` (its one record; the only
    batches whose records the producer state reads). None for other control records."""
    for record in iter_records(data, position, header):
        try:
            return decode_end_txn_marker(record)
        except ProtocolError:  # not a transaction marker (or not decodable)
            return None
    return None


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateManager:
    """The producer state of one partition and, with a `directory`, its snapshot files.

    The owner (the Log) tells which offsets snapshots are taken at and which offsets the state
    covers: a snapshot at `offset` must only be taken when every batch below `offset` has been
    recorded (`update`) and none at or above it.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.directory = directory
        # Ongoing transactions: first offset -> producer id, in offset order (a transaction
        # starts at the log end, so insertion order is offset order; a load sorts).
        self.ongoing: dict[int, int] = {}
        # Ended transactions whose marker the high watermark has not passed: first offset ->.
        self.unreplicated: dict[int, CompletedTxn] = {}
        self._first_unstable: int | None = None
        self._snapshot_offsets: list[int] = []  # sorted; the snapshot files on disk
        if directory is not None and directory.is_dir():
            self._snapshot_offsets = sorted(
                offset for offset in map(snapshot_offset_of, directory.iterdir())
                if offset is not None)

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """Validates an incoming client batch; returns the original of a retried batch."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(header.producer_id)
        first_seq, last_seq = header.base_sequence, header.last_sequence
        if entry is None:
            # Kafka accepts any first sequence from a producer it has no record of (KIP-360):
            # its state may have expired (`producer.id.expiration.ms`) or been removed with the
            # segments that held it (retention, DeleteRecords) while the producer lives on.
            return None
        if header.producer_epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"Epoch {header.producer_epoch} of producer {header.producer_id} "
                             f"is older than the current epoch {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if first_seq != 0:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"Invalid sequence number for new epoch {header.producer_epoch}"
                                 f": {first_seq} (request epoch), 0 (expected)")
            return None
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        expected = _next_seq(entry.last_seq)
        if first_seq != expected:
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"Out of order sequence number for producer {header.producer_id}: "
                             f"{first_seq} (incoming seq. number), {entry.last_seq} "
                             "(current end sequence number)")
        return None

    def check_append(self, header: BatchHeader, marker: EndTxnMarker | None) -> None:
        """Kafka's ProducerAppendInfo checks of a batch about to be appended by a client or a
        coordinator (replicated batches are not checked): an older producer epoch is
        INVALID_PRODUCER_EPOCH; a marker from an older coordinator epoch is
        TRANSACTION_COORDINATOR_FENCED; a non-transactional batch while the producer's
        transaction is open is INVALID_TXN_STATE. Raises before anything is written."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return
        if header.producer_epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"Epoch of producer {header.producer_id} is "
                             f"{header.producer_epoch}, which is smaller than the last seen "
                             f"epoch {entry.epoch}")
        if header.is_control:
            if marker is not None and entry.coordinator_epoch > marker.coordinator_epoch:
                raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                 f"Invalid coordinator epoch for producerId "
                                 f"{header.producer_id}: {marker.coordinator_epoch} (zombie), "
                                 f"{entry.coordinator_epoch} (current)")
        elif entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"Expected transactional write from producer {header.producer_id}")

    def update(self, header: BatchHeader, marker: EndTxnMarker | None = None
               ) -> CompletedTxn | None:
        """Records a batch now in the log (its header carries the assigned offsets); for a
        COMMIT/ABORT control batch `marker` is its marker. Returns the transaction a marker
        ended (None for a marker without data before it: it changes neither the LSO nor the
        txn index, as in Kafka)."""
        return self.record(header, header.base_offset, header.last_offset, marker)

    def record(self, header: BatchHeader, first_offset: int, last_offset: int,
               marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Records a batch appended at [first_offset, last_offset]."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(header.producer_epoch)
            self.producers[producer_id] = entry
        elif header.producer_epoch > entry.epoch:
            # A new epoch forgets the batches; an open transaction stays open (Kafka's
            # maybeUpdateProducerEpoch): only a marker ends it.
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        if header.is_control:
            if marker is None:
                return None
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp = header.max_timestamp
            txn_first = entry.current_txn_first_offset
            if txn_first < 0:
                return None
            entry.current_txn_first_offset = NO_TXN_FIRST_OFFSET
            return self._complete(CompletedTxn(producer_id, txn_first, first_offset,
                                               not marker.commit,
                                               self._stable_offset_after(producer_id,
                                                                         first_offset)))
        entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence,
                                           first_offset, last_offset, header.max_timestamp))
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[first_offset] = producer_id
            if self._first_unstable is None or first_offset < self._first_unstable:
                self._first_unstable = first_offset
        return None

    def _stable_offset_after(self, producer_id: int, marker_offset: int) -> int:
        """Kafka's lastStableOffset(completedTxn): the first offset of the oldest ongoing
        transaction of another producer, else the offset after the marker."""
        for first_offset, owner in self.ongoing.items():
            if owner != producer_id:
                return first_offset
        return marker_offset + 1

    def _complete(self, txn: CompletedTxn) -> CompletedTxn:
        self.ongoing.pop(txn.first_offset, None)
        self.unreplicated[txn.first_offset] = txn
        return txn

    def _recompute_first_unstable(self) -> None:
        first = next(iter(self.ongoing), None)  # ongoing is in offset order
        if self.unreplicated:
            lowest = min(self.unreplicated)
            first = lowest if first is None else min(first, lowest)
        self._first_unstable = first

    @property
    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing transaction, or of an ended one whose
        marker the high watermark has not passed yet (None: every transaction is stable)."""
        if self.unreplicated:
            self._recompute_first_unstable()  # ended transactions are few: O(ongoing) at most
        return self._first_unstable

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Ended transactions whose marker is below the high watermark are stable now."""
        if not self.unreplicated:
            return
        done = [first for first, txn in self.unreplicated.items()
                if txn.last_offset < high_watermark]
        for first in done:
            del self.unreplicated[first]
        if done:
            self._recompute_first_unstable()

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self.producers.get(producer_id)
        return (entry is not None and entry.epoch == producer_epoch
                and entry.current_txn_first_offset >= 0)

    def active_producers(self) -> list[ProducerView]:
        return [ProducerView(producer_id, entry.epoch, entry.last_seq, entry.last_timestamp,
                             entry.coordinator_epoch, entry.current_txn_first_offset)
                for producer_id, entry in self.producers.items()]

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forgets producers idle for `producer.id.expiration.ms` (since their last batch's
        timestamp), never one with an open transaction (Kafka's isProducerExpired). Returns
        how many went."""
        expired = [producer_id for producer_id, entry in self.producers.items()
                   if entry.current_txn_first_offset < 0
                   and now_ms - entry.last_timestamp >= expiration_ms]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self._first_unstable = None

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """From data batch headers alone (markers need their records: the Log replays those)."""
        self.clear()
        for header in headers:
            self.update(header)

    # -- snapshots -------------------------------------------------------------------------
    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshot_offsets)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshot_offsets[-1] if self._snapshot_offsets else None

    def snapshot_path(self, offset: int) -> Path:
        if self.directory is None:
            raise ValueError("this producer state has no directory for snapshots")
        return self.directory / snapshot_file_name(offset)

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """The state as snapshot entries: one per cached batch, oldest first (a producer
        without batches, known only by its epoch, gets one entry with last offset -1)."""
        entries = []
        for producer_id, entry in self.producers.items():
            txn = (entry.coordinator_epoch, entry.current_txn_first_offset)
            if not entry.batches:
                entries.append(SnapshotEntry(producer_id, entry.epoch, NO_SEQUENCE, -1, 0,
                                             entry.last_timestamp, *txn))
            for batch in entry.batches:
                entries.append(SnapshotEntry(
                    producer_id, entry.epoch, batch.last_seq, batch.last_offset,
                    batch.last_offset - batch.first_offset, batch.timestamp, *txn))
        return entries

    def load_entries(self, entries: Iterable[SnapshotEntry]) -> None:
        """Replaces the state with a snapshot's entries (a later entry of a producer adds a
        batch; one with another epoch starts the producer over, as a new epoch does)."""
        self.clear()
        for item in entries:
            entry = self.producers.get(item.producer_id)
            if entry is None or entry.epoch != item.producer_epoch:
                entry = ProducerEntry(item.producer_epoch)
                self.producers[item.producer_id] = entry
            entry.last_timestamp = item.timestamp
            entry.coordinator_epoch = item.coordinator_epoch
            entry.current_txn_first_offset = (item.current_txn_first_offset
                                              if item.current_txn_first_offset >= 0
                                              else NO_TXN_FIRST_OFFSET)
            if item.has_batch:
                first_seq = (NO_SEQUENCE if item.last_sequence == NO_SEQUENCE
                             else item.first_sequence)
                entry.batches.append(BatchMetadata(
                    first_seq, item.last_sequence, item.last_offset - item.offset_delta,
                    item.last_offset, item.timestamp))
        # The open transactions, so the last stable offset needs no replay (Kafka's
        # loadProducerEntry).
        for first_offset, producer_id in sorted(
                (entry.current_txn_first_offset, producer_id)
                for producer_id, entry in self.producers.items()
                if entry.current_txn_first_offset >= 0):
            self.ongoing[first_offset] = producer_id
        self._recompute_first_unstable()

    def take_snapshot(self, offset: int, sync_dir: bool = False, sync: bool = True) -> bool:
        """Writes the state as `<offset>.snapshot` unless that file exists already (a snapshot
        at an offset describes the batches below it, which cannot have changed). Returns
        whether a file was written. A failed write is logged, not raised: snapshots only
        spare a replay of batch headers at the next load."""
        if self.directory is None or offset in self._snapshot_offsets:
            return False
        path = self.snapshot_path(offset)
        try:
            write_snapshot_file(path, self.snapshot_entries(), sync)
            if sync_dir:
                fsync_dir(self.directory)
        except OSError as exc:
            logger.warning("could not write producer snapshot %s: %s", path, exc)
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)
            return False
        bisect.insort(self._snapshot_offsets, offset)
        return True

    def reload(self, log_end_offset: int, at_most: int | None = None) -> int | None:
        """Deletes snapshots above `log_end_offset`, then loads the newest readable one (at
        or below `at_most` if given; a corrupt one is deleted with a warning and the next older
        one tried). Returns its offset, from which the owner replays batch headers; None when
        there is none (the state is then empty and the owner replays everything)."""
        self.clear()
        self.delete_snapshots_above(log_end_offset)
        limit = log_end_offset if at_most is None else min(at_most, log_end_offset)
        while True:
            usable = bisect.bisect_right(self._snapshot_offsets, limit)
            if not usable:
                break
            offset = self._snapshot_offsets[usable - 1]
            path = self.snapshot_path(offset)
            try:
                entries = read_snapshot_file(path)
            except (OSError, CorruptSnapshotError) as exc:
                logger.warning("ignoring producer snapshot %s, rebuilding from the log instead:"
                               " %s", path, exc)
                self._delete_snapshot(offset)
                continue
            self.load_entries(entries)
            return offset
        return None

    def delete_snapshots_above(self, offset: int) -> int:
        """Deletes snapshots at offsets > `offset` (truncation); returns how many."""
        doomed = self._snapshot_offsets[bisect.bisect_right(self._snapshot_offsets, offset):]
        for snapshot in doomed:
            self._delete_snapshot(snapshot)
        return len(doomed)

    def delete_snapshots_before(self, offset: int) -> int:
        """Deletes snapshots below `offset` (the oldest segment's base after retention) except
        the newest at or below it, which holds the state of producers whose batches are gone.
        Returns how many were deleted."""
        keep_from = bisect.bisect_right(self._snapshot_offsets, offset) - 1
        doomed = self._snapshot_offsets[:max(keep_from, 0)]
        for snapshot in doomed:
            self._delete_snapshot(snapshot)
        return len(doomed)

    def remove_stray_snapshots(self, segment_base_offsets: Sequence[int]) -> int:
        """At load: keeps the snapshots taken at segment rolls (at a segment's base offset),
        the newest one (a clean close's) and the newest at or below the first segment; deletes
        the rest (older closes' snapshots), so their number stays bounded by the segments'."""
        if not self._snapshot_offsets:
            return 0
        keep = set(segment_base_offsets)
        keep.add(self._snapshot_offsets[-1])
        if segment_base_offsets:
            index = bisect.bisect_right(self._snapshot_offsets, segment_base_offsets[0]) - 1
            if index >= 0:
                keep.add(self._snapshot_offsets[index])
        doomed = [offset for offset in self._snapshot_offsets if offset not in keep]
        for offset in doomed:
            self._delete_snapshot(offset)
        return len(doomed)

    def truncate_fully(self) -> None:
        """The log restarts empty: no producer is known and every snapshot goes."""
        self.clear()
        for offset in list(self._snapshot_offsets):
            self._delete_snapshot(offset)

    def move_to(self, directory: Path) -> None:
        """The log directory was renamed; the snapshot files moved with it."""
        self.directory = directory

    def _delete_snapshot(self, offset: int) -> None:
        self.snapshot_path(offset).unlink(missing_ok=True)
        index = bisect.bisect_left(self._snapshot_offsets, offset)
        if index < len(self._snapshot_offsets) and self._snapshot_offsets[index] == offset:
            del self._snapshot_offsets[index]

