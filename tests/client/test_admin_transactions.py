"""The admin client's transaction calls against a scripted peer: where each request goes and
how responses and errors map to results (the real broker: tests/cli/test_tools_transactions.py)."""

from __future__ import annotations

import pytest
from fake_broker import FakeBroker, metadata_response, requested_topics, run

from odradek.client import (
    AbortTransactionSpec,
    AdminClient,
    KafkaError,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

METADATA, FIND_COORDINATOR, WRITE_TXN_MARKERS = 3, 10, 27
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


class Peer:
    """One node leading every partition of topic "t" and coordinating every transactional id;
    `errors` queues error codes per API key."""

    def __init__(self) -> None:
        self.broker = FakeBroker(self.handle)
        self.errors: dict[int, list[int]] = {}

    def _error(self, key: int) -> int:
        queue = self.errors.get(key)
        return queue.pop(0) if queue else 0

    def handle(self, header, request):
        key, version = header.request_api_key, header.request_api_version
        host, port = self.broker.host, self.broker.port
        if key == METADATA:
            return metadata_response([(1, host, port)], {"t": {0: 1, 1: 1}},
                                     requested=requested_topics(request))
        if key == FIND_COORDINATOR:
            assert request.key_type == 1
            if version >= 4:
                return m.FindCoordinatorResponse(coordinators=[
                    m.FindCoordinatorResponse.Coordinator(key=k, node_id=1, host=host, port=port)
                    for k in request.coordinator_keys])
            return m.FindCoordinatorResponse(node_id=1, host=host, port=port)
        if key == DESCRIBE_PRODUCERS:
            error = self._error(key)
            R = m.DescribeProducersResponse
            return R(topics=[R.TopicResponse(name=t.name, partitions=[R.PartitionResponse(
                partition_index=p, error_code=error, active_producers=[] if error else [
                    R.ProducerState(producer_id=7, producer_epoch=2, last_sequence=4,
                                    last_timestamp=1000, coordinator_epoch=-1,
                                    current_txn_start_offset=10 + p)])
                for p in t.partition_indexes]) for t in request.topics])
        if key == DESCRIBE_TRANSACTIONS:
            R = m.DescribeTransactionsResponse
            states = []
            for transactional_id in request.transactional_ids:
                if transactional_id == "missing":
                    states.append(R.TransactionState(
                        transactional_id=transactional_id,
                        error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
                    continue
                states.append(R.TransactionState(
                    transactional_id=transactional_id, error_code=self._error(key),
                    transaction_state="Ongoing", transaction_timeout_ms=60000,
                    transaction_start_time_ms=5, producer_id=7, producer_epoch=2,
                    topics=[R.TopicData(topic="t", partitions=[0, 1])]))
            return R(transaction_states=states)
        if key == LIST_TRANSACTIONS:
            R = m.ListTransactionsResponse
            return R(error_code=self._error(key), transaction_states=[
                R.TransactionState(transactional_id="a", producer_id=7,
                                   transaction_state="Ongoing")])
        if key == WRITE_TXN_MARKERS:
            error = self._error(key)
            R = m.WriteTxnMarkersResponse
            return R(markers=[R.WritableTxnMarkerResult(producer_id=mk.producer_id, topics=[
                R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                    R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=error)
                    for p in t.partition_indexes]) for t in mk.topics])
                for mk in request.markers])
        return None


def _admin(peer: Peer) -> AdminClient:
    return AdminClient({"bootstrap.servers": peer.broker.address, "retry.backoff.ms": 5,
                        "default.api.timeout.ms": 5000})


def test_describe_producers_retries_a_moved_leader_and_maps_missing_values_to_none():
    async def scenario():
        peer = Peer()
        peer.errors[DESCRIBE_PRODUCERS] = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        async with peer.broker, _admin(peer) as admin:
            result = await admin.describe_producers([TopicPartition("t", 1)])
            return result, len(peer.broker.requests_of(DESCRIBE_PRODUCERS))

    result, requests = run(scenario())
    assert requests == 2
    assert result == {TopicPartition("t", 1): [ProducerState(7, 2, 4, 1000, None, 11)]}


def test_describe_producers_on_a_named_broker_does_not_retry():
    async def scenario():
        peer = Peer()
        peer.errors[DESCRIBE_PRODUCERS] = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        async with peer.broker, _admin(peer) as admin:
            return await admin.describe_producers([TopicPartition("t", 0)], broker_id=1,
                                                  raise_errors=False)

    (error,) = run(scenario()).values()
    assert isinstance(error, KafkaError) and error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_describe_transactions_asks_each_ids_coordinator():
    async def scenario():
        peer = Peer()
        peer.errors[DESCRIBE_TRANSACTIONS] = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
        async with peer.broker, _admin(peer) as admin:
            return await admin.describe_transactions(["a", "missing"], raise_errors=False)

    result = run(scenario())
    assert result["a"] == TransactionDescription(
        1, "Ongoing", 7, 2, 60000, 5, frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}))
    assert result["missing"].code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_list_transactions_by_broker_and_its_errors():
    async def scenario():
        peer = Peer()
        async with peer.broker, _admin(peer) as admin:
            listed = await admin.list_transactions_by_broker(states=["Ongoing"],
                                                             producer_ids=[7])
            peer.errors[LIST_TRANSACTIONS] = [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
            with pytest.raises(KafkaError) as failure:
                await admin.list_transactions()
            (request,) = [r for _h, r in peer.broker.requests_of(LIST_TRANSACTIONS)][:1]
            return listed, failure.value, request

    listed, error, request = run(scenario())
    assert listed == {1: [TransactionListing("a", 7, "Ongoing")]}
    assert error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert request.state_filters == ["Ongoing"] and request.producer_id_filters == [7]


def test_abort_transaction_writes_an_abort_marker_on_the_leader():
    spec = AbortTransactionSpec(TopicPartition("t", 1), 7, 2, 3)

    async def scenario():
        peer = Peer()
        peer.errors[WRITE_TXN_MARKERS] = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        async with peer.broker, _admin(peer) as admin:
            await admin.abort_transaction(spec)
            peer.errors[WRITE_TXN_MARKERS] = [ErrorCode.TRANSACTION_COORDINATOR_FENCED]
            with pytest.raises(KafkaError) as fenced:
                await admin.abort_transaction(spec)
            return [r for _h, r in peer.broker.requests_of(WRITE_TXN_MARKERS)], fenced.value

    requests, fenced = run(scenario())
    assert len(requests) == 3 and fenced.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    (marker,) = requests[0].markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result) == (7, 2, 3, False)
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("t", [1])]
