"""The purgatory: delayed operations wake on notify, time out on the injected clock, and are
answered at close; no watcher outlives its wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from odradek.clock import ManualClock
from odradek.server.purgatory import Purgatory

T = TypeVar("T")

SAFETY_TIMEOUT_S = 5.0  # bounds awaiting a task that must already be done


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def assert_clean(purgatory: Purgatory, clock: ManualClock) -> None:
    assert purgatory.watcher_count == 0
    assert not purgatory._watchers, "keys without watchers must be dropped"
    assert clock.pending_timers == 0, "the timeout timer must be cancelled"


def test_completes_at_once_without_watching_when_the_condition_holds() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        assert await purgatory.wait_until([("t", 0)], lambda: True, 30.0)
        assert_clean(purgatory, clock)

    run(scenario)


@pytest.mark.parametrize("timeout_s", [0.0, -5.0])
def test_no_timeout_means_no_wait(timeout_s: float) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        assert not await purgatory.wait_until([("t", 0)], lambda: False, timeout_s)
        assert_clean(purgatory, clock)

    run(scenario)


def test_notify_completes_a_waiter_once_its_condition_holds() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        state = {"bytes": 0}
        checks = 0

        def enough() -> bool:
            nonlocal checks
            checks += 1
            return state["bytes"] >= 10

        task = asyncio.ensure_future(purgatory.wait_until([("t", 0)], enough, 30.0))
        await settle()
        assert purgatory.watcher_count == 1 and checks == 1
        state["bytes"] = 5
        purgatory.notify(("t", 0))  # re-checked, still not enough
        await settle()
        assert not task.done() and checks == 2
        purgatory.notify(("t", 1))  # another key: not even re-checked
        await settle()
        assert checks == 2
        state["bytes"] = 12
        purgatory.notify(("t", 0))
        assert await asyncio.wait_for(task, SAFETY_TIMEOUT_S) is True
        assert_clean(purgatory, clock)

    run(scenario)


def test_any_watched_key_wakes_the_waiter() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        ready = False
        keys = [("a", 0), ("b", 3)]
        task = asyncio.ensure_future(purgatory.wait_until(keys, lambda: ready, 30.0))
        await settle()
        assert purgatory.watcher_count == 2
        ready = True
        purgatory.notify(("b", 3))
        assert await asyncio.wait_for(task, SAFETY_TIMEOUT_S) is True
        assert_clean(purgatory, clock)

    run(scenario)


def test_times_out_when_the_clock_passes_the_timeout() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        task = asyncio.ensure_future(purgatory.wait_until([("t", 0)], lambda: False, 0.5))
        await settle()
        clock.advance(499)
        await settle()
        assert not task.done()
        clock.advance(1)
        assert await asyncio.wait_for(task, SAFETY_TIMEOUT_S) is False
        assert_clean(purgatory, clock)

    run(scenario)


def test_a_condition_that_holds_at_expiry_counts_as_completed() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        ready = False
        task = asyncio.ensure_future(purgatory.wait_until([("t", 0)], lambda: ready, 1.0))
        await settle()
        ready = True  # changed without a notify
        clock.advance(1000)
        assert await asyncio.wait_for(task, SAFETY_TIMEOUT_S) is True

    run(scenario)


def test_notify_all_wakes_every_waiter() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        ready = False
        tasks = [asyncio.ensure_future(purgatory.wait_until([("t", i)], lambda: ready, 30.0))
                 for i in range(3)]
        await settle()
        assert purgatory.watcher_count == 3
        ready = True
        purgatory.notify_all()
        assert await asyncio.wait_for(asyncio.gather(*tasks), SAFETY_TIMEOUT_S) == [True] * 3
        assert_clean(purgatory, clock)

    run(scenario)


def test_close_answers_waiting_operations_and_refuses_new_waits() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        waiting = [asyncio.ensure_future(purgatory.wait_until([("t", i)], lambda: False, 30.0))
                   for i in range(2)]
        await settle()
        purgatory.close()
        assert purgatory.closed
        assert await asyncio.wait_for(asyncio.gather(*waiting), SAFETY_TIMEOUT_S) == [False] * 2
        assert_clean(purgatory, clock)
        # After close nothing waits: incomplete answers at once, complete still completes.
        assert await asyncio.wait_for(
            purgatory.wait_until([("t", 0)], lambda: False, 30.0), SAFETY_TIMEOUT_S) is False
        assert await purgatory.wait_until([("t", 0)], lambda: True, 30.0) is True
        assert_clean(purgatory, clock)

    run(scenario)


def test_a_cancelled_wait_removes_its_watchers() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        purgatory = Purgatory(clock)
        task = asyncio.ensure_future(purgatory.wait_until([("t", 0), ("t", 1)],
                                                          lambda: False, 30.0))
        other = asyncio.ensure_future(purgatory.wait_until([("t", 0)], lambda: False, 30.0))
        await settle()
        assert purgatory.watcher_count == 3
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The shared key keeps the other waiter; the key only the cancelled one watched is gone.
        assert purgatory.watcher_count == 1
        assert set(purgatory._watchers) == {("t", 0)}
        clock.advance(30_000)
        assert await asyncio.wait_for(other, SAFETY_TIMEOUT_S) is False
        assert_clean(purgatory, clock)

    run(scenario)


def test_notify_of_an_unwatched_key_is_harmless() -> None:
    purgatory = Purgatory(ManualClock())
    purgatory.notify(("nobody", 0))
    purgatory.notify_all()
    assert purgatory.watcher_count == 0
