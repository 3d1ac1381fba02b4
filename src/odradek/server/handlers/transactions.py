"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
DescribeTransactions, ListTransactions (InitProducerId is in `producer_ids`).

The handlers translate each wire version to the transaction coordinator's calls
(`odradek.coordinator.transaction_coordinator`) and back; WriteTxnMarkers, sent by coordinators
to partition leaders, appends the markers here (`odradek.server.transactions.append_markers`).
Transactions v0/v1 only: AddPartitionsToTxn and EndTxn are served up to v4 (their v5 is
transactions v2, KIP-890 part 2, which bumps the epoch at every transaction end).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.coordinator.transaction_coordinator import TransactionCoordinator
from odradek.metadata.cache import MetadataCache
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.types import TopicPartition
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.replica_manager import ReplicaManager
from odradek.server.transactions import append_markers

if TYPE_CHECKING:
    from odradek.server.network import RequestContext

#: below these versions a client does not know PRODUCER_FENCED (KIP-588) and gets
#: INVALID_PRODUCER_EPOCH instead, as Kafka answers
PRODUCER_FENCED_MIN_VERSION = {"AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2,
                               "InitProducerId": 4}
#: AddPartitionsToTxn v4+ is the brokers' batched form (KIP-890 part 1)
BATCHED_ADD_PARTITIONS_VERSION = 4


#: the EndTxn version that means transactions v2 (KIP-890 part 2)
TRANSACTIONS_V2_END_TXN_VERSION = 5


def client_error(api: str, version: int, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.PRODUCER_FENCED and version < PRODUCER_FENCED_MIN_VERSION[api]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _transactional_id_allowed(ctx: RequestContext, operation: AclOperation,
                              transactional_id: str) -> bool:
    return ctx.authorize(operation, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        topics[tp.topic].append(tp.partition)
    return topics


class TransactionApis:
    def __init__(self, coordinator: TransactionCoordinator, cache: MetadataCache,
                 replica_manager: ReplicaManager, group_coordinator: GroupCoordinator,
                 marker_timeout_ms: int) -> None:
        self.coordinator = coordinator
        self.cache = cache
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.marker_timeout_ms = marker_timeout_ms

    # -- AddPartitionsToTxn
    def _topic_results(self, errors: dict[TopicPartition, ErrorCode],
                       ) -> list[m.AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
        R = m.AddPartitionsToTxnResponse
        by_topic: dict[str, list] = defaultdict(list)
        for tp, error in errors.items():
            by_topic[tp.topic].append(R.AddPartitionsToTxnPartitionResult(
                partition_index=tp.partition, partition_error_code=error))
        return [R.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=results)
                for topic, results in by_topic.items()]

    async def _add_partitions(self, version: int, transactional_id: str, producer_id: int,
                              producer_epoch: int, topics: Iterable,
                              verify_only: bool) -> dict[TopicPartition, ErrorCode]:
        partitions = [TopicPartition(t.name, index) for t in topics for index in t.partitions]
        image = self.cache.image
        missing = set()
        for tp in partitions:
            topic = image.topics_by_name.get(tp.topic)
            if topic is None or tp.partition not in topic.partitions:
                missing.add(tp)
        if missing:
            # One bad partition fails the whole request; the others are not attempted.
            return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in missing
                    else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in partitions}
        if verify_only:
            return self.coordinator.verify_partitions(transactional_id, producer_id,
                                                      producer_epoch, partitions)
        error = await self.coordinator.add_partitions(transactional_id, producer_id,
                                                      producer_epoch, partitions)
        error = client_error("AddPartitionsToTxn", version, error)
        return dict.fromkeys(partitions, error)

    async def add_partitions_to_txn(self, ctx: RequestContext,
                                    req: m.AddPartitionsToTxnRequest):
        version = ctx.api_version
        R = m.AddPartitionsToTxnResponse
        if version < BATCHED_ADD_PARTITIONS_VERSION:
            partitions = [TopicPartition(t.name, index) for t in req.v3_and_below_topics
                          for index in t.partitions]
            if not _transactional_id_allowed(ctx, AclOperation.WRITE,
                                             req.v3_and_below_transactional_id):
                return R(results_by_topic_v3_and_below=self._topic_results(dict.fromkeys(
                    partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
            writable = ctx.authorized_names(AclOperation.WRITE, ResourceType.TOPIC,
                                            (tp.topic for tp in partitions))
            if any(tp.topic not in writable for tp in partitions):
                # As Kafka: the unauthorized fail, the others are not attempted.
                return R(results_by_topic_v3_and_below=self._topic_results({
                    tp: ErrorCode.OPERATION_NOT_ATTEMPTED if tp.topic in writable
                    else ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in partitions}))
            errors = await self._add_partitions(
                version, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch, req.v3_and_below_topics, verify_only=False)
            return R(results_by_topic_v3_and_below=self._topic_results(errors))
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):  # brokers' batched form
            return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
        answers = await asyncio.gather(*(
            self._add_partitions(version, txn.transactional_id, txn.producer_id,
                                 txn.producer_epoch, txn.topics, txn.verify_only)
            for txn in req.transactions))
        return R(error_code=ErrorCode.NONE, results_by_transaction=[
            R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                       topic_results=self._topic_results(errors))
            for txn, errors in zip(req.transactions, answers, strict=True)])

    # -- AddOffsetsToTxn
    async def add_offsets_to_txn(self, ctx: RequestContext, req: m.AddOffsetsToTxnRequest):
        if not _transactional_id_allowed(ctx, AclOperation.WRITE, req.transactional_id):
            return m.AddOffsetsToTxnResponse(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
            return m.AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        # The group's offsets partition joins the transaction: its marker makes the
        # transactional offset commits visible (or drops them).
        offsets_partition = TopicPartition(
            OFFSETS_TOPIC, self.group_coordinator.manager.partition_for(req.group_id))
        error = await self.coordinator.add_partitions(req.transactional_id, req.producer_id,
                                                      req.producer_epoch, [offsets_partition])
        return m.AddOffsetsToTxnResponse(
            error_code=client_error("AddOffsetsToTxn", ctx.api_version, error))

    # -- EndTxn
    async def end_txn(self, ctx: RequestContext, req: m.EndTxnRequest):
        if ctx.api_version >= TRANSACTIONS_V2_END_TXN_VERSION:
            # EndTxn v5 asks for transactions v2 (an epoch bump at every end, KIP-890 part 2),
            # which a client uses only when transaction.version 2 is finalized: Odradek
            # supports transaction.version up to 1, so this request is refused, not half done.
            return m.EndTxnResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                    producer_id=-1, producer_epoch=-1)
        if not _transactional_id_allowed(ctx, AclOperation.WRITE, req.transactional_id):
            return m.EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        error = await self.coordinator.end_transaction(req.transactional_id, req.producer_id,
                                                       req.producer_epoch, req.committed)
        return m.EndTxnResponse(error_code=client_error("EndTxn", ctx.api_version, error))

    # -- WriteTxnMarkers (from coordinators to partition leaders)
    async def write_txn_markers(self, ctx: RequestContext, req: m.WriteTxnMarkersRequest):
        R = m.WriteTxnMarkersResponse
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return R(markers=[R.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                    R.WritableTxnMarkerPartitionResult(
                        partition_index=index, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                    for index in t.partition_indexes]) for t in marker.topics])
                for marker in req.markers])

        async def one(marker) -> R.WritableTxnMarkerResult:
            partitions = [TopicPartition(t.name, index) for t in marker.topics
                          for index in t.partition_indexes]
            errors = await append_markers(self.replica_manager, self.group_coordinator, marker,
                                          partitions, self.marker_timeout_ms)
            by_topic: dict[str, list] = defaultdict(list)
            for tp in partitions:
                by_topic[tp.topic].append(R.WritableTxnMarkerPartitionResult(
                    partition_index=tp.partition, error_code=errors[tp]))
            return R.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[R.WritableTxnMarkerTopicResult(name=topic, partitions=results)
                        for topic, results in by_topic.items()])

        return R(markers=list(await asyncio.gather(*(one(mk) for mk in req.markers))))

    # -- DescribeTransactions, ListTransactions
    async def describe_transactions(self, ctx: RequestContext,
                                    req: m.DescribeTransactionsRequest):
        R = m.DescribeTransactionsResponse
        states = []
        for transactional_id in req.transactional_ids:
            if not _transactional_id_allowed(ctx, AclOperation.DESCRIBE, transactional_id):
                states.append(R.TransactionState(
                    error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    transactional_id=transactional_id))
                continue
            error, md = self.coordinator.describe(transactional_id)
            if md is None:
                states.append(R.TransactionState(error_code=error,
                                                 transactional_id=transactional_id))
                continue
            states.append(R.TransactionState(
                error_code=ErrorCode.NONE, transactional_id=transactional_id,
                transaction_state=md.state.state_name,
                transaction_timeout_ms=md.txn_timeout_ms,
                transaction_start_time_ms=md.txn_start_timestamp,
                producer_id=md.producer_id, producer_epoch=md.producer_epoch,
                # Only the topics the principal may DESCRIBE are shown (as Kafka).
                topics=[R.TopicData(topic=topic, partitions=sorted(indexes))
                        for topic, indexes in _by_topic(md.topic_partitions).items()
                        if ctx.authorize_topic(AclOperation.DESCRIBE, topic)]))
        return R(transaction_states=states)

    async def list_transactions(self, ctx: RequestContext, req: m.ListTransactionsRequest):
        R = m.ListTransactionsResponse
        duration = req.duration_filter if ctx.api_version >= 1 else -1
        error, unknown, listed = self.coordinator.list_transactions(
            req.state_filters, req.producer_id_filters, duration)
        return R(error_code=error, unknown_state_filters=unknown, transaction_states=[
            R.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                               transaction_state=t.state) for t in listed
            if _transactional_id_allowed(ctx, AclOperation.DESCRIBE, t.transactional_id)])
