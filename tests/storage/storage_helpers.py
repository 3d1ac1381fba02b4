"""Helpers shared by the storage tests: batch builders, a fake clock, log readers."""

from __future__ import annotations

import os
import time

from odradek.protocol.records import BatchHeader, iter_batches
from odradek.protocol.records.builder import RecordBatchBuilder
from odradek.storage import Log


def now_ms() -> int:
    return int(time.time() * 1000)


def make_batch(count: int = 1, timestamp: int | None = None, value_size: int = 10,
               base_offset: int = 0, leader_epoch: int = -1, timestamps: list[int] | None = None,
               **options: object) -> bytes:
    """One v2 batch of `count` records with values of `value_size` bytes."""
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=leader_epoch,
                                 **options)  # type: ignore[arg-type]
    base = now_ms() if timestamp is None else timestamp
    for index in range(count):
        ts = timestamps[index] if timestamps is not None else base
        builder.append(ts, b"key-%d" % index, bytes([index % 256]) * value_size)
    return builder.build()


def headers_of(data: bytes) -> list[BatchHeader]:
    return [header for _, header in iter_batches(data)]


class FakeClock:
    def __init__(self, start: int | None = None) -> None:
        self.now = now_ms() if start is None else start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms



def append_many(log: Log, batches: int, records_per_batch: int = 1, value_size: int = 10,
                epoch: int = 0, timestamp: int | None = None) -> list[tuple[int, int]]:
    """Appends batches as leader; returns the (first, last) offsets of each."""
    result = []
    for _ in range(batches):
        info = log.append_as_leader(make_batch(records_per_batch, timestamp, value_size), epoch)
        result.append((info.first_offset, info.last_offset))
    log.update_high_watermark(log.log_end_offset)
    return result


def read_all(log: Log, start: int | None = None, max_offset: int | None = None
             ) -> list[BatchHeader]:
    """Every batch from `start` to the end, reading segment by segment."""
    offset = log.log_start_offset if start is None else start
    headers: list[BatchHeader] = []
    for _ in range(100_000):
        if offset >= log.log_end_offset:
            break
        data = log.read(offset, 1 << 20, max_offset).read_bytes()
        batch_headers = headers_of(data)
        if not batch_headers:
            break
        headers.extend(batch_headers)
        offset = batch_headers[-1].next_offset
    return headers


def check_log_consistency(log: Log, samples: int = 200, seed: int = 0) -> list[BatchHeader]:
    """Asserts the invariants recovery must restore; returns all batch headers.

    Every batch has a valid CRC and offsets increase; every offset-index entry points at the
    batch whose last offset it names; time-index entries name offsets inside the segment;
    reads at random offsets return the batch holding that offset.
    """
    import bisect
    import random

    from odradek.protocol.records import verify_crc

    headers: list[BatchHeader] = []
    previous_next = log.log_start_offset
    for segment in log.log_segments():
        data = os.pread(segment.file.fileno(), segment.size, 0)
        positions = {}
        consumed = 0
        for position, header in iter_batches(data):
            verify_crc(data, position, header)
            assert header.base_offset >= previous_next or not headers, (header, previous_next)
            assert header.base_offset >= segment.base_offset
            previous_next = header.next_offset
            positions[position] = header
            headers.append(header)
            consumed = position + header.size
        assert consumed == segment.size, "segment ends with a partial batch"
        for slot in range(segment.offset_index.entries):
            offset, position = segment.offset_index.entry(slot)
            assert position in positions and positions[position].last_offset == offset
        for slot in range(segment.time_index.entries):
            _, offset = segment.time_index.entry(slot)
            assert segment.base_offset <= offset < previous_next
    if headers:
        assert log.log_end_offset == headers[-1].next_offset
        rng = random.Random(seed)
        last_offsets = [header.last_offset for header in headers]
        for _ in range(samples):
            offset = rng.randrange(max(log.log_start_offset, headers[0].base_offset),
                                   log.log_end_offset)
            first = headers_of(log.read(offset, 1).read_bytes())[0]
            # The batch holding the offset, or the next one when the offset falls in a gap.
            expected = headers[bisect.bisect_left(last_offsets, offset)]
            assert first.base_offset == expected.base_offset, (offset, first, expected)
    return headers
