"""`odradek leader-election` (kafka-leader-election.sh): argument checks, and elections against
a real single-node broker+controller (ElectLeaders forwarded to its controller)."""

from __future__ import annotations

import json
import uuid

import pytest

from odradek.cli import leader_election
from odradek.client import Admin, NewTopic

TOPIC = f"elect-{uuid.uuid4().hex[:6]}"
FAILED = "org.apache.kafka.server.common.AdminCommandFailedException"


@pytest.fixture(scope="module")
def node(odradek_broker):
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, 3, 1)])
    return odradek_broker


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = leader_election.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def failure(message: str, java_class: str = FAILED) -> str:
    """What the tool prints on stderr when an exception ends it: the message, then the head of
    the stack trace."""
    return f"{message}\n{java_class}: {message}\n"


# ------------------------------------------------------------------------------------------
# arguments (no broker needed)


def test_no_arguments_and_help_print_usage(capsys):
    for args in ([], ["--help"]):
        code, out, err = run(capsys, *args)
        assert code == 1 and out == ""
        assert err.startswith(leader_election.DESCRIPTION + "\nOption")
        assert "--election-type <[PREFERRED,UNCLEAN]:" in err
        assert "--partition <Integer: partition id>" in err


def test_required_options(capsys):
    code, out, err = run(capsys, "--topic", "t", "--partition", "0")
    assert (code, out) == (1, "")
    assert err == failure("Missing required option(s): bootstrap-server, election-type")
    code, _, err = run(capsys, "--bootstrap-server", "localhost:1", "--all-topic-partitions")
    assert (code, err) == (1, failure("Missing required option(s): election-type"))


@pytest.mark.parametrize("selectors", [
    [],
    ["--topic", "t", "--partition", "0", "--all-topic-partitions"],
    ["--all-topic-partitions", "--path-to-json-file", "f.json"],
])
def test_exactly_one_selector(capsys, selectors):
    code, out, err = run(capsys, "--bootstrap-server", "localhost:1", "--election-type",
                         "preferred", *selectors)
    assert (code, out) == (1, "")
    assert err == failure("One and only one of the following options is required: topic, "
                          "all-topic-partitions, path-to-json-file")


def test_topic_and_partition_go_together(capsys):
    base = ["--bootstrap-server", "localhost:1", "--election-type", "preferred"]
    code, _, err = run(capsys, *base, "--topic", "t")
    assert (code, err) == (1, failure("Missing required option(s): partition"))
    code, _, err = run(capsys, *base, "--all-topic-partitions", "--partition", "1")
    assert (code, err) == (1, failure("Option partition is only allowed if topic is used"))


def test_bad_values(capsys):
    conversion = "joptsimple.OptionArgumentConversionException"
    code, _, err = run(capsys, "--bootstrap-server", "localhost:1", "--election-type", "best",
                       "--all-topic-partitions")
    assert (code, err) == (1, failure("Cannot parse argument 'best' of option election-type",
                                      conversion))
    code, _, err = run(capsys, "--bootstrap-server", "localhost:1", "--election-type",
                       "unclean", "--topic", "t", "--partition", "one")
    assert (code, err) == (1, failure("Cannot parse argument 'one' of option partition",
                                      conversion))
    code, _, err = run(capsys, "--bootstrap-server", "localhost:1", "--no-such-option")
    assert (code, err) == (1, failure("no-such-option is not a recognized option",
                                      "joptsimple.UnrecognizedOptionException"))


@pytest.mark.parametrize(("content", "java_class", "message"), [
    ("{not json", "org.apache.kafka.server.common.AdminOperationException",
     "Replica election data is empty"),
    ('{"version": 1}', "org.apache.kafka.server.common.AdminOperationException",
     'Replica election data is missing "partitions" field'),
    ('{"partitions": {"topic": "t"}}', "java.lang.RuntimeException",
     ('com.fasterxml.jackson.databind.JsonMappingException: Expected JSON array, received '
      '{"topic":"t"}')),
    ('{"partitions": [{"topic": "t"}]}', "java.lang.RuntimeException",
     "com.fasterxml.jackson.databind.JsonMappingException: No such field exists: `partition`"),
    ('{"partitions": [{"topic": "t", "partition": "0"}]}', "java.lang.RuntimeException",
     ('com.fasterxml.jackson.databind.JsonMappingException: Expected `Integer` value, '
      'received "0"')),
    ('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}',
     "org.apache.kafka.server.common.AdminOperationException",
     "Replica election data contains duplicate partitions: [t-0]"),
])
def test_bad_json_file(capsys, tmp_path, content, java_class, message):
    path = tmp_path / "election.json"
    path.write_text(content)
    code, out, err = run(capsys, "--bootstrap-server", "localhost:1", "--election-type",
                         "PREFERRED", "--path-to-json-file", str(path))
    assert (code, out) == (1, "")
    assert err == failure(message, java_class)


def test_missing_json_file(capsys, tmp_path):
    missing = str(tmp_path / "missing.json")
    code, _, err = run(capsys, "--bootstrap-server", "localhost:1", "--election-type",
                       "PREFERRED", "--path-to-json-file", missing)
    assert (code, err) == (1, failure(f"java.nio.file.NoSuchFileException: {missing}",
                                      "java.lang.RuntimeException"))


def test_json_file_partitions_in_java_hashset_order():
    text = json.dumps({"partitions": [{"topic": "t", "partition": p} for p in (2, 0, 1)]})
    # Java's HashSet<TopicPartition> iterates by hash bucket: TopicPartition.hashCode is
    # 31 * (31 + partition) + "t".hashCode() (116), so t-0, t-1, t-2 fall in buckets 5, 4, 3.
    assert leader_election.parse_election_json(text) == [("t", 2), ("t", 1), ("t", 0)]


# ------------------------------------------------------------------------------------------
# against a broker


def test_preferred_on_partitions_led_by_their_preferred_replica(node, capsys):
    code, out, err = run(capsys, "--bootstrap-server", node.bootstrap, "--election-type",
                         "preferred", "--topic", TOPIC, "--partition", "1")
    assert (code, out, err) == (0, f"Valid replica already elected for partitions {TOPIC}-1\n",
                                "")


def test_json_file_and_admin_config(node, capsys, tmp_path):
    path = tmp_path / "election.json"
    path.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": p}
                                               for p in (0, 1, 2)]}))
    config = tmp_path / "admin.properties"
    config.write_text("client.id=leader-election-test\n")
    code, out, err = run(capsys, "--bootstrap-server", node.bootstrap, "--admin.config",
                         str(config), "--election-type", "PREFERRED", "--path-to-json-file",
                         str(path))
    assert code == 0, err
    prefix = "Valid replica already elected for partitions "
    assert out.startswith(prefix) and out.endswith("\n")
    assert sorted(out[len(prefix):-1].split(", ")) == [f"{TOPIC}-{p}" for p in (0, 1, 2)]


@pytest.mark.parametrize("election_type", ["preferred", "UNCLEAN"])
def test_all_topic_partitions_with_nothing_to_elect_prints_nothing(node, capsys, election_type):
    # The controller leaves out the partitions that need no election: an empty result.
    code, out, err = run(capsys, "--bootstrap-server", node.bootstrap, "--election-type",
                         election_type, "--all-topic-partitions")
    assert (code, out, err) == (0, "", "")


def test_unclean_on_a_partition_with_a_leader(node, capsys):
    code, out, _ = run(capsys, "--bootstrap-server", node.bootstrap, "--election-type",
                       "Unclean", "--topic", TOPIC, "--partition", "0")
    assert (code, out) == (0, f"Valid replica already elected for partitions {TOPIC}-0\n")


def test_unknown_topic_and_partition(node, capsys, tmp_path):
    code, out, err = run(capsys, "--bootstrap-server", node.bootstrap, "--election-type",
                         "preferred", "--topic", "no-such-topic", "--partition", "0")
    assert code == 1
    assert out == ("Error completing leader election (PREFERRED) for partition: "
                   "no-such-topic-0: org.apache.kafka.common.errors."
                   "UnknownTopicOrPartitionException: No such topic as no-such-topic\n")
    assert err == failure("1 replica(s) could not be elected")
    # Mixed results: the elected/no-op lines first, then one error line per failure.
    path = tmp_path / "election.json"
    path.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": 0},
                                               {"topic": TOPIC, "partition": 9},
                                               {"topic": "no-such-topic", "partition": 0}]}))
    code, out, err = run(capsys, "--bootstrap-server", node.bootstrap, "--election-type",
                         "unclean", "--path-to-json-file", str(path))
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"Valid replica already elected for partitions {TOPIC}-0"
    assert sorted(lines[1:]) == [
        (f"Error completing leader election (UNCLEAN) for partition: {TOPIC}-9: org.apache."
         f"kafka.common.errors.UnknownTopicOrPartitionException: No such partition as "
         f"{TOPIC}-9"),
        ("Error completing leader election (UNCLEAN) for partition: no-such-topic-0: org."
         "apache.kafka.common.errors.UnknownTopicOrPartitionException: No such topic as "
         "no-such-topic"),
    ]
    assert err == failure("2 replica(s) could not be elected")


def test_registered_in_odradek_main():
    from odradek.cli import main as cli_main

    assert cli_main.TOOLS["leader-election"].module == "odradek.cli.leader_election"
