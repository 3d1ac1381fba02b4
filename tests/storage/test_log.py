from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_helpers import FakeClock, append_many, headers_of, make_batch, read_all

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import (
    BatchHeader,
    Compression,
    TimestampType,
    iter_batches,
    verify_crc,
)
from odradek.storage import Log
from odradek.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from odradek.storage.validator import UnexpectedAppendOffsetError

MakeLog = Callable[..., Log]


def test_append_assigns_offsets_and_epoch_in_place(make_log: MakeLog) -> None:
    log = make_log()
    first = log.append_as_leader(make_batch(3), leader_epoch=5)
    second = log.append_as_leader(make_batch(2), leader_epoch=5)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert first.log_append_time == -1 and first.log_start_offset == 0
    assert log.log_end_offset == 5
    headers = headers_of(log.read(0, 1 << 20).read_bytes())
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [
        (0, 2, 5), (3, 4, 5)]
    assert log.leader_epoch_cache.entries == [(5, 0)]
    assert log.latest_epoch == 5


def test_read_returns_whole_batches_from_the_batch_holding_the_offset(make_log: MakeLog) -> None:
    log = make_log()
    append_many(log, 10, records_per_batch=4, value_size=100)  # offsets 0..39
    data = log.read(6, 1 << 20)
    assert data.first_batch_offset == 4 and data.fetch_offset == 6
    headers = headers_of(data.read_bytes())
    assert headers[0].base_offset == 4 and headers[-1].last_offset == 39
    assert len(data) == sum(h.size for h in headers)
    batch_size = headers[0].size
    limited = log.read(0, batch_size * 3 + 10)
    assert len(limited) == batch_size * 3  # whole batches only
    tiny = log.read(0, 1)
    assert len(tiny) == batch_size  # min_one_batch: the first batch even when too large
    assert len(log.read(0, 1, min_one_batch=False)) == 0
    bounded = headers_of(log.read(0, 1 << 20, max_offset=10).read_bytes())
    assert bounded[-1].last_offset == 7  # the batch holding offset 10 (8..11) is excluded
    assert len(log.read(8, 1 << 20, max_offset=8)) == 0
    assert len(log.read(40, 1 << 20)) == 0  # at the log end: empty, not an error
    for bad in (-1, 41):
        with pytest.raises(KafkaError) as excinfo:
            log.read(bad, 100)
        assert excinfo.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_file_region_can_be_sent_with_sendfile(make_log: MakeLog, tmp_path: Path) -> None:
    log = make_log()
    append_many(log, 5, records_per_batch=2, value_size=50)
    region = log.read(0, 1 << 20)
    out_path = tmp_path / "out"
    with open(out_path, "wb") as out:
        sent = os.sendfile(out.fileno(), region.file.fileno(), region.position, region.length)
    assert sent == region.length
    assert out_path.read_bytes() == region.read_bytes()


def test_roll_on_segment_bytes_and_index_every_interval(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 10_000, "index.interval.bytes": 1000})
    append_many(log, 100, value_size=400)  # ~470 bytes per batch
    segments = log.segments
    assert len(segments) > 3
    for info in segments:
        assert info.size <= 10_000
        assert Path(info.path).name == f"{info.base_offset:020d}.log"
    sealed = log.log_segments()[0]
    # Rolled segments have trimmed indexes; an entry about every 1000 bytes.
    assert sealed.offset_index.path.stat().st_size == sealed.offset_index.entries * 8
    entries = [sealed.offset_index.entry(i) for i in range(sealed.offset_index.entries)]
    assert len(entries) >= 3
    batch_size = headers_of(log.read(0, 1).read_bytes())[0].size
    previous = 0
    for offset, position in entries:
        # Kafka's rule: an entry once more than index.interval.bytes were written since the last.
        assert 1000 < position - previous <= 1000 + batch_size
        previous = position
        header = BatchHeader.parse(os.pread(sealed.file.fileno(), 61, position))
        assert header.last_offset == offset
    # Every offset reads back from the right segment.
    for offset in range(0, 100, 7):
        data = log.read(offset, 1)
        assert headers_of(data.read_bytes())[0].base_offset == offset


def test_roll_on_time_uses_record_timestamps(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log({"segment.ms": 1000})
    t0 = clock.now
    log.append_as_leader(make_batch(1, timestamp=t0), 0)
    log.append_as_leader(make_batch(1, timestamp=t0 + 500), 0)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, timestamp=t0 + 1500), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_offset_index_is_full(make_log: MakeLog) -> None:
    log = make_log({"segment.index.bytes": 32, "index.interval.bytes": 1})  # 4 entries
    append_many(log, 20)
    assert len(log.segments) >= 4
    assert read_all(log)[-1].last_offset == 19


def test_roll_on_relative_offset_overflow(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_follower(make_batch(1, base_offset=0))
    far = 2**31 + 10
    log.append_as_follower(make_batch(1, base_offset=far))
    assert [s.base_offset for s in log.segments] == [0, far]
    log.update_high_watermark(log.log_end_offset)
    assert headers_of(log.read(1, 100).read_bytes())[0].base_offset == far


def test_offset_for_timestamp_and_special_timestamps(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 2000, "index.interval.bytes": 200})
    base = 1_700_000_000_000
    for index in range(50):
        timestamps = [base + index * 100 + delta for delta in (0, 10, 20)]
        log.append_as_leader(make_batch(3, timestamps=timestamps), leader_epoch=index // 10)
    assert len(log.segments) > 3
    result = log.fetch_offset_by_timestamp(base + 1010)
    assert result is not None and (result.offset, result.timestamp) == (31, base + 1010)
    result = log.fetch_offset_by_timestamp(base + 1015)  # between records
    assert (result.offset, result.timestamp, result.leader_epoch) == (32, base + 1020, 1)
    assert log.fetch_offset_by_timestamp(0).offset == 0
    assert log.fetch_offset_by_timestamp(base + 10**9) is None
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (150, -1, 4)
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (0, -1, 0)
    assert log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP) == (0, -1, 0)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (149, base + 4920, 4)


def test_max_timestamp_finds_the_record_not_the_batch(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(make_batch(4, timestamps=[10, 50, 20, 30]), 0)
    log.append_as_leader(make_batch(2, timestamps=[40, 45]), 0)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (1, 50, 0)
    assert log.fetch_offset_by_timestamp(25).offset == 1  # first record with ts >= 25


def test_log_append_time_patches_max_timestamp(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log({"message.timestamp.type": "LogAppendTime"})
    info = log.append_as_leader(make_batch(3, timestamp=5), 0)
    assert info.log_append_time == clock.now and info.max_timestamp == clock.now
    data = log.read(0, 1 << 20).read_bytes()
    header = headers_of(data)[0]
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == clock.now
    verify_crc(data, 0, header)  # CRC recomputed after the patch
    assert log.fetch_offset_by_timestamp(clock.now) == (0, clock.now, 0)


def test_compressed_batches_are_stored_as_is(make_log: MakeLog) -> None:
    log = make_log()
    batch = make_batch(50, value_size=200, compression=Compression.ZSTD,
                       timestamps=list(range(1000, 1050)))
    info = log.append_as_leader(batch, 0)
    assert (info.first_offset, info.last_offset) == (0, 49)
    data = log.read(0, 1 << 20).read_bytes()
    # Only the base offset and the partition leader epoch changed.
    assert data[16:] == batch[16:] and len(data) == len(batch)
    assert log.fetch_offset_by_timestamp(1025).offset == 25


@pytest.mark.parametrize(("props", "batch_kwargs", "code"), [
    ({"max.message.bytes": "500"}, {"value_size": 1000}, ErrorCode.MESSAGE_TOO_LARGE),
    ({"segment.bytes": "300"}, {"value_size": 1000}, ErrorCode.RECORD_LIST_TOO_LARGE),
    ({"message.timestamp.before.max.ms": "1000"}, {"timestamp": 1}, ErrorCode.INVALID_TIMESTAMP),
    ({"message.timestamp.after.max.ms": "1000"}, {"timestamp": 2**62},
     ErrorCode.INVALID_TIMESTAMP),
    ({}, {"base_offset": 7}, ErrorCode.INVALID_RECORD),
    ({}, {"is_control": True}, ErrorCode.INVALID_RECORD),
])
def test_invalid_appends_raise_kafka_errors(make_log: MakeLog, props: dict[str, str],
                                            batch_kwargs: dict[str, object],
                                            code: ErrorCode) -> None:
    log = make_log(props)
    with pytest.raises(KafkaError) as excinfo:
        log.append_as_leader(make_batch(1, **batch_kwargs), 0)  # type: ignore[arg-type]
    assert excinfo.value.code == code
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_corrupt_and_truncated_appends_are_rejected(make_log: MakeLog) -> None:
    log = make_log()
    batch = bytearray(make_batch(2, value_size=50))
    batch[-3] ^= 0xFF
    for bad in (bytes(batch), make_batch(1) + make_batch(1)[:30], b"\x00" * 70):
        with pytest.raises(KafkaError) as excinfo:
            log.append_as_leader(bad, 0)
        assert excinfo.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0
    empty = log.append_as_leader(b"", 0)
    assert empty.first_offset == -1 and log.log_end_offset == 0


def test_follower_append_keeps_offsets_and_epochs(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_follower(make_batch(2, base_offset=0, leader_epoch=1)
                           + make_batch(3, base_offset=2, leader_epoch=2))
    log.append_as_follower(make_batch(1, base_offset=10, leader_epoch=4))  # gaps are fine
    assert log.log_end_offset == 11
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 2), (4, 10)]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(make_batch(1, base_offset=5, leader_epoch=4))
    assert log.end_offset_for_epoch(2) == (2, 10)
    assert log.end_offset_for_epoch(3) == (2, 10)


def test_retention_by_time_deletes_old_segments_after_the_delay(make_log: MakeLog,
                                                                clock: FakeClock) -> None:
    log = make_log({"segment.bytes": 1000, "retention.ms": 10_000,
                    "file.delete.delay.ms": 5000})
    old = clock.now - 60_000
    for _ in range(10):
        log.append_as_leader(make_batch(1, timestamp=old, value_size=300), 0)
    for _ in range(5):
        log.append_as_leader(make_batch(1, timestamp=clock.now, value_size=300), 0)
    log.update_high_watermark(log.log_end_offset)
    before = len(log.segments)
    region = log.read(0, 1 << 20)  # handed out before deletion
    deleted = log.delete_old_segments()
    assert deleted > 0 and len(log.segments) == before - deleted
    assert log.log_start_offset == log.segments[0].base_offset
    assert log.log_start_offset in (8, 9, 10)
    deleted_files = sorted(p.name for p in log.dir.iterdir() if p.name.endswith(".deleted"))
    assert "00000000000000000000.log.deleted" in deleted_files
    assert headers_of(region.read_bytes())[0].base_offset == 0  # still readable
    clock.advance(5000)
    log.run_pending_deletes()
    assert not any(p.name.endswith(".deleted") for p in log.dir.iterdir())
    with pytest.raises(KafkaError):
        log.read(0, 100)


def test_retention_never_passes_the_high_watermark(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log({"segment.bytes": 1000, "retention.ms": 1})
    for _ in range(10):
        log.append_as_leader(make_batch(1, timestamp=1, value_size=300), 0)
    log.update_high_watermark(0)
    assert log.delete_old_segments() == 0
    log.update_high_watermark(4)
    log.delete_old_segments()
    assert log.log_start_offset <= 4
    # With everything replicated, even the active segment goes: Kafka rolls first.
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments()
    assert log.log_start_offset == log.log_end_offset == 10
    assert len(log.segments) == 1 and log.segments[0].size == 0
    info = log.append_as_leader(make_batch(1), 0)
    assert info.first_offset == 10


def test_retention_by_size(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 1000, "retention.bytes": 2500, "retention.ms": -1})
    append_many(log, 20, value_size=300)
    log.delete_old_segments()
    assert log.size_in_bytes <= 2500 + 1000
    assert log.size_in_bytes > 2500 - 1000
    assert read_all(log)[-1].last_offset == 19


def test_delete_records_moves_log_start_offset(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 1000})
    append_many(log, 20, value_size=300)
    with pytest.raises(KafkaError) as excinfo:
        log.delete_records_before(log.high_watermark + 1)
    assert excinfo.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    segments_before = len(log.segments)
    assert log.delete_records_before(7) == 7
    assert log.log_start_offset == 7
    assert len(log.segments) < segments_before
    assert log.segments[0].base_offset <= 7
    with pytest.raises(KafkaError):
        log.read(6, 100)
    assert headers_of(log.read(7, 100).read_bytes())[0].base_offset == 7
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 7
    assert log.fetch_offset_by_timestamp(0).offset == 7


def test_truncate_to_within_and_across_segments(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 1000})
    for epoch in range(4):
        for _ in range(5):
            log.append_as_leader(make_batch(2, value_size=150), leader_epoch=epoch)
    log.update_high_watermark(log.log_end_offset)
    assert log.log_end_offset == 40 and len(log.segments) > 3
    assert log.truncate_to(25)  # 24..25 is one batch: truncating at 25 ends the log at 24
    assert log.log_end_offset == 24
    assert log.truncate_to(21) and log.log_end_offset == 20
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 10)]
    assert log.high_watermark == 20
    assert all(s.base_offset <= 20 for s in log.segments)
    assert not log.truncate_to(30)  # beyond the end: nothing to do
    info = log.append_as_leader(make_batch(1), leader_epoch=7)
    assert info.first_offset == 20
    log.update_high_watermark(log.log_end_offset)
    assert [h.base_offset for h in read_all(log)][-2:] == [18, 20]


def test_truncate_fully_and_start_at(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 1000})
    append_many(log, 10, value_size=300)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.leader_epoch_cache.entries == []
    assert [s.base_offset for s in log.segments] == [100]
    log.append_as_follower(make_batch(1, base_offset=100, leader_epoch=3))
    assert log.log_end_offset == 101


def test_flush_advances_recovery_point(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 1000})
    append_many(log, 10, value_size=300)
    assert log.recovery_point == 0
    log.flush(5)
    assert log.recovery_point == 5
    log.flush()
    assert log.recovery_point == log.log_end_offset == 10


def test_flush_messages_policy(make_log: MakeLog) -> None:
    log = make_log({"flush.messages": 3})
    append_many(log, 2)
    assert log.recovery_point == 0
    append_many(log, 1)
    assert log.recovery_point == 3
    deferred = make_log({"flush.messages": 1}, name="other-0", inline_flush=False)
    info = deferred.append_as_leader(make_batch(1), 0)
    assert info.flush_needed and deferred.recovery_point == 0


def test_clean_reopen_keeps_everything(make_log: MakeLog, tmp_path: Path,
                                       clock: FakeClock) -> None:
    log = make_log({"segment.bytes": 1500, "index.interval.bytes": 100})
    base = 1_600_000_000_000
    for index in range(30):
        log.append_as_leader(make_batch(2, timestamps=[base + index, base + index]), 1)
    log.update_high_watermark(log.log_end_offset)
    expected = read_all(log)
    max_ts = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    log.close()
    for segment in log.log_segments():
        assert segment.offset_index.path.stat().st_size % 8 == 0
        assert segment.time_index.path.stat().st_size % 12 == 0
    reopened = Log(tmp_path / "topic-0", log.config, clock=clock, high_watermark=60)
    try:
        assert reopened.log_end_offset == 60 and reopened.recovery_point == 60
        assert read_all(reopened) == expected
        assert reopened.fetch_offset_by_timestamp(MAX_TIMESTAMP) == max_ts
        assert reopened.fetch_offset_by_timestamp(base + 20).offset == 40
        assert reopened.leader_epoch_cache.entries == [(1, 0)]
        assert reopened.append_as_leader(make_batch(1), 1).first_offset == 60
    finally:
        reopened.close()


def test_concurrent_readers_never_see_partial_batches(make_log: MakeLog) -> None:
    log = make_log({"segment.bytes": 20_000, "index.interval.bytes": 500,
                    "retention.bytes": 60_000})
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                start, end = log.log_start_offset, log.log_end_offset
                if end == start:
                    continue
                offset = rng.randrange(start, end)
                try:
                    region = log.read(offset, rng.choice([1, 1000, 10_000]))
                except KafkaError as exc:  # retention moved the start meanwhile
                    assert exc.code == ErrorCode.OFFSET_OUT_OF_RANGE
                    continue
                data = region.read_bytes()
                batches = list(iter_batches(data))
                assert sum(h.size for _, h in batches) == len(data)
                assert batches[0][1].base_offset <= offset <= batches[0][1].last_offset
                for position, header in batches:
                    verify_crc(data, position, header)
                reads[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    try:
        for index in range(1500):
            log.append_as_leader(make_batch(1 + index % 5, value_size=100), 0)
            log.update_high_watermark(log.log_end_offset)
            if index % 100 == 0:
                log.delete_old_segments()  # files stay open for file.delete.delay.ms
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors, errors[0]
    assert reads[0] > 100


def test_read_reports_the_last_offset_of_the_region(make_log: MakeLog) -> None:
    log = make_log({"index.interval.bytes": 100})
    rng = random.Random(3)
    for _ in range(200):
        log.append_as_leader(make_batch(rng.randint(1, 4), value_size=rng.randint(10, 400)), 0)
    log.update_high_watermark(log.log_end_offset)
    for _ in range(300):
        offset = rng.randrange(log.log_end_offset)
        region = log.read(offset, rng.randint(1, 5000), max_offset=rng.choice(
            [None, rng.randrange(offset + 1, log.log_end_offset + 1)]))
        headers = headers_of(region.read_bytes())
        if headers:
            assert region.first_batch_offset == headers[0].base_offset
            assert region.last_offset == headers[-1].last_offset
        else:
            assert region.last_offset == -1 and len(region) == 0


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "readonly_view", "writable_view"])
def test_append_accepts_any_buffer(make_log: MakeLog, kind: str) -> None:
    log = make_log()
    # 700 batches in one append: more than IOV_MAX (1024) write buffers when not patched in place.
    raw = b"".join(make_batch(2, value_size=30) for _ in range(700))
    frame = b"xx" + raw  # a produce request's records are a slice of a larger frame
    records = {"bytes": raw, "bytearray": bytearray(raw),
               "readonly_view": memoryview(frame)[2:],
               "writable_view": memoryview(bytearray(frame))[2:]}[kind]
    info = log.append_as_leader(records, leader_epoch=3)
    assert (info.first_offset, info.last_offset) == (0, 1399)
    log.update_high_watermark(log.log_end_offset)
    headers = read_all(log)
    assert [h.base_offset for h in headers] == list(range(0, 1400, 2))
    assert {h.partition_leader_epoch for h in headers} == {3}
    data = log.read(0, 1 << 30).read_bytes()
    assert len(data) == len(raw)
    for position, header in iter_batches(data):
        verify_crc(data, position, header)
    if kind in ("bytes", "readonly_view"):
        assert raw[:8] == bytes(8)  # the caller's read-only bytes were not modified
