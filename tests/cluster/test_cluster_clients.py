"""Third-party clients against a real 3-node Odradek cluster (3 combined voters, each its own
process), then a broker-only node 4 joins: librdkafka (confluent-kafka) and kafka-python see
every broker, route each partition's produce and fetch to its leader and find each group's
coordinator (whichever broker leads the group's `__consumer_offsets` partition), knowing only
one broker's address; `odradek metadata-quorum` describes the quorum through a broker.

The tests share one cluster and run in order: node 4 is started by the last one."""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter

import pytest
from broker_process import ODRADEK, wait_until
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer
from quorum_cluster import QuorumCluster, elapsed_since, send_request

from odradek.protocol import messages as m

START_TIMEOUT_S = 40.0  # three Python processes starting on a shared machine
SETTLE_S = 15.0
VOTERS = (1, 2, 3)
BROKER_ONLY = 4
MESSAGES = 600
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(tmp_path_factory.mktemp("clients"), size=3, brokers=1)
    cluster.format()
    for node_id in VOTERS:  # node 4 joins later (test_metadata_quorum_...)
        cluster.nodes[node_id].start()
    started = time.monotonic()
    try:
        cluster.wait_for_leader(START_TIMEOUT_S)
        wait_until(lambda: registered(cluster) == set(VOTERS), START_TIMEOUT_S, interval=0.1,
                   message="every voter registered and unfenced")
        print(f"\n3 nodes up, a leader elected and every broker unfenced "
              f"{elapsed_since(started):.2f}s after start")
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def registered(cluster: QuorumCluster, asked: int = 1) -> set[int]:
    """The live (unfenced) brokers node `asked` lists in Metadata."""
    response = cluster.nodes[asked].metadata(topics=[])
    return set() if response is None else {b.node_id for b in response.brokers}


def bootstrap(cluster: QuorumCluster, node_id: int) -> str:
    return f"127.0.0.1:{cluster.nodes[node_id].port}"


def a_follower(cluster: QuorumCluster) -> int:
    """A voter that is not the active controller: what it is asked, it forwards."""
    leader_id, _epoch = cluster.wait_for_leader(SETTLE_S)
    return next(node_id for node_id in VOTERS if node_id != leader_id)


def leaders(cluster: QuorumCluster, topic: str, asked: int = 1) -> dict[int, int] | None:
    """{partition: leader} as node `asked` reports it (None until every partition has one)."""
    response = cluster.nodes[asked].metadata(topics=[topic])
    if response is None or response.topics[0].error_code != 0:
        return None
    out = {p.partition_index: p.leader_id for p in response.topics[0].partitions}
    return out if out and all(leader >= 0 for leader in out.values()) else None


def test_both_clients_list_every_broker(cluster):
    only = a_follower(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, only)})
    metadata = admin.list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
        node_id: ("127.0.0.1", cluster.nodes[node_id].port) for node_id in VOTERS}
    assert metadata.controller_id in VOTERS

    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster, only))
    try:
        described = kp_admin.describe_cluster()
    finally:
        kp_admin.close()
    assert {b["broker_id"]: (b["host"], b["port"]) for b in described["brokers"]} == {
        node_id: ("127.0.0.1", cluster.nodes[node_id].port) for node_id in VOTERS}
    assert described["cluster_id"] == cluster.cluster_id
    assert described["controller_id"] in VOTERS


def test_topics_created_by_the_clients_spread_their_leaders(cluster):
    only = a_follower(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, only)})
    created = admin.create_topics([NewTopic("spread", num_partitions=PARTITIONS,
                                            replication_factor=1)], operation_timeout=10)
    created["spread"].result(30)
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster, only))
    try:
        answer = kp_admin.create_topics({"kp-spread": {"num_partitions": PARTITIONS,
                                                       "replication_factor": 1}})
    finally:
        kp_admin.close()
    assert [t["error_code"] for t in answer["topics"]] == [0]
    for topic in ("spread", "kp-spread"):
        for asked in VOTERS:  # every broker's image agrees
            placed = wait_until(lambda t=topic, a=asked: leaders(cluster, t, a), SETTLE_S,
                                message=f"{topic}'s leaders on node {asked}")
            # RF=1, 6 partitions, 3 unfenced brokers: each leads 2 (striped placement).
            assert Counter(placed.values()) == {1: 2, 2: 2, 3: 2}, (topic, asked, placed)
    # The client sees the same leaders as the brokers' images.
    seen = admin.list_topics("spread", timeout=10).topics["spread"].partitions
    assert {p: seen[p].leader for p in seen} == leaders(cluster, "spread")


def consume_with_group(make_consumer, poll, close, expected: int, timeout: float) -> list:
    consumer = make_consumer()
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(poll(consumer))
    finally:
        close(consumer)
    return got


def test_produce_through_one_broker_and_consume_with_groups(cluster):
    partition_leaders = wait_until(lambda: leaders(cluster, "spread"), SETTLE_S,
                                   message="spread's leaders")
    only = a_follower(cluster)
    producer = Producer({"bootstrap.servers": bootstrap(cluster, only), "acks": "all",
                         "linger.ms": 5, "enable.idempotence": False})
    delivered: list = []
    sent = {(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(MESSAGES)}
    started = time.monotonic()
    for key, value in sorted(sent):
        producer.produce("spread", key=key, value=value,
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    produce_s = elapsed_since(started)
    errors = [err for err, _ in delivered if err is not None]
    assert not errors, errors[:5]
    assert len(delivered) == MESSAGES
    per_partition = Counter(msg.partition() for _, msg in delivered)
    # Keyed messages land on every partition, so every broker took produce requests.
    assert set(per_partition) == set(range(PARTITIONS))
    assert {partition_leaders[p] for p in per_partition} == set(VOTERS)
    for partition, count in per_partition.items():  # offsets 0..n-1 in each partition
        offsets = sorted(msg.offset() for _, msg in delivered if msg.partition() == partition)
        assert offsets == list(range(count))

    # librdkafka: a group through one bootstrap broker; the coordinator may be another one.
    def confluent_poll(consumer):
        msg = consumer.poll(0.5)
        if msg is None:
            return []
        if msg.error():
            raise KafkaException(msg.error())
        return [msg]

    confluent_consumer = None

    def make_confluent():
        nonlocal confluent_consumer
        confluent_consumer = Consumer({
            "bootstrap.servers": bootstrap(cluster, only), "group.id": "g-confluent",
            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        confluent_consumer.subscribe(["spread"])
        return confluent_consumer

    def close_confluent(consumer):
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("spread", p) for p in range(PARTITIONS)],
                                       timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == dict(per_partition)
        consumer.close()

    started = time.monotonic()
    got = consume_with_group(make_confluent, confluent_poll, close_confluent, MESSAGES, 30)
    confluent_s = elapsed_since(started)
    assert {(m.key(), m.value()) for m in got} == sent and len(got) == MESSAGES

    # kafka-python: another group, so another coordinator lookup.
    def kp_poll(consumer):
        return [record for records in consumer.poll(timeout_ms=500).values()
                for record in records]

    def close_kp(consumer):
        consumer.commit()
        consumer.close()

    started = time.monotonic()
    got = consume_with_group(
        lambda: KafkaConsumer("spread", bootstrap_servers=bootstrap(cluster, only),
                              group_id="g-kafka-python", auto_offset_reset="earliest",
                              enable_auto_commit=False),
        kp_poll, close_kp, MESSAGES, 30)
    kp_s = elapsed_since(started)
    assert {(r.key, r.value) for r in got} == sent and len(got) == MESSAGES
    coordinators = {group: coordinator_of(cluster, group)
                    for group in ("g-confluent", "g-kafka-python")}
    print(f"\n{MESSAGES} messages produced (acks=all) through broker {only} alone in "
          f"{produce_s:.2f}s, {dict(sorted(per_partition.items()))} per partition; read back "
          f"by a confluent group in {confluent_s:.2f}s and a kafka-python group in "
          f"{kp_s:.2f}s; coordinators {coordinators}")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (Kafka's partitionFor hashes the group id with it)."""
    value = 0
    utf16 = text.encode("utf-16-be")
    for i in range(0, len(utf16), 2):
        value = (31 * value + int.from_bytes(utf16[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_of(cluster: QuorumCluster, group: str) -> int:
    """The group's coordinator (FindCoordinator), checked to be the broker that leads the
    group's `__consumer_offsets` partition: abs(hash(group)) % its partition count."""
    response = send_request(cluster.nodes[1].port, 10, 3, m.FindCoordinatorRequest(
        key=group, key_type=0))
    assert response.error_code == 0, response
    offsets_leaders = leaders(cluster, "__consumer_offsets")
    assert offsets_leaders is not None
    partition = abs(java_string_hash(group)) % len(offsets_leaders)
    assert response.node_id == offsets_leaders[partition], (group, partition, response)
    return response.node_id


def run_quorum_tool(*args: str) -> str:
    result = subprocess.run([*ODRADEK, "metadata-quorum", *args], check=False,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def status(cluster: QuorumCluster, via: int) -> dict[str, str]:
    out = run_quorum_tool("--bootstrap-server", bootstrap(cluster, via), "describe",
                          "--status")
    return dict(re.match(r"(\w+):\s+(.*)$", line).groups() for line in out.splitlines())


def replication(cluster: QuorumCluster, via: int) -> dict[int, list[str]]:
    """{node id: [log end offset, lag, last fetch, last caught up, status]}"""
    out = run_quorum_tool("--bootstrap-server", bootstrap(cluster, via), "describe",
                          "--replication")
    rows = [[cell.strip() for cell in line.split("\t")[:-1]] for line in out.splitlines()]
    # Kafka 4.0's table (DescribeQuorum v2): a DirectoryId column, left out here.
    assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                       "LastCaughtUpTimestamp", "Status"]
    return {int(row[0]): row[2:] for row in rows[1:]}


def ids_of(replicas: str) -> list[int]:
    """The ids in a `CurrentVoters:` / `CurrentObservers:` line (Kafka 4.0's JSON objects)."""
    return [int(n) for n in re.findall(r'"id": (\d+)', replicas)]


def test_metadata_quorum_describes_voters_and_a_broker_only_observer(cluster):
    leader_id, epoch = cluster.wait_for_leader(SETTLE_S)
    before = status(cluster, a_follower(cluster))
    assert before["ClusterId"] == cluster.cluster_id
    assert int(before["LeaderId"]) == leader_id
    assert int(before["LeaderEpoch"]) == epoch
    assert int(before["HighWatermark"]) > 0
    assert ids_of(before["CurrentVoters"]) == [1, 2, 3]
    # Static voters: no directory ids, each with its controller endpoint.
    assert before["CurrentVoters"].count('"endpoints": ["CONTROLLER://') == 3
    assert "directoryId" not in before["CurrentVoters"]
    assert before["CurrentObservers"] == "[]"

    node4 = cluster.nodes[BROKER_ONLY]
    node4.start()
    started = time.monotonic()
    wait_until(lambda: registered(cluster) == {*VOTERS, BROKER_ONLY}, START_TIMEOUT_S,
               interval=0.1, message="broker 4 registered and unfenced")
    registered_s = elapsed_since(started)
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, BROKER_ONLY)})
    assert set(admin.list_topics(timeout=10).brokers) == {*VOTERS, BROKER_ONLY}

    # Asked through the broker-only node (not a voter: it does not answer DescribeQuorum
    # itself; the tool goes on to the brokers its Metadata names).
    after = status(cluster, BROKER_ONLY)
    assert ids_of(after["CurrentVoters"]) == [1, 2, 3]
    assert BROKER_ONLY in ids_of(after["CurrentObservers"])
    assert int(after["HighWatermark"]) >= int(before["HighWatermark"])

    def observer_caught_up() -> list[str] | None:
        rows = replication(cluster, 1)
        row = rows.get(BROKER_ONLY)
        return row if row is not None and row[-1] == "Observer" and row[1] == "0" else None

    row = wait_until(observer_caught_up, SETTLE_S, interval=0.2,
                     message="node 4's observer lag at 0")
    rows = replication(cluster, 1)
    assert rows[leader_id][-1] == "Leader"
    assert {rows[v][-1] for v in VOTERS if v != leader_id} == {"Follower"}
    print(f"\nbroker 4 unfenced {registered_s:.2f}s after its start and an observer at lag 0 "
          f"{elapsed_since(started):.2f}s after (log end {row[0]}); status through node 4: "
          f"{after}")
