"""ProducerIdApis called directly: InitProducerId served from producer-id blocks that the real
QuorumController allocates through the metadata quorum (ProducerIdsRecord)."""

from __future__ import annotations

import asyncio

import pytest
from handler_services import HandlerNode, run_with_node

from odradek.controller.controller import PRODUCER_ID_BLOCK_SIZE
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode


def init_request(transactional_id: str | None = None, producer_id: int = -1,
                 producer_epoch: int = -1) -> m.InitProducerIdRequest:
    return m.InitProducerIdRequest(transactional_id=transactional_id,
                                   transaction_timeout_ms=60_000,
                                   producer_id=producer_id, producer_epoch=producer_epoch)


@pytest.mark.parametrize("version", [0, 4])
def test_a_transactional_id_needs_its_coordinator(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.producer_id_apis.init_producer_id,
                               init_request(transactional_id="txn-1"), version)
        # __transaction_state does not exist yet (FindCoordinator creates it): this broker
        # coordinates no transactional id.
        assert resp.error_code == ErrorCode.NOT_COORDINATOR
        assert (resp.producer_id, resp.producer_epoch) == (-1, -1)
        assert node.producer_id_blocks == 0  # no id was spent on it

    run_with_node(tmp_path, scenario)


@pytest.mark.parametrize("version", [0, 2, 5])
def test_fresh_producer_ids_are_distinct_and_increasing(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        ids = []
        for _ in range(5):
            resp = await node.call(node.producer_id_apis.init_producer_id, init_request(),
                                   version)
            assert (resp.error_code, resp.producer_epoch) == (ErrorCode.NONE, 0)
            ids.append(resp.producer_id)
        assert ids == sorted(set(ids)) and ids[0] >= 0
        assert node.producer_id_blocks == 1

    run_with_node(tmp_path, scenario)


def test_concurrent_requests_share_one_block(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        responses = await asyncio.gather(*(
            node.call(node.producer_id_apis.init_producer_id, init_request(), 4)
            for _ in range(20)))
        ids = [r.producer_id for r in responses]
        assert len(set(ids)) == 20
        assert node.producer_id_blocks == 1
        assert node.cache.image.next_producer_id == PRODUCER_ID_BLOCK_SIZE

    run_with_node(tmp_path, scenario)


def test_a_second_block_is_allocated_after_the_first_runs_out(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        init = node.producer_id_apis.init_producer_id
        ids = [(await node.call(init, init_request(), 4)).producer_id
               for _ in range(PRODUCER_ID_BLOCK_SIZE)]
        assert ids == list(range(PRODUCER_ID_BLOCK_SIZE))
        # The first block (a ProducerIdsRecord) is committed: the image says where the next
        # block starts.
        assert node.cache.image.next_producer_id == PRODUCER_ID_BLOCK_SIZE
        assert node.producer_id_blocks == 1
        resp = await node.call(init, init_request(), 4)
        assert resp.producer_id == PRODUCER_ID_BLOCK_SIZE
        assert node.producer_id_blocks == 2
        assert node.cache.image.next_producer_id == 2 * PRODUCER_ID_BLOCK_SIZE

    run_with_node(tmp_path, scenario)


def test_no_producer_id_is_handed_out_twice_across_a_restart(tmp_path):
    async def first_life(node: HandlerNode) -> None:
        resp = await node.call(node.producer_id_apis.init_producer_id, init_request(), 4)
        assert resp.producer_id == 0

    async def second_life(node: HandlerNode) -> None:
        # The first block is spent (its ProducerIdsRecord was replayed): a new block.
        resp = await node.call(node.producer_id_apis.init_producer_id, init_request(), 4)
        assert resp.producer_id == PRODUCER_ID_BLOCK_SIZE

    run_with_node(tmp_path, first_life)
    run_with_node(tmp_path, second_life)


def test_an_idempotent_producer_passing_its_id_gets_a_new_one(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        init = node.producer_id_apis.init_producer_id
        first = await node.call(init, init_request(), 4)
        again = await node.call(init, init_request(producer_id=first.producer_id,
                                                   producer_epoch=first.producer_epoch), 4)
        assert again.error_code == ErrorCode.NONE
        assert again.producer_id != first.producer_id
        assert again.producer_epoch == 0

    run_with_node(tmp_path, scenario)
