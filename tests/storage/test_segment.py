"""One log segment on its own: append, reads of whole batches, offset translation, header
walks, batch boundaries, truncation, renames and reopen/recovery of its files."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol.errors import CorruptRecordError, DecodeError
from odradek.protocol.records import BatchHeader, build_batch, iter_batches
from odradek.storage.index import CorruptIndexError
from odradek.storage.segment import DELETED_SUFFIX, INT32_MAX, LogSegment

BASE = 100
T0 = 1_700_000_000_000


def make_segment(directory: Path, base_offset: int = BASE, *, index_interval_bytes: int = 4096,
                 active: bool = True, **options: object) -> LogSegment:
    return LogSegment(directory, base_offset, index_interval_bytes=index_interval_bytes,
                      max_index_size=4096, active=active, **options)  # type: ignore[arg-type]


def batch(base_offset: int, count: int = 1, value_size: int = 20,
          timestamps: list[int] | None = None) -> bytes:
    stamps = timestamps or [T0 + base_offset] * count
    return build_batch([(ts, b"k", bytes([i % 256]) * value_size) for i, ts in enumerate(stamps)],
                       base_offset=base_offset)


def append(segment: LogSegment, *raws: bytes) -> list[tuple[int, BatchHeader]]:
    """Appends the batches in one write; returns (position in the segment, header) of each."""
    batches, relative = [], 0
    for raw in raws:
        batches.append((relative, BatchHeader.parse(raw, 0)))
        relative += len(raw)
    start = segment.size
    segment.append(list(raws), batches)
    return [(start + position, header) for position, header in batches]


def fill(segment: LogSegment, batches: int, first_offset: int = BASE,
         records_per_batch: int = 3) -> list[tuple[int, BatchHeader]]:
    """Batches of `records_per_batch` records with consecutive offsets, one append each."""
    written = []
    offset = first_offset
    for index in range(batches):
        written += append(segment, batch(offset, records_per_batch, value_size=10 + index))
        offset += records_per_batch
    return written


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[LogSegment]:
    created = make_segment(tmp_path)
    yield created
    created.close_handlers()


# -- append and read ---------------------------------------------------------------------------
def test_append_writes_the_batches_back_to_back(segment: LogSegment) -> None:
    raws = [batch(100, 3), batch(103, 2), batch(105, 1)]
    written = append(segment, *raws)
    assert segment.size == sum(map(len, raws)) == segment.log_path.stat().st_size
    assert segment.log_path.read_bytes() == b"".join(raws)
    assert [position for position, _ in written] == [0, len(raws[0]), len(raws[0]) + len(raws[1])]
    assert segment.read_next_offset() == 106
    first = segment.first_batch_header()
    assert first is not None and first.base_offset == 100


def test_an_empty_segment(segment: LogSegment) -> None:
    assert segment.size == 0
    assert segment.read_next_offset() == BASE
    assert segment.first_batch_header() is None
    assert segment.translate_offset(BASE) is None
    assert segment.read(BASE, 1 << 20, 0, True) is None
    assert list(segment.iter_headers(0, 0)) == []
    segment.append([], [])  # nothing to write
    assert segment.size == 0


def test_offsets_must_fit_the_segment(segment: LogSegment) -> None:
    assert segment.can_hold_offset(BASE) and segment.can_hold_offset(BASE + INT32_MAX)
    assert not segment.can_hold_offset(BASE - 1)
    assert not segment.can_hold_offset(BASE + INT32_MAX + 1)
    with pytest.raises(ValueError, match="does not fit"):
        append(segment, batch(BASE + INT32_MAX + 1))
    assert segment.size == 0


def test_read_returns_whole_batches_from_the_one_holding_the_offset(segment: LogSegment) -> None:
    written = fill(segment, 5)  # offsets 100..114, 3 per batch
    sizes = [header.size for _, header in written]
    data = segment.read(104, 1 << 20, segment.size, True)
    assert data is not None
    assert (data.position, data.length) == (written[1][0], segment.size - written[1][0])
    assert (data.fetch_offset, data.first_batch_offset, data.last_offset) == (104, 103, 114)
    assert data.segment_base_offset == BASE
    assert [h.base_offset for _, h in iter_batches(data.read_bytes())] == [103, 106, 109, 112]
    # Only whole batches fit the byte budget.
    limited = segment.read(100, sizes[0] + sizes[1] + sizes[2] // 2, segment.size, True)
    assert limited is not None and limited.length == sizes[0] + sizes[1]
    assert limited.last_offset == 105
    # Beyond the segment's last offset: nothing here (the log moves to the next segment).
    assert segment.read(115, 1 << 20, segment.size, True) is None


def test_read_of_a_first_batch_too_large_for_the_budget(segment: LogSegment) -> None:
    written = fill(segment, 3)
    first_size = written[0][1].size
    whole = segment.read(100, 1, segment.size, True)
    assert whole is not None and whole.length == first_size  # min_one_batch
    assert whole.first_batch_offset == 100 and whole.last_offset == 102
    empty = segment.read(100, 1, segment.size, False)
    assert empty is not None and empty.length == 0 and empty.read_bytes() == b""
    # max_position cuts inside the first batch: nothing readable, even with min_one_batch.
    capped = segment.read(100, 1 << 20, first_size - 1, True)
    assert capped is not None and capped.length == 0
    up_to_first = segment.read(100, 1 << 20, first_size, True)
    assert up_to_first is not None and up_to_first.length == first_size


def test_translate_offset_finds_the_batch_holding_an_offset(tmp_path: Path) -> None:
    # A dense index (an entry per batch after the first) and no index give the same answers.
    for interval in (0, 1 << 20):
        directory = tmp_path / f"interval-{interval}"
        directory.mkdir()
        segment = make_segment(directory, index_interval_bytes=interval)
        written = fill(segment, 12)
        assert (segment.offset_index.entries > 0) == (interval == 0)
        for offset in range(BASE, BASE + 36):
            position, header = written[(offset - BASE) // 3]
            assert segment.translate_offset(offset) == (position, header), (interval, offset)
        assert segment.translate_offset(BASE + 36) is None
        assert segment.translate_offset(BASE - 50) == written[0]  # below: the first batch
        # starting_position skips batches; end stops the scan.
        assert segment.translate_offset(BASE, starting_position=written[4][0]) == written[4]
        assert segment.translate_offset(BASE + 30, end=written[10][0]) is None
        segment.close_handlers()


def test_iter_headers_walks_complete_batches_only(segment: LogSegment) -> None:
    written = fill(segment, 4)
    assert list(segment.iter_headers(0, segment.size)) == written
    assert list(segment.iter_headers(written[2][0], segment.size)) == written[2:]
    # An end inside a batch stops before it (a torn tail, or a read bound).
    assert list(segment.iter_headers(0, written[3][0] + 10)) == written[:3]
    assert list(segment.iter_headers(0, written[1][0] - 1)) == written[:0]
    assert list(segment.iter_headers(0, 30)) == []  # not even a header


def test_iter_headers_walks_more_than_one_read_chunk(segment: LogSegment) -> None:
    written = []
    offset = BASE
    for _ in range(12):  # ~2.5 KiB batches: more than the 16 KiB header chunk in all
        written += append(segment, batch(offset, 2, value_size=1200))
        offset += 2
    assert segment.size > 16 * 1024
    assert list(segment.iter_headers(0, segment.size)) == written


def test_iter_headers_raises_on_garbage(tmp_path: Path) -> None:
    good = batch(BASE, 2)
    (tmp_path / f"{BASE:020d}.log").write_bytes(good + b"\x07" * 100)
    segment = make_segment(tmp_path, active=False)
    try:
        headers = segment.iter_headers(0, segment.size)
        assert next(headers)[1].base_offset == BASE
        with pytest.raises((CorruptRecordError, DecodeError)):
            next(headers)
    finally:
        segment.close_handlers()


def _brute_force_boundary(written: list[tuple[int, BatchHeader]], start: int,
                          limit: int) -> tuple[int, BatchHeader | None]:
    end, last = start, None
    for position, header in written:
        if position >= start and position + header.size <= limit:
            end, last = position + header.size, header
    return end, last


@pytest.mark.parametrize("interval", [0, 150, 1 << 20])
def test_whole_batches_end_is_the_last_boundary_within_the_limit(tmp_path: Path,
                                                                 interval: int) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=interval)
    written = fill(segment, 10)
    boundaries = [position for position, _ in written] + [segment.size]
    rng = random.Random(interval)
    limits = sorted({*boundaries, *(b - 1 for b in boundaries[1:]), *(b + 1 for b in boundaries),
                     *(rng.randrange(segment.size + 1) for _ in range(60))})
    for start in boundaries:
        for limit in limits:
            if start <= limit <= segment.size:
                assert segment.whole_batches_end(start, limit) == \
                    _brute_force_boundary(written, start, limit), (start, limit)
    segment.close_handlers()


# -- timestamps --------------------------------------------------------------------------------
def test_timestamps_and_lookups_by_time(segment: LogSegment) -> None:
    append(segment, batch(100, 2, timestamps=[T0 + 5, T0 + 50]))
    append(segment, batch(102, 2, timestamps=[T0 + 20, T0 + 30]))  # older than the max
    append(segment, batch(104, 1, timestamps=[T0 + 90]))
    assert tuple(segment.max_timestamp_so_far()) == (T0 + 90, 104)
    assert segment.largest_timestamp == T0 + 90
    assert segment.rolling_based_timestamp() == T0 + 50  # the first batch's max timestamp
    assert segment.time_waited_for_roll(0, T0 + 150) == 100
    found = segment.find_offset_by_timestamp(T0 + 40, 100)
    assert found is not None and found[1].base_offset == 100
    found = segment.find_offset_by_timestamp(T0 + 60, 100)
    assert found is not None and found[1].base_offset == 104
    found = segment.find_offset_by_timestamp(T0, 102)  # nothing before the starting offset
    assert found is not None and found[1].base_offset == 102
    assert segment.find_offset_by_timestamp(T0 + 91, 100) is None


def test_a_segment_without_timestamps_waits_by_wall_clock(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, created_ms=1000)
    try:
        assert segment.rolling_based_timestamp() is None
        assert segment.time_waited_for_roll(5000, T0) == 4000
    finally:
        segment.close_handlers()


# -- truncation --------------------------------------------------------------------------------
def test_truncate_to_removes_the_batch_holding_the_offset_and_after(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=0)
    written = fill(segment, 6)  # 100..117
    entries_before = segment.offset_index.entries
    size = segment.size
    cut = segment.truncate_to(108)  # inside the batch 106..108
    assert cut == size - written[2][0]
    assert segment.size == written[2][0] == segment.log_path.stat().st_size
    assert segment.read_next_offset() == 106
    assert segment.offset_index.entries < entries_before
    assert all(segment.offset_index.entry(slot).offset < 106
               for slot in range(segment.offset_index.entries))
    assert tuple(segment.max_timestamp_so_far()) == (T0 + 103, 105)
    assert segment.truncate_to(200) == 0  # beyond the end: nothing to cut
    # Appends continue at the cut.
    append(segment, batch(106, 2))
    assert segment.read_next_offset() == 108
    assert [h.base_offset for _, h in segment.iter_headers(0, segment.size)] == [
        100, 103, 106]
    size = segment.size
    assert segment.truncate_to(BASE) == size
    assert segment.log_path.stat().st_size == 0
    assert segment.size == 0 and segment.rolling_based_timestamp() is None
    segment.close_handlers()


# -- files -------------------------------------------------------------------------------------
def test_change_file_suffixes_renames_every_file_and_reads_go_on(segment: LogSegment,
                                                                 tmp_path: Path) -> None:
    fill(segment, 3)
    segment.offset_index.append(105, 0)  # make sure an index file has content
    before = segment.read(BASE, 1 << 20, segment.size, True)
    assert before is not None
    expected = before.read_bytes()
    names = {path.name for path in tmp_path.iterdir()}
    segment.change_file_suffixes("", DELETED_SUFFIX)
    renamed = {path.name for path in tmp_path.iterdir()}
    assert renamed == {name + DELETED_SUFFIX for name in names}
    assert segment.log_path.name.endswith(".log" + DELETED_SUFFIX)
    assert before.read_bytes() == expected  # the handed-out region still reads
    segment.change_file_suffixes(DELETED_SUFFIX, "")
    assert {path.name for path in tmp_path.iterdir()} == names
    segment.delete()
    assert list(tmp_path.iterdir()) == []


def test_reopen_keeps_data_and_passes_the_sanity_check(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=100)
    written = fill(segment, 8)
    segment.close(active=True)
    reopened = make_segment(tmp_path, index_interval_bytes=100, active=False)
    try:
        assert reopened.size == written[-1][0] + written[-1][1].size
        reopened.sanity_check()
        assert reopened.read_next_offset() == BASE + 24
        assert list(reopened.iter_headers(0, reopened.size)) == written
        assert tuple(reopened.max_timestamp_so_far()) == (T0 + BASE + 21, BASE + 23)
    finally:
        reopened.close_handlers()
    reopened.offset_index.path.unlink()
    missing = make_segment(tmp_path, index_interval_bytes=100, active=False)
    try:
        with pytest.raises(CorruptIndexError):
            missing.sanity_check()
    finally:
        missing.close_handlers()


def test_preallocated_file_is_trimmed_at_close(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, preallocate_bytes=8192)
    assert segment.log_path.stat().st_size == 8192 and segment.size == 0
    fill(segment, 2)
    size = segment.size
    assert segment.log_path.stat().st_size == 8192
    segment.close(active=True)
    assert segment.log_path.stat().st_size == size


def test_recover_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=0)
    written = fill(segment, 6)
    entries = [segment.offset_index.entry(slot) for slot in range(segment.offset_index.entries)]
    with open(segment.log_path, "ab") as handle:
        handle.write(batch(118, 2)[:-5])  # a torn write
    segment.close_handlers()
    reopened = make_segment(tmp_path, index_interval_bytes=0, active=False)
    try:
        torn = len(batch(118, 2)) - 5
        assert reopened.recover() == torn
        assert reopened.size == os.path.getsize(reopened.log_path)
        assert list(reopened.iter_headers(0, reopened.size)) == written
        assert [reopened.offset_index.entry(slot)
                for slot in range(reopened.offset_index.entries)] == entries
        assert reopened.read_next_offset() == 118
    finally:
        reopened.close_handlers()


def test_recover_cuts_batches_below_the_minimum_offset(tmp_path: Path) -> None:
    segment = make_segment(tmp_path)
    fill(segment, 2)  # 100..105
    append(segment, batch(103, 1))  # offsets going backwards
    append(segment, batch(106, 1))
    good = segment.read(BASE, 1 << 20, segment.size, True)
    assert good is not None
    segment.close_handlers()
    reopened = make_segment(tmp_path, active=False)
    try:
        assert reopened.recover(None, min_offset=BASE) > 0
        assert [h.base_offset for _, h in reopened.iter_headers(0, reopened.size)] == [100, 103]
        assert reopened.read_next_offset() == 106
    finally:
        reopened.close_handlers()
