"""Produce: whole record batches appended to partition leaders, no per-record decoding.

acks=0 and acks=1 answer once the leader appended; acks=all (-1) answers once the high
watermark passed every batch of the request, or at the request's timeout (REQUEST_TIMED_OUT for
the partitions still waiting): Kafka's delayed produce.

Transactional batches (KIP-890 part 1, `transaction.partition.verification.enable`): a batch
for a partition whose log has no ongoing transaction of that producer and epoch is appended only
once the transaction coordinator confirms the partition is in the producer's ongoing
transaction, so a late write cannot start a transaction of its own after the real one ended.
The coordinator's refusals reach the client as Kafka's ReplicaManager translates them.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    MAGIC_OFFSET,
    PRODUCER_ID_OFFSET,
)
from odradek.protocol.types import TopicPartition
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.handlers.leader_hints import LeaderHints
from odradek.server.network import ConnectionCloseRequest
from odradek.server.replica_manager import ACKS_ALL, PendingAppend
from odradek.storage.validator import validate_produce_request_records

if TYPE_CHECKING:
    from odradek.server.network import RequestContext
    from odradek.server.replica_manager import ReplicaManager
    from odradek.server.transactions import TransactionVerifier

log = logging.getLogger("odradek.produce")

R = m.ProduceResponse


class ProduceApis:
    """Produce: the replica manager, and for transactional batches the verifier."""

    def __init__(self, replica_manager: ReplicaManager, verifier: TransactionVerifier,
                 verification_enabled: Callable[[], bool]) -> None:
        self.replica_manager = replica_manager
        self.verifier = verifier
        self.verification_enabled = verification_enabled

    async def produce(self, ctx: RequestContext, req: m.ProduceRequest):
        refused = _unauthorized_partitions(ctx, req)
        if refused is None:
            if req.acks == 0:
                raise ConnectionCloseRequest("acks=0 produce failed authorization")
            return _all_failed(req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if req.transactional_id is not None and req.acks in (0, 1, -1) and \
                self.verification_enabled():
            refused.update(await verify_transactional_batches(
                self.replica_manager, self.verifier, ctx.api_version, req, refused))
        response = await produce(self.replica_manager, ctx.api_version, req, refused)
        if response is not None and ctx.api_version >= NEW_LEADER_HINT_VERSION:
            _add_leader_hints(response, LeaderHints(self.replica_manager.image, ctx.listener))
        return response


def _unauthorized_partitions(ctx: RequestContext, req: m.ProduceRequest,
                             ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]] | None:
    """The partitions of topics the principal may not WRITE (TOPIC_AUTHORIZATION_FAILED);
    None when the request carries a transactional id the principal may not WRITE (Kafka
    refuses the whole request then)."""
    if req.transactional_id is not None and not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return None
    if ctx.authorizer is None:
        return {}
    allowed = ctx.authorized_names(AclOperation.WRITE, ResourceType.TOPIC,
                                   (t.name for t in req.topic_data))
    return {(t.name, p.index): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
            for t in req.topic_data if t.name not in allowed for p in t.partition_data}


# Produce v10+ carries where a moved partition's leader is now (KIP-951).
NEW_LEADER_HINT_VERSION = 10


def _add_leader_hints(response: m.ProduceResponse, hints: LeaderHints) -> None:
    for topic in response.responses:
        for out in topic.partition_responses:
            leader = hints.current_leader(topic.name, out.index, out.error_code)
            if leader is not None:
                out.current_leader = R.LeaderIdAndEpoch(leader_id=leader[0],
                                                        leader_epoch=leader[1])
    response.node_endpoints = hints.node_endpoints(R.NodeEndpoint)


_PRODUCER_ID_AND_EPOCH = struct.Struct(">qh")
_INT16 = struct.Struct(">h")
_TRANSACTIONAL_FLAG = 0x10
# Produce v11+ clients understand TRANSACTION_ABORTABLE; v12+ (transactions v2) take
# CONCURRENT_TRANSACTIONS as it is.
TRANSACTION_ABORTABLE_PRODUCE_VERSION = 11
CONCURRENT_TRANSACTIONS_PRODUCE_VERSION = 12
_NOT_VERIFIED = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


def transactional_producer(records: bytes | memoryview | None) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional v2 batch (its first batch's header), else None."""
    if records is None or len(records) < BATCH_HEADER_SIZE or records[MAGIC_OFFSET] != 2:
        return None
    (attributes,) = _INT16.unpack_from(records, ATTRIBUTES_OFFSET)
    if not attributes & _TRANSACTIONAL_FLAG:
        return None
    producer_id, epoch = _PRODUCER_ID_AND_EPOCH.unpack_from(records, PRODUCER_ID_OFFSET)
    return producer_id, epoch


def verification_error(error: ErrorCode, version: int) -> tuple[ErrorCode, str | None]:
    """The produce error for a coordinator's refusal (Kafka's AddPartitionsToTxnManager and
    ReplicaManager translations)."""
    if error == ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    elif error == ErrorCode.TRANSACTION_ABORTABLE and \
            version < TRANSACTION_ABORTABLE_PRODUCE_VERSION:
        error = ErrorCode.INVALID_TXN_STATE
    if error in _NOT_VERIFIED or (error == ErrorCode.CONCURRENT_TRANSACTIONS and
                                  version < CONCURRENT_TRANSACTIONS_PRODUCE_VERSION):
        # Retriable for every client, without a metadata refresh.
        return (ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been "
                f"added to the transaction. Underlying error: {error.name}")
    if error == ErrorCode.INVALID_TXN_STATE:
        return error, "Partition was not added to the transaction"
    return error, None


async def verify_transactional_batches(
        replica_manager: ReplicaManager, verifier: TransactionVerifier, version: int,
        req: m.ProduceRequest, skipped: Mapping[tuple[str, int], object] | None = None,
        ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    """KIP-890 part 1: the partitions the coordinator refuses, with their produce error.
    Only batches that would start a transaction in their partition are checked (not those
    in `skipped`, refused already)."""
    to_verify: dict[tuple[int, int], list[TopicPartition]] = {}
    for topic_data in req.topic_data:
        for pdata in topic_data.partition_data:
            if skipped and (topic_data.name, pdata.index) in skipped:
                continue
            producer = transactional_producer(pdata.records)
            if producer is None:
                continue
            partition, _error = replica_manager.get_partition(topic_data.name, pdata.index)
            if partition is None or not partition.is_leader:
                continue  # the append answers why
            if partition.log.has_ongoing_transaction(*producer):
                continue
            to_verify.setdefault(producer, []).append(
                TopicPartition(topic_data.name, pdata.index))
    refused: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    for (producer_id, epoch), partitions in to_verify.items():
        answers = await verifier.verify(req.transactional_id, producer_id, epoch, partitions)
        for tp in partitions:
            error = answers.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
            if error != ErrorCode.NONE:
                refused[(tp.topic, tp.partition)] = verification_error(error, version)
    return refused


async def produce(replica_manager: ReplicaManager, version: int, req: m.ProduceRequest,
                  refused: dict[tuple[str, int], tuple[ErrorCode, str | None]] | None = None):
    """Appends the request's batches; `refused`: partitions answered with an error instead."""
    acks = req.acks
    if acks not in (0, 1, -1):
        error = ErrorCode.INVALID_REQUIRED_ACKS
        return _all_failed(req, error) if acks != 0 else None
    refused = refused or {}
    responses = []
    waiting: list[tuple[R.PartitionProduceResponse, PendingAppend]] = []
    any_error = False
    for topic_data in req.topic_data:
        name = topic_data.name
        partitions_out = []
        for pdata in topic_data.partition_data:
            out = R.PartitionProduceResponse(index=pdata.index, base_offset=-1,
                                             log_append_time_ms=-1, log_start_offset=-1)
            records = pdata.records
            try:
                if (name, pdata.index) in refused:
                    raise KafkaError(*refused[(name, pdata.index)])
                if records is None or len(records) == 0:
                    raise KafkaError(ErrorCode.INVALID_RECORD, "Produce request with no records")
                validate_produce_request_records(records, version)
                pending = replica_manager.append(name, pdata.index, records, acks)
                info = pending.result
                out.base_offset = info.first_offset
                out.log_append_time_ms = info.log_append_time
                out.log_start_offset = info.log_start_offset
                if acks == ACKS_ALL and pending.committed is not None:
                    waiting.append((out, pending))
            except KafkaError as exc:
                out.error_code = exc.code
                out.error_message = exc.message
                any_error = True
            except Exception:
                log.exception("append to %s-%d failed", name, pdata.index)
                out.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                any_error = True
            partitions_out.append(out)
        responses.append(R.TopicProduceResponse(name=name, partition_responses=partitions_out))
    if acks == 0:
        if any_error:
            # The client expects no answer; closing the connection is how Kafka tells it.
            raise ConnectionCloseRequest("acks=0 produce failed", R(responses=responses))
        return None
    if waiting:
        await replica_manager.wait_for_commit([p for _out, p in waiting], req.timeout_ms)
        for out, pending in waiting:
            error = pending.outcome()
            if error != ErrorCode.NONE:
                out.error_code = error
                out.base_offset = -1
                out.log_append_time_ms = -1
                out.log_start_offset = -1
    return R(responses=responses)


def _all_failed(req: m.ProduceRequest, error: ErrorCode) -> m.ProduceResponse:
    return R(
        responses=[
            R.TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    R.PartitionProduceResponse(index=p.index, error_code=error, base_offset=-1,
                                               log_append_time_ms=-1, log_start_offset=-1)
                    for p in t.partition_data
                ],
            )
            for t in req.topic_data
        ]
    )
