"""Odradek's consumer with group.protocol=consumer and a `SubscriptionPattern` (Kafka 4.0's
server-side regex): the coordinator resolves the re2j regex (SubscribedTopicRegex), the member
gets the matching topics' partitions, including a topic created after it joined, and an
invalid regex is a fatal INVALID_REGULAR_EXPRESSION."""

from __future__ import annotations

import time
import uuid

import pytest
from broker_process import BrokerProcess
from group_members import create_topic, produce_spread

from odradek.client import Consumer, SubscriptionPattern
from odradek.protocol.errors import ErrorCode, KafkaError


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("kip848-regex"),
                           overrides={"offsets.topic.num.partitions": "4",
                                      "group.consumer.min.heartbeat.interval.ms": "500",
                                      "group.consumer.heartbeat.interval.ms": "500"}).start()
    yield broker
    broker.stop()


def _consumer(broker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest"})


def _poll_values(consumer: Consumer, wanted: set[str], timeout: float = 30.0) -> set[str]:
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while not wanted <= seen and time.monotonic() < deadline:
        seen.update(r.value.decode() for r in consumer.poll(200))
    return seen


def test_server_side_regex_follows_new_topics(broker):
    prefix = f"sp{uuid.uuid4().hex[:6]}"
    first = create_topic(broker.bootstrap, 2, prefix)
    create_topic(broker.bootstrap, 1, "other")  # not matched
    produce_spread(broker.bootstrap, first, 2, 0, 4)
    consumer = _consumer(broker, f"regex-{prefix}")
    try:
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic"})
        try:
            with pytest.raises(ValueError, match="needs group.protocol=consumer"):
                classic.subscribe(SubscriptionPattern(f"{prefix}-.*"))
        finally:
            classic.close()
        consumer.subscribe(SubscriptionPattern(f"{prefix}-.*"))
        assert _poll_values(consumer, {"0", "1", "2", "3"}) >= {"0", "1", "2", "3"}
        assert consumer.subscription() == {first}
        # A topic created later that matches joins the assignment at a later heartbeat.
        second = create_topic(broker.bootstrap, 1, prefix)
        produce_spread(broker.bootstrap, second, 1, 10, 2)
        assert _poll_values(consumer, {"10", "11"}) >= {"10", "11"}
        assert consumer.subscription() == {first, second}
        assert {tp.topic for tp in consumer.assignment()} == {first, second}
    finally:
        consumer.close()


def test_invalid_regex_is_fatal(broker):
    consumer = _consumer(broker, f"bad-regex-{uuid.uuid4().hex[:6]}")
    try:
        consumer.subscribe(SubscriptionPattern("(a)\\1"))
        deadline = time.monotonic() + 30
        with pytest.raises(KafkaError) as refused:
            while time.monotonic() < deadline:
                consumer.poll(200)
        assert refused.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION
    finally:
        consumer.close()
