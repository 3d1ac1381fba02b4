"""What Raft needs of the replicated log (Kafka's ReplicatedLog), and two implementations: over
the storage `Log` (the real `__cluster_metadata-0`) and in memory (the simulation's, which
models a crash: only the flushed prefix survives).

Each log has its snapshots (`snapshots`, see odradek.raft.snapshot): the log may start after 0
(`start_offset`) once a snapshot covers what was before; a follower that installs a snapshot
truncates its whole log and restarts it at the snapshot's end (`truncate_fully_and_start_at`).
While the log is empty at a snapshot's end, its last epoch is the snapshot's.

Offsets are Kafka's: `end_offset` is the next offset to assign; a high watermark is exclusive.
An "epoch" of a batch is its partition leader epoch: the Raft term that wrote it. The data is
real RecordBatch v2 bytes either way, what followers fetch is what the wire carries.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import NamedTuple, Protocol

from odradek.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from odradek.protocol.records import (
    BatchHeader,
    iter_batches,
    patch_base_offset,
    patch_partition_leader_epoch,
    verify_crc,
)
from odradek.raft.snapshot import (
    FileSnapshotStore,
    MemorySnapshotStore,
    OffsetAndEpoch,
    SnapshotStore,
)
from odradek.storage.log import Log
from odradek.storage.validator import AppendOrigin

__all__ = ["MemoryRaftLog", "OffsetAndEpoch", "RaftLog", "StorageRaftLog"]


class RaftLog(Protocol):
    snapshots: SnapshotStore

    @property
    def end_offset(self) -> int: ...

    @property
    def start_offset(self) -> int: ...

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch (0 for an empty log)."""

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) of the largest epoch <= `epoch` the log knows: Kafka's
        endOffsetForEpoch. The end offset of an epoch is where the next epoch starts (the log
        end for the last one). An epoch above every known one gives the last epoch and the log
        end."""

    def append_as_leader(self, batch: bytes, epoch: int) -> tuple[int, int]:
        """Assigns offsets from the log end and stamps `epoch`; (first, last) offset."""

    def append_as_follower(self, batches: bytes | memoryview) -> None:
        """Appends replicated batches as they are; the first must start at the log end."""

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `offset` (at least one if any), up to
        `max_bytes`."""

    def truncate_to(self, offset: int) -> None:
        """Removes every batch at or after `offset`."""

    @property
    def high_watermark(self) -> int: ...

    def update_high_watermark(self, offset: int) -> None: ...

    def flush(self) -> None:
        """Makes the whole log durable."""

    @property
    def flushed_end(self) -> int:
        """The log is durable below this offset."""

    @property
    def size_in_bytes(self) -> int: ...

    def delete_before(self, offset: int) -> bool:
        """Moves the log start to `offset` (at most the high watermark; a snapshot must cover
        what is before it) and deletes what lies wholly below; whether it moved."""

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Deletes the whole log: it restarts empty at `offset`, its high watermark there (a
        follower installing a snapshot that ends at `offset`)."""


def end_offset(log: RaftLog) -> OffsetAndEpoch:
    """The log's end as Raft compares logs: (end offset, last epoch)."""
    return OffsetAndEpoch(log.end_offset, log.last_fetched_epoch)


def validate_offset_and_epoch(log: RaftLog, fetch_offset: int,
                              last_fetched_epoch: int) -> OffsetAndEpoch | None:
    """A leader checks a Fetch: None if the follower's log matches ours up to `fetch_offset`,
    else where it diverges (the end of the largest epoch we share), for it to truncate to."""
    if fetch_offset == 0 and last_fetched_epoch == 0:
        return None
    epoch, epoch_end = log.end_offset_for_epoch(last_fetched_epoch)
    if epoch != last_fetched_epoch or epoch_end < fetch_offset:
        return OffsetAndEpoch(epoch_end, epoch)
    return None


def snapshot_last_epoch(snapshots: SnapshotStore, start: int, end: int) -> int:
    """The last epoch of a log without batches: the epoch of the snapshot it starts at."""
    latest = snapshots.latest_id()
    if latest is not None and latest.offset == start == end:
        return latest.epoch
    return 0


def snapshot_end_offset_for_epoch(snapshots: SnapshotStore, found: tuple[int, int],
                                  epoch: int) -> tuple[int, int]:
    """Kafka's KafkaMetadataLog.endOffsetForEpoch: an epoch older than the log's first one
    answers the first epoch's start offset; if that is the earliest snapshot's end, the
    snapshot's id says more (the epoch of the record before it)."""
    earliest = snapshots.earliest_id()
    if earliest is not None and found == (epoch, earliest.offset):
        return earliest.epoch, earliest.offset
    return found


class FetchValidation(NamedTuple):
    """How a leader answers a Fetch: VALID (send records), DIVERGING (`position`: where the
    follower's log diverges, for it to truncate to) or SNAPSHOT (`position`: the snapshot id
    to fetch, the follower's offset being before what this log holds)."""

    kind: str
    position: OffsetAndEpoch | None = None


VALID = "valid"
DIVERGING = "diverging"
SNAPSHOT = "snapshot"


def validate_fetch(log: RaftLog, fetch_offset: int, last_fetched_epoch: int) -> FetchValidation:
    """Kafka's validateOffsetAndEpoch with snapshots (KIP-630). A fetch at or before the log
    start (when it is above 0) can only be checked against the snapshot the log starts at; if
    there is none, or the epochs differ, the follower gets the newest snapshot."""
    start = log.start_offset
    if start > 0 and fetch_offset <= start:
        at_start = log.snapshots.info(OffsetAndEpoch(start, last_fetched_epoch))
        if fetch_offset == start and at_start is not None:
            return FetchValidation(VALID)
        latest = log.snapshots.latest_id()
        if latest is not None:
            return FetchValidation(SNAPSHOT, latest)
    earliest = log.snapshots.earliest_id() if start > 0 else None
    if earliest is not None and last_fetched_epoch < earliest.epoch:
        # The follower's last epoch is older than anything this log still holds: no
        # diverging point can be named (the follower would keep its log), so it gets the
        # newest snapshot (Kafka's validateOffsetAndEpoch does the same).
        return FetchValidation(SNAPSHOT, log.snapshots.latest_id())
    diverging = validate_offset_and_epoch(log, fetch_offset, last_fetched_epoch)
    if diverging is not None:
        return FetchValidation(DIVERGING, diverging)
    return FetchValidation(VALID)


def truncation_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Where a follower truncates when the leader reports `diverging` (Kafka's
    truncateToEndOffset): the end of that epoch in both logs, whichever is smaller."""
    if diverging.epoch == 0:
        return min(diverging.offset, log.end_offset)
    local_epoch, local_end = log.end_offset_for_epoch(diverging.epoch)
    if local_epoch == diverging.epoch:
        return min(local_end, diverging.offset)
    return local_end


def iter_log_batches(log: RaftLog, start: int, end: int,
                     chunk_bytes: int = 1 << 20) -> Iterator[tuple[BatchHeader, bytes]]:
    """The whole batches in [start, end) (a batch crossing `end` is not returned)."""
    offset = start
    while offset < end:
        data = log.read(offset, chunk_bytes)
        if not data:
            return
        advanced = False
        for pos, header in iter_batches(data):
            if header.last_offset < offset:
                continue
            if header.last_offset >= end:
                return
            yield header, bytes(data[pos:pos + header.size])
            offset = header.next_offset
            advanced = True
        if not advanced:
            return


# ------------------------------------------------------------------------------------------------
# over the storage Log


class StorageRaftLog:
    """RaftLog over the storage `Log` of `__cluster_metadata-0` (its leader-epoch cache answers
    `end_offset_for_epoch`; its recovery point is how far it is flushed)."""

    def __init__(self, log: Log, snapshots: SnapshotStore | None = None) -> None:
        self.log = log
        self.snapshots = snapshots if snapshots is not None else FileSnapshotStore(log.dir)
        self.truncate_to_latest_snapshot()

    def truncate_to_latest_snapshot(self) -> bool:
        """Kafka's truncateToLatestSnapshot, at open: a follower that crashed after installing
        a snapshot but before truncating its log finishes the job (the snapshot is ahead of
        the log: a later epoch, or the same epoch past the log end)."""
        latest = self.snapshots.latest_id()
        if latest is None:
            return False
        last_epoch = self.log.latest_epoch or 0
        if latest.epoch > last_epoch or (latest.epoch == last_epoch
                                         and latest.offset > self.end_offset):
            self.log.truncate_fully_and_start_at(latest.offset)
            return True
        return False

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_fetched_epoch(self) -> int:
        latest = self.log.latest_epoch
        if latest is None:
            return snapshot_last_epoch(self.snapshots, self.start_offset, self.end_offset)
        return latest

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        found_epoch, found_end = self.log.end_offset_for_epoch(epoch)
        if found_epoch < 0:
            return self.last_fetched_epoch, self.end_offset
        return snapshot_end_offset_for_epoch(self.snapshots, (found_epoch, found_end), epoch)

    def append_as_leader(self, batch: bytes, epoch: int) -> tuple[int, int]:
        info = self.log.append_as_leader(batch, leader_epoch=epoch,
                                         origin=AppendOrigin.COORDINATOR)
        return info.first_offset, info.last_offset

    def append_as_follower(self, batches: bytes | memoryview) -> None:
        self.log.append_as_follower(batches)

    def read(self, offset: int, max_bytes: int) -> bytes:
        return self.log.read(offset, max_bytes, min_one_batch=True).read_bytes()

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def update_high_watermark(self, offset: int) -> None:
        self.log.update_high_watermark(offset)

    def flush(self) -> None:
        self.log.flush()

    @property
    def flushed_end(self) -> int:
        return self.log.recovery_point

    @property
    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    def delete_before(self, offset: int) -> bool:
        if offset <= self.start_offset or offset > self.log.high_watermark:
            return False
        before = self.start_offset
        self.log.delete_records_before(offset)
        return self.start_offset > before

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)


# ------------------------------------------------------------------------------------------------
# in memory


class MemoryRaftLog:
    """An in-memory RaftLog whose `crash()` keeps only what was flushed (for the simulation and
    unit tests). Batches are kept as bytes, checked (CRC, contiguous offsets) on append."""

    def __init__(self, snapshots: MemorySnapshotStore | None = None) -> None:
        self.snapshots = snapshots if snapshots is not None else MemorySnapshotStore()
        self._start = 0
        self._batches: list[bytes] = []
        self._last_offsets: list[int] = []  # per batch
        self._epochs: list[tuple[int, int]] = []  # (epoch, start offset), strictly increasing
        self._end = 0
        self._flushed_end = 0
        self._high_watermark = 0

    # -- state
    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def last_fetched_epoch(self) -> int:
        if self._epochs:
            return self._epochs[-1][0]
        return snapshot_last_epoch(self.snapshots, self._start, self._end)

    @property
    def size_in_bytes(self) -> int:
        return sum(len(data) for data in self._batches)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> None:
        self._high_watermark = max(self._start, min(offset, self._end))

    @property
    def flushed_end(self) -> int:
        return self._flushed_end

    def batches(self) -> list[bytes]:
        return list(self._batches)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        if not self._epochs:
            return self.last_fetched_epoch, self._end
        epochs = [e for e, _ in self._epochs]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return self._epochs[-1][0], self._end
        if higher == 0:
            found = (epoch, self._epochs[0][1])
        else:
            found = (self._epochs[higher - 1][0], self._epochs[higher][1])
        return snapshot_end_offset_for_epoch(self.snapshots, found, epoch)

    # -- append
    def append_as_leader(self, batch: bytes, epoch: int) -> tuple[int, int]:
        data = bytearray(batch)
        headers = list(iter_batches(data))
        if len(headers) != 1 or headers[0][1].size != len(data):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "expected exactly one record batch")
        pos, header = headers[0]
        verify_crc(data, pos, header)
        patch_base_offset(data, 0, self._end)
        patch_partition_leader_epoch(data, 0, epoch)
        first = self._end
        self._add(bytes(data), epoch, first, first + header.last_offset_delta)
        return first, first + header.last_offset_delta

    def append_as_follower(self, batches: bytes | memoryview) -> None:
        data = bytes(batches)
        parsed = list(iter_batches(data))
        # Check everything before changing anything: a bad response appends nothing.
        expected = self._end
        for pos, header in parsed:
            if header.base_offset != expected:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"batch at offset {header.base_offset}, expected {expected}")
            try:
                verify_crc(data, pos, header)
            except CorruptRecordError as exc:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
            expected = header.next_offset
        for pos, header in parsed:
            self._add(data[pos:pos + header.size], header.partition_leader_epoch,
                      header.base_offset, header.last_offset)

    def _add(self, data: bytes, epoch: int, first: int, last: int) -> None:
        self._batches.append(data)
        self._last_offsets.append(last)
        if epoch >= 0 and (not self._epochs or epoch > self._epochs[-1][0]):
            self._epochs.append((epoch, first))
        self._end = last + 1

    # -- read
    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset < self._start or offset > self._end:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [{self._start}, {self._end}]")
        index = bisect.bisect_left(self._last_offsets, offset)
        out: list[bytes] = []
        size = 0
        for data in self._batches[index:]:
            if out and size + len(data) > max_bytes:
                break
            out.append(data)
            size += len(data)
        return b"".join(out)

    # -- truncation, flush, crash
    def truncate_to(self, offset: int) -> None:
        if offset >= self._end:
            return
        index = bisect.bisect_left(self._last_offsets, offset)
        del self._batches[index:]
        del self._last_offsets[index:]
        self._end = self._last_offsets[-1] + 1 if self._last_offsets else self._start
        self._epochs = [(e, start) for e, start in self._epochs if start < self._end]
        self._flushed_end = min(self._flushed_end, self._end)
        self._high_watermark = min(self._high_watermark, self._end)

    def flush(self) -> None:
        self._flushed_end = self._end

    def delete_before(self, offset: int) -> bool:
        if offset <= self._start or offset > self._high_watermark:
            return False
        # Whole batches only (a memory log's "segments" are its batches).
        index = bisect.bisect_left(self._last_offsets, offset)
        del self._batches[:index]
        del self._last_offsets[:index]
        self._start = offset
        # Kafka's truncateFromStart: the epoch covering the new start now starts there.
        covering = [(e, s) for e, s in self._epochs if s <= offset]
        later = [(e, s) for e, s in self._epochs if s > offset]
        self._epochs = ([(covering[-1][0], offset)] if covering else []) + later
        self._flushed_end = max(self._flushed_end, offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._batches.clear()
        self._last_offsets.clear()
        self._epochs.clear()
        self._start = self._end = self._flushed_end = self._high_watermark = offset

    def crash(self) -> None:
        """A process crash: unflushed batches are gone, the high watermark is forgotten."""
        self.truncate_to(self._flushed_end)
        self._high_watermark = self._start
