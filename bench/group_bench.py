"""Group coordinator benchmarks: rebalance time with 10 members, commits per second, offset
loading.

Run: `python -m bench group` (writes docs/performance.md) or
`python bench/group_bench.py [--quick]` (prints the section only).

The broker runs as a child process (like `odradek server-start`); the members are raw protocol
clients on `odradek.client.Connection` (one connection each, as real consumers have) so the
numbers measure the broker rather than a client library's timers; one row uses librdkafka
consumers for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # BrokerProcess: a broker on random local ports

from broker_process import BrokerProcess

from odradek.client import Admin, NewTopic
from odradek.client.connection import Connection
from odradek.coordinator import GroupMetadataManager
from odradek.coordinator.group import OffsetAndMetadata, TopicPartition
from odradek.coordinator.records import build_batch, offset_record
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.storage import AppendOrigin, Log, LogConfig

NAME = "group"
PARTITIONS = 20
HEARTBEAT_S = 0.05


@dataclass
class Results:
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, metric: str, value: str, notes: str = "") -> None:
        self.rows.append((metric, value, notes))
        print(f"  {metric}: {value} {notes}", flush=True)


def _subscription(topic: str) -> bytes:
    return m.encode_versioned(m.ConsumerProtocolSubscription(topics=[topic]), 1)


def _assignment(topic: str, partitions: list[int]) -> bytes:
    return m.encode_versioned(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=partitions)]), 1)


class RawMember:
    """A consumer group member speaking JoinGroup/SyncGroup/Heartbeat itself; as leader it
    assigns the partitions round-robin."""

    def __init__(self, connection: Connection, group: str, topic: str) -> None:
        self.connection = connection
        self.group = group
        self.topic = topic
        self.member_id = ""
        self.generation = -1
        self.synced_at = 0.0
        self.leaving = False
        self.stable = asyncio.Event()
        self.failure: BaseException | None = None

    async def run(self) -> None:
        try:
            await self._run()
        except Exception as exc:
            self.failure = exc
            raise

    async def _run(self) -> None:
        # As every client does first (it also creates __consumer_offsets on first use).
        found = await self.connection.send(m.FindCoordinatorRequest(
            coordinator_keys=[self.group]))
        assert found.coordinators[0].error_code == ErrorCode.NONE, found
        while not self.leaving:
            join = await self.connection.send(m.JoinGroupRequest(
                group_id=self.group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                member_id=self.member_id, protocol_type="consumer",
                protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(
                    name="range", metadata=_subscription(self.topic))]))
            if join.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error_code != ErrorCode.NONE:
                raise RuntimeError(f"JoinGroup failed: {ErrorCode(join.error_code).name}")
            self.member_id = join.member_id
            assignments = []
            if join.leader == self.member_id:
                members = [member.member_id for member in join.members]
                assignments = [m.SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=member, assignment=_assignment(
                        self.topic, list(range(index, PARTITIONS, len(members)))))
                    for index, member in enumerate(members)]
            sync = await self.connection.send(m.SyncGroupRequest(
                group_id=self.group, generation_id=join.generation_id,
                member_id=self.member_id, assignments=assignments))
            if sync.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if sync.error_code != ErrorCode.NONE:
                raise RuntimeError(f"SyncGroup failed: {ErrorCode(sync.error_code).name}")
            self.generation = join.generation_id
            self.synced_at = time.perf_counter()
            self.stable.set()
            while not self.leaving:
                await asyncio.sleep(HEARTBEAT_S)
                beat = await self.connection.send(m.HeartbeatRequest(
                    group_id=self.group, generation_id=self.generation,
                    member_id=self.member_id))
                if beat.error_code != ErrorCode.NONE:
                    self.stable.clear()
                    break

    async def leave(self) -> None:
        self.leaving = True
        await self.connection.send(m.LeaveGroupRequest(
            group_id=self.group, members=[m.LeaveGroupRequest.MemberIdentity(
                member_id=self.member_id)]))


async def _connect(broker: BrokerProcess) -> Connection:
    return await Connection.open(broker.host, broker.port, client_id="bench",
                                 request_timeout_ms=60_000)


async def _all_synced(members: list[RawMember], after_generation: int = 0,
                      timeout: float = 60) -> float:
    """Waits until every member synced the same generation, newer than `after_generation`;
    returns when the last of them did."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        failed = [member.failure for member in members if member.failure is not None]
        if failed:
            raise RuntimeError("a member failed") from failed[0]
        generations = {member.generation for member in members}
        (generation, *others) = generations
        if not others and generation > after_generation \
                and all(member.stable.is_set() for member in members):
            return max(member.synced_at for member in members)
        await asyncio.sleep(0.002)
    raise TimeoutError("the group did not stabilize")


async def bench_rebalances(broker: BrokerProcess, topic: str, rounds: int,
                           results: Results) -> None:
    joins, adds, leaves, generations = [], [], [], []
    for _ in range(rounds):
        group = f"bench-{uuid.uuid4().hex[:8]}"
        connections = [await _connect(broker) for _ in range(11)]
        members = [RawMember(c, group, topic) for c in connections]
        tasks = []
        started = time.perf_counter()
        for member in members[:10]:
            tasks.append(asyncio.create_task(member.run()))
        done = await _all_synced(members[:10])
        joins.append(done - started)
        generations.append(members[0].generation)
        # An eleventh member joins a stable group of ten.
        started = time.perf_counter()
        tasks.append(asyncio.create_task(members[10].run()))
        done = await _all_synced(members, after_generation=members[0].generation)
        adds.append(done - started)
        # One member leaves.
        started = time.perf_counter()
        await members[10].leave()
        done = await _all_synced(members[:10], after_generation=members[10].generation)
        leaves.append(done - started)
        for member in members[:10]:
            member.leaving = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for connection in connections:
            await connection.close()

    def median_ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.1f} ms"

    spread = ", ".join(f"{v * 1000:.0f}" for v in joins)
    results.add("10 members join an empty group (all synced, one generation's assignment)",
                median_ms(joins), f"median of {rounds} (ms: {spread}); generations needed: "
                f"{statistics.median(generations):g}")
    results.add("11th member joins a stable group of 10 (all 11 synced)", median_ms(adds),
                f"median of {rounds}; members notice via heartbeat every "
                f"{HEARTBEAT_S * 1000:.0f} ms")
    results.add("1 member of 11 leaves (remaining 10 synced)", median_ms(leaves),
                f"median of {rounds}")


def librdkafka_join_time(broker: BrokerProcess, topic: str) -> float:
    """Seconds until ten confluent-kafka consumers subscribing at once are all assigned and
    the group is Stable with 10 members."""
    from confluent_kafka import Consumer

    group = f"bench-rdk-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group,
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
              "enable.auto.commit": False}
    assigned = [threading.Event() for _ in range(10)]
    stop = threading.Event()

    def member(index: int) -> None:
        consumer = Consumer(config)

        def on_assign(_consumer: object, partitions: list) -> None:
            if partitions:
                assigned[index].set()

        def on_revoke(_consumer: object, partitions: list) -> None:
            assigned[index].clear()

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set():
            consumer.poll(0.05)
        consumer.close()

    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        started = time.perf_counter()
        threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(10)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(event.is_set() for event in assigned):
                description = admin.describe_groups([group])[group]
                if description.state == "Stable" and len(description.members) == 10:
                    break
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        stop.set()
        for thread in threads:
            thread.join(30)
    return elapsed


def bench_librdkafka_join(broker: BrokerProcess, topic: str, rounds: int,
                          results: Results) -> None:
    times = [librdkafka_join_time(broker, topic) for _ in range(rounds)]
    spread = ", ".join(f"{t * 1000:.0f}" for t in times)
    results.add("10 librdkafka consumers subscribe (all assigned, group Stable)",
                f"{statistics.median(times) * 1000:.0f} ms",
                f"median of {rounds} (ms: {spread}); confluent-kafka, heartbeat.interval.ms=500: "
                "members that joined early learn of each rebalance at their next heartbeat")


async def bench_commits(broker: BrokerProcess, topic: str, count: int,
                        results: Results) -> None:
    def commit(group: str, offset: int, partitions: int = 1) -> m.OffsetCommitRequest:
        return m.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                m.OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=offset)
                for p in range(partitions)])])

    async def run(connection: Connection, group: str, n: int, partitions: int = 1) -> None:
        for i in range(n):
            response = await connection.send(commit(group, i, partitions))
            assert response.topics[0].partitions[0].error_code == 0

    connection = await _connect(broker)
    await run(connection, "warm-up", 200)
    started = time.perf_counter()
    await run(connection, "commits-seq", count)
    rate = count / (time.perf_counter() - started)
    results.add("OffsetCommit, 1 partition, one at a time (1 connection)", f"{rate:,.0f} /s",
                f"{1e6 / rate:.0f} us per commit round trip")

    started = time.perf_counter()
    await asyncio.gather(*(run(connection, f"commits-pipe-{i}", count // 16) for i in range(16)))
    rate = (count // 16 * 16) / (time.perf_counter() - started)
    results.add("OffsetCommit, 1 partition, 16 in flight (1 connection)", f"{rate:,.0f} /s")

    connections = [await _connect(broker) for _ in range(8)]
    started = time.perf_counter()
    await asyncio.gather(*(run(c, f"commits-par-{i}", count // 8)
                           for i, c in enumerate(connections)))
    rate = (count // 8 * 8) / (time.perf_counter() - started)
    results.add("OffsetCommit, 1 partition, 8 connections x 1 in flight", f"{rate:,.0f} /s")

    batches = max(count // 20, 50)
    started = time.perf_counter()
    await run(connection, "commits-wide", batches, partitions=PARTITIONS)
    elapsed = time.perf_counter() - started
    results.add(f"OffsetCommit, {PARTITIONS} partitions per request, one at a time",
                f"{batches / elapsed:,.0f} /s", f"{batches * PARTITIONS / elapsed:,.0f} offsets/s")

    fetch = m.OffsetFetchRequest(groups=[m.OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id="commits-wide", topics=None)])
    started = time.perf_counter()
    for _ in range(batches):
        await connection.send(fetch)
    elapsed = time.perf_counter() - started
    results.add(f"OffsetFetch of {PARTITIONS} partitions, one at a time",
                f"{batches / elapsed:,.0f} /s")
    for c in [connection, *connections]:
        await c.close()


def bench_load(work: Path, groups: int, partitions: int, results: Results) -> None:
    """Replay speed of an offsets partition (what a broker does when it starts leading one)."""
    log = Log(work / "__consumer_offsets-0", LogConfig())
    now = int(time.time() * 1000)
    for group in range(groups):
        for round_ in range(2):  # every key twice: replay keeps the last value
            records = [offset_record(f"group-{group}", TopicPartition("topic", p),
                                     OffsetAndMetadata(round_ * 100 + p, commit_timestamp=now))
                       for p in range(partitions)]
            log.append_as_leader(build_batch(records, now), 0, origin=AppendOrigin.COORDINATOR)
    manager = GroupMetadataManager(lambda p, r: None, num_partitions=lambda: 1)
    started = time.perf_counter()
    loaded = asyncio.run(manager.load_partition(0, log))
    elapsed = time.perf_counter() - started
    records = groups * partitions * 2
    assert len(loaded) == groups
    results.add(f"load an offsets partition ({records:,} commit records, {groups} groups)",
                f"{elapsed * 1000:.0f} ms", f"{records / elapsed:,.0f} records/s")
    log.close()


def bench_in_process_commits(work: Path, count: int, results: Results) -> None:
    """The coordinator's own share of a commit: checks, record batch, storage append."""
    from odradek.coordinator import GroupConfig, GroupCoordinator

    log = Log(work / "__consumer_offsets-1", LogConfig())

    async def append(partition: int, records: bytes) -> None:
        log.append_as_leader(records, 0, origin=AppendOrigin.COORDINATOR)

    manager = GroupMetadataManager(append, num_partitions=lambda: 1)
    coordinator = GroupCoordinator(GroupConfig(), manager)

    async def commits() -> float:
        coordinator.start()
        await coordinator.elect(0, log)
        tp = TopicPartition("topic", 0)
        started = time.perf_counter()
        for i in range(count):
            await coordinator.commit_offsets("g", "", None, -1, {tp: OffsetAndMetadata(i)})
        elapsed = time.perf_counter() - started
        await coordinator.close()
        return elapsed

    elapsed = asyncio.run(commits())
    results.add("GroupCoordinator.commit_offsets in process, 1 partition",
                f"{elapsed / count * 1e6:.0f} us", "validation, record batch, Log append, apply: "
                "the broker-side share of a commit round trip")
    log.close()


def run(quick: bool = False) -> str:
    rounds = 3 if quick else 7
    commits = 2000 if quick else 10_000
    results = Results()
    work = Path(tempfile.mkdtemp(prefix="odradek-group-bench-"))
    broker = BrokerProcess(work, overrides={"offsets.topic.num.partitions": "10",
                                            "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            topic = f"bench-{uuid.uuid4().hex[:6]}"
            admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                          replication_factor=1)])
        asyncio.run(bench_rebalances(broker, topic, rounds, results))
        bench_librdkafka_join(broker, topic, 1 if quick else 5, results)
        asyncio.run(bench_commits(broker, topic, commits, results))
    finally:
        broker.stop()
    bench_in_process_commits(work, commits, results)
    bench_load(work, 200 if quick else 1000, 50, results)
    return render(results, quick)


METHOD = f"""\
- One broker in a child process (`odradek server-start`, `group.initial.rebalance.delay.ms=0`,
  10 offsets partitions) on loopback; the clients run in the benchmark process, so both share
  the 2 cores.
- **Rebalances**: raw protocol members (`odradek.client.Connection`, one connection each) run
  JoinGroup (with the KIP-394 MEMBER_ID_REQUIRED round trip), the leader assigns {PARTITIONS}
  partitions round-robin in SyncGroup, everyone heartbeats every {HEARTBEAT_S * 1000:.0f} ms and
  rejoins on REBALANCE_IN_PROGRESS. Time runs from the first JoinGroup until the last member has
  its SyncGroup answer for a generation all members share. Ten members starting together need
  more than one generation: with no initial delay the first member's generation completes at
  once (with Kafka's default `group.initial.rebalance.delay.ms=3000` they would share the first
  one, 3 s later).
- **librdkafka**: ten confluent-kafka consumers subscribe at once; time until every one has an
  assignment and DescribeGroups says Stable with 10 members.
- **Commits**: simple commits (generation -1), each answered after its record batch is
  appended to `__consumer_offsets` (acks=all on one node): one partition per request
  sequentially, pipelined on one connection and over 8 connections; then 20 partitions per
  request. The concurrent rows vary by up to ~2x between runs on this VM (client and broker
  compete for the same 2 cores); the sequential ones by ~10%.
- **Load**: `GroupMetadataManager.load_partition` replaying a local offsets partition (every
  key written twice), as a broker does when it becomes the partition's leader.
"""


def render(results: Results, quick: bool) -> str:
    command = f"python -m bench group{' --quick' if quick else ''}"
    lines = [
        "## Group coordinator",
        "",
        (f"Measured by `{command}` on this project's machine (2 cores, Python "
         f"{sys.version.split()[0]}), {time.strftime('%Y-%m-%d')}. Method:"),
        "",
        METHOD,
        "| metric | result | notes |",
        "|---|---|---|",
    ]
    lines += [f"| {metric} | {value} | {notes} |" for metric, value, notes in results.rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    print(run(args.quick))


if __name__ == "__main__":
    main()
