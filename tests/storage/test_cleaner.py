"""The log cleaner (compaction) on real logs: what it keeps, where, and crash safety."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from storage_helpers import FakeClock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from broker_process import wait_until

from odradek.protocol.records import (
    BatchHeader,
    Compression,
    RecordBatchBuilder,
    build_control_batch,
    decode_records,
    iter_batches,
    verify_crc,
)
from odradek.storage import Log, LogConfig
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.cleaner import (
    CLEANER_CHECKPOINT,
    Cleaner,
    CleanerConfig,
    LogCleaner,
    LogToClean,
    cleanable_offsets,
    thread_count_error,
)
from odradek.storage.cleaner_process import ProcessCleaner
from odradek.storage.manager import LogManager
from odradek.storage.offset_map import ENTRY_OVERHEAD
from odradek.storage.validator import AppendOrigin

DAY = 86_400_000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 2048}


def batch(records: list[tuple[bytes, bytes | None]], timestamp: int, **options: object) -> bytes:
    builder = RecordBatchBuilder(**options)  # type: ignore[arg-type]
    for key, value in records:
        builder.append(timestamp, key, value, [("h", b"v-" + key)])
    return builder.build()


def read_records(log: Log) -> list[tuple[BatchHeader, tuple]]:  # type: ignore[type-arg]
    """Every (batch header, record) readable from the log start, through Log.read."""
    result = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        batches = list(iter_batches(data))
        if not batches:
            break
        for position, header in batches:
            verify_crc(data, position, header)
            result += [(header, record) for record in decode_records(data, position, header)
                       if record[0] >= offset]
        offset = batches[-1][1].next_offset
    return result


def latest_by_key(log: Log) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for _header, record in read_records(log):
        latest[record[2]] = (record[0], record[3])
    return latest


def clean(log: Log, now: int, cleaner: Cleaner | ProcessCleaner | None = None,
          first_dirty: int | None = None) -> int:
    """One cleaning of the whole cleanable section (from the log start unless told)."""
    start, uncleanable = cleanable_offsets(log, first_dirty, now)
    target = LogToClean(("t", 0), log, start, uncleanable)
    return (cleaner or Cleaner()).clean(log, start, target.first_uncleanable_offset, now)


def fill(log: Log, clock: FakeClock, rounds: int, keys: int, codec: Compression = Compression.NONE,
         deletes: set[int] = frozenset()) -> dict[bytes, bytes | None]:  # type: ignore[assignment]
    """`rounds` updates of every key (3 records a batch), then a roll; returns latest values."""
    expected: dict[bytes, bytes | None] = {}
    pending: list[tuple[bytes, bytes | None]] = []
    for round_number in range(rounds):
        for key_number in range(keys):
            key = b"key-%d" % key_number
            value = None if (round_number == rounds - 1 and key_number in deletes) \
                else b"value-%d-%d" % (key_number, round_number) * 3
            pending.append((key, value))
            expected[key] = value
            if len(pending) == 3:
                log.append_as_leader(batch(pending, clock(), compression=codec), 0)
                pending = []
    if pending:
        log.append_as_leader(batch(pending, clock(), compression=codec), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return expected


@pytest.mark.parametrize("codec", list(Compression))
def test_latest_value_of_each_key_kept_at_its_offset(make_log, clock: FakeClock,
                                                     codec: Compression) -> None:  # type: ignore[no-untyped-def]
    log = make_log(COMPACT)
    expected = fill(log, clock, rounds=20, keys=10, codec=codec)
    before = read_records(log)
    offsets_before = {record[0]: record for _header, record in before}
    size_before = log.size_in_bytes
    end = clean(log, clock())
    assert end == log.active_segment.base_offset
    after = read_records(log)
    assert log.size_in_bytes < size_before / 5
    # Exactly one record per key, the latest, at its original offset, with its headers.
    assert {record[2]: record[3] for _header, record in after} == expected
    assert len(after) == len(expected)
    for header, record in after:
        assert offsets_before[record[0]] == record
        assert header.compression == codec
        assert list(record[4]) == [("h", b"v-" + record[2])]
    offsets = [record[0] for _header, record in after]
    assert offsets == sorted(offsets)
    # Batches keep their base and last offsets: the log still ends where it did.
    assert log.log_end_offset == before[-1][1][0] + 1
    # A read from an offset in a gap returns the next batch holding later offsets.
    gap = offsets[0] - 7
    assert gap > log.log_start_offset
    fetched = log.read(gap, 1 << 20).read_bytes()
    assert min(r[0] for _, h in iter_batches(fetched) for r in decode_records(fetched, _, h)
               if r[0] >= gap) > gap


def test_the_active_segment_and_the_dirty_range_above_the_hw_stay(make_log, clock) -> None:  # type: ignore[no-untyped-def]
    log = make_log(COMPACT)
    fill(log, clock, rounds=5, keys=4)
    log.append_as_leader(batch([(b"key-0", b"in the active segment")], clock()), 0)
    log.append_as_leader(batch([(b"key-0", b"again")], clock()), 0)
    clean(log, clock())
    values = [record[3] for _header, record in read_records(log) if record[2] == b"key-0"]
    assert values[-2:] == [b"in the active segment", b"again"]


def test_tombstones_kept_until_delete_retention_then_removed(make_log, clock, any_cleaner) -> None:  # type: ignore[no-untyped-def]
    log = make_log({**COMPACT, "delete.retention.ms": DAY})
    expected = fill(log, clock, rounds=4, keys=6, deletes={1, 4})
    clean(log, clock(), any_cleaner)
    latest = latest_by_key(log)
    assert latest[b"key-1"][1] is None and latest[b"key-4"][1] is None  # still visible
    headers = [h for h, r in read_records(log) if r[3] is None]
    assert all(h.delete_horizon_ms == clock() + DAY for h in headers)
    clock.advance(DAY - 1)
    clean(log, clock(), any_cleaner)
    assert latest_by_key(log)[b"key-1"][1] is None  # not yet
    clock.advance(2)
    clean(log, clock(), any_cleaner)
    latest = latest_by_key(log)
    assert b"key-1" not in latest and b"key-4" not in latest
    assert {k: v for k, (_o, v) in latest.items()} == {
        k: v for k, v in expected.items() if v is not None}


@pytest.fixture(params=["in process", "child process"])
def any_cleaner(request):  # type: ignore[no-untyped-def]
    """The cleaner the broker's threads use (its work in a child process, the swaps here) and
    the in-process one: the same results."""
    if request.param == "in process":
        yield Cleaner()
        return
    cleaner = ProcessCleaner(CleanerConfig())
    try:
        yield cleaner
    finally:
        cleaner.close()


def test_aborted_records_removed_and_markers_dropped_when_safe(make_log, clock, any_cleaner) -> None:  # type: ignore[no-untyped-def]
    log = make_log({**COMPACT, "delete.retention.ms": 1000})
    now = clock()
    # pid 1 commits x=v1 (later superseded), pid 2 writes y and aborts, z plain.
    log.append_as_leader(batch([(b"x", b"v1")], now, producer_id=1, producer_epoch=0,
                               base_sequence=0, is_transactional=True), 0)
    log.append_as_leader(batch([(b"y", b"aborted")], now, producer_id=2, producer_epoch=0,
                               base_sequence=0, is_transactional=True), 0)
    commit = log.append_as_leader(build_control_batch(1, 0, True, 0, now), 0,
                                  origin=AppendOrigin.COORDINATOR).first_offset
    abort = log.append_as_leader(build_control_batch(2, 0, False, 0, now), 0,
                                 origin=AppendOrigin.COORDINATOR).first_offset
    log.append_as_leader(batch([(b"x", b"v2"), (b"z", b"plain")], now), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    # Producers gone (expired): nothing needs their last batches for producer state.
    clock.advance(DAY + 1)
    log.remove_expired_producers(clock(), DAY)

    def markers() -> set[int]:
        return {h.base_offset for h, _r in read_records(log) if h.is_control}

    clean(log, clock(), any_cleaner)
    latest = latest_by_key(log)
    assert b"y" not in latest and latest[b"x"][1] == b"v2"
    assert markers() == {commit, abort}  # the abort marker waits for its data to be gone
    assert [t.producer_id for s in log.log_segments() for t in s.txn_index.entries] == [2]
    # The second cleaning finds no data of either transaction: both markers get a delete
    # horizon (KIP-534) and stay until it passes.
    clean(log, clock(), any_cleaner)
    assert markers() == {commit, abort}
    assert all(h.delete_horizon_ms == clock() + 1000 for h, _r in read_records(log)
               if h.is_control)
    clock.advance(999)
    clean(log, clock(), any_cleaner)
    assert markers() == {commit, abort}
    clock.advance(1)
    clean(log, clock(), any_cleaner)
    assert markers() == set()
    assert {k: v for k, (_o, v) in latest_by_key(log).items()} == {b"x": b"v2", b"z": b"plain"}


def test_last_batch_of_an_active_producer_is_kept_empty(make_log, clock, tmp_path, any_cleaner) -> None:  # type: ignore[no-untyped-def]
    log = make_log(COMPACT)
    log.append_as_leader(batch([(b"k", b"a"), (b"k", b"b")], clock(), producer_id=7,
                               producer_epoch=3, base_sequence=0), 0)
    log.append_as_leader(batch([(b"k", b"c")], clock()), 0)
    log.append_as_leader(batch([(b"other", b"x")], clock()), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    producers = [(p.producer_id, p.producer_epoch, p.last_sequence)
                 for p in log.active_producers()]
    clean(log, clock(), any_cleaner)
    headers = [h for _p, h in iter_batches(log.log_segments()[0].read_batch(0, BatchHeader.parse(
        log.log_segments()[0].read_batch(0, log.log_segments()[0].first_batch_header()))))]
    assert headers[0].producer_id == 7 and headers[0].records_count == 0
    assert headers[0].last_offset == 1 and headers[0].base_sequence == 0
    log.close()
    reopened = Log(tmp_path / "topic-0", log.config, clock=clock, had_clean_shutdown=False)
    try:
        assert [(p.producer_id, p.producer_epoch, p.last_sequence)
                for p in reopened.active_producers()] == producers
        assert {k: v for k, (_o, v) in latest_by_key(reopened).items()} == {
            b"k": b"c", b"other": b"x"}
    finally:
        reopened.close()


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["cleaned", "swap", "old_deleted", "swapped"])
def test_a_crash_at_any_step_recovers_a_valid_log(tmp_path: Path, clock: FakeClock,
                                                  step: str) -> None:
    config = LogConfig.from_props(COMPACT)
    log = Log(tmp_path / "topic-0", config, clock=clock)
    expected = fill(log, clock, rounds=30, keys=8)
    end_before = log.log_end_offset

    def hook(name: str) -> None:
        if name == step:
            raise Crash(name)

    with pytest.raises(Crash):
        clean(log, clock(), Cleaner(on_step=hook))
    left = sorted(p.name for p in (tmp_path / "topic-0").iterdir())
    suffix = {"cleaned": ".cleaned", "swap": ".swap", "old_deleted": ".swap"}.get(step)
    if suffix:
        assert any(name.endswith(suffix) for name in left)
    # The crashed log object is abandoned as a killed process would leave it.
    log_before_crash = log
    reopened = Log(tmp_path / "topic-0", config, clock=clock, had_clean_shutdown=False,
                   high_watermark=end_before)
    try:
        names = [p.name for p in (tmp_path / "topic-0").iterdir()]
        assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
        assert reopened.log_end_offset == end_before
        # A cleaned first segment left empty (every record superseded) stays: the log start
        # offset does not move (a consumer below the first live record reads on, as in Kafka).
        assert reopened.log_start_offset == log_before_crash.log_start_offset
        assert {k: v for k, (_o, v) in latest_by_key(reopened).items()} == expected
        offsets = [record[0] for _h, record in read_records(reopened)]
        assert offsets == sorted(set(offsets))
        # And the recovered log can be cleaned to the end.
        clean(reopened, clock())
        assert {k: v for k, (_o, v) in latest_by_key(reopened).items()} == expected
        assert len(read_records(reopened)) == len(expected)
    finally:
        reopened.close()


def test_a_full_offset_map_cleans_a_prefix_and_checkpoints_its_end(tmp_path: Path,
                                                                   clock: FakeClock) -> None:
    log = Log(tmp_path / "topic-0", LogConfig.from_props(COMPACT), clock=clock)
    try:
        # k0..k4 four times (offsets 0-19), then 20 distinct keys (offsets 20-39).
        for round_number in range(4):
            for key in range(5):
                log.append_as_leader(batch([(b"k%d" % key, b"r%d" % round_number)], clock()), 0)
        for key in range(5, 25):
            log.append_as_leader(batch([(b"k%d" % key, b"once")], clock()), 0)
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        # A budget of 10 entries of 3-byte keys (k10-k19), so also of 10 of 2-byte keys.
        config = CleanerConfig(dedupe_buffer_size=(ENTRY_OVERHEAD + 3) * 10,
                               dedupe_buffer_load_factor=1.0,
                               backoff_ms=10)
        cleaner = LogCleaner(config, lambda: {("topic", 0): (tmp_path, log)}, clock)
        assert cleaner.clean_filthiest_log()
        # The map held 10 keys: k0-k4 (offsets 0-19) and k5-k9 (20-24); offset 25 did not fit.
        checkpoint = OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT).read()
        assert checkpoint == {("topic", 0): 25}
        assert (tmp_path / CLEANER_CHECKPOINT).read_text().splitlines()[:3] == [
            "0", "1", "topic 0 25"]
        offsets = [record[0] for _h, record in read_records(log)]
        assert offsets == [15, 16, 17, 18, 19, *range(20, 40)]
        # The next run starts at the checkpoint: k10-k19 (offsets 25-34) fill the map.
        assert cleaner.clean_filthiest_log()
        assert OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT).read() == {
            ("topic", 0): 35}
    finally:
        log.close()


def test_min_compaction_lag_keeps_recent_segments_dirty(make_log, clock) -> None:  # type: ignore[no-untyped-def]
    log = make_log({**COMPACT, "min.compaction.lag.ms": 60_000})
    fill(log, clock, rounds=10, keys=3)
    first, uncleanable = cleanable_offsets(log, None, clock())
    assert (first, uncleanable) == (0, 0)
    clock.advance(60_001)
    assert cleanable_offsets(log, None, clock())[1] == log.active_segment.base_offset


def test_the_log_managers_cleaner_thread_compacts_after_a_config_change(tmp_path: Path) -> None:
    config = CleanerConfig(backoff_ms=20)
    manager = LogManager([tmp_path], LogConfig.from_props({"segment.bytes": 2048}),
                         cleaner_config=config)
    try:
        log = manager.get_or_create_log("table", 0)
        now = log.clock()
        for round_number in range(50):
            log.append_as_leader(batch([(b"a", b"%d" % round_number),
                                        (b"b", b"%d" % round_number)], now), 0)
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        size_before = log.size_in_bytes
        assert manager.cleaner is not None
        # cleanup.policy=delete: the cleaner leaves it alone.
        assert not manager.cleaner.clean_filthiest_log()
        manager.update_topic_config("table", LogConfig.from_props(
            {"segment.bytes": 2048, "cleanup.policy": "compact"}))
        checkpoint = OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT)
        # The checkpoint is written once the whole cleaning is swapped in.
        wait_until(lambda: checkpoint.read() == {("table", 0): log.active_segment.base_offset},
                   20, message="the cleaner thread to clean table-0")
        assert log.size_in_bytes < size_before / 4
        assert {k: v for k, (_o, v) in latest_by_key(log).items()} == {b"a": b"49", b"b": b"49"}
    finally:
        manager.close()


def test_dump_log_shows_a_cleaned_segment(make_log, clock: FakeClock, capsys) -> None:  # type: ignore[no-untyped-def]
    """`odradek dump-log` on a cleaned segment: offset gaps (Kafka's "Non-consecutive offsets"
    report) and the delete horizon of a batch that kept a tombstone."""
    from odradek.cli import dump_log

    log = make_log(COMPACT)
    log.append_as_leader(batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], clock()), 0)
    log.append_as_leader(batch([(b"b", b"2"), (b"d", None)], clock()), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    now = clock()
    clean(log, now)
    path = log.log_segments()[0].log_path
    assert dump_log.main(["--files", str(path), "--print-data-log"]) == 0
    captured = capsys.readouterr()
    batches = [line for line in captured.out.splitlines() if line.startswith("baseOffset")]
    horizon = now + LogConfig.from_props(COMPACT).delete_retention_ms
    # Batches keep their offsets; the first lost offset 1 (b's first value).
    assert [line.split(" count")[0] for line in batches] == [
        "baseOffset: 0 lastOffset: 2", "baseOffset: 3 lastOffset: 4"]
    assert "deleteHorizonMs: OptionalLong.empty" in batches[0]
    assert f"deleteHorizonMs: OptionalLong[{horizon}]" in batches[1]
    assert "isvalid: false" not in captured.out
    offsets = [int(line.split("offset: ")[1].split()[0]) for line in captured.out.splitlines()
               if line.startswith("| offset: ")]
    assert offsets == [0, 2, 3, 4]
    assert captured.err.splitlines() == [f"Non-consecutive offsets in {path.absolute()}",
                                         "  0 is followed by 2"]


def test_run_time_thread_count_changes_are_bounded_as_kafka(tmp_path: Path,
                                                            clock: FakeClock) -> None:
    assert thread_count_error(2, 1) is None and thread_count_error(2, 4) is None
    assert thread_count_error(0, 1) == "Log cleaner threads should be at least 1"
    assert "more than double the current value 2" in thread_count_error(5, 2)
    assert "less than half the current value 5" in thread_count_error(1, 5)
    cleaner = LogCleaner(CleanerConfig(backoff_ms=600_000), dict, clock, isolated=False)
    try:
        cleaner.reconfigure(CleanerConfig(num_threads=8, backoff_ms=100))
        # The thread count is refused, the rest applied.
        assert cleaner.config == CleanerConfig(num_threads=1, backoff_ms=100)
        cleaner.reconfigure(CleanerConfig(num_threads=2, backoff_ms=100))
        assert cleaner.config.num_threads == 2
    finally:
        cleaner.shutdown()
