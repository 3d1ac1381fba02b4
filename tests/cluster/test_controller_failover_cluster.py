"""The active controller is killed (-9) under a stream of CreateTopics sent to a broker-only node
(which forwards them to whoever is the active controller): a new controller is elected within
the election timeout plus a few seconds, every acknowledged topic exists afterwards on every
live node, and none was created twice.

3 combined voters + 1 broker-only node, real processes."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from broker_process import wait_until
from quorum_cluster import QuorumCluster

from odradek.protocol.errors import ErrorCode

ELECTION_TIMEOUT_S = 1.0  # controller.quorum.election.timeout.ms (Kafka's default)
START_TIMEOUT_S = 40.0
SETTLE_S = 15.0
CLIENT = 4  # the broker-only node the creates are sent to


@pytest.fixture
def cluster(tmp_path):
    cluster = QuorumCluster(tmp_path, size=3, brokers=1)
    cluster.format()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


class CreateStream(threading.Thread):
    """Creates topics s-0, s-1, ... one at a time through one node; records the answers."""

    def __init__(self, cluster: QuorumCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acknowledged: list[str] = []  # answered NONE
        self.already_existed: list[str] = []  # a retry of a create whose answer was lost
        self.errors: Counter[str] = Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stopping.is_set():
            name = f"s-{index}"
            try:
                error = self.cluster.nodes[CLIENT].create_topic(name)
            except (OSError, ConnectionError) as exc:
                self.errors[type(exc).__name__] += 1
                continue  # the same name again: it may or may not have been created
            if error == ErrorCode.NONE.code:
                self.acknowledged.append(name)
            elif error == ErrorCode.TOPIC_ALREADY_EXISTS.code:
                self.already_existed.append(name)
            else:
                self.errors[ErrorCode.from_code(error).name] += 1
                continue
            index += 1


def all_topics(cluster: QuorumCluster, node_id: int) -> list[str] | None:
    response = cluster.nodes[node_id].metadata()
    return None if response is None else [t.name for t in response.topics]


def test_killing_the_active_controller_under_creates_loses_and_repeats_nothing(cluster):
    old_leader, old_epoch = cluster.wait_for_leader(START_TIMEOUT_S)
    wait_until(lambda: all_topics(cluster, CLIENT) is not None, START_TIMEOUT_S,
               message="the broker-only node answers")
    stream = CreateStream(cluster)
    stream.start()
    try:
        wait_until(lambda: len(stream.acknowledged) >= 20, SETTLE_S, interval=0.05,
                   message="creates flowing")
        acked_before = len(stream.acknowledged)
        cluster.nodes[old_leader].kill()
        killed = time.monotonic()
        survivors = [n for n in cluster.live_nodes() if n.is_voter]
        new_leader, new_epoch = cluster.wait_for_leader(SETTLE_S, nodes=survivors,
                                                        min_epoch=old_epoch + 1)
        election_s = time.monotonic() - killed
        wait_until(lambda: len(stream.acknowledged) >= acked_before + 20, SETTLE_S,
                   interval=0.05, message="creates flowing again")
        resumed_s = time.monotonic() - killed
    finally:
        stream.stopping.set()
        stream.join(30)
    print(f"\nkilled controller {old_leader} (epoch {old_epoch}); {new_leader} leads epoch "
          f"{new_epoch} after {election_s:.2f}s; creates resumed after {resumed_s:.2f}s; "
          f"{len(stream.acknowledged)} acknowledged, {len(stream.already_existed)} retried "
          f"creates found their topic, errors {dict(stream.errors)}")
    assert new_leader != old_leader
    assert election_s < ELECTION_TIMEOUT_S + 5  # KIP-595: election timeout + a few seconds

    wanted = set(stream.acknowledged) | set(stream.already_existed)
    for node in cluster.live_nodes():
        def has_all(node_id: int = node.node_id) -> bool:
            topics = all_topics(cluster, node_id)
            return topics is not None and wanted <= set(topics)
        wait_until(has_all, SETTLE_S, message=f"node {node.node_id} has every created topic")
        topics = all_topics(cluster, node.node_id)
        assert topics is not None
        duplicated = [name for name, count in Counter(topics).items() if count > 1]
        assert not duplicated, f"created twice on node {node.node_id}: {duplicated}"
        # Nothing the stream did not ask for, and no gap: s-0..s-N were asked in order.
        asked = {f"s-{i}" for i in range(len(stream.acknowledged)
                                         + len(stream.already_existed) + 1)}
        assert set(topics) <= asked
