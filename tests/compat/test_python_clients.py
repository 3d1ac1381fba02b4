"""kafka-python and aiokafka against a real Odradek broker: admin, produce, consume."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

KAFKA_PYTHON_CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
AIOKAFKA_CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- kafka-python

def test_kafka_python_admin(odradek_broker):
    admin = KafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
    name = _topic("kp-admin")
    try:
        admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=1)])
        assert name in admin.list_topics()
        described = admin.describe_topics([name])
        assert len(described[0]["partitions"]) == 4
        admin.delete_topics([name])
        assert name not in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS)
def test_kafka_python_produce_consume(odradek_broker, acks, codec):
    name = _topic(f"kp-{codec}-{acks}")
    admin = KafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=odradek_broker.bootstrap, acks=acks,
                             compression_type=codec, linger_ms=5)
    futures = [
        producer.send(name, key=f"k{i}".encode(), value=f"v{i}".encode(),
                      headers=[("n", str(i).encode())], timestamp_ms=1_600_000_000_000 + i)
        for i in range(50)
    ]
    producer.flush(30)
    metadata = [f.get(timeout=30) for f in futures]
    if acks != 0:
        assert [md.offset for md in metadata] == list(range(50))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = TopicPartition(name, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == 50:
            break
    assert consumer.end_offsets([tp])[tp] == 50
    assert consumer.beginning_offsets([tp])[tp] == 0
    consumer.close()
    assert [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in got] == [
        (i, f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode())],
         1_600_000_000_000 + i) for i in range(50)]


def test_kafka_python_offsets_for_times_and_seek(odradek_broker):
    name = _topic("kp-times")
    producer = KafkaProducer(bootstrap_servers=odradek_broker.bootstrap)
    for i in range(20):
        producer.send(name, value=f"{i}".encode(), timestamp_ms=5_000_000 + 10 * i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = TopicPartition(name, 0)
    found = consumer.offsets_for_times({tp: 5_000_000 + 95})
    assert found[tp].offset == 10 and found[tp].timestamp == 5_000_000 + 100
    consumer.assign([tp])
    consumer.seek(tp, 15)
    values = []
    for msg in consumer:
        values.append(int(msg.value))
        if len(values) == 5:
            break
    consumer.close()
    assert values == [15, 16, 17, 18, 19]


# ---------------------------------------------------------------- aiokafka

@pytest.mark.parametrize("codec", AIOKAFKA_CODECS)
def test_aiokafka_produce_consume(odradek_broker, codec):
    async def scenario() -> None:
        name = _topic(f"aio-{codec}")
        admin = AIOKafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(name, num_partitions=2, replication_factor=1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap,
                                    compression_type=codec, acks="all")
        await producer.start()
        try:
            for i in range(40):
                md = await producer.send_and_wait(
                    name, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                    headers=[("h", b"x")], timestamp_ms=1_700_000_000_000 + i)
                assert md.offset == i // 2
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tps = [AioTP(name, 0), AioTP(name, 1)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got = []
            async with asyncio.timeout(20):
                while len(got) < 40:
                    batch = await consumer.getmany(timeout_ms=1000)
                    for msgs in batch.values():
                        got.extend(msgs)
            end = await consumer.end_offsets(tps)
        finally:
            await consumer.stop()
        assert end == {tps[0]: 20, tps[1]: 20}
        assert sorted(int(m.value[1:]) for m in got) == list(range(40))
        for m in got:
            assert m.key == b"k" + m.value[1:]
            assert list(m.headers) == [("h", b"x")]
            assert m.timestamp == 1_700_000_000_000 + int(m.value[1:])

    asyncio.run(scenario())
