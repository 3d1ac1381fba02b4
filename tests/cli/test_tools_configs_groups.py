"""`odradek configs --entity-type groups` against a real broker, as Kafka 4.0's
kafka-configs.sh: alter and describe a group's configs, and the broker's refusal printed."""

from __future__ import annotations

import uuid

from odradek.cli import configs


def run_tool(capsys, *args: str) -> tuple[int, str, str]:
    code = configs.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_alter_and_describe_group_configs(odradek_broker, capsys):
    group = f"g-{uuid.uuid4().hex[:6]}"
    target = ("--bootstrap-server", odradek_broker.bootstrap, "--entity-type", "groups",
              "--entity-name", group)
    code, out, err = run_tool(capsys, *target, "--describe")
    assert (code, out, err) == (0, f"Dynamic configs for group {group} are:\n", "")
    code, out, err = run_tool(capsys, *target, "--alter", "--add-config",
                              "consumer.session.timeout.ms=50000,"
                              "consumer.heartbeat.interval.ms=6000")
    assert code == 0, err
    assert out == f"Completed updating config for group {group}.\n"
    code, out, _ = run_tool(capsys, *target, "--describe")
    assert out.splitlines() == [
        f"Dynamic configs for group {group} are:",
        ("  consumer.heartbeat.interval.ms=6000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000}"),
        ("  consumer.session.timeout.ms=50000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000}"),
    ]
    code, out, _ = run_tool(capsys, *target, "--describe", "--all")
    assert out.splitlines()[0] == f"All configs for group {group} are:"
    assert "  share.auto.offset.reset=latest sensitive=false synonyms={}" in out.splitlines()
    assert len(out.splitlines()) == 1 + 6
    code, out, err = run_tool(capsys, *target, "--alter", "--delete-config",
                              "consumer.heartbeat.interval.ms")
    assert code == 0, err
    code, out, _ = run_tool(capsys, *target, "--describe")
    assert out.splitlines()[1:] == [
        ("  consumer.session.timeout.ms=50000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000}")]


def test_out_of_bounds_group_config_is_refused(odradek_broker, capsys):
    code, out, err = run_tool(capsys, "--bootstrap-server", odradek_broker.bootstrap,
                              "--entity-type", "groups", "--entity-name", "g-bounds",
                              "--alter", "--add-config", "consumer.session.timeout.ms=1000")
    assert code == 1 and out == ""
    assert err == ("consumer.session.timeout.ms must be greater than or equal to "
                   "group.consumer.min.session.timeout.ms\n")


def test_client_metrics_subscription(odradek_broker, capsys):
    name = f"sub-{uuid.uuid4().hex[:6]}"
    bootstrap = ("--bootstrap-server", odradek_broker.bootstrap)
    code, out, err = run_tool(capsys, *bootstrap, "--entity-type", "client-metrics",
                              "--entity-name", name, "--alter", "--add-config",
                              "metrics=[org.apache.kafka.producer.,org.apache.kafka.consumer.],"
                              "interval.ms=1000")
    assert code == 0, err
    assert out == f"Completed updating config for client-metric {name}.\n"
    code, out, _ = run_tool(capsys, *bootstrap, "--entity-type", "client-metrics", "--describe")
    assert f"Dynamic configs for client-metric {name} are:" in out.splitlines()
    code, out, _ = run_tool(capsys, *bootstrap, "--entity-type", "client-metrics",
                            "--entity-name", name, "--describe")
    assert out.splitlines() == [
        f"Dynamic configs for client-metric {name} are:",
        ("  interval.ms=1000 sensitive=false "
         "synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:interval.ms=1000}"),
        ("  metrics=org.apache.kafka.producer.,org.apache.kafka.consumer. sensitive=false "
         "synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:metrics=org.apache.kafka.producer.,"
         "org.apache.kafka.consumer.}"),
    ]
