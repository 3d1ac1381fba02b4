"""The streaming sink: records carry the query / micro-batch / run markers, and a micro-batch
that dies after publishing but before Spark commits it is replayed, recognisably."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark import cloudpickle
from spark_helpers import consume_all, create_topics, produce

from odradek.spark.sink import (
    BATCH_ID_HEADER,
    QUERY_ID_HEADER,
    RUN_ID_HEADER,
    BatchMarker,
    OdradekStreamWriter,
)
from odradek.spark.source import OdradekDataSource

QUERY_TIMEOUT_S = 120


class CrashOnceAfterPublishing(OdradekStreamWriter):
    """The sink, except that the first micro-batch commit fails after its tasks published:
    what a driver crash between publishing and Spark's commit looks like."""

    def __init__(self, raw_options, schema, overwrite):
        super().__init__(raw_options, schema, overwrite)
        self.flag = Path({k.lower(): v for k, v in raw_options.items()}["crashflag"])

    def commit(self, messages, batchId):
        if not self.flag.exists():
            self.flag.write_text(str(batchId))
            raise RuntimeError(f"crash after publishing batch {batchId}")
        super().commit(messages, batchId)


class CrashingSource(OdradekDataSource):
    @classmethod
    def name(cls):
        return "odradek-crash-once"

    def streamWriter(self, schema, overwrite):
        return CrashOnceAfterPublishing(self.options, schema, overwrite)


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests


def start_upper_case(spark, bootstrap, source, sink, checkpoint, sink_format="odradek",
                     **sink_options):
    lines = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load())
    writer = (lines.selectExpr("key", "upper(cast(value as string)) as value")
              .writeStream.format(sink_format)
              .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    return writer.start()


def markers(records) -> list[BatchMarker]:
    return [BatchMarker.from_headers(dict(r.headers())) for r in records]


def test_stream_sink_marks_records_with_query_batch_and_run(spark, odradek_broker, tmp_path):
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"lower": 2, "upper": 2})
    produce(bootstrap, "lower", [(i % 2, f"k{i}".encode(), f"line {i}".encode())
                                 for i in range(20)])
    query = start_upper_case(spark, bootstrap, "lower", "upper", tmp_path / "checkpoint")
    assert query.awaitTermination(QUERY_TIMEOUT_S) and query.exception() is None

    records = consume_all(bootstrap, "upper", 2)
    assert sorted((r.key(), r.value()) for r in records) == sorted(
        (f"k{i}".encode(), f"LINE {i}".encode()) for i in range(20))
    assert {(m.query_id, m.run_id) for m in markers(records)} == {(str(query.id),
                                                                   str(query.runId))}
    assert {m.batch_id for m in markers(records)} == {"0"}


def test_replayed_micro_batch_is_recognisable(spark, odradek_broker, tmp_path):
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"replay-in": 1, "replay-out": 1})
    produce(bootstrap, "replay-in", [(0, None, f"event {i}".encode()) for i in range(10)])
    spark.dataSource.register(CrashingSource)
    checkpoint, flag = tmp_path / "checkpoint", tmp_path / "crashed"

    crashed = start_upper_case(spark, bootstrap, "replay-in", "replay-out", checkpoint,
                               sink_format="odradek-crash-once", crashFlag=str(flag))
    with pytest.raises(Exception, match="crash after publishing batch 0"):
        crashed.awaitTermination(QUERY_TIMEOUT_S)
    published = consume_all(bootstrap, "replay-out", 1)
    assert len(published) == 10  # published, but Spark never committed batch 0

    resumed = start_upper_case(spark, bootstrap, "replay-in", "replay-out", checkpoint,
                               sink_format="odradek-crash-once", crashFlag=str(flag))
    assert resumed.awaitTermination(QUERY_TIMEOUT_S) and resumed.exception() is None

    records = consume_all(bootstrap, "replay-out", 1)
    # At-least-once: batch 0 is in the topic twice ...
    assert Counter(r.value() for r in records) == {f"EVENT {i}".encode(): 2 for i in range(10)}
    # ... and the markers tell the copies apart: same query and batch, another run.
    runs = Counter((m.query_id, m.batch_id, m.run_id) for m in markers(records))
    assert runs == {(str(crashed.id), "0", str(crashed.runId)): 10,
                    (str(crashed.id), "0", str(resumed.runId)): 10}
    assert all(dict(r.headers())[QUERY_ID_HEADER] == str(resumed.id).encode() and
               BATCH_ID_HEADER in dict(r.headers()) and RUN_ID_HEADER in dict(r.headers())
               for r in records)
