"""Produce: whole record batches appended to partition leaders, no per-record decoding.

acks=0 and acks=1 answer once the leader appended; acks=all (-1) answers once the high
watermark passed every batch of the request, or at the request's timeout (REQUEST_TIMED_OUT for
the partitions still waiting): Kafka's delayed produce.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.server.handlers.leader_hints import LeaderHints
from odradek.server.network import ConnectionCloseRequest
from odradek.server.replica_manager import ACKS_ALL, PendingAppend
from odradek.storage.validator import validate_produce_request_records

if TYPE_CHECKING:
    from odradek.server.network import RequestContext
    from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger("odradek.produce")

R = m.ProduceResponse


class ProduceApis:
    """Produce; needs only the replica manager."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    async def produce(self, ctx: RequestContext, req: m.ProduceRequest):
        response = await produce(self.replica_manager, ctx.api_version, req)
        if response is not None and ctx.api_version >= NEW_LEADER_HINT_VERSION:
            _add_leader_hints(response, LeaderHints(self.replica_manager.image, ctx.listener))
        return response


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


async def produce(replica_manager: ReplicaManager, version: int, req: m.ProduceRequest):
    acks = req.acks
    if acks not in (0, 1, -1):
        error = ErrorCode.INVALID_REQUIRED_ACKS
        return _all_failed(req, error) if acks != 0 else None
    if req.transactional_id is not None:
        # Transactions are not supported yet: refuse like a broker without the feature.
        return _all_failed(req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
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
            raise ConnectionCloseRequest("acks=0 produce failed")
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
