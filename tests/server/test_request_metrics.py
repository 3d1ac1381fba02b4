"""Per-API request time split as Kafka's RequestMetrics (server/request_metrics.py): the
histograms' percentiles, and a real broker attributing an acks=all wait and a fetch long poll
to remote time, and a request waiting behind another of its connection to queue time."""

from __future__ import annotations

import time

import pytest
from inprocess_broker import InProcessBroker
from raw_client import RawClient, fetch_request, produce_request

from odradek.protocol.records import build_batch
from odradek.request_timing import RequestTiming
from odradek.server.request_metrics import PARTS, Histogram, RequestMetrics

TOPIC = "request-metrics"
PRODUCE, FETCH = 0, 1


def test_histogram_percentiles_within_a_bucket():
    histogram = Histogram()
    for millis in range(1, 1001):  # 1..1000 ms, once each
        histogram.record(millis * 1_000_000)
    for fraction, exact in ((0.5, 500), (0.99, 990), (0.999, 999)):
        assert exact <= histogram.percentile_ms(fraction) <= exact * 1.25
    assert histogram.max_ns == 1_000_000_000
    assert Histogram().percentile_ms(0.99) == 0.0


def test_a_fetch_is_counted_again_as_from_a_consumer_or_a_follower():
    """Kafka's FetchConsumer / FetchFollower: by replica_id before v15, replica_state after."""
    from odradek.protocol import messages as m

    metrics = RequestMetrics()
    now = time.monotonic_ns()
    fetches = [(4, m.FetchRequest(replica_id=-1)), (11, m.FetchRequest(replica_id=2)),
               (15, m.FetchRequest(replica_state=m.FetchRequest.ReplicaState(replica_id=3))),
               (17, m.FetchRequest())]
    for version, request in fetches:
        timing = RequestTiming(arrived_ns=now - 3_000_000, started_ns=now - 2_000_000)
        metrics.record(FETCH, version, timing, now - 1_000_000, "conn", None, request)
    summary = metrics.summary()
    assert summary["Fetch"]["TotalTimeMs"]["count"] == 4
    assert summary["FetchConsumer"]["TotalTimeMs"]["count"] == 2
    assert summary["FetchFollower"]["TotalTimeMs"]["count"] == 2
    assert metrics.by_version[(FETCH, 15)] == 1


def test_split_adds_up_and_slow_requests_are_logged(caplog):
    metrics = RequestMetrics(slow_ms=5)
    now = time.monotonic_ns()
    # Arrived 30 ms ago, started 20 ms ago, waited 12 ms remotely, done 2 ms ago.
    timing = RequestTiming(arrived_ns=now - 30_000_000, started_ns=now - 20_000_000,
                           remote_ns=12_000_000)
    with caplog.at_level("INFO", logger="odradek.request.slow"):
        metrics.record(PRODUCE, 9, timing, now - 2_000_000, "conn", "client")
    split = metrics.summary()["Produce"]
    assert set(split) == set(PARTS)
    maxima = {part: split[part]["max"] for part in PARTS}
    assert maxima["RequestQueueTimeMs"] == pytest.approx(10, abs=0.5)
    assert maxima["RemoteTimeMs"] == pytest.approx(12, abs=0.5)
    assert maxima["LocalTimeMs"] == pytest.approx(6, abs=0.5)
    assert maxima["TotalTimeMs"] >= 30
    assert metrics.by_version == {(PRODUCE, 9): 1}
    assert "slow request: Produce v9" in caplog.text  # 18 ms besides the remote wait


@pytest.fixture
def broker(tmp_path):
    broker = InProcessBroker(tmp_path).start()
    yield broker
    broker.stop()


def _batch(value: bytes) -> bytes:
    return build_batch([(int(time.time() * 1000), None, value)])


def _max_ms(broker: InProcessBroker, api: int, part: str) -> float:
    def read() -> float:
        histograms = broker.broker.network.request_metrics.by_api.get(api)
        return 0.0 if histograms is None else histograms[PARTS.index(part)].max_ns / 1e6
    return broker.call(read)


def test_remote_and_queue_time_of_a_real_broker(broker):
    with RawClient(broker.host, broker.port) as admin:
        admin.create_topic(TOPIC)
    # A long poll on an empty partition: its wait is remote time.
    with RawClient(broker.host, broker.port) as consumer:
        consumer.call(FETCH, 12, fetch_request({(TOPIC, 0): 0}, max_wait_ms=300))
    assert _max_ms(broker, FETCH, "RemoteTimeMs") >= 250
    assert _max_ms(broker, FETCH, "LocalTimeMs") < 250

    # An acks=all produce held until the follower catches up: remote time; an acks=1 produce
    # sent behind it on the same connection waits in the queue meanwhile.
    broker.hold_back_high_watermark(TOPIC)
    with RawClient(broker.host, broker.port) as producer:
        producer.send(PRODUCE, 9, produce_request(TOPIC, 0, _batch(b"a"), acks=-1))
        producer.send(PRODUCE, 9, produce_request(TOPIC, 0, _batch(b"b"), acks=1))
        assert producer.no_answer_within(0.4)
        assert broker.follower_fetched(TOPIC, 1) == 1
        producer.receive(PRODUCE, 9)
        producer.receive(PRODUCE, 9)
    assert _max_ms(broker, PRODUCE, "RemoteTimeMs") >= 350
    assert _max_ms(broker, PRODUCE, "RequestQueueTimeMs") >= 350
    assert _max_ms(broker, PRODUCE, "TotalTimeMs") >= 350
