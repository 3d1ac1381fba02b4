"""The principal on each request's context (what an authorizer will read): from the client
certificate through `ssl.principal.mapping.rules` on SSL listeners, `User:<name>` after SASL,
ANONYMOUS otherwise. An in-process NetworkServer whose dispatcher records the principals."""

from __future__ import annotations

import asyncio

import pytest

from odradek.client.connection import Connection
from odradek.client.errors import KafkaConnectionError
from odradek.client.security import SaslCredentials
from odradek.clock import ManualClock
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security import scram
from odradek.security.principal import SslPrincipalMapper
from odradek.security.tls import client_context, server_context
from odradek.server.authentication import ListenerSecurity
from odradek.server.handlers import sasl
from odradek.server.network import ListenerConfig, NetworkServer
from tests.security.certs import TestCA


def _recording_server(principals: list[tuple[int, str]]) -> NetworkServer:
    def dispatch(ctx, request):
        api_key = ctx.header.request_api_key
        principals.append((api_key, ctx.principal))
        if api_key == 17:
            return sasl.sasl_handshake(ctx, request)
        if api_key == 36:
            return sasl.sasl_authenticate(ctx, request)
        if api_key == 18:
            return m.ApiVersionsResponse(error_code=0, api_keys=[
                m.ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, low, high in ((3, 0, 12), (17, 0, 1), (18, 0, 3), (36, 0, 2))])
        return m.MetadataResponse(brokers=[], topics=[], cluster_id="c", controller_id=-1)

    return NetworkServer(dispatcher=dispatch, unsupported_version_response=lambda h: None)


async def _serve_and_call(listener: ListenerConfig, principals, **connection_options) -> None:
    server = _recording_server(principals)
    await server.start([listener])
    try:
        connection = await Connection.open("localhost", server.bound_ports[listener.name],
                                           **connection_options)
        try:
            await connection.send(m.MetadataRequest(topics=None), api_version=12)
        finally:
            await connection.close()
    finally:
        await server.stop(grace_s=1)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = TestCA(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("localhost", server=True), ca.issue("Bob", unit="Clients")


@pytest.mark.parametrize("rules,expected", [
    ("DEFAULT", "User:CN=Bob,OU=Clients,O=Odradek Test,C=US"),
    ("RULE:^CN=(.*?),OU=Clients.*$/$1/L,DEFAULT", "User:bob"),
])
def test_ssl_principal_from_the_client_certificate(pki, rules, expected):
    ca, server_cert, client_cert = pki
    security = ListenerSecurity(
        "SSL", "SSL", principal_mapper=SslPrincipalMapper(rules),
        ssl_context=server_context({"ssl.keystore.location": str(server_cert.combined_path),
                                    "ssl.truststore.location": str(ca.cert_path)}.get,
                                   client_auth="requested"))
    client = client_context({"ssl.ca.location": str(ca.cert_path),
                             "ssl.certificate.location": str(client_cert.cert_path),
                             "ssl.key.location": str(client_cert.key_path)}.get)
    principals: list[tuple[int, str]] = []
    asyncio.run(_serve_and_call(ListenerConfig("SSL", "127.0.0.1", 0, "SSL", security),
                                principals, ssl_context=client))
    assert principals == [(18, expected), (3, expected)]
    # without a certificate (client auth requested, not required): ANONYMOUS
    principals.clear()
    anonymous = client_context({"ssl.ca.location": str(ca.cert_path)}.get)
    asyncio.run(_serve_and_call(ListenerConfig("SSL", "127.0.0.1", 0, "SSL", security),
                                principals, ssl_context=anonymous))
    assert principals == [(18, "User:ANONYMOUS"), (3, "User:ANONYMOUS")]


def test_hostname_verification_is_on_by_default(pki):
    ca = pki[0]
    server_cert = ca.issue("elsewhere", server=True, host_names=("broker.example",))
    security = ListenerSecurity("SSL", "SSL", ssl_context=server_context(
        {"ssl.keystore.location": str(server_cert.combined_path)}.get))
    principals: list[tuple[int, str]] = []

    async def connect(host: str, identification: str) -> None:
        server = _recording_server(principals)
        await server.start([ListenerConfig("SSL", "127.0.0.1", 0, "SSL", security)])
        try:
            context = client_context({"ssl.ca.location": str(ca.cert_path),
                                      "ssl.endpoint.identification.algorithm":
                                          identification}.get)
            connection = await Connection.open(host, server.bound_ports["SSL"],
                                               ssl_context=context)
            await connection.close()
        finally:
            await server.stop(grace_s=1)

    # The certificate names broker.example only.
    with pytest.raises(KafkaConnectionError, match="certificate"):
        asyncio.run(connect("127.0.0.1", "https"))
    asyncio.run(connect("127.0.0.1", ""))  # empty: no host name check


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_principal(mechanism):
    credentials = {"carol": scram.credential_from_password(mechanism, "pw")} \
        if mechanism != "PLAIN" else {}
    security = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT",
                                sasl_mechanisms=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                                plain_users={"carol": "pw"},
                                scram_credentials=lambda _mechanism: credentials.get)
    principals: list[tuple[int, str]] = []
    asyncio.run(_serve_and_call(
        ListenerConfig("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT", security), principals,
        sasl=SaslCredentials(mechanism, "carol", "pw")))
    rounds = 1 if mechanism == "PLAIN" else 2
    assert principals == [(18, "User:ANONYMOUS"), (17, "User:ANONYMOUS"),
                          *[(36, "User:ANONYMOUS")] * rounds, (3, "User:carol")]
    with pytest.raises(KafkaError) as failure:
        asyncio.run(_serve_and_call(
            ListenerConfig("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT", security), [],
            sasl=SaslCredentials(mechanism, "carol", "wrong")))
    assert failure.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED


def _scram_listener(lifetime_ms: int, **options) -> ListenerConfig:
    credentials = {"carol": scram.credential_from_password("SCRAM-SHA-256", "pw")}
    security = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT",
                                sasl_mechanisms=["SCRAM-SHA-256"],
                                scram_credentials=lambda _mechanism: credentials.get,
                                reauth_ms=lambda _mechanism: lifetime_ms, **options)
    return ListenerConfig("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT", security)


def test_client_reauthenticates_before_the_session_ends():
    """KIP-368: the broker gives the session a lifetime in SaslAuthenticate; Odradek's client
    re-authenticates on the same connection before it ends and keeps working after it."""
    principals: list[tuple[int, str]] = []

    async def run() -> None:
        # (above 1 s: Kafka takes at most one re-authentication a second)
        listener = _scram_listener(1500)
        server = _recording_server(principals)
        await server.start([listener])
        try:
            connection = await Connection.open(
                "127.0.0.1", server.bound_ports[listener.name],
                sasl=SaslCredentials("SCRAM-SHA-256", "carol", "pw"))
            try:
                async with asyncio.timeout(10):
                    # two re-authentications: the first session and the second one ended
                    while [key for key, _ in principals].count(17) < 3:
                        await connection.send(m.MetadataRequest(topics=None), api_version=12)
                        await asyncio.sleep(0.05)
                assert not connection.closed
            finally:
                await connection.close()
        finally:
            await server.stop(grace_s=1)

    asyncio.run(run())
    assert {principal for key, principal in principals if key == 3} == {"User:carol"}


def test_expired_session_is_closed_at_the_next_request():
    """A client that does not re-authenticate: the first request after the session's end
    closes the connection (Kafka's expired-channel rule); a re-authentication starts only
    when the session has a lifetime."""
    clock = ManualClock()

    async def run() -> None:
        listener = _scram_listener(5000, clock=clock.monotonic)
        server = _recording_server([])
        await server.start([listener])
        try:
            connection = Connection("127.0.0.1", server.bound_ports[listener.name],
                                    sasl=SaslCredentials("SCRAM-SHA-256", "carol", "pw"))
            await connection.connect()
            connection._reauth_timer.cancel()  # a client without KIP-368
            await connection.send(m.MetadataRequest(topics=None), api_version=12)
            clock.advance(5001)
            with pytest.raises(KafkaConnectionError):
                await connection.send(m.MetadataRequest(topics=None), api_version=12)
        finally:
            await server.stop(grace_s=1)

    asyncio.run(run())


def test_no_reauthentication_without_a_session_lifetime():
    principals: list[tuple[int, str]] = []

    async def run() -> m.SaslHandshakeResponse:
        listener = _scram_listener(0)
        server = _recording_server(principals)
        await server.start([listener])
        try:
            connection = await Connection.open(
                "127.0.0.1", server.bound_ports[listener.name],
                sasl=SaslCredentials("SCRAM-SHA-256", "carol", "pw"))
            try:
                return await connection.send(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"),
                                             api_version=1)
            finally:
                await connection.close()
        finally:
            await server.stop(grace_s=1)

    assert asyncio.run(run()).error_code == ErrorCode.ILLEGAL_SASL_STATE
