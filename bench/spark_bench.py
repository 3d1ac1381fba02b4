"""The "odradek" Spark source and sink: rows/s through source -> count and source -> sink.

Run: `python -m bench spark` (writes docs/performance.md) or `python bench/spark_bench.py
[--quick]` (prints the section only).

One broker in a child process on loopback; kcat produces N x 100 B records into a topic of
several partitions (untimed setup). In the same run, with a `local[2]` SparkSession:

* (a) ``spark.read.format("odradek") ... .load().count()``;
* (b) the same read written to another topic with ``df.write.format("odradek")``;
* (c) a streaming query with ``Trigger.AvailableNow`` from the topic to a third topic;

and, in this process without Spark: decoding fetched record batches into Arrow (the source's
per-task work, on Fetch responses taken from the broker) and encoding Arrow columns into record
batches (the sink's), each next to the per-record pure-Python path as a floor.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # BrokerProcess: a broker on random local ports

from broker_process import BrokerProcess

import pyarrow as pa

from odradek.client import Admin, NewTopic
from odradek.client.admin_types import OffsetSpec
from odradek.client.types import TopicPartition
from odradek.protocol.records import RecordBatchBuilder, iter_batches, iter_records

NAME = "spark"
RECORD_SIZE = 100
PARTITIONS = 4
GOAL_ROWS_PER_S = 1_000_000
#: Spark's spark.sql.execution.arrow.maxRecordsPerBatch: the sink gets Arrow batches this big
SPARK_ARROW_BATCH = 10_000


@dataclass
class Results:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, path: str, rows: int, seconds: float, notes: str = "",
            goal: bool = True) -> float:
        rate = rows / seconds
        ratio = f"{rate / GOAL_ROWS_PER_S:.2f}" if goal else ""
        self.rows.append((path, f"{rate:,.0f} ({rows:,} rows in {seconds:.2f} s)", ratio, notes))
        print(f"  {path}: {rate:,.0f} rows/s {notes}", flush=True)
        return rate


# ------------------------------------------------------------------------------ setup

def _create_topics(bootstrap: str, names: list[str]) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)
                             for name in names])


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        found = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                    for p in range(PARTITIONS)})
    return {tp.partition: info.offset for tp, info in found.items()}


def _produce(bootstrap: str, topic: str, n: int, workdir: Path) -> None:
    """N records of RECORD_SIZE bytes (no key) with kcat, as the broker benchmark does."""
    data_file = workdir / "records.txt"
    line = b"r" * (RECORD_SIZE - 1) + b"\n"
    with open(data_file, "wb") as f:
        for _ in range(n // 100_000):
            f.write(line * 100_000)
        f.write(line * (n % 100_000))
    with open(data_file, "rb") as stdin:
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "linger.ms=20",
                        "-X", "batch.num.messages=10000",
                        "-X", "queue.buffering.max.kbytes=1048576"],
                       stdin=stdin, check=True, timeout=1800)
    data_file.unlink()
    ends = _end_offsets(bootstrap, topic)
    assert sum(ends.values()) == n, f"produced {ends}, wanted {n}"


# ------------------------------------------------------------------------------ in process

def _fetch_responses(bootstrap: str, topic: str, records: int) -> list[tuple[bytes, int]]:
    """Fetch responses of the topic's biggest partition from the broker, kept as (records
    bytes, fetch offset)."""
    from odradek.spark.fetch import FetchSettings, PartitionFetcher

    settings = FetchSettings({"bootstrap.servers": bootstrap}, include_headers=False,
                             fail_on_data_loss=True, read_committed=False,
                             poll_timeout_ms=30_000)

    ends = _end_offsets(bootstrap, topic)
    partition = max(ends, key=lambda p: ends[p])
    records = min(records, ends[partition])

    async def fetch_all() -> list[tuple[bytes, int]]:
        fetcher = PartitionFetcher(settings)
        responses: list[tuple[bytes, int]] = []
        offset = 0
        try:
            while offset < records:
                fetched = await fetcher.fetch(TopicPartition(topic, partition), offset)
                data = bytes(fetched.records or b"")
                next_offset = offset
                for _, header in iter_batches(data):
                    next_offset = header.next_offset
                assert next_offset > offset, "no progress fetching"
                responses.append((data, offset))
                offset = next_offset
        finally:
            await fetcher.close()
        return responses

    return asyncio.run(fetch_all())


def _decode_floor(data: bytes, offset: int, schema: pa.Schema) -> pa.RecordBatch:
    """The per-record path: `iter_records` into Python lists, then Arrow arrays."""
    keys, values, offsets, timestamps, types = [], [], [], [], []
    for pos, header in iter_batches(data):
        timestamp_type = int(header.timestamp_type)
        for record in iter_records(data, pos, header):
            keys.append(record.key)
            values.append(record.value)
            offsets.append(record.offset)
            timestamps.append(record.timestamp)
            types.append(timestamp_type)
    rows = len(offsets)
    fields = [f.type for f in schema]
    return pa.RecordBatch.from_arrays([
        pa.array(keys, fields[0]), pa.array(values, fields[1]),
        pa.repeat(pa.scalar("t", fields[2]), rows), pa.repeat(pa.scalar(0, fields[3]), rows),
        pa.array(offsets, fields[4]),
        pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(fields[5]),
        pa.array(types, fields[6])], schema=schema)


def bench_decode(responses: list[tuple[bytes, int]], results: Results) -> None:
    from odradek.spark.fetch import ArrowColumns, decode_partition
    from odradek.spark.schema import arrow_schema, source_schema

    schema = arrow_schema(source_schema(False))
    tp = TopicPartition("bench", 0)
    rows = 0
    started = time.perf_counter()
    for data, offset in responses:
        rows += _decode_floor(data, offset, schema).num_rows
    results.add("decode, per-record floor (`iter_records` -> lists -> Arrow), one core", rows,
                time.perf_counter() - started, "in process, no I/O", goal=False)
    for check_crcs in (False, True):
        rows = 0
        started = time.perf_counter()
        for data, offset in responses:
            columns = ArrowColumns(tp, schema, False)
            decode_partition(data, columns, offset, 1 << 62, None, check_crcs)
            rows += columns.to_record_batch().num_rows
        results.add(f"decode, source (`decode_partition` + Arrow batch), one core, "
                    f"check.crcs={str(check_crcs).lower()}", rows,
                    time.perf_counter() - started, "in process, no I/O", goal=False)


def _sink_batches(n: int) -> list[pa.RecordBatch]:
    """Arrow batches as Spark hands them to the sink after a read: key (null) and value."""
    value = pa.array([b"r" * (RECORD_SIZE - 1)] * SPARK_ARROW_BATCH, pa.binary())
    key = pa.nulls(SPARK_ARROW_BATCH, pa.binary())
    batch = pa.RecordBatch.from_arrays([key, value], names=["key", "value"])
    return [batch] * (n // SPARK_ARROW_BATCH)


def bench_encode(n: int, results: Results) -> None:
    from odradek.spark import sink
    from odradek.spark.options import parse_sink_options

    batches = _sink_batches(n)
    rows = len(batches) * SPARK_ARROW_BATCH
    marker = sink.BatchMarker(str(uuid.uuid4()), "7", str(uuid.uuid4()), "0.0")
    for with_marker in (True, False):
        headers = marker.headers() if with_marker else []
        started = time.perf_counter()
        for batch in batches:
            values = batch.column(1).to_pylist()
            builder = RecordBatchBuilder()
            for value in values:
                if builder.size_estimate >= 16_384:
                    builder.build()
                    builder = RecordBatchBuilder()
                builder.append(1_700_000_000_000, None, value, headers)
            builder.build()
        results.add(f"encode, per-record floor (`RecordBatchBuilder.append`), one core, "
                    f"markers {'on' if with_marker else 'off'}", rows,
                    time.perf_counter() - started, "in process, no I/O, 16 KiB batches",
                    goal=False)
    encoder_class = getattr(sink, "RecordBatchEncoder", None)
    if encoder_class is None:
        return
    for with_marker, batch_size in ((True, None), (False, None), (True, 16_384)):
        options = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "bench-out",
                   "batchMarker": str(with_marker).lower()}
        if batch_size is not None:
            options["kafka.batch.size"] = str(batch_size)
        encoder = encoder_class(parse_sink_options(options), marker, lambda topic: PARTITIONS)
        started = time.perf_counter()
        encoded = sum(count for batch in batches for _, _, count in encoder.encode(batch))
        assert encoded == rows, (encoded, rows)
        size = f"{(batch_size or encoder.batch_size) // 1024} KiB batches" + (
            " (`kafka.batch.size`)" if batch_size else " (sink default)")
        results.add(f"encode, sink (`RecordBatchEncoder`), one core, markers "
                    f"{'on' if with_marker else 'off'}", rows, time.perf_counter() - started,
                    f"in process, no I/O, {size}", goal=False)


def bench_publish_task(bootstrap: str, n: int, results: Results) -> None:
    """One sink task without Spark: `AtLeastOnce.publish_task` to the broker."""
    from odradek.spark.options import parse_sink_options
    from odradek.spark.sink import AtLeastOnce, BatchMarker

    batches = _sink_batches(n)
    rows = len(batches) * SPARK_ARROW_BATCH
    for index, (with_marker, batch_size) in enumerate(((True, None), (False, None),
                                                       (True, 16_384))):
        topic = f"bench-task-{index}"
        _create_topics(bootstrap, [topic])
        options = {"kafka.bootstrap.servers": bootstrap, "topic": topic,
                   "batchMarker": str(with_marker).lower()}
        if batch_size is not None:
            options["kafka.batch.size"] = str(batch_size)
        marker = BatchMarker(str(uuid.uuid4()), "0", str(uuid.uuid4()), "0.0")
        started = time.perf_counter()
        published = AtLeastOnce(parse_sink_options(options)).publish_task(iter(batches), marker)
        elapsed = time.perf_counter() - started
        assert published.records == rows, (published.records, rows)
        assert sum(_end_offsets(bootstrap, topic).values()) == rows
        results.add(f"sink, one task without Spark (`publish_task`), markers "
                    f"{'on' if with_marker else 'off'}", rows, elapsed,
                    "in process, to the broker" + (
                        f", `kafka.batch.size={batch_size}`" if batch_size else ""), goal=False)


# ------------------------------------------------------------------------------ Spark

def bench_spark(bootstrap: str, n: int, workdir: Path, results: Results) -> None:
    from odradek.spark import local_session

    spark = local_session("odradek-bench")
    reader_options = {"kafka.bootstrap.servers": bootstrap, "subscribe": "bench-in"}
    try:
        # Warm-up: start the Python workers (reused afterwards) with a small read and write.
        warm_end = '{"bench-in": {' + ", ".join(f'"{p}": 100' for p in range(PARTITIONS)) + "}}"
        warm = (spark.read.format("odradek").options(**reader_options)
                .option("endingOffsets", warm_end).load())
        assert warm.count() == 100 * PARTITIONS
        warm.select("value").write.format("odradek").option(
            "kafka.bootstrap.servers", bootstrap).option("topic", "bench-warm").mode(
            "append").save()

        started = time.perf_counter()
        count = spark.read.format("odradek").options(**reader_options).load().count()
        elapsed = time.perf_counter() - started
        assert count == n, (count, n)
        results.add("(a) batch read + `count()`, local[2]", n, elapsed,
                    f"{PARTITIONS} tasks")

        started = time.perf_counter()
        (spark.read.format("odradek").options(**reader_options).load()
         .select("key", "value")
         .write.format("odradek").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", "bench-out-batch").mode("append").save())
        elapsed = time.perf_counter() - started
        written = sum(_end_offsets(bootstrap, "bench-out-batch").values())
        assert written == n, (written, n)
        results.add("(b) batch read -> `write` to another topic, local[2]", n, elapsed,
                    "markers on (default)")

        started = time.perf_counter()
        (spark.read.format("odradek").options(**reader_options).load()
         .select("key", "value")
         .write.format("odradek").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", "bench-out-batch-16k").option("kafka.batch.size", "16384")
         .mode("append").save())
        elapsed = time.perf_counter() - started
        written = sum(_end_offsets(bootstrap, "bench-out-batch-16k").values())
        assert written == n, (written, n)
        results.add("(b') as (b) with `kafka.batch.size=16384` (the Java producer's default)",
                    n, elapsed, "markers on")

        started = time.perf_counter()
        query = (spark.readStream.format("odradek").options(**reader_options)
                 .option("startingOffsets", "earliest").load()
                 .select("key", "value")
                 .writeStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", "bench-out-stream")
                 .option("checkpointLocation", str(workdir / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(3600)
        elapsed = time.perf_counter() - started
        assert query.exception() is None, query.exception()
        written = sum(_end_offsets(bootstrap, "bench-out-stream").values())
        assert written == n, (written, n)
        results.add("(c) streaming `Trigger.AvailableNow` read -> write, local[2]", n, elapsed,
                    "markers on; query start to end, checkpoint included")
    finally:
        spark.stop()


# ------------------------------------------------------------------------------ report

def run(quick: bool = False) -> str:
    if not shutil.which("kcat"):
        raise SystemExit("needs kcat (apt-get install kcat)")
    n = 500_000 if quick else 5_000_000
    results = Results()
    with tempfile.TemporaryDirectory(prefix="odradek-spark-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "broker").mkdir()
        broker = BrokerProcess(workdir / "broker", {"num.partitions": str(PARTITIONS)}).start()
        try:
            _create_topics(broker.bootstrap, ["bench-in", "bench-out-batch", "bench-out-stream",
                                              "bench-out-batch-16k", "bench-warm"])
            _produce(broker.bootstrap, "bench-in", n, workdir)
            responses = _fetch_responses(broker.bootstrap, "bench-in",
                                         min(n // PARTITIONS, 250_000))
            bench_decode(responses, results)
            del responses
            bench_encode(min(n, 500_000), results)
            bench_publish_task(broker.bootstrap, min(n, 500_000), results)
            bench_spark(broker.bootstrap, n, workdir, results)
        finally:
            broker.stop()
    return render(results, quick, n)


def render(results: Results, quick: bool, n: int) -> str:
    command = f"python -m bench spark{' --quick' if quick else ''}"
    lines = [
        "## Spark source and sink (`odradek.spark`)",
        "",
        (f"Measured by `{command}` on this project's machine (2 cores, Python "
         f"{sys.version.split()[0]}, pyspark 4.3.0, pyarrow {pa.__version__}), "
         f"{time.strftime('%Y-%m-%d')}. Method:"),
        "",
        f"- One broker in a child process on loopback; kcat produces {n:,} records of "
        f"{RECORD_SIZE} B (no key) into `bench-in` ({PARTITIONS} partitions; untimed).",
        "- Spark: `odradek.spark.local_session()` (`local[2]`: both cores, shared with the "
        "broker and the Python workers); a small read and write first start the Python "
        "workers, which are reused. Each row is one run: (a) batch read of the whole topic and "
        "`count()`; (b) the same read, `select(\"key\", \"value\")`, written with the batch "
        "sink to a topic of the same partitions; (b') the same with "
        "`kafka.batch.size=16384`; (c) the same as a streaming query with "
        "`Trigger.AvailableNow` from earliest (one micro-batch), timed from `start()` to the "
        "end of `awaitTermination()`. Sinks write the replay markers (default: four headers, "
        "~140 B per record). Each written topic's end offsets are checked to add up to the "
        "rows read.",
        "- In process (no Spark), one core: decoding Fetch responses taken from the broker "
        "(the biggest partition; librdkafka batches of up to 10,000 records) with the "
        "source's `decode_partition` + Arrow batch, next to the per-record pure-Python floor "
        "(`iter_records` into lists, then `pa.array`); encoding Arrow batches of "
        f"{SPARK_ARROW_BATCH:,} rows (null key, {RECORD_SIZE - 1} B value) into record "
        "batches with the sink's `RecordBatchEncoder`, next to the floor "
        "(`RecordBatchBuilder.append` per record into 16 KiB batches, what `Producer.send` "
        "does); one sink task (`AtLeastOnce.publish_task`: encoding, producer, broker).",
        f"- ratio = rows/s over the issue's goal of {GOAL_ROWS_PER_S:,} rows/s (only the "
        "Spark rows are end to end).",
        "",
        "| path | rows/s | ratio to 1M | notes |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in results.rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="500,000 records (a smoke run)")
    args = parser.parse_args()
    print(run(args.quick))


if __name__ == "__main__":
    main()
