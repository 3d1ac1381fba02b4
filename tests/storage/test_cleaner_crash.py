"""SIGKILL of a real broker while its log cleaner compacts a topic, many times at random points.

The broker's cleaner is slowed by `log.cleaner.io.max.bytes.per.second` and paused at each
step of a cleaning by the fault-injection hook `ODRADEK_CLEANER_STEP_PAUSE_MS` (see
odradek.storage.cleaner), while confluent-kafka keeps producing updates and deletes of a few
hundred keys; the broker is killed at a seeded random moment. After each kill a copy of the
partition directory is loaded as the broker would load it: every batch's CRC is valid, offsets
increase, the indexes point at batches, and every key's latest acknowledged write (or a later
one that was written but not acknowledged) is there. At the end the restarted broker serves the
same to a consumer.

CI runs a few iterations (about 30 s); `ODRADEK_CLEANER_CRASH_ITERATIONS=50` runs more, and
`ODRADEK_CLEANER_CRASH_SEED` replays a run (the seed is printed).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from storage_helpers import check_log_consistency

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from broker_process import BrokerProcess, log_bytes, wait_until

from odradek.protocol.records import decode_records, iter_batches
from odradek.storage import Log, LogConfig
from odradek.storage.cleaner import STEP_PAUSE_ENV

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "changelog"
KEYS = 200
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "24576",
                "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "2000",
                "file.delete.delay.ms": "1000"}
ITERATIONS = int(os.environ.get("ODRADEK_CLEANER_CRASH_ITERATIONS", "4"))
SEED = int(os.environ.get("ODRADEK_CLEANER_CRASH_SEED", "1717"))


class Writes:
    """What the producer sent and what the broker acknowledged, per key. A write is numbered
    per key (in a header, tombstones included); the log must hold, for each key, the last
    acknowledged write or a later one (sent, possibly written, not acknowledged)."""

    def __init__(self) -> None:
        self.sent: dict[int, int] = Counter()
        self.tombstones: dict[int, list[int]] = {}
        self.acked: dict[int, tuple[int, bool]] = {}  # key -> (number, is a tombstone)

    def acknowledge(self, key: int, number: int, tombstone: bool, error: object) -> None:
        if error is None and number > self.acked.get(key, (-1, False))[0]:
            self.acked[key] = (number, tombstone)

    def produce(self, producer: Producer, rng: random.Random) -> None:
        key = rng.randrange(KEYS)
        self.sent[key] += 1
        number = self.sent[key]
        tombstone = rng.random() < 0.08
        if tombstone:
            self.tombstones.setdefault(key, []).append(number)
        value = None if tombstone else b"%d:%d:" % (key, number) + b"x" * rng.randrange(20, 200)
        # (Delivery reports carry no headers: the write's identity goes in the closure.)
        producer.produce(TOPIC, value, b"%d" % key, headers=[("n", b"%d" % number)],
                         on_delivery=lambda error, _message: self.acknowledge(
                             key, number, tombstone, error))

    def check(self, latest: dict[int, tuple[int, bytes | None]], where: str) -> None:
        for key, (acked_number, _tombstone) in self.acked.items():
            if key in latest:
                number, value = latest[key]
                assert number >= acked_number, (
                    f"{where}: key {key} holds write {number}, write {acked_number} was acked")
                if value is not None:
                    assert value.startswith(b"%d:%d:" % (key, number))
            else:  # only a tombstone (acknowledged or later) removed by the cleaner may go
                assert any(n >= acked_number for n in self.tombstones.get(key, [])), (
                    f"{where}: key {key} is gone; write {acked_number} was acked")


def latest_in(records: list[tuple[int, bytes, bytes | None, int]]
              ) -> dict[int, tuple[int, bytes | None]]:
    latest: dict[int, tuple[int, bytes | None]] = {}
    for _offset, key, value, number in records:
        latest[int(key)] = (number, value)
    return latest


def records_of(log: Log) -> list[tuple[int, bytes, bytes | None, int]]:
    """(offset, key, value, write number) of every record, read through Log.read."""
    result = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        batches = list(iter_batches(data))
        if not batches:
            break
        for position, header in batches:
            for record in decode_records(data, position, header):
                if record[0] >= offset:
                    result.append((record[0], bytes(record[2]),
                                   None if record[3] is None else bytes(record[3]),
                                   int(dict(record[4])["n"])))
        offset = batches[-1][1].next_offset
    offsets = [record[0] for record in result]
    assert offsets == sorted(set(offsets)), "offsets must increase"
    return result


def check_copy(partition_dir: Path, scratch: Path, writes: Writes, where: str) -> int:
    """Loads a copy of the killed broker's partition as the broker would (completing or
    dropping the cleaner's .swap/.cleaned files); returns its size."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(partition_dir, scratch)
    log = Log(scratch, LogConfig.from_props(TOPIC_CONFIG), had_clean_shutdown=False)
    try:
        assert log.log_start_offset == 0, "cleaning never moves the log start offset"
        check_log_consistency(log, samples=50)
        assert not [p.name for p in scratch.iterdir()
                    if p.name.endswith((".cleaned", ".swap"))], "left over cleaner files"
        writes.check(latest_in(records_of(log)), where)
        return log.size_in_bytes
    finally:
        log.close()


def step_at_kill(broker_log: Path, offset: int) -> str:
    """Where the cleaner was when the broker died: its last step logged since `offset`."""
    text = broker_log.read_bytes()[offset:].decode(errors="replace")
    events = re.findall(r"cleaner step (\w+)|(cleaned \S+ up to offset)", text)
    if not events:
        return "idle"
    step, finished = events[-1]
    return "between cleanings" if finished else step


@pytest.mark.timeout(900)
def test_sigkill_during_cleaning_keeps_a_valid_log_and_every_latest_value(tmp_path: Path
                                                                         ) -> None:
    print(f"cleaner crash test: seed {SEED}, {ITERATIONS} kills (replay with "
          f"ODRADEK_CLEANER_CRASH_SEED={SEED})")
    rng = random.Random(SEED)
    broker = BrokerProcess(tmp_path, {"log.cleaner.backoff.ms": "50",
                                      "log.cleaner.io.max.bytes.per.second": "3000000",
                                      # The killed broker's registration expires sooner.
                                      "broker.session.timeout.ms": "1000",
                                      "broker.heartbeat.interval.ms": "200"},
                           env={STEP_PAUSE_ENV: "30"})
    partition_dir = broker.data_dir / f"{TOPIC}-0"
    writes = Writes()
    steps: Counter[str] = Counter()
    leftovers: Counter[str] = Counter()
    sizes = []
    timings: Counter[str] = Counter()
    started = time.monotonic()
    try:
        for iteration in range(ITERATIONS):
            log_offset = broker.log_path.stat().st_size if broker.log_path.exists() else 0
            phase = time.monotonic()
            broker.start()
            timings["start"] += time.monotonic() - phase
            phase = time.monotonic()
            if iteration == 0:
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                admin.create_topics([NewTopic(TOPIC, 1, 1, config=TOPIC_CONFIG)])[TOPIC].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "linger.ms": 5,
                                 "batch.size": 16384, "message.timeout.ms": 3000})
            # A first burst, all acknowledged, gives the cleaner dirty segments to work on...
            for _ in range(1500):
                writes.produce(producer, rng)
                producer.poll(0)
            assert producer.flush(30) == 0
            timings["burst"] += time.monotonic() - phase
            phase = time.monotonic()
            # ...then writes go on while it cleans, until the kill at a random moment.
            kill_at = time.monotonic() + rng.uniform(0.1, 2.0)
            while time.monotonic() < kill_at:  # about 2000 writes a second
                for _ in range(20):
                    writes.produce(producer, rng)
                producer.poll(0.01)
            broker.kill()
            steps[step_at_kill(broker.log_path, log_offset)] += 1
            leftovers.update(path.suffix for path in partition_dir.iterdir()
                             if path.suffix in (".cleaned", ".swap", ".deleted"))
            timings["write"] += time.monotonic() - phase
            phase = time.monotonic()
            # The delivery reports already received count; what was in flight is dropped (as
            # unacknowledged: it may or may not have been written).
            producer.poll(0.3)
            producer.purge()
            producer.flush(5)
            timings["flush"] += time.monotonic() - phase
            phase = time.monotonic()
            sizes.append(check_copy(partition_dir, tmp_path / "inspect" / f"{TOPIC}-0", writes,
                                    f"iteration {iteration} (seed {SEED})"))
            timings["check"] += time.monotonic() - phase
        # The restarted broker (no pauses now) recovers the same log and serves it to a
        # consumer.
        phase = time.monotonic()
        del broker.env[STEP_PAUSE_ENV]
        broker.start()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check",
                             "auto.offset.reset": "error",
                             "enable.partition.eof": True, "check.crcs": True,
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        consumed = []
        while True:
            message = consumer.poll(15)
            assert message is not None, "no end of partition"
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                break
            consumed.append((message.offset(), message.key(), message.value(),
                             int(dict(message.headers())["n"])))
        consumer.close()
        assert [c[0] for c in consumed] == sorted({c[0] for c in consumed})
        writes.check(latest_in(consumed), "restarted broker")
        # The cleaner still works after all that: the log compacts again.
        # (At most one record per key, under 300 bytes each, below the active segment.)
        wait_until(lambda: log_bytes(partition_dir) < KEYS * 300 + 24576, 120,
                   message="the cleaner to compact after the last restart")
        timings["final"] += time.monotonic() - phase
    finally:
        broker.kill()
    elapsed = time.monotonic() - started
    print(f"{ITERATIONS} kills in {elapsed:.1f}s; cleaner step at each kill: {dict(steps)}; "
          f"files left by the kills: {dict(leftovers)}; log sizes after recovery: {sizes}; "
          f"{sum(writes.sent.values())} writes, {len(writes.acked)} keys acknowledged; seconds "
          f"spent: { {k: round(v, 1) for k, v in timings.items()} }")
    assert len(writes.acked) == KEYS
    # Most kills land inside a cleaning (the cleaner is throttled and paused at each step).
    assert sum(count for step, count in steps.items()
               if step not in ("idle", "between cleanings")) >= ITERATIONS // 2, steps
