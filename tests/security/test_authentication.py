"""Failed authentication and bad input on secure listeners: each bad connection is answered
as Kafka answers it and closed; the broker goes on serving everyone else; no password in the
log."""

from __future__ import annotations

import socket
import ssl
import struct

import pytest

from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.scram import ScramClient
from tests.broker_process import _recv_exact, api_versions_ok, wait_until
from tests.security.conftest import PLAIN_USERS, SCRAM_USERS


def _call(sock: socket.socket, api_key: int, version: int, request, correlation_id: int = 1):
    sock.sendall(framing.encode_request(api_key, version, correlation_id, "test", request))
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    return framing.decode_response(_recv_exact(sock, size), api_key, version)[1]


def _closed_by_peer(sock: socket.socket, timeout: float = 10) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, ssl.SSLError, OSError):
        return True


def _connect(broker, listener: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10)
    if listener == "SASL_SSL":
        context = ssl.create_default_context(cafile=str(broker.ca.cert_path))
        sock = context.wrap_socket(sock, server_hostname="localhost")
    return sock


def _still_serving(broker) -> None:
    assert api_versions_ok("127.0.0.1", broker.process.port)
    with _connect(broker, "SASL_PLAINTEXT") as sock:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        token = b"\x00alice\x00" + PLAIN_USERS["alice"].encode()
        response = _call(sock, 36, 2, m.SaslAuthenticateRequest(auth_bytes=token), 2)
        assert response.error_code == ErrorCode.NONE


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_wrong_plain_password_fails_and_closes(secure_broker, listener):
    with _connect(secure_broker, listener) as sock:
        handshake = _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
        assert handshake.error_code == 0
        assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512",
                                        "OAUTHBEARER"]
        response = _call(sock, 36, 2, m.SaslAuthenticateRequest(
            auth_bytes=b"\x00alice\x00wrong-horse-battery"), 2)
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert response.error_message == "Authentication failed: Invalid username or password"
        assert _closed_by_peer(sock)
    wait_until(lambda: "Failed authentication" in secure_broker.process.log_path.read_text(),
               10, message="the failure in the broker log")
    log_text = secure_broker.process.log_path.read_text()
    for secret in ["wrong-horse-battery", *PLAIN_USERS.values(),
                   *(password for _, password in SCRAM_USERS.values())]:
        assert secret not in log_text
    _still_serving(secure_broker)


def test_wrong_scram_password_fails(secure_broker):
    with _connect(secure_broker, "SASL_PLAINTEXT") as sock:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
        client = ScramClient("SCRAM-SHA-256", "scram-256", "not-the-password")
        first = _call(sock, 36, 2, m.SaslAuthenticateRequest(auth_bytes=client.first()), 2)
        assert first.error_code == 0
        final = _call(sock, 36, 2, m.SaslAuthenticateRequest(
            auth_bytes=client.final(bytes(first.auth_bytes))), 3)
        assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert final.error_message == ("Authentication failed during authentication due to "
                                       "invalid credentials with SASL mechanism SCRAM-SHA-256")
        assert _closed_by_peer(sock)


def test_unknown_mechanism_answers_unsupported_and_closes(secure_broker):
    with _connect(secure_broker, "SASL_PLAINTEXT") as sock:
        response = _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="GSSAPI"))
        assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert "PLAIN" in response.mechanisms
        assert _closed_by_peer(sock)


def test_request_before_authentication_closes(secure_broker):
    with _connect(secure_broker, "SASL_PLAINTEXT") as sock:
        assert _call(sock, 18, 3, m.ApiVersionsRequest(
            client_software_name="t", client_software_version="1")).error_code == 0
        sock.sendall(framing.encode_request(3, 12, 2, "t", m.MetadataRequest(topics=None)))
        assert _closed_by_peer(sock)
    _still_serving(secure_broker)


def test_sasl_on_plaintext_listener_is_illegal_state(secure_broker):
    with socket.create_connection(("127.0.0.1", secure_broker.process.port), timeout=10) as sock:
        response = _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
        assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_garbage_instead_of_tls_handshake(secure_broker):
    for listener in ("SSL", "MTLS", "SASL_SSL"):
        with socket.create_connection(("127.0.0.1", secure_broker.ports[listener]),
                                      timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 8)
            assert _closed_by_peer(sock)
    wait_until(lambda: all(
        f"Failed authentication with {listener}-" in secure_broker.process.log_path.read_text()
        for listener in ("SSL", "MTLS", "SASL_SSL")), 10, message="the failed handshakes logged")
    _still_serving(secure_broker)


def test_plaintext_kafka_request_on_tls_listener_closes(secure_broker):
    with socket.create_connection(("127.0.0.1", secure_broker.ports["SSL"]),
                                  timeout=10) as sock:
        sock.sendall(framing.encode_request(18, 3, 1, "t", m.ApiVersionsRequest(
            client_software_name="t", client_software_version="1")))
        assert _closed_by_peer(sock)


def test_sasl_exchange_stopped_half_way(secure_broker):
    """A SCRAM exchange that stops after the first message: the connection stays until the
    client goes; meanwhile others authenticate."""
    sock = _connect(secure_broker, "SASL_SSL")
    try:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
        client = ScramClient("SCRAM-SHA-512", "scram-512", SCRAM_USERS["scram-512"][1])
        assert _call(sock, 36, 2, m.SaslAuthenticateRequest(auth_bytes=client.first()),
                     2).error_code == 0
        _still_serving(secure_broker)
        # A half-sent frame (size says 100 bytes, 10 come) does not stall the broker either.
        sock.sendall(struct.pack(">i", 100) + b"0123456789")
        _still_serving(secure_broker)
    finally:
        sock.close()
    _still_serving(secure_broker)


def test_oversized_sasl_token_closes(secure_broker):
    with _connect(secure_broker, "SASL_PLAINTEXT") as sock:
        assert _call(sock, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        # above sasl.server.max.receive.size (512 KiB): refused from the size prefix on
        sock.sendall(struct.pack(">i", 600_000) + b"\x00" * 1024)
        assert _closed_by_peer(sock)
    _still_serving(secure_broker)


def test_handshake_v0_with_bare_tokens(secure_broker):
    with _connect(secure_broker, "SASL_PLAINTEXT") as sock:
        assert _call(sock, 17, 0, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        token = b"\x00alice\x00" + PLAIN_USERS["alice"].encode()
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _recv_exact(sock, 4) == b"\x00\x00\x00\x00"  # an empty answer token
        metadata = _call(sock, 3, 12, m.MetadataRequest(topics=None), 5)
        assert metadata.brokers


def test_scram_credentials_described_and_deleted(secure_broker):
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion
    admin = AdminClient({"bootstrap.servers": secure_broker.plaintext})
    futures = admin.describe_user_scram_credentials(["scram-256"])
    described = {user: future.result(30) for user, future in futures.items()}
    info = described["scram-256"].scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in info] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    # deleting a credential that does not exist: RESOURCE_NOT_FOUND
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)])
    with pytest.raises(Exception) as error:
        futures["nobody"].result(30)
    assert "does not exist" in str(error.value)
