"""Client telemetry (KIP-714) as a Kafka 4.0 broker without a telemetry receiver: client
metrics subscriptions (CLIENT_METRICS config resources, type 16) are altered, validated and
described as Kafka's ClientMetricsConfigs and listed by ListClientMetricsResources;
GetTelemetrySubscriptions and PushTelemetry are not advertised (as Kafka with no metrics reporter
implementing ClientTelemetry), so a 3.7+ client never pushes and logs nothing about it."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

CLIENT_METRICS = 16
SUBSCRIPTION_SOURCE, DEFAULT_SOURCE = 7, 5


def incremental(broker, name: str, *ops: tuple[str, int, str | None]):
    R = m.IncrementalAlterConfigsRequest
    with RawClient(broker.host, broker.port) as client:
        response = client.call(44, 1, R(resources=[R.AlterConfigsResource(
            resource_type=CLIENT_METRICS, resource_name=name,
            configs=[R.AlterableConfig(name=k, config_operation=op, value=v)
                     for k, op, v in ops])]))
    return response.responses[0]


def described(broker, name: str) -> dict[str, tuple[str, int, list]]:
    R = m.DescribeConfigsRequest
    with RawClient(broker.host, broker.port) as client:
        (result,) = client.call(32, 4, R(resources=[R.DescribeConfigsResource(
            resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=None)],
            include_synonyms=True)).results
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


def listed(broker) -> list[str]:
    with RawClient(broker.host, broker.port) as client:
        response = client.call(74, 0, m.ListClientMetricsResourcesRequest())
    assert response.error_code == ErrorCode.NONE
    return [r.name for r in response.client_metrics_resources]


def eventually(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.05)


def test_subscription_altered_described_and_listed(odradek_broker):
    name = f"sub-{uuid.uuid4().hex[:6]}"
    assert described(odradek_broker, name) == {
        "metrics": ("", DEFAULT_SOURCE, []), "interval.ms": ("300000", DEFAULT_SOURCE, []),
        "match": ("", DEFAULT_SOURCE, [])}
    assert name not in listed(odradek_broker)
    result = incremental(odradek_broker, name,
                         ("metrics", 0, "org.apache.kafka.producer."),
                         ("interval.ms", 0, "1000"), ("match", 0, "client_id=perf-.*"))
    assert result.error_code == ErrorCode.NONE, result.error_message
    # APPEND adds a prefix to the list.
    assert incremental(odradek_broker, name, ("metrics", 2, "org.apache.kafka.consumer.")
                       ).error_code == ErrorCode.NONE
    eventually(lambda: name in listed(odradek_broker))
    eventually(lambda: described(odradek_broker, name)["metrics"][0].endswith("consumer."))
    now = described(odradek_broker, name)
    assert now["metrics"] == (
        "org.apache.kafka.producer.,org.apache.kafka.consumer.", SUBSCRIPTION_SOURCE,
        [("metrics", "org.apache.kafka.producer.,org.apache.kafka.consumer.",
          SUBSCRIPTION_SOURCE)])
    assert now["interval.ms"][:2] == ("1000", SUBSCRIPTION_SOURCE)
    # Deleting every config removes the subscription.
    for key in ("metrics", "interval.ms", "match"):
        assert incremental(odradek_broker, name, (key, 1, None)).error_code == ErrorCode.NONE
    eventually(lambda: name not in listed(odradek_broker))


@pytest.mark.parametrize("ops, error, message", [
    ([("interval.ms", 0, "50")], ErrorCode.INVALID_REQUEST,
     "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
    ([("colour", 0, "red")], ErrorCode.INVALID_REQUEST,
     "Unknown client metrics configuration: colour"),
    ([("match", 0, "client_colour=red")], ErrorCode.INVALID_CONFIG,
     "Illegal client matching pattern: client_colour=red"),
    ([("match", 0, "client_id=[")], ErrorCode.INVALID_CONFIG,
     "Illegal client matching pattern: client_id=["),
])
def test_invalid_subscriptions_refused(odradek_broker, ops, error, message):
    name = f"bad-{uuid.uuid4().hex[:6]}"
    result = incremental(odradek_broker, name, *ops)
    assert (result.error_code, result.error_message) == (error, message)
    assert name not in listed(odradek_broker)


def test_telemetry_apis_not_advertised_and_librdkafka_quiet(odradek_broker, caplog):
    with RawClient(odradek_broker.host, odradek_broker.port) as client:
        versions = client.call(18, 4, m.ApiVersionsRequest(
            client_software_name="t", client_software_version="1"))
    keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert 71 not in keys and 72 not in keys and keys[74] == (0, 0)
    # librdkafka 2.x (KIP-714 client) produces and consumes without a word about telemetry.
    topic = f"telemetry-{uuid.uuid4().hex[:6]}"
    logger = logging.getLogger("librdkafka-telemetry-check")
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        producer = Producer({"bootstrap.servers": odradek_broker.bootstrap, "logger": logger,
                             "enable.metrics.push": True})
        producer.produce(topic, b"x")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "logger": logger,
                             "group.id": topic, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        consumer.close()
    assert message is not None and message.value() == b"x"
    telemetry = [r.getMessage() for r in caplog.records if r.name == logger.name
                 and "telemetry" in r.getMessage().lower()]
    assert telemetry == []
