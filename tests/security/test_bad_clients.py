"""Bad clients against a broker that logs everything (root logger at TRACE): a TLS handshake
of garbage, one that stalls, a SASL exchange that stops half way, an oversized SASL token, a
flood of connections. Each is refused or closed as Kafka does (a stalled one after
`connections.max.idle.ms`), the broker keeps serving a good client meanwhile, and no password
-- right or wrong -- reaches the log at any level."""

from __future__ import annotations

import socket
import ssl
import struct
import time

import pytest

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.scram import ScramClient
from tests.broker_process import BrokerProcess, closed_by_peer_now, free_port, wait_until
from tests.security.certs import TestCA
from tests.security.test_authentication import _call, _closed_by_peer

IDLE_MS = 2000
USERS = {"alice": "alice-Pa55word", "admin": "admin-Pa55word"}
WRONG_PASSWORDS = ["wrong-Pa55word-1", "wrong-Pa55word-2"]
SCRAM_PASSWORD = "scram-Pa55word"
FLOOD = 600
PER_IP_LIMIT = 100


class Broker:
    def __init__(self, process: BrokerProcess, ca: TestCA, sasl_port: int, ssl_port: int):
        self.process, self.ca, self.sasl_port, self.ssl_port = process, ca, sasl_port, ssl_port


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bad-clients")
    ca = TestCA(workdir / "ca")
    server = ca.issue("localhost", server=True)
    sasl_port, ssl_port, plaintext, controller = (free_port() for _ in range(4))
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    log4j = workdir / "log4j.properties"
    log4j.write_text("log4j.rootLogger=TRACE, stdout\n"
                     "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
                     "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
                     "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n")
    process = BrokerProcess(workdir, overrides={
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                     f"SSL://127.0.0.1:{ssl_port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plaintext},"
                                f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                                f"SSL://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{USERS["admin"]}" {users};',
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.combined_path),
        "connections.max.idle.ms": str(IDLE_MS),
        "max.connections.per.ip": str(PER_IP_LIMIT),
    }, env={"KAFKA_LOG4J_OPTS": f"-Dlog4j.configuration=file:{log4j}"})
    process.port, process.controller_port = plaintext, controller
    process.start()
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "scram-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            SCRAM_PASSWORD.encode())]).values():
        future.result(30)
    yield Broker(process, ca, sasl_port, ssl_port)
    process.stop()


def _sasl_socket(broker: Broker, source: str = "127.0.0.2") -> socket.socket:
    # Bad clients come from 127.0.0.1; the good one from 127.0.0.2 (not held to its limit).
    return socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10,
                                    source_address=(source, 0))


def _good_client_served(broker: Broker) -> None:
    """A client authenticates (PLAIN) and is answered while the bad ones do their worst."""
    started = time.monotonic()
    with _sasl_socket(broker) as sock:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        token = b"\x00alice\x00" + USERS["alice"].encode()
        assert _call(sock, 36, 2, m.SaslAuthenticateRequest(auth_bytes=token), 2).error_code == 0
        metadata = _call(sock, 3, 12, m.MetadataRequest(topics=None), 3)
        assert metadata.brokers
    assert time.monotonic() - started < 5


def test_garbage_and_stalled_tls_handshakes(broker):
    with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10) as garbage:
        garbage.sendall(b"\x16\x03\x01\x00\x05hello" + bytes(range(256)) * 4)
        assert _closed_by_peer(garbage)
    # Half a ClientHello, then nothing: closed once idle for connections.max.idle.ms.
    stalled = socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10)
    started = time.monotonic()
    try:
        stalled.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        _good_client_served(broker)
        assert _closed_by_peer(stalled, timeout=IDLE_MS / 1000 + 10)
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9
    finally:
        stalled.close()
    # A good TLS client meanwhile and after.
    context = ssl.create_default_context(cafile=str(broker.ca.cert_path))
    with context.wrap_socket(socket.create_connection(("127.0.0.1", broker.ssl_port)),
                             server_hostname="localhost") as good:
        assert _call(good, 18, 3, m.ApiVersionsRequest(
            client_software_name="t", client_software_version="1")).error_code == 0


def test_sasl_exchange_stopped_half_way_is_closed_when_idle(broker):
    sock = _sasl_socket(broker, "127.0.0.1")
    try:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
        client = ScramClient("SCRAM-SHA-256", "scram-user", SCRAM_PASSWORD)
        first = _call(sock, 36, 2, m.SaslAuthenticateRequest(auth_bytes=client.first()), 2)
        assert first.error_code == 0
        started = time.monotonic()
        _good_client_served(broker)
        # the client never sends its final message: the broker closes it as idle
        assert _closed_by_peer(sock, timeout=IDLE_MS / 1000 + 10)
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.5
    finally:
        sock.close()
    _good_client_served(broker)


def test_wrong_passwords_and_oversized_token(broker):
    for wrong in WRONG_PASSWORDS:
        with _sasl_socket(broker, "127.0.0.1") as sock:
            assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
            response = _call(sock, 36, 2, m.SaslAuthenticateRequest(
                auth_bytes=b"\x00alice\x00" + wrong.encode()), 2)
            assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert _closed_by_peer(sock)
    with _sasl_socket(broker, "127.0.0.1") as sock:
        client = ScramClient("SCRAM-SHA-256", "scram-user", WRONG_PASSWORDS[0])
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
        first = _call(sock, 36, 2, m.SaslAuthenticateRequest(auth_bytes=client.first()), 2)
        final = _call(sock, 36, 2, m.SaslAuthenticateRequest(
            auth_bytes=client.final(bytes(first.auth_bytes))), 3)
        assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    with _sasl_socket(broker, "127.0.0.1") as sock:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        # above sasl.server.max.receive.size (524288): closed from the size prefix on,
        # before the rest (which would hold a password) is read
        sock.sendall(struct.pack(">i", 10_000_000) + b"\x00alice\x00" +
                     USERS["alice"].encode() + b"\x00" * 4096)
        assert _closed_by_peer(sock)
    _good_client_served(broker)


def test_connection_flood_over_the_per_ip_limit(broker):
    """The CI-sized flood (bench/quota_bench.py opens 10,000): those over
    max.connections.per.ip are closed; a client from another address is served meanwhile."""
    opened: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            opened.append(socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10))
        _good_client_served(broker)


        wait_until(lambda: sum(closed_by_peer_now(s) for s in opened) >= FLOOD - PER_IP_LIMIT, 60,
                   interval=0.5, message="the connections over the limit closed")
        _good_client_served(broker)
    finally:
        for sock in opened:
            sock.close()


def test_no_password_in_the_log_at_any_level(broker):
    """Last: everything above has run; the log (TRACE) holds the failures, not the secrets."""
    text = broker.process.log_path.read_text(errors="replace")
    assert "Failed authentication with" in text and " DEBUG " in text
    for secret in [*USERS.values(), *WRONG_PASSWORDS, SCRAM_PASSWORD]:
        assert secret not in text, f"{secret!r} is in the broker log"
