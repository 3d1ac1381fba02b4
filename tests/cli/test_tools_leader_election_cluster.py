"""`odradek leader-election` on a cluster of real processes (tests/cluster/quorum_cluster.py:
3 voters and one broker-only node), where elections have something to do.

The outcomes Kafka's tool prints besides "already elected": a preferred replica that is fenced
cannot lead (PreferredLeaderNotAvailableException); once it is back and has caught up into the
ISR, a preferred election moves leadership to it; and an unclean election gives a leaderless
partition a live replica from outside its ISR. The broker-only node lets two replicas be down
at once without costing the quorum its majority. One cluster, one test: it costs seconds."""

from __future__ import annotations

import signal
import time

from broker_process import wait_until
from cluster.quorum_cluster import QuorumCluster

from odradek.cli import leader_election
from odradek.protocol.errors import ErrorCode

START_TIMEOUT_S = 60.0  # three Python processes starting on a shared machine
SESSION_TIMEOUT_S = 2.0
SETTLE_S = 15.0


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = leader_election.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def partition_state(cluster: QuorumCluster, asked: int, topic: str) -> tuple[int, list[int]]:
    """(leader, isr) of the topic's partition 0 as node `asked` reports it."""
    response = cluster.nodes[asked].metadata(topics=[topic])
    if response is None or response.topics[0].error_code != 0:
        return -2, []
    partition = response.topics[0].partitions[0]
    return partition.leader_id, sorted(partition.isr_nodes)


def live_brokers(cluster: QuorumCluster, asked: int) -> set[int]:
    response = cluster.nodes[asked].metadata(topics=[])
    return set() if response is None else {b.node_id for b in response.brokers}


def test_preferred_and_unclean_elections(tmp_path, capsys):
    cluster = QuorumCluster(tmp_path, size=3, brokers=1, overrides={
        "broker.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
        "broker.heartbeat.interval.ms": "300",
        # The test elects the preferred leader itself; the periodic rebalance would race it.
        "auto.leader.rebalance.enable": "false"})
    cluster.format()
    cluster.start()
    try:
        quorum_leader, _epoch = cluster.wait_for_leader(START_TIMEOUT_S)
        # At most one voter is down at a time (the quorum keeps its majority); the broker-only
        # node 4 may be down with it.
        first, second = (node_id for node_id in (1, 2, 3) if node_id != quorum_leader)
        observer = 4
        bootstrap = f"127.0.0.1:{cluster.nodes[quorum_leader].port}"
        wait_until(lambda: live_brokers(cluster, quorum_leader) == {1, 2, 3, 4},
                   START_TIMEOUT_S, interval=0.1, message="four live brokers")
        for topic, replicas in (("pref", [first, quorum_leader]),
                                ("dirty", [second, observer])):
            def created(topic=topic, replicas=replicas) -> bool:
                error = cluster.nodes[quorum_leader].create_topic(topic,
                                                                  assignments={0: replicas})
                assert error in (ErrorCode.NONE.code, ErrorCode.TOPIC_ALREADY_EXISTS.code), error
                return partition_state(cluster, quorum_leader, topic)[0] == replicas[0]
            wait_until(created, SETTLE_S, interval=0.2, message=f"topic {topic}")

        def pause(node_id: int) -> None:
            cluster.nodes[node_id].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            wait_until(lambda: node_id not in live_brokers(cluster, quorum_leader),
                       SESSION_TIMEOUT_S + SETTLE_S, interval=0.1,
                       message=f"broker {node_id} fenced")

        def resume(node_id: int) -> None:
            cluster.nodes[node_id].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            wait_until(lambda: node_id in live_brokers(cluster, quorum_leader), SETTLE_S,
                       interval=0.1, message=f"broker {node_id} unfenced")

        started = time.monotonic()
        pause(first)  # leaves the ISR of "pref", which the quorum leader leads now
        assert partition_state(cluster, quorum_leader, "pref") == (quorum_leader,
                                                                   [quorum_leader])
        # `first` is the preferred replica of "pref", but fenced.
        code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--election-type",
                             "preferred", "--topic", "pref", "--partition", "0")
        assert code == 1
        assert out == ("Error completing leader election (PREFERRED) for partition: pref-0: "
                       "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: "
                       "The preferred leader is not available.\n")
        assert err.splitlines()[0] == "1 replica(s) could not be elected"
        resume(first)
        # Back, it fetches from the leader, catches up and the leader adds it to the ISR.
        wait_until(lambda: partition_state(cluster, quorum_leader, "pref")[1]
                   == sorted([first, quorum_leader]), SETTLE_S, interval=0.1,
                   message=f"broker {first} back in the ISR of pref-0")
        code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--election-type",
                             "preferred", "--topic", "pref", "--partition", "0")
        assert (code, out, err) == (
            0, "Successfully completed leader election (PREFERRED) for partitions pref-0\n", "")
        wait_until(lambda: partition_state(cluster, quorum_leader, "pref")[0] == first,
                   SETTLE_S, interval=0.1, message="pref-0 led by its preferred replica")

        pause(observer)  # leaves the ISR of "dirty"
        pause(second)  # the last ISR member of "dirty": it has no leader now
        assert partition_state(cluster, quorum_leader, "dirty") == (-1, [second])
        resume(observer)  # live, but outside the ISR with no leader to catch up from
        # Every partition: the controller elects only where a leader is missing.
        code, out, err = run(capsys, "--bootstrap-server", bootstrap, "--election-type",
                             "unclean", "--all-topic-partitions")
        assert (code, out, err) == (
            0, "Successfully completed leader election (UNCLEAN) for partitions dirty-0\n", "")
        wait_until(lambda: partition_state(cluster, quorum_leader, "dirty")
                   == (observer, [observer]), SETTLE_S, interval=0.1,
                   message="dirty-0 led by the unclean leader")
        # The old leader returns, truncates to the unclean leader's log and joins its ISR; the
        # expansion also reports the leader recovered (KIP-704).
        resume(second)
        wait_until(lambda: partition_state(cluster, quorum_leader, "dirty")
                   == (observer, sorted([observer, second])), SETTLE_S, interval=0.1,
                   message="the old leader back in the ISR of dirty-0")
        print(f"\nelections done {time.monotonic() - started:.1f}s after the first pause")
    finally:
        cluster.stop()
        cluster.kill_all()
