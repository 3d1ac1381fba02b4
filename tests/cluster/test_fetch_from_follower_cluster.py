"""Fetch from the closest replica (KIP-392) on a cluster of real processes: three combined
nodes in racks r1, r2, r3 with `replica.selector.class` set to Kafka's
RackAwareReplicaSelector.

The raw protocol shows the leader naming the consumer's in-rack follower instead of sending
data, and that follower serving the records; librdkafka with `client.rack` then consumes
everything through that follower, as its statistics report."""

from __future__ import annotations

import json
import time

import pytest
from broker_process import wait_until
from confluent_kafka import Consumer, Producer, TopicPartition
from quorum_cluster import QuorumCluster, send_request

from odradek.config.broker import RACK_AWARE_SELECTOR
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import iter_batches
from odradek.protocol.records.record import decode_records

START_TIMEOUT_S = 60.0
SETTLE_S = 30.0
TOPIC = "closest"
RECORDS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(
        tmp_path_factory.mktemp("closest"), size=3,
        overrides={"replica.selector.class": RACK_AWARE_SELECTOR,
                   "broker.heartbeat.interval.ms": "300",
                   "replica.fetch.wait.max.ms": "100"},
        node_overrides={n: {"broker.rack": f"r{n}"} for n in (1, 2, 3)})
    cluster.format()
    cluster.start()
    try:
        cluster.wait_for_leader(START_TIMEOUT_S)
        wait_until(lambda: live_brokers(cluster) == {1, 2, 3}, START_TIMEOUT_S, interval=0.2,
                   message="three unfenced brokers")
        error = cluster.nodes[1].create_topic(TOPIC, assignments={0: [1, 2, 3]})
        assert error == ErrorCode.NONE, error
        wait_until(lambda: isr(cluster) == (1, [1, 2, 3]), SETTLE_S, interval=0.1,
                   message="the topic led by 1 with a full ISR")
        producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
        for i in range(RECORDS):
            producer.produce(TOPIC, value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def bootstrap(cluster: QuorumCluster) -> str:
    return ",".join(f"127.0.0.1:{node.port}" for node in cluster.nodes.values())


def live_brokers(cluster: QuorumCluster) -> set[int] | None:
    response = cluster.nodes[1].metadata(topics=[])
    return None if response is None else {b.node_id for b in response.brokers}


def isr(cluster: QuorumCluster) -> tuple[int, list[int]] | None:
    response = cluster.nodes[1].metadata(topics=[TOPIC])
    if response is None or response.topics[0].error_code != 0:
        return None
    partition = response.topics[0].partitions[0]
    return partition.leader_id, sorted(partition.isr_nodes)


def consumer_fetch(cluster: QuorumCluster, broker: int, rack: str, version: int = 12,
                   offset: int = 0) -> m.FetchResponse.PartitionData:
    """A consumer's Fetch (by topic name: v12 and earlier) of partition 0."""
    request = m.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, rack_id=rack, forgotten_topics_data=[],
        topics=[m.FetchRequest.FetchTopic(topic=TOPIC, partitions=[
            m.FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                          current_leader_epoch=0, last_fetched_epoch=-1,
                                          log_start_offset=-1, partition_max_bytes=1 << 20)])])
    response = send_request(cluster.nodes[broker].port, 1, version, request)
    return response.responses[0].partitions[0]


def values_of(records: bytes) -> list[bytes]:
    return [r[3] for pos, header in iter_batches(records)
            for r in decode_records(records, pos, header)]


def test_the_leader_names_the_follower_in_the_consumers_rack(cluster):
    part = consumer_fetch(cluster, 1, "r2")
    assert (part.error_code, part.preferred_read_replica, bytes(part.records or b"")) == \
        (ErrorCode.NONE, 2, b"")
    assert part.high_watermark == RECORDS
    # A consumer in the leader's rack, one without a rack, and one in a rack with no replica
    # are served by the leader.
    for rack in ("r1", "", "r9"):
        part = consumer_fetch(cluster, 1, rack)
        assert part.preferred_read_replica == -1, rack
        assert values_of(bytes(part.records))[:1] == [b"v0"], rack


def test_a_follower_serves_consumers_up_to_its_high_watermark(cluster):
    def served() -> bool:  # the follower learns the high watermark on its next fetch
        part = consumer_fetch(cluster, 3, "r3")
        return part.error_code == ErrorCode.NONE and part.high_watermark == RECORDS
    wait_until(served, SETTLE_S, interval=0.1, message="follower 3 at the high watermark")
    part = consumer_fetch(cluster, 3, "r3")
    assert values_of(bytes(part.records)) == [b"v%d" % i for i in range(RECORDS)]
    # Fetch before v11 carries no client metadata: only the leader answers it.
    assert consumer_fetch(cluster, 3, "", version=10).error_code == \
        ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_librdkafka_with_client_rack_consumes_through_its_rack(cluster):
    fetched_from: list[tuple[int, int]] = []

    def stats(payload: str) -> None:
        partition = json.loads(payload)["topics"].get(TOPIC, {}).get("partitions", {}).get("0")
        if partition is not None:
            fetched_from.append((partition["leader"], partition["broker"]))

    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "closest",
                         "client.rack": "r3", "enable.auto.commit": False,
                         "statistics.interval.ms": 200, "stats_cb": stats})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + SETTLE_S
    try:
        while (len(values) < RECORDS or (1, 3) not in fetched_from) \
                and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(RECORDS)]
    # The leader is 1; librdkafka fetches from 3, the replica in its rack.
    assert (1, 3) in fetched_from, fetched_from[-5:]
