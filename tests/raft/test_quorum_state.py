"""The `quorum-state` file and the rule that a state is durable before the node acts on it."""

from __future__ import annotations

import json
import random

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.raft import (
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    MemoryRaftLog,
    RaftClient,
)
from odradek.raft import messages as msg

CLUSTER = "cluster-a"


def test_quorum_state_file_is_kafkas_json(tmp_path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    assert store.read() is None
    state = ElectionState(epoch=5, leader_id=2, voters=(1, 2, 3))
    store.write(state)
    text = (tmp_path / "quorum-state").read_text()
    # Byte for byte what Kafka 3.x's FileQuorumStateStore writes (QuorumStateData v0).
    assert text == ('{"clusterId":"","leaderId":2,"leaderEpoch":5,"votedId":-1,'
                    '"appliedOffset":0,"currentVoters":[{"voterId":1},{"voterId":2},'
                    '{"voterId":3}],"data_version":0}')
    assert store.read() == state
    assert not (tmp_path / "quorum-state.tmp").exists()
    voted = ElectionState(epoch=6, voted_id=3, voters=(1, 2, 3))
    store.write(voted)
    assert store.read() == voted
    assert json.loads((tmp_path / "quorum-state").read_text())["votedId"] == 3


def test_reads_kafka_39_format_without_voters() -> None:
    text = ('{"leaderId":-1,"leaderEpoch":7,"votedId":1,"votedDirectoryId":'
            '"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}')
    assert ElectionState.from_json(text) == ElectionState(epoch=7, voted_id=1)
    with pytest.raises(ValueError):
        ElectionState.from_json('{"leaderEpoch":1,"data_version":9}')


def _vote(epoch: int, candidate: int, last_epoch: int = 0, last_offset: int = 0):
    return msg.vote_request(CLUSTER, epoch, candidate, last_epoch, last_offset)


def _vote_partition(response):
    return response.topics[0].partitions[0]


def _client(node_id: int, store, voters=(1, 2, 3)) -> RaftClient:
    return RaftClient(node_id, voters, MemoryRaftLog(), store, cluster_id=CLUSTER, now_ms=0,
                      rng=random.Random(node_id))


def test_vote_is_durable_before_it_is_granted() -> None:
    seen: list[ElectionState | None] = []

    class Store(MemoryQuorumStateStore):
        def write(self, state: ElectionState) -> None:
            super().write(state)
            seen.append(state)

    store = Store()
    client = _client(1, store)
    response = client.handle_request(2, _vote(1, 2), 10)
    assert _vote_partition(response).vote_granted
    # The vote was on "disk" when the answer was built.
    assert store.state == ElectionState(epoch=1, voted_id=2, voters=(1, 2, 3))
    assert seen[-1] == store.state


def test_failed_write_grants_nothing() -> None:
    class FailingStore(MemoryQuorumStateStore):
        fail = False

        def write(self, state: ElectionState) -> None:
            if self.fail:
                raise OSError("disk full")
            super().write(state)

    store = FailingStore()
    client = _client(1, store)
    store.fail = True
    with pytest.raises(OSError):
        client.handle_request(2, _vote(1, 2), 10)
    assert client.epoch == 0 and client.state_name == "Unattached"
    assert store.state == ElectionState(epoch=0, voters=(1, 2, 3))


def test_restarted_voter_does_not_vote_twice_in_an_epoch() -> None:
    store = MemoryQuorumStateStore()
    client = _client(1, store)
    assert _vote_partition(client.handle_request(2, _vote(4, 2), 10)).vote_granted
    restarted = _client(1, store)
    assert (restarted.state_name, restarted.epoch) == ("Voted", 4)
    answer = _vote_partition(restarted.handle_request(3, _vote(4, 3), 20))
    assert answer.error_code == ErrorCode.NONE.code and not answer.vote_granted
    assert _vote_partition(restarted.handle_request(2, _vote(4, 2), 20)).vote_granted


def test_restarted_leader_comes_back_resigned() -> None:
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=3, leader_id=1, voters=(1, 2, 3)))
    client = _client(1, store)
    assert (client.state_name, client.epoch, client.leader_id) == ("Resigned", 3, 1)
    # It never votes in the epoch it led.
    assert not _vote_partition(client.handle_request(2, _vote(3, 2), 5)).vote_granted


def test_log_with_a_later_epoch_than_the_file_starts_there() -> None:
    from odradek.protocol.records import RecordBatchBuilder

    log = MemoryRaftLog()
    builder = RecordBatchBuilder()
    builder.append(0, None, b"x")
    log.append_as_leader(builder.build(), 9)
    client = RaftClient(1, (1, 2, 3), log, MemoryQuorumStateStore(), cluster_id=CLUSTER,
                        now_ms=0)
    assert (client.state_name, client.epoch) == ("Unattached", 9)
