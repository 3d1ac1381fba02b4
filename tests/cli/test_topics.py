"""`odradek topics` (kafka-topics.sh): argument checks and Java ordering offline; every
command against a real broker (the `odradek_broker` fixture)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from odradek.cli import topics
from odradek.cli.topics import admin_client_topic_order, parse_replica_assignment
from odradek.client import Admin
from odradek.protocol.ids import uuid_to_kafka_str
from odradek.protocol.java import java_hashmap_order, java_string_hashcode, to_unsigned32

TOPIC_ID = r"[A-Za-z0-9_-]{22}"
BROKER_ID = 1


def run_topics(capsys, *args: str) -> tuple[int, str, str]:
    code = topics.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_line(message: str) -> str:
    return f"Error while executing topic command : {message}\n"


# ------------------------------------------------------------------------------------------
# offline: arguments, usage, Java ordering


def test_no_arguments_prints_usage_and_fails(capsys):
    code, out, err = run_topics(capsys)
    assert code == 1 and out == ""
    assert err.startswith("Create, delete, describe, or change a topic.\nOption ")
    assert "--bootstrap-server <String: server to" in err
    assert "--replication-factor <Integer:" in err


def test_help_and_version(capsys):
    code, out, _ = run_topics(capsys, "--help")
    assert code == 0
    assert out.startswith("This tool helps to create, delete, describe, or change a topic.")
    assert "--under-replicated-partitions" in out
    code, out, _ = run_topics(capsys, "--version")
    assert code == 0 and "odradek" in out


ONE_ACTION = ("Command must include exactly one action: --list, --describe, --create, "
              "--alter or --delete")


@pytest.mark.parametrize("args, message", [
    (["--list", "--create", "--bootstrap-server", "h:1"], ONE_ACTION),
    (["--bootstrap-server", "h:1"], ONE_ACTION),
    (["--create", "--bootstrap-server", "h:1"], 'Missing required argument "[topic]"'),
    (["--alter", "--topic", "t", "--bootstrap-server", "h:1"],
     'Missing required argument "[partitions]"'),
    (["--alter", "--topic", "t", "--partitions", "2", "--config", "a=b",
      "--bootstrap-server", "h:1"],
     'Option combination "[bootstrap-server, config]" can\'t be used with option "[alter]"'),
    (["--list", "--partitions", "2", "--bootstrap-server", "h:1"],
     'Option "[partitions]" can\'t be used with option "[list]"'),
    (["--create", "--topic", "t", "--replica-assignment", "1:2", "--partitions", "2",
      "--bootstrap-server", "h:1"],
     'Option "[replica-assignment]" can\'t be used with option "[partitions]"'),
    (["--describe", "--under-replicated-partitions", "--topics-with-overrides",
      "--bootstrap-server", "h:1"],
     ('Option "[under-replicated-partitions]" can\'t be used with option '
      '"[topics-with-overrides]"')),
    (["--create", "--topic", "t", "--if-exists", "--bootstrap-server", "h:1"],
     'Option "[if-exists]" can\'t be used with option "[create]"'),
    (["--describe", "--if-exists", "--bootstrap-server", "h:1"],
     "--topic or --topic-id is required to describe a topic"),
])
def test_usage_errors(capsys, args, message):
    code, _, err = run_topics(capsys, *args)
    assert code == 1
    assert err.splitlines()[0].startswith(message)
    assert "Option" in err and "Description" in err


@pytest.mark.parametrize("args, message", [
    (["--list"], "--bootstrap-server must be specified"),
    (["--list", "--bootstrap-server"], "Option bootstrap-server requires an argument"),
    (["--list", "--bogus", "--bootstrap-server", "h:1"], "bogus is not a recognized option"),
    (["--create", "--topic", "t", "--partitions", "many", "--bootstrap-server", "h:1"],
     "Cannot parse argument 'many' of option partitions"),
    (["--create", "--topic", "t", "--partitions", "0", "--bootstrap-server", "h:1"],
     "The partitions must be greater than 0"),
    (["--create", "--topic", "t", "--replication-factor", "40000", "--bootstrap-server", "h:1"],
     "The replication factor must be between 1 and 32767 inclusive"),
    (["--create", "--topic", "t", "--config", "retention.ms", "--bootstrap-server", "h:1"],
     ('requirement failed: Invalid topic config: all configs to be added must be in the format '
      '"key=val".')),
    (["--create", "--topic", "t", "--config", "no.such.config=1", "--bootstrap-server", "h:1"],
     "Unknown topic config name: no.such.config"),
    (["--create", "--topic", "t", "--replica-assignment", "1:1", "--bootstrap-server", "h:1"],
     "Partition replica lists may not contain duplicate entries: 1"),
    (["--create", "--topic", "t", "--replica-assignment", "1:2,3", "--bootstrap-server", "h:1"],
     "Partition 1 has different replication factor: [3]"),
    (["--list", "--bootstrap-server", "nohost"], "Invalid url in bootstrap.servers: nohost"),
])
def test_command_errors(capsys, args, message):
    code, out, _ = run_topics(capsys, *args)
    assert code == 1
    assert out == error_line(message)


def test_options_accept_unique_prefixes_and_equals():
    options = topics.parse_options(["--bootstrap=h:1", "--desc", "--topic", "a", "--config",
                                    "x=1", "--config", "y=2"])
    assert options.value("bootstrap-server") == "h:1"
    assert options.has("describe") and options.value("topic") == "a"
    assert options.all("config") == ["x=1", "y=2"]
    with pytest.raises(topics.CommandError, match="ambiguous"):
        topics.parse_options(["--replica", "x"])


def test_replica_assignment_parsing():
    assert parse_replica_assignment("0:1, 1:2,2 :0") == {0: [0, 1], 1: [1, 2], 2: [2, 0]}


def test_java_string_hash_matches_java():
    # Values of String.hashCode() in Java, as the unsigned bits a HashMap spreads.
    def java_string_hash(text: str) -> int:
        return to_unsigned32(java_string_hashcode(text))

    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == (-2**31) & 0xFFFFFFFF


def test_config_order_matches_kafka_output():
    # Kafka 3.8 printed "Configs: min.insync.replicas=2,cleanup.policy=delete,
    # segment.bytes=268435456,retention.ms=86400000" for a topic with these overrides: the
    # iteration order of a HashMap holding the ~35 topic configs (ties in broker order).
    broker_order = ["segment.bytes", "retention.ms", "cleanup.policy", "min.insync.replicas"]
    padding = [f"filler.{i}" for i in range(31)]
    order = java_hashmap_order(broker_order + padding, initial_capacity=35)
    assert [name for name in order if name in broker_order] == [
        "min.insync.replicas", "cleanup.policy", "segment.bytes", "retention.ms"]
    # A second output of Kafka's: "min.insync.replicas=1,segment.bytes=1073741824,
    # min.compaction.lag.ms=60000".
    order = java_hashmap_order(["segment.bytes", "min.compaction.lag.ms", "min.insync.replicas"]
                               + padding, initial_capacity=34)
    assert [n for n in order if not n.startswith("filler")] == [
        "min.insync.replicas", "segment.bytes", "min.compaction.lag.ms"]


def test_topic_order_is_a_permutation():
    names = [f"topic-{i}" for i in range(20)]
    order = admin_client_topic_order(sorted(names))
    assert sorted(order) == sorted(names)
    assert admin_client_topic_order(["only"]) == ["only"]


# ------------------------------------------------------------------------------------------
# against a broker


def test_create_list_describe_delete(odradek_broker, capsys):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    assert run_topics(capsys, "--create", "--topic", "cli-one", "--partitions", "3",
                      "--replication-factor", "1", "--config", "retention.ms=86400000",
                      "--config", "cleanup.policy = compact", "--config",
                      "min.insync.replicas=1", *bs) == (0, "Created topic cli-one.\n", "")

    code, out, _ = run_topics(capsys, "--list", *bs)
    assert code == 0 and "cli-one" in out.splitlines()

    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        topic_id = uuid_to_kafka_str(admin.describe_topics(["cli-one"])["cli-one"].topic_id)
    code, out, _ = run_topics(capsys, "--describe", "--topic", "cli-one", *bs)
    assert code == 0
    assert out.splitlines() == [
        (f"Topic: cli-one\tTopicId: {topic_id}\tPartitionCount: 3\tReplicationFactor: 1\t"
         "Configs: min.insync.replicas=1,cleanup.policy=compact,retention.ms=86400000"),
        *(f"\tTopic: cli-one\tPartition: {p}\tLeader: {BROKER_ID}\tReplicas: {BROKER_ID}\t"
          f"Isr: {BROKER_ID}\tElr: \tLastKnownElr: " for p in range(3)),
    ]

    assert run_topics(capsys, "--delete", "--topic", "cli-one", *bs) == (0, "", "")
    code, out, _ = run_topics(capsys, "--list", *bs)
    assert "cli-one" not in out.splitlines()


def test_create_existing_and_if_not_exists(odradek_broker, capsys):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    assert run_topics(capsys, "--create", "--topic", "cli-dup", *bs)[0] == 0
    code, out, _ = run_topics(capsys, "--create", "--topic", "cli-dup", *bs)
    assert code == 1 and out == error_line("Topic 'cli-dup' already exists.")
    assert run_topics(capsys, "--create", "--topic", "cli-dup", "--if-not-exists", *bs) == \
        (0, "", "")


def test_collision_warning(odradek_broker, capsys):
    code, out, _ = run_topics(capsys, "--create", "--topic", "cli.dotted", "--bootstrap-server",
                              odradek_broker.bootstrap)
    assert code == 0
    assert out.splitlines() == [
        ("WARNING: Due to limitations in metric names, topics with a period ('.') or "
         "underscore ('_') could collide. To avoid issues it is best to use either, but not "
         "both."),
        "Created topic cli.dotted.",
    ]


def test_list_with_regex_and_describe_default_configs(odradek_broker, capsys):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    for name in ("cli-re-a", "cli-re-b", "cli-other"):
        assert run_topics(capsys, "--create", "--topic", name, "--partitions", "1", *bs)[0] == 0
    code, out, _ = run_topics(capsys, "--list", "--topic", "cli-re-.*", *bs)
    assert out == "cli-re-a\ncli-re-b\n"
    code, out, _ = run_topics(capsys, "--list", "--topic", "cli-re-a,cli-other", *bs)
    assert out == "cli-other\ncli-re-a\n"

    code, out, _ = run_topics(capsys, "--describe", "--topic", "cli-re-.*", *bs)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    topic_lines = [line for line in lines if line.startswith("Topic: ")]
    assert [line.split("\t")[0] for line in topic_lines] == \
        [f"Topic: {n}" for n in admin_client_topic_order(["cli-re-a", "cli-re-b"])]
    for line in topic_lines:
        assert re.fullmatch(rf"Topic: cli-re-[ab]\tTopicId: {TOPIC_ID}\tPartitionCount: 1\t"
                            r"ReplicationFactor: 1\tConfigs: ", line)


def test_describe_filters(odradek_broker, capsys):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    run_topics(capsys, "--create", "--topic", "cli-plain", "--partitions", "2", *bs)
    run_topics(capsys, "--create", "--topic", "cli-override", "--config", "retention.ms=1000",
               *bs)
    code, out, _ = run_topics(capsys, "--describe", "--topics-with-overrides", "--topic",
                              "cli-plain|cli-override", *bs)
    assert code == 0
    assert len(out.splitlines()) == 1 and out.startswith("Topic: cli-override\t")
    assert out.rstrip("\n").endswith("Configs: retention.ms=1000")
    for report in ("--under-replicated-partitions", "--unavailable-partitions",
                   "--under-min-isr-partitions"):
        assert run_topics(capsys, "--describe", report, "--topic", "cli-plain", *bs) == \
            (0, "", "")
    code, out, _ = run_topics(capsys, "--describe", "--at-min-isr-partitions", "--topic",
                              "cli-plain", *bs)
    assert [line.split("\t")[2] for line in out.splitlines()] == \
        ["Partition: 0", "Partition: 1"]


def test_missing_topics(odradek_broker, capsys):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    for action in ("--describe", "--delete"):
        code, out, _ = run_topics(capsys, action, "--topic", "cli-nope", *bs)
        # Kafka 3.8 prints the topic as a Java Optional here.
        missing = "Topic 'Optional[cli-nope]' does not exist as expected"
        assert (code, out) == (1, error_line(missing))
        assert run_topics(capsys, action, "--topic", "cli-nope", "--if-exists", *bs) == \
            (0, "", "")
    code, out, _ = run_topics(capsys, "--alter", "--topic", "cli-nope", "--partitions", "2", *bs)
    assert code == 1 and "does not exist as expected" in out


def test_alter_partitions(odradek_broker, capsys):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    run_topics(capsys, "--create", "--topic", "cli-alter", "--partitions", "1", *bs)
    assert run_topics(capsys, "--alter", "--topic", "cli-alter", "--partitions", "4", *bs) == \
        (0, "", "")
    code, out, _ = run_topics(capsys, "--describe", "--topic", "cli-alter", *bs)
    assert "\tPartitionCount: 4\t" in out.splitlines()[0]
    assert len(out.splitlines()) == 5
    code, out, _ = run_topics(capsys, "--alter", "--topic", "cli-alter", "--partitions", "2", *bs)
    assert code == 1 and out.startswith("Error while executing topic command : ")
    assert run_topics(capsys, "--alter", "--topic", "cli-alter", "--partitions", "6",
                      "--replica-assignment", "1,1,1,1,1,1", *bs)[0] == 0
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        assert len(admin.describe_topics(["cli-alter"])["cli-alter"].partitions) == 6


def test_replica_assignment_and_broker_errors(odradek_broker, capsys):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    assert run_topics(capsys, "--create", "--topic", "cli-assigned", "--replica-assignment",
                      f"{BROKER_ID},{BROKER_ID}", *bs)[0] == 0
    code, out, _ = run_topics(capsys, "--describe", "--topic", "cli-assigned", *bs)
    assert "\tPartitionCount: 2\tReplicationFactor: 1\t" in out
    code, out, _ = run_topics(capsys, "--create", "--topic", "cli-rf", "--replication-factor",
                              "3", *bs)
    assert code == 1 and out.startswith("Error while executing topic command : ")


def test_command_config_and_topic_id(odradek_broker, capsys, tmp_path):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    properties = tmp_path / "admin.properties"
    properties.write_text("# admin settings\nclient.id=cli-test\nrequest.timeout.ms=5000\n")
    assert run_topics(capsys, "--create", "--topic", "cli-conf", "--command-config",
                      str(properties), *bs)[0] == 0
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        topic_id = uuid_to_kafka_str(admin.describe_topics(["cli-conf"])["cli-conf"].topic_id)
    code, out, _ = run_topics(capsys, "--describe", "--topic-id", topic_id, *bs)
    assert code == 0 and out.startswith(f"Topic: cli-conf\tTopicId: {topic_id}\t")
    code, out, _ = run_topics(capsys, "--describe", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ", *bs)
    missing = "TopicId 'AAAAAAAAAAAAAAAAAAAAAQ' does not exist as expected"
    assert (code, out) == (1, error_line(missing))


def test_unreachable_broker(capsys, tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    properties = tmp_path / "fast.properties"
    properties.write_text("default.api.timeout.ms=500\n")
    code, out, _ = run_topics(capsys, "--list", "--bootstrap-server", f"127.0.0.1:{port}",
                              "--command-config", str(properties))
    timed_out = "Timed out waiting for a node assignment. Call: listTopics"
    assert (code, out) == (1, error_line(timed_out))


def test_the_odradek_entry_point_runs_the_tool(odradek_broker):
    bs = ["--bootstrap-server", odradek_broker.bootstrap]
    create = subprocess.run([sys.executable, "-m", "odradek.cli.main", "topics", "--create",
                             "--topic", "cli-process", *bs],
                            capture_output=True, text=True, timeout=60, check=False)
    assert (create.returncode, create.stdout) == (0, "Created topic cli-process.\n")
    listing = subprocess.run([sys.executable, "-m", "odradek.cli.main", "topics", "--list",
                              "--exclude-internal", *bs],
                             capture_output=True, text=True, timeout=60, check=False)
    assert listing.returncode == 0 and "cli-process" in listing.stdout.splitlines()
    usage = subprocess.run([sys.executable, "-m", "odradek.cli.main", "topics"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert usage.returncode == 1 and "Create, delete, describe, or change a topic." in usage.stderr
