"""The replica manager against a real storage LogManager and metadata images built by replaying
metadata records: partitions follow the image, appends wait for the high watermark (the commit
boundary), and reads, offsets and log dirs go through it. Time is a ManualClock: no sleeping."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from odradek.clock import ManualClock
from odradek.metadata.image import (
    EMPTY_IMAGE,
    LEADER_NO_CHANGE,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    MetadataDelta,
    MetadataImage,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import BatchHeader, build_batch, iter_batches
from odradek.server.quotas import LEADER_RATE, LEADER_REPLICAS, ReplicationQuota
from odradek.server.replica_manager import (
    ACKS_ALL,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    ClientMetadata,
    IsrChangeStats,
    Partition,
    PendingAppend,
    ReplicaManager,
)
from odradek.server.replica_selector import RackAwareReplicaSelector
from odradek.storage import EARLIEST_TIMESTAMP, LogConfig, LogManager
from odradek.storage.log import FetchIsolation

T = TypeVar("T")

LEADER = 1  # this broker
FOLLOWER = 2
OTHER = 3
TOPIC = "events"
SAFETY_TIMEOUT_S = 5.0  # bounds awaiting a task that must already be done


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]


def in_event_loop(test: Callable[..., None]) -> Callable[..., None]:
    """Runs a synchronous test body inside a running event loop: appends that wait for a
    follower create their commit futures on it."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def body() -> None:
            test(*args, **kwargs)

        asyncio.run(body())

    return wrapper


def follower_fetched(partition: Partition, replica: int, fetch_offset: int, now_ms: int) -> bool:
    """A follower's fetch from `fetch_offset` as the leader records it; whether the high
    watermark moved."""
    moved, _expansion = partition.update_follower_fetch_state(
        replica, fetch_offset, 0, partition.log.log_end_offset, -1, now_ms)
    return moved


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


class Cluster:
    """A ReplicaManager for broker LEADER fed by images built by replaying metadata records."""

    def __init__(self, log_dir: Path) -> None:
        self.clock = ManualClock()
        self.log_manager = LogManager([log_dir], LogConfig())
        self.replica_manager = ReplicaManager(LEADER, self.log_manager, LogConfig(),
                                              clock=self.clock)
        self.image: MetadataImage = EMPTY_IMAGE
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.replay(*(m.RegisterBrokerRecord(broker_id=broker, incarnation_id=uuid.uuid4(),
                                             broker_epoch=broker, end_points=[])
                      for broker in (LEADER, FOLLOWER, OTHER)))

    def replay(self, *records: Any) -> MetadataImage:
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        self.image = delta.apply()
        self.replica_manager.apply_image(self.image)
        return self.image

    def create_topic(self, name: str = TOPIC, *, partitions: int = 1,
                     replicas: list[int] | None = None, isr: list[int] | None = None,
                     leader: int = LEADER, configs: dict[str, str] | None = None) -> None:
        topic_id = uuid.uuid4()
        self.topic_ids[name] = topic_id
        replicas = replicas or [LEADER]
        records: list[Any] = [m.TopicRecord(name=name, topic_id=topic_id)]
        records += [m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name=name, name=key,
                                   value=value) for key, value in (configs or {}).items()]
        records += [m.PartitionRecord(partition_id=index, topic_id=topic_id, replicas=replicas,
                                      isr=isr if isr is not None else list(replicas),
                                      leader=leader, leader_epoch=0, partition_epoch=0)
                    for index in range(partitions)]
        self.replay(*records)

    def change_partition(self, name: str = TOPIC, index: int = 0, *,
                         isr: list[int] | None = None, leader: int = LEADER_NO_CHANGE) -> None:
        self.replay(m.PartitionChangeRecord(partition_id=index, topic_id=self.topic_ids[name],
                                            isr=isr, leader=leader))

    def set_config(self, name: str, key: str, value: str | None) -> None:
        self.replay(m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name=name, name=key,
                                   value=value))

    def partition(self, name: str = TOPIC, index: int = 0) -> Partition:
        return self.replica_manager.partitions[(name, index)]

    def records(self, count: int = 1, *, timestamps: list[int] | None = None,
                **options: Any) -> bytes:
        now = self.clock.time_ms()
        stamps = timestamps or [now] * count
        return build_batch([(ts, b"k%d" % i, b"v%d" % i) for i, ts in enumerate(stamps)],
                           **options)

    def append(self, count: int = 1, acks: int = ACKS_ALL, name: str = TOPIC, index: int = 0,
               **options: Any) -> PendingAppend:
        return self.replica_manager.append(name, index, self.records(count, **options), acks)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path / "logs")
    yield cluster
    cluster.replica_manager.shutdown()
    cluster.log_manager.close()


def headers_of(data: bytes) -> list[BatchHeader]:
    return [header for _, header in iter_batches(data)]


# -- following the image -----------------------------------------------------------------------
def test_apply_image_creates_the_partitions_this_broker_hosts(cluster: Cluster) -> None:
    cluster.create_topic(partitions=2)
    cluster.create_topic("elsewhere", replicas=[FOLLOWER, OTHER], leader=FOLLOWER)
    rm = cluster.replica_manager
    assert set(rm.partitions) == {(TOPIC, 0), (TOPIC, 1)}
    partition = cluster.partition()
    assert partition.is_leader and partition.leader_epoch == 0
    assert partition.topic_id == cluster.topic_ids[TOPIC]
    assert cluster.log_manager.get_log(TOPIC, 1) is cluster.partition(index=1).log
    assert partition.log.leader_epoch_cache.entries == [(0, 0)]
    assert rm.by_topic_id[cluster.topic_ids["elsewhere"]] == "elsewhere"
    assert rm.get_partition("elsewhere", 0) == (None, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert rm.get_partition("nope", 0) == (None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert rm.get_partition(TOPIC, 7) == (None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert [p.key for p in rm.partitions_of([TOPIC, "elsewhere"])] == [(TOPIC, 0), (TOPIC, 1)]


def test_a_follower_replica_is_hosted_but_not_led(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[FOLLOWER, LEADER], leader=FOLLOWER)
    rm = cluster.replica_manager
    partition = cluster.partition()
    assert not partition.is_leader and partition.leader == FOLLOWER
    assert rm.leader_partition(TOPIC, 0) == (None, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with pytest.raises(KafkaError) as excinfo:
        cluster.append()
    assert excinfo.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_removed_topics_lose_their_partitions_and_logs(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        pending = cluster.append()
        assert pending.committed is not None and not pending.committed.done()
        cluster.replay(m.RemoveTopicRecord(topic_id=cluster.topic_ids[TOPIC]))
        assert pending.outcome() == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert cluster.replica_manager.partitions == {}
        assert cluster.log_manager.get_log(TOPIC, 0) is None
        assert cluster.replica_manager.get_partition(TOPIC, 0) == (
            None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    run(scenario)


def test_a_partition_moved_to_other_brokers_is_dropped(cluster: Cluster) -> None:
    cluster.create_topic(partitions=2)
    cluster.replay(m.PartitionChangeRecord(partition_id=1, topic_id=cluster.topic_ids[TOPIC],
                                           replicas=[FOLLOWER], isr=[FOLLOWER],
                                           leader=FOLLOWER))
    assert set(cluster.replica_manager.partitions) == {(TOPIC, 0)}
    assert cluster.log_manager.get_log(TOPIC, 1) is None


def test_dynamic_topic_config_reaches_the_log(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER], isr=[LEADER])
    assert cluster.partition().min_insync_replicas == 1
    cluster.set_config(TOPIC, "min.insync.replicas", "2")
    assert cluster.partition().min_insync_replicas == 2
    cluster.set_config(TOPIC, "min.insync.replicas", None)
    assert cluster.partition().min_insync_replicas == 1


# -- the commit boundary -----------------------------------------------------------------------
def test_acks_all_on_a_single_replica_isr_is_committed_at_once(cluster: Cluster) -> None:
    cluster.create_topic()

    async def scenario() -> None:
        pending = cluster.append(3)
        assert (pending.result.first_offset, pending.result.last_offset) == (0, 2)
        assert pending.committed is None or pending.committed.done()
        assert pending.outcome() == ErrorCode.NONE
        assert cluster.partition().log.high_watermark == 3
        result = await cluster.replica_manager.append_and_wait(
            TOPIC, 0, cluster.records(2), timeout_ms=1000)
        assert (result.first_offset, result.last_offset) == (3, 4)

    run(scenario)


def test_with_a_follower_in_the_isr_the_commit_waits_for_its_fetch(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        partition = cluster.partition()
        assert partition.isr == (LEADER, FOLLOWER) and set(partition.followers) == {FOLLOWER}
        first = cluster.append(3)  # offsets 0..2
        second = cluster.append(2)  # offsets 3..4
        assert first.committed is not None and second.committed is not None
        assert partition.log.high_watermark == 0
        now = cluster.clock.time_ms()
        assert follower_fetched(partition, FOLLOWER, 2, now)  # has 0..1
        assert partition.log.high_watermark == 2
        await settle()
        assert not first.committed.done()
        assert follower_fetched(partition, FOLLOWER, 3, now)
        await settle()
        assert first.committed.result() == 2 and first.outcome() == ErrorCode.NONE
        assert not second.committed.done()
        assert not follower_fetched(partition, FOLLOWER, 3, now)  # no progress
        follower_fetched(partition, FOLLOWER, 5, now)
        assert second.outcome() == ErrorCode.NONE
        assert partition.followers[FOLLOWER].last_fetch_ms == now
        with pytest.raises(KafkaError) as excinfo:
            follower_fetched(partition, OTHER, 5, now)
        assert excinfo.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(scenario)


def test_wait_for_commit_completes_when_the_follower_catches_up(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        pending = cluster.append(1)
        waiting = asyncio.ensure_future(
            cluster.replica_manager.wait_for_commit([pending], timeout_ms=30_000))
        await settle()
        assert not waiting.done()
        follower_fetched(cluster.partition(), FOLLOWER, 1, cluster.clock.time_ms())
        await asyncio.wait_for(waiting, SAFETY_TIMEOUT_S)
        assert pending.outcome() == ErrorCode.NONE
        assert cluster.clock.pending_timers == 0

    run(scenario)


def test_wait_for_commit_times_out_with_request_timed_out(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        rm = cluster.replica_manager
        pending = cluster.append(1)
        waiting = asyncio.ensure_future(rm.wait_for_commit([pending], timeout_ms=1500))
        await settle()
        cluster.clock.advance(1499)
        await settle()
        assert not waiting.done()
        cluster.clock.advance(1)
        await asyncio.wait_for(waiting, SAFETY_TIMEOUT_S)
        assert pending.outcome() == ErrorCode.REQUEST_TIMED_OUT
        # The coordinators' path raises instead.
        appending = asyncio.ensure_future(
            rm.append_and_wait(TOPIC, 0, cluster.records(1), timeout_ms=100))
        await settle()
        cluster.clock.advance(100)
        with pytest.raises(KafkaError) as excinfo:
            await asyncio.wait_for(appending, SAFETY_TIMEOUT_S)
        assert excinfo.value.code == ErrorCode.REQUEST_TIMED_OUT

    run(scenario)


def test_min_insync_replicas_refuses_acks_all_before_the_append(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER], isr=[LEADER],
                         configs={"min.insync.replicas": "2"})
    log = cluster.partition().log
    with pytest.raises(KafkaError) as excinfo:
        cluster.append(1, acks=ACKS_ALL)
    assert excinfo.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert log.log_end_offset == 0  # nothing was written
    pending = cluster.append(1, acks=1)  # acks=1 does not need the ISR
    assert pending.result.first_offset == 0 and log.log_end_offset == 1


def test_below_min_insync_replicas_the_high_watermark_holds(cluster: Cluster) -> None:
    """Kafka 3.7+: with the ISR below min.insync.replicas nothing becomes committed: an
    acks=all append waits (and times out), acks=1 records stay invisible until the ISR is
    back."""
    cluster.create_topic(replicas=[LEADER, FOLLOWER], configs={"min.insync.replicas": "2"})

    async def scenario() -> None:
        pending = cluster.append(2)
        assert pending.committed is not None and not pending.committed.done()
        cluster.change_partition(isr=[LEADER])  # the follower falls out of the ISR
        partition = cluster.partition()
        assert partition.isr == (LEADER,) and partition.log.high_watermark == 0
        cluster.append(1, acks=1)
        follower_fetched(partition, FOLLOWER, 3, cluster.clock.time_ms())
        assert partition.log.high_watermark == 0 and not pending.committed.done()
        cluster.change_partition(isr=[LEADER, FOLLOWER])  # back: the HW moves at once
        assert partition.log.high_watermark == 3
        assert pending.outcome() == ErrorCode.NONE

    run(scenario)


def test_an_isr_below_min_insync_when_the_commit_completes_fails_it_after_append(
        cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER], configs={"min.insync.replicas": "2"})

    async def scenario() -> None:
        pending = cluster.append(2)
        partition = cluster.partition()
        follower_fetched(partition, FOLLOWER, 2, cluster.clock.time_ms())
        assert pending.committed is not None and pending.committed.done()
        # The ISR shrinks before the waiting produce looks at its outcome (Kafka's
        # checkEnoughReplicasReachOffset on completion).
        cluster.change_partition(isr=[LEADER])
        assert pending.outcome() == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    run(scenario)


def test_losing_leadership_fails_pending_commits(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        rm = cluster.replica_manager
        pending = cluster.append(1)
        waiting = asyncio.ensure_future(rm.wait_for_commit([pending], timeout_ms=30_000))
        await settle()
        cluster.change_partition(leader=FOLLOWER)
        await asyncio.wait_for(waiting, SAFETY_TIMEOUT_S)
        assert pending.outcome() == ErrorCode.NOT_LEADER_OR_FOLLOWER
        partition = cluster.partition()
        assert not partition.is_leader and partition.leader_epoch == 1
        assert len(partition.commits) == 0
        with pytest.raises(KafkaError) as excinfo:
            cluster.append(1)
        assert excinfo.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        read = rm.read(TOPIC, 0, 0, 1 << 20, -1, FetchIsolation.HIGH_WATERMARK, True)
        assert read.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and read.records is None

    run(scenario)


def test_regaining_leadership_starts_a_new_epoch_at_the_log_end(cluster: Cluster) -> None:
    cluster.create_topic()

    async def scenario() -> None:
        cluster.append(3)
        cluster.change_partition(leader=FOLLOWER)
        cluster.change_partition(leader=LEADER)
        partition = cluster.partition()
        assert partition.is_leader and partition.leader_epoch == 2
        assert partition.log.leader_epoch_cache.entries == [(0, 0), (2, 3)]
        assert partition.commits.committed == partition.log.high_watermark == 3
        assert cluster.append(1).outcome() == ErrorCode.NONE

    run(scenario)


def test_shutdown_fails_pending_commits_and_answers_long_polls(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        rm = cluster.replica_manager
        pending = cluster.append(1)
        poll = asyncio.ensure_future(
            rm.fetch_purgatory.wait_until([(TOPIC, 0)], lambda: False, 30.0))
        await settle()
        rm.shutdown()
        assert await asyncio.wait_for(poll, SAFETY_TIMEOUT_S) is False
        assert pending.outcome() == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(scenario)


def test_an_append_wakes_the_long_polls_of_its_partition(cluster: Cluster) -> None:
    cluster.create_topic()

    async def scenario() -> None:
        rm = cluster.replica_manager
        start = rm.fetch_position(TOPIC, 0, 0)

        def enough() -> bool:
            return rm.readable_bytes(TOPIC, 0, start, FetchIsolation.HIGH_WATERMARK) > 0

        poll = asyncio.ensure_future(rm.fetch_purgatory.wait_until([(TOPIC, 0)], enough, 30.0))
        await settle()
        assert not poll.done()
        cluster.append(1)
        assert await asyncio.wait_for(poll, SAFETY_TIMEOUT_S) is True

    run(scenario)


# -- idempotence -------------------------------------------------------------------------------
def test_an_idempotent_retry_gets_the_original_offsets(cluster: Cluster) -> None:
    cluster.create_topic()

    async def scenario() -> None:
        producer = {"producer_id": 4000, "producer_epoch": 0}
        original = cluster.append(3, base_sequence=0, **producer)
        cluster.append(2)  # someone else's batch in between
        retry = cluster.append(3, base_sequence=0, **producer)
        assert (retry.result.first_offset, retry.result.last_offset) == (0, 2)
        assert (original.result.first_offset, original.result.last_offset) == (0, 2)
        assert cluster.partition().log.log_end_offset == 5  # nothing written for the retry
        assert retry.outcome() == ErrorCode.NONE
        following = cluster.append(1, base_sequence=3, **producer)
        assert following.result.first_offset == 5
        with pytest.raises(KafkaError) as excinfo:
            cluster.append(1, base_sequence=9, **producer)
        assert excinfo.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    run(scenario)


def test_a_retry_of_an_uncommitted_batch_waits_for_its_commit(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        producer = {"producer_id": 4001, "producer_epoch": 0, "base_sequence": 0}
        original = cluster.append(2, **producer)
        retry = cluster.append(2, **producer)
        assert retry.result.last_offset == 1
        assert retry.committed is not None and not retry.committed.done()
        follower_fetched(cluster.partition(), FOLLOWER, 2, cluster.clock.time_ms())
        assert original.outcome() == retry.outcome() == ErrorCode.NONE

    run(scenario)


# -- reads -------------------------------------------------------------------------------------
def test_high_watermark_isolation_hides_uncommitted_data(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])

    async def scenario() -> None:
        rm = cluster.replica_manager
        cluster.append(3)
        cluster.append(2)

        def read(isolation: FetchIsolation, offset: int = 0) -> list[BatchHeader]:
            result = rm.read(TOPIC, 0, offset, 1 << 20, -1, isolation, True)
            assert result.error == ErrorCode.NONE and result.records is not None
            return headers_of(result.records.read_bytes())

        assert read(FetchIsolation.HIGH_WATERMARK) == []
        assert read(FetchIsolation.TXN_COMMITTED) == []
        assert [h.last_offset for h in read(FetchIsolation.LOG_END)] == [2, 4]
        follower_fetched(cluster.partition(), FOLLOWER, 3, cluster.clock.time_ms())
        result = rm.read(TOPIC, 0, 0, 1 << 20, -1, FetchIsolation.HIGH_WATERMARK, True)
        assert (result.high_watermark, result.last_stable_offset, result.log_start_offset,
                result.leader_epoch) == (3, 3, 0, 0)
        assert [h.last_offset for h in read(FetchIsolation.HIGH_WATERMARK)] == [2]
        assert read(FetchIsolation.HIGH_WATERMARK, offset=3) == []

    run(scenario)


def test_read_checks_epochs_and_offsets(cluster: Cluster) -> None:
    cluster.create_topic()
    rm = cluster.replica_manager
    cluster.append(3)  # epoch 0: offsets 0..2
    cluster.change_partition(leader=LEADER)  # same leader, epoch 1 from offset 3
    cluster.append(2)  # epoch 1: offsets 3..4
    hw = FetchIsolation.HIGH_WATERMARK
    assert rm.read(TOPIC, 0, 0, 1 << 20, 0, hw, True).error == ErrorCode.FENCED_LEADER_EPOCH
    assert rm.read(TOPIC, 0, 0, 1 << 20, 5, hw, True).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert rm.read(TOPIC, 0, 0, 1 << 20, 1, hw, True).error == ErrorCode.NONE
    out_of_range = rm.read(TOPIC, 0, 99, 1 << 20, 1, hw, True)
    assert out_of_range.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert out_of_range.high_watermark == 5
    # A follower that fetched epoch 0 up to offset 4 diverges: epoch 0 ended at 3.
    diverging = rm.read(TOPIC, 0, 4, 1 << 20, 1, FetchIsolation.LOG_END, True,
                        last_fetched_epoch=0)
    assert diverging.error == ErrorCode.NONE and diverging.diverging_epoch == (0, 3)
    assert diverging.records is None
    fine = rm.read(TOPIC, 0, 3, 1 << 20, 1, FetchIsolation.LOG_END, True, last_fetched_epoch=0)
    assert fine.diverging_epoch is None and fine.records is not None
    assert rm.read("nope", 0, 0, 1, -1, hw, True).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@in_event_loop
def test_fetch_position_and_readable_bytes_follow_the_isolation(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])
    rm = cluster.replica_manager
    start = rm.fetch_position(TOPIC, 0, 0)
    assert start is not None and (start.offset, start.position) == (0, 0)
    cluster.append(3)
    cluster.append(2)
    log = cluster.partition().log
    first_batch = headers_of(log.read(0, 1 << 20).read_bytes())[0].size
    assert rm.readable_bytes(TOPIC, 0, start, FetchIsolation.HIGH_WATERMARK) == 0
    assert rm.readable_bytes(TOPIC, 0, start, FetchIsolation.LOG_END) == log.size_in_bytes
    follower_fetched(cluster.partition(), FOLLOWER, 3, cluster.clock.time_ms())
    assert rm.readable_bytes(TOPIC, 0, start, FetchIsolation.HIGH_WATERMARK) == first_batch
    middle = rm.fetch_position(TOPIC, 0, 4)  # inside the second batch: where it starts
    assert middle is not None and middle.position == first_batch
    # Gone or not led here: "something to answer" (1), and no position.
    assert rm.fetch_position("nope", 0, 0) is None
    assert rm.readable_bytes("nope", 0, start, FetchIsolation.LOG_END) == 1
    assert rm.readable_bytes(TOPIC, 0, None, FetchIsolation.LOG_END) == 1
    cluster.change_partition(leader=FOLLOWER)
    assert rm.fetch_position(TOPIC, 0, 0) is None
    assert rm.readable_bytes(TOPIC, 0, start, FetchIsolation.LOG_END) == 1


# -- offsets -----------------------------------------------------------------------------------
@in_event_loop
def test_offset_for_timestamp_stops_at_the_high_watermark(cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])
    rm = cluster.replica_manager
    base = cluster.clock.time_ms() - 10_000
    cluster.append(3, timestamps=[base, base + 10, base + 20])  # offsets 0..2
    cluster.append(2, timestamps=[base + 30, base + 40])  # offsets 3..4
    follower_fetched(cluster.partition(), FOLLOWER, 3, cluster.clock.time_ms())
    hw_isolation = FetchIsolation.HIGH_WATERMARK

    def lookup(timestamp: int, isolation: FetchIsolation = hw_isolation) -> tuple[int, ...]:
        return tuple(rm.offset_for_timestamp(TOPIC, 0, timestamp, -1, isolation))

    assert lookup(LATEST_TIMESTAMP) == (3, -1, 0)
    assert lookup(LATEST_TIMESTAMP, FetchIsolation.LOG_END) == (5, -1, 0)
    assert lookup(LATEST_TIERED_TIMESTAMP) == (-1, -1, -1)
    assert lookup(EARLIEST_TIMESTAMP)[0] == 0
    assert lookup(base + 10) == (1, base + 10, 0)
    assert lookup(base + 15) == (2, base + 20, 0)
    assert lookup(base + 30) == (-1, -1, -1)  # only above the high watermark
    assert lookup(base + 1000) == (-1, -1, -1)
    with pytest.raises(KafkaError) as excinfo:
        rm.offset_for_timestamp(TOPIC, 0, base, 7, hw_isolation)
    assert excinfo.value.code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_end_offset_for_epoch(cluster: Cluster) -> None:
    cluster.create_topic()
    rm = cluster.replica_manager
    cluster.append(3)
    cluster.change_partition(leader=LEADER)  # epoch 1 starts at 3
    cluster.append(2)
    assert rm.end_offset_for_epoch(TOPIC, 0, 0, -1) == (0, 3)
    assert rm.end_offset_for_epoch(TOPIC, 0, 1, 1) == (1, 5)
    with pytest.raises(KafkaError) as excinfo:
        rm.end_offset_for_epoch(TOPIC, 0, 1, 0)
    assert excinfo.value.code == ErrorCode.FENCED_LEADER_EPOCH


@in_event_loop
def test_delete_records_moves_the_low_watermark_up_to_the_high_watermark(
        cluster: Cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])
    rm = cluster.replica_manager
    cluster.append(3)
    cluster.append(2)
    follower_fetched(cluster.partition(), FOLLOWER, 3, cluster.clock.time_ms())
    for beyond in (4, -7):
        with pytest.raises(KafkaError) as excinfo:
            rm.delete_records(TOPIC, 0, beyond)
        assert excinfo.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert rm.delete_records(TOPIC, 0, 1) == 1
    assert rm.delete_records(TOPIC, 0, -1) == 3  # -1: the high watermark
    assert cluster.partition().log.log_start_offset == 3
    read = rm.read(TOPIC, 0, 0, 1 << 20, -1, FetchIsolation.LOG_END, True)
    assert read.error == ErrorCode.OFFSET_OUT_OF_RANGE and read.log_start_offset == 3


@in_event_loop
def test_log_dir_descriptions(cluster: Cluster) -> None:
    cluster.create_topic(partitions=2, replicas=[LEADER, FOLLOWER])
    cluster.create_topic("other")
    rm = cluster.replica_manager
    cluster.append(3)
    cluster.append(1, name="other")
    log_dir = str(cluster.log_manager.log_dirs[0])
    described = rm.log_dir_descriptions(None)
    assert list(described) == [log_dir]
    size = cluster.partition().log.size_in_bytes
    assert sorted(described[log_dir][TOPIC]) == [(0, size, 3), (1, 0, 0)]  # lag: LEO - HW
    other_size = cluster.partition("other").log.size_in_bytes
    assert described[log_dir]["other"] == [(0, other_size, 0)]
    only = rm.log_dir_descriptions({(TOPIC, 1)})
    assert only == {log_dir: {TOPIC: [(1, 0, 0)]}}
    assert rm.log_dir_descriptions(set()) == {log_dir: {}}


# -- ISR changes (Kafka's maybeExpandIsr / maybeShrinkIsr) and the maximal ISR
LAG_MS = 30_000  # the replica manager's default replica.lag.time.max.ms


class IsrChanges:
    """Records the ISR changes the replica manager proposes (the AlterPartition manager's
    place)."""

    def __init__(self, cluster: Cluster) -> None:
        self.proposed: list[Any] = []
        cluster.replica_manager.submit_isr_change = self.proposed.append
        # Registered brokers start fenced; only unfenced ones may join an ISR.
        cluster.replay(*(m.BrokerRegistrationChangeRecord(broker_id=b, broker_epoch=b,
                                                          fenced=-1)
                         for b in (LEADER, FOLLOWER, OTHER)))


def fetch_as(cluster: Cluster, replica: int, offset: int, broker_epoch: int = -1) -> Any:
    return cluster.replica_manager.read_for_follower(
        TOPIC, 0, replica, broker_epoch, offset, 0, 1 << 20, current_leader_epoch=0,
        min_one_batch=True, last_fetched_epoch=-1)


@in_event_loop
def test_a_follower_that_reaches_the_high_watermark_is_proposed_for_the_isr(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER], isr=[LEADER])
    changes = IsrChanges(cluster)
    cluster.append(5, acks=1)
    partition = cluster.partition()
    assert partition.log.high_watermark == 5  # the ISR is the leader alone
    assert fetch_as(cluster, FOLLOWER, 3).error == ErrorCode.NONE
    assert changes.proposed == []  # below the high watermark: not in sync yet
    fetch_as(cluster, FOLLOWER, 5, broker_epoch=FOLLOWER)
    [change] = changes.proposed
    assert (change.new_isr, change.broker_epochs[FOLLOWER]) == ((LEADER, FOLLOWER), FOLLOWER)
    assert partition.pending_isr == (LEADER, FOLLOWER)
    # While it is pending nothing else is proposed, and the high watermark already waits for
    # the follower (the maximal ISR).
    fetch_as(cluster, FOLLOWER, 5)
    assert len(changes.proposed) == 1
    cluster.append(2, acks=1)
    assert partition.log.high_watermark == 5
    fetch_as(cluster, FOLLOWER, 7)
    assert partition.log.high_watermark == 7
    # The controller's answer is applied; the metadata then agrees.
    cluster.replica_manager.on_isr_change_answer(change, ErrorCode.NONE, (LEADER, FOLLOWER), 0,
                                                 1)
    assert (partition.isr, partition.partition_epoch, partition.pending_isr) == \
        ((LEADER, FOLLOWER), 1, None)
    assert cluster.replica_manager.isr_stats == IsrChangeStats(expands=1)  # IsrExpandsPerSec


@in_event_loop
def test_an_isr_change_is_counted_once_whether_metadata_or_answer_comes_first(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER], isr=[LEADER])
    changes = IsrChanges(cluster)
    cluster.append(2, acks=1)
    fetch_as(cluster, FOLLOWER, 2, broker_epoch=FOLLOWER)
    [change] = changes.proposed
    # The metadata log brings the controller's decision before the AlterPartition answer.
    cluster.change_partition(isr=[LEADER, FOLLOWER])
    stats = cluster.replica_manager.isr_stats
    assert stats == IsrChangeStats(expands=1)
    cluster.replica_manager.on_isr_change_answer(change, ErrorCode.NONE, (LEADER, FOLLOWER), 0,
                                                 1)
    assert stats == IsrChangeStats(expands=1)


@in_event_loop
def test_a_fenced_or_stale_epoch_follower_is_not_proposed(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER], isr=[LEADER])
    changes = IsrChanges(cluster)
    cluster.append(1, acks=1)
    fetch_as(cluster, FOLLOWER, 1, broker_epoch=FOLLOWER + 100)  # not its registered epoch
    cluster.replay(m.BrokerRegistrationChangeRecord(broker_id=FOLLOWER, broker_epoch=FOLLOWER,
                                                    fenced=1))
    fetch_as(cluster, FOLLOWER, 1, broker_epoch=FOLLOWER)  # fenced
    assert changes.proposed == []


@in_event_loop
def test_a_follower_must_reach_the_start_of_the_leader_epoch(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER], isr=[LEADER], leader=FOLLOWER)
    partition = cluster.partition()
    partition.log.append_as_leader(cluster.records(4), leader_epoch=0)  # as the old leader's
    cluster.change_partition(leader=LEADER)  # leader epoch 1 starts at offset 4
    changes = IsrChanges(cluster)
    assert partition.leader_epoch_start_offset == 4
    partition.log.update_high_watermark(2)
    fetch_as_epoch = cluster.replica_manager.read_for_follower(
        TOPIC, 0, FOLLOWER, -1, 3, 0, 1 << 20, current_leader_epoch=1, min_one_batch=True,
        last_fetched_epoch=-1)
    assert fetch_as_epoch.error == ErrorCode.NONE
    assert changes.proposed == []  # past the high watermark, not past the epoch start
    cluster.replica_manager.read_for_follower(
        TOPIC, 0, FOLLOWER, -1, 4, 0, 1 << 20, current_leader_epoch=1, min_one_batch=True,
        last_fetched_epoch=-1)
    assert [c.new_isr for c in changes.proposed] == [(LEADER, FOLLOWER)]


@in_event_loop
def test_a_follower_that_falls_behind_for_the_lag_time_leaves_the_isr(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER, OTHER])
    changes = IsrChanges(cluster)
    partition = cluster.partition()
    cluster.append(2, acks=1)
    fetch_as(cluster, FOLLOWER, 2)  # caught up now
    fetch_as(cluster, OTHER, 2)
    cluster.append(3, acks=1)  # log end 5
    cluster.clock.advance(LAG_MS // 2)
    fetch_as(cluster, FOLLOWER, 5)  # keeps up
    assert cluster.replica_manager.maybe_shrink_isrs() == 0
    cluster.clock.advance(LAG_MS // 2 + 1)
    fetch_as(cluster, FOLLOWER, 5)
    # OTHER fetched nothing since it was last caught up, LAG_MS + 1 ago.
    assert cluster.replica_manager.maybe_shrink_isrs() == 1
    assert [c.new_isr for c in changes.proposed] == [(LEADER, FOLLOWER)]
    # Refused: the pending change goes, the next check proposes again.
    cluster.replica_manager.on_isr_change_answer(changes.proposed[0],
                                                 ErrorCode.INVALID_UPDATE_VERSION)
    assert partition.pending_isr is None
    assert cluster.replica_manager.isr_stats == IsrChangeStats(failed=1)
    assert cluster.replica_manager.maybe_shrink_isrs() == 1


@in_event_loop
def test_a_follower_at_the_log_end_is_in_sync_however_long_ago_it_fetched(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER])
    IsrChanges(cluster)
    cluster.append(2, acks=1)
    fetch_as(cluster, FOLLOWER, 2)
    cluster.clock.advance(10 * LAG_MS)  # nothing produced: nothing to fall behind
    assert cluster.replica_manager.maybe_shrink_isrs() == 0


@in_event_loop
def test_the_leader_quota_holds_back_throttled_out_of_isr_followers(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER, OTHER], isr=[LEADER, FOLLOWER])
    IsrChanges(cluster)
    quota = ReplicationQuota(LEADER, LEADER_RATE, LEADER_REPLICAS, samples=2, window_ms=1000,
                             clock=cluster.clock)
    cluster.replica_manager.leader_quota = quota
    cluster.set_config(TOPIC, LEADER_REPLICAS, f"0:{LEADER}")
    cluster.replay(m.ConfigRecord(resource_type=RESOURCE_BROKER, resource_name=str(LEADER),
                                  name=LEADER_RATE, value="100"))
    quota.apply_image(cluster.image)
    cluster.append(5, acks=1)
    assert fetch_as(cluster, OTHER, 0).records is not None  # under the quota
    quota.record(1000)  # now over it
    held = fetch_as(cluster, OTHER, 0)
    assert (held.error, held.records) == (ErrorCode.NONE, None)
    start = cluster.replica_manager.fetch_position(TOPIC, 0, 0)
    assert cluster.replica_manager.readable_bytes(TOPIC, 0, start, FetchIsolation.LOG_END,
                                                  OTHER) == 0
    # An ISR member is never held back, nor is a partition without a throttle.
    assert fetch_as(cluster, FOLLOWER, 0).records is not None
    cluster.set_config(TOPIC, LEADER_REPLICAS, None)
    quota.apply_image(cluster.image)
    assert fetch_as(cluster, OTHER, 0).records is not None


def register_with_racks(cluster: Cluster) -> None:
    """Every broker registered again, in rack r<id> with a PLAINTEXT endpoint."""
    endpoint = m.RegisterBrokerRecord.BrokerEndpoint
    cluster.replay(*(m.RegisterBrokerRecord(
        broker_id=b, incarnation_id=uuid.uuid4(), broker_epoch=b, rack=f"r{b}", fenced=False,
        end_points=[endpoint(name="PLAINTEXT", host="127.0.0.1", port=9000 + b)])
        for b in (LEADER, FOLLOWER, OTHER)))


def consumer_read(cluster: Cluster, rack: str | None, offset: int = 0) -> Any:
    return cluster.replica_manager.read(
        TOPIC, 0, offset, 1 << 20, current_leader_epoch=0,
        isolation=FetchIsolation.HIGH_WATERMARK, min_one_batch=True,
        client=None if rack is None else ClientMetadata(rack, "PLAINTEXT"))


@in_event_loop
def test_the_leader_names_an_in_sync_replica_of_the_consumers_rack(cluster) -> None:
    register_with_racks(cluster)
    cluster.create_topic(replicas=[LEADER, FOLLOWER, OTHER], isr=[LEADER, FOLLOWER])
    cluster.replica_manager.replica_selector = RackAwareReplicaSelector()
    cluster.append(3, acks=1)
    fetch_as(cluster, FOLLOWER, 3)
    fetch_as(cluster, OTHER, 3)
    # FOLLOWER is in sync and holds offset 0: a consumer in its rack is sent there.
    preferred = consumer_read(cluster, f"r{FOLLOWER}")
    assert (preferred.error, preferred.preferred_read_replica, preferred.records) == \
        (ErrorCode.NONE, FOLLOWER, None)
    assert preferred.high_watermark == 3
    # OTHER is not in the ISR; the leader's rack, no rack, or no client metadata (Fetch
    # before v11): the leader serves the data itself.
    for rack in (f"r{OTHER}", f"r{LEADER}", "", None):
        result = consumer_read(cluster, rack)
        assert (result.preferred_read_replica, result.records is not None) == (-1, True), rack
    # Up to the follower's log end it may serve; beyond, only the leader.
    cluster.append(1, acks=1)
    assert consumer_read(cluster, f"r{FOLLOWER}", offset=3).preferred_read_replica == FOLLOWER
    assert consumer_read(cluster, f"r{FOLLOWER}", offset=4).preferred_read_replica == -1


@in_event_loop
def test_a_follower_serves_consumers_with_client_metadata_up_to_its_high_watermark(
        cluster) -> None:
    cluster.create_topic(replicas=[FOLLOWER, LEADER], leader=FOLLOWER)
    partition = cluster.partition()
    for _ in range(2):  # two batches of two, as fetched from the leader
        partition.log.append_as_leader(cluster.records(2), leader_epoch=0)
    cluster.replica_manager.append_as_follower(partition, b"", 2, 0)  # the leader's HW: 2
    result = consumer_read(cluster, "r2")
    assert result.error == ErrorCode.NONE and result.high_watermark == 2
    assert [h.last_offset for h in headers_of(result.records.read_bytes())] == [1]
    # Without client metadata only the leader answers.
    assert consumer_read(cluster, None).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # A stale epoch is fenced on a follower too.
    stale = cluster.replica_manager.read(
        TOPIC, 0, 0, 1 << 20, current_leader_epoch=1, isolation=FetchIsolation.HIGH_WATERMARK,
        min_one_batch=True, client=ClientMetadata("", "PLAINTEXT"))
    assert stale.error == ErrorCode.UNKNOWN_LEADER_EPOCH


@in_event_loop
def test_an_unclean_leader_reports_its_recovery_with_the_first_isr_expansion(cluster) -> None:
    cluster.create_topic(replicas=[LEADER, FOLLOWER, OTHER], isr=[LEADER, OTHER])
    changes = IsrChanges(cluster)
    # As after an unclean election (KIP-704): RECOVERING, the leader alone in the ISR.
    cluster.replay(m.PartitionChangeRecord(partition_id=0, topic_id=cluster.topic_ids[TOPIC],
                                           isr=[LEADER], leader_recovery_state=1))
    partition = cluster.partition()
    assert partition.leader_recovery_state == 1
    cluster.append(2, acks=1)
    fetch_as(cluster, FOLLOWER, 2, broker_epoch=FOLLOWER)
    [change] = changes.proposed
    assert (change.new_isr, change.leader_recovery_state) == ((LEADER, FOLLOWER), 0)
