"""Transactional offset commits (TxnOffsetCommit): pending per producer until the transaction's
marker, visible on COMMIT only, UNSTABLE_OFFSET_COMMIT for fetches requiring stable offsets,
the records in __consumer_offsets and their replay with the markers."""

from __future__ import annotations

import asyncio

from group_harness import Harness, assignment, eventually, run, settle

from odradek.coordinator import OffsetAndMetadata, TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    NO_PRODUCER_ID,
    build_control_batch,
    iter_batches,
)
from odradek.storage import AppendOrigin

PID = 4000
EPOCH = 3
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


async def txn_commit(h: Harness, group: str, offsets: dict[TopicPartition, int], *,
                     producer_id: int = PID, producer_epoch: int = EPOCH, member_id: str = "",
                     generation: int = -1, instance: str | None = None,
                     metadata: str = "") -> dict[TopicPartition, ErrorCode]:
    now = h.time_ms()
    return await h.coordinator.txn_offset_commit(
        group, "txn-app", producer_id, producer_epoch, member_id, generation, instance,
        {tp: OffsetAndMetadata(offset, metadata=metadata, commit_timestamp=now)
         for tp, offset in offsets.items()})


def ok(*tps: TopicPartition) -> dict[TopicPartition, ErrorCode]:
    return dict.fromkeys(tps, ErrorCode.NONE)


def write_marker(h: Harness, producer_id: int, commit: bool, partition: int = 0) -> None:
    """What the transaction coordinator does: the marker appended (and committed) in the
    offsets partition."""
    log = h.logs[partition]
    log.append_as_leader(build_control_batch(producer_id, EPOCH, commit, coordinator_epoch=1,
                                             timestamp=h.time_ms()),
                         leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    log.maybe_increment_high_watermark(log.log_end_offset)


async def complete(h: Harness, producer_id: int, commit: bool, partition: int = 0) -> None:
    write_marker(h, producer_id, commit, partition)
    assert h.coordinator.on_transaction_completed(partition, producer_id, commit) == \
        ErrorCode.NONE
    await settle()


def stable(h: Harness, group: str, *tps: TopicPartition) -> dict[TopicPartition, object]:
    """OffsetFetch requiring stable offsets: the offset, or the unstable partition's error."""
    error, offsets = h.coordinator.fetch_offsets(group, list(tps), require_stable=True)
    assert error == ErrorCode.NONE
    unstable = h.coordinator.unstable_partitions(group, tps)
    return {tp: ErrorCode.UNSTABLE_OFFSET_COMMIT if tp in unstable
            else (offsets[tp].offset if offsets[tp] else None) for tp in tps}


def test_offsets_are_visible_only_once_the_transaction_commits(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        assert await txn_commit(h, "app", {T0: 10, T1: 20}) == ok(T0, T1)
        # Written, but pending under the producer: not visible, not even to listings.
        assert h.committed("app") == {}
        assert h.coordinator.fetch_offsets("app", [T0]) == (ErrorCode.NONE, {T0: None})
        assert stable(h, "app", T0, T1) == dict.fromkeys((T0, T1),
                                                         ErrorCode.UNSTABLE_OFFSET_COMMIT)
        # A group that exists only through a transaction's offsets is a simple group.
        assert h.state("app") == "Empty"
        await complete(h, PID, commit=True)
        assert h.committed("app") == {("t", 0): 10, ("t", 1): 20}
        assert stable(h, "app", T0, T1) == {T0: 10, T1: 20}
        assert h.manager.txn_groups == {}
        await h.close()

    run(scenario())


def test_an_aborted_transaction_leaves_the_committed_offsets(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        assert await h.commit("app", {("t", 0): 5}) == ok(T0)
        assert await txn_commit(h, "app", {T0: 10}) == ok(T0)
        assert h.committed("app") == {("t", 0): 5}
        assert stable(h, "app", T0) == {T0: ErrorCode.UNSTABLE_OFFSET_COMMIT}
        await complete(h, PID, commit=False)
        assert h.committed("app") == {("t", 0): 5}
        assert stable(h, "app", T0) == {T0: 5}
        # Another producer's marker, or a second one, changes nothing.
        assert h.coordinator.on_transaction_completed(0, PID, True) == ErrorCode.NONE
        assert h.coordinator.on_transaction_completed(0, PID + 1, True) == ErrorCode.NONE
        assert h.committed("app") == {("t", 0): 5}
        await h.close()

    run(scenario())


def test_the_newer_record_wins_between_transactional_and_plain_commits(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        # A plain commit written after the transaction's offset stays (Kafka compares the
        # records' offsets in the log, as compaction would keep the newer one).
        assert await txn_commit(h, "app", {T0: 10, T1: 11}) == ok(T0, T1)
        assert await h.commit("app", {("t", 0): 7}) == ok(T0)
        assert h.committed("app") == {("t", 0): 7}  # plain commits are visible at once
        await complete(h, PID, commit=True)
        assert h.committed("app") == {("t", 0): 7, ("t", 1): 11}
        # A transaction's offset written after a plain commit replaces it.
        assert await h.commit("app", {("t", 1): 12}) == ok(T1)
        assert await txn_commit(h, "app", {T1: 30}, producer_id=PID + 1) == ok(T1)
        await complete(h, PID + 1, commit=True)
        assert h.committed("app") == {("t", 0): 7, ("t", 1): 30}
        await h.close()

    run(scenario())


def test_transactional_batches_carry_the_producer(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        await h.commit("app", {("t", 0): 1})
        await txn_commit(h, "app", {T0: 2})
        log = h.logs[0]
        data = log.read_records(log.log_start_offset, 1 << 20)
        plain, txn = [header for _, header in iter_batches(data)]
        assert (plain.producer_id, plain.is_transactional) == (NO_PRODUCER_ID, False)
        # As Kafka's group coordinator writes them: producer id and epoch, sequence 0.
        assert (txn.producer_id, txn.producer_epoch, txn.base_sequence,
                txn.is_transactional, txn.is_control) == (PID, EPOCH, 0, True, False)
        await h.close()

    run(scenario())


def test_the_marker_completes_behind_the_writes_in_flight(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        h.hold_commits = True
        commit = asyncio.ensure_future(txn_commit(h, "app", {T0: 10}))
        await eventually(lambda: h.held_commits == 1)
        # Being written: not stable either.
        assert stable(h, "app", T0) == {T0: ErrorCode.UNSTABLE_OFFSET_COMMIT}
        # The marker's completion is reported before the commit's own write is applied: it
        # waits for it rather than finding nothing to complete.
        assert h.coordinator.on_transaction_completed(0, PID, True) == ErrorCode.NONE
        assert h.committed("app") == {}
        h.release_commits()
        assert await commit == ok(T0)
        assert h.committed("app") == {("t", 0): 10}
        assert stable(h, "app", T0) == {T0: 10}
        await h.close()

    run(scenario())


def test_failed_writes_leave_nothing_pending_and_producer_errors_pass_through(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        h.append_error = ErrorCode.PRODUCER_FENCED
        assert await txn_commit(h, "app", {T0: 1}) == {T0: ErrorCode.PRODUCER_FENCED}
        h.append_error = ErrorCode.NOT_ENOUGH_REPLICAS
        assert await txn_commit(h, "app", {T0: 1}) == {T0: ErrorCode.COORDINATOR_NOT_AVAILABLE}
        h.append_error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await txn_commit(h, "app", {T0: 1}) == {T0: ErrorCode.NOT_COORDINATOR}
        h.append_error = None
        assert stable(h, "app", T0) == {T0: None}
        group = h.manager.get_group("app")
        assert not group.pending_txn_offsets and not group.txn_offsets_in_flight
        assert h.manager.txn_groups == {}
        # Metadata larger than offset.metadata.max.bytes is refused per partition.
        assert await txn_commit(h, "app", {T0: 1}, metadata="x" * 5000) == {
            T0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
        await h.close()

    run(scenario())


def test_member_and_generation_checks(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        assert await txn_commit(h, "", {T0: 1}) == {T0: ErrorCode.INVALID_GROUP_ID}
        # A generation for a group that does not exist comes from a stale member.
        assert await txn_commit(h, "g", {T0: 1}, member_id="m", generation=2) == {
            T0: ErrorCode.ILLEGAL_GENERATION}
        a = await h.join_new(client_id="a")
        # Completing the rebalance does not stop transactional commits (Kafka does not
        # check the group's state for them).
        assert await txn_commit(h, "g", {T0: 1}, member_id=a.member_id,
                                generation=a.generation_id) == ok(T0)
        await h.sync(a, assignments={a.member_id: assignment(("t", 0))})
        assert await txn_commit(h, "g", {T0: 2}, member_id=a.member_id,
                                generation=a.generation_id) == ok(T0)
        assert await txn_commit(h, "g", {T0: 3}, member_id=a.member_id, generation=9) == {
            T0: ErrorCode.ILLEGAL_GENERATION}
        assert await txn_commit(h, "g", {T0: 3}, member_id="intruder", generation=1) == {
            T0: ErrorCode.UNKNOWN_MEMBER_ID}
        # TxnOffsetCommit v0-2 carry no member: accepted into a live group.
        assert await txn_commit(h, "g", {T0: 4}) == ok(T0)
        # A static member: its instance id must map to its member id.
        s = await h.join_new("s", instance="i-1", client_id="s")
        await h.sync(s, "s", instance="i-1")
        assert await txn_commit(h, "s", {T0: 1}, member_id=s.member_id,
                                generation=s.generation_id, instance="i-1") == ok(T0)
        assert await txn_commit(h, "s", {T0: 1}, member_id="other",
                                generation=s.generation_id, instance="i-1") == {
            T0: ErrorCode.FENCED_INSTANCE_ID}
        assert await txn_commit(h, "s", {T0: 1}, member_id=s.member_id,
                                generation=s.generation_id, instance="i-2") == {
            T0: ErrorCode.UNKNOWN_MEMBER_ID}
        await complete(h, PID, commit=True)
        assert h.committed("g") == {("t", 0): 4}
        await h.close()

    run(scenario())


def test_coordinator_errors(tmp_path):
    async def scenario():
        h = await Harness(tmp_path, partitions=2, owned=[0]).start()
        other = next(g for g in (f"g{i}" for i in range(100))
                     if h.manager.partition_for(g) == 1)
        assert await txn_commit(h, other, {T0: 1}) == {T0: ErrorCode.NOT_COORDINATOR}
        assert h.coordinator.on_transaction_completed(1, PID, True) == \
            ErrorCode.NOT_COORDINATOR
        h.coordinator.resign(0)
        assert h.coordinator.on_transaction_completed(0, PID, True) == \
            ErrorCode.NOT_COORDINATOR
        await h.close()

    run(scenario())


def test_deleted_offsets_take_the_transactions_offsets_with_them(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        assert await txn_commit(h, "app", {T0: 10, T1: 11}) == ok(T0, T1)
        assert await h.coordinator.delete_offsets("app", [T0]) == (ErrorCode.NONE, ok(T0))
        await complete(h, PID, commit=True)
        assert h.committed("app") == {("t", 1): 11}
        # A group with only an open transaction's offsets is not deleted by expiration.
        assert await txn_commit(h, "only-txn", {T0: 1}, producer_id=PID + 1) == ok(T0)
        # (app's committed offset expires, and app with it.)
        assert await h.coordinator.expire_offsets(h.time_ms() + 10 * 24 * 3600 * 1000) == 1
        assert (h.state("app"), h.state("only-txn")) == ("Dead", "Empty")
        assert stable(h, "only-txn", T0) == {T0: ErrorCode.UNSTABLE_OFFSET_COMMIT}
        assert await h.coordinator.delete_groups(["only-txn"]) == {"only-txn": ErrorCode.NONE}
        assert h.manager.txn_groups == {}
        await h.close()

    run(scenario())


def test_a_load_replays_the_markers(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        await h.commit("app", {("t", 0): 1, ("t", 1): 1})
        assert await txn_commit(h, "app", {T0: 10}, producer_id=1) == ok(T0)
        assert await txn_commit(h, "app", {T1: 20}, producer_id=2) == ok(T1)
        assert await txn_commit(h, "other", {T0: 30}, producer_id=3) == ok(T0)
        assert await txn_commit(h, "open", {T0: 40}, producer_id=4) == ok(T0)
        assert await h.commit("app", {("t", 2): 5}) == ok(TopicPartition("t", 2))
        write_marker(h, 1, commit=True)
        write_marker(h, 2, commit=False)
        write_marker(h, 3, commit=True)
        # Producer 4's marker is not written yet: its offsets stay pending after the load.
        await h.coordinator.close()

        h2 = Harness(tmp_path)
        h2.logs = h.logs
        await h2.start()
        assert h2.committed("app") == {("t", 0): 10, ("t", 1): 1, ("t", 2): 5}
        assert h2.committed("other") == {("t", 0): 30}
        assert h2.committed("open") == {}
        assert stable(h2, "open", T0) == {T0: ErrorCode.UNSTABLE_OFFSET_COMMIT}
        assert h2.manager.txn_groups == {4: {"open"}}
        await complete(h2, 4, commit=True)
        assert h2.committed("open") == {("t", 0): 40}
        await h2.close()

    run(scenario())


def test_a_load_keeps_the_newer_record_and_honours_tombstones(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        assert await txn_commit(h, "app", {T0: 10, T1: 11}, producer_id=1) == ok(T0, T1)
        assert await h.commit("app", {("t", 0): 7}) == ok(T0)  # newer than the txn's record
        assert await h.coordinator.delete_offsets("app", [T1]) == (ErrorCode.NONE, ok(T1))
        write_marker(h, 1, commit=True)
        await h.coordinator.close()

        h2 = Harness(tmp_path)
        h2.logs = h.logs
        await h2.start()
        assert h2.committed("app") == {("t", 0): 7}
        await h2.close()

    run(scenario())


def test_the_transaction_verifier_is_asked_first(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        asked = []
        verdict = ErrorCode.INVALID_TXN_STATE

        async def verify(partition, transactional_id, producer_id, producer_epoch):
            asked.append((partition, transactional_id, producer_id, producer_epoch))
            return verdict

        h.coordinator.transaction_verifier = verify
        assert await txn_commit(h, "app", {T0: 1}) == {T0: ErrorCode.INVALID_TXN_STATE}
        assert asked == [(0, "txn-app", PID, EPOCH)]
        assert h.manager.get_group("app") is None  # nothing written, no group made
        verdict = ErrorCode.NETWORK_EXCEPTION
        assert await txn_commit(h, "app", {T0: 1}) == {
            T0: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
        verdict = ErrorCode.NONE
        assert await txn_commit(h, "app", {T0: 1}) == ok(T0)
        # A request without a producer id cannot be part of a transaction.
        assert await txn_commit(h, "app", {T0: 1}, producer_id=-1) == {
            T0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        assert len(asked) == 3
        await h.close()

    run(scenario())


def test_the_coordinator_writes_the_markers_of_its_partitions(tmp_path):
    async def scenario():
        h = await Harness(tmp_path, partitions=2, owned=[0]).start()
        group = next(g for g in (f"app-{i}" for i in range(100))
                     if h.manager.partition_for(g) == 0)
        h.hold_commits = True
        commit = asyncio.ensure_future(txn_commit(h, group, {T0: 10}))
        await eventually(lambda: h.held_commits == 1)
        # WriteTxnMarkers for this offsets partition (Kafka 4.0's completeTransaction): the
        # marker is appended behind the commit's batch and completes it once committed.
        marker = asyncio.ensure_future(h.coordinator.complete_transaction(
            0, PID, EPOCH, coordinator_epoch=5, commit=True))
        await eventually(lambda: h.held_commits == 2)
        assert h.committed(group) == {}
        h.release_commits()
        assert await commit == ok(T0)
        assert await marker == ErrorCode.NONE
        assert h.committed(group) == {("t", 0): 10}
        log = h.logs[0]
        data = log.read_records(log.log_start_offset, 1 << 20)
        headers = [header for _, header in iter_batches(data)]
        assert [(x.producer_id, x.is_transactional, x.is_control) for x in headers] == [
            (PID, True, False), (PID, True, True)]
        # A partition coordinated elsewhere: the transaction coordinator retries.
        assert await h.coordinator.complete_transaction(1, PID, EPOCH, 5, True) == \
            ErrorCode.NOT_LEADER_OR_FOLLOWER
        # An abort through the same path, and a reload that replays both markers.
        h.hold_commits = False
        assert await txn_commit(h, group, {T0: 20}, producer_id=PID + 1) == ok(T0)
        assert await h.coordinator.complete_transaction(0, PID + 1, EPOCH, 5, False) == \
            ErrorCode.NONE
        assert h.committed(group) == {("t", 0): 10}
        await h.coordinator.close()
        h2 = Harness(tmp_path, partitions=2, owned=[0])
        h2.logs = h.logs
        await h2.start()
        assert h2.committed(group) == {("t", 0): 10}
        assert stable(h2, group, T0) == {T0: 10}
        await h2.close()

    run(scenario())
