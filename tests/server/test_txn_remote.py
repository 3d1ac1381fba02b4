"""The inter-broker side of transactions over real sockets: the marker channel's
WriteTxnMarkers to a partition leader in another process, and Produce's verification
(AddPartitionsToTxn v4 verify_only) sent to a coordinator in another process."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.coordinator.transaction_coordinator import MarkerRequest
from odradek.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.protocol.errors import ErrorCode
from odradek.protocol.types import TopicPartition
from odradek.server.node_channel import NodeChannel
from odradek.server.transactions import TransactionVerifier, TxnMarkerChannel

LOCAL_NODE = 7  # this process; the broker process is node 1


def _create(broker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(
        timeout=30)


def test_markers_reach_a_leader_in_another_process(odradek_broker):
    topic = f"remote-markers-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic)

    async def scenario() -> dict[TopicPartition, ErrorCode]:
        channel = NodeChannel(LOCAL_NODE, {1: (odradek_broker.host, odradek_broker.port)},
                              request_timeout_ms=10_000, client_id="txn-test")
        markers = TxnMarkerChannel(LOCAL_NODE, cache=None, replica_manager=None,  # type: ignore[arg-type]
                                   group_coordinator=None, channel=channel, timeout_ms=10_000)
        try:
            return await markers._send(1, MarkerRequest(
                "tx", producer_id=4242, producer_epoch=0, commit=True, coordinator_epoch=0,
                partitions=(TopicPartition(topic, 0), TopicPartition(topic, 3))),
                [TopicPartition(topic, 0), TopicPartition(topic, 3)])
        finally:
            await channel.close()

    results = asyncio.run(scenario())
    assert results == {TopicPartition(topic, 0): ErrorCode.NONE,
                       TopicPartition(topic, 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_verification_asks_a_coordinator_in_another_process(odradek_broker):
    # An image in which broker 1 (the process) leads the id's __transaction_state partition.
    image = SimpleNamespace(
        topics_by_name={TRANSACTION_STATE_TOPIC: SimpleNamespace(
            partitions={0: SimpleNamespace(leader=1)})},
        brokers={1: SimpleNamespace(broker_id=1, fenced=False)})
    coordinator = SimpleNamespace(partition_for=lambda _tid: 0)
    topic = f"remote-verify-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic)

    async def scenario() -> dict[TopicPartition, ErrorCode]:
        channel = NodeChannel(LOCAL_NODE, {1: (odradek_broker.host, odradek_broker.port)},
                              request_timeout_ms=10_000, client_id="txn-test")
        verifier = TransactionVerifier(LOCAL_NODE, SimpleNamespace(image=image),  # type: ignore[arg-type]
                                       coordinator, channel)  # type: ignore[arg-type]
        try:
            return await verifier.verify(f"unknown-{uuid.uuid4().hex[:6]}", 1, 0,
                                         [TopicPartition(topic, 0)])
        finally:
            await channel.close()

    results = asyncio.run(scenario())
    # The process does not coordinate the id (it has no __transaction_state partition for it).
    assert results == {TopicPartition(topic, 0): ErrorCode.NOT_COORDINATOR}
