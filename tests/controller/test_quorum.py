"""The metadata quorum's commit boundary: appends are visible (image, listeners, high watermark)
only once committed, i.e. fsynced with a single voter; fsyncs run off the event loop and are
shared by appends that wait together (group commit); a restart replays everything.

A lone voter that was loaded but not started starts on its first append: Raft makes it leader
of a new epoch, whose LeaderChange control record takes the next offset (offset 0 of an empty
log), so the first append's records come after it."""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.clock import ManualClock
from odradek.controller.quorum import METADATA_TOPIC, MetadataQuorum
from odradek.metadata.image import METADATA_VERSION_FEATURE, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import iter_batches
from odradek.raft import RaftConfig
from odradek.raft import messages as raft_messages
from odradek.storage import Log
from odradek.storage.config import LogConfig

WAIT_S = 10.0  # bound on waiting for a condition; tests normally finish far sooner


def open_log(directory: Path) -> Log:
    return Log(directory / f"{METADATA_TOPIC}-0", LogConfig(), had_clean_shutdown=False)


def topic_records(name: str) -> list[Any]:
    topic_id = uuid.uuid4()
    return [m.TopicRecord(name=name, topic_id=topic_id),
            m.PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[1], isr=[1],
                              leader=1, leader_epoch=0, partition_epoch=0)]


class HeldFlush:
    """An injectable flush that waits until released, then really fsyncs; records the end
    offsets it was asked to flush to."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.released = asyncio.Event()
        self.started = asyncio.Event()
        self.calls: list[int] = []

    async def __call__(self, end_offset: int) -> None:
        self.calls.append(end_offset)
        self.started.set()
        await self.released.wait()
        await asyncio.to_thread(self.log.flush, end_offset)

    def release(self) -> None:
        self.released.set()


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0)
    await asyncio.wait_for(poll(), WAIT_S)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def test_append_completes_only_after_the_flush_and_the_image_waits_for_the_commit(tmp_path):
    async def scenario() -> None:
        log = open_log(tmp_path)
        flush = HeldFlush(log)
        quorum = MetadataQuorum(log, node_id=1, flush=flush)
        quorum.load()
        seen: list[MetadataImage] = []
        quorum.listeners.append(seen.append)
        before = quorum.image

        committed = quorum.append(topic_records("orders"))
        await asyncio.wait_for(flush.started.wait(), WAIT_S)
        for _ in range(20):  # let the loop run: nothing may become visible meanwhile
            await asyncio.sleep(0)
        assert not committed.done()
        assert log.log_end_offset == 3  # appended at once (after the LeaderChange)...
        assert quorum.image is before and "orders" not in quorum.image.topics_by_name
        assert seen == [] and quorum.committed_offset == -1 and quorum.high_watermark == 0
        assert log.recovery_point == 0  # ...but not on disk yet
        assert quorum.pending_batches == 1

        flush.release()
        assert await asyncio.wait_for(committed, WAIT_S) == 2
        assert "orders" in quorum.image.topics_by_name
        assert quorum.image.offset == 2
        assert [image.offset for image in seen] == [0, 2] and seen[-1] is quorum.image
        assert quorum.committed_offset == 2 and quorum.high_watermark == 3
        assert log.high_watermark == 3 and log.recovery_point == 3
        assert quorum.pending_batches == 0
        await quorum.close()

    run(scenario)


def test_appends_commit_in_call_order_and_share_a_flush(tmp_path):
    async def scenario() -> None:
        log = open_log(tmp_path)
        flush = HeldFlush(log)
        quorum = MetadataQuorum(log, node_id=1, flush=flush)
        quorum.load()
        published: list[tuple[int, frozenset[str]]] = []
        quorum.listeners.append(
            lambda image: published.append((image.offset, frozenset(image.topics_by_name))))
        completed: list[str] = []

        async def commit(name: str) -> int:
            offset = await quorum.append(topic_records(name))
            completed.append(name)
            return offset

        first = asyncio.ensure_future(commit("a"))
        await asyncio.wait_for(flush.started.wait(), WAIT_S)
        # Appended while the first flush runs: they wait for the next flush, together.
        second = asyncio.ensure_future(commit("b"))
        third = asyncio.ensure_future(commit("c"))
        await asyncio.sleep(0)
        assert log.log_end_offset == 7
        flush.release()
        assert await asyncio.wait_for(asyncio.gather(first, second, third), WAIT_S) == [2, 4, 6]
        assert completed == ["a", "b", "c"]
        assert flush.calls == [3, 7]  # group commit: b and c shared one fsync
        assert published == [(0, frozenset()), (2, frozenset("a")), (4, frozenset("ab")),
                             (6, frozenset("abc"))]
        await quorum.close()

    run(scenario)


def test_default_flush_fsyncs_off_the_event_loop(tmp_path):
    async def scenario() -> None:
        log = open_log(tmp_path)
        flush_threads: list[int] = []
        real_flush = log.flush

        def recording_flush(up_to_offset: int | None = None) -> None:
            flush_threads.append(threading.get_ident())
            real_flush(up_to_offset)

        log.flush = recording_flush  # type: ignore[method-assign]
        quorum = MetadataQuorum(log, node_id=1)
        quorum.load()
        assert await asyncio.wait_for(quorum.append(topic_records("t")), WAIT_S) == 2
        assert flush_threads and threading.get_ident() not in flush_threads
        assert log.recovery_point == 3
        await quorum.close()

    run(scenario)


def test_restart_replays_everything_committed(tmp_path):
    async def first_run() -> MetadataImage:
        quorum = MetadataQuorum(open_log(tmp_path), node_id=1)
        quorum.load()
        await quorum.become_leader()
        await quorum.append([m.FeatureLevelRecord(name=METADATA_VERSION_FEATURE,
                                                  feature_level=20)])
        await quorum.append(topic_records("kept"))
        await quorum.append(topic_records("gone"))
        gone = quorum.image.topics_by_name["gone"].topic_id
        await quorum.append([m.RemoveTopicRecord(topic_id=gone),
                             m.ConfigRecord(resource_type=4, resource_name="",
                                            name="log.retention.ms", value="1000")])
        assert quorum.epoch == 1
        image = quorum.image
        await quorum.close()
        return image

    async def second_run(expected: MetadataImage) -> None:
        log = open_log(tmp_path)
        quorum = MetadataQuorum(log, node_id=1)
        assert quorum.load() == expected  # the LeaderChange control batch included
        assert quorum.committed_offset == log.log_end_offset - 1 == expected.offset
        assert set(quorum.image.topics_by_name) == {"kept"}
        assert quorum.image.metadata_version == 20
        assert quorum.image.broker_config(None) == {"log.retention.ms": "1000"}
        await quorum.become_leader()
        assert quorum.epoch == 2 and quorum.image.epoch == 2
        assert quorum.committed_offset == log.log_end_offset - 1
        await quorum.close()

    expected = asyncio.run(first_run())
    asyncio.run(second_run(expected))


def test_close_lets_pending_commits_finish_then_refuses_appends(tmp_path):
    async def scenario() -> None:
        log = open_log(tmp_path)
        flush = HeldFlush(log)
        quorum = MetadataQuorum(log, node_id=1, flush=flush)
        quorum.load()
        committed = quorum.append(topic_records("t"))
        await asyncio.wait_for(flush.started.wait(), WAIT_S)
        closing = asyncio.ensure_future(quorum.close())
        await asyncio.sleep(0)
        assert not closing.done()
        with pytest.raises(KafkaError) as refused:
            quorum.append(topic_records("late"))
        assert refused.value.code == ErrorCode.NOT_CONTROLLER
        flush.release()
        await asyncio.wait_for(closing, WAIT_S)
        assert committed.result() == 2 and "t" in quorum.image.topics_by_name
        with pytest.raises(KafkaError):  # the log is closed
            log.append_as_leader(b"", leader_epoch=0)

    run(scenario)


def test_a_failed_flush_fails_pending_appends_and_later_ones(tmp_path):
    async def scenario() -> None:
        async def broken_flush(end_offset: int) -> None:
            raise OSError(5, "Input/output error")

        quorum = MetadataQuorum(open_log(tmp_path), node_id=1, flush=broken_flush)
        quorum.load()
        first, second = quorum.append(topic_records("a")), quorum.append(topic_records("b"))
        for future in (first, second):
            with pytest.raises(OSError):
                await asyncio.wait_for(future, WAIT_S)
        assert quorum.image.topics_by_name == {} and quorum.committed_offset == -1
        with pytest.raises(KafkaError) as refused:
            quorum.append(topic_records("c"))
        assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        await quorum.close()

    run(scenario)


def test_a_failing_listener_does_not_hold_back_the_commit(tmp_path):
    async def scenario() -> None:
        quorum = MetadataQuorum(open_log(tmp_path), node_id=1)
        quorum.load()
        later: list[int] = []

        def broken(image: MetadataImage) -> None:
            raise RuntimeError("listener bug")

        quorum.listeners += [broken, lambda image: later.append(image.offset)]
        assert await asyncio.wait_for(quorum.append(topic_records("t")), WAIT_S) == 2
        assert later == [0, 2] and "t" in quorum.image.topics_by_name
        await quorum.close()

    run(scenario)


def test_an_empty_append_waits_for_what_was_appended_before(tmp_path):
    async def scenario() -> None:
        log = open_log(tmp_path)
        flush = HeldFlush(log)
        quorum = MetadataQuorum(log, node_id=1, flush=flush)
        quorum.load()
        idle = quorum.append([])
        assert idle.done() and idle.result() == -1
        committed = quorum.append(topic_records("t"))
        barrier = quorum.append([])
        await asyncio.sleep(0)
        assert not barrier.done()
        flush.release()
        assert await asyncio.wait_for(barrier, WAIT_S) == 2 and committed.done()
        await quorum.close()

    run(scenario)


def test_batches_carry_the_injected_clock_time(tmp_path):
    async def scenario() -> None:
        log = open_log(tmp_path)
        clock = ManualClock(start_ms=1_600_000_000_000)
        quorum = MetadataQuorum(log, node_id=1, clock=clock)
        quorum.load()
        await quorum.become_leader()
        clock.advance(5_000)
        await quorum.append(topic_records("t"))
        buf = log.read(0, 1 << 20, max_offset=None, min_one_batch=True).read_bytes()
        assert [h.max_timestamp for _, h in iter_batches(buf)] == [
            1_600_000_000_000, 1_600_000_005_000]
        await quorum.close()

    run(scenario)


async def three_voter_leader(log: Log) -> MetadataQuorum:
    """Node 1 of voters {1, 2, 3}, elected by voters that grant every vote and acknowledge
    the epoch but never fetch: it leads, and nothing it appends commits by itself."""

    async def send(destination: int, request: m.Message) -> m.Message:
        if isinstance(request, m.VoteRequest):
            epoch = request.topics[0].partitions[0].replica_epoch
            return raft_messages.vote_response(ErrorCode.NONE, None, epoch, True)
        if isinstance(request, m.BeginQuorumEpochRequest):
            epoch = request.topics[0].partitions[0].leader_epoch
            return raft_messages.begin_epoch_response(ErrorCode.NONE, 1, epoch)
        if isinstance(request, m.EndQuorumEpochRequest):
            epoch = request.topics[0].partitions[0].leader_epoch
            return raft_messages.end_epoch_response(ErrorCode.NONE, 1, epoch)
        raise ConnectionError("not reachable")

    quorum = MetadataQuorum(log, node_id=1, voters=[1, 2, 3], send=send,
                            raft_config=RaftConfig(election_timeout_ms=10))
    quorum.load()
    quorum.start()
    await until(lambda: quorum.is_active)
    return quorum


def test_the_commit_index_alone_decides_what_is_visible(tmp_path):
    """With three voters the leader's own fsync commits nothing: the commit index is the offset
    a majority has, here the leader's and follower 2's fetch position."""
    async def scenario() -> None:
        log = open_log(tmp_path)
        quorum = await three_voter_leader(log)
        epoch = quorum.epoch
        offsets: list[int] = []
        quorum.listeners.append(lambda image: offsets.append(image.offset))
        first, second = quorum.append(topic_records("a")), quorum.append(topic_records("b"))
        await until(lambda: log.recovery_point == 5)  # on our disk, not yet on a majority's
        await asyncio.sleep(0.05)
        assert not first.done() and quorum.image.topics_by_name == {}

        async def follower_fetch(offset: int) -> None:
            response = await quorum.handle_request(2, raft_messages.fetch_request(
                "", 2, epoch, offset, epoch, 0, 1 << 20))
            assert response.responses[0].partitions[0].error_code == 0

        await follower_fetch(3)  # a majority has the LeaderChange and the first batch
        await asyncio.wait_for(first, WAIT_S)
        assert not second.done()
        assert set(quorum.image.topics_by_name) == {"a"} and quorum.high_watermark == 3
        await follower_fetch(1)  # the commit index never goes back
        await asyncio.sleep(0.01)
        assert quorum.committed_offset == 2
        await follower_fetch(5)
        assert await asyncio.wait_for(second, WAIT_S) == 4 and offsets == [0, 2, 4]
        assert set(quorum.image.topics_by_name) == {"a", "b"}
        await quorum.close()

    run(scenario)


def test_a_voter_that_is_not_the_leader_refuses_appends(tmp_path):
    async def scenario() -> None:
        quorum = MetadataQuorum(open_log(tmp_path), node_id=1, voters=[1, 2, 3])
        quorum.load()
        quorum.start()
        with pytest.raises(KafkaError) as refused:
            quorum.append(topic_records("t"))
        assert refused.value.code == ErrorCode.NOT_CONTROLLER
        await quorum.close()

    run(scenario)


def test_commit_latency_and_poll_idle_ratio_are_kafkas_raft_metrics(tmp_path):
    """raft-metrics commit-latency-avg/-max: from the append to its commit, on the injected
    clock; poll-idle-ratio-avg: a share, recorded per driver cycle."""
    async def scenario() -> None:
        log = open_log(tmp_path)
        flush = HeldFlush(log)
        clock = ManualClock()
        quorum = MetadataQuorum(log, node_id=1, flush=flush, clock=clock)
        quorum.load()
        now = clock.time_ms()
        assert math.isnan(quorum.commit_latency.max(now))  # nothing committed yet

        committed = quorum.append(topic_records("orders"))
        await asyncio.wait_for(flush.started.wait(), WAIT_S)
        clock.advance(25)
        flush.release()
        await asyncio.wait_for(committed, WAIT_S)
        now = clock.time_ms()
        assert quorum.commit_latency.avg(now) == quorum.commit_latency.max(now) == 25
        assert 0 <= quorum.poll_idle_ratio.avg(now) <= 1
        await quorum.close()

    run(scenario)
