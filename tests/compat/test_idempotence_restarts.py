"""Idempotence across broker restarts: a librdkafka idempotent producer writes a numbered
stream into one partition while the broker is restarted cleanly and then killed with SIGKILL;
the partition then holds every number once, in order (no duplicate from a retried batch, no
reordering, no gap), and the restarts loaded the partition's producer state from its snapshot
instead of scanning the log (the broker logs it, as Kafka does)."""

from __future__ import annotations

import re
import threading
import time

from broker_process import SHORT_BROKER_SESSION, BrokerProcess
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "numbers"
TIMEOUT_S = 60


def _read_all(bootstrap: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while True:
            assert time.monotonic() < deadline, f"read {len(values)} of {count}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and len(values) >= count:
                    return values
                continue
            values.append(int(msg.value()))
    finally:
        consumer.close()


def test_an_idempotent_stream_survives_clean_and_unclean_restarts(tmp_path):
    broker = BrokerProcess(tmp_path, SHORT_BROKER_SESSION).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": str(64 * 1024)})]
                            )[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                             "linger.ms": 5, "batch.size": 16384, "message.timeout.ms": 120_000,
                             "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
        failures: list = []
        sent = acknowledged = 0
        stop = threading.Event()

        def delivered(error, _msg):
            nonlocal acknowledged
            if error is not None:
                failures.append(error)
            else:
                acknowledged += 1

        def write() -> None:
            nonlocal sent
            while not stop.is_set():
                try:
                    producer.produce(TOPIC, value=str(sent).encode(), partition=0,
                                     on_delivery=delivered)
                    sent += 1
                except BufferError:
                    pass
                producer.poll(0 if sent % 100 else 0.001)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            def wait_for_more(than: int) -> None:
                """Until 10,000 more records are acknowledged (several segment rolls)."""
                deadline = time.monotonic() + TIMEOUT_S
                while acknowledged < than + 10_000:
                    assert time.monotonic() < deadline, "the producer made no progress"
                    time.sleep(0.05)

            wait_for_more(0)
            broker.restart(clean=True)
            wait_for_more(acknowledged)
            broker.restart(clean=False)  # SIGKILL: batches in flight are retried
            wait_for_more(acknowledged)
        finally:
            stop.set()
            writer.join(30)
        assert producer.flush(TIMEOUT_S) == 0
        assert not failures, failures[:3]

        values = _read_all(broker.bootstrap, sent)
        assert values == list(range(sent)), (
            f"{len(values)} records for {sent} sent: first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(values, range(sent))) if a != b), None)}")
        recoveries = re.findall(rf"{TOPIC}-0: producer state recovery took \d+ ms for snapshot "
                                r"load \(at offset (\d+)\)", broker.log_path.read_text())
        # Both restarts loaded a snapshot (the clean shutdown's, then the last segment roll's)
        # rather than replaying the log from its start.
        assert len(recoveries) == 2 and all(int(offset) > 0 for offset in recoveries), \
            recoveries
    finally:
        broker.stop()
