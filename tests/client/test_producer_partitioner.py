"""Key -> partition like Kafka's Java client: murmur2 vectors, and the same partitions as
librdkafka's ``murmur2_random`` partitioner for 10k keys on a real broker."""

from __future__ import annotations

import random
import time
import uuid

from confluent_kafka import Producer as ConfluentProducer

from odradek.client import Admin, NewTopic, Producer
from odradek.client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def test_murmur2_matches_kafka_utils_vectors():
    # Kafka's UtilsTest.testMurmur2 cases.
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, expected in cases.items():
        assert _signed(murmur2(key)) == expected
    assert murmur2(b"") == murmur2(bytearray()) == murmur2(memoryview(b""))
    assert to_positive(-1) == 0x7FFFFFFF


def test_sticky_partitioner_picks_available_partitions_and_switches():
    partitioner = StickyPartitioner(100, rng=random.Random(7))
    first = partitioner.partition("t", 4, [1, 3])
    assert first in (1, 3)
    assert partitioner.partition("t", 4, [1, 3]) == first
    partitioner.on_append("t", first, 60, 4, [1, 3])
    assert partitioner.partition("t", 4, [1, 3]) == first  # 60 < batch.size
    partitioner.on_append("t", first, 60, 4, [1, 3])
    assert partitioner.partition("t", 4, [1, 3]) == ({1, 3} - {first}).pop()


def test_adaptive_partitioning_prefers_short_queues():
    queues = {0: 50, 1: 0, 2: 50}
    partitioner = StickyPartitioner(1, queue_sizes=lambda topic: queues, rng=random.Random(1))
    # The first sticky partition of each topic: weighted by (longest queue + 1 - queue).
    chosen = [partitioner.partition(f"t{i}", 3, [0, 1, 2]) for i in range(300)]
    assert chosen.count(1) > 0.8 * len(chosen)


def test_same_partitions_as_librdkafka_murmur2_random(odradek_broker):
    topic = f"murmur-{uuid.uuid4().hex[:8]}"
    partitions = 7
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    keys = [f"user-{i}-{uuid.uuid5(uuid.NAMESPACE_DNS, str(i)).hex[:i % 13]}".encode()
            for i in range(10_000)]

    theirs: dict[bytes, int] = {}

    def delivered(error, message):
        assert error is None, error
        theirs[message.key()] = message.partition()

    confluent = ConfluentProducer({"bootstrap.servers": odradek_broker.bootstrap,
                                   "partitioner": "murmur2_random", "linger.ms": 20})
    for key in keys:
        while True:
            try:
                confluent.produce(topic, b"v", key=key, on_delivery=delivered)
                break
            except BufferError:
                confluent.poll(0.05)
        confluent.poll(0)
    deadline = time.monotonic() + 60
    while confluent.flush(1) and time.monotonic() < deadline:
        pass
    assert len(theirs) == len(keys)

    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 20}) as producer:
        futures = {key: producer.send(topic, b"v", key=key) for key in keys}
        producer.flush(60)
        ours = {key: future.get(0).partition for key, future in futures.items()}

    assert ours == theirs
    assert all(partition_for_key(key, partitions) == theirs[key] for key in keys)
    assert len(set(theirs.values())) == partitions  # the keys really spread
