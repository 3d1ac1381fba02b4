"""Batches written by kafka-python and confluent-kafka (librdkafka), in every codec, read by
Odradek's consumer from a real broker."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaProducer

from odradek.client import Admin, Consumer, NewTopic, TopicPartition

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
COUNT = 120


def _expected() -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    return [(b"k%d" % i, (b"value %d " % i) * 8, [("n", b"%d" % i)], 1_650_000_000_000 + i)
            for i in range(COUNT)]


def _create(broker, topic: str) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])


def _read(broker, topic: str) -> list:
    records: list = []
    with Consumer({"bootstrap.servers": broker.bootstrap,
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 30
        while len(records) < COUNT and time.monotonic() < deadline:
            records.extend(consumer.poll(500))
    return records


def _check(records: list) -> None:
    got = [(r.key, r.value, r.headers, r.timestamp) for r in records]
    assert got == _expected()
    assert [r.offset for r in records] == list(range(COUNT))


@pytest.mark.parametrize("codec", CODECS)
def test_reads_kafka_python_batches(odradek_broker, codec):
    topic = f"from-kp-{codec}-{uuid.uuid4().hex[:6]}"
    _create(odradek_broker, topic)
    producer = KafkaProducer(bootstrap_servers=odradek_broker.bootstrap,
                             compression_type=None if codec == "none" else codec, linger_ms=50)
    for key, value, headers, timestamp in _expected():
        producer.send(topic, value, key=key, headers=headers, timestamp_ms=timestamp)
    producer.flush(30)
    producer.close()
    _check(_read(odradek_broker, topic))


@pytest.mark.parametrize("codec", CODECS)
def test_reads_confluent_kafka_batches(odradek_broker, codec):
    topic = f"from-rdk-{codec}-{uuid.uuid4().hex[:6]}"
    _create(odradek_broker, topic)
    producer = ConfluentProducer({"bootstrap.servers": odradek_broker.bootstrap,
                                  "compression.codec": codec, "linger.ms": 50})
    for key, value, headers, timestamp in _expected():
        producer.produce(topic, value, key=key, headers=headers, timestamp=timestamp)
    assert producer.flush(30) == 0
    _check(_read(odradek_broker, topic))
