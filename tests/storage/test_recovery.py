"""Recovery of damaged logs: torn and corrupt tails, bad or missing indexes, leftovers."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from storage_helpers import FakeClock, check_log_consistency, headers_of, make_batch, read_all

from odradek.storage import Log, LogConfig

SMALL = {"segment.bytes": 4000, "index.interval.bytes": 300}


def write_log(path: Path, clock: FakeClock, batches: int = 40, props: dict | None = None,
              clean: bool = False) -> Log:
    log = Log(path, LogConfig.from_props(props or SMALL), clock=clock)
    for index in range(batches):
        log.append_as_leader(make_batch(1 + index % 3, value_size=120), leader_epoch=index // 10)
    if clean:
        log.close()
    return log


def reopen(path: Path, clock: FakeClock, props: dict | None = None, clean: bool = False,
           **kwargs: object) -> Log:
    return Log(path, LogConfig.from_props(props or SMALL), clock=clock,
               had_clean_shutdown=clean, **kwargs)  # type: ignore[arg-type]


def segment_files(path: Path, suffix: str = ".log") -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.endswith(suffix))


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "events-3"


def test_unclean_reopen_of_an_intact_log_keeps_everything(log_path: Path,
                                                          clock: FakeClock) -> None:
    original = write_log(log_path, clock)
    original.update_high_watermark(original.log_end_offset)
    expected = read_all(original)
    log = reopen(log_path, clock)
    assert log.recovered_bytes_truncated == 0
    assert check_log_consistency(log) == expected
    assert log.leader_epoch_cache.entries == original.leader_epoch_cache.entries
    assert len(log.leader_epoch_cache.entries) == 4


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, 100, -1])
def test_torn_tail_is_truncated_to_the_last_whole_batch(log_path: Path, clock: FakeClock,
                                                        cut: int) -> None:
    original = write_log(log_path, clock)
    last = segment_files(log_path)[-1]
    data = last.read_bytes()
    batches = headers_of(data)
    keep = sum(h.size for h in batches[:-1])
    # Cut inside the last batch (cut bytes into it; -1: one byte short of complete).
    size = keep + (cut if cut > 0 else batches[-1].size - 1)
    os.truncate(last, size)
    log = reopen(log_path, clock)
    assert log.log_end_offset == batches[-1].base_offset
    assert log.recovered_bytes_truncated == size - keep
    check_log_consistency(log)
    assert log.append_as_leader(make_batch(1), 9).first_offset == batches[-1].base_offset
    check_log_consistency(log)
    del original


def test_bit_flip_truncates_there_and_drops_later_segments(log_path: Path,
                                                           clock: FakeClock) -> None:
    write_log(log_path, clock, batches=60)
    files = segment_files(log_path)
    assert len(files) >= 4
    victim = files[1]
    batches = headers_of(victim.read_bytes())
    position = sum(h.size for h in batches[:3]) + 70  # inside the 4th batch's records
    with open(victim, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0x10]))
    log = reopen(log_path, clock)
    assert log.log_end_offset == batches[3].base_offset
    assert [s.base_offset for s in log.segments] == [int(f.name[:20]) for f in files[:2]]
    check_log_consistency(log)
    assert log.leader_epoch_cache.latest_entry.start_offset < log.log_end_offset


def test_garbage_length_in_the_tail(log_path: Path, clock: FakeClock) -> None:
    write_log(log_path, clock)
    last = segment_files(log_path)[-1]
    good = last.stat().st_size
    with open(last, "ab") as handle:
        handle.write(struct.pack(">qi", 999, 2**31 - 1) + b"\x07" * 100)
    log = reopen(log_path, clock)
    assert log.active_segment.size == good and last.stat().st_size == good
    check_log_consistency(log)


def test_zero_filled_preallocated_tail(log_path: Path, clock: FakeClock) -> None:
    props = {**SMALL, "preallocate": "true"}
    original = write_log(log_path, clock, props=props)
    end = original.log_end_offset
    active = segment_files(log_path)[-1]
    assert active.stat().st_size == 4000  # preallocated, tail is zeros
    original.flush()
    log = reopen(log_path, clock, props=props)  # crash: no close, no trim
    assert log.log_end_offset == end
    check_log_consistency(log)
    log.append_as_leader(make_batch(2), 5)
    log.close()
    clean = reopen(log_path, clock, props=props, clean=True)
    assert clean.log_end_offset == end + 2
    check_log_consistency(clean)
    clean.close()


def test_zero_tail_on_a_plain_file(log_path: Path, clock: FakeClock) -> None:
    write_log(log_path, clock)
    last = segment_files(log_path)[-1]
    good = last.stat().st_size
    with open(last, "ab") as handle:
        handle.write(b"\x00" * 5000)
    log = reopen(log_path, clock)
    assert log.active_segment.size == good
    check_log_consistency(log)


@pytest.mark.parametrize("damage", ["missing", "garbage", "out_of_order", "odd_size",
                                    "missing_time", "past_end"])
def test_bad_index_files_are_rebuilt_even_after_clean_shutdown(
        log_path: Path, clock: FakeClock, damage: str) -> None:
    write_log(log_path, clock, batches=60, clean=True)
    index = segment_files(log_path, ".index")[0]
    time_index = segment_files(log_path, ".timeindex")[0]
    original = index.read_bytes()
    assert len(original) >= 16
    if damage == "missing":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(os.urandom(len(original)))
    elif damage == "out_of_order":
        index.write_bytes(original[8:16] + original[:8] + original[16:])
    elif damage == "odd_size":
        index.write_bytes(original + b"\x01\x02\x03")
    elif damage == "missing_time":
        time_index.unlink()
    elif damage == "past_end":
        index.write_bytes(original + struct.pack(">ii", 10**6, 10**8))
    log = reopen(log_path, clock, clean=True)
    assert index.read_bytes() == original
    check_log_consistency(log)
    assert log.log_end_offset == 120


def test_recovery_starts_at_the_recovery_point(log_path: Path, clock: FakeClock) -> None:
    """Segments wholly below the recovery point are trusted (not rescanned), like Kafka."""
    write_log(log_path, clock, batches=60, clean=True)
    first = segment_files(log_path)[0]
    with open(first, "r+b") as handle:  # damage a record byte: only a rescan would notice
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 1]))
    second_base = int(segment_files(log_path)[1].name[:20])
    trusted = reopen(log_path, clock, recovery_point=second_base)
    assert trusted.log_end_offset == 120  # the first segment was not rescanned
    trusted.close()
    rescanned = reopen(log_path, clock, recovery_point=0)
    assert rescanned.log_end_offset < second_base  # the rescan found and cut the damage
    check_log_consistency(rescanned)


def test_leftover_files_are_cleaned_up(log_path: Path, clock: FakeClock) -> None:
    write_log(log_path, clock, clean=True)
    (log_path / "00000000000000000005.log.deleted").write_bytes(b"x")
    (log_path / "00000000000000000005.index.deleted").write_bytes(b"x")
    (log_path / "00000000000000000007.log.cleaned").write_bytes(b"x")
    (log_path / "leader-epoch-checkpoint.tmp").write_bytes(b"x")
    (log_path / "00000000000000999999.index").write_bytes(b"")  # orphan index
    log = reopen(log_path, clock, clean=True)
    names = {p.name for p in log_path.iterdir()}
    assert not any(n.endswith((".deleted", ".cleaned", ".tmp")) for n in names)
    assert "00000000000000999999.index" not in names
    check_log_consistency(log)


def test_swap_file_replaces_the_segments_it_covers(log_path: Path, clock: FakeClock,
                                                   tmp_path: Path) -> None:
    original = write_log(log_path, clock, batches=60, clean=True)
    bases = [s.base_offset for s in original.segments]
    # A "compacted" replacement of the first two segments: the same batches, one file.
    first_two = b"".join(f.read_bytes() for f in segment_files(log_path)[:2])
    (log_path / f"{bases[0]:020d}.log.swap").write_bytes(first_two)
    log = reopen(log_path, clock, clean=True)
    assert [s.base_offset for s in log.segments] == [bases[0], *bases[2:]]
    assert not any(p.name.endswith(".swap") for p in log_path.iterdir())
    check_log_consistency(log)
    assert log.log_end_offset == 120


def test_epoch_checkpoint_beyond_the_recovered_end_is_truncated(log_path: Path,
                                                                 clock: FakeClock) -> None:
    original = write_log(log_path, clock, batches=40)
    before = original.leader_epoch_cache.entries
    latest_start = before[-1].start_offset
    holding = [f for f in segment_files(log_path) if int(f.name[:20]) <= latest_start][-1]
    os.truncate(holding, 0)  # lose the data from where the latest epoch began
    for later in segment_files(log_path):
        if later.name > holding.name:
            later.unlink()
    log = reopen(log_path, clock)
    assert log.log_end_offset == int(holding.name[:20]) <= latest_start
    assert log.leader_epoch_cache.entries == [
        entry for entry in before if entry.start_offset < log.log_end_offset]
    assert len(log.leader_epoch_cache.entries) < len(before)


def test_recovered_log_start_offset_checkpoint_beyond_data(log_path: Path,
                                                            clock: FakeClock) -> None:
    write_log(log_path, clock, batches=10, clean=True)
    log = reopen(log_path, clock, clean=True, log_start_offset=500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert log.append_as_leader(make_batch(1), 1).first_offset == 500

