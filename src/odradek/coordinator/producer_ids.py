"""Producer ids for InitProducerId, handed out from blocks the controller allocates.

Kafka's ProducerIdManager: a broker asks the controller for a block of ids
(ProducerIdsRecord in the metadata log, so no id is ever handed out twice, across restarts
and brokers) and serves InitProducerId from it until it runs out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

#: asks the controller for the next block: returns (first id, count)
AllocateBlock = Callable[[], Awaitable[tuple[int, int]]]


class ProducerIdManager:
    def __init__(self, allocate_block: AllocateBlock) -> None:
        self._allocate_block = allocate_block
        self._next = 0
        self._end = 0  # [next, end) is what is left of the current block
        self._lock = asyncio.Lock()  # one block request at a time

    async def generate_producer_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                first, count = await self._allocate_block()
                self._next, self._end = first, first + count
            producer_id = self._next
            self._next += 1
            return producer_id
