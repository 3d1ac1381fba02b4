"""The coordinator runtime: ownership of partitions, and writes applied only once committed,
in append order, with append errors mapped to coordinator errors."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest
from group_harness import run, settle

from odradek.clock import ManualClock
from odradek.coordinator.runtime import CoordinatorRuntime, append_error
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import Compression, iter_batches, iter_records


class HandCommittedLog:
    """An appender whose batches commit (or fail) only when the test says so."""

    def __init__(self) -> None:
        self.appended: list[tuple[int, bytes]] = []
        self._commits: list[asyncio.Future[None]] = []
        self.append_error: BaseException | None = None

    async def append(self, partition: int, batch: bytes) -> None:
        if self.append_error is not None:
            raise self.append_error
        self.appended.append((partition, batch))
        committed = asyncio.get_running_loop().create_future()
        self._commits.append(committed)
        await committed

    def commit(self, index: int) -> None:
        self._commits[index].set_result(None)

    def fail(self, index: int, error: ErrorCode) -> None:
        self._commits[index].set_exception(KafkaError(error))

    def records(self, index: int) -> list[tuple[bytes | None, bytes | None]]:
        data = self.appended[index][1]
        return [(r.key, r.value) for pos, header in iter_batches(data)
                for r in iter_records(data, pos, header)]


def owning(partitions: list[int], clock: ManualClock | None = None,
           ) -> tuple[CoordinatorRuntime, HandCommittedLog]:
    log = HandCommittedLog()
    runtime = CoordinatorRuntime(log.append, clock=clock or ManualClock())
    for partition in partitions:
        assert runtime.complete_loading(partition, runtime.start_loading(partition))
    return runtime, log


def error_of(future: asyncio.Future[Any]) -> ErrorCode | None:
    """The coordinator error a finished write failed with; None if it succeeded."""
    assert future.done()
    error = future.exception()
    if error is None:
        return None
    assert isinstance(error, KafkaError)
    return error.code


def test_apply_runs_only_after_the_commit():
    async def scenario():
        clock = ManualClock(start_ms=1_234_567)
        runtime, log = owning([0], clock)
        runtime.compression = Compression.GZIP
        applied: list[str] = []
        write = runtime.write(0, [(b"k", b"v"), (b"gone", None)],
                              lambda: applied.append("k") or "result")
        await settle()
        # Appended, as one batch stamped with the clock's time, but not committed: not applied.
        assert [partition for partition, _ in log.appended] == [0]
        assert log.records(0) == [(b"k", b"v"), (b"gone", None)]
        (_, header), = iter_batches(log.appended[0][1])
        assert header.max_timestamp == 1_234_567 and header.compression == Compression.GZIP
        assert applied == [] and not write.done() and runtime.pending_writes == 1
        log.commit(0)
        assert await write == "result"
        assert applied == ["k"] and runtime.pending_writes == 0

    run(scenario())


@pytest.mark.parametrize("append_failure, expected", [
    (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),  # commit timed out
    (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
    (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
    (ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
    (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_SERVER_ERROR),
])
def test_a_failed_commit_applies_nothing_and_maps_the_error(append_failure, expected):
    async def scenario():
        runtime, log = owning([0])
        applied: list[int] = []
        failures: list[ErrorCode] = []
        write = runtime.write(0, [(b"k", b"v")], lambda: applied.append(1),
                              on_failure=failures.append)
        await settle()
        log.fail(0, append_failure)
        with pytest.raises(KafkaError) as raised:
            await write
        assert raised.value.code == expected
        assert applied == [] and failures == [expected]

    run(scenario())


def test_failed_appends_and_custom_error_mapping():
    async def scenario():
        runtime, log = owning([0])
        failures: list[ErrorCode] = []
        # The append itself fails (before any commit wait).
        log.append_error = KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE)
        for_offsets = partial(append_error, for_offsets=True)
        write = runtime.write(0, [(b"k", b"v")], lambda: pytest.fail("applied"),
                              on_failure=failures.append, map_error=for_offsets)
        await asyncio.wait([write])
        assert error_of(write) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        # An appender that breaks is an unknown server error, not a hang.
        log.append_error = RuntimeError("bug")
        write = runtime.write(0, [(b"k", b"v")], lambda: pytest.fail("applied"),
                              on_failure=failures.append)
        await asyncio.wait([write])
        assert error_of(write) == ErrorCode.UNKNOWN_SERVER_ERROR
        assert failures == [ErrorCode.INVALID_COMMIT_OFFSET_SIZE, ErrorCode.UNKNOWN_SERVER_ERROR]
        assert log.appended == []

    run(scenario())


def test_unload_between_append_and_commit_drops_the_apply():
    async def scenario():
        runtime, log = owning([0, 1])
        applied: list[str] = []
        failures: list[ErrorCode] = []
        dropped = runtime.write(0, [(b"a", b"1")], lambda: applied.append("a"),
                                on_failure=failures.append)
        other = runtime.write(1, [(b"b", b"1")], lambda: applied.append("b"))
        await settle()
        runtime.unload(0)
        # The waiter learns at once; on_failure ran.
        assert error_of(dropped) == ErrorCode.NOT_COORDINATOR
        assert failures == [ErrorCode.NOT_COORDINATOR]
        assert runtime.error_for(0) == ErrorCode.NOT_COORDINATOR
        # The commit arriving later changes nothing; the other partition is unaffected.
        log.commit(0)
        log.commit(1)
        await other
        assert applied == ["b"] and failures == [ErrorCode.NOT_COORDINATOR]

    run(scenario())


def test_reload_between_append_and_commit_drops_the_apply():
    async def scenario():
        runtime, log = owning([0])
        applied: list[str] = []
        stale = runtime.write(0, [(b"a", b"1")], lambda: applied.append("stale"))
        await settle()
        # The partition is loaded again (a new leader epoch): the old write is not applied to
        # the state that is rebuilt from the log.
        generation = runtime.start_loading(0)
        assert error_of(stale) == ErrorCode.NOT_COORDINATOR
        assert runtime.error_for(0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert runtime.complete_loading(0, generation)
        fresh = runtime.write(0, [(b"a", b"2")], lambda: applied.append("fresh"))
        await settle()
        log.commit(0)
        log.commit(1)
        await fresh
        assert applied == ["fresh"]

    run(scenario())


def test_applies_happen_in_append_order_whatever_order_commits_arrive_in():
    async def scenario():
        runtime, log = owning([0])
        applied: list[int] = []
        failed: list[int] = []
        writes = [runtime.write(0, [(b"k%d" % i, b"v")], partial(applied.append, i),
                                on_failure=lambda error, i=i: failed.append(i))
                  for i in range(4)]
        await settle()
        assert [log.records(i) for i in range(4)] == [[(b"k%d" % i, b"v")] for i in range(4)]
        log.commit(2)
        await settle()
        assert applied == [] and not any(write.done() for write in writes)
        log.commit(0)
        await settle()
        assert applied == [0]  # 1 is still pending, so 2 waits behind it
        log.commit(3)
        log.fail(1, ErrorCode.REQUEST_TIMED_OUT)
        await asyncio.wait(writes)
        assert applied == [0, 2, 3] and failed == [1]
        assert [error_of(write) for write in writes] == [
            None, ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None]

    run(scenario())


def test_writes_to_partitions_not_owned_fail_at_once():
    async def scenario():
        runtime, log = owning([])
        runtime.start_loading(3)
        failures: list[ErrorCode] = []
        loading = runtime.write(3, [(b"k", b"v")], lambda: pytest.fail("applied"),
                                on_failure=failures.append)
        elsewhere = runtime.write(4, [(b"k", b"v")], lambda: pytest.fail("applied"),
                                  on_failure=failures.append)
        assert failures == [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR]
        assert error_of(loading) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert error_of(elsewhere) == ErrorCode.NOT_COORDINATOR
        await settle()
        assert log.appended == []

    run(scenario())


def test_a_cancelled_waiter_does_not_stop_the_apply():
    async def scenario():
        runtime, log = owning([0])
        applied: list[str] = []
        write = runtime.write(0, [(b"k", b"v")], lambda: applied.append("k"))

        async def client() -> None:
            await write

        waiter = asyncio.create_task(client())
        await settle()
        waiter.cancel()  # the client went away
        await asyncio.wait([waiter])
        log.commit(0)
        await settle()
        assert applied == ["k"]  # the record is in the log: the state must show it

    run(scenario())


def test_a_failing_apply_fails_its_write_only():
    async def scenario():
        runtime, log = owning([0])

        def broken() -> None:
            raise ValueError("bad state")

        first = runtime.write(0, [(b"a", b"1")], broken)
        second = runtime.write(0, [(b"b", b"1")], lambda: "ok")
        await settle()
        log.commit(0)
        log.commit(1)
        assert await second == "ok"
        assert isinstance(first.exception(), ValueError)

    run(scenario())


def test_load_installs_only_if_still_current():
    async def scenario():
        runtime, _ = owning([])
        installed: list[str] = []
        # A load that completes: replayed off the loop, installed, then owned.
        result = await runtime.load(0, lambda: "state", lambda s: installed.append(s) or 7)
        assert result == 7 and installed == ["state"] and runtime.error_for(0) == ErrorCode.NONE
        # A load superseded by an unload installs nothing.
        load = asyncio.create_task(runtime.load(1, lambda: "old", installed.append))
        await asyncio.sleep(0)
        assert runtime.error_for(1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert runtime.is_loading
        runtime.unload(1)
        assert await load is None
        assert installed == ["state"] and runtime.error_for(1) == ErrorCode.NOT_COORDINATOR
        # A replay that fails leaves the partition neither loading nor owned.

        def broken() -> str:
            raise OSError("disk")

        with pytest.raises(OSError):
            await runtime.load(2, broken, installed.append)
        assert runtime.error_for(2) == ErrorCode.NOT_COORDINATOR and not runtime.is_loading

    run(scenario())


def test_close_fails_what_is_pending():
    async def scenario():
        runtime, _log = owning([0])
        write = runtime.write(0, [(b"k", b"v")], lambda: pytest.fail("applied"))
        await settle()
        await runtime.close()
        assert error_of(write) == ErrorCode.NOT_COORDINATOR
        assert runtime.owned == {} and runtime.pending_writes == 0

    run(scenario())


def test_actions_run_behind_the_writes_in_flight_and_see_their_offsets():
    async def scenario():
        runtime, log = owning([0])
        order: list[Any] = []
        first = runtime.write(0, [(b"a", b"1")], order.append, with_offset=True,
                              producer_id=12, producer_epoch=3)
        await settle()
        (_, header), = iter_batches(log.appended[0][1])
        assert (header.producer_id, header.producer_epoch, header.base_sequence,
                header.is_transactional) == (12, 3, 0, True)
        action = runtime.run_after_writes(0, lambda: order.append("action") or "done")
        await settle()
        assert order == [] and not action.done()
        log.commit(0)  # this appender does not know offsets: apply gets None
        assert await action == "done"
        assert first.done() and order == [None, "action"]
        # Nothing in flight: at once. Not owned: the ownership error, and nothing runs.
        assert runtime.run_after_writes(0, lambda: "now").result() == "now"
        unowned = runtime.run_after_writes(1, lambda: order.append("never"))
        assert error_of(unowned) == ErrorCode.NOT_COORDINATOR and order[-1] == "action"

    run(scenario())
