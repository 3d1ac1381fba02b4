"""Broker membership on the active controller (cluster_control through QuorumController, on a
real one-voter quorum and a manual clock): registration and its refusals, unfencing once caught
up, session expiry, controlled shutdown, re-registration after a restart, and the auto leader
rebalance."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
from test_quorum import open_log

from odradek.clock import ManualClock
from odradek.controller.cluster_control import BrokerRegistrationRequest
from odradek.controller.controller import ControllerState, TopicSpec
from odradek.controller.quorum import MetadataQuorum
from odradek.controller.quorum_controller import QuorumController
from odradek.metadata.image import METADATA_VERSION_FEATURE
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.storage.config import validate_topic_props

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
SESSION_MS = 9000
FEATURES = {METADATA_VERSION_FEATURE: (1, 20)}


def registration(broker_id: int, incarnation: uuid.UUID | None = None,
                 cluster_id: str = CLUSTER_ID,
                 features: dict | None = None) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=incarnation or uuid.uuid4(),
        endpoints=[("PLAINTEXT", "h", 9000 + broker_id, 0)],
        features=FEATURES if features is None else features, rack=None)


async def started(tmp_path, config: dict | None = None) -> tuple[QuorumController, ManualClock]:
    clock = ManualClock()
    quorum = MetadataQuorum(open_log(tmp_path), node_id=1)
    quorum.load()
    controller = QuorumController(
        quorum,
        ControllerState(num_partitions=1, default_replication_factor=1,
                        config_validator=validate_topic_props, rng=random.Random(1)),
        is_dynamic_broker_config=lambda name: False,
        cluster_id=CLUSTER_ID, session_timeout_ms=SESSION_MS, clock=clock,
        broker_config=config or {})
    await quorum.become_leader()
    await controller.bootstrap_metadata_version(20)
    return controller, clock


async def joined(controller: QuorumController, broker_id: int) -> int:
    epoch = await controller.register_broker(registration(broker_id))
    reply = await controller.broker_heartbeat(broker_id, epoch, controller.image.offset)
    assert not reply.is_fenced and reply.is_caught_up
    return epoch


def run(scenario) -> None:
    asyncio.run(scenario())


def test_a_broker_registers_fenced_and_is_unfenced_once_caught_up(tmp_path):
    async def scenario() -> None:
        controller, _clock = await started(tmp_path)
        epoch = await controller.register_broker(registration(2))
        assert controller.image.brokers[2].fenced and controller.image.brokers[2].epoch == epoch
        # Not caught up with its own registration yet: stays fenced.
        reply = await controller.broker_heartbeat(2, epoch, epoch - 1)
        assert reply.is_fenced and not reply.is_caught_up
        assert controller.image.brokers[2].fenced
        reply = await controller.broker_heartbeat(2, epoch, epoch)
        assert not reply.is_fenced and reply.is_caught_up and not reply.should_shut_down
        assert not controller.image.brokers[2].fenced
        await controller.quorum.close()

    run(scenario)


@pytest.mark.parametrize("request_, error", [
    (registration(2, cluster_id="another-cluster"), ErrorCode.INCONSISTENT_CLUSTER_ID),
    (registration(2, features={METADATA_VERSION_FEATURE: (1, 7)}), ErrorCode.UNSUPPORTED_VERSION),
    (registration(2, features={}), ErrorCode.UNSUPPORTED_VERSION),
])
def test_a_registration_is_refused_with_kafkas_error_and_changes_nothing(tmp_path, request_,
                                                                         error):
    async def scenario() -> None:
        controller, _clock = await started(tmp_path)
        before = controller.image
        with pytest.raises(KafkaError) as refused:
            await controller.register_broker(request_)
        assert refused.value.code == error
        assert controller.image is before
        await controller.quorum.close()

    run(scenario)


def test_a_second_incarnation_is_refused_while_the_first_has_a_session(tmp_path):
    async def scenario() -> None:
        controller, clock = await started(tmp_path)
        await joined(controller, 2)
        with pytest.raises(KafkaError) as refused:
            await controller.register_broker(registration(2))
        assert refused.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        clock.advance(SESSION_MS)  # its session expired: the new incarnation may register
        epoch = await controller.register_broker(registration(2))
        assert controller.image.brokers[2].epoch == epoch and controller.image.brokers[2].fenced
        await controller.quorum.close()

    run(scenario)


def test_heartbeats_with_a_stale_epoch_or_from_strangers_are_refused(tmp_path):
    async def scenario() -> None:
        controller, _clock = await started(tmp_path)
        epoch = await joined(controller, 2)
        for broker_id, broker_epoch, error in [(2, epoch - 1, ErrorCode.STALE_BROKER_EPOCH),
                                               (7, 0, ErrorCode.STALE_BROKER_EPOCH)]:
            with pytest.raises(KafkaError) as refused:
                await controller.broker_heartbeat(broker_id, broker_epoch, 100)
            assert refused.value.code == error
        await controller.quorum.close()

    run(scenario)


def test_an_expired_session_fences_the_broker_and_moves_its_leaderships(tmp_path):
    async def scenario() -> None:
        controller, clock = await started(tmp_path)
        for broker_id in (2, 3):
            await joined(controller, broker_id)
        [created] = await controller.create_topics([TopicSpec("t", num_partitions=4,
                                                              replication_factor=2)])
        assert created.error == ErrorCode.NONE
        topic = controller.image.topics_by_name["t"]
        led_by_2 = [p for p, part in topic.partitions.items() if part.leader == 2]
        assert led_by_2
        clock.advance(SESSION_MS // 2)
        reg3 = controller.image.brokers[3]
        await controller.broker_heartbeat(3, reg3.epoch, controller.image.offset)
        clock.advance(SESSION_MS // 2)
        assert await controller.fence_stale_brokers() == [2]  # 3 heartbeat in time
        assert controller.image.brokers[2].fenced and not controller.image.brokers[3].fenced
        for p, part in controller.image.topics_by_name["t"].partitions.items():
            assert part.leader == 3 and part.isr == (3,), (p, part)
        # It comes back: the next heartbeat (caught up) unfences it.
        reg2 = controller.image.brokers[2]
        reply = await controller.broker_heartbeat(2, reg2.epoch, controller.image.offset)
        assert not reply.is_fenced and not controller.image.brokers[2].fenced
        await controller.quorum.close()

    run(scenario)


def test_controlled_shutdown_moves_leaderships_then_lets_the_broker_go(tmp_path):
    async def scenario() -> None:
        controller, _clock = await started(tmp_path)
        for broker_id in (2, 3):
            await joined(controller, broker_id)
        await controller.create_topics([TopicSpec("t", num_partitions=4, replication_factor=2)])
        epoch = controller.image.brokers[2].epoch
        reply = await controller.broker_heartbeat(2, epoch, controller.image.offset - 1,
                                                  want_shutdown=True)
        assert reply.in_controlled_shutdown and not reply.should_shut_down
        assert controller.image.brokers[2].in_controlled_shutdown
        assert all(part.leader == 3 and 2 not in part.isr
                   for part in controller.image.topics_by_name["t"].partitions.values())
        # Once it has seen that (its image at the change), it may shut down, fenced.
        reply = await controller.broker_heartbeat(2, epoch, controller.image.offset,
                                                  want_shutdown=True)
        assert reply.should_shut_down and reply.is_fenced
        assert controller.image.brokers[2].fenced
        await controller.quorum.close()

    run(scenario)


def test_a_broker_fenced_by_its_controlled_shutdown_registers_again_at_once(tmp_path):
    """Kafka's hasValidSession is false for a fenced broker: a broker that shut down cleanly
    (fenced at the end) comes back without waiting out a session, also after the controller
    itself restarted (a new activation gives sessions to unfenced brokers only)."""
    async def scenario() -> None:
        controller, _clock = await started(tmp_path)
        epoch = await joined(controller, 2)
        await joined(controller, 3)
        for _ in range(2):  # into controlled shutdown, then out of it once it has seen that
            reply = await controller.broker_heartbeat(2, epoch, controller.image.offset,
                                                      want_shutdown=True)
        assert reply.should_shut_down and controller.image.brokers[2].fenced
        controller.on_activation(True)  # the controller restarts (here: activates again)
        epoch = await controller.register_broker(registration(2))
        assert controller.image.brokers[2].epoch == epoch
        # An unfenced broker's session is still honoured after the new activation.
        with pytest.raises(KafkaError) as refused:
            await controller.register_broker(registration(3))
        assert refused.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        controller.on_activation(False)
        await controller.quorum.close()

    run(scenario)


def test_a_restarted_broker_gives_up_its_leaderships_when_it_registers_again(tmp_path):
    async def scenario() -> None:
        controller, clock = await started(tmp_path)
        for broker_id in (2, 3):
            await joined(controller, broker_id)
        await controller.create_topics([TopicSpec("t", num_partitions=2, replication_factor=2)])
        clock.advance(SESSION_MS)  # the old process died; its session ran out unseen
        controller.heartbeats.touch(3)
        await controller.register_broker(registration(2))
        assert controller.image.brokers[2].fenced
        assert all(part.leader == 3 and part.isr == (3,)
                   for part in controller.image.topics_by_name["t"].partitions.values())
        await controller.quorum.close()

    run(scenario)


def test_the_auto_leader_rebalance_returns_leadership_to_the_preferred_replica(tmp_path):
    async def scenario() -> None:
        controller, _clock = await started(tmp_path)
        for broker_id in (2, 3):
            await joined(controller, broker_id)
        topic_id = uuid.uuid4()
        # Preferred replica 2 is in the ISR but 3 leads (as after a failover and catch-up).
        await controller.quorum.append([
            m.TopicRecord(name="t", topic_id=topic_id),
            m.PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[2, 3], isr=[2, 3],
                              leader=3, leader_epoch=1, partition_epoch=1)])
        assert await controller.balance_partition_leaders() == 1
        part = controller.image.topics_by_name["t"].partitions[0]
        assert part.leader == 2 and part.leader_epoch == 2
        assert await controller.balance_partition_leaders() == 0  # balanced now
        await controller.quorum.close()

    run(scenario)
