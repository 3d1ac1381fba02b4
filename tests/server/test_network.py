"""The broker's network layer and Fetch path over raw sockets: response order per connection,
many connections at once, idle connection reaping, `socket.request.max.bytes`, Fetch long polls
(`max.wait.ms`/`min.bytes`), partition/response size limits and incremental fetch sessions."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from broker_process import BrokerProcess
from raw_client import (
    FETCH_VERSION,
    RawClient,
    batch_offsets,
    fetch_request,
    fetched,
    produce_request,
)

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

IDLE_MS = 1500
MAX_REQUEST_BYTES = 65536


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("network"), {
        "connections.max.idle.ms": str(IDLE_MS),
        "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
    }).start()
    yield broker
    broker.stop()


def _client(broker) -> RawClient:
    return RawClient(broker.host, broker.port)


def _topic(prefix: str, client: RawClient, partitions: int = 1) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client.create_topic(name, partitions)
    return name


def test_pipelined_requests_are_answered_in_request_order(broker):
    """A long-polling Fetch first, quick requests behind it: responses still leave in request
    order (Kafka clients match them by position), the quick ones after the poll ends."""
    with _client(broker) as c:
        topic = _topic("order", c)
        started = time.monotonic()
        sent = [
            (1, c.send(1, FETCH_VERSION, fetch_request({(topic, 0): 0}, max_wait_ms=700))),
            (3, c.send(3, 12, m.MetadataRequest(topics=None))),
            (18, c.send(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                    client_software_version="1"))),
            (60, c.send(60, 1, m.DescribeClusterRequest())),
        ]
        received = []
        for api_key, corr in sent:
            version = {1: FETCH_VERSION, 3: 12, 18: 3, 60: 1}[api_key]
            got, response = c.receive(api_key, version)
            received.append((got, time.monotonic() - started))
            assert getattr(response, "error_code", 0) == 0
        assert [corr for corr, _t in received] == [corr for _k, corr in sent]
        assert received[0][1] >= 0.6  # the fetch waited its max.wait.ms...
        assert all(t >= received[0][1] for _c, t in received[1:])  # ...and nobody overtook it


def test_other_connections_are_served_during_a_long_poll(broker):
    with _client(broker) as poller, _client(broker) as other:
        topic = _topic("busy", other)
        poller.send(1, FETCH_VERSION, fetch_request({(topic, 0): 0}, max_wait_ms=3000))
        started = time.monotonic()
        for _ in range(20):
            assert other.metadata([topic]).topics[0].error_code == 0
        assert time.monotonic() - started < 2.5  # answered while the poll is still waiting
        _corr, response = poller.receive(1, FETCH_VERSION)
        assert fetched(response) == {(topic, 0): b""}


def test_fetch_waits_max_wait_ms_when_there_is_nothing_new(broker):
    with _client(broker) as c:
        topic = _topic("wait", c)
        started = time.monotonic()
        response = c.call(1, FETCH_VERSION, fetch_request({(topic, 0): 0}, max_wait_ms=800))
        elapsed = time.monotonic() - started
        assert fetched(response) == {(topic, 0): b""}
        assert 0.75 <= elapsed < 5
        started = time.monotonic()
        c.call(1, FETCH_VERSION, fetch_request({(topic, 0): 0}, max_wait_ms=0))
        assert time.monotonic() - started < 0.5  # max.wait.ms=0: answered at once


def test_fetch_returns_as_soon_as_data_arrives(broker):
    with _client(broker) as poller, _client(broker) as producer:
        topic = _topic("wake", producer)
        started = time.monotonic()
        poller.send(1, FETCH_VERSION, fetch_request({(topic, 0): 0}, max_wait_ms=20000))
        time.sleep(0.3)
        producer.produce(topic, 0, [b"hello"])
        _corr, response = poller.receive(1, FETCH_VERSION)
        assert time.monotonic() - started < 5  # far less than max.wait.ms
        assert batch_offsets(fetched(response)[(topic, 0)]) == [(0, 0)]


def test_fetch_min_bytes_waits_for_enough_data(broker):
    with _client(broker) as poller, _client(broker) as producer:
        topic = _topic("minbytes", producer)
        producer.produce(topic, 0, [b"x" * 100])  # one batch of ~170 bytes
        started = time.monotonic()
        response = poller.call(1, FETCH_VERSION, fetch_request(
            {(topic, 0): 0}, max_wait_ms=800, min_bytes=10_000))
        elapsed = time.monotonic() - started
        assert 0.75 <= elapsed < 5  # not enough: waited max.wait.ms, then returned what it had
        assert batch_offsets(fetched(response)[(topic, 0)]) == [(0, 0)]

        # Enough bytes arriving during the wait complete the fetch early.
        started = time.monotonic()
        poller.send(1, FETCH_VERSION, fetch_request({(topic, 0): 1}, max_wait_ms=20000,
                                                    min_bytes=3_000))
        for i in range(20):
            producer.produce(topic, 0, [b"y" * 200])
            if i == 5:
                time.sleep(0.3)  # the poll is waiting by now with too few bytes
        _corr, response = poller.receive(1, FETCH_VERSION)
        assert time.monotonic() - started < 5
        records = fetched(response)[(topic, 0)]
        assert len(records) >= 3_000 and batch_offsets(records)[0] == (1, 1)


def test_partition_and_response_size_limits(broker):
    with _client(broker) as c:
        topic = _topic("limits", c, partitions=2)
        for partition in (0, 1):
            for _ in range(5):
                c.produce(topic, partition, [b"z" * 1000])  # batches of ~1070 bytes
        batch_size = len(build_batch([(0, None, b"z" * 1000)]))

        # partition_max_bytes holds per partition, in whole batches.
        response = c.call(1, FETCH_VERSION, fetch_request(
            {(topic, 0): 0, (topic, 1): 0}, partition_max_bytes=3 * batch_size + 10))
        got = fetched(response)
        assert batch_offsets(got[(topic, 0)]) == [(0, 0), (1, 1), (2, 2)]
        assert batch_offsets(got[(topic, 1)]) == [(0, 0), (1, 1), (2, 2)]

        # max_bytes bounds the whole response: the second partition gets what is left.
        response = c.call(1, FETCH_VERSION, fetch_request(
            {(topic, 0): 0, (topic, 1): 0}, max_bytes=4 * batch_size + 10))
        got = fetched(response)
        assert len(got[(topic, 0)]) + len(got[(topic, 1)]) <= 4 * batch_size + 10
        assert len(batch_offsets(got[(topic, 0)])) == 4
        assert batch_offsets(got[(topic, 1)]) == []

        # A first batch larger than both limits still comes back, so consumers make progress.
        response = c.call(1, FETCH_VERSION, fetch_request(
            {(topic, 0): 2, (topic, 1): 0}, max_bytes=100, partition_max_bytes=100))
        got = fetched(response)
        assert batch_offsets(got[(topic, 0)]) == [(2, 2)]
        assert got[(topic, 1)] == b""


def test_incremental_fetch_session(broker):
    with _client(broker) as c:
        topic = _topic("session", c, partitions=2)
        c.produce(topic, 0, [b"a"])
        full = c.call(1, FETCH_VERSION, fetch_request(
            {(topic, 0): 0, (topic, 1): 0}, session_id=0, session_epoch=0))
        assert full.session_id != 0
        assert {key: len(batch_offsets(r)) for key, r in fetched(full).items()} == {
            (topic, 0): 1, (topic, 1): 0}
        session = full.session_id

        # Epoch 1 names only the moved partition; nothing changed, so nothing is returned.
        quiet = c.call(1, FETCH_VERSION, fetch_request(
            {(topic, 0): 1}, session_id=session, session_epoch=1))
        assert quiet.error_code == 0 and quiet.session_id == session
        assert quiet.responses == []

        # New data on partition 1 only: epoch 2 (no partitions named) returns just that one.
        c.produce(topic, 1, [b"b"])
        changed = c.call(1, FETCH_VERSION, fetch_request({}, session_id=session,
                                                         session_epoch=2))
        got = fetched(changed)
        assert list(got) == [(topic, 1)] and batch_offsets(got[(topic, 1)]) == [(0, 0)]

        stale = c.call(1, FETCH_VERSION, fetch_request({}, session_id=session, session_epoch=2))
        assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        unknown = c.call(1, FETCH_VERSION, fetch_request({}, session_id=session + 1,
                                                         session_epoch=1))
        assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_idle_connections_are_reaped_and_busy_ones_are_not(broker):
    with _client(broker) as idle, _client(broker) as chatty, _client(broker) as polling:
        topic = _topic("idle", chatty)
        idle.call(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                              client_software_version="1"))
        # A long poll longer than connections.max.idle.ms is a request in progress, not idleness.
        polling.send(1, FETCH_VERSION, fetch_request({(topic, 0): 0},
                                                     max_wait_ms=IDLE_MS * 3))
        started = time.monotonic()
        closed = threading.Event()

        def watch_idle() -> None:
            if idle.closed_by_peer(timeout=IDLE_MS / 1000 * 4):
                closed.set()

        watcher = threading.Thread(target=watch_idle)
        watcher.start()
        while watcher.is_alive() and time.monotonic() - started < IDLE_MS / 1000 * 5:
            chatty.metadata([topic])  # active well past the idle timeout
            time.sleep(0.1)
        watcher.join(10)
        assert closed.is_set(), "the idle connection was not closed"
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9
        assert chatty.metadata([topic]).topics[0].error_code == 0
        _corr, response = polling.receive(1, FETCH_VERSION)
        assert fetched(response) == {(topic, 0): b""}
        assert time.monotonic() - started >= IDLE_MS / 1000 * 2.5


def test_requests_over_socket_request_max_bytes_close_the_connection(broker):
    with _client(broker) as c:
        topic = _topic("maxreq", c)
        # Just under the limit is served (the frame is a few hundred bytes above the batch).
        below = produce_request(topic, 0,
                                build_batch([(0, None, b"v" * (MAX_REQUEST_BYTES - 600))]))
        assert c.call(0, 9, below).responses[0].partition_responses[0].error_code == 0
        over = produce_request(topic, 0, build_batch([(0, None, b"v" * MAX_REQUEST_BYTES)]))
        c.send(0, 9, over)
        assert c.closed_by_peer()
    with _client(broker) as c:
        assert c.metadata([topic]).topics[0].error_code == 0
