"""Time as a service: the one place coordinators, purgatories and quorum timers get the time
and schedule timeouts, so tests can advance time instead of sleeping.

`SystemClock` is the real thing (wall clock for timestamps, the running event loop for timers).
`ManualClock` is for tests: time stands still until `advance(ms)`, which fires the timers that
fall due, in deadline order. Both hand out handles with `cancel()`, like asyncio's TimerHandle.
This module imports nothing of Odradek's, so every layer may use it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def time_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (timestamps, expirations)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines)."""

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Runs `callback(*args)` on the event loop after `delay_s` seconds."""

    async def sleep(self, delay_s: float) -> None:
        """Waits `delay_s` seconds of this clock's time."""


class SystemClock:
    """Real time; timers on the running asyncio loop."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_s, 0.0), callback, *args)

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)


SYSTEM_CLOCK = SystemClock()


class _ManualTimer:
    __slots__ = ("deadline", "seq", "callback", "args", "cancelled")

    def __init__(self, deadline: int, seq: int, callback: Callable[..., Any],
                 args: tuple[Any, ...]) -> None:
        self.deadline = deadline
        self.seq = seq
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: _ManualTimer) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)


class ManualClock:
    """A clock for tests: `advance(ms)` moves time and fires due timers synchronously."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        # Integer nanoseconds: deadlines compare exactly (no float rounding at epoch scale).
        self._now_ns = start_ms * 1_000_000
        self._timers: list[_ManualTimer] = []
        self._seq = itertools.count()

    def time_ms(self) -> int:
        return self._now_ns // 1_000_000

    def monotonic(self) -> float:
        return self._now_ns / 1e9

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        deadline = self._now_ns + max(round(delay_s * 1e9), 0)
        timer = _ManualTimer(deadline, next(self._seq), callback, args)
        heapq.heappush(self._timers, timer)
        return timer

    async def sleep(self, delay_s: float) -> None:
        future = asyncio.get_running_loop().create_future()
        self.call_later(delay_s, lambda: future.done() or future.set_result(None))
        await future

    @property
    def pending_timers(self) -> int:
        return sum(1 for timer in self._timers if not timer.cancelled)

    def advance(self, ms: float) -> int:
        """Moves time forward by `ms`, firing every timer due by then (timers scheduled by a
        callback fire too if they fall in the window). Returns how many fired."""
        target = self._now_ns + round(ms * 1_000_000)
        fired = 0
        while self._timers and self._timers[0].deadline <= target:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now_ns = max(self._now_ns, timer.deadline)
            timer.callback(*timer.args)
            fired += 1
        self._now_ns = target
        return fired
