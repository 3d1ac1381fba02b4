"""acks=all goes through the delayed produce: a batch is answered only once the high watermark
passes it. The test holds the high watermark back by putting a (simulated) follower in the ISR
that has fetched nothing, then moves it the way a follower's fetch would."""

from __future__ import annotations

import time

import pytest
from inprocess_broker import InProcessBroker
from raw_client import RawClient, fetch_request, fetched, produce_request

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

TOPIC = "delayed-produce"


@pytest.fixture
def broker(tmp_path):
    broker = InProcessBroker(tmp_path).start()
    yield broker
    broker.stop()


def _batch(*values: bytes) -> bytes:
    return build_batch([(int(time.time() * 1000), None, v) for v in values])


def test_acks_all_answers_only_when_the_high_watermark_passes_the_batch(broker):
    with RawClient(broker.host, broker.port) as admin:
        admin.create_topic(TOPIC)
    broker.hold_back_high_watermark(TOPIC)
    with RawClient(broker.host, broker.port) as waiting, \
            RawClient(broker.host, broker.port) as other:
        corr = waiting.send(0, 9, produce_request(TOPIC, 0, _batch(b"a", b"b", b"c"), acks=-1))
        assert waiting.no_answer_within(0.5), "acks=all was answered before the commit"
        # Appended but not committed: consumers do not see it, the high watermark is 0.
        fetch = other.call(1, 12, fetch_request({(TOPIC, 0): 0}))
        part = fetch.responses[0].partitions[0]
        assert (part.high_watermark, fetched(fetch)[(TOPIC, 0)]) == (0, b"")
        # acks=1 is answered at once meanwhile (the connection and the loop are not blocked).
        acks1 = other.call(0, 9, produce_request(TOPIC, 0, _batch(b"d"), acks=1))
        assert acks1.responses[0].partition_responses[0].base_offset == 3
        # The follower catches up to offset 2 (not past the batch's last offset 2): still no
        # answer; then past it: answered with the batch's offset.
        assert broker.follower_fetched(TOPIC, 2) == 2
        assert waiting.no_answer_within(0.3)
        assert broker.follower_fetched(TOPIC, 3) == 3
        got, response = waiting.receive(0, 9)
        assert got == corr
        answer = response.responses[0].partition_responses[0]
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)
        fetch = other.call(1, 12, fetch_request({(TOPIC, 0): 0}))
        assert fetch.responses[0].partitions[0].high_watermark == 3


def test_acks_all_times_out_when_the_high_watermark_stays_behind(broker):
    with RawClient(broker.host, broker.port) as client:
        client.create_topic(TOPIC)
        broker.hold_back_high_watermark(TOPIC)
        request = produce_request(TOPIC, 0, _batch(b"x"), acks=-1)
        request.timeout_ms = 200
        started = time.monotonic()
        response = client.call(0, 9, request)
        answer = response.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert time.monotonic() - started >= 0.19
        # The record stays in the log (Kafka's semantics: the client retries, idempotence
        # dedupes); it becomes visible when the follower catches up.
        assert broker.follower_fetched(TOPIC, 1) == 1


def test_acks_all_is_answered_at_once_with_only_the_leader_in_the_isr(broker):
    with RawClient(broker.host, broker.port) as client:
        client.create_topic(TOPIC)
        started = time.monotonic()
        assert client.produce(TOPIC, 0, [b"one", b"two"]) == 0
        assert time.monotonic() - started < 5
