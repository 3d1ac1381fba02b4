"""TxnOffsetCommit (API 28) through GroupApis against the real group coordinator and replica
manager: the offsets are written into the group's __consumer_offsets partition as a
transactional batch, OffsetFetch requiring stable offsets answers UNSTABLE_OFFSET_COMMIT until
the transaction's marker is committed, and the COMMIT makes them visible."""

from __future__ import annotations

import pytest
from handler_services import HandlerNode, run_with_node
from test_group_apis import GROUP, coordinator_ready, create_topic

from odradek.coordinator import OFFSETS_TOPIC
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_control_batch, iter_batches
from odradek.storage import AppendOrigin

TC = m.TxnOffsetCommitRequest
OF = m.OffsetFetchRequest
PID = 7000
EPOCH = 2
#: These tests drive the group coordinator's side with a made-up producer; the transaction
#: coordinator's check that AddOffsetsToTxn added the group (KIP-890) is tested with real
#: producers in test_txn_bad_input and the client tests.
WITHOUT_VERIFICATION = {"transaction.partition.verification.enable": "false"}


def txn_commit_request(offsets: dict[tuple[str, int], int], *, member_id: str = "",
                       generation: int = -1) -> m.TxnOffsetCommitRequest:
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(TC.TxnOffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=4,
            committed_metadata="txn"))
    return TC(transactional_id="payments-app", group_id=GROUP, producer_id=PID,
              producer_epoch=EPOCH, generation_id=generation, member_id=member_id,
              topics=[TC.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                      for t, ps in by_topic.items()])


def errors_of(resp: m.TxnOffsetCommitResponse) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


async def fetch_stable(node: HandlerNode, version: int) -> dict[int, tuple[int, int]]:
    """OffsetFetch of orders-0..1 requiring stable offsets: partition -> (error, offset)."""
    if version >= 8:
        resp = await node.call(node.group_apis.offset_fetch, OF(require_stable=True, groups=[
            OF.OffsetFetchRequestGroup(group_id=GROUP, topics=[
                OF.OffsetFetchRequestTopics(name="orders", partition_indexes=[0, 1])])]),
            version)
        (group,) = resp.groups
        assert group.error_code == ErrorCode.NONE
        (topic,) = group.topics
    else:
        resp = await node.call(node.group_apis.offset_fetch, OF(
            group_id=GROUP, require_stable=True, topics=[
                OF.OffsetFetchRequestTopic(name="orders", partition_indexes=[0, 1])]), version)
        assert resp.error_code == ErrorCode.NONE
        (topic,) = resp.topics
    return {p.partition_index: (p.error_code, p.committed_offset) for p in topic.partitions}


def test_txn_offset_commit_is_served_at_every_version_kafka_4_0_defines(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        assert node.apis.versions[28] == (0, 5)
        assert node.apis.lookup(28, 5) == node.group_apis.txn_offset_commit

    run_with_node(tmp_path, scenario)


@pytest.mark.parametrize(("commit_version", "fetch_version"), [(0, 7), (3, 8), (5, 9)])
def test_txn_offsets_are_visible_once_the_marker_commits(tmp_path, commit_version,
                                                         fetch_version):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", partitions=2)
        await coordinator_ready(node, GROUP)
        resp = await node.call(node.group_apis.txn_offset_commit, txn_commit_request(
            {("orders", 0): 42, ("orders", 9): 1}), commit_version)
        assert errors_of(resp) == {("orders", 0): ErrorCode.NONE,
                                   ("orders", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        # The batch in the group's offsets partition is the producer's transactional batch.
        coordinator = node.group_coordinator
        partition = coordinator.manager.partition_for(GROUP)
        (offsets_log,) = [p.log for p in node.replica_manager.partitions_of([OFFSETS_TOPIC])
                          if p.index == partition]
        data = offsets_log.read_records(offsets_log.log_start_offset, 1 << 20)
        headers = [header for _, header in iter_batches(data)]
        assert [(h.producer_id, h.producer_epoch, h.is_transactional) for h in headers] == [
            (PID, EPOCH, True)]

        unstable = (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
        assert await fetch_stable(node, fetch_version) == {0: unstable, 1: (ErrorCode.NONE, -1)}

        if commit_version == 5:
            # WriteTxnMarkers as Kafka 4.0 handles an offsets partition: the group
            # coordinator writes the marker itself.
            assert await coordinator.complete_transaction(partition, PID, EPOCH, 0, True) == \
                ErrorCode.NONE
        else:
            # The marker appended by the transaction coordinator's handler, then the
            # completion.
            marker = build_control_batch(PID, EPOCH, True, coordinator_epoch=0,
                                         timestamp=coordinator.time_ms())
            await node.replica_manager.append_and_wait(OFFSETS_TOPIC, partition, marker, 5000,
                                                       origin=AppendOrigin.COORDINATOR)
            assert coordinator.on_transaction_completed(partition, PID, True) == ErrorCode.NONE
        data = offsets_log.read_records(offsets_log.log_start_offset, 1 << 20)
        assert [h.is_control for _, h in iter_batches(data)] == [False, True]
        assert await fetch_stable(node, fetch_version) == {0: (ErrorCode.NONE, 42),
                                                          1: (ErrorCode.NONE, -1)}
        error, offsets = coordinator.fetch_offsets(GROUP, None)
        assert error == ErrorCode.NONE
        (offset,) = offsets.values()
        assert (offset.offset, offset.metadata, offset.leader_epoch) == (
            42, "txn", 4 if commit_version >= 2 else -1)

    run_with_node(tmp_path, scenario, WITHOUT_VERIFICATION)


def test_txn_offset_commit_v3_checks_the_member(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", partitions=1)
        await coordinator_ready(node, GROUP)
        # v3+ name a member and generation: a group that does not exist has neither.
        resp = await node.call(node.group_apis.txn_offset_commit, txn_commit_request(
            {("orders", 0): 1}, member_id="consumer-1", generation=5), 3)
        assert errors_of(resp) == {("orders", 0): ErrorCode.ILLEGAL_GENERATION}
        # v2 cannot carry them: a transactional commit to a simple group.
        resp = await node.call(node.group_apis.txn_offset_commit, txn_commit_request(
            {("orders", 0): 1}), 2)
        assert errors_of(resp) == {("orders", 0): ErrorCode.NONE}
        # Without require_stable the fetch answers the committed offset (none yet).
        resp = await node.call(node.group_apis.offset_fetch, OF(groups=[
            OF.OffsetFetchRequestGroup(group_id=GROUP, topics=[
                OF.OffsetFetchRequestTopics(name="orders", partition_indexes=[0])])]), 8)
        (partition,) = resp.groups[0].topics[0].partitions
        assert (partition.error_code, partition.committed_offset) == (ErrorCode.NONE, -1)

    run_with_node(tmp_path, scenario, WITHOUT_VERIFICATION)
