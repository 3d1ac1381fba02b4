"""The CLI tools take the client's security settings from their config files
(`--command-config`, `--producer.config`, `--consumer.config`), as Kafka's scripts do."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

from odradek.client import Admin
from odradek.config.properties import load_properties
from tests.broker_process import ODRADEK, BrokerProcess, free_port, wait_until
from tests.security.conftest import SCRAM_USERS
from tools.secure_example import make_example

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*ODRADEK, *args], input=stdin, capture_output=True, text=True,
                          check=False, timeout=120, env=dict(os.environ))


def test_tools_over_sasl_ssl_with_scram(secure_broker, tmp_path):
    _, password = SCRAM_USERS["scram-512"]
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="scram-512" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure_broker.ca.cert_path}\n")
    bootstrap = secure_broker.address("SASL_SSL")
    topic = f"tools-{uuid.uuid4().hex[:8]}"
    created = _run("topics", "--bootstrap-server", bootstrap, "--command-config", str(config),
                   "--create", "--topic", topic, "--partitions", "1")
    assert created.returncode == 0, created.stderr
    listed = _run("topics", "--bootstrap-server", bootstrap, "--command-config", str(config),
                  "--list")
    assert topic in listed.stdout.split()
    produced = _run("console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--producer.config", str(config), stdin="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _run("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--consumer.config", str(config), "--from-beginning",
                    "--max-messages", "2", "--timeout-ms", "20000")
    assert consumed.stdout.split() == ["one", "two"], consumed.stderr
    # a wrong password: the tool fails with Kafka's authentication error
    config.write_text(config.read_text().replace(password, "wrong"))
    failed = _run("topics", "--bootstrap-server", bootstrap, "--command-config", str(config),
                  "--list")
    assert failed.returncode != 0
    assert "SASL" in failed.stderr or "Authentication" in failed.stderr, failed.stderr


def _scram_client_config(secure_broker, path: Path) -> Path:
    _, password = SCRAM_USERS["scram-512"]
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="scram-512" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure_broker.ca.cert_path}\n")
    return path


def test_every_broker_tool_takes_the_security_settings(secure_broker, tmp_path):
    """Each tool that talks to brokers, given only the SASL_SSL listener, connects with the
    settings of its config file option (Kafka's name for that tool) and does its work."""
    config = str(_scram_client_config(secure_broker, tmp_path / "client.properties"))
    bootstrap = secure_broker.address("SASL_SSL")
    topic = f"tools-all-{uuid.uuid4().hex[:8]}"
    offsets_json = tmp_path / "offsets.json"
    offsets_json.write_text(json.dumps(
        {"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 1}]}))
    server = ("--bootstrap-server", bootstrap)
    steps = [
        ("topics", *server, "--command-config", config, "--create", "--topic", topic,
         "--partitions", "1"),
        ("producer-perf-test", "--topic", topic, "--num-records", "50", "--record-size", "100",
         "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
         "--producer.config", config),
        ("consumer-perf-test", *server, "--consumer.config", config, "--topic", topic,
         "--messages", "50", "--timeout", "30000"),
        ("get-offsets", *server, "--command-config", config, "--topic", topic),
        ("configs", *server, "--command-config", config, "--describe", "--entity-type",
         "topics", "--entity-name", topic),
        ("consumer-groups", *server, "--command-config", config, "--list"),
        ("log-dirs", *server, "--command-config", config, "--describe", "--topic-list", topic),
        ("delete-records", *server, "--command-config", config, "--offset-json-file",
         str(offsets_json)),
        ("transactions", *server, "--command-config", config, "list"),
        ("reassign-partitions", *server, "--command-config", config, "--list"),
        ("leader-election", *server, "--admin.config", config, "--election-type", "preferred",
         "--topic", topic, "--partition", "0"),
        ("metadata-quorum", *server, "--command-config", config, "describe", "--status"),
        ("features", *server, "--command-config", config, "describe"),
    ]
    outputs = {}
    for step in steps:
        done = _run(*step)
        assert done.returncode == 0, (step[0], done.stdout, done.stderr)
        outputs[step[0]] = done.stdout
    assert f"{topic}:0:50" in outputs["get-offsets"]
    assert "50 records sent" in outputs["producer-perf-test"]
    assert "low_watermark: 1" in outputs["delete-records"]
    assert "LeaderId:" in outputs["metadata-quorum"]
    assert "metadata.version" in outputs["features"]


def test_configs_tool_manages_scram_users(secure_broker):
    """`odradek configs --entity-type users` as kafka-configs.sh: SCRAM credentials added,
    described, used, deleted."""
    bootstrap = secure_broker.plaintext
    user = f"erin-{uuid.uuid4().hex[:6]}"
    added = _run("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "users",
                 "--entity-name", user, "--add-config",
                 "SCRAM-SHA-256=[iterations=8192,password=erin-pw],"
                 "SCRAM-SHA-512=[password=erin-pw]")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == f"Completed updating config for user {user}."
    described = _run("configs", "--bootstrap-server", bootstrap, "--describe",
                     "--entity-type", "users", "--entity-name", user)
    assert described.stdout.strip() == (
        f"SCRAM credential configs for user-principal '{user}' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    with Admin({"bootstrap.servers": secure_broker.address("SASL_PLAINTEXT"),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": user, "sasl.password": "erin-pw"}) as admin:
        assert admin.describe_cluster().nodes
    deleted = _run("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type",
                   "users", "--entity-name", user, "--delete-config", "SCRAM-SHA-256")
    assert deleted.returncode == 0, deleted.stderr
    described = _run("configs", "--bootstrap-server", bootstrap, "--describe",
                     "--entity-type", "users", "--entity-name", user)
    assert described.stdout.strip().endswith("are SCRAM-SHA-512=iterations=4096")
    bad = _run("configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "users",
               "--entity-name", user, "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]")
    assert bad.returncode != 0 and "Too few iterations" in bad.stderr


def test_storage_format_add_scram(tmp_path):
    """`odradek storage format --add-scram` (kafka-storage.sh's): the first active controller
    writes the credentials with metadata.version, so a SCRAM client authenticates on a
    cluster nobody has altered yet."""
    sasl_port = free_port()
    broker = BrokerProcess(tmp_path, {})
    plain, controller = broker.port, broker.controller_port
    broker = BrokerProcess(tmp_path, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                     f"CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},"
                                f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    })
    broker.port, broker.controller_port = plain, controller
    cluster_id = _run("storage", "random-uuid").stdout.strip()
    formatted = _run("storage", "format", "--config", str(broker.config_path), "--cluster-id",
                     cluster_id, "--add-scram",
                     'SCRAM-SHA-512=[name=admin,password="admin secret",iterations=8192]')
    assert formatted.returncode == 0, formatted.stderr
    broker.start()
    try:
        with Admin({"bootstrap.servers": f"127.0.0.1:{sasl_port}",
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "admin", "sasl.password": "admin secret"}) as admin:
            described = admin.describe_user_scram_credentials(["admin"])
        assert [(i.mechanism, i.iterations) for i in described["admin"]] == [
            ("SCRAM-SHA-512", 8192)]
    finally:
        broker.stop()
    bad = _run("storage", "format", "--config", str(broker.config_path), "--cluster-id",
               cluster_id, "--ignore-formatted", "--add-scram", "SCRAM-SHA-256=[password=x]")
    assert bad.returncode != 0 and "name" in bad.stderr


def test_secure_example(tmp_path):
    """config/secure.properties with tools/secure_example.py's files, formatted with the
    example's --add-scram: a tool connects with the generated client.properties."""
    port, controller = free_port(), free_port()
    directory = tmp_path / "odradek-secure"
    client_properties = make_example(directory, bootstrap=f"localhost:{port}")
    props = {key: value.replace("./odradek-secure", str(directory))
             .replace("localhost:9092", f"localhost:{port}")
             .replace("localhost:9093", f"localhost:{controller}")
             for key, value in load_properties(REPO / "config" / "secure.properties").items()}
    props["log.dirs"] = str(tmp_path / "data")
    broker = BrokerProcess(tmp_path, props)
    broker.port, broker.controller_port, broker.host = port, controller, "localhost"
    cluster_id = _run("storage", "random-uuid").stdout.strip()
    formatted = _run("storage", "format", "--config", str(broker.config_path), "--cluster-id",
                     cluster_id, "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]")
    assert formatted.returncode == 0, formatted.stderr
    # The readiness probe speaks plaintext ApiVersions: on this node every listener is secure.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(broker.log_path, "ab") as log_file:
        broker.proc = subprocess.Popen([*ODRADEK, "server-start", str(broker.config_path)],
                                       stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                       cwd=tmp_path)
    try:
        def listed() -> bool:
            assert broker.proc.poll() is None, broker.log_tail()
            result = _run("topics", "--bootstrap-server", f"localhost:{port}",
                          "--command-config", str(client_properties), "--create", "--topic",
                          "secure-example")
            return result.returncode == 0
        wait_until(listed, 60, interval=0.5, message="the secure example to serve")
        result = _run("topics", "--bootstrap-server", f"localhost:{port}", "--command-config",
                      str(client_properties), "--list")
        assert "secure-example" in result.stdout.split()
        # ACLs are on (without an authorizer the ACL APIs answer SECURITY_DISABLED)
        granted = _run("acls", "--bootstrap-server", f"localhost:{port}", "--command-config",
                       str(client_properties), "--add", "--allow-principal", "User:reader",
                       "--consumer", "--topic", "secure-example", "--group", "readers")
        assert granted.returncode == 0, granted.stderr
        assert "User:reader" in granted.stdout
    finally:
        broker.stop()
