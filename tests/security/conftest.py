"""A broker with every kind of listener, for the security tests: PLAINTEXT (readiness, admin),
SSL (client certificate requested), MTLS (SSL with ssl.client.auth=required and an inline PEM
key store), SASL_PLAINTEXT and SASL_SSL (PLAIN users from JAAS, SCRAM users from metadata)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess, free_port
from tests.security.certs import Issued, TestCA

PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}
REAUTH_MS = 3000
SCRAM_USERS = {"scram-256": ("SCRAM-SHA-256", "scram-pass-256"),
               "scram-512": ("SCRAM-SHA-512", "scram-pass-512")}


def _jaas_plain() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="admin" password="admin-secret" {users};')


def _escape_property(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


@dataclass
class SecureBroker:
    process: BrokerProcess
    ca: TestCA
    client: Issued
    ports: dict[str, int] = field(default_factory=dict)

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def plaintext(self) -> str:
        return self.process.bootstrap


@pytest.fixture(scope="package")
def secure_broker(tmp_path_factory) -> SecureBroker:
    workdir: Path = tmp_path_factory.mktemp("secure-broker")
    ca = TestCA(workdir / "ca")
    server = ca.issue("localhost", server=True, password=b"key-pass")
    mtls_server = ca.issue("broker-mtls", server=True)
    client = ca.issue("alice", unit="Clients")
    ports = {name: free_port() for name in ("SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")}
    plaintext, controller = free_port(), free_port()
    listeners = {"PLAINTEXT": plaintext, **ports}
    overrides = {
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items())
                     + f",CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": ",".join(f"{name}://127.0.0.1:{port}"
                                         for name, port in listeners.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,"
                                          "MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server.combined_path),
        "ssl.key.password": "key-pass",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.cert_path),
        "listener.name.ssl.ssl.client.auth": "requested",
        "listener.name.ssl.ssl.principal.mapping.rules":
            "RULE:^CN=(.*?),OU=Clients,.*$/$1/L,DEFAULT",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.keystore.location": "",
        "listener.name.mtls.ssl.key.password": "",
        "listener.name.mtls.ssl.keystore.certificate.chain":
            _escape_property(mtls_server.cert_pem),
        "listener.name.mtls.ssl.keystore.key": _escape_property(mtls_server.key_pem),
        "listener.name.mtls.ssl.truststore.location": "",
        "listener.name.mtls.ssl.truststore.certificates": _escape_property(ca.cert_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas_plain(),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas_plain(),
        # KIP-368 for one listener and mechanism (only clients that re-authenticate use it)
        "listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms": str(REAUTH_MS),
    }
    process = BrokerProcess(workdir, overrides=overrides)
    # The readiness probe and `bootstrap` use these (our overrides replaced its own ports).
    process.port, process.controller_port = plaintext, controller
    process.start()
    broker = SecureBroker(process, ca, client, ports)
    _create_scram_users(broker)
    yield broker
    process.stop()


def _create_scram_users(broker: SecureBroker) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    admin = AdminClient({"bootstrap.servers": broker.plaintext})
    upsertions = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")),
                                      8192), password.encode())
        for user, (mechanism, password) in SCRAM_USERS.items()]
    for future in admin.alter_user_scram_credentials(upsertions).values():
        future.result(30)
