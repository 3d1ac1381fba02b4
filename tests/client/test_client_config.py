"""Client config parsing, topic id text form, the blocking facade's event loop thread."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

import pytest

from odradek.client import ADMIN_CONFIG, COMMON_CONFIG, KafkaConfigError
from odradek.client.config import ConfigKey, parse_bootstrap_servers
from odradek.client.retry import Deadline, ExponentialBackoff
from odradek.client.sync import EventLoopThread
from odradek.protocol.ids import kafka_str_to_uuid, uuid_to_kafka_str


def test_defaults_are_kafkas():
    config = ADMIN_CONFIG.parse({"bootstrap.servers": "a:1"})
    assert config["bootstrap.servers"] == ["a:1"]
    assert config["request.timeout.ms"] == 30_000
    assert config["default.api.timeout.ms"] == 60_000
    assert config["retry.backoff.ms"] == 100
    assert config["metadata.max.age.ms"] == 300_000
    assert config["connections.max.idle.ms"] == 300_000  # the admin client's own default
    assert COMMON_CONFIG.parse({"bootstrap.servers": "a:1"})["connections.max.idle.ms"] == 540_000


def test_values_from_properties_files_are_converted():
    config = ADMIN_CONFIG.parse({
        "bootstrap.servers": " a:1 , b:2 ",
        "request.timeout.ms": " 1500 ",
        "client.id": "tool",
    })
    assert config["bootstrap.servers"] == ["a:1", "b:2"]
    assert config["request.timeout.ms"] == 1500
    assert config["client.id"] == "tool"


def test_bool_keys_of_extended_schemas():
    schema = COMMON_CONFIG.extend([ConfigKey("enable.idempotence", "bool", True)],
                                  defaults={"request.timeout.ms": 5})
    config = schema.parse({"bootstrap.servers": "a:1", "enable.idempotence": "false"})
    assert config["enable.idempotence"] is False
    assert config["request.timeout.ms"] == 5


@pytest.mark.parametrize("props, message", [
    ({}, 'Missing required configuration "bootstrap.servers"'),
    ({"bootstrap.servers": "nohost"}, "Invalid url in bootstrap.servers: nohost"),
    ({"bootstrap.servers": "h:99999"}, "Invalid url in bootstrap.servers: h:99999"),
    ({"bootstrap.servers": ""}, "No resolvable bootstrap urls"),
    ({"bootstrap.servers": "h:1", "request.timeout.ms": "soon"},
     "Invalid value soon for configuration request.timeout.ms"),
    ({"bootstrap.servers": "h:1", "retries": -1}, "Value must be at least 0"),
    ({"bootstrap.servers": "h:1", "security.protocol": "TLS"}, "String must be one of"),
])
def test_invalid_configs_are_rejected(props, message):
    with pytest.raises(KafkaConfigError, match=message):
        ADMIN_CONFIG.parse(props)


def test_unknown_keys_are_kept_and_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="odradek.client"):
        config = ADMIN_CONFIG.parse({"bootstrap.servers": "a:1", "no.such.key": "x"})
    assert config["no.such.key"] == "x"
    assert "no.such.key" in caplog.text


def test_bootstrap_servers_with_ipv6():
    assert parse_bootstrap_servers(["[::1]:9092", "host:1"]) == [("::1", 9092), ("host", 1)]


def test_topic_ids_render_as_kafka_does():
    # The id in Kafka's quickstart output and its UUID.
    value = uuid.UUID("34f9991f-285b-47dc-b4d3-032094c1f6b2")
    assert uuid_to_kafka_str(value) == "NPmZHyhbR9y00wMglMH2sg"
    assert kafka_str_to_uuid("NPmZHyhbR9y00wMglMH2sg") == value
    assert uuid_to_kafka_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    for _ in range(200):
        random_id = uuid.uuid4()
        text = uuid_to_kafka_str(random_id)
        assert len(text) == 22 and "=" not in text and "+" not in text and "/" not in text
        assert kafka_str_to_uuid(text) == random_id


@pytest.mark.parametrize("text", ["", "short", "NPmZHyhbR9y00wMglMH2s!", "NPmZHyhbR9y00wMglMH2sh",
                                  "NPmZHyhbR9y00wMglMH2sgA"])
def test_invalid_topic_id_text_is_rejected(text):
    with pytest.raises(ValueError):
        kafka_str_to_uuid(text)


def test_backoff_grows_to_its_cap_with_jitter():
    backoff = ExponentialBackoff(100, 1000)
    delays = [backoff.delay_ms(attempt) for attempt in range(10)]
    assert 80 <= delays[0] <= 120
    assert 160 <= delays[1] <= 240
    assert all(d <= 1200 for d in delays) and delays[-1] >= 800
    assert ExponentialBackoff(0, 0).delay_ms(5) == 0


def test_deadline_caps_timeouts():
    deadline = Deadline(50)
    assert 0 < deadline.cap(10_000) <= 50
    assert deadline.cap(10) == 10


def test_event_loop_thread_runs_coroutines_and_refuses_reentry():
    runner = EventLoopThread("test-loop")
    try:
        async def where():
            return threading.current_thread().name

        assert runner.run(where()) == "test-loop"

        async def failing():
            raise KeyError("boom")

        with pytest.raises(KeyError):
            runner.run(failing())

        async def reenter():
            inner = where()
            try:
                runner.run(inner)
            except RuntimeError as exc:
                return str(exc)
            return "no error"

        assert "deadlock" in runner.run(reenter())
    finally:
        runner.close()
    assert not runner.running

    async def late():
        return 1

    with pytest.raises(RuntimeError, match="closed"):
        runner.run(late())


def test_event_loop_thread_timeout_cancels_the_coroutine():
    runner = EventLoopThread()
    cancelled = threading.Event()
    try:
        async def forever():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with pytest.raises(TimeoutError):
            runner.run(forever(), timeout=0.1)
        assert cancelled.wait(2)
    finally:
        runner.close()
