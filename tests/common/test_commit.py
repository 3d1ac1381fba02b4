"""The commit boundary: CommitWaiters futures complete in offset order once the commit offset
passes them; wait_for_commits is bounded by an injectable clock (no real sleeping)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from odradek.clock import ManualClock
from odradek.commit import CommitWaiters, wait_for_commits
from odradek.protocol.errors import ErrorCode, KafkaError

T = TypeVar("T")

# A bound on awaiting something that must already be done (never reached by a passing test).
SAFETY_TIMEOUT_S = 5.0


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]


async def settle() -> None:
    """Lets callbacks scheduled with call_soon (future callbacks, woken tasks) run."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_wait_completes_once_the_commit_offset_passes_the_offset() -> None:
    async def scenario() -> None:
        waiters = CommitWaiters()
        future = waiters.wait(4)
        assert not future.done() and len(waiters) == 1
        assert waiters.advance(4) == 0  # exclusive: offset 4 is not committed at 4
        assert not future.done()
        assert waiters.advance(5) == 1
        assert future.result() == 4 and len(waiters) == 0
        assert waiters.committed == 5

    run(scenario)


def test_advance_completes_futures_lowest_offset_first() -> None:
    async def scenario() -> None:
        waiters = CommitWaiters()
        order: list[int] = []
        offsets = (7, 2, 9, 2, 5)  # offset 2 twice: both complete
        futures = [waiters.wait(offset) for offset in offsets]
        for future in futures:
            future.add_done_callback(lambda f: order.append(f.result()))
        assert waiters.advance(6) == 3  # 2, 2, 5
        await settle()
        assert order == [2, 2, 5]
        assert [f.done() for f in futures] == [False, True, False, True, True]
        assert waiters.advance(100) == 2
        await settle()
        assert order == [2, 2, 5, 7, 9]

    run(scenario)


def test_already_committed_offsets_complete_at_once() -> None:
    async def scenario() -> None:
        waiters = CommitWaiters(committed=10)
        future = waiters.wait(9)
        assert future.done() and future.result() == 9
        assert len(waiters) == 0  # never queued
        assert not waiters.wait(10).done()

    run(scenario)


def test_commit_offset_never_moves_back_through_advance() -> None:
    async def scenario() -> None:
        waiters = CommitWaiters()
        waiters.advance(8)
        waiters.advance(3)
        assert waiters.committed == 8
        assert waiters.wait(7).done()

    run(scenario)


def test_cancelled_waiters_are_dropped_without_counting() -> None:
    async def scenario() -> None:
        waiters = CommitWaiters()
        gave_up = waiters.wait(1)
        kept = waiters.wait(2)
        gave_up.cancel()
        assert waiters.advance(3) == 1
        assert kept.result() == 2 and len(waiters) == 0

    run(scenario)


def test_fail_all_fails_every_waiter_and_leaves_none() -> None:
    async def scenario() -> None:
        waiters = CommitWaiters()
        first, second = waiters.wait(1), waiters.wait(5)
        cancelled = waiters.wait(3)
        cancelled.cancel()
        error = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        waiters.fail_all(error)
        assert len(waiters) == 0
        for future in (first, second):
            assert future.exception() is error
        assert cancelled.cancelled()
        # Nothing is left for a later advance to complete.
        assert waiters.advance(10) == 0

    run(scenario)


def test_fail_all_of_unobserved_futures_is_not_an_unhandled_error() -> None:
    """A waiter that gave up (timed out) never looks at its future again; failing it must not
    log "exception was never retrieved" when it is garbage collected."""

    async def scenario() -> list[dict[str, object]]:
        reported: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        waiters = CommitWaiters()
        waiters.wait(1)  # dropped at once
        waiters.fail_all(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        gc.collect()
        await settle()
        return reported

    assert run(scenario) == []


def test_reset_starts_a_new_term_from_the_given_offset() -> None:
    async def scenario() -> None:
        waiters = CommitWaiters()
        waiters.advance(20)
        waiters.reset(12)  # e.g. leadership regained with a lower high watermark
        assert waiters.committed == 12
        assert waiters.wait(11).done()
        pending = waiters.wait(15)
        assert not pending.done()
        assert waiters.advance(16) == 1 and pending.result() == 15
        waiters.reset(30)  # forward too
        assert waiters.wait(29).done()

    run(scenario)


def test_wait_for_commits_returns_when_every_future_completes() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        waiters = CommitWaiters()
        futures = [waiters.wait(1), waiters.wait(3)]
        task = asyncio.ensure_future(wait_for_commits(futures, 30.0, clock))
        await settle()
        assert clock.pending_timers == 1
        waiters.advance(2)
        await settle()
        assert not task.done()  # one future still pending
        waiters.advance(4)
        await asyncio.wait_for(task, SAFETY_TIMEOUT_S)
        assert [f.result() for f in futures] == [1, 3]
        assert clock.pending_timers == 0  # the deadline timer was cancelled

    run(scenario)


def test_wait_for_commits_times_out_on_the_clock_without_sleeping() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        waiters = CommitWaiters()
        future = waiters.wait(0)
        task = asyncio.ensure_future(wait_for_commits([future], 2.0, clock))
        await settle()
        clock.advance(1999)
        await settle()
        assert not task.done()
        clock.advance(1)
        await asyncio.wait_for(task, SAFETY_TIMEOUT_S)
        # The caller decides: the shared future is neither cancelled nor completed.
        assert not future.done()
        assert len(waiters) == 1
        assert clock.pending_timers == 0

    run(scenario)


def test_wait_for_commits_never_raises_for_failed_futures() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        waiters = CommitWaiters()
        futures = [waiters.wait(1), waiters.wait(2)]
        task = asyncio.ensure_future(wait_for_commits(futures, 10.0, clock))
        await settle()
        error = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        waiters.fail_all(error)
        await asyncio.wait_for(task, SAFETY_TIMEOUT_S)
        assert all(f.exception() is error for f in futures)

    run(scenario)


@pytest.mark.parametrize("timeout_s", [0.0, -1.0])
def test_wait_for_commits_with_no_time_returns_at_once(timeout_s: float) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        future = CommitWaiters().wait(0)
        await asyncio.wait_for(wait_for_commits([future], timeout_s, clock), SAFETY_TIMEOUT_S)
        assert not future.done() and clock.pending_timers == 0

    run(scenario)


def test_wait_for_commits_of_done_futures_schedules_no_timer() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        waiters = CommitWaiters(committed=5)
        await wait_for_commits([waiters.wait(1), waiters.wait(2)], 10.0, clock)
        await wait_for_commits([], 10.0, clock)
        assert clock.pending_timers == 0

    run(scenario)


def test_a_timed_out_wait_does_not_stop_others_sharing_the_future() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        waiters = CommitWaiters()
        shared = waiters.wait(0)
        short = asyncio.ensure_future(wait_for_commits([shared], 1.0, clock))
        long = asyncio.ensure_future(wait_for_commits([shared], 60.0, clock))
        await settle()
        clock.advance(1000)
        await asyncio.wait_for(short, SAFETY_TIMEOUT_S)
        assert not long.done() and not shared.cancelled()
        waiters.advance(1)
        await asyncio.wait_for(long, SAFETY_TIMEOUT_S)
        assert shared.result() == 0

    run(scenario)
