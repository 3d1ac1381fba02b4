"""Consumer group members for the group compatibility tests: librdkafka consumers in threads
or in child processes, and small helpers to watch a group through the Odradek admin client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer as LibrdkafkaConsumer
from confluent_kafka import KafkaException, Producer

from odradek.client import Admin, Consumer, ConsumerRebalanceListener, NewTopic
from odradek.client.admin_groups import group_state
from odradek.protocol.errors import KafkaError

# Short sessions and frequent heartbeats keep rebalances quick in tests.
FAST_GROUP_CONFIG = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "topic.metadata.refresh.interval.ms": 1000,
}


# A broker for the KIP-848 tests: few offsets partitions, no initial rebalance delay, and
# 500 ms heartbeats so that rebalances settle quickly.
KIP848_BROKER_OVERRIDES = {"offsets.topic.num.partitions": "4",
                           "group.initial.rebalance.delay.ms": "0",
                           "group.consumer.min.heartbeat.interval.ms": "500",
                           "group.consumer.heartbeat.interval.ms": "500"}


def consumer_config(bootstrap: str, group: str, **overrides: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group, **FAST_GROUP_CONFIG, **overrides}


class ThreadMember(threading.Thread):
    """A librdkafka consumer polling in its own thread. Each record is committed
    synchronously; it counts as consumed only once its commit succeeded (a failed commit means
    the record is redelivered to the partition's next owner)."""

    def __init__(self, config: dict[str, Any], topics: list[str],
                 consumed: list[tuple[int, int]], lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.topics = topics
        self.consumed = consumed
        self.lock = lock
        self.stopping = threading.Event()
        self.assigned: set[int] = set()
        self.assign_calls: list[list[int]] = []
        self.revoke_calls: list[list[int]] = []
        self.errors: list[str] = []
        self.member_id: str | None = None

    def run(self) -> None:
        consumer = LibrdkafkaConsumer(self.config)

        def on_assign(_consumer: Any, partitions: list[Any]) -> None:
            self.assign_calls.append(sorted(p.partition for p in partitions))
            self.assigned.update(p.partition for p in partitions)

        def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
            self.revoke_calls.append(sorted(p.partition for p in partitions))
            self.assigned.difference_update(p.partition for p in partitions)

        consumer.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.1)
                self.member_id = consumer.memberid() or self.member_id
                if message is None:
                    continue
                if message.error():
                    self.errors.append(str(message.error()))
                    continue
                try:
                    consumer.commit(message=message, asynchronous=False)
                except KafkaException as exc:
                    self.errors.append(str(exc))
                    continue
                with self.lock:
                    self.consumed.append((message.partition(), message.offset()))
        finally:
            consumer.close()

    def stop(self, timeout: float = 30) -> None:
        self.stopping.set()
        self.join(timeout)
        assert not self.is_alive(), "consumer thread did not stop"


# A member in a child process (to be SIGKILLed): prints "<partition> <offset>" per record
# once its commit succeeded.
_CHILD = """
import json, sys
from confluent_kafka import Consumer, KafkaException
config, topics = json.loads(sys.argv[1]), json.loads(sys.argv[2])
consumer = Consumer(config)
consumer.subscribe(topics)
while True:
    message = consumer.poll(0.1)
    if message is None or message.error():
        continue
    try:
        consumer.commit(message=message, asynchronous=False)
    except KafkaException:
        continue
    print(message.partition(), message.offset(), flush=True)
"""


class ProcessMember:
    def __init__(self, config: dict[str, Any], topics: list[str],
                 consumed: list[tuple[int, int]], lock: threading.Lock) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(config), json.dumps(topics)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.reader = threading.Thread(target=self._read, args=(consumed, lock), daemon=True)
        self.reader.start()

    def _read(self, consumed: list[tuple[int, int]], lock: threading.Lock) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            partition, offset = map(int, line.split())
            with lock:
                consumed.append((partition, offset))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.reader.join(10)


def wait_for(condition: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def group_shape(admin: Admin, group: str) -> tuple[str, list[int]]:
    """(state, sorted partition counts of the members) as DescribeGroups says; ("Dead", [])
    before the group exists (Kafka 4.0's admin answers GROUP_ID_NOT_FOUND)."""
    description = admin.describe_groups([group], raise_errors=False)[group]
    if group_state(description) == "Dead":
        return "Dead", []
    return description.state, sorted(len(m.assignment) for m in description.members)


def create_topic(bootstrap: str, partitions: int, prefix: str = "groups") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    return name


def produce_spread(bootstrap: str, topic: str, partitions: int, start: int,
                   count: int) -> None:
    """Records i in [start, start + count), value str(i), to partition i % partitions: record
    i ends up at offset i // partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode(),
                         partition=i % partitions)
    assert producer.flush(30) == 0


# ------------------------------------------------------------------------------------------
# members of KIP-848 groups (tests and bench/group_protocol_bench.py)


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.revoked: list[set[int]] = []
        self.assigned: list[set[int]] = []
        self.lost: list[set[int]] = []

    def on_partitions_revoked(self, partitions):
        self.revoked.append({tp.partition for tp in partitions})

    def on_partitions_assigned(self, partitions):
        self.assigned.append({tp.partition for tp in partitions})

    def on_partitions_lost(self, partitions):
        self.lost.append({tp.partition for tp in partitions})


class OdradekMember(threading.Thread):
    """Odradek's consumer (group.protocol=consumer) polling in its own thread; it commits what
    it polled after every poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **config})
        self.topic = topic
        self.listener = Recorder()
        self.owned: set[int] = set()
        self.values: list[int] = []
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        self.consumer.subscribe([self.topic], listener=self.listener)
        try:
            while not self.stop.is_set():
                records = self.consumer.poll(50)
                if records:
                    self.values.extend(_number_or_bytes(r.value) for r in records)
                    try:
                        self.consumer.commit()
                    except KafkaError as exc:  # a commit racing a revocation: redelivered
                        self.errors.append(repr(exc))
                self.owned = {tp.partition for tp in self.consumer.assignment()}
        finally:
            self.consumer.close()


class LibrdkafkaMember(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str,
                 protocol: str = "consumer") -> None:
        super().__init__(daemon=True)
        config = {"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:  # classic, cooperative, with quick heartbeats
            config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                           "partition.assignment.strategy": "cooperative-sticky"})
        self.config = config
        self.topic = topic
        self.owned: set[int] = set()
        self.values: list[int] = []
        self.revoked: list[set[int]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        def on_revoke(_consumer, partitions):
            self.revoked.append({p.partition for p in partitions})

        # Made and closed in this thread whatever happens: a librdkafka consumer left to the
        # garbage collector closes in rd_kafka_destroy, which can block the collecting thread
        # for good once the test's broker is gone (a whole CI run hung on one).
        self.consumer = LibrdkafkaConsumer(self.config)
        try:
            self.consumer.subscribe([self.topic], on_revoke=on_revoke)
            while not self.stop.is_set():
                message = self.consumer.poll(0.05)
                if message is not None and message.error() is None:
                    self.values.append(_number_or_bytes(message.value()))
                    try:
                        self.consumer.commit(message, asynchronous=False)
                    except KafkaException as exc:  # racing a revocation: redelivered
                        self.errors.append(str(exc))
                self.owned = {tp.partition for tp in self.consumer.assignment()}
        finally:
            self.consumer.close()


def _number_or_bytes(value: bytes) -> int | bytes:
    """Records of produce_spread are numbers; other tests' records stay bytes."""
    return int(value) if value.isdigit() else value
