"""Transactions in Spark: the source reading read_committed, and the sink's exactly-once mode
(deliveryGuarantee=exactly-once), where a micro-batch that Spark replays after a crash between
the sink's publish and Spark's commit leaves each input row once for read_committed readers.

Three crashes: the driver killed with SIGKILL after the sink committed the micro-batch's
transactions and before Spark's commit log (a real process group killed mid-commit); the same
point simulated in-process by a failing commit; and a crash before the sink's commit, whose
open transactions the replay aborts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark import cloudpickle
from spark_helpers import consume_to_end, create_topics, produce

from odradek.client import Admin
from odradek.spark.sink import OdradekStreamWriter
from odradek.spark.source import OdradekDataSource

QUERY_TIMEOUT_S = 120
JOB = Path(__file__).with_name("eos_job.py")


class CrashAroundCommit(OdradekStreamWriter):
    """The sink, except that the first micro-batch's commit fails once: after the sink's
    commit (`crashAfterCommit=true`) or before it."""

    def __init__(self, raw_options, schema, overwrite):
        super().__init__(raw_options, schema, overwrite)
        options = {k.lower(): v for k, v in raw_options.items()}
        self.flag = Path(options["crashflag"])
        self.after = options.get("crashaftercommit", "false") == "true"

    def commit(self, messages, batchId):
        if self.flag.exists():
            super().commit(messages, batchId)
            return
        self.flag.write_text(str(batchId))
        if self.after:
            super().commit(messages, batchId)
        raise RuntimeError(f"crash {'after' if self.after else 'before'} committing "
                           f"batch {batchId}")


class CrashingSink(OdradekDataSource):
    @classmethod
    def name(cls):
        return "odradek-eos-crash-once"

    def streamWriter(self, schema, overwrite):
        return CrashAroundCommit(self.options, schema, overwrite)


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests


def start(spark, bootstrap, source, sink, checkpoint, sink_format, **options):
    lines = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load())
    writer = (lines.selectExpr("key", "upper(cast(value as string)) as value")
              .writeStream.format(sink_format)
              .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("deliveryGuarantee", "exactly-once")
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.start()


def values(records) -> Counter:
    return Counter(r.value() for r in records)


def expected(n: int) -> Counter:
    return Counter({f"EVENT {i}".encode(): 1 for i in range(n)})


def transaction_states(bootstrap: str, query_id: str) -> dict[str, str]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return {listing.transactional_id: listing.state
                for listing in admin.list_transactions()
                if listing.transactional_id.startswith(f"odradek-spark-{query_id}-")}


@pytest.mark.parametrize("after", [True, False], ids=["after-commit", "before-commit"])
def test_replayed_micro_batch_is_published_once(spark, odradek_broker, tmp_path, after):
    bootstrap = odradek_broker.bootstrap
    source, sink = f"eos-in-{after}", f"eos-out-{after}"
    create_topics(bootstrap, {source: 2, sink: 2})
    produce(bootstrap, source, [(i % 2, f"k{i}".encode(), f"event {i}".encode())
                                for i in range(40)])
    spark.dataSource.register(CrashingSink)
    checkpoint, flag = tmp_path / "checkpoint", tmp_path / "crashed"

    crashed = start(spark, bootstrap, source, sink, checkpoint, "odradek-eos-crash-once",
                    crashFlag=str(flag), crashAfterCommit=str(after).lower())
    with pytest.raises(Exception, match="crash (after|before) committing batch 0"):
        crashed.awaitTermination(QUERY_TIMEOUT_S)
    assert not (checkpoint / "commits" / "0").exists()  # Spark did not commit batch 0
    first_run = consume_to_end(bootstrap, sink, 2, "read_uncommitted")
    assert values(first_run) == expected(40)  # the tasks published every row
    visible = consume_to_end(bootstrap, sink, 2, "read_committed")
    assert values(visible) == (expected(40) if after else Counter())

    resumed = start(spark, bootstrap, source, sink, checkpoint, "odradek-eos-crash-once",
                    crashFlag=str(flag))
    assert resumed.awaitTermination(QUERY_TIMEOUT_S) and resumed.exception() is None
    assert (checkpoint / "commits" / "0").exists()

    assert values(consume_to_end(bootstrap, sink, 2, "read_committed")) == expected(40)
    everything = values(consume_to_end(bootstrap, sink, 2, "read_uncommitted"))
    if after:
        # The replay found its transactions committed and published nothing again.
        assert everything == expected(40)
    else:
        # The replay aborted the first run's open transactions and published again.
        assert everything == Counter({value: 2 for value in expected(40)})
    states = transaction_states(bootstrap, str(resumed.id))
    assert states and set(states.values()) == {"CompleteCommit"}, states


def test_driver_killed_between_publish_and_spark_commit(odradek_broker, tmp_path):
    """A real crash: the job's whole process group (Python driver, JVM, Python workers) is
    killed with SIGKILL while the sink's commit of batch 0 is done and Spark's is not."""
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"eos-kill-in": 3, "eos-kill-out": 3})
    produce(bootstrap, "eos-kill-in", [(i % 3, None, f"event {i}".encode())
                                       for i in range(300)])
    checkpoint, flag = tmp_path / "checkpoint", tmp_path / "committed"
    command = [sys.executable, str(JOB), bootstrap, "eos-kill-in", "eos-kill-out",
               str(checkpoint)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}

    job = subprocess.Popen([*command, str(flag)], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while not flag.exists():
            assert job.poll() is None, job.stderr.read().decode(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the job never committed batch 0"
            time.sleep(0.1)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    assert not (checkpoint / "commits" / "0").exists()
    assert values(consume_to_end(bootstrap, "eos-kill-out", 3, "read_committed")) == \
        expected(300)

    rerun = subprocess.run(command, env=env, capture_output=True, check=False,
                           timeout=QUERY_TIMEOUT_S + 60)
    assert rerun.returncode == 0, rerun.stderr.decode(errors="replace")[-3000:]
    assert (checkpoint / "commits" / "0").exists()  # batch 0 was replayed and committed
    assert values(consume_to_end(bootstrap, "eos-kill-out", 3, "read_committed")) == \
        expected(300)
    assert values(consume_to_end(bootstrap, "eos-kill-out", 3, "read_uncommitted")) == \
        expected(300)


def test_source_reads_read_committed_when_asked(spark, odradek_broker):
    """`kafka.isolation.level=read_committed` (Spark's option name): a batch read sees the
    committed transaction's rows only, not the aborted one's nor those of a transaction still
    open (it reads up to the last stable offset); read_uncommitted sees every row."""
    from confluent_kafka import Producer

    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"txn-source": 2})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "spark-source-txn"})
    producer.init_transactions(30)
    for outcome, count in (("committed", 10), ("aborted", 6), ("open", 4)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce("txn-source", value=f"{outcome} {i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        if outcome == "committed":
            producer.commit_transaction(30)
        elif outcome == "aborted":
            producer.abort_transaction(30)
    try:
        def rows(isolation: str) -> Counter:
            df = (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", "txn-source").option("kafka.isolation.level", isolation)
                  .load())
            return Counter(r.value.decode().split()[0] for r in df.select("value").collect())

        assert rows("read_committed") == {"committed": 10}
        assert rows("read_uncommitted") == {"committed": 10, "aborted": 6, "open": 4}
    finally:
        producer.abort_transaction(30)
