"""Hostile or confused transactional clients over real sockets: each gets Kafka's error code,
nothing is appended, and the transaction or the log is left as it was (issue 16's bad-input
cases: EndTxn with a wrong epoch, TxnOffsetCommit for a group not added to the transaction,
AddPartitionsToTxn for a nonexistent topic, control batches sent by a client)."""

from __future__ import annotations

import time

from broker_process import BrokerProcess
from raw_client import RawClient, produce_request

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import RecordBatchBuilder, build_control_batch

TXN_COORDINATOR = 1
TIMEOUT_S = 30


def _until(condition, what: str):
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _init(client: RawClient, transactional_id: str) -> tuple[int, int]:
    def found():
        resp = client.call(10, 3, m.FindCoordinatorRequest(key=transactional_id,
                                                            key_type=TXN_COORDINATOR))
        return resp.error_code == ErrorCode.NONE

    _until(found, "the transaction coordinator")

    def initialized():
        resp = client.call(22, 4, m.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        return resp if resp.error_code == ErrorCode.NONE else None

    resp = _until(initialized, "InitProducerId")
    return resp.producer_id, resp.producer_epoch


def _add_partitions(client: RawClient, transactional_id: str, pid: int, epoch: int,
                    topics: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    R = m.AddPartitionsToTxnRequest
    resp = client.call(24, 3, R(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=p)
                             for t, p in topics.items()]))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}


def _log_end(client: RawClient, topic: str) -> int:
    resp = client.call(2, 7, m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        m.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    return resp.topics[0].partitions[0].offset


def _describe(client: RawClient, transactional_id: str):
    resp = client.call(65, 0, m.DescribeTransactionsRequest(transactional_ids=[transactional_id]))
    return resp.transaction_states[0]


def test_transactional_bad_input_gets_kafkas_errors_and_appends_nothing(tmp_path):
    broker = BrokerProcess(tmp_path, overrides={
        "transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2",
    }).start()
    try:
        with RawClient(broker.host, broker.port) as client:
            client.create_topic("orders")
            pid, epoch = _init(client, "tx")

            # AddPartitionsToTxn naming a nonexistent topic: the whole request fails and
            # nothing is added.
            errors = _add_partitions(client, "tx", pid, epoch, {"orders": [0], "nope": [0]})
            assert errors == {("orders", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                              ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            assert _describe(client, "tx").transaction_state == "Empty"

            # A control batch (a COMMIT marker) produced by a client: INVALID_RECORD.
            assert _add_partitions(client, "tx", pid, epoch, {"orders": [0]}) == \
                {("orders", 0): ErrorCode.NONE}
            marker = build_control_batch(pid, epoch, True, 0, int(time.time() * 1000))
            request = produce_request("orders", 0, marker)
            request.transactional_id = "tx"
            resp = client.call(0, 9, request)
            assert resp.responses[0].partition_responses[0].error_code == \
                ErrorCode.INVALID_RECORD
            assert _log_end(client, "orders") == 0

            # A transactional batch, accepted; then EndTxn with a wrong epoch: fenced, and
            # the transaction stays open with no marker written.
            builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                         is_transactional=True)
            builder.append(0, b"k", b"v")
            request = produce_request("orders", 0, builder.build())
            request.transactional_id = "tx"
            resp = client.call(0, 9, request)
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            ended = client.call(26, 3, m.EndTxnRequest(
                transactional_id="tx", producer_id=pid, producer_epoch=epoch + 1,
                committed=True))
            assert ended.error_code == ErrorCode.PRODUCER_FENCED
            assert _describe(client, "tx").transaction_state == "Ongoing"
            assert _log_end(client, "orders") == 1  # no marker

            # TxnOffsetCommit for a group the transaction never added (no AddOffsetsToTxn):
            # the coordinator's verification (KIP-890 part 1) refuses it, and the group has
            # no offset, committed or pending.
            _until(lambda: client.call(10, 3, m.FindCoordinatorRequest(
                key="never-added", key_type=0)).error_code == ErrorCode.NONE,
                "the group coordinator")
            R = m.TxnOffsetCommitRequest
            request = R(transactional_id="tx", group_id="never-added", producer_id=pid,
                        producer_epoch=epoch, generation_id=-1, member_id="", topics=[
                            R.TxnOffsetCommitRequestTopic(name="orders", partitions=[
                                R.TxnOffsetCommitRequestPartition(partition_index=0,
                                                                  committed_offset=1)])])
            # v4+ understand TRANSACTION_ABORTABLE (KIP-890); older versions get
            # INVALID_TXN_STATE, as Kafka's AddPartitionsToTxnManager maps it back.
            for version, error in ((3, ErrorCode.INVALID_TXN_STATE),
                                   (4, ErrorCode.TRANSACTION_ABORTABLE)):
                committed = client.call(28, version, request)
                assert committed.topics[0].partitions[0].error_code == error
            fetched = client.call(9, 8, m.OffsetFetchRequest(require_stable=True, groups=[
                m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="never-added",
                                                             topics=None)]))
            assert fetched.groups[0].topics == []

            # The transaction still commits normally afterwards.
            ended = client.call(26, 3, m.EndTxnRequest(
                transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True))
            assert ended.error_code == ErrorCode.NONE
            _until(lambda: _describe(client, "tx").transaction_state == "CompleteCommit",
                   "the commit to complete")
            assert _log_end(client, "orders") == 2  # the record and its COMMIT marker
    finally:
        broker.stop()
