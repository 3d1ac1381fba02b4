"""The transaction APIs called as the network layer would, on one node's real services: the
coordinator in `__transaction_state`, markers appended to real partition logs, Produce's
KIP-890 verification."""

from __future__ import annotations

import pytest
from handler_services import NODE_ID, HandlerNode, run_with_node, until

from odradek.controller.controller import TopicSpec
from odradek.coordinator import OFFSETS_TOPIC
from odradek.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    decode_control_key,
    iter_batches,
    iter_records,
)
from odradek.server.handlers.groups import COORDINATOR_TYPE_TRANSACTION

TXN_PARTITIONS = {"transaction.state.log.num.partitions": "2"}
TIMEOUT_MS = 60_000


def overrides(**more: str) -> dict[str, str]:
    return {**TXN_PARTITIONS, **more}


async def create_topic(node: HandlerNode, name: str, partitions: int) -> None:
    (result,) = await node.controller.create_topics([TopicSpec(name, num_partitions=partitions)])
    assert result.error == ErrorCode.NONE, result.message


async def coordinator_ready(node: HandlerNode, transactional_id: str) -> None:
    resp = await node.call(node.group_apis.find_coordinator, m.FindCoordinatorRequest(
        key=transactional_id, key_type=COORDINATOR_TYPE_TRANSACTION), 3)
    assert (resp.error_code, resp.node_id) == (ErrorCode.NONE, NODE_ID)
    coordinator = node.transaction_coordinator
    await until(lambda: coordinator.coordinator_error(transactional_id) == ErrorCode.NONE,
                f"the coordinator of {transactional_id} to load its partition")


async def init(node: HandlerNode, transactional_id: str, version: int = 4,
               timeout_ms: int = TIMEOUT_MS) -> m.InitProducerIdResponse:
    return await node.call(node.producer_id_apis.init_producer_id, m.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=timeout_ms), version)


def add_request(transactional_id: str, producer_id: int, epoch: int,
                partitions: dict[str, list[int]]) -> m.AddPartitionsToTxnRequest:
    R = m.AddPartitionsToTxnRequest
    return R(v3_and_below_transactional_id=transactional_id,
             v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
             v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=p)
                                  for t, p in partitions.items()])


def add_errors(resp: m.AddPartitionsToTxnResponse) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.partition_error_code
            for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}


def transactional_batch(producer_id: int, epoch: int, sequence: int = 0) -> bytes:
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence, is_transactional=True)
    builder.append(0, b"k", b"v")
    return builder.build()


def produce_request(transactional_id: str, topic: str, index: int,
                    records: bytes) -> m.ProduceRequest:
    R = m.ProduceRequest
    return R(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[
            R.PartitionProduceData(index=index, records=records)])])


def markers_in(node: HandlerNode, topic: str, index: int) -> list[tuple[int, ControlRecordType]]:
    log = node.replica_manager.partitions[(topic, index)].log
    data = log.read(log.log_start_offset, 1 << 20).read_bytes()
    out = []
    for position, header in iter_batches(data):
        if header.is_control:
            for record in iter_records(data, position, header):
                out.append((header.producer_id, decode_control_key(record.key)))
    return out


@pytest.mark.parametrize("version", [1, 3])
def test_find_coordinator_creates_the_transaction_state_topic(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.group_apis.find_coordinator, m.FindCoordinatorRequest(
            key="txn-1", key_type=COORDINATOR_TYPE_TRANSACTION), version)
        assert (resp.error_code, resp.node_id) == (ErrorCode.NONE, NODE_ID)
        topic = node.cache.image.topics_by_name[TRANSACTION_STATE_TOPIC]
        assert len(topic.partitions) == 2
        assert OFFSETS_TOPIC not in node.cache.image.topics_by_name

    run_with_node(tmp_path, scenario, TXN_PARTITIONS)


def test_commit_writes_markers_to_every_partition(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", 2)
        await coordinator_ready(node, "tx")
        first = await init(node, "tx")
        assert (first.error_code, first.producer_epoch) == (ErrorCode.NONE, 0)
        pid, epoch = first.producer_id, first.producer_epoch
        added = await node.call(node.transaction_apis.add_partitions_to_txn,
                                add_request("tx", pid, epoch, {"orders": [0, 1]}), 3)
        assert set(add_errors(added).values()) == {ErrorCode.NONE}
        described = await node.call(node.transaction_apis.describe_transactions,
                                    m.DescribeTransactionsRequest(transactional_ids=["tx"]), 0)
        (state,) = described.transaction_states
        assert (state.error_code, state.transaction_state, state.producer_id) == \
            (ErrorCode.NONE, "Ongoing", pid)
        assert [(t.topic, t.partitions) for t in state.topics] == [("orders", [0, 1])]
        ended = await node.call(node.transaction_apis.end_txn, m.EndTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True), 3)
        assert ended.error_code == ErrorCode.NONE
        for index in (0, 1):
            await until(lambda index=index: markers_in(node, "orders", index),
                        f"the marker of orders-{index}")
            assert markers_in(node, "orders", index) == [(pid, ControlRecordType.COMMIT)]
        coordinator = node.transaction_coordinator
        await until(lambda: coordinator.describe("tx")[1].state.state_name == "CompleteCommit",
                    "CompleteCommit")
        listed = await node.call(node.transaction_apis.list_transactions,
                                 m.ListTransactionsRequest(state_filters=["CompleteCommit"]), 1)
        assert [(t.transactional_id, t.producer_id, t.transaction_state)
                for t in listed.transaction_states] == [("tx", pid, "CompleteCommit")]

    run_with_node(tmp_path, scenario, TXN_PARTITIONS)


def test_bad_input(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", 1)
        await coordinator_ready(node, "tx")
        too_long = await init(node, "tx", timeout_ms=900_001)
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        first = await init(node, "tx")
        pid, epoch = first.producer_id, first.producer_epoch
        # A nonexistent topic fails the whole request; nothing is added.
        added = await node.call(node.transaction_apis.add_partitions_to_txn,
                                add_request("tx", pid, epoch, {"orders": [0], "nope": [0]}), 3)
        assert add_errors(added) == {("orders", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                     ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert node.transaction_coordinator.describe("tx")[1].state.state_name == "Empty"
        added = await node.call(node.transaction_apis.add_partitions_to_txn,
                                add_request("tx", pid, epoch, {"orders": [0]}), 3)
        assert set(add_errors(added).values()) == {ErrorCode.NONE}
        # EndTxn with a wrong epoch: fenced (INVALID_PRODUCER_EPOCH before KIP-588's v2).
        for version, error in ((1, ErrorCode.INVALID_PRODUCER_EPOCH),
                               (3, ErrorCode.PRODUCER_FENCED)):
            ended = await node.call(node.transaction_apis.end_txn, m.EndTxnRequest(
                transactional_id="tx", producer_id=pid, producer_epoch=epoch + 1,
                committed=True), version)
            assert ended.error_code == error
        ended = await node.call(node.transaction_apis.end_txn, m.EndTxnRequest(
            transactional_id="tx", producer_id=pid + 1, producer_epoch=epoch, committed=True), 3)
        assert ended.error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert markers_in(node, "orders", 0) == []
        described = await node.call(node.transaction_apis.describe_transactions,
                                    m.DescribeTransactionsRequest(transactional_ids=["who"]), 0)
        assert described.transaction_states[0].error_code == \
            ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    run_with_node(tmp_path, scenario, TXN_PARTITIONS)


def test_add_offsets_adds_the_groups_offsets_partition(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await coordinator_ready(node, "tx")
        first = await init(node, "tx")
        resp = await node.call(node.transaction_apis.add_offsets_to_txn, m.AddOffsetsToTxnRequest(
            transactional_id="tx", producer_id=first.producer_id,
            producer_epoch=first.producer_epoch, group_id="group-1"), 3)
        assert resp.error_code == ErrorCode.NONE
        expected = node.group_coordinator.manager.partition_for("group-1")
        md = node.transaction_coordinator.describe("tx")[1]
        assert {(tp.topic, tp.partition) for tp in md.topic_partitions} == {
            (OFFSETS_TOPIC, expected)}

    run_with_node(tmp_path, scenario, TXN_PARTITIONS)


def test_write_txn_markers_appends_control_batches(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", 1)
        R = m.WriteTxnMarkersRequest
        resp = await node.call(node.transaction_apis.write_txn_markers, R(markers=[
            R.WritableTxnMarker(producer_id=77, producer_epoch=0, transaction_result=False,
                                coordinator_epoch=0, topics=[
                                    R.WritableTxnMarkerTopic(name="orders",
                                                             partition_indexes=[0, 5]),
                                    R.WritableTxnMarkerTopic(name="gone",
                                                             partition_indexes=[0])])]), 1)
        (marker,) = resp.markers
        assert marker.producer_id == 77
        assert {(t.name, p.partition_index): p.error_code for t in marker.topics
                for p in t.partitions} == {
            ("orders", 0): ErrorCode.NONE,
            ("orders", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert markers_in(node, "orders", 0) == [(77, ControlRecordType.ABORT)]

    run_with_node(tmp_path, scenario)


def test_batched_verify_only(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", 2)
        await coordinator_ready(node, "tx")
        first = await init(node, "tx")
        pid, epoch = first.producer_id, first.producer_epoch
        await node.call(node.transaction_apis.add_partitions_to_txn,
                        add_request("tx", pid, epoch, {"orders": [0]}), 3)
        R = m.AddPartitionsToTxnRequest
        resp = await node.call(node.transaction_apis.add_partitions_to_txn, R(transactions=[
            R.AddPartitionsToTxnTransaction(
                transactional_id="tx", producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[R.AddPartitionsToTxnTopic(name="orders", partitions=[0, 1])]),
            R.AddPartitionsToTxnTransaction(
                transactional_id="tx", producer_id=pid, producer_epoch=epoch + 3,
                verify_only=True,
                topics=[R.AddPartitionsToTxnTopic(name="orders", partitions=[0])])]), 4)
        assert resp.error_code == ErrorCode.NONE
        results = [{(t.name, p.partition_index): p.partition_error_code
                    for t in txn.topic_results for p in t.results_by_partition}
                   for txn in resp.results_by_transaction]
        assert results == [
            {("orders", 0): ErrorCode.NONE, ("orders", 1): ErrorCode.TRANSACTION_ABORTABLE},
            {("orders", 0): ErrorCode.PRODUCER_FENCED}]
        # verify_only added nothing
        md = node.transaction_coordinator.describe("tx")[1]
        assert {tp.partition for tp in md.topic_partitions} == {0}

    run_with_node(tmp_path, scenario, TXN_PARTITIONS)


@pytest.mark.parametrize("version, refusal", [(9, ErrorCode.INVALID_TXN_STATE),
                                              (11, ErrorCode.TRANSACTION_ABORTABLE)])
def test_produce_verifies_the_partition_is_in_the_transaction(tmp_path, version, refusal):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", 2)
        await coordinator_ready(node, "tx")
        first = await init(node, "tx")
        pid, epoch = first.producer_id, first.producer_epoch
        await node.call(node.transaction_apis.add_partitions_to_txn,
                        add_request("tx", pid, epoch, {"orders": [0]}), 3)
        ok = await node.call(node.produce_apis.produce, produce_request(
            "tx", "orders", 0, transactional_batch(pid, epoch)), version)
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        # orders-1 was never added: refused, nothing appended.
        refused = await node.call(node.produce_apis.produce, produce_request(
            "tx", "orders", 1, transactional_batch(pid, epoch)), version)
        assert refused.responses[0].partition_responses[0].error_code == refusal
        assert node.replica_manager.partitions[("orders", 1)].log.log_end_offset == 0
        # A fenced epoch
        fenced = await node.call(node.produce_apis.produce, produce_request(
            "tx", "orders", 1, transactional_batch(pid, epoch + 1)), version)
        assert fenced.responses[0].partition_responses[0].error_code == \
            ErrorCode.INVALID_PRODUCER_EPOCH

    run_with_node(tmp_path, scenario, TXN_PARTITIONS)


def test_produce_without_verification(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", 1)
        resp = await node.call(node.produce_apis.produce, produce_request(
            "tx", "orders", 0, transactional_batch(5, 0)), 9)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        assert node.replica_manager.partitions[("orders", 0)].log.log_end_offset == 1

    run_with_node(tmp_path, scenario,
                  overrides(**{"transaction.partition.verification.enable": "false"}))


def test_end_txn_v5_is_refused_without_transactions_v2(tmp_path):
    """EndTxn v5 (advertised as Kafka 4.0 does) means transactions v2, which Odradek does not
    support: refused with UNSUPPORTED_VERSION, the transaction left as it was."""
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders5", 1)
        await coordinator_ready(node, "tx5")
        first = await init(node, "tx5")
        pid, epoch = first.producer_id, first.producer_epoch
        added = await node.call(node.transaction_apis.add_partitions_to_txn,
                                add_request("tx5", pid, epoch, {"orders5": [0]}), 3)
        assert set(add_errors(added).values()) == {ErrorCode.NONE}
        ended = await node.call(node.transaction_apis.end_txn, m.EndTxnRequest(
            transactional_id="tx5", producer_id=pid, producer_epoch=epoch, committed=True), 5)
        assert ended.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert node.transaction_coordinator.describe("tx5")[1].state.state_name == "Ongoing"

    run_with_node(tmp_path, scenario, TXN_PARTITIONS)
