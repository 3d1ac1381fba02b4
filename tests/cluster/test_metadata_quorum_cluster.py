"""A 3-voter KRaft metadata quorum of real processes: one leader is elected, metadata created on
the leader reaches the followers' images, and when the leader is killed (-9) the others elect a
new one that keeps every committed change and takes new ones; the old leader rejoins as a
follower.

The tests share one cluster and run in order (each reads the leader the cluster has now)."""

from __future__ import annotations

import signal
import time

import pytest
from broker_process import wait_until
from quorum_cluster import QuorumCluster, elapsed_since

from odradek.protocol.errors import ErrorCode

ELECTION_TIMEOUT_S = 1.0  # controller.quorum.election.timeout.ms (Kafka's default)
FETCH_TIMEOUT_S = 2.0  # controller.quorum.fetch.timeout.ms (Kafka's default)
START_TIMEOUT_S = 30.0  # three Python processes starting on a shared machine
SETTLE_S = 10.0  # bound on metadata propagating / a request being retried


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(tmp_path_factory.mktemp("cluster"), size=3)
    cluster.format()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def create_topic_on_leader(cluster: QuorumCluster, name: str) -> int:
    """CreateTopics on the current leader's broker listener, retried (bounded) while the
    leader is still taking over; returns the leader's id."""
    def created() -> int | None:
        leader_id, _epoch = cluster.wait_for_leader(SETTLE_S)
        error = cluster.nodes[leader_id].create_topic(name)
        if error == ErrorCode.NONE.code:
            return leader_id
        assert error == ErrorCode.NOT_CONTROLLER.code, ErrorCode.from_code(error)
        return None

    return wait_until(created, SETTLE_S, interval=0.1, message=f"CreateTopics {name}")


def test_three_voters_elect_exactly_one_leader(cluster):
    started = time.monotonic()
    leader_id, epoch = cluster.wait_for_leader(START_TIMEOUT_S)
    print(f"\nleader {leader_id} of epoch {epoch}, agreed by all 3 voters "
          f"{elapsed_since(started):.2f}s after start")
    views = [node.describe_quorum() for node in cluster.nodes.values()]
    assert sum(1 for view in views if view is not None and view.is_leader) == 1
    assert {(view.leader_id, view.leader_epoch) for view in views} == {(leader_id, epoch)}
    leader_view = next(view for view in views if view.is_leader)
    assert set(leader_view.voter_end_offsets) == {1, 2, 3}
    # On a broker listener a voter answers DescribeQuorum itself (Kafka forwards it to the
    # controller): the same leader and epoch.
    on_brokers = [node.describe_quorum(on_broker_listener=True) for node in cluster.nodes.values()]
    assert {(view.leader_id, view.leader_epoch) for view in on_brokers} == {(leader_id, epoch)}


def test_a_topic_created_on_the_leader_reaches_the_followers_images(cluster):
    leader_id = create_topic_on_leader(cluster, "replicated-1")
    followers = [node for node in cluster.nodes.values() if node.node_id != leader_id]
    for follower in followers:
        # A follower's own broker listener answers from its own metadata image.
        wait_until(lambda f=follower: "replicated-1" in f.topic_names(), SETTLE_S,
                   message=f"the topic in node {follower.node_id}'s image")
    # Admin requests sent to a follower are forwarded to the active controller.
    follower = followers[0]
    assert follower.create_topic("forwarded-by-follower") == ErrorCode.NONE.code
    assert follower.create_topic("forwarded-by-follower") == (
        ErrorCode.TOPIC_ALREADY_EXISTS.code)
    leader = cluster.nodes[leader_id]

    def followers_caught_up() -> bool:
        view = leader.describe_quorum()
        return view is not None and all(
            view.voter_end_offsets[node_id] == view.high_watermark for node_id in (1, 2, 3))

    wait_until(followers_caught_up, SETTLE_S, message="every voter at the high watermark")
    assert all("forwarded-by-follower" in node.topic_names()
               for node in cluster.nodes.values())


def test_killing_the_leader_elects_a_new_one_that_keeps_the_metadata(cluster):
    old_leader_id, old_epoch = cluster.wait_for_leader(SETTLE_S)
    create_topic_on_leader(cluster, "before-the-crash")
    old_leader = cluster.nodes[old_leader_id]
    survivors = [node for node in cluster.nodes.values() if node.node_id != old_leader_id]

    old_leader.kill()
    killed_at = time.monotonic()
    new_leader_id, new_epoch = cluster.wait_for_leader(
        FETCH_TIMEOUT_S + ELECTION_TIMEOUT_S + 5, nodes=survivors, min_epoch=old_epoch + 1)
    election_s = elapsed_since(killed_at)
    print(f"\nleader {old_leader_id} (epoch {old_epoch}) killed; {new_leader_id} leads epoch "
          f"{new_epoch} after {election_s:.2f}s (fetch timeout {FETCH_TIMEOUT_S}s, election "
          f"timeout {ELECTION_TIMEOUT_S}s)")
    assert new_leader_id != old_leader_id and new_epoch > old_epoch
    new_leader = cluster.nodes[new_leader_id]
    # Every committed change survived.
    assert {"replicated-1", "before-the-crash"} <= new_leader.topic_names()
    # The new leader takes new changes, and they commit with the old leader down (2 of 3).
    assert create_topic_on_leader(cluster, "after-the-crash") == new_leader_id
    for node in survivors:
        wait_until(lambda n=node: "after-the-crash" in n.topic_names(), SETTLE_S,
                   message=f"the new topic in node {node.node_id}'s image")

    # The old leader restarts and rejoins as a follower of the new one, catching up.
    old_leader.start()
    restarted_at = time.monotonic()
    leader_id, epoch = cluster.wait_for_leader(START_TIMEOUT_S)
    assert (leader_id, epoch) == (new_leader_id, new_epoch)
    wait_until(lambda: {"replicated-1", "before-the-crash", "after-the-crash"}
               <= old_leader.topic_names(), SETTLE_S, message="the old leader caught up")
    print(f"old leader {old_leader_id} rejoined as follower and caught up "
          f"{elapsed_since(restarted_at):.2f}s after its restart")


def test_a_leader_stopped_gracefully_resigns_and_the_others_elect_at_once(cluster):
    """SIGTERM: the leader resigns with EndQuorumEpoch, so the others need not wait for the
    fetch timeout to notice it is gone."""
    old_leader_id, old_epoch = cluster.wait_for_leader(START_TIMEOUT_S)
    old_leader = cluster.nodes[old_leader_id]
    survivors = [node for node in cluster.nodes.values() if node.node_id != old_leader_id]
    old_leader.proc.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    new_leader_id, new_epoch = cluster.wait_for_leader(
        FETCH_TIMEOUT_S + ELECTION_TIMEOUT_S + 5, nodes=survivors, min_epoch=old_epoch + 1)
    election_s = elapsed_since(stopped_at)
    assert old_leader.proc.wait(20) == 0
    print(f"\nleader {old_leader_id} (epoch {old_epoch}) stopped; {new_leader_id} leads epoch "
          f"{new_epoch} {election_s:.2f}s after the SIGTERM")
    assert new_leader_id != old_leader_id
    assert election_s < FETCH_TIMEOUT_S  # the resignation, not the fetch timeout, moved them
