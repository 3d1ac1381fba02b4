"""The log side of transactions over real sockets: read_committed Fetch stops at the last
stable offset and returns the aborted transactions of what it returns, a read_committed long
poll wakes when a marker moves the LSO, ListOffsets answers the LSO to read_committed, and
DescribeProducers shows the producers of a partition. Transactional batches and markers are
appended inside the broker (as the produce path and the transaction coordinator do) so the
test covers the storage and fetch paths alone."""

from __future__ import annotations

import time

import pytest
from inprocess_broker import InProcessBroker
from raw_client import RawClient, batch_offsets, fetch_request

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, build_control_batch
from odradek.server.replica_manager import ACKS_ALL
from odradek.storage.validator import AppendOrigin

TOPIC = "txn-fetch"
A, B = 5001, 5002
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
FETCH_VERSION = 12


@pytest.fixture
def broker(tmp_path):
    broker = InProcessBroker(tmp_path).start()
    with RawClient(broker.host, broker.port) as admin:
        admin.create_topic(TOPIC)
    yield broker
    broker.stop()


def append(broker: InProcessBroker, batch: bytes,
           origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    def run() -> int:
        pending = broker.broker.replica_manager.append(TOPIC, 0, batch, ACKS_ALL, origin)
        return pending.result.first_offset
    return broker.call(run)


def data(producer_id: int, sequence: int, count: int = 2, transactional: bool = True) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(now, None, b"v%d" % i) for i in range(count)], producer_id=producer_id,
                       producer_epoch=0, base_sequence=sequence, is_transactional=transactional)


def marker(producer_id: int, commit: bool, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(producer_id, 0, commit, coordinator_epoch,
                               int(time.time() * 1000))


def fetch(client: RawClient, offset: int, isolation: int, max_wait_ms: int = 0,
          correlation: bool = False):  # type: ignore[no-untyped-def]
    request = fetch_request({(TOPIC, 0): offset}, max_wait_ms=max_wait_ms)
    request.isolation_level = isolation
    if correlation:
        return client.send(1, FETCH_VERSION, request)
    return client.call(1, FETCH_VERSION, request).responses[0].partitions[0]


def test_read_committed_fetch_returns_aborted_transactions(broker):
    assert append(broker, data(A, 0)) == 0  # A: 0-1
    assert append(broker, data(B, 0, 3)) == 2  # B: 2-4
    assert append(broker, data(A, 2, 1)) == 5  # A: 5
    with RawClient(broker.host, broker.port) as client:
        part = fetch(client, 0, READ_COMMITTED)
        assert (part.error_code, part.high_watermark, part.last_stable_offset) == (0, 6, 0)
        assert bytes(part.records or b"") == b"" and part.aborted_transactions == []
        uncommitted = fetch(client, 0, READ_UNCOMMITTED)
        assert batch_offsets(bytes(uncommitted.records)) == [(0, 1), (2, 4), (5, 5)]
        assert uncommitted.aborted_transactions is None  # null for read_uncommitted

        assert append(broker, marker(A, commit=False), AppendOrigin.COORDINATOR) == 6
        part = fetch(client, 0, READ_COMMITTED)
        # B's transaction (from 2) is still open: only A's first batch is stable.
        assert part.last_stable_offset == 2
        assert batch_offsets(bytes(part.records)) == [(0, 1)]
        assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(A, 0)]

        assert append(broker, marker(B, commit=True), AppendOrigin.COORDINATOR) == 7
        part = fetch(client, 0, READ_COMMITTED)
        assert (part.high_watermark, part.last_stable_offset) == (8, 8)
        assert batch_offsets(bytes(part.records)) == [(0, 1), (2, 4), (5, 5), (6, 6), (7, 7)]
        assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(A, 0)]
        # From after A's abort marker there is nothing to drop.
        part = fetch(client, 7, READ_COMMITTED)
        assert part.aborted_transactions == []


def test_a_read_committed_long_poll_wakes_when_a_marker_moves_the_lso(broker):
    append(broker, data(A, 0))  # 0-1, open
    with RawClient(broker.host, broker.port) as client:
        started = time.monotonic()
        correlation = fetch(client, 0, READ_COMMITTED, max_wait_ms=20_000, correlation=True)
        # Data below the high watermark but above the LSO does not answer the poll.
        assert client.no_answer_within(0.5)
        append(broker, marker(A, commit=True), AppendOrigin.COORDINATOR)
        got, response = client.receive(1, FETCH_VERSION)
        assert got == correlation
        part = response.responses[0].partitions[0]
        assert time.monotonic() - started < 10
        assert part.last_stable_offset == 3
        assert batch_offsets(bytes(part.records)) == [(0, 1), (2, 2)]


def test_list_offsets_answers_the_lso_to_read_committed(broker):
    append(broker, data(A, 0, transactional=False))  # 0-1
    append(broker, data(B, 0))  # 2-3, open
    with RawClient(broker.host, broker.port) as client:
        def latest(isolation: int) -> int:
            request = m.ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
                m.ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
                    m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0,
                                                             timestamp=-1)])])
            part = client.call(2, 7, request).topics[0].partitions[0]
            assert part.error_code == 0
            return part.offset
        assert (latest(READ_UNCOMMITTED), latest(READ_COMMITTED)) == (4, 2)
        append(broker, marker(B, commit=False), AppendOrigin.COORDINATOR)
        assert latest(READ_COMMITTED) == 5


def test_describe_producers(broker):
    append(broker, data(A, 0, transactional=False))  # 0-1
    append(broker, data(B, 0, 3))  # 2-4, open
    append(broker, marker(A, commit=True, coordinator_epoch=4), AppendOrigin.COORDINATOR)
    request = m.DescribeProducersRequest(topics=[
        m.DescribeProducersRequest.TopicRequest(name=TOPIC, partition_indexes=[0, 7]),
        m.DescribeProducersRequest.TopicRequest(name="no-such-topic", partition_indexes=[0])])
    with RawClient(broker.host, broker.port) as client:
        versions = client.call(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                           client_software_version="1"))
        assert any(api.api_key == 61 for api in versions.api_keys)
        response = client.call(61, 0, request)
    topics = {topic.name: topic.partitions for topic in response.topics}
    ours = {p.partition_index: p for p in topics[TOPIC]}
    assert ours[0].error_code == ErrorCode.NONE
    assert sorted((p.producer_id, p.producer_epoch, p.last_sequence, p.coordinator_epoch,
                   p.current_txn_start_offset) for p in ours[0].active_producers) == [
        (A, 0, 1, 4, -1), (B, 0, 2, -1, 2)]
    assert all(p.last_timestamp > 0 for p in ours[0].active_producers)
    assert ours[7].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert topics["no-such-topic"][0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_librdkafka_read_committed_drops_aborted_records(broker):
    """A real read_committed consumer (confluent-kafka) filters with the aborted transactions
    the Fetch returns; read_uncommitted sees everything but the markers."""
    import confluent_kafka

    def values(producer_id: int, sequence: int, names: list[bytes]) -> bytes:
        now = int(time.time() * 1000)
        return build_batch([(now, None, name) for name in names], producer_id=producer_id,
                           producer_epoch=0, base_sequence=sequence, is_transactional=True)

    append(broker, values(A, 0, [b"a1", b"a2"]))
    append(broker, values(B, 0, [b"b1"]))
    append(broker, values(A, 2, [b"a3"]))
    append(broker, marker(B, commit=False), AppendOrigin.COORDINATOR)
    append(broker, values(B, 1, [b"b2"]))  # B's next transaction, committed
    append(broker, marker(A, commit=True), AppendOrigin.COORDINATOR)
    append(broker, marker(B, commit=True), AppendOrigin.COORDINATOR)
    end = 8  # 5 data records, 3 markers

    def consume(isolation: str) -> list[bytes]:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": f"{broker.host}:{broker.port}", "group.id": "txn-fetch",
            "enable.auto.commit": False, "isolation.level": isolation,
            "enable.partition.eof": True})
        try:
            consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
            seen: list[bytes] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF \
                            and message.offset() >= end:
                        return seen
                    continue
                seen.append(message.value())
            raise AssertionError(f"{isolation}: did not reach offset {end}, saw {seen}")
        finally:
            consumer.close()

    assert consume("read_committed") == [b"a1", b"a2", b"a3", b"b2"]
    assert consume("read_uncommitted") == [b"a1", b"a2", b"b1", b"a3", b"b2"]
