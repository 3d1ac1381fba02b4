"""`odradek configs` for client quotas, as kafka-configs.sh with --bootstrap-server: users,
clients (alone and together), their defaults, ips; Kafka's output and errors."""

from __future__ import annotations

import uuid

import pytest

from odradek.cli import configs


def run_tool(capsys, *args: str) -> tuple[int, str, str]:
    code = configs.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def name() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def test_client_quotas_alter_and_describe(odradek_broker, capsys, name, tmp_path):
    bootstrap = ["--bootstrap-server", odradek_broker.bootstrap]
    command_config = tmp_path / "client.properties"
    command_config.write_text("client.id=quota-tool\n")
    code, out, err = run_tool(capsys, *bootstrap, "--command-config", str(command_config),
                              "--alter", "--add-config",
                              "producer_byte_rate=1024,consumer_byte_rate=2048",
                              "--entity-type", "clients", "--entity-name", name)
    assert (code, err) == (0, "")
    assert out == f"Completed updating config for client {name}.\n"
    code, out, _ = run_tool(capsys, *bootstrap, "--describe", "--entity-type", "clients",
                            "--entity-name", name)
    assert out == (f"Quota configs for client-id '{name}' are producer_byte_rate=1024.0, "
                   "consumer_byte_rate=2048.0\n") or out == (
        f"Quota configs for client-id '{name}' are consumer_byte_rate=2048.0, "
        "producer_byte_rate=1024.0\n")

    # users and clients together; the default client of a user
    code, out, err = run_tool(capsys, *bootstrap, "--alter", "--add-config",
                              "request_percentage=50", "--entity-type", "users",
                              "--entity-name", name, "--entity-type", "clients",
                              "--entity-default")
    assert (code, err) == (0, "")
    assert out == f"Completed updating config for user {name}.\n"
    code, out, _ = run_tool(capsys, *bootstrap, "--describe", "--entity-type", "users",
                            "--entity-name", name, "--entity-type", "clients",
                            "--entity-default")
    assert out == (f"Quota configs for user-principal '{name}', the default client-id are "
                   "request_percentage=50.0\n")

    # the default user
    code, out, err = run_tool(capsys, *bootstrap, "--alter", "--add-config",
                              "producer_byte_rate=10000000", "--entity-type", "users",
                              "--entity-default")
    assert (code, err) == (0, "")
    assert out == "Completed updating default config for users in the cluster.\n"
    code, out, _ = run_tool(capsys, *bootstrap, "--describe", "--entity-type", "users",
                            "--entity-default")
    assert out == "Quota configs for the default user-principal are producer_byte_rate=1.0E7\n"

    # deleting
    for args in (["--entity-type", "clients", "--entity-name", name, "--delete-config",
                  "producer_byte_rate,consumer_byte_rate"],
                 ["--entity-type", "users", "--entity-name", name, "--entity-type", "clients",
                  "--entity-default", "--delete-config", "request_percentage"],
                 ["--entity-type", "users", "--entity-default", "--delete-config",
                  "producer_byte_rate"]):
        code, _, err = run_tool(capsys, *bootstrap, "--alter", *args)
        assert (code, err) == (0, "")
    code, out, _ = run_tool(capsys, *bootstrap, "--describe", "--entity-type", "clients")
    assert name not in out


def test_ip_quotas(odradek_broker, capsys):
    bootstrap = ["--bootstrap-server", odradek_broker.bootstrap]
    code, out, err = run_tool(capsys, *bootstrap, "--alter", "--add-config",
                              "connection_creation_rate=10", "--entity-type", "ips",
                              "--entity-name", "10.1.2.3")
    assert (code, err) == (0, "")
    code, out, _ = run_tool(capsys, *bootstrap, "--describe", "--entity-type", "ips")
    assert "Quota configs for ip '10.1.2.3' are connection_creation_rate=10.0\n" in out
    code, _, err = run_tool(capsys, *bootstrap, "--alter", "--entity-type", "ips",
                            "--entity-name", "10.1.2.3", "--delete-config",
                            "connection_creation_rate")
    assert code == 0, err


@pytest.mark.parametrize("args, message", [
    (["--entity-type", "clients", "--entity-name", "c", "--add-config", "retention.ms=1"],
     ("Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected "
     "config names: List(retention.ms)")),
    (["--entity-type", "users", "--entity-name", "u", "--add-config", "retention.ms=1"],
     ("Only quota and SCRAM credential configs can be added for 'users' using "
     "--bootstrap-server. Unexpected config names: List(retention.ms)")),
    (["--entity-type", "users", "--entity-name", "u", "--add-config",
      "producer_byte_rate=1,SCRAM-SHA-256=[password=p]"],
     "Cannot alter both quota and SCRAM credential configs simultaneously for 'users'"),
    (["--entity-type", "users", "--entity-default", "--add-config",
      "SCRAM-SHA-256=[password=p]"],
     ("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
     "Credentials using --bootstrap-server.")),
    (["--entity-type", "clients", "--entity-name", "c", "--add-config",
      "producer_byte_rate=fast"],
     "Cannot parse quota configuration value for producer_byte_rate: fast"),
    (["--entity-type", "clients", "--entity-name", "c", "--add-config",
      "producer_byte_rate=1.5"],
     "Configuration producer_byte_rate must be a Long value"),
    (["--entity-type", "ips", "--entity-name", "10.0.0.1", "--add-config",
      "producer_byte_rate=1"],
     "Only connection quota configs can be added for 'ips' using --bootstrap-server."),
])
def test_client_quota_errors(odradek_broker, capsys, args, message):
    code, _, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap, "--alter",
                            *args)
    assert code == 1
    assert message in err
