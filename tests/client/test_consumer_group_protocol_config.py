"""Kafka 4.0's consumer config checks per group protocol: with group.protocol=consumer the
classic protocol's partition.assignment.strategy, heartbeat.interval.ms and session.timeout.ms
are refused (the coordinator decides them), with classic group.remote.assignor is; a consumer
without a group.id may set anything."""

from __future__ import annotations

import pytest

from odradek.client import Consumer
from odradek.client.consumer import AsyncConsumer
from odradek.client.errors import KafkaConfigError

BASE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


@pytest.mark.parametrize("extra, message", [
    ({"session.timeout.ms": 10_000},
     "session.timeout.ms cannot be set when group.protocol=CONSUMER"),
    ({"partition.assignment.strategy": "range", "heartbeat.interval.ms": "1000"},
     ("partition.assignment.strategy, heartbeat.interval.ms cannot be set when "
     "group.protocol=CONSUMER")),
])
def test_consumer_protocol_refuses_classic_settings(extra, message):
    for make in (Consumer, AsyncConsumer):
        with pytest.raises(KafkaConfigError) as refused:
            make({**BASE, "group.protocol": "consumer", **extra})
        assert str(refused.value) == message


def test_classic_protocol_refuses_the_remote_assignor():
    with pytest.raises(KafkaConfigError) as refused:
        AsyncConsumer({**BASE, "group.remote.assignor": "range"})
    assert str(refused.value) == "group.remote.assignor cannot be set when group.protocol=CLASSIC"


def test_without_a_group_nothing_is_refused():
    consumer = AsyncConsumer({"bootstrap.servers": "127.0.0.1:1", "group.protocol": "consumer",
                              "session.timeout.ms": 10_000})
    assert consumer.coordinator is None
