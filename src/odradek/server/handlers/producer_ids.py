"""InitProducerId: a fresh producer id for idempotent producers; for transactional ids, the
transaction coordinator's id and epoch (epoch bump, fencing, KIP-360 recovery)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.handlers.transactions import client_error

if TYPE_CHECKING:
    from odradek.coordinator.producer_ids import ProducerIdManager
    from odradek.coordinator.transaction_coordinator import TransactionCoordinator
    from odradek.server.network import RequestContext

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class ProducerIdApis:
    def __init__(self, producer_ids: ProducerIdManager,
                 transactions: TransactionCoordinator) -> None:
        self.producer_ids = producer_ids
        self.transactions = transactions

    async def init_producer_id(self, ctx: RequestContext, req: m.InitProducerIdRequest):
        R = m.InitProducerIdResponse
        version = ctx.api_version
        # Kafka: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE
        # on the cluster or WRITE on some topic.
        if req.transactional_id is not None:
            if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                 req.transactional_id):
                return R(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)
        elif not ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE) and \
                not ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC):
            return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                     producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)
        if req.transactional_id is None:
            # Without a transactional id every request gets a new producer id at epoch 0,
            # whatever id and epoch it carries (an idempotent producer bumps its own epoch;
            # KIP-360's server-side bump is for transactional ids).
            producer_id = await self.producer_ids.generate_producer_id()
            return R(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
        producer_id, producer_epoch = (req.producer_id, req.producer_epoch) if version >= 3 \
            else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if (producer_id, producer_epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
            expected = None
        elif producer_id == NO_PRODUCER_ID or producer_epoch == NO_PRODUCER_EPOCH:
            return R(error_code=ErrorCode.INVALID_REQUEST, producer_id=NO_PRODUCER_ID,
                     producer_epoch=NO_PRODUCER_EPOCH)
        else:
            expected = (producer_id, producer_epoch)
        result = await self.transactions.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, expected)
        return R(error_code=client_error("InitProducerId", version, result.error),
                 producer_id=result.producer_id, producer_epoch=result.producer_epoch)
