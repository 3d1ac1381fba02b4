"""The controller's operations hold its lock until their records are committed: the next
operation, and a reader of the image right after one returns, see the records - even when
the caller went away (its connection closed) while the commit was pending."""

from __future__ import annotations

import asyncio
import random
import uuid

from odradek.controller.controller import ControllerState, TopicSpec
from odradek.controller.quorum import MetadataQuorum
from odradek.controller.quorum_controller import QuorumController
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.protocol.errors import ErrorCode
from odradek.storage import Log
from odradek.storage.config import validate_topic_props

from test_quorum import WAIT_S, HeldFlush, open_log


def quorum_controller(quorum: MetadataQuorum) -> QuorumController:
    return QuorumController(
        quorum,
        ControllerState(num_partitions=1, default_replication_factor=1,
                        config_validator=validate_topic_props, rng=random.Random(1)),
        is_dynamic_broker_config=lambda name: False)


async def registered_quorum(log: Log, flush: HeldFlush | None = None) -> MetadataQuorum:
    """A quorum whose image has broker 1 registered (and unfenced)."""
    quorum = MetadataQuorum(log, node_id=1, flush=flush)
    quorum.load()
    registration = ControllerState(num_partitions=1, default_replication_factor=1,
                                   config_validator=validate_topic_props).register_broker(
        quorum.image, 1, uuid.uuid4(), 0, [("PLAINTEXT", "h", 1, 0)], None, {})
    committed = quorum.append(registration)
    if flush is not None:
        flush.release()
    await asyncio.wait_for(committed, WAIT_S)
    if flush is not None:
        flush.released.clear()
    return quorum


def test_an_admin_op_returns_with_the_new_image(tmp_path):
    async def scenario() -> None:
        quorum = await registered_quorum(open_log(tmp_path))
        controller = quorum_controller(quorum)
        (result,) = await controller.create_topics([TopicSpec("orders")])
        assert result.error == ErrorCode.NONE
        assert "orders" in quorum.image.topics_by_name  # as auto-create relies on
        producer_ids = ProducerIdManager(lambda: controller.allocate_producer_ids(1, 0))
        assert await producer_ids.generate_producer_id() == 0
        assert quorum.image.next_producer_id == 1000
        assert await producer_ids.generate_producer_id() == 1  # from the same block
        assert quorum.image.next_producer_id == 1000
        await quorum.close()

    asyncio.run(scenario())


def test_a_cancelled_admin_op_keeps_the_lock_until_its_records_commit(tmp_path):
    async def scenario() -> None:
        log = open_log(tmp_path)
        flush = HeldFlush(log)
        quorum = await registered_quorum(log, flush)
        controller = quorum_controller(quorum)
        first = asyncio.ensure_future(controller.create_topics([TopicSpec("orders")]))
        await asyncio.wait_for(flush.started.wait(), WAIT_S)
        await asyncio.sleep(0)
        first.cancel()  # the client disconnected
        second = asyncio.ensure_future(controller.create_topics([TopicSpec("orders")]))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not second.done() and controller._lock.locked()
        flush.release()
        (result,) = await asyncio.wait_for(second, WAIT_S)
        assert first.cancelled()
        # The second op computed its records from an image with the first one's topic.
        assert result.error == ErrorCode.TOPIC_ALREADY_EXISTS
        assert list(quorum.image.topics_by_name) == ["orders"]
        await quorum.close()

    asyncio.run(scenario())
