"""The log cleaner in a real broker process: a compacted topic written and read back by
confluent-kafka, and __consumer_offsets kept small under repeated commits of one group."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from broker_process import (
    SHORT_BROKER_SESSION,
    BrokerProcess,
    commit_repeatedly,
    log_bytes,
    wait_until,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)


@pytest.fixture
def broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    process = BrokerProcess(tmp_path, {"log.cleaner.backoff.ms": "100",
                                       "offsets.topic.num.partitions": "1",
                                       "offsets.topic.segment.bytes": "8192"}).start()
    yield process
    process.stop()


def test_compacted_topic_and_consumer_offsets_are_cleaned(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # Written as a delete-policy topic, then made compacted at run time (IncrementalAlterConfigs).
    futures = admin.create_topics([NewTopic("table", 1, 1, config={
        "cleanup.policy": "delete", "segment.bytes": "8192"})])
    futures["table"].result(30)
    # Batches must fit a (small) segment: RECORD_LIST_TOO_LARGE otherwise.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "compression.type": "lz4", "batch.size": 2048})
    errors: list[object] = []
    expected: dict[bytes, bytes] = {}
    for round_number in range(60):
        for key_number in range(50):
            key, value = b"key-%d" % key_number, b"value-%d-%d" % (key_number, round_number)
            producer.produce("table", value * 4, key, headers=[("round", b"%d" % round_number)],
                             on_delivery=lambda error, _message: errors.append(error))
            expected[key] = value * 4
        producer.poll(0)
    assert producer.flush(30) == 0
    assert set(errors) == {None}
    directory = broker.data_dir / "table-0"
    size_after_produce = log_bytes(directory)
    resource = ConfigResource(ResourceType.TOPIC, "table", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    # Every segment but the active one ends up with only the latest value of each key.
    wait_until(lambda: log_bytes(directory) < size_after_produce / 5, 60,
               message="the cleaner to compact table-0")
    size_cleaned = log_bytes(directory)
    print(f"table-0: {size_after_produce} bytes after produce, {size_cleaned} after cleaning")

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("table", 0, 0)])
    latest: dict[bytes, bytes] = {}
    read = 0
    while True:
        message = consumer.poll(10)
        assert message is not None, "no end of partition"
        if message.error():
            assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
            break
        latest[message.key()] = message.value()
        read += 1
    assert latest == expected
    assert read < 60 * 50 / 4  # the compacted prefix holds one record per key

    # One group committing over and over: __consumer_offsets stays a few segments.
    for number in range(1500):
        consumer.commit(offsets=[TopicPartition("table", 0, number)], asynchronous=False)
    consumer.close()
    offsets_dir = broker.data_dir / "__consumer_offsets-0"
    segments = lambda: sorted(offsets_dir.glob("*.log"))
    wait_until(lambda: log_bytes(offsets_dir) < 4 * 8192, 60,
               message="the cleaner to compact __consumer_offsets")
    print(f"__consumer_offsets-0 after 1500 commits: {log_bytes(offsets_dir)} bytes in "
          f"{len(segments())} segments")


def test_log_cleaner_settings_change_at_run_time(tmp_path: Path) -> None:
    """`log.cleaner.*` are dynamic broker configs, as in Kafka: a cleaner idling for
    `log.cleaner.backoff.ms` (10 minutes here) picks up a shorter backoff, a throttle and a
    second thread from IncrementalAlterConfigs at once, and cleans the waiting topic."""
    broker = BrokerProcess(tmp_path, {"log.cleaner.backoff.ms": "600000"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("waiting", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "8192",
            "min.cleanable.dirty.ratio": "0.01"})])["waiting"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "batch.size": 2048})
        for number in range(3000):
            producer.produce("waiting", b"value-%d" % number * 3, b"key-%d" % (number % 20))
            producer.poll(0)
        assert producer.flush(30) == 0
        directory = broker.data_dir / "waiting-0"
        size_before = log_bytes(directory)
        assert "cleaned Log(waiting-0" not in broker.log_path.read_text()
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in (("log.cleaner.backoff.ms", "100"),
                                ("log.cleaner.threads", "2"),
                                ("log.cleaner.io.max.bytes.per.second", "50000000"))])
        admin.incremental_alter_configs([resource])[resource].result(30)
        wait_until(lambda: log_bytes(directory) < size_before / 5, 60,
                   message="the cleaner to clean with its new backoff")
        text = broker.log_path.read_text()
        assert "log cleaner reconfigured" in text and "num_threads=2" in text
        described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
        entries = next(iter(described.values())).result(30)
        entry = entries["log.cleaner.backoff.ms"]
        assert entry.value == "100"
        assert entry.source == confluent_kafka.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    finally:
        broker.stop()


def cleaner_processes(parent_pid: int | None = None) -> list[int]:
    """Live cleaner child processes (of `parent_pid`, or any), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if b"odradek.storage.cleaner_process" in cmdline and state != "Z" \
                and (parent_pid is None or int(ppid) == parent_pid):
            found.append(int(entry.name))
    return found


def test_cleaner_process_ends_with_the_broker_killed_or_stopped(tmp_path: Path) -> None:
    """The cleaning runs in a child process: a kill -9 of the broker in the middle of a
    cleaning (paused at a step) leaves no orphan, and a clean shutdown ends it promptly."""
    from odradek.storage.cleaner import STEP_PAUSE_ENV

    broker = BrokerProcess(tmp_path, {"log.cleaner.backoff.ms": "100", **SHORT_BROKER_SESSION},
                           env={STEP_PAUSE_ENV: "3000"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("paused", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "8192",
            "min.cleanable.dirty.ratio": "0.01"})])["paused"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "batch.size": 2048})
        for number in range(2000):
            producer.produce("paused", b"value-%d" % number, b"key-%d" % (number % 20))
            producer.poll(0)
        assert producer.flush(30) == 0
        wait_until(lambda: "cleaner step map_built" in broker.log_path.read_text(), 60,
                   message="a cleaning paused in the child (offset map built)")
        children = cleaner_processes(broker.proc.pid)
        assert len(children) == 1, children
        broker.kill()
        wait_until(lambda: children[0] not in cleaner_processes(), 5,
                   message="the orphaned cleaner process to exit")

        del broker.env[STEP_PAUSE_ENV]
        broker.start()
        wait_until(lambda: "cleaned Log(paused-0" in broker.log_path.read_text(), 60,
                   message="a cleaning after the restart")
        children = cleaner_processes(broker.proc.pid)
        assert len(children) == 1, children
        started = time.monotonic()
        assert broker.stop() == 0
        assert children[0] not in cleaner_processes()
        print(f"broker stopped in {time.monotonic() - started:.2f}s, cleaner child gone")
    finally:
        broker.kill()


def test_consumer_offsets_stays_bounded_under_10k_commits_of_one_group(tmp_path: Path
                                                                       ) -> None:
    """One group committing 10,000 times (asynchronously, as fast as the broker takes them):
    `__consumer_offsets` is compacted as it grows and ends a few segments long.
    (`python -m bench cleaner` does the same with 100,000 commits and reports the sizes.)"""
    segment_bytes = 16384
    broker = BrokerProcess(tmp_path, {"log.cleaner.backoff.ms": "100",
                                      "offsets.topic.num.partitions": "1",
                                      "offsets.topic.segment.bytes": str(segment_bytes)}).start()
    try:
        report = commit_repeatedly(broker, 10_000, segment_bytes)
        print(f"__consumer_offsets-0 under 10k commits: {report}")
        # Uncompacted, the commits take about 70 segments; the cleaner keeps it a few.
        assert report["written_bytes"] > 40 * segment_bytes
        assert report["largest_bytes"] < report["written_bytes"] / 3
        assert report["final_bytes"] < 4 * segment_bytes
    finally:
        broker.stop()

