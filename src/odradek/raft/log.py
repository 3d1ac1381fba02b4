"""What Raft needs of the replicated log (Kafka's ReplicatedLog), and two implementations: over
the storage `Log` (the real `__cluster_metadata-0`) and in memory (the simulation's, which
models a crash: only the flushed prefix survives).

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
from odradek.storage.log import Log
from odradek.storage.validator import AppendOrigin


class OffsetAndEpoch(NamedTuple):
    offset: int
    epoch: int


class RaftLog(Protocol):
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

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_fetched_epoch(self) -> int:
        latest = self.log.latest_epoch
        return 0 if latest is None else latest

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        found_epoch, found_end = self.log.end_offset_for_epoch(epoch)
        if found_epoch < 0:
            return self.last_fetched_epoch, self.end_offset
        return found_epoch, found_end

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


# ------------------------------------------------------------------------------------------------
# in memory


class MemoryRaftLog:
    """An in-memory RaftLog whose `crash()` keeps only what was flushed (for the simulation and
    unit tests). Batches are kept as bytes, checked (CRC, contiguous offsets) on append."""

    def __init__(self) -> None:
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
        return 0

    @property
    def last_fetched_epoch(self) -> int:
        return self._epochs[-1][0] if self._epochs else 0

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> None:
        self._high_watermark = max(0, min(offset, self._end))

    @property
    def flushed_end(self) -> int:
        return self._flushed_end

    def batches(self) -> list[bytes]:
        return list(self._batches)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        if not self._epochs:
            return 0, self._end
        epochs = [e for e, _ in self._epochs]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return self._epochs[-1][0], self._end
        if higher == 0:
            return epoch, self._epochs[0][1]
        return self._epochs[higher - 1][0], self._epochs[higher][1]

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
        if offset < 0 or offset > self._end:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [0, {self._end}]")
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
        self._end = self._last_offsets[-1] + 1 if self._last_offsets else 0
        self._epochs = [(e, start) for e, start in self._epochs if start < self._end]
        self._flushed_end = min(self._flushed_end, self._end)
        self._high_watermark = min(self._high_watermark, self._end)

    def flush(self) -> None:
        self._flushed_end = self._end

    def crash(self) -> None:
        """A process crash: unflushed batches are gone, the high watermark is forgotten."""
        self.truncate_to(self._flushed_end)
        self._high_watermark = 0
