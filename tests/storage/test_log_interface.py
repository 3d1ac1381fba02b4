"""The partition log's interface to the layers above: isolation-bounded reads, the high
watermark and last stable offset, positions and readable bytes across segment rolls (what a
long poll compares), and the producer state rebuilt at reopen and after truncation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from storage_helpers import FakeClock, headers_of, make_batch

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import BatchHeader
from odradek.storage import Log, LogConfig
from odradek.storage.log import FetchIsolation, LogEnd

MakeLog = Callable[..., Log]
SMALL_SEGMENTS = {"segment.bytes": 1200, "index.interval.bytes": 200}


class Placed(NamedTuple):
    segment_base_offset: int
    position: int
    header: BatchHeader


def placed_batches(log: Log) -> list[Placed]:
    return [Placed(segment.base_offset, position, header)
            for segment in log.log_segments()
            for position, header in segment.iter_headers(0, segment.size)]


def fill(log: Log, batches: int, records_per_batch: int = 3, value_size: int = 100) -> None:
    for _ in range(batches):
        log.append_as_leader(make_batch(records_per_batch, value_size=value_size), 0)


def read_offsets(log: Log, start: int, isolation: FetchIsolation,
                 max_offset: int | None = None) -> list[tuple[int, int]]:
    """(base, last offset) of every batch readable from `start`; a read returns batches of one
    segment, so this reads on until a read returns nothing."""
    batches: list[tuple[int, int]] = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, max_offset, isolation=isolation).read_bytes()
        headers = headers_of(data)
        if not headers:
            break
        batches += [(h.base_offset, h.last_offset) for h in headers]
        offset = headers[-1].next_offset
    return batches


# -- the high watermark and isolation ----------------------------------------------------------
def test_update_high_watermark_is_clamped_to_the_log(make_log: MakeLog) -> None:
    log = make_log()
    fill(log, 4)  # offsets 0..11
    assert log.high_watermark == 0
    assert log.update_high_watermark(7) == 7
    assert log.update_high_watermark(100) == 12  # at most the log end
    assert log.update_high_watermark(3) == 3  # a follower may move it back
    log.update_high_watermark(12)
    log.delete_records_before(6)
    assert log.update_high_watermark(2) == 6  # at least the log start
    assert log.last_stable_offset == log.high_watermark == 6


def test_maybe_increment_high_watermark_only_moves_forward(make_log: MakeLog) -> None:
    log = make_log()
    fill(log, 2)  # offsets 0..5
    assert log.maybe_increment_high_watermark(3)
    assert not log.maybe_increment_high_watermark(3)
    assert not log.maybe_increment_high_watermark(1)
    assert log.high_watermark == 3
    assert log.maybe_increment_high_watermark(99)
    assert log.high_watermark == 6  # at most the log end
    assert not log.maybe_increment_high_watermark(99)


def test_the_high_watermark_given_at_open_is_clamped(make_log: MakeLog, tmp_path: Path,
                                                     clock: FakeClock) -> None:
    log = make_log()
    fill(log, 2)
    log.close()
    reopened = Log(tmp_path / "topic-0", log.config, clock=clock, high_watermark=1000)
    try:
        assert reopened.high_watermark == reopened.log_end_offset == 6
    finally:
        reopened.close()


def test_truncation_lowers_the_high_watermark(make_log: MakeLog) -> None:
    log = make_log()
    fill(log, 4)
    log.update_high_watermark(12)
    log.truncate_to(6)
    assert log.high_watermark == log.log_end_offset == 6
    log.truncate_fully_and_start_at(40)
    assert log.high_watermark == 40


def test_isolation_limits(make_log: MakeLog) -> None:
    log = make_log()
    fill(log, 3)
    log.update_high_watermark(6)
    assert log.isolation_limit(FetchIsolation.LOG_END) == 9
    assert log.isolation_limit(FetchIsolation.HIGH_WATERMARK) == 6
    assert log.isolation_limit(FetchIsolation.TXN_COMMITTED) == log.last_stable_offset == 6


def test_reads_stop_at_their_isolation_limit(make_log: MakeLog) -> None:
    log = make_log(SMALL_SEGMENTS)
    fill(log, 12)  # 3 records per batch: 0..35, several segments
    assert len(log.segments) > 2
    log.update_high_watermark(9)
    hw, lso, end = (FetchIsolation.HIGH_WATERMARK, FetchIsolation.TXN_COMMITTED,
                    FetchIsolation.LOG_END)
    assert read_offsets(log, 0, hw)[-1] == (6, 8)
    assert read_offsets(log, 0, lso)[-1] == (6, 8)
    assert read_offsets(log, 9, hw) == []  # nothing committed from the high watermark on
    assert read_offsets(log, 20, hw) == []  # above it: empty, not out of range
    assert read_offsets(log, 9, end)[0] == (9, 11)
    # A limit inside a batch excludes that batch (whole batches only).
    log.update_high_watermark(31)
    assert read_offsets(log, 27, hw) == [(27, 29)]
    assert read_offsets(log, 30, hw) == []
    # max_offset narrows the isolation limit further, never widens it.
    assert read_offsets(log, 0, hw, max_offset=6)[-1] == (3, 5)
    assert read_offsets(log, 27, hw, max_offset=100) == [(27, 29)]
    with pytest.raises(KafkaError) as excinfo:
        log.read(37, 100, isolation=hw)
    assert excinfo.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


# -- positions and readable bytes --------------------------------------------------------------
def test_position_of_names_the_batch_holding_an_offset_in_every_segment(
        make_log: MakeLog) -> None:
    log = make_log(SMALL_SEGMENTS)
    fill(log, 12)
    batches = placed_batches(log)
    assert len({b.segment_base_offset for b in batches}) > 2
    for offset in range(log.log_end_offset):
        holder = next(b for b in batches if b.header.last_offset >= offset)
        assert log.position_of(offset) == LogEnd(offset, holder.segment_base_offset,
                                                 holder.position), offset
    active = log.active_segment
    assert log.position_of(log.log_end_offset) == LogEnd(log.log_end_offset, active.base_offset,
                                                         active.size)


def test_readable_bytes_counts_whole_batches_up_to_the_limit(make_log: MakeLog) -> None:
    log = make_log(SMALL_SEGMENTS)
    fill(log, 12)
    batches = placed_batches(log)
    for limit in (0, 3, 10, 18, 27, 36):  # boundaries and offsets inside batches
        log.update_high_watermark(limit)
        for start in range(0, 36, 2):
            start_position = log.position_of(start)
            readable = log.readable_bytes(start_position, FetchIsolation.HIGH_WATERMARK)
            if start >= limit:
                assert readable == 0, (start, limit)
            else:  # from the batch holding `start` to the one holding the limit (excluded)
                limit_batch = next((b for b in batches if b.header.last_offset >= limit), None)
                wanted = sum(b.header.size for b in batches
                             if b.header.last_offset >= start and (
                                 limit_batch is None
                                 or b.header.base_offset < limit_batch.header.base_offset))
                assert readable == wanted, (start, limit)
    assert log.readable_bytes(log.position_of(0), FetchIsolation.LOG_END) == log.size_in_bytes


def test_a_long_poll_position_taken_before_a_roll_counts_the_new_segment(
        make_log: MakeLog) -> None:
    log = make_log(SMALL_SEGMENTS)
    fill(log, 2)
    waiting_at = log.position_of(log.log_end_offset)  # a caught-up consumer's long poll
    assert log.readable_bytes(waiting_at, FetchIsolation.LOG_END) == 0
    log.roll()
    assert log.readable_bytes(waiting_at, FetchIsolation.LOG_END) == 0
    info = log.append_as_leader(make_batch(2, value_size=50), 0)
    assert info.first_offset == waiting_at.offset
    assert log.active_segment.base_offset == waiting_at.offset != waiting_at.segment_base_offset
    new_batch = log.active_segment.size
    assert log.readable_bytes(waiting_at, FetchIsolation.LOG_END) == new_batch
    assert log.readable_bytes(waiting_at, FetchIsolation.HIGH_WATERMARK) == 0
    log.update_high_watermark(log.log_end_offset)
    assert log.readable_bytes(waiting_at, FetchIsolation.HIGH_WATERMARK) == new_batch
    fill(log, 20)  # more rolls: every later segment counts in full
    assert len(log.segments) > 3
    assert log.readable_bytes(waiting_at, FetchIsolation.LOG_END) == sum(
        s.size for s in log.segments if s.base_offset >= waiting_at.offset)


# -- producer state ----------------------------------------------------------------------------
PRODUCER = {"producer_id": 1234, "producer_epoch": 0}


def idempotent(base_sequence: int, count: int = 2) -> bytes:
    return make_batch(count, base_sequence=base_sequence, **PRODUCER)


def append_idempotent(log: Log, base_sequence: int, count: int = 2) -> tuple[int, int, bool]:
    info = log.append_as_leader(idempotent(base_sequence, count), 0)
    return info.first_offset, info.last_offset, info.duplicate


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_is_rebuilt_when_the_log_reopens(tmp_path: Path, clock: FakeClock,
                                                        clean: bool) -> None:
    config = LogConfig.from_props(SMALL_SEGMENTS)
    log = Log(tmp_path / "idem-0", config, clock=clock)
    assert append_idempotent(log, 0) == (0, 1, False)
    fill(log, 10)  # other producers' batches, across segment rolls
    assert append_idempotent(log, 2) == (32, 33, False)
    if clean:
        log.close()
    reopened = Log(tmp_path / "idem-0", config, clock=clock, had_clean_shutdown=clean)
    try:
        assert append_idempotent(reopened, 0) == (0, 1, True)
        assert append_idempotent(reopened, 2) == (32, 33, True)
        with pytest.raises(KafkaError) as excinfo:
            reopened.append_as_leader(idempotent(7), 0)
        assert excinfo.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert append_idempotent(reopened, 4) == (34, 35, False)
    finally:
        reopened.close()
        if not clean:
            log.close()


def test_producer_state_follows_truncation(make_log: MakeLog) -> None:
    log = make_log()
    assert append_idempotent(log, 0) == (0, 1, False)
    assert append_idempotent(log, 2) == (2, 3, False)
    assert log.truncate_to(2)  # the second batch is gone
    # Its retry is new data now, written again at the log end; the first is still a duplicate.
    assert append_idempotent(log, 0) == (0, 1, True)
    assert append_idempotent(log, 2) == (2, 3, False)
    assert log.truncate_to(0)
    assert not log.producer_state.producers  # the producer is unknown again: a retry is new
    assert append_idempotent(log, 0) == (0, 1, False)
    log.truncate_fully_and_start_at(50)
    assert append_idempotent(log, 0) == (50, 51, False)


def test_follower_appends_feed_the_producer_state(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_follower(make_batch(2, base_offset=0, leader_epoch=1, base_sequence=0,
                                      **PRODUCER))
    assert append_idempotent(log, 0) == (0, 1, True)
    assert append_idempotent(log, 2) == (2, 3, False)
