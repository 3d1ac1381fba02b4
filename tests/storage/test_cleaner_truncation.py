"""The log cleaner and log truncation, as Kafka's LogManager.truncateTo and LogCleanerManager:
a truncation below the active segment aborts a cleaning in progress (nothing it produced is
swapped in afterwards) and lowers the cleaner checkpoint to the new active segment's base; a
checkpoint below the log start (DeleteRecords, retention) counts as the log start."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from storage_helpers import FakeClock
from test_cleaner import COMPACT, batch, fill, latest_by_key, read_records

from odradek.storage import Log, LogConfig
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.cleaner import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner
from odradek.storage.manager import LogManager

KEY = ("topic", 0)
WAIT_S = 20


def checkpoint_of(directory: Path) -> int | None:
    return OffsetCheckpointFile(directory / CLEANER_CHECKPOINT).read().get(KEY)


def assert_valid(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """Offsets strictly increasing and below the log end; returns (offset, key, value)."""
    records = [(record[0], record[2], record[3]) for _header, record in read_records(log)]
    offsets = [offset for offset, _key, _value in records]
    assert offsets == sorted(set(offsets))
    assert not offsets or offsets[-1] < log.log_end_offset
    return records


def rewrite_keys(log: Log, clock: FakeClock, rounds: int, keys: int, tag: bytes) -> dict:  # type: ignore[type-arg]
    """`rounds` new values of each key (tagged), one record a batch; returns latest values."""
    latest = {}
    for round_number in range(rounds):
        for key_number in range(keys):
            key = b"key-%d" % key_number
            value = b"%s-%d-%d" % (tag, key_number, round_number)
            log.append_as_leader(batch([(key, value)], clock()), 0)
            latest[key] = value
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return latest


class PausedCleaning:
    """A cleaning run by `LogCleaner.clean_filthiest_log` on a thread of its own, held at the
    first time it reaches `step` until `release()` (as `ODRADEK_CLEANER_STEP_PAUSE_MS` holds a
    broker's cleaner), so the test can truncate the log meanwhile."""

    def __init__(self, cleaner_factory: Callable[[Callable[[str], None]], LogCleaner],
                 step: str) -> None:
        self.step = step
        self.reached = threading.Event()
        self._released = threading.Event()
        self.steps: list[str] = []
        self.cleaner = cleaner_factory(self._on_step)
        self.result: list[bool] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_step(self, name: str) -> None:
        self.steps.append(name)
        if name == self.step and not self.reached.is_set():
            self.reached.set()
            assert self._released.wait(WAIT_S)

    def _run(self) -> None:
        self.result.append(self.cleaner.clean_filthiest_log())

    def start(self) -> None:
        self._thread.start()
        assert self.reached.wait(WAIT_S), f"the cleaning never reached {self.step}"

    def release(self) -> None:
        self._released.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive()


@pytest.fixture(params=[False, True], ids=["in process", "child process"])
def isolated(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def compacted(tmp_path: Path, clock: FakeClock) -> Iterator[Log]:
    log = Log(tmp_path / "topic-0", LogConfig.from_props(COMPACT), clock=clock)
    try:
        yield log
    finally:
        log.close()


def log_cleaner(tmp_path: Path, log: Log, clock: FakeClock, isolated: bool,
                on_step: Callable[[str], None] | None = None) -> LogCleaner:
    cleaner = LogCleaner(CleanerConfig(backoff_ms=10), lambda: {KEY: (tmp_path, log)}, clock,
                         on_step=on_step, isolated=isolated)
    log.on_truncation = lambda offset: cleaner.on_truncation(KEY, offset)
    return cleaner


@pytest.mark.parametrize("step", ["map_built", "cleaned"])
def test_a_truncation_during_a_cleaning_brings_no_truncated_record_back(
        tmp_path: Path, clock: FakeClock, compacted: Log, isolated: bool, step: str) -> None:
    """Held after building its offset map (or after writing a group's output), the cleaning
    sees the log truncated into its first segment and the same keys written again (the
    segment rolled, inactive again): it swaps nothing, so the log is what the truncation left
    plus what came after, and the next cleaning deduplicates that."""
    log = compacted
    fill(log, clock, rounds=12, keys=5)
    first_segment = log.log_segments()[0]
    assert len(log.log_segments()) >= 3
    truncate_to = 12  # inside the first segment, on a batch boundary (3 records a batch)
    assert log.log_segments()[1].base_offset > truncate_to
    kept = [r for r in assert_valid(log) if r[0] < truncate_to]
    paused = PausedCleaning(lambda hook: log_cleaner(tmp_path, log, clock, isolated, hook), step)
    try:
        paused.start()
        assert log.truncate_to(truncate_to)
        assert log.active_segment is first_segment
        rewritten = rewrite_keys(log, clock, rounds=2, keys=5, tag=b"again")
        assert log.log_segments()[-2] is first_segment  # inactive again
        paused.release()
        assert paused.result == [True]
        assert "swap" not in paused.steps
        # Nothing swapped: the old records at offsets >= 12 did not come back, the new ones
        # are all there.
        records = assert_valid(log)
        assert records[:len(kept)] == kept
        assert [(k, v) for _o, k, v in records[len(kept):]] == [
            (b"key-%d" % (n % 5), b"again-%d-%d" % (n % 5, n // 5)) for n in range(10)]
        assert checkpoint_of(tmp_path) is None
        # The next cleaning starts at the log start (nothing was checkpointed) and keeps the
        # latest value of each key once.
        assert paused.cleaner.clean_filthiest_log()
        assert {k: v for k, (_o, v) in latest_by_key(log).items()} == rewritten
        assert len(assert_valid(log)) == 5
        assert checkpoint_of(tmp_path) == log.active_segment.base_offset
    finally:
        paused.cleaner.shutdown()


def test_a_truncation_lowers_the_checkpoint_to_the_active_segment_base(
        tmp_path: Path, clock: FakeClock, compacted: Log) -> None:
    """Kafka's maybeTruncateCheckpoint with the active segment's base after the truncation:
    the records appended again at the truncated offsets are dirty, and deduplicated."""
    log = compacted
    cleaner = log_cleaner(tmp_path, log, clock, isolated=False)
    try:
        fill(log, clock, rounds=10, keys=5)
        assert cleaner.clean_filthiest_log()
        cleaned_to = checkpoint_of(tmp_path)
        assert cleaned_to == log.active_segment.base_offset == 50
        # Into a segment below the checkpoint: lowered to that segment's base, which is
        # now the active segment's.
        assert log.truncate_to(31)
        assert log.active_segment.base_offset < 31
        cleaner.apply_truncations()
        assert checkpoint_of(tmp_path) == log.active_segment.base_offset
        rewritten = rewrite_keys(log, clock, rounds=6, keys=5, tag=b"again")
        assert cleaner.clean_filthiest_log()
        assert checkpoint_of(tmp_path) == log.active_segment.base_offset
        assert {k: v for k, (_o, v) in latest_by_key(log).items()} == rewritten
        assert len(assert_valid(log)) == 5
    finally:
        cleaner.shutdown()


def test_a_truncation_within_the_active_segment_does_not_abort_a_cleaning(
        tmp_path: Path, clock: FakeClock, compacted: Log, isolated: bool) -> None:
    """Kafka stops the cleaner only for a truncation below the active segment's base: one
    within it (a follower dropping its uncommitted tail) touches nothing the cleaning reads."""
    log = compacted
    fill(log, clock, rounds=10, keys=5)
    for value in (b"x", b"y", b"z"):
        log.append_as_leader(batch([(b"tail", value)], clock()), 0)
    active_base = log.active_segment.base_offset
    paused = PausedCleaning(lambda hook: log_cleaner(tmp_path, log, clock, isolated, hook),
                            "map_built")
    try:
        paused.start()
        assert log.truncate_to(active_base + 1)
        paused.release()
        assert paused.result == [True]
        assert "swapped" in paused.steps
        assert checkpoint_of(tmp_path) == active_base
    finally:
        paused.cleaner.shutdown()


def test_a_full_truncation_during_a_cleaning_restarts_the_log_clean(
        tmp_path: Path, clock: FakeClock, compacted: Log) -> None:
    """The replica fetcher's `truncate_fully_and_start_at` (its fetch offset out of range)
    while a cleaning is held: nothing swapped into the new log, the checkpoint no higher than
    its start, and its records cleaned from there."""
    log = compacted
    fill(log, clock, rounds=10, keys=5)
    paused = PausedCleaning(lambda hook: log_cleaner(tmp_path, log, clock, False, hook),
                            "cleaned")
    try:
        paused.start()
        log.truncate_fully_and_start_at(20)
        rewritten = rewrite_keys(log, clock, rounds=8, keys=5, tag=b"again")
        paused.release()
        assert paused.result == [True] and "swap" not in paused.steps
        assert [r[0] for r in assert_valid(log)] == list(range(20, 60))
        assert paused.cleaner.clean_filthiest_log()
        assert checkpoint_of(tmp_path) == log.active_segment.base_offset
        assert {k: v for k, (_o, v) in latest_by_key(log).items()} == rewritten
        assert len(assert_valid(log)) == 5
    finally:
        paused.cleaner.shutdown()


def test_a_checkpoint_below_the_log_start_counts_as_the_log_start(
        tmp_path: Path, clock: FakeClock, compacted: Log,
        caplog: pytest.LogCaptureFixture) -> None:
    """Kafka's cleanableOffsets: a checkpoint below the log start offset (DeleteRecords,
    retention) is replaced by the log start, with a warning, when the cleaner next selects."""
    log = compacted
    cleaner = log_cleaner(tmp_path, log, clock, isolated=False)
    try:
        fill(log, clock, rounds=10, keys=5)
        assert cleaner.clean_filthiest_log()
        assert checkpoint_of(tmp_path) == 50
        fill(log, clock, rounds=4, keys=5)
        new_start = 55  # inside the first segment above the checkpoint
        assert log.delete_records_before(new_start) == new_start
        assert log.log_segments()[0].base_offset == 50
        with caplog.at_level(logging.WARNING, logger="odradek.storage.cleaner"):
            cleaner.grab_filthiest_log(clock())
        assert checkpoint_of(tmp_path) == new_start
        assert any("Resetting first dirty offset" in r.getMessage() and
                   f"log start offset {new_start}" in r.getMessage()
                   for r in caplog.records)
    finally:
        cleaner.shutdown()


def test_the_log_manager_reports_truncations_to_its_cleaner(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig.from_props({"segment.bytes": 2048}),
                         cleaner_config=CleanerConfig(backoff_ms=600_000))
    try:
        log = manager.get_or_create_log("table", 0)
        assert manager.cleaner is not None
        for key in (b"a", b"b", b"c"):
            log.append_as_leader(batch([(key, b"1")], log.clock()), 0)
            log.roll()
        manager.cleaner.update_checkpoint(tmp_path, ("table", 0), 3)
        assert log.truncate_to(1)
        manager.cleaner.apply_truncations()
        assert OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT).read() == {("table", 0): 1}
    finally:
        manager.close()
