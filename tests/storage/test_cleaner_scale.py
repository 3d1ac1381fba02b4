"""A compacted topic at scale in a real broker: updates, deletes (null values), every codec and
headers, written by confluent-kafka as a delete-policy topic, made compacted at run time, and
read back by confluent-kafka and kafka-python after cleaning: exactly the latest value of each
live key, and nothing of a deleted key once `delete.retention.ms` has passed.

CI writes 100k records over 1k keys; `ODRADEK_CLEANER_SCALE_RECORDS=1000000
ODRADEK_CLEANER_SCALE_KEYS=10000` is the issue's full size (run on demand: minutes).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from broker_process import BrokerProcess, log_bytes, wait_until

from odradek.protocol.records import Compression, iter_batches
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.cleaner import CLEANER_CHECKPOINT

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

RECORDS = int(os.environ.get("ODRADEK_CLEANER_SCALE_RECORDS", "100000"))
KEYS = int(os.environ.get("ODRADEK_CLEANER_SCALE_KEYS", "1000"))
TOPIC = "table"
SEGMENT_BYTES = 1 << 20
DELETE_RETENTION_MS = 2000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
FILLER = b"filler"  # the one key written to roll the active segment (never cleaned) away


def active_base(directory: Path) -> int:
    return max(int(path.name[:20]) for path in directory.glob("*.log"))


def value_of(key: int, round_number: int) -> bytes:
    return b"%d@%d:" % (key, round_number) + b"v" * (40 + (key * 7 + round_number) % 120)


def codec_of(key: int, round_number: int) -> str:
    return CODECS[(key + round_number) % len(CODECS)]


def plan() -> list[list[tuple[int, bool]]]:
    """Rounds of (key, is a delete). Keys k % 10 == 3 are deleted for good in one of the last
    rounds; keys k % 10 == 5 are deleted mid-way and written again after."""
    rounds = max(RECORDS // KEYS, 10)
    result = []
    for round_number in range(rounds):
        writes = []
        for key in range(KEYS):
            final_delete = rounds - 1 - key % 7
            if key % 10 == 3 and round_number > final_delete:
                continue
            delete = (key % 10 == 3 and round_number == final_delete) or (
                key % 10 == 5 and round_number == rounds // 2)
            writes.append((key, delete))
        result.append(writes)
    return result


def produce_filler(producer: Producer, directory: Path, beyond: int) -> None:
    """Writes the filler key until the active segment starts after offset `beyond`."""
    value = b"f" * 4000
    while active_base(directory) <= beyond:
        for _ in range(64):
            producer.produce(TOPIC, value, FILLER)
        producer.flush(30)


def checkpointed(data_dir: Path) -> int:
    try:
        return OffsetCheckpointFile(data_dir / CLEANER_CHECKPOINT).read().get((TOPIC, 0), -1)
    except (FileNotFoundError, ValueError):
        return -1


def read_confluent(bootstrap: str) -> list[tuple[bytes, bytes | None, dict[str, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "confluent-reader",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "enable.auto.commit": False, "check.crcs": True})
    consumer.assign([ConfluentTopicPartition(TOPIC, 0, 0)])
    records = []
    try:
        while True:
            message = consumer.poll(15)
            assert message is not None, "no end of partition"
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                return records
            records.append((message.key(), message.value(), dict(message.headers() or [])))
    finally:
        consumer.close()


def read_kafka_python(bootstrap: str) -> list[tuple[bytes, bytes | None, dict[str, bytes]]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                   check_crcs=True)
    partition = kafka.TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    end = consumer.end_offsets([partition])[partition]
    records = []
    deadline = time.monotonic() + 120
    try:
        while consumer.position(partition) < end:
            assert time.monotonic() < deadline, "kafka-python did not reach the end"
            for batch in consumer.poll(timeout_ms=1000).values():
                records += [(m.key, m.value, dict(m.headers)) for m in batch]
        return records
    finally:
        consumer.close()


@pytest.mark.timeout(1800)
def test_compacted_topic_at_scale_read_by_two_clients(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"log.cleaner.backoff.ms": "200"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={
            "cleanup.policy": "delete", "segment.bytes": str(SEGMENT_BYTES),
            "delete.retention.ms": str(DELETE_RETENTION_MS),
            "min.cleanable.dirty.ratio": "0.01"})])[TOPIC].result(30)
        producers = {codec: Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                      "linger.ms": 20, "batch.size": 65536,
                                      "compression.type": codec}) for codec in CODECS}
        failures: list[object] = []

        def on_delivery(error: object, _message: object) -> None:
            if error is not None:
                failures.append(error)

        expected: dict[int, tuple[int, bytes | None]] = {}
        writes = 0
        started = time.monotonic()
        for round_number, round_writes in enumerate(plan()):
            for key, delete in round_writes:
                codec = codec_of(key, round_number)
                producer = producers[codec]
                value = None if delete else value_of(key, round_number)
                producer.produce(TOPIC, value, b"key-%d" % key, on_delivery=on_delivery,
                                 headers=[("round", b"%d" % round_number),
                                          ("codec", codec.encode())])
                expected[key] = (round_number, value)
                writes += 1
                if writes % 1000 == 0:
                    producer.poll(0)
            for producer in producers.values():  # rounds in order: a key's last write wins
                producer.flush(60)
        assert failures == []
        produce_seconds = time.monotonic() - started
        directory = broker.data_dir / f"{TOPIC}-0"
        main_end = active_base(directory)  # at least the end of the table's writes
        filler = producers["none"]
        produce_filler(filler, directory, main_end)
        bytes_written = log_bytes(directory)

        # Compaction on, at run time; the first cleaning drops every superseded record and
        # stamps the tombstones with their delete horizon...
        resource = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        cleaning_started = time.monotonic()
        wait_until(lambda: checkpointed(broker.data_dir) > main_end, 600,
                   message="the first cleaning of the table")
        first_cleaning_seconds = time.monotonic() - cleaning_started
        bytes_after_first = log_bytes(directory)
        # ...which a cleaning after delete.retention.ms removes (new dirty data triggers it).
        horizon = time.monotonic() + DELETE_RETENTION_MS / 1000
        wait_until(lambda: time.monotonic() > horizon, DELETE_RETENTION_MS / 1000 + 5,
                   message="the delete horizon")
        second_start = active_base(directory)
        produce_filler(filler, directory, second_start)
        wait_until(lambda: checkpointed(broker.data_dir) > second_start, 600,
                   message="the cleaning after the delete horizon")
        bytes_cleaned = log_bytes(directory)
        for producer in producers.values():
            producer.flush(10)

        live = {b"key-%d" % key: (round_number, value)
                for key, (round_number, value) in expected.items() if value is not None}
        deleted = {b"key-%d" % key for key, (_r, value) in expected.items() if value is None}
        for client, read in (("confluent-kafka", read_confluent),
                             ("kafka-python", read_kafka_python)):
            records = [r for r in read(broker.bootstrap) if r[0] != FILLER]
            counts = Counter(key for key, _value, _headers in records)
            assert not deleted & counts.keys(), f"{client}: deleted keys still there"
            assert set(counts) == set(live), f"{client}: live keys differ"
            assert max(counts.values()) == 1, f"{client}: a key appears more than once"
            for key, value, headers in records:
                round_number, expected_value = live[key]
                assert value == expected_value, f"{client}: {key!r}"
                assert headers == {"round": b"%d" % round_number,
                                   "codec": codec_of(int(key[4:]), round_number).encode()}
        # The cleaned batches kept their codecs.
        codecs = set()
        for path in sorted(directory.glob("*.log")):
            data = path.read_bytes()
            codecs |= {header.compression for _position, header in iter_batches(data)}
        assert codecs == set(Compression)
        print(f"{writes} writes over {KEYS} keys ({len(live)} live, {len(deleted)} deleted) in "
              f"{produce_seconds:.1f}s; {TOPIC}-0: {bytes_written} bytes written (with "
              f"{FILLER.decode()} segments), {bytes_after_first} after the first cleaning "
              f"({first_cleaning_seconds:.1f}s), {bytes_cleaned} after the tombstones went")
        assert bytes_cleaned < bytes_written / 10
    finally:
        broker.stop()
