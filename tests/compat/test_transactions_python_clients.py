"""kafka-python and aiokafka transactional producers against a real Odradek broker.

The core cases of issue 16 for the two pure-Python clients: a committed transaction is seen by
read_committed consumers, an aborted one is not (read_uncommitted sees its records), and
consume-transform-produce commits the group's offsets in the transaction. Each "not seen"
check reads up to a sentinel committed after the aborted records, so it waits on a condition,
not on a quiet period.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTP
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

TIMEOUT_S = 30


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1)
                             for n in names])
    finally:
        admin.close()


def _read_until(bootstrap: str, topic: str, isolation: str, stop_value: bytes,
                partitions: int = 2) -> list[bytes]:
    """Values read from every partition of `topic` until `stop_value` has been read."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while stop_value not in values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    assert stop_value in values, f"{isolation} never read {stop_value!r}: {values}"
    return values


# ---------------------------------------------------------------- kafka-python

def _kp_producer(bootstrap: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    producer.init_transactions()
    return producer


def test_kafka_python_commit_and_abort(odradek_broker):
    bootstrap = odradek_broker.bootstrap
    topic = _topic("kp-txn")
    _create(bootstrap, topic)
    producer = _kp_producer(bootstrap)
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, value=f"committed-{i}".encode(), partition=i % 2)
        producer.commit_transaction()

        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, value=f"aborted-{i}".encode(), partition=i % 2)
        producer.flush()
        producer.abort_transaction()

        producer.begin_transaction()
        producer.send(topic, value=b"sentinel", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()

    committed = _read_until(bootstrap, topic, "read_committed", b"sentinel")
    assert sorted(committed) == sorted([f"committed-{i}".encode() for i in range(10)]
                                       + [b"sentinel"])
    uncommitted = _read_until(bootstrap, topic, "read_uncommitted", b"sentinel")
    assert sum(v.startswith(b"aborted-") for v in uncommitted) == 10


def test_kafka_python_consume_transform_produce(odradek_broker):
    bootstrap = odradek_broker.bootstrap
    source, sink = _topic("kp-in"), _topic("kp-out")
    group = f"kp-ctp-{uuid.uuid4().hex[:8]}"
    _create(bootstrap, source, sink, partitions=1)
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(20):
        plain.send(source, value=f"in-{i}".encode())
    plain.flush()
    plain.close()

    consumer = KafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level="read_committed")
    producer = _kp_producer(bootstrap)
    seen: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(seen) < 20 and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500)
            if not batch:
                continue
            producer.begin_transaction()
            offsets = {}
            for tp, records in batch.items():
                for record in records:
                    seen.append(record.value)
                    producer.send(sink, value=record.value.replace(b"in-", b"out-"))
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
    finally:
        producer.close()
        consumer.close()
    assert len(seen) == 20

    # The offsets become visible once the coordinator's markers are written, which follows
    # the EndTxn answer: poll for them.
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    committed = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while TopicPartition(source, 0) not in committed and time.monotonic() < deadline:
            committed = admin.list_group_offsets(group).get(group, {})
            time.sleep(0.1)
    finally:
        admin.close()
    assert committed[TopicPartition(source, 0)].offset == 20, committed
    outputs = _read_until(bootstrap, sink, "read_committed", b"out-19", partitions=1)
    assert outputs == [f"out-{i}".encode() for i in range(20)]


# ---------------------------------------------------------------- aiokafka

def test_aiokafka_commit_and_abort(odradek_broker):
    bootstrap = odradek_broker.bootstrap
    topic = _topic("aio-txn")
    _create(bootstrap, topic)

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    transactional_id=f"aio-{uuid.uuid4().hex[:8]}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send(topic, value=f"committed-{i}".encode(),
                                        partition=i % 2)
            await producer.begin_transaction()
            for i in range(10):
                await producer.send_and_wait(topic, value=f"aborted-{i}".encode(),
                                             partition=i % 2)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic, value=b"sentinel", partition=1)
        finally:
            await producer.stop()
        return (await _aio_read_until(bootstrap, topic, "read_committed", b"sentinel"),
                await _aio_read_until(bootstrap, topic, "read_uncommitted", b"sentinel"))

    committed, uncommitted = asyncio.run(scenario())
    assert sorted(committed) == sorted([f"committed-{i}".encode() for i in range(10)]
                                       + [b"sentinel"])
    assert sum(v.startswith(b"aborted-") for v in uncommitted) == 10


async def _aio_read_until(bootstrap: str, topic: str, isolation: str,
                          stop_value: bytes) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    values: list[bytes] = []
    try:
        consumer.assign([AioTP(topic, 0), AioTP(topic, 1)])
        deadline = time.monotonic() + TIMEOUT_S
        while stop_value not in values and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                values.extend(r.value for r in records)
    finally:
        await consumer.stop()
    assert stop_value in values, f"{isolation} never read {stop_value!r}: {values}"
    return values
