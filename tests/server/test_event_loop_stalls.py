"""The event loop every request shares is never held: the stall monitor and the fsync check
(server/loop_monitor.py), and a broker under produce/fetch load with segment rolls and
retention that shows neither a stall over the bound nor an fsync on the loop's thread."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
from broker_process import BrokerProcess, wait_until

from odradek.protocol.records.builder import RecordBatchBuilder
from odradek.server.loop_monitor import FsyncOnLoopCheck, LoopStallMonitor
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

STALL_BOUND_MS = 1000  # what the broker test allows; the fsync check catches short blocks


def _block_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # a blocking call on the loop's thread, on purpose


def test_stall_monitor_reports_the_blocking_function():
    async def scenario() -> LoopStallMonitor:
        monitor = LoopStallMonitor(asyncio.get_running_loop(), threshold_ms=100)
        monitor.start()
        try:
            await asyncio.sleep(0.2)  # idle: nothing to report
            assert monitor.stats.stalls == 0
            asyncio.get_running_loop().call_soon(_block_the_loop_for, 0.4)
            await asyncio.sleep(0.05)
            # The report comes with the loop's next beat after the stall.
            deadline = time.monotonic() + 5
            while monitor.stats.stalls == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        finally:
            monitor.stop()
        return monitor

    monitor = asyncio.run(scenario())
    assert monitor.stats.stalls == 1
    assert 300 <= monitor.stats.longest_ms < 5000
    stall = monitor.stats.recent[-1]
    assert not stall.starved
    assert "_block_the_loop_for" in stall.stack


def test_fsync_check_counts_only_the_loop_thread():
    check = FsyncOnLoopCheck()
    check.install()
    try:
        fd = os.open(__file__, os.O_RDONLY)
        try:
            worker = threading.Thread(target=os.fsync, args=(fd,))
            worker.start()
            worker.join()
            assert check.calls == 0
            os.fsync(fd)
            assert check.calls == 1
        finally:
            os.close(fd)
    finally:
        check.uninstall()
    assert os.fsync.__module__ in ("posix", "os")  # uninstalled: the original is back


def test_roll_leaves_its_fsyncs_to_the_background_flush(tmp_path: Path):
    """Kafka's roll writes the producer snapshot and schedules the old segment's flush
    (KAFKA-9693): the appending thread makes no fsync; the background flush makes them."""
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=1024))
    log.flush_rolled()  # the new log's own directory entry and partition files
    check = FsyncOnLoopCheck()
    check.install()  # this thread plays the event loop's
    try:
        for i in range(40):
            builder = RecordBatchBuilder(base_offset=0)
            builder.append(int(time.time() * 1000), None, b"v" * 100)
            log.append_as_leader(builder.build(), leader_epoch=0)
        assert len(log.segments) > 2  # it rolled
        log.roll()
        # Neither the rolls nor the first append's leader-epoch checkpoint fsynced here.
        assert check.calls == 0, "an fsync on the appending thread"
        assert log.background_flush_due()
        flusher = threading.Thread(target=log.flush_rolled)
        flusher.start()
        flusher.join()
        assert check.calls == 0
        assert not log.background_flush_due()
        assert log.recovery_point >= log.segments[-1].base_offset
    finally:
        check.uninstall()
        log.close()


@pytest.mark.timeout(300)
def test_broker_loop_never_blocked_under_load_with_rolls_and_retention(tmp_path: Path):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess(tmp_path, {
        "event.loop.stall.warn.ms": str(STALL_BOUND_MS),
        "event.loop.fsync.check": "true",
        "log.retention.bytes": str(2 * 1024 * 1024),
        "log.retention.check.interval.ms": "300",
        "log.segment.delete.delay.ms": "0",
    }).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # A roll every ~500 records of 1 KiB (a topic's segment.bytes may be below the 1 MiB
        # Kafka 4.0 requires of the broker's log.segment.bytes).
        admin.create_topics([NewTopic("load", 3, 1, config={"segment.bytes": str(512 * 1024)})]
                            )["load"].result(30)
        # Before the measured window: the first produce's metadata and connections, and
        # __consumer_offsets' creation for the consumer's group.
        warm = Producer({"bootstrap.servers": broker.bootstrap})
        for partition in range(3):
            warm.produce("load", b"warm", partition=partition)
        assert warm.flush(30) == 0
        admin.describe_consumer_groups(["loop-load"])["loop-load"].result(60)
        window_start = broker.log_path.stat().st_size

        consumed = [0]
        stop = threading.Event()

        def consume() -> None:
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "loop-load",
                                 "enable.auto.commit": False, "auto.offset.reset": "earliest"})
            consumer.assign([TopicPartition("load", p, 0) for p in range(3)])
            while not stop.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    consumed[0] += 1
            consumer.close()

        reader = threading.Thread(target=consume)
        reader.start()
        errors: list[str] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "linger.ms": 5, "batch.size": 64 * 1024})
        value = b"v" * 1024
        total = 20_000  # 20 MB: ~40 rolls and ~30 segments deleted
        for _ in range(total):
            while True:
                try:
                    producer.produce("load", value,
                                     on_delivery=lambda err, _m: err and errors.append(str(err)))
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(120) == 0
        assert not errors, errors[:3]
        wait_until(lambda: consumed[0] > 1000, 60, message="the consumer to read")
        # Retention ran (every log.retention.check.interval.ms, by the housekeeping thread):
        # the partitions' log start moves past their first segments.
        probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
        wait_until(lambda: probe.get_watermark_offsets(TopicPartition("load", 0),
                                                       timeout=10)[0] > 0,
                   30, interval=0.2, message="retention to delete segments")
        probe.close()
        stop.set()
        reader.join(30)
        with open(broker.log_path, "rb") as log_file:
            log_file.seek(window_start)
            window = log_file.read().decode(errors="replace")
    finally:
        broker.stop()
    assert "on the event loop's thread" not in window, window[:4000]
    assert "event loop blocked" not in window, window[:4000]
