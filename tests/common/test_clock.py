"""The injectable clock: ManualClock fires timers in deadline order only when advanced."""

from __future__ import annotations

import asyncio

from odradek.clock import SYSTEM_CLOCK, ManualClock


def test_manual_clock_fires_due_timers_in_order():
    clock = ManualClock(start_ms=1000)
    fired: list[str] = []
    clock.call_later(0.2, fired.append, "b")
    clock.call_later(0.1, fired.append, "a")
    cancelled = clock.call_later(0.15, fired.append, "x")
    cancelled.cancel()
    assert clock.advance(50) == 0 and fired == []
    assert clock.advance(100) == 1 and fired == ["a"]
    assert clock.time_ms() == 1150
    assert clock.advance(100) == 1 and fired == ["a", "b"]
    assert clock.pending_timers == 0


def test_manual_clock_timer_scheduled_by_a_timer_fires_in_the_same_advance():
    clock = ManualClock(start_ms=0)
    fired: list[int] = []
    clock.call_later(0.1, lambda: clock.call_later(0.1, fired.append, clock.time_ms()))
    clock.advance(250)
    assert fired == [100]


def test_manual_sleep_waits_for_advance():
    async def scenario() -> None:
        clock = ManualClock(start_ms=0)
        task = asyncio.ensure_future(clock.sleep(1.0))
        await asyncio.sleep(0)
        clock.advance(999)
        await asyncio.sleep(0)
        assert not task.done()
        clock.advance(1)
        await asyncio.wait_for(task, 1.0)

    asyncio.run(scenario())


def test_system_clock_timer_runs_on_the_loop():
    async def scenario() -> None:
        done = asyncio.Event()
        SYSTEM_CLOCK.call_later(0.001, done.set)
        await asyncio.wait_for(done.wait(), 2.0)
        assert SYSTEM_CLOCK.time_ms() > 1_600_000_000_000

    asyncio.run(scenario())
