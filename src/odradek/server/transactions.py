"""Wiring of the transaction coordinator into a broker.

* `__transaction_state` is created on first use (FindCoordinator(TRANSACTION)), as Kafka does,
  and the coordinator follows the leadership of its partitions in the metadata image (the
  partition's leader epoch is the coordinator epoch).
* Markers (`TxnMarkerChannel`): the coordinator's COMMIT/ABORT markers go to each partition's
  leader, in-process when that is this broker, else as WriteTxnMarkers to the leader's
  inter-broker listener; a partition whose leader is unknown or unreachable is retried by the
  coordinator, one whose topic is gone counts as written.
* `append_markers`: the leader side of WriteTxnMarkers, shared by the handler and the
  in-process path: control batches appended with origin COORDINATOR and committed (acks=all);
  those of `__consumer_offsets` partitions written by the group coordinator
  (`complete_transaction`), which then completes the transactional offset commits.
* `TransactionVerifier`: KIP-890 part 1 for Produce: asks the coordinator of a transactional id
  (in-process, or AddPartitionsToTxn v4 verify_only to its broker) whether partitions are in
  the producer's ongoing transaction; the group coordinator asks it too before a
  TxnOffsetCommit's write (`txn_offset_commit_verifier`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from odradek.controller.controller import OpResult, TopicSpec
from odradek.coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.coordinator.group_coordinator import (
    TransactionVerifier as GroupTransactionVerifier,
)
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.coordinator.transaction_coordinator import (
    MarkerRequest,
    TransactionConfig,
    TransactionCoordinator,
)
from odradek.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.metadata.cache import MetadataCache
from odradek.metadata.image import MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import build_control_batch
from odradek.protocol.types import TopicPartition
from odradek.server.node_channel import NodeChannel
from odradek.server.replica_manager import ACKS_ALL, PendingAppend, ReplicaManager
from odradek.storage.validator import AppendOrigin

log = logging.getLogger("odradek.transactions")

CreateTopics = Callable[[Sequence[TopicSpec]], Awaitable[list[OpResult]]]

WRITE_TXN_MARKERS_VERSION = 1
#: the AddPartitionsToTxn version brokers verify with (KIP-890 part 1)
VERIFY_VERSION = 4


def transaction_state_topic_spec(config: Any) -> TopicSpec:
    """`__transaction_state` as Kafka creates it (TransactionLog's topic configs)."""
    return TopicSpec(
        name=TRANSACTION_STATE_TOPIC,
        num_partitions=int(config.get("transaction.state.log.num.partitions")),
        replication_factor=int(config.get("transaction.state.log.replication.factor")),
        configs={"cleanup.policy": "compact", "compression.type": "uncompressed",
                 "min.insync.replicas": str(config.get("transaction.state.log.min.isr")),
                 "segment.bytes": str(config.get("transaction.state.log.segment.bytes")),
                 "unclean.leader.election.enable": "false"},
    )


class TransactionStateTopicCreator:
    """Creates `__transaction_state` on first use, as Kafka does."""

    def __init__(self, config: Any, cache: MetadataCache, create_topics: CreateTopics) -> None:
        self.config = config
        self.cache = cache
        self.create_topics = create_topics

    async def __call__(self) -> ErrorCode:
        if TRANSACTION_STATE_TOPIC in self.cache.image.topics_by_name:
            return ErrorCode.NONE
        (result,) = await self.create_topics([transaction_state_topic_spec(self.config)])
        if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("cannot create %s: %s %s", TRANSACTION_STATE_TOPIC, result.error.name,
                        result.message)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        log.info("created %s", TRANSACTION_STATE_TOPIC)
        return ErrorCode.NONE


def coordinator_node(image: MetadataImage, topic: str, partition: int,
                     ) -> tuple[ErrorCode, Any]:
    """(NONE, the leader's registration) of a coordinator partition, or
    COORDINATOR_NOT_AVAILABLE while it has no live leader."""
    topic_image = image.topics_by_name.get(topic)
    registration = topic_image.partitions.get(partition) if topic_image is not None else None
    leader = image.brokers.get(registration.leader) if registration is not None else None
    if leader is None or leader.fenced:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    return ErrorCode.NONE, leader


class TransactionStateFollower:
    """Follows the metadata image: the coordinator loads the `__transaction_state` partitions
    this broker leads (again on a new leader epoch) and drops the others."""

    def __init__(self, replica_manager: ReplicaManager,
                 coordinator: TransactionCoordinator) -> None:
        self.replica_manager = replica_manager
        self.coordinator = coordinator
        self.led: dict[int, tuple[int, Any]] = {}  # partition -> (leader epoch, log)

    def __call__(self, image: MetadataImage) -> None:
        now_led = {
            partition.index: (partition.leader_epoch, partition.log)
            for partition in self.replica_manager.partitions_of([TRANSACTION_STATE_TOPIC])
            if partition.is_leader
        }
        for index in set(self.led) - set(now_led):
            self.coordinator.resign(index)
        for index, (epoch, log_) in now_led.items():
            if self.led.get(index) != (epoch, log_):
                self.coordinator.elect(index, log_, epoch)
        self.led = now_led


async def append_markers(replica_manager: ReplicaManager,
                         group_coordinator: GroupCoordinator | None,
                         marker: MarkerRequest | Any, partitions: Iterable[TopicPartition],
                         timeout_ms: int) -> dict[TopicPartition, ErrorCode]:
    """Writes one producer's marker to each of `partitions` led here (Kafka 4.0's
    handleWriteTxnMarkersRequest for one marker): each partition's error once committed.
    Markers of `__consumer_offsets` partitions go through the group coordinator, which appends
    them in line with its own writes and then completes the transactional offsets."""
    results: dict[TopicPartition, ErrorCode] = {}
    waiting: list[tuple[TopicPartition, PendingAppend]] = []
    offsets_partitions: list[TopicPartition] = []
    commit = bool(getattr(marker, "commit", getattr(marker, "transaction_result", False)))
    batch = build_control_batch(marker.producer_id, marker.producer_epoch, commit,
                                marker.coordinator_epoch, replica_manager.clock.time_ms())
    for tp in partitions:
        partition, _error = replica_manager.get_partition(tp.topic, tp.partition)
        if partition is None:
            results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if tp.topic == OFFSETS_TOPIC and group_coordinator is not None:
            offsets_partitions.append(tp)
            continue
        try:
            pending = replica_manager.append(tp.topic, tp.partition, batch, ACKS_ALL,
                                             origin=AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            results[tp] = exc.code
            continue
        except Exception:
            log.exception("appending a marker to %s-%d failed", tp.topic, tp.partition)
            results[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
            continue
        waiting.append((tp, pending))

    async def complete_offsets(tp: TopicPartition) -> None:
        assert group_coordinator is not None
        try:
            results[tp] = await group_coordinator.complete_transaction(
                tp.partition, marker.producer_id, marker.producer_epoch,
                marker.coordinator_epoch, commit)
        except Exception:
            log.exception("the marker of producer %d in %s-%d failed", marker.producer_id,
                          OFFSETS_TOPIC, tp.partition)
            results[tp] = ErrorCode.UNKNOWN_SERVER_ERROR

    async def wait_for_appends() -> None:
        if waiting:
            await replica_manager.wait_for_commit([p for _tp, p in waiting], timeout_ms)
        for tp, pending in waiting:
            results[tp] = pending.outcome()

    await asyncio.gather(wait_for_appends(), *(complete_offsets(tp) for tp in offsets_partitions))
    return results


def txn_offset_commit_verifier(verifier: TransactionVerifier,
                               enabled: Callable[[], bool]) -> GroupTransactionVerifier:
    """The group coordinator's check before a TxnOffsetCommit's write (Kafka 4.0): is the
    group's offsets partition in the producer's ongoing transaction (AddOffsetsToTxn)?"""
    async def verify(offsets_partition: int, transactional_id: str, producer_id: int,
                     producer_epoch: int) -> ErrorCode:
        if not enabled():
            return ErrorCode.NONE
        tp = TopicPartition(OFFSETS_TOPIC, offsets_partition)
        answers = await verifier.verify(transactional_id, producer_id, producer_epoch, [tp])
        error = answers.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
        # As Kafka's AddPartitionsToTxnManager tells a fenced producer.
        return ErrorCode.INVALID_PRODUCER_EPOCH if error == ErrorCode.PRODUCER_FENCED else error

    return verify


class TxnMarkerChannel:
    """The coordinator's MarkerWriter: routes markers to the partitions' leaders."""

    def __init__(self, node_id: int, cache: MetadataCache, replica_manager: ReplicaManager,
                 group_coordinator: GroupCoordinator | None, channel: NodeChannel,
                 timeout_ms: int) -> None:
        self.node_id = node_id
        self.cache = cache
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.channel = channel
        self.timeout_ms = timeout_ms

    async def __call__(self, request: MarkerRequest) -> dict[TopicPartition, ErrorCode]:
        image = self.cache.image
        results: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in request.partitions:
            topic = image.topics_by_name.get(tp.topic)
            registration = topic.partitions.get(tp.partition) if topic is not None else None
            if registration is None:
                log.info("%s-%d no longer exists: no %s marker for producer %d", tp.topic,
                         tp.partition, "COMMIT" if request.commit else "ABORT",
                         request.producer_id)
                results[tp] = ErrorCode.NONE
                continue
            leader = image.brokers.get(registration.leader)
            if leader is None or leader.fenced:
                results[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # retried
                continue
            by_leader[registration.leader].append(tp)
        answers = await asyncio.gather(*(self._send(leader, request, tps)
                                         for leader, tps in by_leader.items()))
        for answer in answers:
            results.update(answer)
        return results

    async def _send(self, leader: int, request: MarkerRequest,
                    partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        if leader == self.node_id:
            return await append_markers(self.replica_manager, self.group_coordinator, request,
                                        partitions, self.timeout_ms)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        R = m.WriteTxnMarkersRequest
        wire = R(markers=[R.WritableTxnMarker(
            producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            transaction_result=request.commit, coordinator_epoch=request.coordinator_epoch,
            topics=[R.WritableTxnMarkerTopic(name=topic,
                                              partition_indexes=indexes)
                    for topic, indexes in by_topic.items()])])
        try:
            response = await self.channel.send(leader, wire,
                                               api_version=WRITE_TXN_MARKERS_VERSION)
        except Exception as exc:
            log.info("markers for producer %d to broker %d not delivered (%s): retrying",
                     request.producer_id, leader, exc)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        results = {}
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    results[TopicPartition(topic.name, p.partition_index)] = \
                        ErrorCode(p.error_code)
        return results


class TransactionVerifier:
    """KIP-890 part 1 for Produce: is each partition in the producer's ongoing transaction?"""

    def __init__(self, node_id: int, cache: MetadataCache, coordinator: TransactionCoordinator,
                 channel: NodeChannel) -> None:
        self.node_id = node_id
        self.cache = cache
        self.coordinator = coordinator
        self.channel = channel

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The coordinator's answer for each partition (NONE: it is in the transaction)."""
        error, leader = coordinator_node(self.cache.image, TRANSACTION_STATE_TOPIC,
                                         self.coordinator.partition_for(transactional_id))
        if error != ErrorCode.NONE:
            return dict.fromkeys(partitions, error)
        if leader.broker_id == self.node_id:
            return self.coordinator.verify_partitions(transactional_id, producer_id,
                                                      producer_epoch, partitions)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        R = m.AddPartitionsToTxnRequest
        request = R(transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=True,
            topics=[R.AddPartitionsToTxnTopic(name=topic, partitions=indexes)
                    for topic, indexes in by_topic.items()])])
        try:
            response = await self.channel.send(leader.broker_id, request,
                                               api_version=VERIFY_VERSION)
        except Exception as exc:
            log.info("cannot verify with the coordinator of %s on broker %d: %s",
                     transactional_id, leader.broker_id, exc)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        if response.error_code != ErrorCode.NONE:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        results = dict.fromkeys(partitions, ErrorCode.UNKNOWN_SERVER_ERROR)
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    results[TopicPartition(topic.name, p.partition_index)] = \
                        ErrorCode(p.partition_error_code)
        return results


def start_transaction_coordinator(config: Any, cache: MetadataCache,
                                  replica_manager: ReplicaManager,
                                  producer_ids: ProducerIdManager,
                                  group_coordinator: GroupCoordinator | None,
                                  channel: NodeChannel) -> TransactionCoordinator:
    """Builds the transaction coordinator, starts it and subscribes it to metadata changes."""

    def num_partitions() -> int:
        topic = cache.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        return len(topic.partitions) if topic is not None else \
            int(config.get("transaction.state.log.num.partitions"))

    timeout_ms = int(config.get("request.timeout.ms"))

    async def append(partition: int, records: bytes) -> None:
        await replica_manager.append_and_wait(TRANSACTION_STATE_TOPIC, partition, records,
                                              timeout_ms)

    markers = TxnMarkerChannel(replica_manager.broker_id, cache, replica_manager,
                               group_coordinator, channel, timeout_ms)
    coordinator = TransactionCoordinator(
        TransactionConfig.from_properties(config.get), append, num_partitions=num_partitions,
        generate_producer_id=producer_ids.generate_producer_id, write_markers=markers)
    coordinator.start()
    follower = TransactionStateFollower(replica_manager, coordinator)
    follower(cache.image)
    cache.subscribe(follower)
    return coordinator
