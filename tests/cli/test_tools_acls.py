"""`odradek acls` (kafka-acls.sh) against a broker process with StandardAuthorizer, run
in-process over SASL_PLAINTEXT with a `--command-config` of the super user: Kafka's output for
--add, --list and --remove, and the --producer / --consumer conveniences."""

from __future__ import annotations

import pytest

from odradek.cli import acls
from odradek.client import Admin
from odradek.security.acl import AclBindingFilter, AclOperation, PatternType, PermissionType
from odradek.security.acl import ResourceType as Rt
from tests.security.test_acl_matrix import USERS, start_acl_broker

TOPIC_PATTERN = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("acls-tool")
    broker = start_acl_broker(workdir, allow_everyone=False)
    config = workdir / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{USERS["admin"]}";\n')
    broker.command_config = str(config)
    yield broker
    broker.process.stop()


def run_tool(broker, capsys, *args: str) -> tuple[int, str, str]:
    code = acls.main(["--bootstrap-server", broker.sasl_bootstrap,
                      "--command-config", broker.command_config, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _all_acls(broker) -> set[tuple]:
    props = {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "PLAIN", "sasl.username": "admin",
             "sasl.password": USERS["admin"]}
    with Admin(props) as admin:
        found = admin.describe_acls(AclBindingFilter(Rt.ANY, None, PatternType.ANY, None, None,
                                                     AclOperation.ANY, PermissionType.ANY))
    return {(a.resource_type.name, a.resource_name, a.pattern_type.name, a.principal, a.host,
             a.operation.name, a.permission.name) for a in found}


def test_add_list_and_remove(broker, capsys):
    code, out, err = run_tool(broker, capsys, "--add", "--allow-principal", "User:alice",
                              "--operation", "Read", "--operation", "Describe",
                              "--topic", "orders")
    assert code == 0, err
    entries = ("\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
               "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)")
    assert out == (f"Adding ACLs for resource `{TOPIC_PATTERN}`: \n {entries} \n\n"
                   f"Current ACLs for resource `{TOPIC_PATTERN}`: \n {entries} \n\n")
    code, out, err = run_tool(broker, capsys, "--list", "--topic", "orders")
    assert code == 0, err
    assert out == f"Current ACLs for resource `{TOPIC_PATTERN}`: \n {entries} \n\n"
    code, out, err = run_tool(broker, capsys, "--remove", "--force", "--allow-principal",
                              "User:alice", "--operation", "Read", "--topic", "orders")
    assert code == 0, err
    remaining = "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)"
    assert out == f"Current ACLs for resource `{TOPIC_PATTERN}`: \n {remaining} \n\n"
    code, out, err = run_tool(broker, capsys, "--remove", "--force", "--topic", "orders")
    assert code == 0, err
    assert not any(acl[1] == "orders" for acl in _all_acls(broker))


def test_producer_and_consumer_conveniences(broker, capsys):
    code, _out, err = run_tool(broker, capsys, "--add", "--allow-principal", "User:bob",
                               "--producer", "--topic", "pay-", "--resource-pattern-type",
                               "prefixed", "--transactional-id", "pay-", "--idempotent")
    assert code == 0, err
    code, _out, err = run_tool(broker, capsys, "--add", "--allow-principal", "User:carol",
                               "--consumer", "--topic", "pay-", "--group", "readers-",
                               "--resource-pattern-type", "PREFIXED")
    assert code == 0, err
    found = _all_acls(broker)
    assert {("TOPIC", "pay-", "PREFIXED", "User:bob", "*", op, "ALLOW")
            for op in ("WRITE", "DESCRIBE", "CREATE")} <= found
    assert {("TRANSACTIONAL_ID", "pay-", "PREFIXED", "User:bob", "*", op, "ALLOW")
            for op in ("WRITE", "DESCRIBE")} <= found
    assert ("CLUSTER", "kafka-cluster", "PREFIXED", "User:bob", "*", "IDEMPOTENT_WRITE",
            "ALLOW") in found
    assert {("TOPIC", "pay-", "PREFIXED", "User:carol", "*", op, "ALLOW")
            for op in ("READ", "DESCRIBE")} <= found
    assert ("GROUP", "readers-", "PREFIXED", "User:carol", "*", "READ", "ALLOW") in found
    code, out, err = run_tool(broker, capsys, "--list", "--principal", "User:carol")
    assert code == 0, err
    assert out.startswith("ACLs for principal `User:carol`\n")
    assert "User:bob" not in out


def test_usage_errors(broker, capsys):
    code, _out, err = run_tool(broker, capsys, "--add", "--list", "--topic", "t")
    assert code == 1 and "exactly one action" in err
    code, _out, err = run_tool(broker, capsys, "--add", "--allow-principal", "User:a",
                               "--operation", "Read", "--cluster")
    assert code == 1 and "ResourceType CLUSTER only supports operations" in err
    code, _out, err = run_tool(broker, capsys, "--add", "--allow-principal", "User:a",
                               "--consumer", "--topic", "t")
    assert code == 1 and "With --consumer you must specify a --group" in err
