"""Producing and consuming test data with confluent-kafka (an independent client)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, count, 1) for name, count in partitions.items()])
    for future in futures.values():
        future.result(30)


def produce(bootstrap: str, topic: str, records: Iterable[Sequence]) -> None:
    """Records as (partition, key, value[, headers[, timestamp_ms]]); waits for every ack."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failures = []

    def delivered(error, _message):
        if error is not None:
            failures.append(error)

    for partition, key, value, *rest in records:
        headers = rest[0] if rest else None
        timestamp = rest[1] if len(rest) > 1 else 0
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers,
                         timestamp=timestamp, on_delivery=delivered)
    assert producer.flush(30) == 0, "records still unacknowledged after 30 s"
    assert not failures, failures


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30
                ) -> list[Message]:
    """Every record of `topic` (up to its current end), in offset order per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                         "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        positions = {p: 0 for p in range(partitions)}
        records: list[Message] = []
        deadline = time.monotonic() + timeout
        while any(positions[p] < ends[p] for p in positions):
            assert time.monotonic() < deadline, f"read {len(records)} records of {topic} in time"
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                records.append(message)
                positions[message.partition()] = message.offset() + 1
        return records
    finally:
        consumer.close()


def consume_to_end(bootstrap: str, topic: str, partitions: int, isolation: str,
                   timeout: float = 30) -> list[Message]:
    """Every record of `topic` an `isolation` consumer reads up to the end of each partition
    (librdkafka reports the end: the high watermark, or the last stable offset for
    read_committed, past any transaction markers)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        records: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read {len(records)} records of {topic} in time"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                assert error is None, error
                records.append(message)
        return records
    finally:
        consumer.close()
