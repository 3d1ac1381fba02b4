"""Odradek's own consumer in consumer groups against a real broker: joining, range and
roundrobin assignment, rebalances on join/leave, commits and committed offsets as start
positions, auto commit, rebalance listeners, static membership, mixed groups with librdkafka."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid

import confluent_kafka
import pytest
from broker_process import wait_until

from odradek.client import (
    CONSUMER_CONFIG,
    Admin,
    AsyncConsumer,
    Connection,
    Consumer,
    ConsumerRebalanceListener,
    KafkaConfigError,
    KafkaError,
    NewTopic,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from odradek.client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    assignors_from_config,
    decode_sticky_user_data,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker, topic: str, partitions: int) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])


def _produce(broker, topic: str, partitions: int, start: int, count: int) -> None:
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as producer:
        for i in range(start, start + count):
            producer.send(topic, str(i).encode(), partition=i % partitions)
        producer.flush(30)


def _consumer(broker, group: str, **config) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "heartbeat.interval.ms": 100, **config})


def _poll_all(consumers, timeout_ms: float = 50) -> dict[int, list]:
    """One poll of each consumer (each commits what it got, synchronously)."""
    got = {}
    for index, consumer in enumerate(consumers):
        records = consumer.poll(timeout_ms)
        if records:
            consumer.commit()
        got[index] = records
    return got


def _balanced(consumers, partitions: int) -> bool:
    """Every partition assigned exactly once, to members of one generation."""
    assignments = [c.assignment() for c in consumers]
    generations = {c.group_metadata()[1] for c in consumers}
    union = set().union(*assignments)
    return (len(generations) == 1 and min(generations) >= 0 and len(union) == partitions
            and sum(len(a) for a in assignments) == partitions)


def _stabilize(consumers, partitions: int, timeout: float = 30) -> list[list]:
    records: list[list] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for index, batch in _poll_all(consumers).items():
            records[index].extend(batch)
        if _balanced(consumers, partitions):
            return records
    raise AssertionError(f"group did not stabilize: "
                         f"{[(c.group_metadata(), sorted(c.assignment())) for c in consumers]}")


# ------------------------------------------------------------------------------ assignors

def _tps(*pairs: tuple[str, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, partition) for topic, partition in pairs]


def test_range_assignor_matches_kafkas_documented_example():
    # RangeAssignor javadoc: C0, C1 subscribe to t0, t1 of 3 partitions each.
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, {
        "C1": Subscription(["t0", "t1"]), "C0": Subscription(["t0", "t1"])})
    assert result == {"C0": _tps(("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)),
                      "C1": _tps(("t0", 2), ("t1", 2))}
    # More members than partitions: the last members get none; unknown topics are skipped.
    result = RangeAssignor().assign({"t": 2}, {
        "a": Subscription(["t", "missing"]), "b": Subscription(["t"]), "c": Subscription(["t"])})
    assert result == {"a": _tps(("t", 0)), "b": _tps(("t", 1)), "c": []}
    # 7 partitions over 3 members: 3, 2, 2; only subscribers of a topic share it.
    result = RangeAssignor().assign({"t": 7, "u": 2}, {
        "m1": Subscription(["t"]), "m2": Subscription(["t", "u"]), "m3": Subscription(["t"])})
    assert result == {"m1": _tps(("t", 0), ("t", 1), ("t", 2)),
                      "m2": _tps(("t", 3), ("t", 4), ("u", 0), ("u", 1)),
                      "m3": _tps(("t", 5), ("t", 6))}


def test_range_orders_static_members_by_instance_id_first():
    result = RangeAssignor().assign({"t": 3}, {
        "a-dynamic": Subscription(["t"]),
        "z-member": Subscription(["t"], group_instance_id="instance-1"),
        "b-member": Subscription(["t"], group_instance_id="instance-2")})
    assert result == {"z-member": _tps(("t", 0)), "b-member": _tps(("t", 1)),
                      "a-dynamic": _tps(("t", 2))}


def test_roundrobin_assignor_matches_kafkas_documented_examples():
    # RoundRobinAssignor javadoc, identical subscriptions.
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, {
        "C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])})
    assert result == {"C0": _tps(("t0", 0), ("t0", 2), ("t1", 1)),
                      "C1": _tps(("t0", 1), ("t1", 0), ("t1", 2))}
    # ... and different subscriptions: C0 [t0], C1 [t0, t1], C2 [t0, t1, t2].
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, {
        "C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]),
        "C2": Subscription(["t0", "t1", "t2"])})
    assert result == {"C0": _tps(("t0", 0)), "C1": _tps(("t1", 0)),
                      "C2": _tps(("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2))}


def test_cooperative_sticky_assignor_keeps_owned_and_holds_back_moves():
    assignor = CooperativeStickyAssignor()
    everything = _tps(*(("t", p) for p in range(6)))
    # A new member joins the owner of everything: the owner keeps half; the other half is
    # held back (revoked first) rather than handed over in the same round.
    first = assignor.assign({"t": 6}, {
        "a": Subscription(["t"], owned_partitions=everything, generation_id=1),
        "b": Subscription(["t"])})
    assert first == {"a": _tps(("t", 0), ("t", 1), ("t", 2)), "b": []}
    second = assignor.assign({"t": 6}, {
        "a": Subscription(["t"], owned_partitions=first["a"], generation_id=2),
        "b": Subscription(["t"], generation_id=2)})
    assert second == {"a": first["a"], "b": _tps(("t", 3), ("t", 4), ("t", 5))}
    # Conflicting claims: the newer generation wins; a stale owner's claim is ignored.
    third = assignor.assign({"t": 2}, {
        "a": Subscription(["t"], owned_partitions=_tps(("t", 0)), generation_id=3),
        "b": Subscription(["t"], owned_partitions=_tps(("t", 0), ("t", 1)), generation_id=2)})
    assert third == {"a": _tps(("t", 0)), "b": _tps(("t", 1))}
    # Balanced with different subscriptions.
    result = assignor.assign({"t": 7, "u": 2}, {
        "m1": Subscription(["t"]), "m2": Subscription(["t", "u"]), "m3": Subscription(["u"])})
    sizes = sorted(len(p) for p in result.values())
    assert sizes == [2, 3, 4] and sorted(tp for p in result.values() for tp in p) == sorted(
        _tps(*(("t", p) for p in range(7)), ("u", 0), ("u", 1)))


def test_sticky_assignor_uses_the_previous_assignment_from_user_data():
    assignor = StickyAssignor()
    data = assignor.user_data(_tps(("t", 0), ("t", 1), ("t", 2), ("u", 1)), 4)
    assert decode_sticky_user_data(data) == (_tps(("t", 0), ("t", 1), ("t", 2), ("u", 1)), 4)
    assert decode_sticky_user_data(data[:-4]) == (  # v0: no generation
        _tps(("t", 0), ("t", 1), ("t", 2), ("u", 1)), -1)
    assert decode_sticky_user_data(b"\x00") == ([], -1)
    # Range would give "a" t-0..t-1; sticky keeps a's and b's previous partitions and gives
    # the newcomer "c" one from each of them.
    result = assignor.assign({"t": 6}, {
        "a": Subscription(["t"], user_data=assignor.user_data(_tps(("t", 1), ("t", 3),
                                                                   ("t", 5)), 2)),
        "b": Subscription(["t"], user_data=assignor.user_data(_tps(("t", 0), ("t", 2),
                                                                   ("t", 4)), 2)),
        "c": Subscription(["t"])})
    assert sorted(len(p) for p in result.values()) == [2, 2, 2]
    assert set(result["a"]) <= set(_tps(("t", 1), ("t", 3), ("t", 5)))
    assert set(result["b"]) <= set(_tps(("t", 0), ("t", 2), ("t", 4)))
    # A stale generation's claim loses to a newer one.
    result = assignor.assign({"t": 2}, {
        "a": Subscription(["t"], user_data=assignor.user_data(_tps(("t", 0), ("t", 1)), 1)),
        "b": Subscription(["t"], user_data=assignor.user_data(_tps(("t", 1)), 2))})
    assert result == {"a": _tps(("t", 0)), "b": _tps(("t", 1))}


def test_assignment_strategy_config():
    # Kafka 3.8's default "range, cooperative-sticky": both offered, eager protocol.
    strategy = CONSUMER_CONFIG.parse({"bootstrap.servers": "x:1"})[
        "partition.assignment.strategy"]
    assert [a.name for a in assignors_from_config(strategy)] == ["range", "cooperative-sticky"]
    assert [a.name for a in assignors_from_config(
        ["roundrobin", "org.apache.kafka.clients.consumer.RangeAssignor"])] == \
        ["roundrobin", "range"]
    with pytest.raises(KafkaConfigError, match="unknown assignor"):
        assignors_from_config(["com.example.Mine"])
    with pytest.raises(KafkaConfigError, match="at least one"):
        assignors_from_config([])
    assert [a.name for a in assignors_from_config(
        ["org.apache.kafka.clients.consumer.StickyAssignor"])] == ["sticky"]


# ------------------------------------------------------------------------------ groups

def test_members_share_partitions_and_take_over_when_one_leaves(odradek_broker):
    topic, group = _name("share"), _name("g")
    _create(odradek_broker, topic, 6)
    _produce(odradek_broker, topic, 6, 0, 300)
    consumers = [_consumer(odradek_broker, group) for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        started = time.monotonic()
        per_consumer = _stabilize(consumers, 6)
        joined_s = time.monotonic() - started
        assert all(len(c.assignment()) == 2 for c in consumers)
        # (Early joiners may have read from more partitions before the others joined.)
        received = [r for records in per_consumer for r in records]
        after_join: list[list] = [[] for _ in consumers]
        deadline = time.monotonic() + 30
        while len(received) < 300 and time.monotonic() < deadline:
            for index, batch in _poll_all(consumers).items():
                after_join[index].extend(batch)
                received.extend(batch)
        values = sorted(int(r.value) for r in received)
        assert values == list(range(300)), "every record exactly once"
        # In the stable group each consumer reads only from its own partitions.
        for consumer, records in zip(consumers, after_join):
            assert {TopicPartition(r.topic, r.partition) for r in records} <= \
                consumer.assignment()

        # One member leaves (LeaveGroup): the others take over its partitions and continue
        # from its committed offsets.
        leaver = consumers.pop()
        generation = leaver.group_metadata()[1]
        leaver.close()
        _produce(odradek_broker, topic, 6, 300, 300)
        started = time.monotonic()
        more = _stabilize(consumers, 6)
        takeover_s = time.monotonic() - started
        assert all(c.group_metadata()[1] > generation for c in consumers)
        assert sorted(len(c.assignment()) for c in consumers) == [3, 3]
        received = [r for records in more for r in records]
        deadline = time.monotonic() + 30
        while len(received) < 300 and time.monotonic() < deadline:
            for batch in _poll_all(consumers).values():
                received.extend(batch)
        assert sorted(int(r.value) for r in received) == list(range(300, 600))
        print(f"3 members joined in {joined_s:.2f}s; takeover after a leave {takeover_s:.2f}s")
    finally:
        for consumer in consumers:
            consumer.close()


def test_new_member_starts_at_committed_offsets(odradek_broker):
    topic, group = _name("committed"), _name("g")
    _create(odradek_broker, topic, 2)
    _produce(odradek_broker, topic, 2, 0, 20)
    with _consumer(odradek_broker, group) as first:
        first.subscribe([topic])
        _stabilize([first], 2)
        first.commit({TopicPartition(topic, 0): 4,
                      TopicPartition(topic, 1): OffsetAndMetadata(7, "note")})
        assert first.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)]) == {
            TopicPartition(topic, 0): OffsetAndMetadata(4, "", None),
            TopicPartition(topic, 1): OffsetAndMetadata(7, "note", None)}
    # "latest" would skip everything: the committed offsets win.
    with _consumer(odradek_broker, group, **{"auto.offset.reset": "latest"}) as second:
        second.subscribe(topic)
        firsts: dict[int, int] = {}
        deadline = time.monotonic() + 20
        while len(firsts) < 2 and time.monotonic() < deadline:
            for record in second.poll(100):
                firsts.setdefault(record.partition, record.offset)
        assert firsts == {0: 4, 1: 7}


@pytest.mark.parametrize("first", ["odradek", "librdkafka"])
@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_mixed_group_with_a_librdkafka_consumer(odradek_broker, strategy, first):
    """The member that joins first leads the group (and assigns); both orders are covered.
    Records are produced once the group is stable, so each is consumed exactly once."""
    topic, group = _name("mixed"), _name("g")
    _create(odradek_broker, topic, 6)
    ours = _consumer(odradek_broker, group, **{"partition.assignment.strategy": strategy})
    theirs = confluent_kafka.Consumer({
        "bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "partition.assignment.strategy": strategy, "heartbeat.interval.ms": 100})
    values: list[int] = []

    def poll_both() -> None:
        records = ours.poll(50)
        if records:
            ours.commit()
        values.extend(int(r.value) for r in records)
        messages = [m for m in theirs.consume(100, 0.05) if m.error() is None]
        if messages:
            values.extend(int(m.value()) for m in messages)
            theirs.commit(asynchronous=False)

    def their_assignment() -> set[TopicPartition]:
        return {TopicPartition(tp.topic, tp.partition) for tp in theirs.assignment()}

    try:
        if first == "odradek":
            ours.subscribe([topic])
            _stabilize([ours], 6)
            theirs.subscribe([topic])
        else:
            theirs.subscribe([topic])
            wait_until(lambda: theirs.poll(0.05) is None and len(theirs.assignment()) == 6, 20)
            ours.subscribe([topic])
        wait_until(lambda: poll_both() is None and len(ours.assignment()) == 3
                   and len(their_assignment()) == 3, 30)
        started = time.monotonic()
        generation = ours.group_metadata()[1]
        _produce(odradek_broker, topic, 6, 0, 120)
        wait_until(lambda: poll_both() is None and len(values) >= 120, 30)
        assert sorted(values) == list(range(120))
        mine, others = ours.assignment(), their_assignment()
        assert len(mine) == 3 and len(others) == 3 and not mine & others
        assert ours.group_metadata()[1] == generation >= 2
        print(f"{strategy}, {first} first: 120 records in {time.monotonic() - started:.2f}s")
    finally:
        ours.close()
        theirs.close()


def test_static_member_restart_keeps_partitions_without_rebalance(odradek_broker):
    topic, group = _name("static"), _name("g")
    _create(odradek_broker, topic, 4)
    config = {"session.timeout.ms": 10_000}
    a = _consumer(odradek_broker, group, **{"group.instance.id": "a", **config})
    b = _consumer(odradek_broker, group, **{"group.instance.id": "b", **config})
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        _stabilize([a, b], 4)
        generation = a.group_metadata()[1]
        a_partitions, b_partitions = a.assignment(), b.assignment()
        old_member_id = a.group_metadata()[2]
        a.close()  # a static member does not leave
        restarted = time.monotonic()
        a = _consumer(odradek_broker, group, **{"group.instance.id": "a", **config})
        a.subscribe([topic])
        wait_until(lambda: a.poll(50) is not None and a.group_metadata()[1] >= 0, 10)
        rejoin_s = time.monotonic() - restarted
        group_id, new_generation, member_id, instance_id = a.group_metadata()
        assert (new_generation, instance_id) == (generation, "a")
        assert member_id != old_member_id
        assert a.assignment() == a_partitions
        # b saw no rebalance either.
        for _ in range(5):
            b.poll(50)
        assert b.group_metadata()[1] == generation and b.assignment() == b_partitions
        with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
            (description,) = admin.describe_groups([group]).values()
        assert description.state == "Stable"
        assert sorted(member.group_instance_id for member in description.members) == ["a", "b"]
        print(f"static member rejoined in {rejoin_s:.2f}s, generation {generation} kept")
    finally:
        a.close()
        b.close()


def test_auto_commit_on_interval_and_on_close(odradek_broker):
    topic, group = _name("auto"), _name("g")
    _create(odradek_broker, topic, 1)
    _produce(odradek_broker, topic, 1, 0, 10)
    tp = TopicPartition(topic, 0)
    consumer = _consumer(odradek_broker, group, **{"enable.auto.commit": True,
                                                   "auto.commit.interval.ms": 200})
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        def committed() -> int | None:
            offsets = admin.list_consumer_group_offsets(group, [tp])
            return offsets[tp].offset if tp in offsets else None

        try:
            consumer.subscribe([topic])
            received = 0
            deadline = time.monotonic() + 20
            while received < 10 and time.monotonic() < deadline:
                received += len(consumer.poll(100))
            assert received == 10
            # Later polls commit the position once the interval has passed.
            wait_until(lambda: consumer.poll(50) is not None and committed() == 10, 10)
            _produce(odradek_broker, topic, 1, 10, 5)
            received = 0
            deadline = time.monotonic() + 20
            while received < 5 and time.monotonic() < deadline:
                received += len(consumer.poll(100, max_records=5))
            assert received == 5
        finally:
            consumer.close()  # commits the final position
        assert committed() == 15


class _Recorder:
    def __init__(self, consumer_ref: list) -> None:
        self.events: list[tuple[str, set]] = []
        self.consumer_ref = consumer_ref
        self.committed_in_revoke: dict | None = None
        self.threads: set[str] = set()

    def on_partitions_revoked(self, partitions):
        self.events.append(("revoked", set(partitions)))
        self.threads.add(threading.current_thread().name)
        if partitions:
            # Calling the consumer from its own listener works (no loop deadlock).
            consumer = self.consumer_ref[0]
            consumer.commit()
            self.committed_in_revoke = consumer.committed(sorted(partitions))

    def on_partitions_assigned(self, partitions):
        self.events.append(("assigned", set(partitions)))


def test_rebalance_listener_revokes_and_assigns(odradek_broker):
    topic, group = _name("listener"), _name("g")
    _create(odradek_broker, topic, 2)
    _produce(odradek_broker, topic, 2, 0, 10)
    ref: list = []
    recorder = _Recorder(ref)
    first = _consumer(odradek_broker, group)
    ref.append(first)
    second = _consumer(odradek_broker, group)
    try:
        first.subscribe([topic], listener=recorder)
        _stabilize([first], 2)
        both = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        assert recorder.events == [("assigned", both)]
        second.subscribe([topic])
        _stabilize([first, second], 2)
        assert recorder.events[1] == ("revoked", both)
        assert recorder.events[2] == ("assigned", first.assignment())
        assert len(first.assignment()) == 1
        assert recorder.committed_in_revoke is not None
        assert set(recorder.committed_in_revoke) == both
        assert not any(name.startswith("odradek-consumer") for name in recorder.threads)
        owned = first.assignment()
        first.unsubscribe()
        assert recorder.events[-1] == ("revoked", owned)
        assert first.assignment() == set() and first.subscription() == set()
    finally:
        first.close()
        second.close()


def test_poll_timeout_leaves_group_and_loses_partitions(odradek_broker):
    """max.poll.interval.ms passes without a poll: the member leaves; the next poll calls
    on_partitions_lost (async listener of the AsyncConsumer) and joins again."""
    topic, group = _name("lost"), _name("g")
    _create(odradek_broker, topic, 1)

    class Listener:
        def __init__(self) -> None:
            self.events: list[tuple[str, set]] = []

        async def on_partitions_assigned(self, partitions):
            self.events.append(("assigned", set(partitions)))

        async def on_partitions_lost(self, partitions):
            self.events.append(("lost", set(partitions)))

    async def body() -> None:
        listener = Listener()
        async with AsyncConsumer({"bootstrap.servers": odradek_broker.bootstrap,
                                  "group.id": group, "heartbeat.interval.ms": 100,
                                  "max.poll.interval.ms": 1000}) as consumer:
            consumer.subscribe([topic], listener=listener)
            deadline = time.monotonic() + 20
            while not consumer.assignment() and time.monotonic() < deadline:
                await consumer.poll(100)
            generation = consumer.group_metadata()[1]
            assert generation >= 1
            await asyncio.sleep(2.0)  # no poll for longer than max.poll.interval.ms
            assert consumer.group_metadata()[1] == -1
            deadline = time.monotonic() + 20
            while consumer.group_metadata()[1] < 0 and time.monotonic() < deadline:
                await consumer.poll(100)
            tp = {TopicPartition(topic, 0)}
            assert listener.events == [("assigned", tp), ("lost", tp), ("assigned", tp)]
            assert consumer.group_metadata()[1] > generation

    asyncio.run(body())


def test_pattern_subscription(odradek_broker):
    prefix = _name("pattern")
    topics = [f"{prefix}-a", f"{prefix}-b"]
    for topic in topics:
        _create(odradek_broker, topic, 2)
    _create(odradek_broker, f"other-{prefix}", 1)
    with _consumer(odradek_broker, _name("g")) as consumer:
        consumer.subscribe(re.compile(re.escape(prefix) + "-.*"))
        _stabilize([consumer], 4)
        assert consumer.subscription() == set(topics)
        assert {tp.topic for tp in consumer.assignment()} == set(topics)


def test_subscribe_errors(odradek_broker):
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap}) as consumer:
        with pytest.raises(KafkaError) as error:
            consumer.subscribe(["t"])
        assert error.value.code == ErrorCode.INVALID_GROUP_ID
    with _consumer(odradek_broker, _name("g")) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        with pytest.raises(RuntimeError, match="mutually exclusive"):
            consumer.subscribe(["t"])
        consumer.unsubscribe()
        consumer.subscribe(["t"])
        with pytest.raises(RuntimeError, match="mutually exclusive"):
            consumer.assign([TopicPartition("t", 0)])
        with pytest.raises(ValueError):
            consumer.subscribe([""])


def test_manual_assignment_auto_commits_with_a_group_id(odradek_broker):
    """Kafka auto-commits assigned partitions too: a group.id consumer without subscribe()."""
    topic, group = _name("manual"), _name("g")
    _create(odradek_broker, topic, 1)
    _produce(odradek_broker, topic, 1, 0, 7)
    tp = TopicPartition(topic, 0)
    with _consumer(odradek_broker, group, **{"enable.auto.commit": True}) as consumer:
        consumer.assign([tp])
        received = 0
        deadline = time.monotonic() + 20
        while received < 7 and time.monotonic() < deadline:
            received += len(consumer.poll(100))
        assert received == 7
    with _consumer(odradek_broker, group) as consumer:
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(7, "", 0)}


async def _remove_member(broker, group: str, member_id: str, instance_id: str) -> None:
    """What kafka-consumer-groups --delete-members... does: LeaveGroup for another member."""
    connection = await Connection.open(broker.host, broker.port, client_id="test")
    try:
        response = await connection.send(m.LeaveGroupRequest(
            group_id=group, members=[m.LeaveGroupRequest.MemberIdentity(
                member_id=member_id, group_instance_id=instance_id)]))
        assert response.error_code == ErrorCode.NONE
        assert [r.error_code for r in response.members] == [ErrorCode.NONE]
    finally:
        await connection.close()


def test_listener_base_class_reports_lost_as_revoked(odradek_broker):
    """`ConsumerRebalanceListener.on_partitions_lost` defaults to `on_partitions_revoked`;
    a heartbeat failing with UNKNOWN_MEMBER_ID (the member was removed by a tool) loses
    the partitions and the consumer joins again with a new member id."""
    topic, group = _name("base"), _name("g")
    _create(odradek_broker, topic, 1)
    events: list[tuple[str, set]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, partitions):
            events.append(("revoked", set(partitions)))

        def on_partitions_assigned(self, partitions):
            events.append(("assigned", set(partitions)))

    with _consumer(odradek_broker, group, **{"group.instance.id": "only"}) as consumer:
        consumer.subscribe([topic], listener=Listener())
        _stabilize([consumer], 1)
        _, generation, member_id, _ = consumer.group_metadata()
        asyncio.run(_remove_member(odradek_broker, group, member_id, "only"))
        deadline = time.monotonic() + 20
        while len(events) < 3 and time.monotonic() < deadline:
            consumer.poll(50)
        tp = {TopicPartition(topic, 0)}
        assert events == [("assigned", tp), ("revoked", tp), ("assigned", tp)]
        assert consumer.group_metadata()[1] > generation


def test_duplicate_static_member_fences_the_older_one(odradek_broker):
    topic, group = _name("fenced"), _name("g")
    _create(odradek_broker, topic, 2)
    config = {"group.instance.id": "same", "session.timeout.ms": 10_000}
    older = _consumer(odradek_broker, group, **config)
    newer = _consumer(odradek_broker, group, **config)
    try:
        older.subscribe([topic])
        _stabilize([older], 2)
        newer.subscribe([topic])
        _stabilize([newer], 2)  # takes over the membership (and the partitions)
        with pytest.raises(KafkaError) as error:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                older.poll(50)
        assert error.value.code == ErrorCode.FENCED_INSTANCE_ID
        assert newer.group_metadata()[3] == "same" and len(newer.assignment()) == 2
    finally:
        older.close()
        newer.close()


def test_cooperative_rebalance_revokes_only_moving_partitions(odradek_broker):
    topic, group = _name("coop"), _name("g")
    _create(odradek_broker, topic, 6)
    _produce(odradek_broker, topic, 6, 0, 120)
    events: list[tuple[str, set]] = []
    commits_in_revoke: list[dict] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, partitions):
            events.append(("revoked", set(partitions)))
            # Committing what is given away works inside the callback (new generation).
            first.commit({tp: first.position(tp) for tp in partitions})
            commits_in_revoke.append(first.committed(sorted(partitions)))

        def on_partitions_assigned(self, partitions):
            events.append(("assigned", set(partitions)))

    config = {"partition.assignment.strategy": "cooperative-sticky"}
    first = _consumer(odradek_broker, group, **config)
    second = _consumer(odradek_broker, group, **config)
    try:
        first.subscribe([topic], listener=Listener())
        received = [r for records in _stabilize([first], 6) for r in records]
        everything = first.assignment()
        second.subscribe([topic])
        for records in _stabilize([first, second], 6):
            received.extend(records)
        deadline = time.monotonic() + 30
        while len(received) < 120 and time.monotonic() < deadline:
            for batch in _poll_all([first, second]).values():
                received.extend(batch)
        assert sorted(int(r.value) for r in received) == list(range(120))
        kept = first.assignment()
        assert len(kept) == 3 and len(second.assignment()) == 3
        # Never everything revoked: only the three partitions that moved, in one event.
        assert events[0] == ("assigned", everything)
        assert ("revoked", everything - kept) in events
        assert all(kind != "revoked" or partitions == everything - kept
                   for kind, partitions in events)
        assert first.group_metadata()[1] == second.group_metadata()[1] >= 3
        assert len(commits_in_revoke) == 1 and set(commits_in_revoke[0]) == everything - kept
    finally:
        first.close()
        second.close()


def test_eager_sticky_members_keep_their_partitions_when_one_leaves(odradek_broker):
    topic, group = _name("sticky"), _name("g")
    _create(odradek_broker, topic, 6)
    consumers = [_consumer(odradek_broker, group, **{"partition.assignment.strategy": "sticky"})
                 for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        _stabilize(consumers, 6)
        before = [c.assignment() for c in consumers]
        consumers.pop().close()
        _stabilize(consumers, 6)
        # (range would move b from t-2,t-3 to t-3,t-4,t-5)
        for consumer, previous in zip(consumers, before):
            assert previous < consumer.assignment()
        assert sorted(len(c.assignment()) for c in consumers) == [3, 3]
    finally:
        for consumer in consumers:
            consumer.close()


def test_group_survives_a_broker_restart(fresh_broker):
    """The coordinator goes away: members find it again, rejoin and continue from their
    committed offsets (loaded from __consumer_offsets), every record exactly once."""
    broker = fresh_broker.start()
    topic, group = _name("restart"), _name("g")
    _create(broker, topic, 4)
    _produce(broker, topic, 4, 0, 40)
    consumers = [_consumer(broker, group, **{"session.timeout.ms": 6000,
                                             "reconnect.backoff.max.ms": 200})
                 for _ in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        received = [r for records in _stabilize(consumers, 4) for r in records]
        wait_until(lambda: received.extend(
            r for batch in _poll_all(consumers).values() for r in batch) or len(received) >= 40,
            30)
        broker.restart()
        restarted = time.monotonic()
        _produce(broker, topic, 4, 40, 40)
        wait_until(lambda: received.extend(
            r for batch in _poll_all(consumers).values() for r in batch) or len(received) >= 80,
            60)
        recovered_s = time.monotonic() - restarted
        assert sorted(int(r.value) for r in received) == list(range(80))
        assert all(c.group_metadata()[1] >= 1 for c in consumers)
        print(f"all records consumed {recovered_s:.2f}s after the restart")
    finally:
        for consumer in consumers:
            consumer.close()
