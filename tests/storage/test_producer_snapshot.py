"""Producer-state snapshot files (`<offset>.snapshot`, Kafka's ProducerSnapshot v1): the file
format, loading from the newest usable snapshot instead of rescanning every segment, falling
back when a snapshot is corrupt or missing, truncation, retention, a real SIGKILL, and
`odradek dump-log` printing a snapshot."""

from __future__ import annotations

import logging
import os
import signal
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from crc32c import crc32c
from storage_helpers import FakeClock, make_batch

from odradek.cli import dump_log
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import BatchHeader
from odradek.storage import Log, LogConfig
from odradek.storage.producer_state import (
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateManager,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    read_snapshot_file,
    write_snapshot_file,
)
from odradek.storage.segment import LogSegment

SMALL_SEGMENTS = {"segment.bytes": 1200, "index.interval.bytes": 200}
PRODUCER_ID = 4321
TAMPERED_PRODUCER_ID = 999
TIMESTAMP = 1_700_000_000_000  # all batches near it: no time-based segment rolls


# -- helpers -----------------------------------------------------------------------------------
def idempotent(base_sequence: int, count: int = 2, producer_id: int = PRODUCER_ID,
               epoch: int = 0) -> bytes:
    return make_batch(count, value_size=100, timestamp=TIMESTAMP + base_sequence,
                      producer_id=producer_id, producer_epoch=epoch,
                      base_sequence=base_sequence)


def append(log: Log, base_sequence: int, count: int = 2, producer_id: int = PRODUCER_ID,
           epoch: int = 0) -> tuple[int, int, bool]:
    info = log.append_as_leader(idempotent(base_sequence, count, producer_id, epoch), 0)
    return info.first_offset, info.last_offset, info.duplicate


def plain(log: Log, batches: int) -> None:
    for _ in range(batches):
        log.append_as_leader(make_batch(2, value_size=100, timestamp=TIMESTAMP), 0)


def parse_header(raw: bytes) -> BatchHeader:
    return BatchHeader.parse(raw, 0)


def summary(state: ProducerStateManager) -> dict[int, tuple[int, list[BatchMetadata]]]:
    return {pid: (entry.epoch, list(entry.batches)) for pid, entry in state.producers.items()}


def rescanned(log: Log) -> dict[int, tuple[int, list[BatchMetadata]]]:
    """The producer state a full rescan of every batch header of the log gives."""
    reference = ProducerStateManager()
    reference.rebuild(header for segment in log.log_segments()
                      for _position, header in segment.iter_headers(0, segment.size))
    return summary(reference)


def snapshots(path: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in path.iterdir() if p.name.endswith(".snapshot"))


def write_log(path: Path, clock: FakeClock, sequences: int = 12) -> Log:
    """Two idempotent producers interleaved with plain batches across many segment rolls;
    returns the open log."""
    log = Log(path, LogConfig.from_props(SMALL_SEGMENTS), clock=clock)
    for index in range(sequences):
        append(log, 2 * index)
        append(log, index, count=1, producer_id=PRODUCER_ID + 1)
        plain(log, 1)
    log.update_high_watermark(log.log_end_offset)
    return log


def reopen(path: Path, clock: FakeClock, clean: bool = True, **kwargs: object) -> Log:
    return Log(path, LogConfig.from_props(SMALL_SEGMENTS), clock=clock,
               had_clean_shutdown=clean, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "snap-0"


@pytest.fixture
def opened() -> Iterator[list[Log]]:
    logs: list[Log] = []
    yield logs
    for log in logs:
        log.close()


# -- the file ----------------------------------------------------------------------------------
def test_a_snapshot_file_round_trips_in_kafkas_layout(tmp_path: Path) -> None:
    entries = [SnapshotEntry(7, 3, 41, 1000, 4, 1_700_000_000_123),
               SnapshotEntry(-5, 0, -1, -1, 0, -1, coordinator_epoch=2,
                             current_txn_first_offset=12)]
    path = tmp_path / "00000000000000001001.snapshot"
    write_snapshot_file(path, entries)
    assert read_snapshot_file(path) == entries
    assert not (tmp_path / "00000000000000001001.snapshot.tmp").exists()
    data = path.read_bytes()
    # version int16 | crc uint32 over the rest | int32 count | 46-byte entries
    assert struct.unpack_from(">hIi", data) == (1, crc32c(data[6:]), 2)
    assert len(data) == 2 + 4 + 4 + 2 * 46
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (
        7, 3, 41, 1000, 4, 1_700_000_000_123, -1, -1)
    assert entries[0].first_sequence == 37
    assert SnapshotEntry(1, 0, 2, 10, 4, 0).first_sequence == 2**31 - 2  # wrapped sequences


@pytest.mark.parametrize("damage", ["crc", "version", "short", "count"])
def test_a_damaged_snapshot_is_refused(damage: str) -> None:
    data = bytearray(encode_snapshot([SnapshotEntry(1, 0, 5, 9, 1, 0)]))
    if damage == "crc":
        data[-1] ^= 0xFF
    elif damage == "version":
        data[0:2] = struct.pack(">h", 2)
    elif damage == "short":
        del data[-3:]
    else:  # a count that does not match the bytes, with a CRC that does
        data[6:10] = struct.pack(">i", 2)
        data[2:6] = struct.pack(">I", crc32c(bytes(data[6:])))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))


def test_the_state_round_trips_through_snapshot_entries() -> None:
    state = ProducerStateManager()
    for seq in range(0, 14, 2):  # seven batches: five are cached
        state.record(parse_header(idempotent(seq)), 100 + seq, 101 + seq)
    state.record(parse_header(idempotent(0, producer_id=8, epoch=3)), 500, 501)
    state.record(parse_header(idempotent(2**31 - 1, count=3, producer_id=9)), 600, 602)
    restored = ProducerStateManager()
    restored.load_entries(decode_snapshot(encode_snapshot(state.snapshot_entries())))
    assert summary(restored) == summary(state)
    assert [b.first_seq for b in restored.producers[9].batches] == [2**31 - 1]
    assert [b.last_seq for b in restored.producers[9].batches] == [1]
    assert len(restored.producers[PRODUCER_ID].batches) == 5


# -- writing and loading with the log ----------------------------------------------------------
def test_snapshots_are_taken_at_each_roll_and_at_a_clean_close(log_path: Path,
                                                               clock: FakeClock) -> None:
    log = write_log(log_path, clock)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 6
    assert snapshots(log_path) == bases[1:]  # one per roll, at the new segment's base offset
    end = log.log_end_offset
    expected = summary(log.producer_state)
    log.close()
    assert snapshots(log_path) == [*bases[1:], end]
    restored = ProducerStateManager()
    restored.load_entries(read_snapshot_file(log_path / f"{end:020d}.snapshot"))
    assert summary(restored) == expected


def _tamper_first_plain_batch(log_path: Path) -> None:
    """Makes the first non-idempotent batch of the first segment look like producer 999's
    sequence 0. A load that reads this segment's headers learns of producer 999; one that
    starts from a later snapshot does not. (The CRC no longer matches; a clean load does not
    check CRCs, and the segment is never read for data here.)"""
    first = log_path / f"{0:020d}.log"
    data = bytearray(first.read_bytes())
    position = 0
    while True:
        header = parse_header(bytes(data[position:position + 61]))
        if header.producer_id == -1:
            break
        position += header.size
    struct.pack_into(">qhi", data, position + 43, TAMPERED_PRODUCER_ID, 0, 0)
    first.write_bytes(bytes(data))


def test_a_load_starts_from_the_snapshot_and_reads_no_earlier_segment(
        log_path: Path, clock: FakeClock, opened: list[Log],
        monkeypatch: pytest.MonkeyPatch) -> None:
    log = write_log(log_path, clock)
    expected = summary(log.producer_state)
    bases = [s.base_offset for s in log.segments]
    log.close()
    _tamper_first_plain_batch(log_path)
    headers_read: dict[int, int] = {}
    original = LogSegment.iter_headers

    def counting(self: LogSegment, start: int, end: int):  # type: ignore[no-untyped-def]
        for item in original(self, start, end):
            headers_read[self.base_offset] = headers_read.get(self.base_offset, 0) + 1
            yield item

    monkeypatch.setattr(LogSegment, "iter_headers", counting)
    reopened = reopen(log_path, clock)
    opened.append(reopened)
    monkeypatch.undo()
    assert set(headers_read) <= {bases[-1]}, (
        f"a load from the clean-close snapshot read headers of segments {sorted(headers_read)}")
    assert summary(reopened.producer_state) == expected
    assert TAMPERED_PRODUCER_ID not in reopened.producer_state.producers  # never learnt


def test_an_unclean_load_replays_only_the_segments_after_the_newest_snapshot(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    log = write_log(log_path, clock)
    expected = rescanned(log)
    assert summary(log.producer_state) == expected
    end = log.log_end_offset
    log.close_handlers()  # no clean close: only the roll snapshots exist
    _tamper_first_plain_batch(log_path)
    reopened = reopen(log_path, clock, clean=False, recovery_point=end)
    opened.append(reopened)
    assert reopened.log_end_offset == end
    assert summary(reopened.producer_state) == expected
    assert TAMPERED_PRODUCER_ID not in reopened.producer_state.producers


@pytest.mark.parametrize("damage", ["crc", "empty"])
def test_a_corrupt_snapshot_falls_back_to_an_older_one_or_a_full_rescan(
        log_path: Path, clock: FakeClock, opened: list[Log], damage: str,
        caplog: pytest.LogCaptureFixture) -> None:
    log = write_log(log_path, clock)
    expected = summary(log.producer_state)
    end = log.log_end_offset
    log.close()
    latest = log_path / f"{end:020d}.snapshot"
    data = bytearray(latest.read_bytes())
    if damage == "crc":
        data[20] ^= 0x01
    latest.write_bytes(bytes(data) if damage == "crc" else b"")
    with caplog.at_level(logging.WARNING, logger="odradek.storage.producer_state"):
        reopened = reopen(log_path, clock)
    opened.append(reopened)
    assert any(str(latest) in r.getMessage() for r in caplog.records)
    assert not latest.exists()  # the corrupt file is deleted, an older snapshot used
    assert summary(reopened.producer_state) == expected
    reopened.close()
    opened.remove(reopened)

    # Every snapshot corrupt: a full rescan, which also reads the tampered first segment.
    _tamper_first_plain_batch(log_path)
    for offset in snapshots(log_path):
        (log_path / f"{offset:020d}.snapshot").write_bytes(b"\x00\x01garbage")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="odradek.storage.producer_state"):
        rescan = reopen(log_path, clock)
    opened.append(rescan)
    assert len(caplog.records) >= 1
    assert rescan.producer_state.producers[TAMPERED_PRODUCER_ID].batches[0].first_seq == 0
    assert summary(rescan.producer_state) == rescanned(rescan)
    assert {pid: state for pid, state in summary(rescan.producer_state).items()
            if pid != TAMPERED_PRODUCER_ID} == expected


def test_retries_of_the_last_batches_are_duplicates_after_a_restart(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    log = write_log(log_path, clock)
    acked = {seq: append(log, seq) for seq in range(24, 34, 2)}  # five more batches
    log.close()
    reopened = reopen(log_path, clock)
    opened.append(reopened)
    for seq, (first, last, _dup) in acked.items():
        # Any of the last five batches (max in-flight requests) is recognised with its offsets.
        assert append(reopened, seq) == (first, last, True)
    end = reopened.log_end_offset
    assert append(reopened, 34) == (end, end + 1, False)
    with pytest.raises(KafkaError) as excinfo:
        reopened.append_as_leader(idempotent(40), 0)
    assert excinfo.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_missing_snapshot_of_the_last_segment_still_gives_the_right_state(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    log = write_log(log_path, clock)
    last_acked = append(log, 24)
    expected = summary(log.producer_state)
    bases = [s.base_offset for s in log.segments]
    end = log.log_end_offset
    log.close_handlers()  # as a SIGKILL leaves it: no close snapshot
    # And as if the roll's snapshot never reached the disk.
    (log_path / f"{bases[-1]:020d}.snapshot").unlink()
    (log_path / f"{bases[-2]:020d}.snapshot.tmp").write_bytes(b"half-written")
    reopened = reopen(log_path, clock, clean=False, recovery_point=0)
    opened.append(reopened)
    assert reopened.log_end_offset == end
    assert summary(reopened.producer_state) == expected
    assert append(reopened, 24) == (*last_acked[:2], True)
    assert not (log_path / f"{bases[-2]:020d}.snapshot.tmp").exists()


def test_truncation_below_snapshots_deletes_them_and_reloads(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    log = write_log(log_path, clock)
    opened.append(log)
    bases = [s.base_offset for s in log.segments]
    target = bases[-3] + 1  # inside a segment, below the last two roll snapshots
    assert log.truncate_to(target)
    new_end = log.log_end_offset
    assert all(offset <= new_end for offset in snapshots(log_path))
    assert snapshots(log_path) == [b for b in bases[1:] if b <= new_end]
    assert summary(log.producer_state) == rescanned(log)
    # The batches cut are new data again when retried; the last one kept is a duplicate.
    last_kept = log.producer_state.producers[PRODUCER_ID].batches[-1]
    assert append(log, last_kept.first_seq) == (last_kept.first_offset,
                                                last_kept.last_offset, True)
    assert append(log, last_kept.last_seq + 1)[2] is False
    log.close()
    opened.remove(log)
    reopened = reopen(log_path, clock)
    opened.append(reopened)
    assert summary(reopened.producer_state) == rescanned(reopened)


def test_truncation_fully_deletes_every_snapshot(log_path: Path, clock: FakeClock,
                                                 opened: list[Log]) -> None:
    log = write_log(log_path, clock)
    opened.append(log)
    log.truncate_fully_and_start_at(10_000)
    assert snapshots(log_path) == []
    assert log.producer_state.producers == {}
    assert append(log, 0) == (10_000, 10_001, False)


def test_retention_keeps_the_snapshot_at_the_new_log_start(
        log_path: Path, clock: FakeClock, opened: list[Log]) -> None:
    log = Log(log_path, LogConfig.from_props({**SMALL_SEGMENTS, "retention.bytes": 3000}),
              clock=clock)
    opened.append(log)
    assert append(log, 0, producer_id=77) == (0, 1, False)  # then never again
    for index in range(15):
        append(log, 2 * index)
        plain(log, 1)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() > 0
    first_base = log.segments[0].base_offset
    assert first_base > 1  # producer 77's batch is gone from the log
    # One snapshot per remaining segment (taken when it was rolled in); older ones went.
    assert snapshots(log_path) == [s.base_offset for s in log.segments]
    log.close()
    opened.remove(log)
    reopened = reopen(log_path, clock)
    opened.append(reopened)
    # The snapshot remembers producer 77: its retry is still recognised.
    assert append(reopened, 0, producer_id=77) == (0, 1, True)


def test_the_number_of_snapshots_stays_bounded(log_path: Path, clock: FakeClock) -> None:
    log = write_log(log_path, clock)
    log.close()
    for restart in range(5):  # each clean close adds one at the log end; loads prune them
        log = reopen(log_path, clock)
        append(log, 24 + 2 * restart)
        log.close()
        assert len(snapshots(log_path)) <= len(log.segments) + 2
    bases = {s.base_offset for s in log.segments}
    strays = [offset for offset in snapshots(log_path) if offset not in bases]
    # The previous close's (kept by the load as the newest) and this close's.
    assert len(strays) <= 2 and log.log_end_offset in strays


# -- a real SIGKILL ----------------------------------------------------------------------------
WRITER = textwrap.dedent("""
    import sys
    from odradek.protocol.records.builder import RecordBatchBuilder
    from odradek.storage import Log, LogConfig
    log = Log(sys.argv[1], LogConfig.from_props({"segment.bytes": 1200,
                                                "index.interval.bytes": 200}))
    seq = 0
    while sys.stdin.readline():  # one batch per line the test sends
        builder = RecordBatchBuilder(producer_id=4321, producer_epoch=0, base_sequence=seq)
        for index in range(2):
            builder.append(1_700_000_000_000, b"k", bytes(100))
        info = log.append_as_leader(builder.build(), 0)
        print(seq, info.first_offset, info.last_offset, flush=True)
        seq += 2
""")


def test_state_after_a_sigkill_matches_a_full_rescan(log_path: Path, clock: FakeClock,
                                                     opened: list[Log]) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(log_path)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    acked: list[tuple[int, int, int]] = []
    try:
        assert process.stdin is not None and process.stdout is not None
        # The writer may run up to 3 batches past the 60th acknowledgement before the kill
        # lands (it dies during one of them, or idle): the last acknowledged batch stays among
        # the producer's last five, whose retries must be recognised. A writer running free
        # got hundreds of batches ahead while this process waited for the CPU.
        process.stdin.write(b"\n" * 63)
        process.stdin.flush()
        while len(acked) < 60:  # about fifteen segment rolls
            line = process.stdout.readline()
            if not line:
                break
            seq, first, last = map(int, line.split())
            acked.append((seq, first, last))
    finally:
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=30)
    assert len(acked) == 60, stderr.decode()
    log = reopen(log_path, clock, clean=False, recovery_point=0)
    opened.append(log)
    assert len(snapshots(log_path)) >= 10
    assert summary(log.producer_state) == rescanned(log)
    last_seq = log.producer_state.producers[PRODUCER_ID].last_seq
    assert last_seq >= acked[-1][0] + 1  # nothing acknowledged is lost to a process crash
    seq, first, last = acked[-1]
    assert append(log, seq) == (first, last, True)


# -- dump-log ----------------------------------------------------------------------------------
def test_dump_log_prints_a_snapshot_like_kafka(log_path: Path, clock: FakeClock,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    log = Log(log_path, LogConfig.from_props(SMALL_SEGMENTS), clock=clock)
    append(log, 0)
    append(log, 2)
    append(log, 0, count=3, producer_id=55, epoch=2)
    end = log.log_end_offset
    log.close()
    path = log_path / f"{end:020d}.snapshot"
    assert dump_log.main(["--files", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    ts = 1_700_000_000_000

    def line(pid: int, epoch: int, timestamp: int, first_seq: int, last_seq: int,
             last_offset: int, delta: int) -> str:
        return (f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: -1 "
                f"currentTxnFirstOffset: OptionalLong.empty lastTimestamp: {timestamp} "
                f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: "
                f"{last_offset} offsetDelta: {delta} timestamp: {timestamp}")

    assert out == [f"Dumping {path}",
                   line(PRODUCER_ID, 0, ts, 0, 1, 1, 1),
                   line(PRODUCER_ID, 0, ts + 2, 2, 3, 3, 1),
                   line(55, 2, ts, 0, 2, 6, 2)]
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    assert dump_log.main(["--files", str(path)]) == 0
    captured = capsys.readouterr()
    assert "Snapshot is corrupt (CRC is no longer valid)" in captured.err
