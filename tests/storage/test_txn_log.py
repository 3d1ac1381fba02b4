"""The log side of transactions (Kafka's ProducerStateManager / ProducerAppendInfo /
TransactionIndex / UnifiedLog): transactional batches open a transaction, COMMIT/ABORT markers
close it, the last stable offset, the `.txnindex` of aborted transactions, marker fencing,
snapshots carrying the open transactions, recovery rebuilding the txn index, truncation,
retention, producer expiry, followers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import FakeClock, make_batch

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import build_control_batch, iter_batches
from odradek.storage import Log, LogConfig
from odradek.storage.log import FetchIsolation
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.txn_index import AbortedTxn, read_txn_index_file
from odradek.storage.validator import AppendOrigin

SMALL_SEGMENTS = {"segment.bytes": 1500, "index.interval.bytes": 200}
A, B, C = 1001, 1002, 1003


class Producer:
    """A transactional (or idempotent) producer writing to one log, with its sequences."""

    def __init__(self, log: Log, producer_id: int, epoch: int = 0,
                 transactional: bool = True) -> None:
        self.log, self.producer_id, self.epoch = log, producer_id, epoch
        self.transactional = transactional
        self.sequence = 0

    def send(self, count: int = 2) -> tuple[int, int]:
        info = self.log.append_as_leader(make_batch(
            count, value_size=60, timestamp=self.log.clock(), producer_id=self.producer_id,
            producer_epoch=self.epoch, base_sequence=self.sequence,
            is_transactional=self.transactional), 0)
        self.sequence += count
        return info.first_offset, info.last_offset

    def end(self, commit: bool, coordinator_epoch: int = 0, epoch: int | None = None,
            origin: AppendOrigin = AppendOrigin.COORDINATOR) -> int:
        marker = build_control_batch(self.producer_id, self.epoch if epoch is None else epoch,
                                     commit, coordinator_epoch, self.log.clock())
        return self.log.append_as_leader(marker, 0, origin=origin).first_offset


def committed(log: Log) -> None:
    log.maybe_increment_high_watermark(log.log_end_offset)


def txn_index_entries(log: Log) -> list[AbortedTxn]:
    return [txn for segment in log.log_segments() for txn in segment.txn_index.entries]


def producer_summary(log: Log) -> list[tuple[int, ...]]:
    return sorted((p.producer_id, p.producer_epoch, p.last_sequence, p.coordinator_epoch,
                   p.current_txn_start_offset) for p in log.active_producers())


@pytest.fixture
def logs() -> Iterator[list[Log]]:
    opened: list[Log] = []
    yield opened
    for log in opened:
        log.close()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock, logs: list[Log]):  # type: ignore[no-untyped-def]
    def opener(name: str = "txn-0", clean: bool = True, **kwargs: object) -> Log:
        log = Log(tmp_path / name, LogConfig.from_props(SMALL_SEGMENTS), clock=clock,
                  had_clean_shutdown=clean, **kwargs)  # type: ignore[arg-type]
        logs.append(log)
        return log
    return opener


# -- last stable offset ------------------------------------------------------------------------
def test_lso_follows_ongoing_and_unreplicated_transactions(open_log) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    a, b = Producer(log, A), Producer(log, B)
    plain = Producer(log, C, transactional=False)
    assert a.send() == (0, 1)
    assert b.send() == (2, 3)
    plain.send()  # 4-5: idempotent, no transaction
    a.send()  # 6-7: A's transaction continues
    committed(log)
    assert log.high_watermark == 8 and log.last_stable_offset == 0
    assert log.has_ongoing_transaction(A, 0) and log.has_ongoing_transaction(B, 0)
    assert not log.has_ongoing_transaction(A, 1) and not log.has_ongoing_transaction(C, 0)

    commit_at = a.end(commit=True)
    assert commit_at == 8
    # The marker is not replicated yet: A's transaction still bounds the LSO.
    assert log.last_stable_offset == 0 and not log.has_ongoing_transaction(A, 0)
    committed(log)
    assert log.last_stable_offset == 2  # B's transaction is the first unstable one now

    abort_at = b.end(commit=False)
    assert log.last_stable_offset == 2
    committed(log)
    assert log.last_stable_offset == log.high_watermark == abort_at + 1
    # Only the aborted transaction is indexed; its LSO is the offset after its marker.
    assert txn_index_entries(log) == [AbortedTxn(B, 2, abort_at, abort_at + 1)]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(B, 2, abort_at, abort_at + 1)]
    assert producer_summary(log) == [(A, 0, 3, 0, -1), (B, 0, 1, 0, -1), (C, 0, 1, -1, -1)]


def test_read_committed_stops_at_the_lso(open_log) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    a = Producer(log, A)
    plain = Producer(log, C, transactional=False)
    plain.send()  # 0-1
    a.send()  # 2-3
    plain.send()  # 4-5
    committed(log)
    data = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert (data.first_offset, data.last_offset) == (0, 1)
    start = log.position_of(0)
    assert log.readable_bytes(start, FetchIsolation.TXN_COMMITTED) == data.length
    assert log.readable_bytes(start, FetchIsolation.HIGH_WATERMARK) > data.length
    a.end(commit=False)
    committed(log)
    data = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert data.last_offset == 6
    assert log.aborted_transactions_in(data) == [AbortedTxn(A, 2, 6, 7)]
    # A range after the aborted transaction's marker needs no entry.
    later = log.read(7, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert later.length == 0 and log.aborted_transactions_in(later) == []


def test_lso_of_an_ongoing_transaction_from_before_the_log_start(open_log) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    a = Producer(log, A)
    plain = Producer(log, C, transactional=False)
    a.send()
    for _ in range(12):
        plain.send()
    committed(log)
    log.delete_records_before(10)
    # Kafka clamps the first unstable offset to the log start offset.
    assert log.last_stable_offset == log.log_start_offset == 10


# -- markers: checks and fencing ---------------------------------------------------------------
def test_marker_checks_append_nothing(open_log) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    a = Producer(log, A, epoch=3)
    a.send()
    a.end(commit=True, coordinator_epoch=5)
    a.send()
    end = log.log_end_offset

    def refused(code: ErrorCode, call) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(KafkaError) as error:
            call()
        assert error.value.code == code
        assert log.log_end_offset == end

    # A marker of an older producer epoch, and one of a fenced (older) coordinator.
    refused(ErrorCode.INVALID_PRODUCER_EPOCH,
            lambda: a.end(commit=False, coordinator_epoch=5, epoch=2))
    refused(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            lambda: a.end(commit=False, coordinator_epoch=4))
    # A transactional batch of an older epoch (a zombie).
    zombie = Producer(log, A, epoch=2)
    refused(ErrorCode.INVALID_PRODUCER_EPOCH, zombie.send)
    # A non-transactional batch while the producer's transaction is open.
    a.transactional = False
    refused(ErrorCode.INVALID_TXN_STATE, a.send)
    # Clients may not write control batches at all.
    refused(ErrorCode.INVALID_RECORD,
            lambda: a.end(commit=True, coordinator_epoch=5, origin=AppendOrigin.CLIENT))
    assert log.has_ongoing_transaction(A, 3)
    # The right coordinator epoch (or a newer one) ends it.
    a.end(commit=False, coordinator_epoch=6)
    assert not log.has_ongoing_transaction(A, 3)
    assert producer_summary(log) == [(A, 3, 3, 6, -1)]


def test_a_marker_without_a_transaction_is_written_but_not_indexed(open_log) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    a = Producer(log, A)
    offset = a.end(commit=False, coordinator_epoch=2)
    committed(log)
    assert offset == 0 and log.log_end_offset == 1
    assert txn_index_entries(log) == []
    assert log.last_stable_offset == 1
    assert producer_summary(log) == [(A, 0, -1, 2, -1)]


def test_a_new_epoch_continues_the_open_transaction_until_its_marker(open_log) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    a = Producer(log, A)
    a.send()
    bumped = Producer(log, A, epoch=1)
    bumped.send()
    committed(log)
    assert log.last_stable_offset == 0
    assert log.has_ongoing_transaction(A, 1) and not log.has_ongoing_transaction(A, 0)
    bumped.end(commit=False)
    committed(log)
    assert txn_index_entries(log) == [AbortedTxn(A, 0, 4, 5)]


# -- the txn index across segments -------------------------------------------------------------
def write_transactions(log: Log, rounds: int = 10) -> None:
    """Two interleaved transactional producers, every other transaction aborted, over many
    segments; A's last transaction stays open."""
    a, b = Producer(log, A), Producer(log, B)
    for index in range(rounds):
        a.send()
        b.send(3)
        a.send(1)
        b.end(commit=index % 2 == 0)
        a.end(commit=index % 3 == 0)
    a.send()
    committed(log)


def test_the_txn_index_lives_with_the_marker_segments(open_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    write_transactions(log)
    segments = log.log_segments()
    assert len(segments) > 3
    entries = txn_index_entries(log)
    assert len(entries) == 5 + 6  # B aborts odd rounds, A all but rounds 0, 3, 6, 9
    for segment in segments:
        on_disk = read_txn_index_file(segment.txn_index.path) \
            if segment.txn_index.path.exists() else []
        assert on_disk == list(segment.txn_index.entries)
        for txn in on_disk:  # each entry sits in the segment holding its marker
            assert segment.base_offset <= txn.last_offset
    # Kafka's LSO of an entry: the first offset of another producer's open transaction (A's,
    # begun before B's marker), else the offset after the marker.
    for txn in entries:
        assert txn.first_offset < txn.last_offset
        assert txn.last_stable_offset <= txn.last_offset + 1
    assert any(t.last_stable_offset < t.first_offset for t in entries)
    # A window: entries whose marker is at/after the start and that begin before the end.
    start, upper = entries[3].last_offset, entries[6].first_offset + 1
    expected = [t for t in entries if t.last_offset >= start and t.first_offset < upper]
    assert log.collect_aborted_transactions(start, upper) == expected
    assert log.collect_aborted_transactions(log.log_end_offset, log.log_end_offset + 1) == []


def test_retention_and_truncation_take_the_txn_index_along(open_log, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    write_transactions(log)
    entries = txn_index_entries(log)
    cut = entries[-2].last_offset  # truncate just before the second-to-last abort marker
    log.truncate_to(cut)
    assert txn_index_entries(log) == entries[:-2]
    assert max(t.last_offset for t in txn_index_entries(log)) < cut
    # The transaction whose marker went is open again.
    assert log.producer_state.first_unstable_offset is not None
    assert log.producer_state.first_unstable_offset <= entries[-2].first_offset
    # Deleting old segments renames their txn index with them, then removes it.
    first = log.log_segments()[0]
    path = first.txn_index.path
    had_file = path.exists()
    log.delete_records_before(log.log_segments()[2].base_offset)
    if had_file:
        assert not path.exists() and path.with_name(path.name + ".deleted").exists()
    log.run_pending_deletes(clock() + 10 * 60_000)
    assert not path.with_name(path.name + ".deleted").exists()


# -- snapshots and recovery --------------------------------------------------------------------
def test_a_clean_reopen_restores_open_transactions_from_the_snapshot(
        open_log, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    write_transactions(log)
    c = Producer(log, C)
    c.send()
    before = (producer_summary(log), log.last_stable_offset, txn_index_entries(log))
    end, hw = log.log_end_offset, log.high_watermark
    log.close()
    replayed = []
    original = ProducerStateManager.update

    def counting(self: ProducerStateManager, header, marker=None):  # type: ignore[no-untyped-def]
        replayed.append(header.base_offset)
        return original(self, header, marker)

    monkeypatch.setattr(ProducerStateManager, "update", counting)
    reopened = open_log(high_watermark=hw)
    monkeypatch.undo()
    assert replayed == []  # nothing replayed: the snapshot holds it all
    assert reopened.log_end_offset == end
    assert (producer_summary(reopened), reopened.last_stable_offset,
            txn_index_entries(reopened)) == before
    assert reopened.has_ongoing_transaction(A, 0) and reopened.has_ongoing_transaction(C, 0)


def test_recovery_rebuilds_txn_indexes_and_open_transactions(open_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    write_transactions(log)
    before = (producer_summary(log), txn_index_entries(log))
    end, hw = log.log_end_offset, log.high_watermark
    lso = log.last_stable_offset
    log.close_handlers()  # a crash: no clean-close snapshot
    logs_dir = tmp_path / "txn-0"
    for path in logs_dir.iterdir():
        if path.name.endswith((".txnindex", ".snapshot")):
            path.unlink()
    reopened = open_log(clean=False, recovery_point=0, high_watermark=hw)
    assert reopened.log_end_offset == end
    assert (producer_summary(reopened), txn_index_entries(reopened)) == before
    assert reopened.last_stable_offset == lso
    assert any(p.name.endswith(".txnindex") for p in logs_dir.iterdir())


def test_recovery_from_a_snapshot_rewrites_only_the_recovered_range(open_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    write_transactions(log)
    before = txn_index_entries(log)
    end, hw = log.log_end_offset, log.high_watermark
    recovery_point = log.log_segments()[-2].base_offset
    log.close_handlers()
    # The unflushed tail lost its txn index entries (written, never fsynced).
    for segment_path in sorted((tmp_path / "txn-0").glob("*.txnindex"))[-2:]:
        segment_path.unlink()
    reopened = open_log(clean=False, recovery_point=recovery_point, high_watermark=hw)
    assert reopened.log_end_offset == end
    assert txn_index_entries(reopened) == before


def test_snapshot_entries_carry_coordinator_epoch_and_open_transaction(open_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from odradek.storage.producer_state import read_snapshot_file

    log = open_log()
    a = Producer(log, A)
    a.send()
    a.end(commit=True, coordinator_epoch=7)
    first, _ = a.send()
    log.close()
    entries = read_snapshot_file(max((tmp_path / "txn-0").glob("*.snapshot")))
    assert {(e.producer_id, e.coordinator_epoch, e.current_txn_first_offset)
            for e in entries} == {(A, 7, first)}


# -- followers ---------------------------------------------------------------------------------
def test_a_follower_has_the_leaders_lso_and_txn_index(open_log) -> None:  # type: ignore[no-untyped-def]
    leader = open_log("leader-0")
    follower = open_log("follower-0")
    write_transactions(leader, rounds=4)
    data = b"".join(segment.read(segment.base_offset, 1 << 30, segment.size, True).read_bytes()
                    for segment in leader.log_segments())
    for position, header in iter_batches(data):
        follower.append_as_follower(data[position:position + header.size])
        # The follower takes the leader's HW one batch behind: its LSO never runs ahead.
        follower.update_high_watermark(header.base_offset)
        assert follower.last_stable_offset <= follower.high_watermark
    follower.update_high_watermark(leader.high_watermark)
    assert follower.last_stable_offset == leader.last_stable_offset
    assert txn_index_entries(follower) == txn_index_entries(leader)
    assert producer_summary(follower) == producer_summary(leader)


# -- expiry ------------------------------------------------------------------------------------
def test_expiry_spares_producers_with_an_open_transaction(open_log, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    log = open_log()
    a, b = Producer(log, A), Producer(log, B)
    idle = Producer(log, C, transactional=False)
    a.send()
    b.send()
    b.end(commit=True)
    idle.send()
    clock.advance(1000)
    assert log.remove_expired_producers(clock(), expiration_ms=1000) == 2
    assert [p.producer_id for p in log.active_producers()] == [A]
    assert log.has_ongoing_transaction(A, 0)


def test_the_log_manager_expires_producers_on_its_check_interval(tmp_path: Path,
                                                                 clock: FakeClock) -> None:
    from odradek.storage import LogManager

    with LogManager([tmp_path / "data"], clock=clock, producer_id_expiration_ms=5000,
                    producer_id_expiration_check_interval_ms=2000) as manager:
        log = manager.get_or_create_log("t", 0)
        Producer(log, C, transactional=False).send()
        clock.advance(1999)
        manager.tick()
        assert len(log.active_producers()) == 1  # the check has not run yet
        clock.advance(1)
        manager.tick()
        assert len(log.active_producers()) == 1  # ran: idle 2000 ms < 5000 ms
        clock.advance(4000)
        manager.tick()
        assert log.active_producers() == []
