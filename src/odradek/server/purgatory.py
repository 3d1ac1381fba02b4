"""Waiting rooms for requests that cannot complete yet (Kafka's purgatory).

A delayed operation watches some keys (topic-partitions); whoever changes a key calls
`notify(key)`, which wakes the watchers so they re-check their completion condition. Waiting is
always bounded by the request's own timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.request_timing import waiting_remotely


class Purgatory:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._watchers: dict[Hashable, set[asyncio.Event]] = {}
        self.closed = False

    def notify(self, key: Hashable) -> None:
        events = self._watchers.get(key)
        if events:
            for event in events:
                event.set()

    def notify_all(self) -> None:
        for events in self._watchers.values():
            for event in events:
                event.set()

    def close(self) -> None:
        """Shutdown: every waiting operation completes now with what it has, and new ones do
        not wait, so in-flight long polls are answered instead of cut."""
        self.closed = True
        self.notify_all()

    @property
    def watcher_count(self) -> int:
        return sum(len(v) for v in self._watchers.values())

    async def wait_until(
        self,
        keys: Iterable[Hashable],
        is_complete: Callable[[], bool],
        timeout_s: float,
    ) -> bool:
        """Wait until `is_complete()` holds (re-checked after each notify on one of `keys`) or the
        timeout passes. Returns whether it completed."""
        if is_complete():
            return True
        if timeout_s <= 0 or self.closed:
            return False
        event = asyncio.Event()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            event.set()

        timer = self.clock.call_later(timeout_s, expire)
        keys = list(keys)
        for key in keys:
            self._watchers.setdefault(key, set()).add(event)
        try:
            with waiting_remotely():
                while True:
                    await event.wait()
                    event.clear()
                    if is_complete():
                        return True
                    if expired or self.closed:
                        return False
        finally:
            timer.cancel()
            for key in keys:
                watchers = self._watchers.get(key)
                if watchers is not None:
                    watchers.discard(event)
                    if not watchers:
                        del self._watchers[key]
