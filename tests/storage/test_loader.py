"""Opening a log directory (LogLoader) in the cases test_recovery.py leaves out: empty
directories, more kinds of leftovers, indexes of the active segment, damage in a middle segment,
offsets going backwards, empty segments, and how the log start offset and recovery point are
reconciled with the data found."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import FakeClock, check_log_consistency, headers_of, make_batch, read_all

from odradek.storage import Log, LogConfig
from odradek.storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from odradek.storage.log import MAX_TIMESTAMP

SMALL = {"segment.bytes": 4000, "index.interval.bytes": 300}


def write_log(path: Path, clock: FakeClock, batches: int = 60, clean: bool = True) -> Log:
    """Batches of 1-3 records of 120 bytes (about 10 per segment), epoch = batch // 10."""
    log = Log(path, LogConfig.from_props(SMALL), clock=clock)
    for index in range(batches):
        log.append_as_leader(make_batch(1 + index % 3, value_size=120), leader_epoch=index // 10)
    log.update_high_watermark(log.log_end_offset)
    if clean:
        log.close()
    return log


def reopen(path: Path, clock: FakeClock, clean: bool = True, **kwargs: object) -> Log:
    return Log(path, LogConfig.from_props(SMALL), clock=clock, had_clean_shutdown=clean,
               **kwargs)  # type: ignore[arg-type]


def files(path: Path, suffix: str = ".log") -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.endswith(suffix))


def base_of(path: Path) -> int:
    return int(path.name[:20])


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "loads-0"


@pytest.fixture
def opened() -> Iterator[list[Log]]:
    logs: list[Log] = []
    yield logs
    for log in logs:
        log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_an_empty_directory_starts_one_segment_at_the_log_start_offset(
        log_path: Path, clock: FakeClock, clean: bool) -> None:
    log = reopen(log_path, clock, clean=clean, log_start_offset=7)
    try:
        assert [s.base_offset for s in log.segments] == [7]
        assert (log.log_start_offset, log.log_end_offset) == (7, 7)
        # Like Kafka's LogLoader: the checkpointed recovery point (0 here) is kept after an
        # unclean shutdown, only capped at the log end; a clean one trusts everything.
        assert log.recovery_point == (7 if clean else 0)
        assert log.append_as_leader(make_batch(1), 0).first_offset == 7
    finally:
        log.close()


def test_more_leftovers_are_removed(log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    bases = [s.base_offset for s in original.segments]
    (log_path / f"{bases[1]:020d}.index.swap").write_bytes(b"\x00" * 16)
    (log_path / f"{bases[1]:020d}.timeindex.swap").write_bytes(b"\x00" * 24)
    (log_path / "not-an-offset.log.swap").write_bytes(b"junk")
    (log_path / "00000000000000888888.timeindex").write_bytes(b"")  # orphans
    (log_path / "00000000000000888888.txnindex").write_bytes(b"")
    (log_path / f"{bases[0]:020d}.timeindex.deleted").write_bytes(b"x")
    (log_path / "partition.metadata.tmp").write_bytes(b"x")
    (log_path / "stray.deleted").mkdir()  # directories are left alone
    log = reopen(log_path, clock)
    opened.append(log)
    names = {p.name for p in log_path.iterdir()}
    assert names.isdisjoint({f"{bases[1]:020d}.index.swap", f"{bases[1]:020d}.timeindex.swap",
                             "not-an-offset.log.swap", "00000000000000888888.timeindex",
                             "00000000000000888888.txnindex", "partition.metadata.tmp",
                             f"{bases[0]:020d}.timeindex.deleted"})
    assert (log_path / "stray.deleted").is_dir()
    assert [s.base_offset for s in log.segments] == bases
    check_log_consistency(log)


def test_a_swap_segment_past_the_end_extends_the_log(log_path: Path, clock: FakeClock,
                                                      opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    bases = [s.base_offset for s in original.segments]
    end = original.log_end_offset
    last = files(log_path)[-1]
    # A cleaner output that replaces the last segment and holds one more batch.
    extra = make_batch(2, value_size=50, base_offset=end)
    (log_path / f"{bases[-1]:020d}.log.swap").write_bytes(last.read_bytes() + extra)
    log = reopen(log_path, clock)
    opened.append(log)
    assert [s.base_offset for s in log.segments] == bases
    assert log.log_end_offset == end + 2
    assert headers_of(log.read(end, 1 << 20).read_bytes())[0].base_offset == end
    check_log_consistency(log)


def test_missing_indexes_of_the_active_segment_are_rebuilt(log_path: Path, clock: FakeClock,
                                                          opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    expected = read_all(original)
    intact = reopen(log_path, clock)
    max_ts = intact.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    intact.close()
    for path in files(log_path, ".index") + files(log_path, ".timeindex"):
        path.unlink()
    log = reopen(log_path, clock)
    opened.append(log)
    assert files(log_path, ".index") and files(log_path, ".timeindex")
    assert read_all(log) == expected
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == max_ts
    check_log_consistency(log)
    assert log.append_as_leader(make_batch(1), 9).first_offset == original.log_end_offset


@pytest.mark.parametrize("torn_batch", [
    -1,  # the segment's last batch: no index entry points past the tear
    2,  # a middle batch: index entries point past the tear, so the index rebuild cuts it
])
def test_a_torn_middle_segment_ends_the_log_and_later_segments_go(
        log_path: Path, clock: FakeClock, opened: list[Log], torn_batch: int) -> None:
    write_log(log_path, clock)
    segment_files = files(log_path)
    assert len(segment_files) >= 4
    victim = segment_files[1]
    batches = headers_of(victim.read_bytes())
    torn = batches[torn_batch]
    keep = sum(h.size for h in batches if h.base_offset < torn.base_offset)
    os.truncate(victim, keep + 30)
    log = reopen(log_path, clock, clean=False, recovery_point=0)
    opened.append(log)
    assert log.log_end_offset == torn.base_offset, (
        "recovery must end the log at the torn batch of the middle segment")
    assert [s.base_offset for s in log.segments] == [base_of(f) for f in segment_files[:2]], (
        "the segments after the torn one must be deleted")
    assert files(log_path) == segment_files[:2]
    assert log.recovered_bytes_truncated > 30
    check_log_consistency(log)


def test_offsets_going_backwards_are_cut(log_path: Path, clock: FakeClock,
                                         opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    end = original.log_end_offset
    last = files(log_path)[-1]
    replayed = headers_of(last.read_bytes())[0]
    with open(last, "ab") as handle:  # a batch whose offsets were already used
        handle.write(make_batch(1, base_offset=replayed.base_offset))
    log = reopen(log_path, clock, clean=False, recovery_point=base_of(last))
    opened.append(log)
    assert log.log_end_offset == end
    assert log.recovered_bytes_truncated > 0
    check_log_consistency(log)


def test_an_empty_middle_segment_is_dropped(log_path: Path, clock: FakeClock,
                                            opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    end = original.log_end_offset
    segment_files = files(log_path)
    emptied = segment_files[1]
    lost = headers_of(emptied.read_bytes())
    os.truncate(emptied, 0)
    for index in (files(log_path, ".index") + files(log_path, ".timeindex")):
        if base_of(index) == base_of(emptied):
            index.unlink()
    log = reopen(log_path, clock, clean=False, recovery_point=0)
    opened.append(log)
    remaining = [base_of(f) for f in segment_files if f != emptied]
    assert [s.base_offset for s in log.segments] == remaining
    assert not emptied.exists()
    assert log.log_end_offset == end
    # The offsets the empty segment held are a gap: a read there returns the next batch.
    first = headers_of(log.read(lost[0].base_offset, 1).read_bytes())[0]
    assert first.base_offset == remaining[1]


@pytest.mark.parametrize(("clean", "checkpointed", "expected"), [
    (True, 5, "end"),  # after a clean shutdown everything is flushed
    (False, 5, 5),  # otherwise recovery starts at the checkpoint...
    (False, 10**9, "end"),  # ...but never beyond the data
])
def test_recovery_point_is_reconciled_with_the_data(log_path: Path, clock: FakeClock,
                                                     opened: list[Log], clean: bool,
                                                     checkpointed: int,
                                                     expected: int | str) -> None:
    original = write_log(log_path, clock)
    log = reopen(log_path, clock, clean=clean, recovery_point=checkpointed)
    opened.append(log)
    end = original.log_end_offset
    assert log.log_end_offset == end
    assert log.recovery_point == (end if expected == "end" else expected)


def test_log_start_offset_below_the_first_segment_moves_up_to_it(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    write_log(log_path, clock)
    first = files(log_path)[0]
    for path in log_path.iterdir():
        if path.name.startswith(first.name[:20]):
            path.unlink()  # retention deleted it; the checkpoint was not written yet
    second_base = base_of(files(log_path)[0])
    log = reopen(log_path, clock, log_start_offset=0)
    opened.append(log)
    assert log.log_start_offset == second_base
    assert log.leader_epoch_cache.earliest_entry.start_offset == second_base
    check_log_consistency(log)


def test_log_start_offset_inside_the_data_trims_the_epoch_cache(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    entries = original.leader_epoch_cache.entries
    start = entries[2].start_offset + 1  # inside epoch 2
    log = reopen(log_path, clock, log_start_offset=start)
    opened.append(log)
    assert log.log_start_offset == start
    assert log.leader_epoch_cache.entries[0] == (2, start)
    assert log.leader_epoch_cache.entries[1:] == entries[3:]
    assert headers_of(log.read(start, 1).read_bytes())[0].last_offset >= start


def test_unclean_recovery_rebuilds_a_lost_epoch_checkpoint(log_path: Path, clock: FakeClock,
                                                           opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    entries = original.leader_epoch_cache.entries
    assert len(entries) == 6
    (log_path / LEADER_EPOCH_CHECKPOINT).unlink()
    log = reopen(log_path, clock, clean=False, recovery_point=0)
    opened.append(log)
    assert log.leader_epoch_cache.entries == entries


def test_a_recovered_log_keeps_its_high_watermark_within_the_data(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    original = write_log(log_path, clock)
    last = files(log_path)[-1]
    batches = headers_of(last.read_bytes())
    os.truncate(last, sum(h.size for h in batches[:-1]) + 10)  # lose the last batch
    log = reopen(log_path, clock, clean=False, high_watermark=original.log_end_offset)
    opened.append(log)
    assert log.log_end_offset == batches[-1].base_offset
    assert log.high_watermark == log.log_end_offset  # clamped to what survived
