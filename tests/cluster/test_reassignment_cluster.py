"""Partition reassignment on a real 3-node cluster (3 combined voters): an RF=1 partition with
data moves from broker 1 to broker 2 with `odradek reassign-partitions --execute`, and
`--verify` reports it completed once broker 2 has caught up; the data is then read from
broker 2, and `odradek log-dirs` shows the partition there. (The new replica fetches from the
leader, which adds it to the ISR by AlterPartition; that ISR change completes the move.)"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from broker_process import wait_until
from quorum_cluster import QuorumCluster

from odradek.cli import log_dirs, reassign_partitions
from odradek.client import Admin, Consumer, NewTopic, Producer

START_TIMEOUT_S = 40.0
MOVE_TIMEOUT_S = 60.0
RECORDS = 200
SOURCE, DESTINATION = 1, 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(tmp_path_factory.mktemp("reassign"), size=3)
    cluster.format()
    cluster.start()
    try:
        cluster.wait_for_leader(START_TIMEOUT_S)
        wait_until(lambda: live_brokers(cluster) == {1, 2, 3}, START_TIMEOUT_S, interval=0.1,
                   message="every broker registered and unfenced")
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def live_brokers(cluster: QuorumCluster) -> set[int]:
    response = cluster.nodes[1].metadata(topics=[])
    return set() if response is None else {b.node_id for b in response.brokers}


def bootstrap(cluster: QuorumCluster, node_id: int = 1) -> str:
    return f"127.0.0.1:{cluster.nodes[node_id].port}"


def run_tool(capsys, main, *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def partition_state(cluster: QuorumCluster, topic: str) -> tuple[list[int], list[int], int]:
    response = cluster.nodes[3].metadata(topics=[topic])
    (partition,) = response.topics[0].partitions
    return list(partition.replica_nodes), list(partition.isr_nodes), partition.leader_id


def test_an_rf1_partition_moves_to_another_broker_with_its_data(cluster, capsys, tmp_path):
    topic = f"moving-{uuid.uuid4().hex[:6]}"
    servers = bootstrap(cluster)
    with Admin({"bootstrap.servers": servers}) as admin:
        admin.create_topics([NewTopic(topic, replica_assignment={0: [SOURCE]})])
    wait_until(lambda: partition_state(cluster, topic) == ([SOURCE], [SOURCE], SOURCE),
               START_TIMEOUT_S, message="the topic on broker 1")
    values = [b"record-%d" % i for i in range(RECORDS)]
    with Producer({"bootstrap.servers": servers, "acks": "all"}) as producer:
        for value in values:
            producer.send(topic, value, partition=0)
        producer.flush(30)

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [DESTINATION]}]}))
    code, out = run_tool(capsys, reassign_partitions.main, "--bootstrap-server", servers,
                         "--execute", "--reassignment-json-file", str(plan),
                         "--throttle", "10000000")
    assert code == 0, out
    assert f"Successfully started partition reassignment for {topic}-0" in out
    code, out = run_tool(capsys, reassign_partitions.main, "--bootstrap-server", servers,
                         "--list")
    assert out in ((f"Current partition reassignments:\n{topic}-0: replicas: 2,1. adding: 2. "
                   "removing: 1.\n"),
                   "No partition reassignments found.\n")  # it may already be done

    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while True:
        code, out = run_tool(capsys, reassign_partitions.main, "--bootstrap-server", servers,
                             "--verify", "--reassignment-json-file", str(plan))
        assert code == 0, out
        if f"Reassignment of partition {topic}-0 is completed." in out:
            break
        assert f"Reassignment of partition {topic}-0 is still in progress." in out, out
        assert time.monotonic() < deadline, (
            f"the reassignment did not complete in {MOVE_TIMEOUT_S}s: "
            f"{partition_state(cluster, topic)}\n{cluster.nodes[DESTINATION].log_tail()}")
        time.sleep(0.5)
    assert "Clearing broker-level throttles on brokers 1,2,3" in out

    wait_until(lambda: partition_state(cluster, topic) == ([DESTINATION], [DESTINATION],
                                                           DESTINATION),
               10, message="broker 2 alone replicates and leads")
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster, 3), "auto.offset.reset":
                         "earliest", "enable.auto.commit": "false"})
    with consumer:
        consumer.assign([(topic, 0)])
        consumed: list[bytes] = []
        end = time.monotonic() + 20
        while len(consumed) < RECORDS and time.monotonic() < end:
            consumed += [record.value for record in consumer.poll(timeout_ms=500)]
    assert consumed == values

    code, out = run_tool(capsys, log_dirs.main, "--describe", "--bootstrap-server", servers,
                         "--topic-list", topic, "--broker-list", str(DESTINATION))
    assert code == 0, out
    document = json.loads(out.splitlines()[2])
    (directory,) = document["brokers"][0]["logDirs"]
    (replica,) = directory["partitions"]
    assert replica["partition"] == f"{topic}-0" and replica["size"] > 0
