"""Batches written by Odradek's producer, in every codec, read by kafka-python and
confluent-kafka (librdkafka) consumers from a real broker."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTP
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTP

from odradek.client import Admin, NewTopic, Producer

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
COUNT = 120


def _expected() -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    return [(b"k%d" % i, (b"value %d " % i) * 8, [("n", b"%d" % i)], 1_650_000_000_000 + i)
            for i in range(COUNT)]


@pytest.fixture(scope="module")
def produced(odradek_broker) -> dict[str, str]:
    """codec -> topic holding COUNT records produced by Odradek with that codec."""
    topics = {codec: f"interop-{codec}-{uuid.uuid4().hex[:6]}" for codec in CODECS}
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1) for topic in topics.values()])
    for codec, topic in topics.items():
        with Producer({"bootstrap.servers": odradek_broker.bootstrap,
                       "compression.type": codec, "linger.ms": 50}) as producer:
            for key, value, headers, timestamp in _expected():
                producer.send(topic, value, key=key, headers=headers, timestamp_ms=timestamp)
            producer.flush(30)
    return topics


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_odradek_batches(odradek_broker, produced, codec):
    consumer = KafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    tp = KafkaPythonTP(produced[codec], 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records = []
    deadline = time.monotonic() + 30
    try:
        while len(records) < COUNT and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    finally:
        consumer.close()
    got = [(r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp) for r in records]
    assert got == _expected()
    assert [r.offset for r in records] == list(range(COUNT))


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_reads_odradek_batches(odradek_broker, produced, codec):
    consumer = ConfluentConsumer({"bootstrap.servers": odradek_broker.bootstrap,
                                  "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([ConfluentTP(produced[codec], 0, 0)])
    messages = []
    deadline = time.monotonic() + 30
    try:
        while len(messages) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            messages.append(message)
    finally:
        consumer.close()
    got = [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in messages]
    assert got == _expected()
