"""Three `MetadataQuorum`s (real metadata logs, real `quorum-state` files, the asyncio driver)
wired by an in-process network that can cut a node off: one active controller, its changes in
every node's image, NOT_CONTROLLER elsewhere, and a partitioned leader that cannot commit alone
(its append fails, and its uncommitted record never reaches any image) while the majority
elects a new leader that it follows once it is reachable again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from test_quorum import WAIT_S, open_log, topic_records

from odradek.controller.quorum import MetadataQuorum, RaftSend
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.raft import RaftConfig

FAST = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=300, election_backoff_max_ms=100,
                  request_timeout_ms=300, fetch_max_wait_ms=50)


class LocalNetwork:
    """Delivers each request to the destination's `handle_request`; a node cut off neither
    sends nor receives (its requests and answers fail like a broken connection)."""

    def __init__(self) -> None:
        self.nodes: dict[int, MetadataQuorum] = {}
        self.cut_off: set[int] = set()

    def sender(self, source: int) -> RaftSend:
        async def send(destination: int, request: m.Message) -> m.Message:
            if {source, destination} & self.cut_off:
                raise ConnectionError("unreachable")
            response = await self.nodes[destination].handle_request(source, request)
            if {source, destination} & self.cut_off:
                raise ConnectionError("unreachable")
            return response
        return send


async def until(condition: Callable[[], object], timeout: float = WAIT_S) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.005)
    await asyncio.wait_for(poll(), timeout)


def start_quorum(network: LocalNetwork, base: Path) -> dict[int, MetadataQuorum]:
    for node_id in (1, 2, 3):
        quorum = MetadataQuorum(open_log(base / f"node-{node_id}"), node_id, voters=[1, 2, 3],
                                cluster_id="test-cluster", raft_config=FAST,
                                send=network.sender(node_id))
        quorum.load()
        network.nodes[node_id] = quorum
    for quorum in network.nodes.values():
        quorum.start()
    return network.nodes


def active(nodes: dict[int, MetadataQuorum], among: set[int] | None = None) -> list[int]:
    return [node_id for node_id, quorum in nodes.items()
            if quorum.is_active and (among is None or node_id in among)]


def test_one_active_controller_and_its_changes_in_every_image(tmp_path):
    async def scenario() -> None:
        network = LocalNetwork()
        nodes = start_quorum(network, tmp_path)
        await until(lambda: len(active(nodes)) == 1)
        (leader_id,) = active(nodes)
        leader = nodes[leader_id]
        assert {quorum.leader_id for quorum in nodes.values()} == {leader_id}
        offset = await asyncio.wait_for(leader.append(topic_records("orders")), WAIT_S)
        await until(lambda: all("orders" in q.image.topics_by_name for q in nodes.values()))
        assert all(q.image.offset >= offset for q in nodes.values())
        for node_id, quorum in nodes.items():
            if node_id != leader_id:
                with pytest.raises(KafkaError) as refused:
                    quorum.append(topic_records("refused"))
                assert refused.value.code == ErrorCode.NOT_CONTROLLER
        # Every voter's quorum-state names the leader of the epoch.
        for node_id in nodes:
            text = (tmp_path / f"node-{node_id}" / "__cluster_metadata-0" /
                    "quorum-state").read_text()
            assert f'"leaderId":{leader_id}' in text
        for quorum in nodes.values():
            await quorum.close()

    asyncio.run(scenario())


def test_a_partitioned_leader_cannot_commit_and_rejoins_as_follower(tmp_path):
    async def scenario() -> None:
        network = LocalNetwork()
        nodes = start_quorum(network, tmp_path)
        await until(lambda: len(active(nodes)) == 1)
        (old_id,) = active(nodes)
        old = nodes[old_id]
        await asyncio.wait_for(old.append(topic_records("before")), WAIT_S)
        await until(lambda: all("before" in q.image.topics_by_name for q in nodes.values()))

        network.cut_off.add(old_id)
        lost = old.append(topic_records("lost"))  # on the old leader's log only
        majority = set(nodes) - {old_id}
        await until(lambda: len(active(nodes, majority)) == 1)
        (new_id,) = active(nodes, majority)
        assert nodes[new_id].epoch > old.epoch or not old.is_leader
        with pytest.raises(KafkaError) as failed:  # it resigns (check-quorum): never committed
            await asyncio.wait_for(lost, WAIT_S)
        assert failed.value.code == ErrorCode.NOT_CONTROLLER
        await asyncio.wait_for(nodes[new_id].append(topic_records("after")), WAIT_S)

        network.cut_off.clear()
        await until(lambda: old.leader_id == new_id
                    and "after" in old.image.topics_by_name)
        for quorum in nodes.values():
            assert {"before", "after"} <= set(quorum.image.topics_by_name)
            assert "lost" not in quorum.image.topics_by_name
        for quorum in nodes.values():
            await quorum.close()

    asyncio.run(scenario())
