"""Where a broker's tail latency comes from: event-loop stalls and garbage-collector pauses.

Every request of a broker is served by one event loop, so anything that holds the loop (a
blocking system call, a long computation, a full garbage collection) delays every request that
is due meanwhile, on every connection: that is what a produce's p99.9 sees.

`LoopStallMonitor` watches the loop from a daemon thread. The loop beats (a `call_later` chain
every `beat_ms`); the thread checks the beat, and when the loop has not beaten for `threshold_ms`
it takes the loop thread's Python stack (`sys._current_frames`) at that moment: the function
the loop is stuck in. When the loop beats again the stall is reported once (logged at WARN with
that stack, and counted) -- unless the stack showed the loop idle in its own poll, which means
the whole process was not scheduled (a starved machine), not that code blocked the loop: those
are counted apart, as `starved`.

`GcPauseMonitor` times every collection through `gc.callbacks` and reports those longer than
its threshold the same way.

`FsyncOnLoopCheck` (a diagnostic, off by default) reports every fsync made on the loop's
thread, however short: an fsync can take a second on a busy disk, so the produce path must
leave them to the background flush, as Kafka's roll does (KAFKA-9693, KAFKA-15046). A stall
bound alone would miss an fsync that happened to be fast on the test machine.

Both cost nearly nothing when nothing stalls: one timer callback per beat on the loop, one
thread wake-up per beat, two clock reads per collection."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

log = logging.getLogger(__name__)

# Innermost frames of a loop waiting for events: stdlib asyncio polls in selectors, uvloop's
# loop is C code entered from asyncio.runners (or run_until_complete, run_forever).
_IDLE_FRAMES = frozenset({
    ("selectors.py", "select"),
    ("runners.py", "run"),
    ("base_events.py", "run_until_complete"),
    ("base_events.py", "run_forever"),
    ("base_events.py", "_run_once"),
})


@dataclass
class Stall:
    """One span during which the loop did not beat."""

    duration_ms: float
    stack: str  # the loop thread's stack when the stall was detected
    starved: bool  # the loop was idle in its poll: the process was not scheduled


@dataclass
class StallStats:
    stalls: int = 0  # code held the loop longer than the threshold
    starved: int = 0  # the process was not scheduled for longer than the threshold
    longest_ms: float = 0.0  # the longest stall caused by code
    recent: list[Stall] = field(default_factory=list)  # the last few, newest last


def _is_idle(frame: FrameType | None) -> bool:
    if frame is None:
        return True
    code = frame.f_code
    return (code.co_filename.rsplit("/", 1)[-1], code.co_name) in _IDLE_FRAMES


class LoopStallMonitor:
    """Reports the event loop held for longer than `threshold_ms` (see the module doc)."""

    RECENT = 16

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_ms: float,
                 beat_ms: float | None = None,
                 on_stall: Callable[[Stall], None] | None = None) -> None:
        self.loop = loop
        self.threshold_s = threshold_ms / 1000
        # Beat well inside the threshold, so a stall is seen within a fraction of it.
        self.beat_s = (beat_ms / 1000) if beat_ms is not None else min(0.02,
                                                                       self.threshold_s / 4)
        self.on_stall = on_stall
        self.stats = StallStats()
        self._lock = threading.Lock()
        self._last_beat = time.monotonic()
        self._loop_thread_id: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending: tuple[float, str, bool] | None = None  # a stall seen, not yet over

    def start(self) -> None:
        """Call from the loop's thread."""
        self._loop_thread_id = threading.get_ident()
        self._last_beat = time.monotonic()
        self._timer = self.loop.call_later(self.beat_s, self._beat)
        self._thread = threading.Thread(target=self._watch, name="loop-stall-monitor",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _beat(self) -> None:
        now = time.monotonic()
        with self._lock:
            pending, self._pending = self._pending, None
            started = self._last_beat
            self._last_beat = now
        if pending is not None:
            _seen_at, stack, starved = pending
            # The stall lasted from the beat that should have come to this one.
            self._report(Stall((now - started - self.beat_s) * 1000, stack, starved))
        if not self._stop.is_set():
            self._timer = self.loop.call_later(self.beat_s, self._beat)

    def _watch(self) -> None:
        while not self._stop.wait(self.beat_s):
            with self._lock:
                late = time.monotonic() - self._last_beat - self.beat_s
                if late < self.threshold_s or self._pending is not None:
                    continue
                frame = sys._current_frames().get(self._loop_thread_id)  # type: ignore[arg-type]
                starved = _is_idle(frame)
                stack = "".join(traceback.format_stack(frame, limit=12)) if frame else ""
                self._pending = (late, stack, starved)

    def _report(self, stall: Stall) -> None:
        stats = self.stats
        if stall.starved:
            stats.starved += 1
            log.info("event loop idle but not scheduled for %.0f ms (the machine is busy)",
                     stall.duration_ms)
        else:
            stats.stalls += 1
            stats.longest_ms = max(stats.longest_ms, stall.duration_ms)
            log.warning("event loop blocked for %.0f ms (more than %.0f ms); it was in:\n%s",
                        stall.duration_ms, self.threshold_s * 1000, stall.stack.rstrip())
        stats.recent.append(stall)
        del stats.recent[:-self.RECENT]
        if self.on_stall is not None:
            self.on_stall(stall)


class FsyncOnLoopCheck:
    """Wraps `os.fsync` and `os.fdatasync` while installed: a call on the loop's thread is
    counted and logged at WARN with its stack (see the module doc)."""

    CALLS = ("fsync", "fdatasync")

    def __init__(self) -> None:
        self.calls = 0
        self._loop_thread_id: int | None = None
        self._originals: dict[str, Callable[[int], None]] = {}

    def install(self) -> None:
        """Call from the loop's thread."""
        self._loop_thread_id = threading.get_ident()
        for name in self.CALLS:
            original = getattr(os, name)
            self._originals[name] = original
            setattr(os, name, self._wrap(name, original))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(os, name, original)
        self._originals.clear()

    def _wrap(self, name: str, original: Callable[[int], None]) -> Callable[[int], None]:
        def checked(fd: int) -> None:
            if threading.get_ident() != self._loop_thread_id:
                original(fd)
                return
            started = time.perf_counter_ns()
            try:
                original(fd)
            finally:
                self.calls += 1
                log.warning("%s on the event loop's thread (%.1f ms); called from:\n%s", name,
                            (time.perf_counter_ns() - started) / 1e6,
                            "".join(traceback.format_stack(limit=10)[:-1]).rstrip())
        return checked


@dataclass
class GcStats:
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])  # per generation
    total_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    longest_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    slow: int = 0  # collections longer than the threshold


class GcPauseMonitor:
    """Times every garbage collection; logs those longer than `threshold_ms` at WARN."""

    def __init__(self, threshold_ms: float) -> None:
        self.threshold_ms = threshold_ms
        self.stats = GcStats()
        self._started = 0

    def start(self) -> None:
        gc.callbacks.append(self._callback)

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
            return
        elapsed_ms = (time.perf_counter_ns() - self._started) / 1e6
        generation = info.get("generation", 2)
        stats = self.stats
        stats.collections[generation] += 1
        stats.total_ms[generation] += elapsed_ms
        stats.longest_ms[generation] = max(stats.longest_ms[generation], elapsed_ms)
        if elapsed_ms > self.threshold_ms:
            stats.slow += 1
            log.warning("garbage collection of generation %d took %.0f ms (%d objects "
                        "collected)", generation, elapsed_ms, info.get("collected", 0))
