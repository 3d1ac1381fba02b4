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
    consumer.seek(tp, found[tp].offset)  # from a timestamp
    values = []
    for msg in consumer:
        values.append(int(msg.value))
        if len(values) == 10:
            break
    assert values == list(range(10, 20))
    consumer.seek(tp, 15)  # from an offset
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


def test_kafka_python_consume_from_latest(odradek_broker):
    name = _topic("kp-latest")
    producer = KafkaProducer(bootstrap_servers=odradek_broker.bootstrap)
    for i in range(5):
        producer.send(name, value=f"old-{i}".encode())
    producer.flush(30)
    consumer = KafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = TopicPartition(name, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 5
    producer.send(name, value=b"new")
    producer.flush(30)
    producer.close()
    msg = next(iter(consumer))
    consumer.close()
    assert (msg.offset, msg.value) == (5, b"new")


def test_kafka_python_admin_describe_configs(odradek_broker):
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
    name = _topic("kp-configs")
    try:
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                      topic_configs={"retention.ms": "7200000"})])
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        modified = admin.describe_configs([resource])["topic"][name]
        assert list(modified) == ["retention.ms"]
        assert modified["retention.ms"]["value"] == "7200000"
        assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        every = admin.describe_configs([resource], config_filter="all")["topic"][name]
        assert every["cleanup.policy"]["value"] == "delete"
        assert every["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    finally:
        admin.close()


def _aio_topic_exists(topics: list, name: str) -> bool:
    return any(t["topic"] == name and t["error_code"] == 0 for t in topics)


def test_aiokafka_admin_create_describe_delete(odradek_broker):
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def scenario() -> None:
        name = _topic("aio-admin")
        admin = AIOKafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics([AioNewTopic(
                name, num_partitions=3, replication_factor=1,
                topic_configs={"retention.ms": "3600000"})])
            assert [(t[0], t[1]) for t in created.topic_errors] == [(name, 0)]
            again = await admin.create_topics([AioNewTopic(name, 1, 1)])
            assert again.topic_errors[0][1] == 36  # TOPIC_ALREADY_EXISTS
            assert name in await admin.list_topics()
            [described] = await admin.describe_topics([name])
            assert described["error_code"] == 0
            assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2]
            assert all(p["leader"] == 1 for p in described["partitions"])
            [configs] = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name)])
            entries = {e[0]: e[1] for e in configs.resources[0][4]}
            assert entries["retention.ms"] == "3600000"
            deleted = await admin.delete_topics([name])
            assert [(t[0], t[1]) for t in deleted.topic_error_codes] == [(name, 0)]
            assert name not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_aiokafka_acks(odradek_broker, acks):
    async def scenario() -> None:
        name = _topic(f"aio-acks{acks}")
        producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap, acks=acks)
        await producer.start()
        try:
            delivered = [await producer.send_and_wait(name, key=f"k{i}".encode(),
                                                      value=f"v{i}".encode())
                         for i in range(30)]
        finally:
            await producer.stop()
        if acks == 0:
            assert delivered == [None] * 30  # aiokafka reports no metadata without an answer
        else:
            assert [md.offset for md in delivered] == list(range(30))
        consumer = AIOKafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTP(name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            async with asyncio.timeout(20):
                while len(got) < 30:
                    got.extend((await consumer.getmany(tp, timeout_ms=1000)).get(tp, []))
        finally:
            await consumer.stop()
        assert [(m.offset, m.key, m.value) for m in got] == [
            (i, f"k{i}".encode(), f"v{i}".encode()) for i in range(30)]

    asyncio.run(scenario())


def test_aiokafka_positions_and_watermarks(odradek_broker):
    async def scenario() -> None:
        name = _topic("aio-positions")
        tp = AioTP(name, 0)
        producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap)
        await producer.start()
        consumer = AIOKafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(name, value=f"{i}".encode(),
                                             timestamp_ms=2_000_000 + 1000 * i)
            consumer.assign([tp])
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 10}
            found = await consumer.offsets_for_times({tp: 2_000_000 + 4500})
            assert (found[tp].offset, found[tp].timestamp) == (5, 2_005_000)

            async def take(n: int) -> list[bytes]:
                got: list = []
                async with asyncio.timeout(20):
                    while len(got) < n:
                        got.extend((await consumer.getmany(tp, timeout_ms=500)).get(tp, []))
                return [m.value for m in got]

            consumer.seek(tp, found[tp].offset)  # from a timestamp
            assert await take(5) == [b"5", b"6", b"7", b"8", b"9"]
            consumer.seek(tp, 7)  # from an offset
            assert await take(3) == [b"7", b"8", b"9"]
            await consumer.seek_to_end(tp)  # from the latest
            assert await consumer.position(tp) == 10
            await producer.send_and_wait(name, value=b"new")
            assert await take(1) == [b"new"]
        finally:
            await consumer.stop()
            await producer.stop()

    asyncio.run(scenario())


def test_python_clients_read_everything_after_restarts(fresh_broker):
    """kafka-python writes partition 0, aiokafka partition 1; after a clean restart and after a
    SIGKILL both clients read every record again."""
    broker = fresh_broker.start()
    name = _topic("py-restart")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(200):
        producer.send(name, partition=0, value=f"kp-{i}".encode())
    producer.flush(30)
    producer.close()

    async def aio_produce() -> None:
        aio = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await aio.start()
        try:
            for i in range(200):
                await aio.send(name, partition=1, value=f"aio-{i}".encode())
            await aio.flush()
        finally:
            await aio.stop()

    asyncio.run(aio_produce())
    expected = {0: [f"kp-{i}".encode() for i in range(200)],
                1: [f"aio-{i}".encode() for i in range(200)]}

    def kafka_python_read() -> dict[int, list[bytes]]:
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                 consumer_timeout_ms=10000, auto_offset_reset="earliest")
        tps = [TopicPartition(name, 0), TopicPartition(name, 1)]
        consumer.assign(tps)
        got: dict[int, list[bytes]] = {0: [], 1: []}
        for msg in consumer:
            got[msg.partition].append(msg.value)
            if sum(map(len, got.values())) == 400:
                break
        consumer.close()
        return got

    async def aiokafka_read() -> dict[int, list[bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        got: dict[int, list[bytes]] = {0: [], 1: []}
        try:
            consumer.assign([AioTP(name, 0), AioTP(name, 1)])
            async with asyncio.timeout(20):
                while sum(map(len, got.values())) < 400:
                    for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                        got[tp.partition].extend(m.value for m in msgs)
        finally:
            await consumer.stop()
        return got

    for clean in (True, False):
        broker.restart(clean=clean)
        assert kafka_python_read() == expected
        assert asyncio.run(aiokafka_read()) == expected
