"""Directed scenarios of RaftClient: election, replication, split vote, a stale leader fenced,
a divergent follower truncated, bad requests refused without any change, the storage-backed
log."""

from __future__ import annotations

import random

import pytest

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.raft import (
    MemoryQuorumStateStore,
    MemoryRaftLog,
    RaftClient,
    StorageRaftLog,
)
from odradek.raft import messages as msg
from odradek.raft.client import OutboundRequest
from odradek.raft.messages import API_VERSIONS
from odradek.storage.log import Log

CLUSTER = "cluster-a"


class Cluster:
    """Clients wired back to back (messages still cross the codecs); `blocked` links drop."""

    def __init__(self, voters=(1, 2, 3), observers=(), logs=None, seed: int = 0) -> None:
        self.now = 0
        self.voters = list(voters)
        self.logs = logs or {}
        self.stores: dict[int, MemoryQuorumStateStore] = {}
        self.clients: dict[int, RaftClient] = {}
        for node_id in [*voters, *observers]:
            self.logs.setdefault(node_id, MemoryRaftLog())
            self.stores[node_id] = MemoryQuorumStateStore()
            self.start(node_id, seed)
        self.blocked: set[frozenset[int]] = set()

    def start(self, node_id: int, seed: int = 0) -> None:
        self.clients[node_id] = RaftClient(
            node_id, self.voters, self.logs[node_id], self.stores[node_id], cluster_id=CLUSTER,
            now_ms=self.now, rng=random.Random(seed * 100 + node_id))

    def isolate(self, node_id: int) -> None:
        for other in self.clients:
            if other != node_id:
                self.blocked.add(frozenset((node_id, other)))

    def heal(self) -> None:
        self.blocked.clear()

    def _codec(self, message):
        version = API_VERSIONS[type(message)]
        return type(message).decode(message.encode(version), version)

    def run(self, ms: int, step: int = 5) -> None:
        """Polls every node and delivers every message, `step` ms at a time."""
        end = self.now + ms
        while self.now < end:
            self.now += step
            for _ in range(20):  # deliver until quiet
                moved = False
                for node_id, client in list(self.clients.items()):
                    for item in client.poll(self.now):
                        moved = True
                        self._deliver(node_id, item)
                if not moved:
                    break

    def _deliver(self, src: int, item) -> None:
        if isinstance(item, OutboundRequest):
            dst = item.destination
            if frozenset((src, dst)) in self.blocked or dst not in self.clients:
                self.clients[src].handle_send_failure(dst, item.correlation_id, self.now)
                return
            response = self.clients[dst].handle_request(src, self._codec(item.request),
                                                        self.now, (src, item.correlation_id))
            if response is not None:
                self.clients[src].handle_response(dst, self._codec(response), self.now,
                                                  item.correlation_id)
        else:
            requester, correlation_id = item.request_id
            if frozenset((src, requester)) not in self.blocked:
                self.clients[requester].handle_response(src, self._codec(item.response),
                                                        self.now, correlation_id)

    def leaders(self) -> list[int]:
        return [n for n, c in self.clients.items() if c.is_leader]

    def leader(self) -> RaftClient:
        leaders = self.leaders()
        assert len(leaders) == 1, [repr(c) for c in self.clients.values()]
        return self.clients[leaders[0]]


def test_three_voters_elect_one_leader_and_commit() -> None:
    cluster = Cluster(observers=(100,))
    cluster.run(3000)
    leader = cluster.leader()
    offset = leader.append([b"a", b"b"], cluster.now)
    cluster.run(200)
    assert leader.high_watermark == offset + 1
    for client in cluster.clients.values():
        assert client.high_watermark == offset + 1, client
        assert client.leader_id == leader.node_id
        batches = client.take_committed()
        assert batches[0].is_control  # the epoch's LeaderChange
        assert batches[-1].last_offset == offset
    described = leader.describe_quorum(cluster.now).topics[0].partitions[0]
    assert described.leader_id == leader.node_id and described.high_watermark == offset + 1
    assert sorted(r.replica_id for r in described.current_voters) == [1, 2, 3]
    assert [r.replica_id for r in described.observers] == [100]
    assert all(r.log_end_offset == offset + 1 for r in described.current_voters)
    # Only the leader appends.
    follower = next(c for c in cluster.clients.values() if not c.is_leader)
    with pytest.raises(KafkaError) as error:
        follower.append([b"c"], cluster.now)
    assert error.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_single_voter_leads_at_once() -> None:
    client = RaftClient(1, [1], MemoryRaftLog(), MemoryQuorumStateStore(), cluster_id=CLUSTER,
                        now_ms=0)
    assert client.is_leader and client.epoch == 1
    offset = client.append([b"x"], 1)
    client.poll(1)
    assert client.high_watermark == offset + 1


def test_split_vote_resolves() -> None:
    cluster = Cluster(voters=(1, 2, 3, 4))
    # 1 and 2 stand in epoch 1 at the same moment; 3 votes for 1, 4 for 2: two votes each,
    # three needed.
    for candidate, voter in ((1, 3), (2, 4)):
        cluster.clients[candidate].quorum.transition_to_candidate(cluster.now)
        answer = cluster.clients[voter].handle_request(
            candidate, msg.vote_request(CLUSTER, 1, candidate, 0, 0), cluster.now)
        assert answer.topics[0].partitions[0].vote_granted
    for voter, other in ((3, 2), (4, 1)):
        answer = cluster.clients[voter].handle_request(
            other, msg.vote_request(CLUSTER, 1, other, 0, 0), cluster.now)
        assert not answer.topics[0].partitions[0].vote_granted
    # Nobody can win epoch 1: both lose, back off (jittered) and a later epoch elects one.
    cluster.run(8000)
    leader = cluster.leader()
    assert leader.epoch > 1
    assert cluster.stores[3].state is not None
    assert all(c.leader_id == leader.node_id for c in cluster.clients.values())


def test_stale_leader_is_fenced_and_resigns() -> None:
    cluster = Cluster()
    cluster.run(3000)
    old = cluster.leader()
    old_epoch = old.epoch
    cluster.isolate(old.node_id)
    lost = old.append([b"lost"], cluster.now)
    cluster.run(6000)
    new = next(c for c in cluster.clients.values() if c.is_leader and c is not old)
    assert new.epoch > old_epoch
    # Without a majority fetching, the old leader gave up (check-quorum).
    assert old.state_name in ("Resigned", "Candidate", "Unattached")
    assert not old.is_leader
    # A fetch still naming the old epoch is fenced.
    fetch = msg.fetch_request(CLUSTER, old.node_id, old_epoch, 0, 0, 0, 1 << 20)
    answer = new.handle_request(old.node_id, fetch, cluster.now).responses[0].partitions[0]
    assert answer.error_code == ErrorCode.FENCED_LEADER_EPOCH.code
    assert answer.current_leader.leader_id == new.node_id
    committed = new.append([b"kept"], cluster.now)
    cluster.heal()
    cluster.run(4000)
    assert cluster.leader() is new
    assert old.leader_id == new.node_id and old.high_watermark == committed + 1
    # The record the isolated leader wrote was never committed, and is gone from its log.
    assert old.log.end_offset == new.log.end_offset
    assert bytes(old.log.read(0, 1 << 20)) == bytes(new.log.read(0, 1 << 20))
    assert lost < committed


def test_divergent_log_is_truncated_to_the_leaders() -> None:
    cluster = Cluster()
    cluster.run(3000)
    old = cluster.leader()
    old.append([b"base"], cluster.now)
    cluster.run(200)
    cluster.isolate(old.node_id)
    for value in (b"x1", b"x2", b"x3"):  # on the old leader only: never committed
        old.append([value], cluster.now)
    old_end = old.log.end_offset
    cluster.run(6000)
    new = next(c for c in cluster.clients.values() if c.is_leader and c is not old)
    new.append([b"y1"], cluster.now)
    new.append([b"y2"], cluster.now)
    cluster.run(200)
    assert bytes(old.log.read(0, 1 << 20)) != bytes(new.log.read(0, 1 << 20))
    assert old.log.end_offset == old_end
    cluster.heal()
    cluster.run(3000)
    assert old.leader_id == new.node_id
    assert bytes(old.log.read(0, 1 << 20)) == bytes(new.log.read(0, 1 << 20))
    values = [bytes(b.data) for b in old.take_committed()]
    assert not any(b"x1" in v or b"x2" in v for v in values)
    assert any(b"y2" in v for v in values)


def _snapshot(client: RaftClient, store: MemoryQuorumStateStore) -> tuple:
    return (client.state_name, client.epoch, client.leader_id, store.state, store.writes,
            client.log.end_offset, client.high_watermark)


@pytest.mark.parametrize(("request_", "expected"), [
    (msg.vote_request("other-cluster", 9, 2, 0, 0), ErrorCode.INCONSISTENT_CLUSTER_ID),
    (msg.vote_request(CLUSTER, 9, 7, 0, 0), ErrorCode.INCONSISTENT_VOTER_SET),
    (msg.vote_request(CLUSTER, 0, 2, 0, 0), ErrorCode.INVALID_REQUEST),  # last epoch >= epoch
    (msg.vote_request(CLUSTER, 9, 2, 0, -5), ErrorCode.INVALID_REQUEST),
    (msg.begin_epoch_request(CLUSTER, 9, 7), ErrorCode.INCONSISTENT_VOTER_SET),
    (msg.begin_epoch_request("other-cluster", 9, 2), ErrorCode.INCONSISTENT_CLUSTER_ID),
    (msg.end_epoch_request(CLUSTER, 9, 7, []), ErrorCode.INCONSISTENT_VOTER_SET),
    (msg.fetch_request("other-cluster", 2, 9, 0, 0, 0, 100), ErrorCode.INCONSISTENT_CLUSTER_ID),
    (msg.fetch_request(CLUSTER, 2, 1, 0, 5, 0, 100), ErrorCode.INVALID_REQUEST),
])
def test_bad_request_is_refused_and_changes_nothing(request_, expected) -> None:
    cluster = Cluster()
    cluster.run(3000)
    for node_id, client in cluster.clients.items():
        store = cluster.stores[node_id]
        before = _snapshot(client, store)
        answer = client.handle_request(2, request_, cluster.now)
        codes = [answer.error_code] if hasattr(answer, "error_code") else []
        partitions = (answer.responses if isinstance(answer, m.FetchResponse)
                      else answer.topics)
        for topic in partitions:
            codes += [p.error_code for p in topic.partitions]
        assert expected.code in codes, (node_id, answer)
        assert _snapshot(client, store) == before


def test_stale_epoch_requests_are_fenced() -> None:
    cluster = Cluster()
    cluster.run(3000)
    leader = cluster.leader()
    epoch = leader.epoch
    for client in cluster.clients.values():
        store = cluster.stores[client.node_id]
        before = _snapshot(client, store)
        other = 1 if client.node_id != 1 else 2
        for request in (msg.vote_request(CLUSTER, epoch - 1 if epoch > 1 else 0, other, 0, 0),
                        msg.begin_epoch_request(CLUSTER, epoch - 1, other)):
            answer = client.handle_request(other, request, cluster.now)
            partition = answer.topics[0].partitions[0]
            assert partition.error_code in (ErrorCode.FENCED_LEADER_EPOCH.code,
                                            ErrorCode.INVALID_REQUEST.code)
            assert partition.leader_epoch == epoch
        assert _snapshot(client, store) == before


def test_observer_cannot_vote_and_does_not_count() -> None:
    cluster = Cluster(observers=(100,))
    cluster.run(3000)
    observer = cluster.clients[100]
    answer = observer.handle_request(1, msg.vote_request(CLUSTER, 50, 1, 0, 0), cluster.now)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.INCONSISTENT_VOTER_SET.code
    leader = cluster.leader()
    voters = [n for n in cluster.voters if n != leader.node_id]
    for voter in voters:
        cluster.blocked.add(frozenset((leader.node_id, voter)))
    offset = leader.append([b"only-observer"], cluster.now)
    cluster.run(500)
    assert observer.log.end_offset == offset + 1  # the observer has it...
    assert leader.high_watermark <= offset  # ...and it does not commit it


def test_storage_log_backs_a_voter(tmp_path) -> None:
    storage = Log(tmp_path / "__cluster_metadata-0")
    try:
        cluster = Cluster(logs={1: StorageRaftLog(storage)})
        cluster.run(3000)
        leader = cluster.leader()
        for index in range(20):
            leader.append([b"r%d" % index], cluster.now)
            cluster.run(20)
        cluster.run(200)
        disk = cluster.clients[1]
        assert disk.high_watermark == leader.high_watermark == leader.log.end_offset
        assert bytes(disk.log.read(0, 1 << 20)) == bytes(leader.log.read(0, 1 << 20))
        assert storage.recovery_point == storage.log_end_offset  # flushed before fetching again
        assert disk.log.end_offset_for_epoch(leader.epoch) == (leader.epoch, storage.log_end_offset)
    finally:
        storage.close()


def test_a_retry_backoff_that_kept_poll_from_sending_stays_a_deadline() -> None:
    """An observer with only a bootstrap server (--no-initial-controllers) has no timer but
    its retry backoff. The driver reads its clock again after `poll`: a backoff that ended in
    between must still be a deadline (due at once), not be dropped for the 60 s cap."""
    client = RaftClient(2, None, MemoryRaftLog(), MemoryQuorumStateStore(), cluster_id=CLUSTER,
                        now_ms=0, bootstrap={-2: ("127.0.0.1", 9093)},
                        rng=random.Random(0))
    [fetch] = client.poll(0)
    assert isinstance(fetch, OutboundRequest) and fetch.destination == -2
    client.handle_send_failure(-2, fetch.correlation_id, 0)  # connection refused
    backoff_end = client.config.retry_backoff_ms
    assert client.poll(backoff_end - 1) == []  # still backing off
    assert client.next_deadline_ms(backoff_end - 1) == backoff_end
    assert client.next_deadline_ms(backoff_end) <= backoff_end  # the clock moved on: due now
    [retry] = client.poll(backoff_end)
    assert isinstance(retry, OutboundRequest) and retry.destination == -2
    assert isinstance(retry.request, m.FetchRequest)
