"""A listener's certificate replaced without a restart, as Kafka's dynamic listener configs:
`listener.name.<listener>.ssl.keystore.location` set through IncrementalAlterConfigs (a new
path, or the same path after the file was replaced); new connections get the new certificate,
open ones keep theirs, and a store that does not load leaves the listener as it was."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess

from tests.broker_process import ODRADEK, BrokerProcess, free_port, wait_until
from tests.security.certs import TestCA


def _served_common_name(port: int, ca_path: str) -> str:
    context = ssl.create_default_context(cafile=ca_path)
    context.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw) as sock:
        subject = sock.getpeercert()["subject"]
    return dict(pair for rdn in subject for pair in rdn)["commonName"]


def _run_tool(*args: str) -> str:
    return subprocess.run([*ODRADEK, *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout


def _set_broker_config(bootstrap: str, name: str, value: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_certificate_reloaded_without_restart(tmp_path):
    ca = TestCA(tmp_path / "ca")
    first, second, third = (ca.issue(name, server=True) for name in ("first", "second", "third"))
    ssl_port = free_port()
    broker = BrokerProcess(tmp_path, {})
    broker_port, controller = broker.port, broker.controller_port
    broker = BrokerProcess(tmp_path, {
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},SSL://127.0.0.1:{ssl_port},"
                     f"CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port},"
                                f"SSL://127.0.0.1:{ssl_port}",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(first.combined_path),
    })
    broker.port, broker.controller_port = broker_port, controller
    broker.start()
    try:
        ca_path = str(ca.cert_path)
        assert _served_common_name(ssl_port, ca_path) == "first"
        # an open TLS connection keeps working across the change
        context = ssl.create_default_context(cafile=ca_path)
        context.check_hostname = False
        held = context.wrap_socket(socket.create_connection(("127.0.0.1", ssl_port)))
        name = "listener.name.ssl.ssl.keystore.location"
        _set_broker_config(broker.bootstrap, name, str(second.combined_path))
        wait_until(lambda: _served_common_name(ssl_port, ca_path) == "second", 20,
                   message="the new certificate served")
        described = _run_tool("configs", "--bootstrap-server", broker.bootstrap, "--describe",
                              "--entity-type", "brokers", "--entity-name", "1")
        assert f"{name}={second.combined_path} sensitive=false" in described
        # the same path, its file replaced: set again, reloaded (KAFKA-14136)
        os.replace(third.combined_path, second.combined_path)
        _set_broker_config(broker.bootstrap, name, str(second.combined_path))
        wait_until(lambda: _served_common_name(ssl_port, ca_path) == "third", 20,
                   message="the replaced file served")
        # a store that does not load: logged, the listener keeps its certificate
        _set_broker_config(broker.bootstrap, name, str(tmp_path / "missing.pem"))
        wait_until(lambda: "keeping its TLS stores" in broker.log_path.read_text(), 20,
                   message="the refused update logged")
        assert _served_common_name(ssl_port, ca_path) == "third"
        assert held.getpeercert()["subject"][-1][0][1] == "first"
        held.close()
    finally:
        broker.stop()
