"""Key -> partition like Kafka's Java client: murmur2 vectors, and the same partitions as
librdkafka's ``murmur2_random`` partitioner for 10k keys on a real broker."""

from __future__ import annotations

import random
import time
import uuid

from confluent_kafka import Producer as ConfluentProducer

from odradek.client import Admin, NewTopic, Producer
from odradek.client.accumulator import RecordAccumulator
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


def test_sticky_partition_takes_available_partitions_and_switches_after_batch_size():
    accumulator = RecordAccumulator(batch_size=100, linger_ms=0, buffer_memory=1 << 20,
                                    delivery_timeout_ms=60_000)
    accumulator.partitioner = StickyPartitioner(rng=random.Random(7))
    topic = accumulator.topic_queues("t", 4, [1, 3])

    def keyless(size: int) -> int:
        future, _ = accumulator.append(topic, None, 0, None, b"v", None, None, size)
        return future._result.tp.partition  # the batch it joined, before any send

    first = keyless(60)
    assert first in (1, 3)
    assert topic.sticky == first  # 60 < batch.size: the next record goes there too
    assert keyless(60) == first
    assert topic.sticky == ({1, 3} - {first}).pop()  # 120 >= batch.size: switched
    assert keyless(10) == topic.sticky != first
    keyed, _ = accumulator.append(topic, 0, 0, b"k", b"v", None, None, 10)
    assert keyed._result.tp.partition == 0


def test_adaptive_partitioning_prefers_short_queues():
    queues = {0: 50, 1: 0, 2: 50}
    partitioner = StickyPartitioner(queue_sizes=lambda topic: queues, rng=random.Random(1))
    # Each draw is weighted by (longest queue + 1 - queue).
    chosen = [partitioner.next_partition(f"t{i}", 3, [0, 1, 2], -1) for i in range(300)]
    assert chosen.count(1) > 0.8 * len(chosen)
    assert {partitioner.next_partition("t", 3, [0, 1, 2], 1) for _ in range(50)} <= {0, 2}


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
