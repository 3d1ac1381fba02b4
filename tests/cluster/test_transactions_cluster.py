"""Transactions on a replicated cluster of real processes (three dedicated controllers, three
brokers): `__transaction_state`, `__consumer_offsets` and the data topic at RF=3,
min.insync.replicas=2. The broker coordinating a librdkafka producer's transactional id is
killed with SIGKILL in the middle of a transaction; the coordinator moves with the leadership
of its `__transaction_state` partition, reloads the open transaction, and the producer commits
it there: read_committed readers see every record of every committed transaction once, and
nothing of the aborted one."""

from __future__ import annotations

import time
import uuid

import pytest
from broker_process import wait_until
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from quorum_cluster import HOST, QuorumCluster

from odradek.client import Admin
from odradek.protocol.errors import ErrorCode

START_TIMEOUT_S = 60.0
SETTLE_S = 30.0
BROKERS = (4, 5, 6)
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(
        tmp_path_factory.mktemp("transactions"), size=3, brokers=3, dedicated_controllers=True,
        overrides={"broker.session.timeout.ms": "4000",
                   "broker.heartbeat.interval.ms": "300",
                   "replica.lag.time.max.ms": "3000",
                   "replica.fetch.wait.max.ms": "200",
                   "default.replication.factor": "3",
                   "min.insync.replicas": "2",
                   "offsets.topic.num.partitions": "3",
                   "offsets.topic.replication.factor": "3",
                   "transaction.state.log.num.partitions": "3",
                   "transaction.state.log.replication.factor": "3",
                   "transaction.state.log.min.isr": "2"})
    cluster.format()
    cluster.start()
    try:
        cluster.wait_for_leader(START_TIMEOUT_S)
        wait_until(lambda: _live_brokers(cluster) == set(BROKERS), START_TIMEOUT_S,
                   interval=0.2, message="three unfenced brokers")
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def _live_brokers(cluster: QuorumCluster) -> set[int] | None:
    for broker in BROKERS:
        if cluster.nodes[broker].running:
            response = cluster.nodes[broker].metadata(topics=[])
            if response is not None:
                return {b.node_id for b in response.brokers}
    return None


def _bootstrap(cluster: QuorumCluster) -> str:
    return ",".join(f"{HOST}:{cluster.nodes[b].port}" for b in BROKERS)


def _values(bootstrap: str, topic: str, isolation: str, sentinel: bytes) -> list[bytes]:
    """Values of every partition of `topic` in `isolation`, until each partition showed
    `sentinel` (committed last to every partition)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "socket.timeout.ms": 5000})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    done: set[int] = set()
    deadline = time.monotonic() + SETTLE_S
    try:
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"{sentinel!r} not read in every partition"
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(msg.error())
                values.append(msg.value())
                if msg.value() == sentinel:
                    done.add(msg.partition())
    finally:
        consumer.close()
    return values


def _coordinator(bootstrap: str, transactional_id: str) -> tuple[int, str]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        described = admin.describe_transactions([transactional_id])[transactional_id]
    return described.coordinator_id, described.state


def test_the_coordinator_moves_with_its_partition_and_the_transaction_commits(cluster):
    bootstrap = _bootstrap(cluster)
    topic = f"payments-{uuid.uuid4().hex[:6]}"
    assert cluster.nodes[4].create_topic(topic, partitions=PARTITIONS,
                                         replication_factor=3) == ErrorCode.NONE
    transactional_id = f"failover-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60_000, "socket.timeout.ms": 5000,
                         "message.timeout.ms": 60_000})
    producer.init_transactions(60)

    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=b"first-%d" % i, partition=i % PARTITIONS)
    producer.commit_transaction(60)

    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=b"aborted-%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0
    producer.abort_transaction(60)

    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=b"before-%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0  # acknowledged by min.insync.replicas before the kill
    coordinator, state = _coordinator(bootstrap, transactional_id)
    assert state == "Ongoing" and coordinator in BROKERS
    cluster.nodes[coordinator].kill()
    killed_at = time.monotonic()

    for i in range(30):
        producer.produce(topic, value=b"after-%d" % i, partition=i % PARTITIONS)
    producer.commit_transaction(120)
    committed_after_s = time.monotonic() - killed_at
    new_coordinator, state = _coordinator(bootstrap, transactional_id)
    assert new_coordinator != coordinator and new_coordinator in BROKERS
    wait_until(lambda: _coordinator(bootstrap, transactional_id)[1] == "CompleteCommit",
               SETTLE_S, interval=0.2, message="the commit to complete")
    print(f"coordinator {coordinator} killed; committed through {new_coordinator} "
          f"{committed_after_s:.1f} s later")

    producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce(topic, value=b"end", partition=partition)
    producer.commit_transaction(60)

    committed = [v for v in _values(bootstrap, topic, "read_committed", b"end") if v != b"end"]
    expected = [b"%s-%d" % (phase, i) for phase in (b"first", b"before", b"after")
                for i in range(30)]
    assert sorted(committed) == sorted(expected)  # each once; nothing aborted
    everything = _values(bootstrap, topic, "read_uncommitted", b"end")
    assert sum(v.startswith(b"aborted-") for v in everything) == 30
