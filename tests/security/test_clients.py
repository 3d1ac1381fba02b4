"""Third-party clients and Odradek's own over SSL, SASL_PLAINTEXT and SASL_SSL."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from tests.security.conftest import PLAIN_USERS, REAUTH_MS, SCRAM_USERS

CREDENTIALS = {"PLAIN": ("alice", PLAIN_USERS["alice"]),
               "SCRAM-SHA-256": ("scram-256", SCRAM_USERS["scram-256"][1]),
               "SCRAM-SHA-512": ("scram-512", SCRAM_USERS["scram-512"][1])}


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _confluent_round_trip(config: dict, count: int = 20) -> list[bytes]:
    from confluent_kafka import Consumer, Producer
    topic = _topic("sec")
    producer = Producer({**config, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def _ssl_config(broker, listener: str, with_cert: bool) -> dict:
    config = {"bootstrap.servers": broker.address(listener), "security.protocol": "SSL",
              "ssl.ca.location": str(broker.ca.cert_path)}
    if with_cert:
        config |= {"ssl.certificate.location": str(broker.client.cert_path),
                   "ssl.key.location": str(broker.client.key_path)}
    return config


@pytest.mark.parametrize("listener,with_cert", [("SSL", False), ("SSL", True), ("MTLS", True)])
def test_confluent_kafka_over_ssl(secure_broker, listener, with_cert):
    values = _confluent_round_trip(_ssl_config(secure_broker, listener, with_cert))
    assert values == [f"v{i}".encode() for i in range(20)]


def test_required_client_auth_refuses_a_client_without_certificate(secure_broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({**_ssl_config(secure_broker, "MTLS", with_cert=False),
                         "socket.connection.setup.timeout.ms": 5000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    # ... and the broker goes on serving clients with one.
    assert _confluent_round_trip(_ssl_config(secure_broker, "MTLS", True), 3) == [
        b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_over_sasl(secure_broker, listener, mechanism):
    username, password = CREDENTIALS[mechanism]
    config = {"bootstrap.servers": secure_broker.address(listener),
              "security.protocol": listener, "sasl.mechanism": mechanism,
              "sasl.username": username, "sasl.password": password}
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = str(secure_broker.ca.cert_path)
    assert _confluent_round_trip(config, 5) == [f"v{i}".encode() for i in range(5)]


def _kafka_python_round_trip(config: dict) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    topic = _topic("kp")
    producer = KafkaProducer(**config)
    for i in range(5):
        producer.send(topic, f"k{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **config)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 5:
            break
    consumer.close()
    return values


@pytest.mark.parametrize("listener,mechanism", [
    ("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512")])
def test_kafka_python(secure_broker, listener, mechanism):
    config: dict = {"bootstrap_servers": secure_broker.address(listener),
                    "security_protocol": listener}
    if "SSL" in listener:
        config |= {"ssl_cafile": str(secure_broker.ca.cert_path)}
    if mechanism is not None:
        username, password = CREDENTIALS[mechanism]
        config |= {"sasl_mechanism": mechanism, "sasl_plain_username": username,
                   "sasl_plain_password": password}
    assert _kafka_python_round_trip(config) == [f"k{i}".encode() for i in range(5)]


@pytest.mark.parametrize("listener,mechanism", [
    ("SSL", None), ("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-512")])
def test_aiokafka(secure_broker, listener, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run() -> list[bytes]:
        config: dict = {"bootstrap_servers": secure_broker.address(listener),
                        "security_protocol": listener}
        if "SSL" in listener:
            config["ssl_context"] = create_ssl_context(cafile=str(secure_broker.ca.cert_path))
        if mechanism is not None:
            username, password = CREDENTIALS[mechanism]
            config |= {"sasl_mechanism": mechanism, "sasl_plain_username": username,
                       "sasl_plain_password": password}
        topic = _topic("aio")
        producer = AIOKafkaProducer(**config)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **config)
        await consumer.start()
        values = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 5:
                        break
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


@pytest.mark.parametrize("listener,mechanism,jaas", [
    ("MTLS", None, False), ("SASL_SSL", "SCRAM-SHA-512", True),
    ("SASL_PLAINTEXT", "PLAIN", False), ("SASL_PLAINTEXT", "SCRAM-SHA-256", False)])
def test_odradek_client(secure_broker, listener, mechanism, jaas):
    from odradek.client import Consumer, Producer, TopicPartition
    protocol = "SSL" if listener == "MTLS" else listener
    config: dict = {"bootstrap.servers": secure_broker.address(listener),
                    "security.protocol": protocol}
    if "SSL" in protocol:
        config |= {"ssl.truststore.type": "PEM",
                   "ssl.truststore.location": str(secure_broker.ca.cert_path)}
    if listener == "MTLS":
        config |= {"ssl.certificate.location": str(secure_broker.client.cert_path),
                   "ssl.key.location": str(secure_broker.client.key_path)}
    if mechanism is not None:
        username, password = CREDENTIALS[mechanism]
        config["sasl.mechanism"] = mechanism
        if jaas:
            config["sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{username}" password="{password}";')
        else:
            config |= {"sasl.username": username, "sasl.password": password}
    topic = _topic("odr")
    with Producer({**config, "linger.ms": 0}) as producer:
        for i in range(5):
            producer.send(topic, f"o{i}".encode(), partition=0).get(30)
    with Consumer({**config, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            values.extend(record.value for record in consumer.poll(200))
    assert values == [f"o{i}".encode() for i in range(5)]


def test_large_fetch_over_tls(secure_broker):
    """Fetch responses over TLS carry file regions larger than the 1 MiB copy chunk intact."""
    from confluent_kafka import Consumer, Producer
    config = _ssl_config(secure_broker, "SSL", with_cert=False)
    topic = _topic("big")
    values = [bytes([i % 251]) * 200_000 for i in range(30)]  # ~6 MB
    producer = Producer({**config, "linger.ms": 50, "message.max.bytes": 1_000_000})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    consumer = Consumer({**config, "group.id": topic, "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 8_000_000,
                         "max.partition.fetch.bytes": 8_000_000})
    consumer.subscribe([topic])
    received: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(received) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(message.value())
    finally:
        consumer.close()
    assert received == values


def test_confluent_kafka_reauthenticates(secure_broker):
    """KIP-368 with librdkafka: SASL_SSL + SCRAM-SHA-512 sessions last REAUTH_MS there; a
    producer keeps its connection by re-authenticating, and the broker closes nothing."""
    from confluent_kafka import Producer


    class Capture(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    capture = Capture()
    logger = logging.getLogger(f"librdkafka-{uuid.uuid4().hex[:6]}")
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    username, password = CREDENTIALS["SCRAM-SHA-512"]
    producer = Producer({"bootstrap.servers": secure_broker.address("SASL_SSL"),
                         "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": username, "sasl.password": password,
                         "ssl.ca.location": str(secure_broker.ca.cert_path),
                         "debug": "security", "linger.ms": 0}, logger=logger)
    topic = _topic("reauth")
    failures: list = []
    deadline = time.monotonic() + 4 * REAUTH_MS / 1000
    sent = 0

    def reauthentications() -> int:
        # librdkafka's line when it authenticates again on a connection
        return sum("Auth in state REAUTH" in line for line in capture.lines)

    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, _msg: err and failures.append(err))
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert not failures and sent > 10
    assert reauthentications() > 0, "\n".join(capture.lines[-20:])
    assert "SASL session expired" not in secure_broker.process.log_path.read_text()


def test_odradek_admin_manages_scram_users(secure_broker):
    """Odradek's admin client creates, describes and deletes SCRAM users; the new user
    authenticates at once, the deleted one no longer does."""
    from odradek.client import (
        Admin,
        ScramCredentialInfo,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    from odradek.protocol.errors import ErrorCode
    user = f"dave-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": secure_broker.plaintext}) as admin:
        assert admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, "SCRAM-SHA-512", "dave-pw", iterations=4096)]) \
            == {user: None}
        assert admin.describe_user_scram_credentials([user]) == {
            user: [ScramCredentialInfo("SCRAM-SHA-512", 4096)]}
        sasl = {"bootstrap.servers": secure_broker.address("SASL_PLAINTEXT"),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user, "sasl.password": "dave-pw"}
        with Admin(sasl) as as_dave:
            assert as_dave.describe_cluster().nodes
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-512")])
        with Admin({**sasl, "default.api.timeout.ms": 10_000}) as as_dave:
            with pytest.raises(Exception) as failure:
                as_dave.describe_cluster()
            assert getattr(failure.value, "code", None) == ErrorCode.SASL_AUTHENTICATION_FAILED
        unknown = admin.describe_user_scram_credentials(["nobody"], raise_errors=False)
        assert unknown["nobody"].code == ErrorCode.RESOURCE_NOT_FOUND


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_confluent_kafka_wrong_password(secure_broker, mechanism):
    """librdkafka reports the broker's SASL_AUTHENTICATION_FAILED as an authentication error."""
    from confluent_kafka import KafkaError, Producer
    username, _password = CREDENTIALS[mechanism]
    errors: list = []
    producer = Producer({"bootstrap.servers": secure_broker.address("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                         "sasl.username": username, "sasl.password": "definitely-wrong",
                         "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str()
    assert "definitely-wrong" not in secure_broker.process.log_path.read_text()
