"""Broker membership in a real cluster: 3 combined voters and 2 broker-only nodes (observers of
the quorum), each its own process. Every broker registers with the active controller and is
unfenced; a broker whose heartbeats stop (SIGSTOP) is fenced once `broker.session.timeout.ms`
passes, its leaderships move to other ISR members and it leaves the ISRs; it is unfenced when it
comes back (SIGCONT). A partition whose ISR has no live member stays offline (unclean leader
election is off by default) until an ISR member returns.

The tests share one cluster and run in order."""

from __future__ import annotations

import signal
import time

import pytest
from broker_process import wait_until
from quorum_cluster import QuorumCluster, elapsed_since

from odradek.protocol.errors import ErrorCode

SESSION_TIMEOUT_S = 3.0
HEARTBEAT_INTERVAL_MS = 500
START_TIMEOUT_S = 40.0  # five Python processes starting on a shared machine
SETTLE_S = 10.0
BROKER_ONLY = (4, 5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(
        tmp_path_factory.mktemp("membership"), size=3, brokers=len(BROKER_ONLY),
        overrides={"broker.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
                   "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS)})
    cluster.format()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def live_brokers(cluster: QuorumCluster, asked: int = 1) -> set[int] | None:
    response = cluster.nodes[asked].metadata(topics=[])
    return None if response is None else {b.node_id for b in response.brokers}


def partitions(cluster: QuorumCluster, topic: str, asked: int = 1) -> dict[int, tuple] | None:
    """{partition: (leader, isr, error)} as node `asked` reports them."""
    response = cluster.nodes[asked].metadata(topics=[topic])
    if response is None or response.topics[0].error_code != 0:
        return None
    return {p.partition_index: (p.leader_id, sorted(p.isr_nodes), p.error_code)
            for p in response.topics[0].partitions}


def create(cluster: QuorumCluster, name: str, **kwargs) -> None:
    """CreateTopics sent to a broker-only node: it forwards it to the active controller."""
    def created() -> bool:
        error = cluster.nodes[5].create_topic(name, **kwargs)
        assert error in (ErrorCode.NONE.code, ErrorCode.NOT_CONTROLLER.code), error
        return error == ErrorCode.NONE.code
    wait_until(created, SETTLE_S, interval=0.2, message=f"CreateTopics {name}")


def test_every_broker_registers_and_is_unfenced(cluster):
    started = time.monotonic()
    cluster.wait_for_leader(START_TIMEOUT_S)
    for asked in cluster.nodes:
        wait_until(lambda asked=asked: live_brokers(cluster, asked) == {1, 2, 3, 4, 5},
                   START_TIMEOUT_S, interval=0.1,
                   message=f"node {asked} lists all five brokers")
    print(f"\nall five brokers registered and unfenced {elapsed_since(started):.2f}s after "
          "the quorum had a leader")
    # The broker-only nodes follow the quorum as observers: the leader reports them.
    leader_id, epoch = cluster.wait_for_leader(SETTLE_S)
    view = cluster.nodes[leader_id].describe_quorum()
    assert view is not None and set(view.voter_end_offsets) == {1, 2, 3}
    # A broker-only node forwards DescribeQuorum to the active controller, which answers.
    for node_id in BROKER_ONLY:
        forwarded = cluster.nodes[node_id].describe_quorum(on_broker_listener=True)
        assert forwarded is not None and forwarded.is_leader is False
        assert (forwarded.error_code, forwarded.leader_id, forwarded.leader_epoch) == (
            0, leader_id, epoch)


def test_a_stopped_broker_is_fenced_and_its_leaderships_move(cluster):
    create(cluster, "spread", partitions=10, replication_factor=3)
    before = wait_until(lambda: partitions(cluster, "spread"), SETTLE_S,
                        message="the topic's partitions")
    led_by_4 = [p for p, (leader, _isr, _e) in before.items() if leader == 4]
    with_4 = [p for p, (_leader, isr, _e) in before.items() if 4 in isr]
    assert led_by_4 and with_4, before  # 10 partitions striped over 5 brokers

    victim = cluster.nodes[4]
    victim.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    stopped = time.monotonic()
    try:
        wait_until(lambda: live_brokers(cluster) == {1, 2, 3, 5},
                   SESSION_TIMEOUT_S + SETTLE_S, interval=0.1, message="broker 4 fenced")
        fenced_after = elapsed_since(stopped)
        print(f"\nbroker 4 fenced {fenced_after:.2f}s after SIGSTOP "
              f"(broker.session.timeout.ms={int(SESSION_TIMEOUT_S * 1000)})")
        # Not before its session ran out (counted from its last heartbeat, before the stop).
        assert fenced_after >= SESSION_TIMEOUT_S - HEARTBEAT_INTERVAL_MS / 1000 - 0.2
        after = partitions(cluster, "spread")
        assert after is not None
        for p, (leader, isr, error) in after.items():
            assert leader != 4 and 4 not in isr, (p, after[p])
            assert error == 0 and leader in isr
            if p in led_by_4:  # a new leader from the old ISR
                assert leader in before[p][1]
    finally:
        victim.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    resumed = time.monotonic()
    wait_until(lambda: live_brokers(cluster) == {1, 2, 3, 4, 5}, SETTLE_S, interval=0.1,
               message="broker 4 unfenced")
    print(f"broker 4 unfenced {elapsed_since(resumed):.2f}s after SIGCONT")


def test_a_partition_whose_isr_is_down_stays_offline(cluster):
    create(cluster, "offline", assignments={0: [4, 5]})
    wait_until(lambda: (partitions(cluster, "offline") or {}).get(0, (None,))[0] == 4,
               SETTLE_S, message="partition led by 4")
    nodes = cluster.nodes
    nodes[5].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        wait_until(lambda: partitions(cluster, "offline")[0][:2] == (4, [4]),
                   SESSION_TIMEOUT_S + SETTLE_S, interval=0.1, message="5 out of the ISR")
        nodes[4].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        # The last ISR member stays in the ISR; the partition has no leader.
        wait_until(lambda: partitions(cluster, "offline")[0][:2] == (-1, [4]),
                   SESSION_TIMEOUT_S + SETTLE_S, interval=0.1, message="partition offline")
        nodes[5].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        wait_until(lambda: 5 in live_brokers(cluster), SETTLE_S, interval=0.1,
                   message="broker 5 back")
        # 5 is live but was not in the ISR: without unclean election it may not lead.
        deadline = time.monotonic() + 2 * HEARTBEAT_INTERVAL_MS / 1000 + 1
        while time.monotonic() < deadline:
            leader, isr, error = partitions(cluster, "offline")[0]
            assert (leader, isr) == (-1, [4])
            assert error == ErrorCode.LEADER_NOT_AVAILABLE.code
            time.sleep(0.1)
    finally:
        for node_id in BROKER_ONLY:
            nodes[node_id].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    wait_until(lambda: partitions(cluster, "offline")[0][0] == 4, SESSION_TIMEOUT_S + SETTLE_S,
               interval=0.1, message="4 leads again once back")


def test_dedicated_controllers_run_a_cluster_of_broker_only_nodes(tmp_path):
    """3 controller-only voters (no broker listener, no data logs) and 2 broker-only nodes:
    the brokers register, admin requests sent to a broker are forwarded to the controllers,
    and Metadata names a broker as the controller (clients cannot reach controllers)."""
    cluster = QuorumCluster(tmp_path, size=3, brokers=2, dedicated_controllers=True)
    cluster.format()
    cluster.start()
    try:
        cluster.wait_for_leader(START_TIMEOUT_S)
        wait_until(lambda: live_brokers(cluster, asked=4) == {4, 5}, START_TIMEOUT_S,
                   interval=0.1, message="both brokers registered")
        assert cluster.nodes[4].create_topic("on-dedicated", partitions=4,
                                             replication_factor=2) == ErrorCode.NONE.code
        wait_until(lambda: partitions(cluster, "on-dedicated", asked=5) is not None, SETTLE_S,
                   message="the topic on broker 5")
        layout = partitions(cluster, "on-dedicated", asked=5)
        assert {leader for leader, _isr, _e in layout.values()} == {4, 5}
        assert all(isr == [4, 5] for _leader, isr, _e in layout.values())
        response = cluster.nodes[4].metadata(topics=[])
        assert response.controller_id in (4, 5)
        for node_id in (1, 2, 3):  # controllers keep no partition data
            assert not (cluster.nodes[node_id].workdir / "data" / "on-dedicated-0").exists()
    finally:
        cluster.stop()
        cluster.kill_all()
