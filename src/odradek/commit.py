"""The commit boundary: appended is not committed.

A write is acknowledged, applied or made visible only once its log's commit offset passes it:
a partition's high watermark (the ISR has it), the metadata quorum's commit index (a majority of
voters has it). `CommitWaiters` is the one mechanism for that wait, used by the produce path
(acks=all), the coordinators (append, wait for commit, apply) and the metadata quorum: whoever
appends asks `wait(last_offset)` for a future, and whoever advances the commit offset calls
`advance(offset)`, which completes the futures it passed, in offset order.

On a single node the commit offset advances right after the append, through this same path,
so a replicated log changes who calls `advance`, not who waits.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Collection, Mapping

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.request_timing import waiting_remotely


class CommitWaiters:
    """Futures of one log that complete when its commit offset passes their offset."""

    def __init__(self, committed: int = 0) -> None:
        self.committed = committed  # exclusive: every offset below it is committed
        self._waiting: list[tuple[int, int, asyncio.Future[int]]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, offset: int) -> asyncio.Future[int]:
        """A future that completes with `offset` once the commit offset is past it."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if offset < self.committed:
            future.set_result(offset)
        else:
            heapq.heappush(self._waiting, (offset, next(self._seq), future))
        return future

    def advance(self, committed: int,
                failed: Mapping[int, BaseException] | None = None) -> int:
        """The commit offset moved to `committed` (exclusive); completes the futures it
        passed, lowest offset first (with the error in `failed` for an offset whose write
        could not be applied at commit). Returns how many completed."""
        self.committed = max(self.committed, committed)
        done = 0
        waiting = self._waiting
        while waiting and waiting[0][0] < self.committed:
            offset, _seq, future = heapq.heappop(waiting)
            if not future.done():
                error = failed.get(offset) if failed else None
                if error is None:
                    future.set_result(offset)
                else:
                    future.set_exception(error)
                    future.exception()  # the waiter may be gone; not an unhandled error
                done += 1
        return done

    def fail_all(self, error: BaseException) -> None:
        """Nothing waiting here will be committed by this log any more (leadership lost, log
        truncated or deleted, shutdown)."""
        waiting, self._waiting = self._waiting, []
        for _offset, _seq, future in waiting:
            if not future.done():
                future.set_exception(error)
                # Waiters may have given up already; their failure is not an unhandled error.
                future.exception()

    def reset(self, committed: int) -> None:
        """A new term for this log (e.g. leadership regained): start from `committed`."""
        self.committed = committed


async def wait_for_commits(futures: Collection[asyncio.Future[int]], timeout_s: float,
                           clock: Clock = SYSTEM_CLOCK) -> None:
    """Waits until every future is done or `timeout_s` of `clock` time passed; the caller
    then looks at each future (done or not, result or exception). Never raises."""
    pending = {f for f in futures if not f.done()}
    if not pending or timeout_s <= 0:
        return
    deadline: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    timer = clock.call_later(timeout_s, lambda: deadline.done() or deadline.set_result(None))
    try:
        # asyncio.wait cancels nothing: the commit futures are shared with other waiters.
        with waiting_remotely():
            while pending and not deadline.done():
                await asyncio.wait(pending | {deadline}, return_when=asyncio.FIRST_COMPLETED)
                pending = {f for f in pending if not f.done()}
    finally:
        timer.cancel()
        if not deadline.done():
            deadline.cancel()
