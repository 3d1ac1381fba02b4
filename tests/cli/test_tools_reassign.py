"""`odradek reassign-partitions` (kafka-reassign-partitions.sh) and `odradek log-dirs`
(kafka-log-dirs.sh): argument checks, pure helpers (placement, throttles, JSON), and what a
real single-node broker+controller (node 1) can show. Moving data between brokers is in
tests/cluster/test_reassignment_cluster.py."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from odradek.cli import log_dirs, reassign_partitions
from odradek.cli.reassign_partitions import (
    BrokerMetadata,
    PartitionMove,
    assign_replicas_to_brokers,
    follower_throttles,
    leader_throttles,
    proposed_move_map,
)
from odradek.client import Admin, NewTopic
from odradek.client.admin_types import ConfigResource, PartitionReassignment
from odradek.client.types import TopicPartition

TOPIC = f"reassign-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def node(odradek_broker):
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
    return odradek_broker


def reassign(capsys, *args: str) -> tuple[int, str, str]:
    code = reassign_partitions.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def dirs(capsys, *args: str) -> tuple[int, str, str]:
    code = log_dirs.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, name: str, document: object) -> str:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def reassignment_file(tmp_path: Path, partitions: list[tuple[str, int, list[int]]]) -> str:
    return write(tmp_path, "reassign.json", {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for t, p, r in partitions]})


# ------------------------------------------------------------------------------------------
# arguments (no broker needed)


def test_no_arguments_and_help_print_the_usage(capsys):
    for args in ([], ["--help"]):
        code, out, err = reassign(capsys, *args)
        assert (code, out) == (1, "")
        assert err.startswith(reassign_partitions.HELP_TEXT + "\nOption")
        assert "--throttle <Long: throttle>" in err


@pytest.mark.parametrize("args", [
    ["--bootstrap-server", "localhost:1"],
    ["--bootstrap-server", "localhost:1", "--list", "--verify"],
])
def test_exactly_one_action(capsys, args):
    code, out, err = reassign(capsys, *args)
    assert (code, out) == (1, "")
    assert err.startswith("Command must include exactly one action: --generate, --execute, "
                          "--verify, --cancel, --list\nOption")


def test_bootstrap_and_required_and_permitted_arguments(capsys):
    code, _, err = reassign(capsys, "--list")
    assert code == 1 and err.startswith(
        "Please specify either --bootstrap-server or --bootstrap-controller\n")
    code, _, err = reassign(capsys, "--bootstrap-server", "localhost:1", "--execute")
    assert code == 1 and err.startswith('Missing required argument "[reassignment-json-file]"\n')
    code, _, err = reassign(capsys, "--bootstrap-server", "localhost:1", "--generate",
                            "--topics-to-move-json-file", "f.json")
    assert code == 1 and err.startswith('Missing required argument "[broker-list]"\n')
    code, _, err = reassign(capsys, "--bootstrap-server", "localhost:1", "--verify",
                            "--reassignment-json-file", "f.json", "--throttle", "10")
    assert code == 1 and err.startswith(
        'Option "[throttle]" can\'t be used with action "[verify]"\n')


def test_log_dirs_requires_describe_and_bootstrap(capsys):
    code, _, err = dirs(capsys, "--bootstrap-server", "localhost:1")
    assert code == 1 and err.startswith('Missing required argument "[describe]"\n')
    code, _, err = dirs(capsys, "--describe")
    assert code == 1 and err.startswith('Missing required argument "[bootstrap-server]"\n')


# ------------------------------------------------------------------------------------------
# helpers (Kafka's AdminUtils and the throttle computations)


def test_rack_unaware_placement_with_a_fixed_start_is_kafkas():
    brokers = [BrokerMetadata(i, None) for i in range(5)]
    # AdminUtilsTest's expectation for 10 partitions, RF 3, start index 0.
    assert assign_replicas_to_brokers(brokers, 10, 3, random.Random(0), fixed_start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_rack_aware_placement_spreads_each_partition_over_racks():
    brokers = [BrokerMetadata(0, "a"), BrokerMetadata(1, "a"), BrokerMetadata(2, "b"),
               BrokerMetadata(3, "b"), BrokerMetadata(4, "c"), BrokerMetadata(5, "c")]
    assignment = assign_replicas_to_brokers(brokers, 12, 3, random.Random(7))
    racks = {b.id: b.rack for b in brokers}
    for replicas in assignment.values():
        assert len({racks[r] for r in replicas}) == 3 and len(set(replicas)) == 3


def test_throttles_name_the_sources_on_the_leader_side_and_the_new_replicas_on_the_follower_side():
    current = {TopicPartition("t", 0): [1, 2], TopicPartition("t", 1): [2, 3]}
    proposed = {TopicPartition("t", 0): [2, 3], TopicPartition("t", 1): [2, 3]}
    in_progress = {TopicPartition("u", 0): PartitionReassignment((4, 1), (4,), (1,))}
    moves = proposed_move_map(in_progress, proposed, current)
    assert moves["t"][0] == PartitionMove({1, 2}, {3})
    assert leader_throttles(moves) == {"t": "0:1,0:2,1:2,1:3", "u": "0:1"}
    assert follower_throttles(moves) == {"t": "0:3", "u": "0:4"}


# ------------------------------------------------------------------------------------------
# against the broker


def test_list_with_nothing_in_progress(capsys, node):
    code, out, err = reassign(capsys, "--bootstrap-server", node.bootstrap, "--list")
    assert (code, out, err) == (0, "No partition reassignments found.\n", "")


def test_generate_prints_the_current_and_the_proposed_assignment(capsys, node, tmp_path):
    topics = write(tmp_path, "topics.json", {"topics": [{"topic": TOPIC}], "version": 1})
    code, out, _ = reassign(capsys, "--bootstrap-server", node.bootstrap, "--generate",
                            "--topics-to-move-json-file", topics, "--broker-list", "1")
    document = (
        '{"version":1,"partitions":['
        f'{{"topic":"{TOPIC}","partition":0,"replicas":[1],"log_dirs":["any"]}},'
        f'{{"topic":"{TOPIC}","partition":1,"replicas":[1],"log_dirs":["any"]}}]}}')
    assert code == 0
    assert out == (f"Current partition replica assignment\n{document}\n\n"
                   f"Proposed partition reassignment configuration\n{document}\n")


def test_generate_errors(capsys, node, tmp_path):
    base = ["--bootstrap-server", node.bootstrap, "--generate"]
    topics = write(tmp_path, "topics.json", {"topics": [{"topic": TOPIC}]})
    code, out, _ = reassign(capsys, *base, "--topics-to-move-json-file", topics,
                            "--broker-list", "1,1")
    assert code == 1 and out.startswith(
        "Error: Broker list contains duplicate entries: [1]\n"
        "org.apache.kafka.server.common.AdminCommandFailedException: ")
    missing = write(tmp_path, "missing.json", {"topics": [{"topic": "no-such-topic"}]})
    code, out, _ = reassign(capsys, *base, "--topics-to-move-json-file", missing,
                            "--broker-list", "1")
    assert code == 1 and out.startswith(
        "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
        "Topic no-such-topic not found.\n")
    code, out, _ = reassign(capsys, *base, "--topics-to-move-json-file", topics,
                            "--broker-list", "7")
    assert code == 1 and out.startswith(
        "Error: Replication factor: 1 larger than available brokers: 0.\n")
    not_json = write(tmp_path, "bad.json", "{nope")
    code, out, _ = reassign(capsys, *base, "--topics-to-move-json-file", not_json,
                            "--broker-list", "1")
    assert code == 1 and out.startswith("Error: The input string is not a valid JSON\n")


def test_execute_to_the_current_replicas_then_verify(capsys, node, tmp_path):
    path = reassignment_file(tmp_path, [(TOPIC, 0, [1])])
    code, out, _ = reassign(capsys, "--bootstrap-server", node.bootstrap, "--execute",
                            "--reassignment-json-file", path)
    current = f'{{"version":1,"partitions":[{{"topic":"{TOPIC}","partition":0,"replicas":[1],' \
              '"log_dirs":["any"]}]}'
    assert (code, out) == (0, (f"Current partition replica assignment\n\n{current}\n\n"
                              "Save this to use as the --reassignment-json-file option during "
                              f"rollback\nSuccessfully started partition reassignment for "
                              f"{TOPIC}-0\n"))
    code, out, _ = reassign(capsys, "--bootstrap-server", node.bootstrap, "--verify",
                            "--reassignment-json-file", path)
    assert (code, out) == (0, ("Status of partition reassignment:\n"
                              f"Reassignment of partition {TOPIC}-0 is completed.\n\n"
                              "Clearing broker-level throttles on broker 1\n"
                              f"Clearing topic-level throttles on topic {TOPIC}\n"))


def test_execute_with_a_throttle_sets_it_and_verify_clears_it(capsys, node, tmp_path):
    path = reassignment_file(tmp_path, [(TOPIC, 1, [1])])
    code, out, _ = reassign(capsys, "--bootstrap-server", node.bootstrap, "--execute",
                            "--reassignment-json-file", path, "--throttle", "50000")
    assert code == 0
    assert ("Warning: You must run --verify periodically, until the reassignment completes, to "
            "ensure the throttle is removed.\n"
            "The inter-broker throttle limit was set to 50000 B/s\n") in out
    with Admin({"bootstrap.servers": node.bootstrap}) as admin:
        configs = admin.describe_configs([ConfigResource.topic(TOPIC)])[
            ConfigResource.topic(TOPIC)]
        assert configs["leader.replication.throttled.replicas"].value == "1:1"
        assert configs["follower.replication.throttled.replicas"].value == ""
        broker = admin.describe_configs([ConfigResource.broker(1)])[ConfigResource.broker(1)]
        assert broker["leader.replication.throttled.rate"].value == "50000"
        assert broker["follower.replication.throttled.rate"].value == "50000"
    code, _, _ = reassign(capsys, "--bootstrap-server", node.bootstrap, "--verify",
                          "--reassignment-json-file", path)
    assert code == 0
    with Admin({"bootstrap.servers": node.bootstrap}) as admin:
        configs = admin.describe_configs([ConfigResource.topic(TOPIC)])[
            ConfigResource.topic(TOPIC)]
        assert configs["leader.replication.throttled.replicas"].value == ""
        broker = admin.describe_configs([ConfigResource.broker(1)])[ConfigResource.broker(1)]
        assert broker["leader.replication.throttled.rate"].value == str(2**63 - 1)


def test_execute_errors(capsys, node, tmp_path):
    base = ["--bootstrap-server", node.bootstrap, "--execute", "--reassignment-json-file"]
    code, out, _ = reassign(capsys, *base, reassignment_file(tmp_path, [(TOPIC, 0, [1, 7])]))
    assert code == 1 and out.startswith("Error: Unknown broker id 7\n")
    code, out, _ = reassign(capsys, *base, reassignment_file(tmp_path, [(TOPIC, 0, [1, 1])]))
    assert code == 1 and out.startswith(
        "Error: Partition replica lists may not contain duplicate entries: "
        f"{TOPIC}-0 contains multiple entries for 1\n")
    code, out, _ = reassign(capsys, *base, reassignment_file(tmp_path, []))
    assert code == 1 and out.startswith("Error: Partition reassignment list cannot be empty\n")
    code, out, _ = reassign(capsys, *base, reassignment_file(tmp_path, [(TOPIC, 9, [1])]))
    assert code == 1 and out.startswith(
        "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Unable to find "
        f"partition: {TOPIC}-9\n")
    code, out, _ = reassign(capsys, *base, str(tmp_path / "nope.json"))
    assert code == 1 and out.startswith(f"Error: {tmp_path / 'nope.json'}\n"
                                        "java.nio.file.NoSuchFileException: ")


def test_cancel_with_nothing_active(capsys, node, tmp_path):
    path = reassignment_file(tmp_path, [(TOPIC, 0, [1])])
    code, out, _ = reassign(capsys, "--bootstrap-server", node.bootstrap, "--cancel",
                            "--reassignment-json-file", path, "--preserve-throttles")
    assert (code, out) == (0, ("None of the specified partition reassignments are active.\n"
                              "None of the specified partition moves are active."))


def test_log_dirs_describe(capsys, node):
    with Admin({"bootstrap.servers": node.bootstrap}) as admin:
        (path,) = admin.describe_log_dirs([1])[1]
    code, out, err = dirs(capsys, "--describe", "--bootstrap-server", node.bootstrap,
                          "--topic-list", TOPIC)
    assert (code, err) == (0, "")
    head, received, document, end = out.split("\n")
    assert (head, received, end) == ("Querying brokers for log directories information",
                                     "Received log directory information from brokers 1", "")
    assert document.startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"')
    assert document.endswith(f'"error":null,"logDir":"{path}"}}]}}],"version":1}}')
    parsed = json.loads(document)
    partitions = parsed["brokers"][0]["logDirs"][0]["partitions"]
    assert sorted(p["partition"] for p in partitions) == [f"{TOPIC}-0", f"{TOPIC}-1"]
    assert all(list(p) == ["partition", "size", "offsetLag", "isFuture"] and p["offsetLag"] == 0
               and p["isFuture"] is False for p in partitions)


def test_log_dirs_unknown_broker(capsys, node):
    code, out, err = dirs(capsys, "--describe", "--bootstrap-server", node.bootstrap,
                          "--broker-list", "1,7")
    assert (code, out) == (1, "")
    assert err == ("ERROR: The given brokers do not exist from --broker-list: 7. Current "
                   "existent brokers: 1\n")
