"""The log cleaner: cleaning throughput against the same machine's sequential append, and
produce throughput on a compacting topic against a delete-policy topic while the cleaner runs.

Run: `python -m bench cleaner` (writes docs/performance.md) or
`python bench/cleaner_bench.py [--quick]` (prints the section only).

- **append vs clean**: the same keyed batches (200 records of ~120 B, uncompressed and lz4,
  and of ~1 KB uncompressed, over a key space a tenth of the record count) are appended with `Log.append_as_leader` into a
  fresh log (1 MiB segments) and fsynced: the sequential append rate. The same data in a
  compacted log is then cleaned once by a `ProcessCleaner` (as the broker's cleaner threads
  do: its child process, started beforehand, builds the offset map and writes the `.cleaned`
  files; this process swaps them in): the cleaner's rate is the bytes of the section cleaned
  over the whole cleaning's time. Rounds interleave append and clean; the median counts.
- **produce while cleaning**: a broker (this tree) with `log.cleaner.backoff.ms=100`; a
  confluent-kafka producer (acks=all, lz4, linger 5 ms) writes N records over N/10 keys into a
  topic with `cleanup.policy=delete` and then into one with `compact`
  (`min.cleanable.dirty.ratio=0.01`, 1 MiB segments: the cleaner runs throughout), rounds
  interleaved; records/s of each and their ratio.
- **`__consumer_offsets` under commits**: one confluent-kafka consumer commits 100,000 offsets
  (asynchronously, a synchronous one every 500) for one group, with
  `offsets.topic.segment.bytes=1 MiB`; the partition's size: what the commits wrote, the
  largest seen while committing, and at the end once the cleaner settled.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from broker_process import BrokerProcess, commit_repeatedly, log_bytes, wait_until

from odradek.protocol.records import Compression, RecordBatchBuilder
from odradek.storage import Log, LogConfig
from odradek.storage.cleaner import (
    Cleaner,
    CleanerConfig,
    CleanerStats,
    LogToClean,
    cleanable_offsets,
)
from odradek.storage.cleaner_process import ProcessCleaner

NAME = "cleaner"
MIB = 1024 * 1024
RECORDS_PER_BATCH = 200


def keyed_batches(records: int, keys: int, codec: Compression, value_size: int = 100
                  ) -> list[bytes]:
    now = int(time.time() * 1000)
    # Random values (hex: compressible about 2:1, as text payloads are), 1024 of them rotated.
    payloads = [os.urandom(value_size // 2).hex().encode() for _ in range(1024)]
    batches = []
    for start in range(0, records, RECORDS_PER_BATCH):
        builder = RecordBatchBuilder(compression=codec)
        for number in range(start, min(start + RECORDS_PER_BATCH, records)):
            key = number % keys
            builder.append(now, b"key-%08d" % key,
                           b"%d:%d:" % (key, number) + payloads[number % 1024])
        batches.append(builder.build())
    return batches


def append_seconds(directory: Path, batches: list[bytes], compact: bool) -> tuple[float, Log]:
    shutil.rmtree(directory, ignore_errors=True)
    props = {"segment.bytes": MIB, "cleanup.policy": "compact" if compact else "delete"}
    log = Log(directory, LogConfig.from_props(props))
    os.sync()
    started = time.perf_counter()
    for batch in batches:
        log.append_as_leader(batch, 0)
    log.flush()
    elapsed = time.perf_counter() - started
    log.update_high_watermark(log.log_end_offset)
    return elapsed, log


def clean_seconds(log: Log, cleaner: Cleaner | ProcessCleaner
                  ) -> tuple[float, int, CleanerStats]:
    """One cleaning of every inactive segment; (seconds, bytes of the section, stats)."""
    log.roll()
    now = int(time.time() * 1000)
    first_dirty, uncleanable = cleanable_offsets(log, None, now)
    target = LogToClean(("bench", 0), log, first_dirty, uncleanable)
    stats = CleanerStats()
    os.sync()
    started = time.perf_counter()
    cleaner.clean(log, first_dirty, target.first_uncleanable_offset, now, stats)
    return time.perf_counter() - started, target.cleanable_bytes, stats


def bench_append_vs_clean(work: Path, records: int, rounds: int, codec: Compression,
                          value_size: int = 100) -> list[str]:
    batches = keyed_batches(records, records // 10, codec, value_size)
    size = sum(len(batch) for batch in batches)
    append_rates, clean_rates = [], []
    details = []
    # As the broker's cleaner threads do: the work in a (started, reused) child process.
    cleaner = ProcessCleaner(CleanerConfig())
    cleaner.start()
    for _ in range(rounds):
        elapsed, log = append_seconds(work / "append-0", batches, compact=False)
        append_rates.append(size / elapsed / MIB)
        log.close()
        shutil.rmtree(work / "append-0")
        _, log = append_seconds(work / "clean-0", batches, compact=True)
        elapsed, section, stats = clean_seconds(log, cleaner)
        clean_rates.append(section / elapsed / MIB)
        details.append(f"{section / MIB:.1f} MiB -> {log.size_in_bytes / MIB:.2f} MiB, "
                       f"map {stats.map_messages_read} records, wrote "
                       f"{stats.messages_written}")
        log.close()
        shutil.rmtree(work / "clean-0")
        print(f"  {codec.name}: append {append_rates[-1]:.1f} MB/s, clean "
              f"{clean_rates[-1]:.1f} MB/s ({details[-1]})", flush=True)
    cleaner.close()
    append_rate, clean_rate = statistics.median(append_rates), statistics.median(clean_rates)
    return [(f"| clean vs append, {codec.name.lower()}, {records:,} records of ~{value_size} B "
             f"/ {records // 10:,} "
            f"keys ({size / MIB:.0f} MiB) | {append_rate:.1f} MB/s | {clean_rate:.1f} MB/s | "
            f"**{clean_rate / append_rate:.2f}x** (goal >= 0.5x) | {details[-1]} |")]


def produce_rate(broker: BrokerProcess, topic: str, records: int, policy: str) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {"cleanup.policy": policy, "segment.bytes": str(MIB),
              "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "linger.ms": 5, "compression.type": "lz4", "batch.size": 65536,
                         "queue.buffering.max.messages": 1_000_000})
    keys = max(records // 10, 1)
    values = [os.urandom(50).hex().encode() for _ in range(64)]
    failures = []
    started = time.perf_counter()
    for number in range(records):
        producer.produce(topic, values[number % 64], b"key-%08d" % (number % keys),
                         on_delivery=lambda error, _m: error and failures.append(error))
        if number % 5000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    assert not failures, failures[:3]
    return records / elapsed


def bench_produce_while_cleaning(work: Path, records: int, rounds: int) -> list[str]:
    (work / "broker").mkdir()
    broker = BrokerProcess(work / "broker", {"log.cleaner.backoff.ms": "100"}).start()
    rates: dict[str, list[float]] = {"delete": [], "compact": []}
    try:
        for round_number in range(rounds):
            for policy in ("delete", "compact"):
                topic = f"{policy}-{round_number}"
                rates[policy].append(produce_rate(broker, topic, records, policy))
                if policy == "compact":  # (untimed) the cleaner caught up before the next run
                    wait_until(lambda topic=topic: f"cleaned Log({topic}-0" in
                               broker.log_path.read_text(errors="replace"), 120,
                               message=f"a cleaning of {topic}")
                print(f"  produce into {policy}: {rates[policy][-1]:,.0f} records/s", flush=True)
        cleanings = broker.log_path.read_text(errors="replace").count("cleaned Log(compact-")
        sizes = {policy: sum(log_bytes(broker.data_dir / f"{policy}-{number}-0")
                             for number in range(rounds)) / rounds / MIB
                 for policy in rates}
    finally:
        broker.stop()
    delete, compact = statistics.median(rates["delete"]), statistics.median(rates["compact"])
    notes = (f"{cleanings} cleanings during the compact runs; log size at the end "
             f"{sizes['delete']:.1f} MiB (delete) vs {sizes['compact']:.1f} MiB (compact)")
    return [(f"| produce, compact vs delete topic, {records:,} records / {records // 10:,} keys, "
            f"confluent-kafka acks=all lz4 | {delete:,.0f} records/s (delete) | "
            f"{compact:,.0f} records/s (compact) | **{compact / delete:.2f}x** (goal >= 0.8x) "
            f"| {notes} |")]


def bench_offsets_commits(work: Path, commits: int) -> list[str]:
    """One group committing `commits` times: `__consumer_offsets` stays bounded."""
    segment_bytes = MIB
    (work / "offsets").mkdir()
    broker = BrokerProcess(work / "offsets", {
        "log.cleaner.backoff.ms": "100", "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": str(segment_bytes)}).start()
    try:
        started = time.perf_counter()
        report = commit_repeatedly(broker, commits, segment_bytes)
        elapsed = time.perf_counter() - started
    finally:
        broker.stop()
    print(f"  __consumer_offsets: {report}", flush=True)
    return [(f"| `__consumer_offsets` under {commits:,} commits of one group (confluent-kafka, "
             f"async, offsets.topic.segment.bytes=1 MiB) | {report['written_bytes'] / MIB:.1f} "
             f"MiB written ({report['records']:,} records) | "
             f"{report['largest_bytes'] / MIB:.2f} MiB at most, "
             f"{report['final_bytes'] / 1024:.0f} KiB at the end | bounded | "
             f"{commits / elapsed:,.0f} commits/s |")]


def run(quick: bool = False) -> str:
    records = 100_000 if quick else 1_000_000
    produce_records = 100_000 if quick else 500_000
    rounds = 1 if quick else 3
    work = Path(tempfile.mkdtemp(prefix="odradek-cleaner-bench-"))
    rows: list[str] = []
    try:
        print(f"cleaner benchmarks in {work}", flush=True)
        for codec in (Compression.NONE, Compression.LZ4):
            rows += bench_append_vs_clean(work, records, rounds, codec)
        rows += bench_append_vs_clean(work, records // 8, rounds, Compression.NONE, 1000)
        rows += bench_produce_while_cleaning(work, produce_records, rounds)
        rows += bench_offsets_commits(work, 10_000 if quick else 100_000)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    python = ".".join(map(str, sys.version_info[:3]))
    flag = " --quick" if quick else ""
    method = (f"Measured by `python -m bench cleaner{flag}` ({os.cpu_count()} cores shared "
              f"with other work, Python {python}), {time.strftime('%Y-%m-%d')}; medians of "
              f"{rounds} interleaved round(s). Method: see bench/cleaner_bench.py's docstring.")
    table = ["| measurement | baseline | cleaner | ratio | notes |", "|---|---|---|---|---|",
             *rows]
    return "## Log cleaner\n\n" + method + "\n\n" + "\n".join(table) + "\n\n" + READING + "\n"


READING = """Reading: the cleaner runs in a child process per cleaner thread (`SCHED_BATCH`), off
the broker's interpreter; the broker only swaps the `.cleaned` segments in. Its per-record work is
reading keys (`decode_keys`: no objects for timestamps, values, headers) and one `dict.update` a
batch into the offset map; a batch is then dropped, or copied with its bytes unchanged, from
the offsets still live (dirty section: no decoding at all) or its keys (clean section); only
batches partly kept or with tombstones are decoded and rebuilt. Compressed batches are
decompressed to read their keys. Produce into a compacted topic costs more than into a
delete-policy one mostly because of the produce path's own per-record work, not the cleaner:
every record's key is checked (Kafka's validateKey; with the cleaner disabled the broker
spent about 2x the CPU per record on the compacted topic in this session). The ratio is noisy
here: the client, the broker and the cleaner share 2 cores with other work."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    print(run(parser.parse_args().quick))


if __name__ == "__main__":
    main()
