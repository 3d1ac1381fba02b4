"""Deferred file deletion (Kafka's `file.delete.delay.ms`), driven by the caller's clock."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

Clock = Callable[[], int]


def system_clock_ms() -> int:
    return int(time.time() * 1000)


class DeferredDeleter:
    """Actions due at a given time; `run_due(now_ms)` runs those whose time has come.

    Deleted segments wait here (renamed `.deleted`, still open) so that file regions handed to
    in-flight fetches stay readable until the delay has passed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._sequence = itertools.count()

    def schedule(self, due_ms: int, action: Callable[[], None]) -> None:
        with self._lock:
            heapq.heappush(self._heap, (due_ms, next(self._sequence), action))

    def run_due(self, now_ms: int) -> int:
        """Runs every action due at or before `now_ms`; returns how many ran."""
        ran = 0
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > now_ms:
                    return ran
                _, _, action = heapq.heappop(self._heap)
            action()
            ran += 1

    def run_all(self) -> int:
        with self._lock:
            pending, self._heap = self._heap, []
        for _, _, action in sorted(pending):
            action()
        return len(pending)

    def __len__(self) -> int:
        return len(self._heap)
