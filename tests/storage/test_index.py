from __future__ import annotations

import struct
from pathlib import Path

import pytest

from odradek.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_file_format_and_lookup(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 80, writable=True)
    assert (tmp_path / "00000000000000000100.index").exists() is False  # lazy
    for relative in range(1, 6):
        index.append(100 + relative * 10, relative * 1000)
    # Preallocated to max size (80 bytes = 10 entries), sparse zeros after the entries.
    assert index.path.stat().st_size == 80
    assert index.entries == 5 and index.max_entries == 10
    assert index.lookup(99) == (100, 0)
    assert index.lookup(100) == (100, 0)
    assert index.lookup(110) == (110, 1000)
    assert index.lookup(125) == (120, 2000)
    assert index.lookup(10_000) == (150, 5000)
    assert index.lookup_by_position(2500) == (120, 2000)
    assert index.lookup_by_position(10) == (100, 0)
    index.close()  # trims to the entries
    raw = index.path.read_bytes()
    assert len(raw) == 40
    assert struct.unpack(">ii", raw[:8]) == (10, 1000)  # big-endian relative offset, position


def test_offset_index_rejects_non_increasing_and_full(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 16, writable=True)
    index.append(5, 10)
    with pytest.raises(ValueError):
        index.append(5, 20)
    index.append(6, 30)
    assert index.is_full()
    with pytest.raises(IndexError):
        index.append(7, 40)


def test_offset_index_truncate(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 800, writable=True)
    for offset in (10, 20, 30, 40):
        index.append(offset, offset * 10)
    index.truncate_to(30)
    assert index.entries == 2 and index.last_offset == 20
    index.truncate_to(25)
    assert index.entries == 2
    index.truncate_to(0)
    assert index.entries == 0


def test_reopened_preallocated_index_ignores_zero_tail(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 8000, writable=True)
    for offset in range(1, 31):
        index.append(offset, offset * 7)
    index.flush()
    index.close_handler()  # like a crash: no trim
    assert path.stat().st_size == 8000
    reopened = OffsetIndex(path, 0, 8000, writable=True)
    assert reopened.entries == 30
    assert reopened.lookup(31) == (30, 210)
    reopened.sanity_check(log_size=1000)


def test_time_index_appends_only_increasing_timestamps(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 50, 120, writable=True)
    index.maybe_append(1000, 55)
    index.maybe_append(1000, 60)  # same timestamp: no entry
    index.maybe_append(2000, 70)
    with pytest.raises(ValueError):
        index.maybe_append(3000, 60)  # offset going back
    assert index.entries == 2
    assert index.lookup(999) == (-1, 50)
    assert index.lookup(1500) == (1000, 55)
    assert index.lookup(5000) == (2000, 70)
    assert index.last_entry == (2000, 70)
    index.truncate_to(70)
    assert index.last_entry == (1000, 55)
    index.close()
    assert struct.unpack(">qi", index.path.read_bytes()) == (1000, 5)


def test_time_index_reserves_last_slot(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 0, 36, writable=True)  # 3 entries
    index.maybe_append(1, 1)
    index.maybe_append(2, 2)
    assert index.is_full()
    index.maybe_append(3, 3, skip_full_check=True)
    assert index.entries == 3


def test_sanity_check_detects_corruption(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(struct.pack(">iiii", 10, 100, 5, 200))  # offsets go backwards
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 800).sanity_check(1000)
    path.write_bytes(b"\x00" * 7)  # not a whole entry
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 800).sanity_check(1000)
    path.write_bytes(struct.pack(">ii", 10, 5000))  # points past the log
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 800).sanity_check(1000)
    tpath = tmp_path / "0.timeindex"
    tpath.write_bytes(struct.pack(">qiqi", 50, 1, 40, 2))
    with pytest.raises(CorruptIndexError):
        TimeIndex(tpath, 0, 800).sanity_check(1000)
