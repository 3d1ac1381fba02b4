"""The transaction coordinator's state machine over a real `__transaction_state` log on a
manual clock: InitProducerId (epoch bumps, fencing, KIP-360, exhaustion), AddPartitions,
EndTxn with markers then the Complete state, verification (KIP-890), reload with markers
resumed, the abort of timed-out transactions and the expiration of idle ids."""

from __future__ import annotations

from group_harness import run, settle
from txn_harness import TEST_CONFIG, TxnHarness

from odradek.coordinator.transaction_log import LoadedTransactions
from odradek.coordinator.transaction_metadata import SHORT_MAX, TransactionState
from odradek.protocol.errors import ErrorCode
from odradek.protocol.types import TopicPartition

S = TransactionState
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TIMEOUT_MS = 60_000


def replayed(h: TxnHarness, partition: int = 0) -> LoadedTransactions:
    return h.coordinator._replay(h.logs[partition])


async def begin(h: TxnHarness, tid: str = "tx", partitions=(TP0, TP1)) -> tuple[int, int]:
    init = await h.coordinator.init_producer_id(tid, TIMEOUT_MS)
    assert init.error == ErrorCode.NONE
    error = await h.coordinator.add_partitions(tid, init.producer_id, init.producer_epoch,
                                               partitions)
    assert error == ErrorCode.NONE
    return init.producer_id, init.producer_epoch


def state_of(h: TxnHarness, tid: str = "tx"):
    error, md = h.coordinator.describe(tid)
    assert error == ErrorCode.NONE
    return md


def test_init_producer_id_creates_then_bumps_the_epoch(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        first = await h.coordinator.init_producer_id("tx", TIMEOUT_MS)
        assert (first.error, first.producer_id, first.producer_epoch) == (ErrorCode.NONE, 1000, 0)
        second = await h.coordinator.init_producer_id("tx", TIMEOUT_MS)
        assert (second.producer_id, second.producer_epoch) == (1000, 1)
        assert replayed(h).values["tx"].producer_epoch == 1
        assert state_of(h).state == S.EMPTY
        # Bad input
        bad = await h.coordinator.init_producer_id("tx", TEST_CONFIG.transaction_max_timeout_ms + 1)
        assert bad.error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await h.coordinator.init_producer_id("tx", 0)).error == \
            ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await h.coordinator.init_producer_id("", TIMEOUT_MS)).error == \
            ErrorCode.INVALID_REQUEST
        await h.close()

    run(scenario())


def test_commit_writes_prepare_markers_then_complete(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        pid, epoch = await begin(h)
        md = state_of(h)
        assert md.state == S.ONGOING and md.topic_partitions == {TP0, TP1}
        assert md.txn_start_timestamp == h.clock.time_ms()
        # Adding what is there already writes nothing.
        records_before = replayed(h).records
        assert await h.coordinator.add_partitions("tx", pid, epoch, [TP0]) == ErrorCode.NONE
        assert replayed(h).records == records_before
        h.marker_errors[TP1] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # retried until written
        assert await h.coordinator.end_transaction("tx", pid, epoch, commit=True) == \
            ErrorCode.NONE
        await settle()
        assert md.state == S.PREPARE_COMMIT and md.pending_state == S.COMPLETE_COMMIT
        assert replayed(h).values["tx"].transaction_status == S.PREPARE_COMMIT.id
        first = h.markers[0]
        assert (first.producer_id, first.producer_epoch, first.commit,
                first.coordinator_epoch) == (pid, epoch, True, 0)
        assert set(first.partitions) == {TP0, TP1}
        # Requests while the markers are being written
        assert (await h.coordinator.init_producer_id("tx", TIMEOUT_MS)).error == \
            ErrorCode.CONCURRENT_TRANSACTIONS
        assert await h.coordinator.end_transaction("tx", pid, epoch, True) == \
            ErrorCode.CONCURRENT_TRANSACTIONS
        # (the pending Complete answers before the state does, as in Kafka)
        assert await h.coordinator.end_transaction("tx", pid, epoch, False) == \
            ErrorCode.CONCURRENT_TRANSACTIONS
        del h.marker_errors[TP1]
        await h.advance(100)
        assert h.markers[-1].partitions == (TP1,)
        assert md.state == S.COMPLETE_COMMIT and md.pending_state is None
        assert md.topic_partitions == set()
        value = replayed(h).values["tx"]
        assert value.transaction_status == S.COMPLETE_COMMIT.id
        assert value.transaction_partitions == []
        # A retried EndTxn(commit) succeeds; an abort now is invalid.
        assert await h.coordinator.end_transaction("tx", pid, epoch, True) == ErrorCode.NONE
        assert await h.coordinator.end_transaction("tx", pid, epoch, False) == \
            ErrorCode.INVALID_TXN_STATE
        await h.close()

    run(scenario())


def test_end_txn_errors(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        assert await h.coordinator.end_transaction("nobody", 1, 0, True) == \
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        init = await h.coordinator.init_producer_id("tx", TIMEOUT_MS)
        pid, epoch = init.producer_id, init.producer_epoch
        # Empty: nothing to end
        assert await h.coordinator.end_transaction("tx", pid, epoch, True) == \
            ErrorCode.INVALID_TXN_STATE
        assert await h.coordinator.add_partitions("tx", pid, epoch, [TP0]) == ErrorCode.NONE
        assert await h.coordinator.end_transaction("tx", pid + 1, epoch, True) == \
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await h.coordinator.end_transaction("tx", pid, epoch + 1, True) == \
            ErrorCode.PRODUCER_FENCED
        assert await h.coordinator.add_partitions("tx", pid, epoch + 1, [TP1]) == \
            ErrorCode.PRODUCER_FENCED
        assert await h.coordinator.add_partitions("tx", pid + 1, epoch, [TP1]) == \
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert state_of(h).state == S.ONGOING
        await h.close()

    run(scenario())


def test_a_new_producer_fences_the_ongoing_transaction(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        pid, epoch = await begin(h)
        # The second producer's InitProducerId aborts the open transaction with a bumped
        # epoch and asks it to retry.
        again = await h.coordinator.init_producer_id("tx", TIMEOUT_MS)
        assert again.error == ErrorCode.CONCURRENT_TRANSACTIONS
        await settle()
        md = state_of(h)
        assert md.state == S.COMPLETE_ABORT and md.producer_epoch == epoch + 1
        aborts = [r for r in h.markers if not r.commit]
        assert aborts and aborts[0].producer_epoch == epoch + 1
        retried = await h.coordinator.init_producer_id("tx", TIMEOUT_MS)
        assert (retried.error, retried.producer_id, retried.producer_epoch) == \
            (ErrorCode.NONE, pid, epoch + 2)
        # The zombie is fenced.
        assert await h.coordinator.add_partitions("tx", pid, epoch, [TP0]) == \
            ErrorCode.PRODUCER_FENCED
        assert await h.coordinator.end_transaction("tx", pid, epoch, True) == \
            ErrorCode.PRODUCER_FENCED
        await h.close()

    run(scenario())


def test_kip360_recovery_and_epoch_exhaustion(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        init = await h.coordinator.init_producer_id("tx", TIMEOUT_MS)
        pid, epoch = init.producer_id, init.producer_epoch
        # A producer recovering from an abortable error bumps its own epoch.
        bumped = await h.coordinator.init_producer_id("tx", TIMEOUT_MS, (pid, epoch))
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == \
            (ErrorCode.NONE, pid, epoch + 1)
        # Its retry (the answer was lost) gets the same epoch back.
        retry = await h.coordinator.init_producer_id("tx", TIMEOUT_MS, (pid, epoch))
        assert (retry.error, retry.producer_epoch) == (ErrorCode.NONE, epoch + 1)
        # An older epoch, or another producer id, is fenced.
        assert (await h.coordinator.init_producer_id("tx", TIMEOUT_MS, (pid, 7))).error == \
            ErrorCode.PRODUCER_FENCED
        assert (await h.coordinator.init_producer_id("tx", TIMEOUT_MS, (pid + 5, 0))).error \
            == ErrorCode.PRODUCER_FENCED
        # An exhausted epoch rotates the producer id.
        md = state_of(h)
        md.producer_epoch = SHORT_MAX - 1
        rotated = await h.coordinator.init_producer_id("tx", TIMEOUT_MS)
        assert rotated.error == ErrorCode.NONE
        assert rotated.producer_id != pid and rotated.producer_epoch == 0
        assert md.last_producer_id == pid
        await h.close()

    run(scenario())


def test_verify_partitions(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        pid, epoch = await begin(h, partitions=[TP0])
        other = TopicPartition("t", 9)
        assert h.coordinator.verify_partitions("tx", pid, epoch, [TP0, other]) == {
            TP0: ErrorCode.NONE, other: ErrorCode.TRANSACTION_ABORTABLE}
        assert h.coordinator.verify_partitions("tx", pid, epoch + 1, [TP0]) == {
            TP0: ErrorCode.PRODUCER_FENCED}
        assert h.coordinator.verify_partitions("none", pid, epoch, [TP0]) == {
            TP0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        h.marker_errors[TP0] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await h.coordinator.end_transaction("tx", pid, epoch, False) == ErrorCode.NONE
        assert h.coordinator.verify_partitions("tx", pid, epoch, [TP0]) == {
            TP0: ErrorCode.CONCURRENT_TRANSACTIONS}
        h.marker_errors.clear()
        await h.advance(100)
        # A late write after the transaction completed cannot join it (KIP-890).
        assert h.coordinator.verify_partitions("tx", pid, epoch, [TP0]) == {
            TP0: ErrorCode.TRANSACTION_ABORTABLE}
        await h.close()

    run(scenario())


def test_reload_resumes_markers_of_prepared_transactions(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        pid, epoch = await begin(h)
        h.marker_errors[TP0] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        h.marker_errors[TP1] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await h.coordinator.end_transaction("tx", pid, epoch, True) == ErrorCode.NONE
        await settle()
        # The coordinator moves (here: restarts at a new coordinator epoch) before any marker
        # is written.
        h.marker_errors.clear()
        h.markers.clear()
        await h.restart(coordinator_epoch=3)
        await settle()
        assert h.markers and h.markers[0].coordinator_epoch == 3 and h.markers[0].commit
        assert set(h.markers[0].partitions) == {TP0, TP1}
        md = state_of(h)
        assert md.state == S.COMPLETE_COMMIT and (md.producer_id, md.producer_epoch) == \
            (pid, epoch)
        await h.close()

    run(scenario())


def test_timed_out_transactions_are_aborted_with_an_epoch_bump(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        pid, epoch = await begin(h)
        await h.advance(TEST_CONFIG.abort_timed_out_interval_ms)
        assert state_of(h).state == S.ONGOING  # not yet past its timeout
        await h.advance(TIMEOUT_MS)
        md = state_of(h)
        assert md.state == S.COMPLETE_ABORT and md.producer_epoch == epoch + 1
        assert [r.commit for r in h.markers] == [False]
        assert await h.coordinator.end_transaction("tx", pid, epoch, True) == \
            ErrorCode.PRODUCER_FENCED
        await h.close()

    run(scenario())


def test_idle_transactional_ids_expire_with_a_tombstone(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        await h.coordinator.init_producer_id("idle", TIMEOUT_MS)
        await begin(h, "busy")
        await h.advance(TEST_CONFIG.transactional_id_expiration_ms + 60_000)
        assert h.coordinator.describe("idle")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert "idle" not in replayed(h).values
        # "busy" was aborted at its timeout, then expired too once idle long enough.
        error, listed = h.coordinator.describe("busy")
        assert error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND or \
            listed.state == S.COMPLETE_ABORT
        await h.close()

    run(scenario())


def test_list_transactions_filters(tmp_path):
    async def scenario():
        h = await TxnHarness(tmp_path).start()
        pid, _ = await begin(h, "a")
        await h.coordinator.init_producer_id("b", TIMEOUT_MS)
        error, unknown, listed = h.coordinator.list_transactions([], [])
        assert error == ErrorCode.NONE and unknown == []
        assert {(t.transactional_id, t.state) for t in listed} == {("a", "Ongoing"),
                                                                   ("b", "Empty")}
        _, unknown, listed = h.coordinator.list_transactions(["Ongoing", "Bogus"], [])
        assert unknown == ["Bogus"] and [t.transactional_id for t in listed] == ["a"]
        _, _, listed = h.coordinator.list_transactions([], [pid])
        assert [t.transactional_id for t in listed] == ["a"]
        await h.advance(5_000)
        _, _, listed = h.coordinator.list_transactions(["Ongoing"], [], 1_000)
        assert [t.transactional_id for t in listed] == ["a"]
        _, _, listed = h.coordinator.list_transactions(["Ongoing"], [], 50_000)
        assert listed == []
        await h.close()

    run(scenario())


def test_partitions_not_owned_answer_not_coordinator(tmp_path):
    async def scenario():
        h = TxnHarness(tmp_path, partitions=2)
        h.coordinator.start()
        await h.coordinator.elect(0, h.logs[0], 0)
        tid = next(t for t in (f"id-{i}" for i in range(100))
                   if h.coordinator.partition_for(t) == 1)
        assert (await h.coordinator.init_producer_id(tid, TIMEOUT_MS)).error == \
            ErrorCode.NOT_COORDINATOR
        assert h.coordinator.describe(tid)[0] == ErrorCode.NOT_COORDINATOR
        await h.close()

    run(scenario())
