"""Bad requests on the CONTROLLER listener of a real 3-voter quorum (raw sockets): Raft's Vote,
BeginQuorumEpoch and Fetch from a node that is not a voter, with a stale or future epoch or
another cluster's id; BrokerRegistration and BrokerHeartbeat that do not match the registered
brokers; an Envelope whose forwarded request is garbage. Each gets the error code Kafka's
KafkaRaftClient (3.8: Vote v0 and Fetch v16 are what Odradek speaks), QuorumController /
ClusterControlManager or EnvelopeUtils answers, and changes nothing: every voter keeps its
leader and epoch, no metadata record is written (the high watermark and each voter's log end
stay put), the broker list stays the same, and the cluster keeps serving clients.

The tests share one cluster whose epoch is first moved past 1 (the leader is stopped until
another is elected), so that a stale epoch exists."""

from __future__ import annotations

import signal
import time
import uuid
from typing import Any

import pytest
from broker_process import wait_until
from quorum_cluster import QuorumCluster, elapsed_since, send_request

from odradek.client import Admin, NewTopic
from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.raft import messages as raft
from odradek.server.broker_lifecycle import BROKER_HEARTBEAT_VERSION, BROKER_REGISTRATION_VERSION

START_TIMEOUT_S = 40.0
SETTLE_S = 15.0
VOTERS = (1, 2, 3)
NOT_A_VOTER = 99
OTHER_CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"
VOTE, BEGIN_QUORUM_EPOCH, FETCH = 52, 53, 1
BROKER_REGISTRATION, BROKER_HEARTBEAT, ENVELOPE = 62, 63, 58


class Quorum:
    """The cluster and what the bad requests are measured against."""

    def __init__(self, cluster: QuorumCluster, leader_id: int, epoch: int) -> None:
        self.cluster = cluster
        self.leader_id = leader_id
        self.epoch = epoch
        self.follower_id = next(v for v in VOTERS if v != leader_id)

    def port(self, node_id: int) -> int:
        return self.cluster.nodes[node_id].controller_port  # type: ignore[return-value]

    def send(self, node_id: int, api_key: int, version: int, request: m.Message) -> Any:
        return send_request(self.port(node_id), api_key, version, request)

    def state(self) -> dict[str, Any]:
        """Everything a bad request must not change."""
        views = {node_id: self.cluster.nodes[node_id].describe_quorum() for node_id in VOTERS}
        assert all(view is not None for view in views.values()), views
        response = self.cluster.nodes[1].metadata(topics=[])
        assert response is not None
        return {
            "quorum": {node_id: (v.leader_id, v.leader_epoch, v.is_leader)  # type: ignore[union-attr]
                       for node_id, v in views.items()},
            "high_watermarks": {node_id: v.high_watermark  # type: ignore[union-attr]
                                for node_id, v in views.items()},
            "voter_log_ends": views[self.leader_id].voter_end_offsets,  # type: ignore[union-attr]
            "brokers": sorted(b.node_id for b in response.brokers),
        }


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    cluster = QuorumCluster(tmp_path_factory.mktemp("bad-input"), size=3)
    cluster.format()
    cluster.start()
    try:
        started = time.monotonic()
        first_leader, first_epoch = cluster.wait_for_leader(START_TIMEOUT_S)
        wait_until(lambda: registered(cluster) == list(VOTERS), START_TIMEOUT_S, interval=0.1,
                   message="every broker unfenced")
        # A stale epoch needs epoch >= 2: stop the leader until the others elect a new one.
        old = cluster.nodes[first_leader]
        old.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            others = [n for n in cluster.nodes.values() if n.node_id != first_leader]
            cluster.wait_for_leader(SETTLE_S, nodes=others, min_epoch=first_epoch + 1)
        finally:
            old.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        leader_id, epoch = cluster.wait_for_leader(SETTLE_S, min_epoch=first_epoch + 1)
        wait_until(lambda: registered(cluster) == list(VOTERS), SETTLE_S, interval=0.1,
                   message="every broker unfenced")
        result = Quorum(cluster, leader_id, epoch)

        def settled() -> bool:
            first = result.state()
            time.sleep(0.3)
            return first == result.state() and (
                set(first["high_watermarks"].values()) == {first["voter_log_ends"][leader_id]})

        wait_until(settled, SETTLE_S, interval=0, message="a settled quorum")
        print(f"\nquorum settled at leader {leader_id}, epoch {epoch}, "
              f"{elapsed_since(started):.2f}s after start")
        yield result
    finally:
        cluster.stop()
        cluster.kill_all()


def registered(cluster: QuorumCluster) -> list[int]:
    response = cluster.nodes[1].metadata(topics=[])
    return [] if response is None else sorted(b.node_id for b in response.brokers)


def only_partition(response: Any) -> Any:
    assert response.error_code == 0, ErrorCode.from_code(response.error_code)
    partition = raft.single_partition(response)
    assert partition is not None, response
    return partition


def assert_code(actual: int, expected: ErrorCode) -> None:
    assert actual == expected.code, (
        f"got {ErrorCode.from_code(actual).name}, Kafka answers {expected.name}")


# ----------------------------------------------------------------------------------------------
# Raft


def test_vote_from_a_node_that_is_not_a_voter(quorum):
    before = quorum.state()
    # A higher epoch and a longer log: only the voter check stops it (validateVoterOnlyRequest).
    vote = raft.vote_request(quorum.cluster.cluster_id, quorum.epoch + 5, NOT_A_VOTER,
                             quorum.epoch, 1_000_000)
    for node_id in (quorum.leader_id, quorum.follower_id):
        partition = only_partition(quorum.send(node_id, VOTE, 0, vote))
        assert_code(partition.error_code, ErrorCode.INCONSISTENT_VOTER_SET)
        assert not partition.vote_granted
        assert (partition.leader_id, partition.leader_epoch) == (quorum.leader_id, quorum.epoch)
    assert quorum.state() == before


def test_vote_with_a_stale_epoch(quorum):
    before = quorum.state()
    stale = quorum.epoch - 1
    # From a real voter, with a log that would win: the epoch alone refuses it.
    vote = raft.vote_request(quorum.cluster.cluster_id, stale, quorum.follower_id, stale - 1,
                             1_000_000)
    for node_id in VOTERS:
        if node_id == quorum.follower_id:
            continue
        partition = only_partition(quorum.send(node_id, VOTE, 0, vote))
        assert_code(partition.error_code, ErrorCode.FENCED_LEADER_EPOCH)
        assert not partition.vote_granted
        assert partition.leader_epoch == quorum.epoch
    assert quorum.state() == before


def test_raft_requests_with_another_cluster_id(quorum):
    before = quorum.state()
    requests = [
        (VOTE, 0, raft.vote_request(OTHER_CLUSTER, quorum.epoch + 1, quorum.follower_id,
                                    quorum.epoch, 1_000_000)),
        (BEGIN_QUORUM_EPOCH, 0, raft.begin_epoch_request(OTHER_CLUSTER, quorum.epoch + 1,
                                                         quorum.follower_id)),
        (FETCH, 16, raft.fetch_request(OTHER_CLUSTER, quorum.follower_id, quorum.epoch, 0, 0,
                                       0, 1024)),
    ]
    for api_key, version, request in requests:
        for node_id in VOTERS:
            response = quorum.send(node_id, api_key, version, request)
            assert_code(response.error_code, ErrorCode.INCONSISTENT_CLUSTER_ID)
    assert quorum.state() == before


def test_fetch_with_a_stale_or_future_epoch(quorum):
    before = quorum.state()
    cluster_id = quorum.cluster.cluster_id

    def fetch(node_id: int, epoch: int) -> Any:
        # As the follower would send it, fetching from offset 0: accepted, it would move the
        # leader's idea of that follower's log end (and the check-quorum timer).
        request = raft.fetch_request(cluster_id, quorum.follower_id, epoch, 0, 0, 0, 1024)
        return only_partition(quorum.send(node_id, FETCH, 16, request))

    stale = fetch(quorum.leader_id, quorum.epoch - 1)
    assert_code(stale.error_code, ErrorCode.FENCED_LEADER_EPOCH)
    future = fetch(quorum.leader_id, quorum.epoch + 1)
    assert_code(future.error_code, ErrorCode.UNKNOWN_LEADER_EPOCH)
    for answer in (stale, future):
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
            quorum.leader_id, quorum.epoch)
        assert not answer.records
    # The right epoch, but not the leader: NOT_LEADER_OR_FOLLOWER (validateLeaderOnlyRequest).
    other_follower = next(v for v in VOTERS if v not in (quorum.leader_id, quorum.follower_id))
    assert_code(fetch(other_follower, quorum.epoch).error_code,
                ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert quorum.state() == before


def test_begin_quorum_epoch_from_a_non_voter_or_with_a_stale_epoch(quorum):
    before = quorum.state()
    cluster_id = quorum.cluster.cluster_id
    for node_id in VOTERS:
        response = quorum.send(node_id, BEGIN_QUORUM_EPOCH, 0, raft.begin_epoch_request(
            cluster_id, quorum.epoch + 1, NOT_A_VOTER))
        assert_code(only_partition(response).error_code, ErrorCode.INCONSISTENT_VOTER_SET)
        stale_leader = next(v for v in VOTERS if v != node_id)
        response = quorum.send(node_id, BEGIN_QUORUM_EPOCH, 0, raft.begin_epoch_request(
            cluster_id, quorum.epoch - 1, stale_leader))
        assert_code(only_partition(response).error_code, ErrorCode.FENCED_LEADER_EPOCH)
    assert quorum.state() == before


# ----------------------------------------------------------------------------------------------
# Broker lifecycle (ClusterControlManager)


def registration(broker_id: int, cluster_id: str) -> m.BrokerRegistrationRequest:
    R = m.BrokerRegistrationRequest
    return R(broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
             listeners=[R.Listener(name="PLAINTEXT", host="127.0.0.1", port=1, security_protocol=0)],
             features=[R.Feature(name="metadata.version", min_supported_version=1,
                                 max_supported_version=30)],
             rack=None, is_migrating_zk_broker=False, log_dirs=[], previous_broker_epoch=-1)


def test_broker_registration_with_another_cluster_id(quorum):
    before = quorum.state()
    # For a registered broker (accepted, it would fence broker 2 and bump its epoch) and for
    # a new one (it would join the broker list).
    for broker_id in (quorum.follower_id, NOT_A_VOTER):
        response = quorum.send(quorum.leader_id, BROKER_REGISTRATION,
                               BROKER_REGISTRATION_VERSION,
                               registration(broker_id, OTHER_CLUSTER))
        assert_code(response.error_code, ErrorCode.INCONSISTENT_CLUSTER_ID)
        assert response.broker_epoch == -1
        # A controller that is not active does not look: NOT_CONTROLLER.
        response = quorum.send(quorum.follower_id, BROKER_REGISTRATION,
                               BROKER_REGISTRATION_VERSION,
                               registration(broker_id, OTHER_CLUSTER))
        assert_code(response.error_code, ErrorCode.NOT_CONTROLLER)
    assert quorum.state() == before


def heartbeat(broker_id: int, broker_epoch: int) -> m.BrokerHeartbeatRequest:
    return m.BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=broker_epoch,
                                    current_metadata_offset=1_000_000, want_fence=True,
                                    want_shut_down=True, offline_log_dirs=[])


def test_broker_heartbeat_with_a_stale_epoch_or_from_an_unknown_broker(quorum):
    before = quorum.state()
    # want_fence and want_shut_down: accepted, either would take broker 2 out of service.
    stale = quorum.send(quorum.leader_id, BROKER_HEARTBEAT, BROKER_HEARTBEAT_VERSION,
                        heartbeat(quorum.follower_id, 1_000_000_000))
    assert_code(stale.error_code, ErrorCode.STALE_BROKER_EPOCH)
    # Kafka's QuorumController answers a heartbeat from a broker it has no registration for
    # with STALE_BROKER_EPOCH too ("Receive a heartbeat from broker 99 before registration").
    unknown = quorum.send(quorum.leader_id, BROKER_HEARTBEAT, BROKER_HEARTBEAT_VERSION,
                          heartbeat(NOT_A_VOTER, 1))
    assert_code(unknown.error_code, ErrorCode.STALE_BROKER_EPOCH)
    assert quorum.state() == before


# ----------------------------------------------------------------------------------------------
# Envelope (forwarded admin requests)


def envelope(request_data: bytes) -> m.EnvelopeRequest:
    return m.EnvelopeRequest(request_data=request_data, request_principal=b"User:ANONYMOUS",
                             client_host_address=bytes([127, 0, 0, 1]))


def create_topics_frame(name: str) -> bytes:
    request = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=False)
    return framing.encode_request(19, 7, 1, "forwarded", request)[4:]  # without the size


@pytest.mark.parametrize("request_data", [
    b"",
    b"\xff\xff",
    b"\x00\x13\x00\x07\x00\x00\x00\x01\xff\xff\xff\xff",  # CreateTopics v7 header, cut short
    b"\x00\x13\x00\x07" + bytes(range(200)),  # CreateTopics v7, garbage after the key/version
], ids=["empty", "two-bytes", "cut-header", "garbage-body"])
def test_envelope_with_a_forwarded_request_that_cannot_be_parsed(quorum, request_data):
    before = quorum.state()
    response = quorum.send(quorum.leader_id, ENVELOPE, 0, envelope(request_data))
    # Kafka's EnvelopeUtils: a forwarded header or body that does not parse is
    # UNSUPPORTED_VERSION ("to disambiguate structural errors in the envelope request itself").
    assert_code(response.error_code, ErrorCode.UNSUPPORTED_VERSION)
    assert response.response_data is None
    assert quorum.state() == before


def test_envelope_with_a_request_that_is_not_forwardable(quorum):
    before = quorum.state()
    metadata = framing.encode_request(3, 12, 1, "forwarded", m.MetadataRequest(topics=None))[4:]
    response = quorum.send(quorum.leader_id, ENVELOPE, 0, envelope(metadata))
    assert_code(response.error_code, ErrorCode.INVALID_REQUEST)
    # A good one is carried out: the Envelope path itself works.
    response = quorum.send(quorum.leader_id, ENVELOPE, 0,
                           envelope(create_topics_frame("through-an-envelope")))
    assert_code(response.error_code, ErrorCode.NONE)
    _correlation_id, created = framing.decode_response(response.response_data, 19, 7)
    assert_code(created.topics[0].error_code, ErrorCode.NONE)
    after = quorum.state()
    assert after["quorum"] == before["quorum"] and after["brokers"] == before["brokers"]


# ----------------------------------------------------------------------------------------------
# Admin requests sent straight to a controller listener (KIP-919)


def test_admin_requests_to_a_controller_that_is_not_active(quorum):
    """As Kafka's ControllerApis: a write only the active controller carries out answers
    NOT_CONTROLLER on another voter (and changes nothing); reads from the metadata image are
    answered there. An admin client given `bootstrap.controllers` finds the active one."""
    before = quorum.state()
    created = quorum.send(quorum.follower_id, 19, 7, m.CreateTopicsRequest(
        timeout_ms=10_000, topics=[m.CreateTopicsRequest.CreatableTopic(
            name="not-on-a-follower", num_partitions=1, replication_factor=1)]))
    assert_code(created.topics[0].error_code, ErrorCode.NOT_CONTROLLER)
    # A read: any controller answers it from its committed image (Kafka's appendReadEvent).
    listed = quorum.send(quorum.follower_id, 46, 0, m.ListPartitionReassignmentsRequest(
        timeout_ms=10_000, topics=None))
    assert_code(listed.error_code, ErrorCode.NONE)
    assert listed.topics == []
    described = quorum.send(quorum.follower_id, 32, 4, m.DescribeConfigsRequest(
        include_synonyms=False, include_documentation=False, resources=[
            m.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=4, resource_name=str(quorum.follower_id),
                configuration_keys=["node.id"])]))
    assert_code(described.results[0].error_code, ErrorCode.NONE)
    assert [(c.name, c.value) for c in described.results[0].configs] == [
        ("node.id", str(quorum.follower_id))]
    assert quorum.state() == before
    with Admin({"bootstrap.controllers": f"127.0.0.1:{quorum.port(quorum.follower_id)}"}) as admin:
        assert admin.describe_cluster().controller.id == quorum.leader_id
        admin.create_topics([NewTopic("straight-to-controllers", 1, 1)])
    wait_until(lambda: "straight-to-controllers" in quorum.cluster.nodes[1].topic_names(),
               SETTLE_S, message="the topic created through the controllers")


def test_the_cluster_still_serves_clients_after_all_that(quorum):
    cluster = quorum.cluster
    state = quorum.state()
    assert state["quorum"] == {node_id: (quorum.leader_id, quorum.epoch,
                                         node_id == quorum.leader_id) for node_id in VOTERS}
    assert state["brokers"] == list(VOTERS)
    # Forwarded from a follower to the active controller, and seen by every broker.
    assert_code(cluster.nodes[quorum.follower_id].create_topic("after-bad-input"),
                ErrorCode.NONE)
    for node in cluster.nodes.values():
        wait_until(lambda n=node: {"after-bad-input", "through-an-envelope"} <= n.topic_names(),
                   SETTLE_S, message=f"node {node.node_id} has the topics")
