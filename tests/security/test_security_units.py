"""The sans-I/O pieces: JAAS lines, the certificate principal and its mapping rules, SCRAM
(both sides, RFC 7677's example), PLAIN, the controller's credential checks, TLS contexts."""

from __future__ import annotations

import base64
import ssl

import pytest

from odradek.config.types import ConfigError
from odradek.controller.scram_control import alter_user_scram_credentials
from odradek.metadata.image import EMPTY_IMAGE, image_records, replay_records
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security import jaas, scram
from odradek.security.principal import SslPrincipalMapper, certificate_principal, format_subject
from odradek.security.tls import client_context, openssl_cipher_names, server_context
from tests.security.certs import TestCA


def test_jaas_parser():
    modules = jaas.parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="a\\"b" user_alice=\'alice-secret\' /* c */ x=word;'
        ' other.Module optional;')
    assert modules[0].options == {"username": "admin", "password": 'a"b',
                                  "user_alice": "alice-secret", "x": "word"}
    assert (modules[1].name, modules[1].flag, modules[1].options) == (
        "other.Module", "optional", {})
    for bad in ["", "Module required", "Module always;", 'Module required a="b']:
        with pytest.raises(ConfigError):
            jaas.parse_jaas_config(bad)


def test_principal_mapping_rules_as_kafka():
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, DEFAULT")
    assert mapper.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa,ST=CA,C=US") == \
        "duke@javasoft"
    assert mapper.name("cn=duke,ou=javasoft,dc=example,dc=com") == "DUKE@JAVASOFT"
    assert mapper.name("OU=unmatched") == "OU=unmatched"  # DEFAULT
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=x")
    with pytest.raises(ConfigError):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/, junk")


def test_certificate_subject_formatted_as_rfc2253(tmp_path):
    ca = TestCA(tmp_path)
    issued = ca.issue("alice,jr", unit="Clients")
    decoded = ssl._ssl._test_decode_cert(str(issued.cert_path))  # getpeercert()'s form
    assert format_subject(decoded["subject"]) == "CN=alice\\,jr,OU=Clients,O=Odradek Test,C=US"
    assert certificate_principal(decoded, SslPrincipalMapper("DEFAULT")) == \
        "User:CN=alice\\,jr,OU=Clients,O=Odradek Test,C=US"
    assert certificate_principal({}, SslPrincipalMapper()) == "User:ANONYMOUS"


def test_scram_rfc7677_example(monkeypatch):
    """RFC 7677's SCRAM-SHA-256 exchange (user, pencil, fixed nonces): the same messages."""
    monkeypatch.setattr(scram.secrets, "token_urlsafe",
                        lambda _n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram.credential_from_password("SCRAM-SHA-256", "pencil", iterations=4096,
                                                salt=salt)
    server = scram.ScramServer("SCRAM-SHA-256", lambda user: credential if user == "user" else None)
    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    nonce = server_first.decode().split(",")[0][2:]
    assert nonce.startswith("rOprNGfwEbeRWgbNEkqO")
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil")
    client._nonce = "rOprNGfwEbeRWgbNEkqO"
    client._client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.evaluate(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify(server_final)
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_rejects_wrong_password_and_unknown_user(mechanism):
    credential = scram.credential_from_password(mechanism, "right")
    server = scram.ScramServer(mechanism, {"bob": credential}.get)
    client = scram.ScramClient(mechanism, "bob", "wrong")
    with pytest.raises(scram.SaslFailure) as failure:
        server.evaluate(client.final(server.evaluate(client.first())))
    assert "wrong" not in str(failure.value) and failure.value.client_message is None
    with pytest.raises(scram.SaslFailure):
        scram.ScramServer(mechanism, {}.get).evaluate(
            scram.ScramClient(mechanism, "nobody", "x").first())


def test_plain_server_messages():
    server = scram.PlainServer({"alice": "secret"})
    assert server.evaluate(scram.plain_client_token("alice", "secret")) == b""
    assert server.complete and server.username == "alice"
    with pytest.raises(scram.SaslFailure) as failure:
        scram.PlainServer({"alice": "secret"}).evaluate(b"\x00alice\x00nope")
    assert failure.value.client_message == "Authentication failed: Invalid username or password"
    assert "nope" not in str(failure.value)
    with pytest.raises(scram.SaslFailure):
        scram.PlainServer({}).evaluate(b"no-separators")


def test_controller_credential_checks_and_image_round_trip():
    U = m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    D = m.AlterUserScramCredentialsRequest.ScramCredentialDeletion
    salted = scram.salted_password("SCRAM-SHA-256", "pw", b"salt", 4096)
    results, records = alter_user_scram_credentials(EMPTY_IMAGE, [D(name="ghost", mechanism=1)], [
        U(name="ok", mechanism=1, iterations=4096, salt=b"salt", salted_password=salted),
        U(name="few", mechanism=1, iterations=100, salt=b"s", salted_password=salted),
        U(name="many", mechanism=2, iterations=20000, salt=b"s", salted_password=salted),
        U(name="bad-mech", mechanism=9, iterations=4096, salt=b"s", salted_password=salted),
        # a user is altered once per request, whatever the mechanism (Kafka's rule)
        U(name="twice", mechanism=1, iterations=4096, salt=b"s", salted_password=salted),
        U(name="twice", mechanism=2, iterations=4096, salt=b"s", salted_password=salted),
        U(name="", mechanism=1, iterations=4096, salt=b"s", salted_password=salted)])
    errors = {user: result.error for user, result in results.items()}
    assert errors == {"ghost": ErrorCode.RESOURCE_NOT_FOUND, "ok": ErrorCode.NONE,
                      "few": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                      "many": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                      "bad-mech": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                      "twice": ErrorCode.DUPLICATE_RESOURCE,
                      "": ErrorCode.UNACCEPTABLE_CREDENTIAL}
    assert results["twice"].message == "A user credential cannot be altered twice in the same request"
    assert next(iter(results)) == "ok"  # successes first, then failures (Kafka's order)
    image = replay_records(records)
    stored = image.scram_credentials["ok"][1]
    assert stored == scram.credential_from_salted_password("SCRAM-SHA-256", salted, b"salt", 4096)
    assert replay_records(image_records(image)).scram_credentials == image.scram_credentials
    removed = replay_records([m.RemoveUserScramCredentialRecord(name="ok", mechanism=1)],
                             base=image)
    assert "ok" not in removed.scram_credentials


def test_tls_contexts(tmp_path):
    ca = TestCA(tmp_path)
    server = ca.issue("localhost", server=True, password=b"pw")
    settings = {"ssl.keystore.location": str(server.combined_path), "ssl.key.password": "pw",
                "ssl.truststore.location": str(ca.cert_path),
                "ssl.enabled.protocols": "TLSv1.3",
                "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}
    context = server_context(settings.get, client_auth="required")
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError):
        server_context({"ssl.keystore.location": str(server.combined_path)}.get)  # no password
    with pytest.raises(ConfigError):
        server_context({}.get)
    assert openssl_cipher_names(["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                                 "TLS_AES_128_GCM_SHA256"]) == "ECDHE-RSA-AES256-GCM-SHA384"
    client = client_context({"ssl.ca.location": str(ca.cert_path),
                             "ssl.endpoint.identification.algorithm": ""}.get)
    assert client.check_hostname is False
    assert client_context({"ssl.ca.location": str(ca.cert_path)}.get).check_hostname


def test_peer_security_settings():
    """How a node reaches its peers' listener: SASL credentials from that listener's JAAS
    config for the inter-broker mechanism; an unsupported mechanism or missing credentials
    fail at startup."""
    from odradek.server.authentication import peer_client_security
    from odradek.server.config import KafkaConfig

    def config(**extra: str) -> KafkaConfig:
        return KafkaConfig({
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": "1@localhost:9093",
            "listeners": "INTERNAL://localhost:9092,CONTROLLER://localhost:9093",
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL", "controller.listener.names": "CONTROLLER",
            "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
            **extra}, log_unused=False)

    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="broker" password="pw" user_broker="pw";')
    security = peer_client_security(config(**{
        "listener.name.internal.plain.sasl.jaas.config": jaas}), "INTERNAL", "SASL_PLAINTEXT",
        "PLAIN")
    assert (security.sasl.mechanism, security.sasl.username, security.sasl.password) == (
        "PLAIN", "broker", "pw")
    assert security.ssl_context is None
    with pytest.raises(ConfigError, match="credentials"):
        peer_client_security(config(), "INTERNAL", "SASL_PLAINTEXT", "PLAIN")
    with pytest.raises(ConfigError, match="not supported"):
        peer_client_security(config(), "INTERNAL", "SASL_PLAINTEXT", "GSSAPI")
    assert peer_client_security(config(), "CONTROLLER", "PLAINTEXT", "GSSAPI").sasl is None


def test_reauthentication_keeps_principal_and_mechanism():
    """KIP-368 on the broker's side: a re-authentication may not change the principal or the
    mechanism, and starts at most once a second (Kafka's rules)."""
    from odradek.clock import ManualClock
    from odradek.server.authentication import ListenerSecurity

    clock = ManualClock()
    security = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT",
                                sasl_mechanisms=["PLAIN", "SCRAM-SHA-256"],
                                plain_users={"alice": "a", "bob": "b"},
                                scram_credentials=lambda _mechanism: {}.get,
                                reauth_ms=lambda _mechanism: 60_000, clock=clock.monotonic)

    def authenticated_session():
        session = security.new_session()
        session.handshake("PLAIN", 1)
        response = session.authenticate(scram.plain_client_token("alice", "a"))
        assert response.error_code == 0 and response.session_lifetime_ms == 60_000
        return session

    session = authenticated_session()
    assert session.begin_reauthentication()
    session.handshake("PLAIN", 1)
    failed = session.authenticate(scram.plain_client_token("bob", "b"))
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failed.error_message == ("Cannot change principals during re-authentication from "
                                    "User.alice: User.bob")

    session = authenticated_session()
    assert session.begin_reauthentication()
    session.handshake("SCRAM-SHA-256", 1)
    failed = session.authenticate(b"n,,n=alice,r=abc")
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "not supported for re-authentication of mechanism 'PLAIN'" in failed.error_message

    session = authenticated_session()
    assert session.begin_reauthentication()
    session.handshake("PLAIN", 1)
    assert session.authenticate(scram.plain_client_token("alice", "a")).error_code == 0
    assert not session.begin_reauthentication()  # less than a second after the last one
    clock.advance(1000)
    assert session.begin_reauthentication()
    clock.advance(61_000)
    session.handshake("PLAIN", 1)
    session.authenticate(scram.plain_client_token("alice", "a"))
    assert not session.expired()
    clock.advance(60_000)
    assert session.expired()
