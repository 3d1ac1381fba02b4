"""SASL/OAUTHBEARER with unsecured JWS tokens (Kafka's default handlers): confluent-kafka,
kafka-python, aiokafka and Odradek's client; a refused token gets RFC 7628's error challenge
then SASL_AUTHENTICATION_FAILED; the session ends with the token."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security import oauthbearer
from tests.security.test_clients import _confluent_round_trip, _kafka_python_round_trip, _topic


def _call(sock: socket.socket, api_key: int, version: int, request, correlation_id: int = 1):
    sock.sendall(framing.encode_request(api_key, version, correlation_id, "t", request))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return framing.decode_response(sock.recv(size, socket.MSG_WAITALL), api_key, version)[1]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_kafka_unsecured_jwt(secure_broker, listener):
    config = {"bootstrap.servers": secure_broker.address(listener),
              "security.protocol": listener, "sasl.mechanism": "OAUTHBEARER",
              "enable.sasl.oauthbearer.unsecure.jwt": True,
              "sasl.oauthbearer.config": "principal=oauth-alice"}
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = str(secure_broker.ca.cert_path)
    assert _confluent_round_trip(config, 5) == [f"v{i}".encode() for i in range(5)]


def test_kafka_python_token_provider(secure_broker):
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return oauthbearer.unsecured_token("oauth-kp")

    config = {"bootstrap_servers": secure_broker.address("SASL_PLAINTEXT"),
              "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
              "sasl_oauth_token_provider": Provider()}
    assert _kafka_python_round_trip(config) == [f"k{i}".encode() for i in range(5)]


def test_aiokafka_token_provider(secure_broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.helpers import create_ssl_context

    class Provider(AbstractTokenProvider):
        async def token(self):
            return oauthbearer.unsecured_token("oauth-aio")

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=secure_broker.address("SASL_SSL"), security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=str(secure_broker.ca.cert_path)),
            sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider())
        await producer.start()
        try:
            metadata = await producer.send_and_wait(_topic("oauth-aio"), b"x")
            assert metadata.offset == 0
        finally:
            await producer.stop()

    asyncio.run(run())


def test_odradek_client_unsecured_jwt(secure_broker):
    from odradek.client import Admin
    for settings in ({"sasl.oauthbearer.config": "principal=oauth-odr"},
                     {"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                                          "OAuthBearerLoginModule required "
                                          'unsecuredLoginStringClaim_sub="oauth-odr";'}):
        with Admin({"bootstrap.servers": secure_broker.address("SASL_PLAINTEXT"),
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                    **settings}) as admin:
            assert admin.describe_cluster().nodes


def test_refused_tokens(secure_broker):
    """An expired token, a signed one, garbage: the error challenge, then the failure."""
    now = time.time()
    expired = oauthbearer.unsecured_token("late", lifetime_s=10, now_s=now - 3600)
    signed = oauthbearer.unsecured_token("x")[:-1] + ".c2ln"
    for token in (expired, signed, "not-a-jws"):
        with socket.create_connection(("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"]),
                                      timeout=10) as sock:
            assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="OAUTHBEARER")).error_code == 0
            challenge = _call(sock, 36, 2, m.SaslAuthenticateRequest(
                auth_bytes=oauthbearer.client_initial_response(token)), 2)
            assert challenge.error_code == 0
            assert bytes(challenge.auth_bytes) == b'{"status":"invalid_token"}'
            failed = _call(sock, 36, 2, m.SaslAuthenticateRequest(auth_bytes=b"\x01"), 3)
            assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert failed.error_message == '{"status":"invalid_token"}'
            assert sock.recv(1) == b""  # closed


def test_session_lifetime_is_the_token_lifetime(secure_broker):
    with socket.create_connection(("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"]),
                                  timeout=10) as sock:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="OAUTHBEARER")).error_code == 0
        response = _call(sock, 36, 2, m.SaslAuthenticateRequest(
            auth_bytes=oauthbearer.client_initial_response(
                oauthbearer.unsecured_token("short", lifetime_s=60))), 2)
        assert response.error_code == 0 and bytes(response.auth_bytes) == b""
        assert 50_000 < response.session_lifetime_ms <= 60_000


def test_unsecured_validator_rules():
    validator = oauthbearer.UnsecuredValidator(
        {"unsecuredValidatorRequiredScope": "read write",
         "unsecuredValidatorAllowableClockSkewMs": "1000"}, now_ms=lambda: 1_000_000_000)
    ok = oauthbearer.unsecured_token("bob", scope=["read", "write", "x"], now_s=1_000_000)
    assert validator.validate(ok) == ("bob", 1_000_000_000 + 3_600_000)
    with pytest.raises(ValueError) as error:
        validator.validate(oauthbearer.unsecured_token("bob", scope=["read"], now_s=1_000_000))
    assert error.value.status == "insufficient_scope" and error.value.scope == "read write"
    future = oauthbearer.unsecured_token("bob", scope=["read", "write"], now_s=1_000_002)
    with pytest.raises(ValueError, match="Issued At"):
        validator.validate(future)
    server = oauthbearer.OAuthBearerServer(oauthbearer.UnsecuredValidator())
    assert server.evaluate(oauthbearer.client_initial_response(
        oauthbearer.unsecured_token("carol"), authorization_id="carol")) == b""
    assert server.complete and server.username == "carol"
