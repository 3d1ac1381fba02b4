"""An in-process group coordinator over a real `__consumer_offsets` storage log, and a few
client-side helpers to drive it the way consumers do.

Time is a manual clock: the coordinator's timers (sessions, rebalance timeouts, delays) fire
only when a test advances it, except those due at once (a zero delay), which fire on the
event loop's next round as with the system clock. Appends commit at once unless the test holds the commits
(`hold_commits`) and releases them by hand, or makes appends fail (`append_error`)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from odradek.clock import ManualClock, TimerHandle
from odradek.coordinator import (
    GroupConfig,
    GroupCoordinator,
    GroupMetadataManager,
    JoinRequest,
    JoinResult,
    OffsetAndMetadata,
    SyncResult,
    TopicPartition,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.storage import AppendOrigin, Log, LogConfig

T = TypeVar("T")

TEST_CONFIG = GroupConfig(min_session_timeout_ms=10, max_session_timeout_ms=60_000,
                          initial_rebalance_delay_ms=0,
                          offsets_retention_check_interval_ms=3_600_000)


def subscription(*topics: str) -> bytes:
    return m.encode_versioned(m.ConsumerProtocolSubscription(topics=list(topics)), 1)


def assignment(*partitions: tuple[str, int]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return m.encode_versioned(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=p)
        for t, p in by_topic.items()]), 1)


def run(coroutine: Awaitable[T], timeout: float = 20) -> T:
    """Runs a test scenario on a fresh event loop, bounded by `timeout` seconds."""
    async def bounded() -> T:
        return await asyncio.wait_for(coroutine, timeout)

    return asyncio.run(bounded())


async def settle(rounds: int = 20) -> None:
    """Lets the tasks and callbacks that are ready run (no time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def eventually(condition: Any, timeout: float = 5.0, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


class LoopClock(ManualClock):
    """A ManualClock on which time stands still but the event loop does not: a timer with no
    delay (a zero initial rebalance delay, the rebalance timeout of a group left with no
    members) fires on the loop's next round, as it does with the system clock."""

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        if delay_s <= 0:
            return asyncio.get_running_loop().call_soon(callback, *args)
        return super().call_later(delay_s, callback, *args)


class Harness:
    """A coordinator leading `partitions` offsets partitions, each a real storage Log."""

    def __init__(self, directory: Path, config: GroupConfig = TEST_CONFIG,
                 partitions: int = 1, owned: Iterable[int] | None = None) -> None:
        self.directory = directory
        self.config = config
        self.partitions = partitions
        self.owned = list(range(partitions)) if owned is None else list(owned)
        self.logs = {index: Log(directory / f"__consumer_offsets-{index}", LogConfig())
                     for index in range(partitions)}
        self.clock = LoopClock()
        #: set: appends fail with this error (as the replica manager's would)
        self.append_error: ErrorCode | None = None
        #: set: appended batches wait for `release_commits` before they count as committed
        self.hold_commits = False
        self._held: list[asyncio.Future[None]] = []
        self.manager = GroupMetadataManager(self._append, num_partitions=lambda: partitions,
                                            clock=self.clock)
        self.coordinator = GroupCoordinator(config, self.manager, self.clock)

    def time_ms(self) -> int:
        return self.clock.time_ms()

    async def _append(self, partition: int, records: bytes) -> int:
        if self.append_error is not None:
            raise KafkaError(self.append_error)
        log = self.logs[partition]
        info = log.append_as_leader(records, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
        end = log.log_end_offset
        if self.hold_commits:
            released = asyncio.get_running_loop().create_future()
            self._held.append(released)
            await released
        log.maybe_increment_high_watermark(end)
        return info.first_offset

    @property
    def held_commits(self) -> int:
        return len(self._held)

    def release_commits(self, error: ErrorCode | None = None) -> int:
        """Commits the held batches (or fails them with `error`, as a commit timeout would);
        returns how many there were."""
        held, self._held = self._held, []
        for released in held:
            if error is None:
                released.set_result(None)
            else:
                released.set_exception(KafkaError(error))
        return len(held)

    async def advance(self, ms: float) -> None:
        """Moves the clock (firing the timers due) and lets what they started run."""
        self.clock.advance(ms)
        await settle()

    async def advance_until(self, awaitable: Awaitable[T], step_ms: float = 10,
                            limit_ms: float = 600_000) -> T:
        """Advances the clock by `step_ms` at a time until `awaitable` completes."""
        task = asyncio.ensure_future(awaitable)
        advanced = 0.0
        while True:
            await settle()
            if task.done():
                return task.result()
            if advanced >= limit_ms:
                task.cancel()
                raise TimeoutError(f"not done after {limit_ms} ms of clock time")
            self.clock.advance(step_ms)
            advanced += step_ms

    async def start(self) -> Harness:
        self.coordinator.start()
        await asyncio.gather(*(self.coordinator.elect(index, self.logs[index])
                               for index in self.owned))
        return self

    async def close(self) -> None:
        await self.coordinator.close()
        for log in self.logs.values():
            log.close()

    # -- what a consumer sends
    async def join(self, group: str = "g", member_id: str = "", *,
                   instance: str | None = None, topics: Iterable[str] = ("t",),
                   protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000,
                   rebalance_ms: int = 5_000, client_id: str = "client",
                   v9: bool = False) -> JoinResult:
        return await self.coordinator.join_group(JoinRequest(
            group_id=group, member_id=member_id, group_instance_id=instance,
            client_id=client_id, client_host="/127.0.0.1", session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms, protocol_type="consumer",
            protocols=protocols if protocols is not None else [("range",
                                                                 subscription(*topics))],
            supports_skip_assignment=v9))

    async def join_new(self, group: str = "g", **kwargs: Any) -> JoinResult:
        """JoinGroup as a v4+ client does: get a member id first, then join with it."""
        result = await self.join(group, **kwargs)
        if result.error == ErrorCode.MEMBER_ID_REQUIRED:
            result = await self.join(group, result.member_id, **kwargs)
        return result

    async def sync(self, joined: JoinResult, group: str = "g",
                   assignments: dict[str, bytes] | None = None,
                   instance: str | None = None) -> SyncResult:
        return await self.coordinator.sync_group(group, joined.generation_id, joined.member_id,
                                                 instance, None, None, assignments or {})

    def heartbeat(self, joined: JoinResult, group: str = "g",
                  instance: str | None = None) -> ErrorCode:
        return self.coordinator.heartbeat(group, joined.member_id, instance,
                                          joined.generation_id)

    async def commit(self, group: str, offsets: dict[tuple[str, int], int], *,
                     member_id: str = "", generation: int = -1, instance: str | None = None,
                     metadata: str = "") -> dict[TopicPartition, ErrorCode]:
        now = self.time_ms()
        return await self.coordinator.commit_offsets(group, member_id, instance, generation, {
            TopicPartition(*tp): OffsetAndMetadata(offset, metadata=metadata,
                                                   commit_timestamp=now)
            for tp, offset in offsets.items()})

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        error, offsets = self.coordinator.fetch_offsets(group, None)
        assert error == ErrorCode.NONE
        return {tuple(tp): o.offset for tp, o in offsets.items() if o is not None}

    def state(self, group: str = "g") -> str:
        return self.coordinator.describe_group(group)[1].state


def with_generation(result: JoinResult, generation: int) -> JoinResult:
    return dataclasses.replace(result, generation_id=generation)
