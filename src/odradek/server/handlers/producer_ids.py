"""InitProducerId for idempotent producers (transactional ids arrive with transactions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.coordinator.producer_ids import ProducerIdManager
    from odradek.server.network import RequestContext


class ProducerIdApis:
    def __init__(self, producer_ids: ProducerIdManager) -> None:
        self.producer_ids = producer_ids

    async def init_producer_id(self, ctx: RequestContext, req: m.InitProducerIdRequest):
        R = m.InitProducerIdResponse
        if req.transactional_id is not None:
            # No transaction coordinator yet: refuse transactional producers explicitly.
            return R(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                     producer_id=-1, producer_epoch=-1)
        # Without a transactional id every request gets a new producer id at epoch 0, whatever
        # id and epoch it carries (an idempotent producer bumps its own epoch; KIP-360's
        # server-side bump is for transactional ids).
        producer_id = await self.producer_ids.generate_producer_id()
        return R(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
