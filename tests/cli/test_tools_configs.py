"""`odradek configs` against a real broker, run in-process: Kafka's output for describing and
altering topic and broker configs, and its errors."""

from __future__ import annotations

import uuid

import pytest

from odradek.cli import configs
from odradek.client import Admin, ConfigResource, NewTopic


def run_tool(capsys, *args: str) -> tuple[int, str, str]:
    code = configs.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def topic(odradek_broker) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
    return name


def _topic_configs(broker, topic: str) -> dict[str, str]:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        entries = admin.describe_configs([ConfigResource.topic(topic)])[
            ConfigResource.topic(topic)]
    return {name: e.value for name, e in entries.items() if e.source.name == "DYNAMIC_TOPIC_CONFIG"}


def test_alter_and_describe_topic_configs(odradek_broker, topic, capsys):
    bootstrap = ("--bootstrap-server", odradek_broker.bootstrap)
    code, out, err = run_tool(capsys, *bootstrap, "--entity-type", "topics", "--entity-name",
                              topic, "--alter", "--add-config",
                              "retention.ms=86400000,cleanup.policy=[delete,compact]")
    assert code == 0, err
    assert out == f"Completed updating config for topic {topic}.\n"
    assert _topic_configs(odradek_broker, topic) == {"retention.ms": "86400000",
                                                     "cleanup.policy": "delete,compact"}
    code, out, _ = run_tool(capsys, *bootstrap, "--entity-type", "topics", "--entity-name", topic,
                            "--describe")
    lines = out.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1].startswith("  cleanup.policy=delete,compact sensitive=false "
                               "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=delete,compact, "
                               "DEFAULT_CONFIG:log.cleanup.policy=delete}")
    assert lines[2].startswith("  retention.ms=86400000 sensitive=false "
                               "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000")
    assert len(lines) == 3
    # The --topic shortcut and --all.
    code, out, _ = run_tool(capsys, *bootstrap, "--topic", topic, "--describe", "--all")
    lines = out.splitlines()
    assert lines[0] == f"All configs for topic {topic} are:"
    names = [line.split("=")[0].strip() for line in lines[1:]]
    assert names == sorted(names) and "segment.bytes" in names and "retention.ms" in names
    code, out, err = run_tool(capsys, *bootstrap, "--entity-type", "topics", "--entity-name",
                              topic, "--alter", "--delete-config", "retention.ms")
    assert code == 0, err
    assert _topic_configs(odradek_broker, topic) == {"cleanup.policy": "delete,compact"}


def test_deleting_a_config_that_is_not_set_fails(odradek_broker, topic, capsys):
    code, _out, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap,
                               "--entity-type", "topics", "--entity-name", topic, "--alter",
                               "--delete-config", "retention.ms,segment.ms")
    assert code == 1
    assert err.strip() == "Invalid config(s): retention.ms,segment.ms"


def test_invalid_values_are_refused_by_the_broker(odradek_broker, topic, capsys):
    code, _, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap,
                            "--topic", topic, "--alter", "--add-config", "retention.ms=soon")
    assert code == 1
    assert "retention.ms" in err
    assert _topic_configs(odradek_broker, topic) == {}


def test_describe_missing_topic(odradek_broker, capsys):
    code, out, _ = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap,
                            "--entity-type", "topics", "--entity-name", "no-such-topic-here",
                            "--describe")
    assert code == 0
    assert out == "The topic 'no-such-topic-here' doesn't exist and doesn't have dynamic config.\n"


def test_broker_configs(odradek_broker, capsys):
    bootstrap = ("--bootstrap-server", odradek_broker.bootstrap)
    code, out, err = run_tool(capsys, *bootstrap, "--entity-type", "brokers", "--entity-name",
                              "1", "--alter", "--add-config", "log.cleaner.threads=2")
    assert code == 0, err
    assert out == "Completed updating config for broker 1.\n"
    code, out, _ = run_tool(capsys, *bootstrap, "--entity-type", "brokers", "--entity-name", "1",
                            "--describe")
    lines = out.splitlines()
    assert lines[0] == "Dynamic configs for broker 1 are:"
    assert any(line.startswith("  log.cleaner.threads=2 sensitive=false synonyms={")
               for line in lines[1:])
    code, out, _ = run_tool(capsys, *bootstrap, "--entity-type", "brokers", "--entity-default",
                            "--describe")
    assert out.splitlines()[0] == "Default configs for brokers in the cluster are:"
    code, out, _ = run_tool(capsys, *bootstrap, "--entity-type", "brokers", "--describe")
    headers = [line for line in out.splitlines() if not line.startswith("  ")]
    assert headers == ["Dynamic configs for broker 1 are:",
                       "Default configs for brokers in the cluster are:"]
    code, out, err = run_tool(capsys, *bootstrap, "--broker", "1", "--alter", "--delete-config",
                              "log.cleaner.threads")
    assert code == 0, err
    code, out, _ = run_tool(capsys, *bootstrap, "--broker", "1", "--describe")
    assert out == "Dynamic configs for broker 1 are:\n"


@pytest.mark.parametrize("args, message", [
    (["--entity-type", "topics", "--entity-name", "t"],
     "Command must include exactly one action: --describe, --alter"),
    (["--entity-type", "topics", "--alter"],
     "An entity name must be specified with --alter of topics"),
    (["--entity-type", "topics", "--entity-name", "t", "--alter"],
     "At least one of --add-config, --add-config-file, or --delete-config must be specified"),
    (["--entity-type", "brokers", "--entity-name", "one", "--describe"],
     "The entity name for brokers must be a valid integer broker id, but it is: one"),
    (["--entity-type", "tables", "--entity-name", "t", "--describe"],
     "Invalid entity type tables, the entity type must be one of"),
    (["--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config", "a=b=c"],
     'Invalid entity config: all configs to be added must be in the format "key=val"'),
    (["--topic", "t", "--entity-name", "x", "--describe"],
     "--entity-{type,name,default} should not be used in conjunction with specific entity"),
])
def test_usage_errors(odradek_broker, capsys, args, message):
    code, _, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap, *args)
    assert code == 1
    assert message in err


def test_bootstrap_is_required(capsys):
    code, _, err = run_tool(capsys, "--entity-type", "topics", "--describe")
    assert code == 1
    assert "Either --bootstrap-server or --bootstrap-controller must be specified." in err
