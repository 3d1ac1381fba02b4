"""kafka-python and aiokafka consumer groups against a real Odradek broker: subscribe, commit,
resume from committed offsets, split partitions between members, static membership."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTP
from broker_process import BrokerProcess
from group_members import group_shape, produce_spread, wait_for
from kafka import KafkaConsumer, TopicPartition

from odradek.client import Admin, NewTopic

GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("py-groups"),
                           overrides={"offsets.topic.num.partitions": "4"}).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        yield admin


def _topic(admin: Admin, partitions: int) -> str:
    name = f"pyg-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    # Every partition has a leader in the broker's metadata before a client subscribes: a
    # group leader whose metadata lacks the topic assigns nothing (kafka-python then keeps
    # that empty assignment), as against Kafka right after a create.
    wait_for(lambda: _leaders_known(admin, name, partitions), 30, f"metadata of {name}")
    return name


def _leaders_known(admin: Admin, topic: str, partitions: int) -> bool:
    described = admin.describe_topics([topic])[topic].partitions
    return len(described) == partitions and all(
        p.leader is not None and p.leader >= 0 for p in described)


def _produce(broker, topic: str, partitions: int, start: int, count: int) -> None:
    produce_spread(broker.bootstrap, topic, partitions, start, count)


# ---------------------------------------------------------------- kafka-python

def _kp_consumer(broker, group: str, topic: str, **extra) -> KafkaConsumer:
    return KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         **GROUP_TIMEOUTS, **extra)


def _kp_assigned(consumer: KafkaConsumer, timeout: float = 30) -> set:
    """Polls (which joins the group) until the consumer has its assignment."""
    deadline = time.monotonic() + timeout
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)
    return consumer.assignment()


def _kp_poll(consumer: KafkaConsumer, expected: int, timeout: float = 30) -> list:
    records = []
    deadline = time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=200).values():
            records.extend(batch)
    return records


def test_kafka_python_commit_and_resume(broker, admin):
    topic, group = _topic(admin, 3), f"kp-{uuid.uuid4().hex[:6]}"
    _produce(broker, topic, 3, 0, 30)
    consumer = _kp_consumer(broker, group, topic)
    records = _kp_poll(consumer, 30)
    assert sorted(int(r.value) for r in records) == list(range(30))
    consumer.commit()
    assert {p: consumer.committed(TopicPartition(topic, p)) for p in range(3)} == \
        {0: 10, 1: 10, 2: 10}
    consumer.close()  # leaves the group

    _produce(broker, topic, 3, 30, 9)
    consumer = _kp_consumer(broker, group, topic)
    records = _kp_poll(consumer, 9)
    records += _kp_poll(consumer, 1, timeout=0.5)  # and nothing more
    assert sorted(int(r.value) for r in records) == list(range(30, 39))
    consumer.commit()
    consumer.close()
    assert admin.list_consumer_group_offsets(group) and {
        tp.partition: o.offset for tp, o in admin.list_consumer_group_offsets(group).items()
    } == {0: 13, 1: 13, 2: 13}


def test_kafka_python_members_split_the_partitions(broker, admin):
    topic, group = _topic(admin, 4), f"kp-split-{uuid.uuid4().hex[:6]}"
    _produce(broker, topic, 4, 0, 40)
    consumed: dict[str, list[int]] = {"a": [], "b": []}
    stop = threading.Event()

    def member(name: str) -> None:
        consumer = _kp_consumer(broker, group, topic, client_id=f"kp-{name}")
        try:
            while not stop.is_set():
                batches = consumer.poll(timeout_ms=200)
                for batch in batches.values():
                    consumed[name].extend(int(r.value) for r in batch)
                if batches:
                    consumer.commit()
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(name,), daemon=True) for name in "ab"]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: group_shape(admin, group) == ("Stable", [2, 2]), 40,
                 "two kafka-python members with two partitions each")
        wait_for(lambda: len(consumed["a"]) + len(consumed["b"]) >= 40, 30, "40 records")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert sorted(consumed["a"] + consumed["b"]) == list(range(40))
    offsets = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {p: 10 for p in range(4)}


def test_kafka_python_static_member_rejoins_with_the_same_generation(broker, admin):
    topic, group = _topic(admin, 2), f"kp-static-{uuid.uuid4().hex[:6]}"
    first = _kp_consumer(broker, group, topic, group_instance_id="static-1")
    assert _kp_assigned(first)
    _kp_poll(first, 1, timeout=0.5)  # let the client settle (it may rejoin once on metadata)
    wait_for(lambda: group_shape(admin, group) == ("Stable", [2]), 30, "a stable group")
    generation = first._coordinator._generation.generation_id
    member_id = first._coordinator._generation.member_id
    assignment = first.assignment()
    first.close()  # static: no LeaveGroup, the membership stays
    shape = group_shape(admin, group)
    assert shape == ("Stable", [2]), f"the group changed when the static member closed: {shape}"

    second = _kp_consumer(broker, group, topic, group_instance_id="static-1")
    assert _kp_assigned(second) == assignment
    rejoined = second._coordinator._generation
    assert rejoined.generation_id == generation, (generation, rejoined)
    assert rejoined.member_id != member_id
    (member,) = admin.describe_groups([group])[group].members
    assert member.group_instance_id == "static-1"
    assert member.member_id == rejoined.member_id
    second.close()


# ---------------------------------------------------------------- aiokafka

def test_aiokafka_group_commit_resume_and_split(broker, admin):
    topic, group = _topic(admin, 4), f"aio-{uuid.uuid4().hex[:6]}"
    _produce(broker, topic, 4, 0, 40)

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                **GROUP_TIMEOUTS)

    async def drain(members: list[AIOKafkaConsumer], expected: int,
                    timeout: float = 30) -> list[int]:
        values: list[int] = []
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            for member in members:
                batches = await member.getmany(timeout_ms=100)
                for batch in batches.values():
                    values.extend(int(r.value) for r in batch)
                if batches:
                    await member.commit()
        return values

    async def scenario() -> None:
        one = consumer()
        await one.start()
        values = await drain([one], 20)
        assert len(values) >= 20
        two = consumer()
        await two.start()
        # Both poll while the group rebalances; then each owns two partitions.
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not (
                len(one.assignment()) == 2 and len(two.assignment()) == 2):
            for member in (one, two):
                batches = await member.getmany(timeout_ms=100)
                for batch in batches.values():
                    values.extend(int(r.value) for r in batch)
                if batches:
                    await member.commit()
        assert len(one.assignment()) == len(two.assignment()) == 2
        assert one.assignment() | two.assignment() == {AioTP(topic, p) for p in range(4)}
        values += await drain([one, two], 40 - len(values))
        assert sorted(values) == list(range(40))
        await one.stop()
        await two.stop()
        # A new member resumes after the committed offsets.
        _produce(broker, topic, 4, 40, 8)
        three = consumer()
        await three.start()
        values = await drain([three], 8)
        values += await drain([three], 1, timeout=0.5)  # and nothing more
        assert sorted(values) == list(range(40, 48))
        committed = {p: await three.committed(AioTP(topic, p)) for p in range(4)}
        assert committed == {p: 12 for p in range(4)}
        await three.stop()

    asyncio.run(asyncio.wait_for(scenario(), 120))
