"""Batch reads and writes through the "odradek" format against a real broker."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from spark_helpers import consume_all, create_topics, produce

from odradek.client import Admin, TopicPartition
from odradek.spark.sink import QUERY_ID_HEADER, TASK_HEADER

BASE_TS = 1_700_000_000_000
PARTITIONS = 3
PER_PARTITION = 10


def record_of(partition: int, index: int) -> tuple:
    """The test record at (partition, index): every other one has headers."""
    headers = [("h", f"{partition}-{index}".encode()), ("n", None)] if index % 2 else None
    return (partition, f"k{partition}-{index}".encode(), f"v{partition}-{index}".encode(),
            headers, BASE_TS + 1000 * partition + index)


@pytest.fixture(scope="module")
def events(odradek_broker):
    """Topic "events": 3 partitions x 10 records, produced with explicit partitions,
    timestamps and headers; offsets are 0..9 in each partition."""
    create_topics(odradek_broker.bootstrap, {"events": PARTITIONS, "other-events": 1})
    produce(odradek_broker.bootstrap, "events",
            [record_of(p, i) for i in range(PER_PARTITION) for p in range(PARTITIONS)])
    produce(odradek_broker.bootstrap, "other-events", [(0, None, b"x")])
    return odradek_broker.bootstrap


def read(spark, bootstrap, **options):
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_offsets_json_selects_exact_rows(spark, events):
    starting = {"events": {"0": 2, "1": -2, "2": 4}}
    ending = {"events": {"0": 5, "1": -1, "2": 6}}
    df = read(spark, events, subscribe="events", includeHeaders="true",
              startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending))
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))

    wanted = [(0, i) for i in range(2, 5)] + [(1, i) for i in range(10)] + [(2, 4), (2, 5)]
    assert [(r.partition, r.offset) for r in rows] == wanted
    for row in rows:
        _, key, value, headers, timestamp = record_of(row.partition, row.offset)
        assert (row.key, row.value, row.topic) == (key, value, "events")
        assert row.timestamp == datetime.fromtimestamp(timestamp / 1000)  # pyspark: local time
        assert row.timestampType == 0
        assert (None if row.headers is None else
                [(h.key, h.value) for h in row.headers]) == headers


def test_defaults_read_everything_without_headers(spark, events):
    df = read(spark, events, subscribe="events")
    assert "headers" not in df.columns
    assert df.count() == PARTITIONS * PER_PARTITION
    assert df.where("value = 'v2-9'").select("partition", "offset").first() == (2, 9)


def test_min_partitions_splits_ranges(spark, events):
    df = read(spark, events, subscribe="events", minPartitions="6")
    assert df.rdd.getNumPartitions() == 6
    offsets = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offsets == [(p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION)]


def test_assign_and_subscribe_pattern(spark, events):
    assigned = read(spark, events, assign=json.dumps({"events": [1], "other-events": [0]}))
    assert sorted((r.topic, r.partition) for r in assigned.select("topic", "partition")
                  .distinct().collect()) == [("events", 1), ("other-events", 0)]
    assert assigned.count() == PER_PARTITION + 1
    matched = read(spark, events, subscribePattern="(other-)?ev.nts")
    assert matched.count() == PARTITIONS * PER_PARTITION + 1
    assert read(spark, events, subscribePattern="vents").count() == 0  # the whole name


def test_starting_by_timestamp(spark, events):
    # Partition p's record i has timestamp BASE_TS + 1000 p + i: nothing in partition 0 is that
    # late, which fails the query unless the strategy says to start at the latest offset.
    late = str(BASE_TS + 1005)
    with pytest.raises(Exception, match="No offset matched from request of topic-partition"):
        read(spark, events, subscribe="events", startingTimestamp=late).collect()
    df = read(spark, events, subscribe="events", startingTimestamp=late,
              startingOffsetsByTimestampStrategy="latest")
    assert sorted((r.partition, r.offset) for r in df.collect()) == (
        [(1, i) for i in range(5, 10)] + [(2, i) for i in range(10)])
    by_partition = {"events": {"0": BASE_TS + 7, "1": BASE_TS + 1000, "2": BASE_TS + 2009}}
    df = read(spark, events, subscribe="events",
              startingOffsetsByTimestamp=json.dumps(by_partition))
    assert df.groupBy("partition").count().orderBy("partition").collect() == [
        (0, 3), (1, 10), (2, 1)]


def test_invalid_options_fail_with_sparks_messages(spark, events):
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        read(spark, events, subscribe="events", startingOffsets="latest").collect()
    with pytest.raises(Exception, match="One of the following options must be specified"):
        read(spark, events).collect()
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        read(spark, events, subscribe="events",
             startingOffsets=json.dumps({"events": {"0": 0}})).collect()


def test_batch_write_with_all_columns(spark, odradek_broker):
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"written": 2})
    rows = [("written", "a", b"1", 1, [("x", b"y")]),
            ("written", None, b"2", 0, None),
            ("written", "c", b"3", None, [])]
    df = spark.createDataFrame(
        rows, "topic string, key string, value binary, partition int, "
              "headers array<struct<key:string,value:binary>>")
    # Append: pyspark refuses ErrorIfExists (Spark's default) for Python data sources.
    df.write.format("odradek").option("kafka.bootstrap.servers", bootstrap).mode("append").save()

    records = consume_all(bootstrap, "written", 2)
    by_value = {r.value(): r for r in records}
    assert sorted(by_value) == [b"1", b"2", b"3"]
    assert (by_value[b"1"].partition(), by_value[b"1"].key()) == (1, b"a")
    assert (by_value[b"2"].partition(), by_value[b"2"].key()) == (0, None)
    assert by_value[b"3"].key() == b"c"
    assert by_value[b"1"].headers()[0] == ("x", b"y")
    markers = [dict(r.headers()) for r in records]
    assert len({m[QUERY_ID_HEADER] for m in markers}) == 1  # one id for the write
    assert all(TASK_HEADER in m for m in markers)


def test_batch_write_topic_option_overrides_column(spark, odradek_broker):
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"override": 1})
    df = spark.createDataFrame([("elsewhere", "v")], "topic string, value string")
    (df.write.format("odradek").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", "override").option("batchMarker", "false").mode("append").save())
    [record] = consume_all(bootstrap, "override", 1)
    assert (record.value(), record.headers()) == (b"v", None)


def test_batch_write_rejects_bad_input(spark, odradek_broker):
    bootstrap = odradek_broker.bootstrap
    no_value = spark.createDataFrame([("t", "k")], "topic string, key string")
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        (no_value.write.format("odradek").option("kafka.bootstrap.servers", bootstrap)
         .mode("append").save())
    no_topic = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="topic option required"):
        (no_topic.write.format("odradek").option("kafka.bootstrap.servers", bootstrap)
         .mode("append").save())
    with pytest.raises(Exception, match="Save mode Overwrite not allowed"):
        (no_topic.write.format("odradek").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", "t").mode("overwrite").save())


def test_read_committed_reads_committed_records(spark, events):
    df = read(spark, events, subscribe="events", **{"kafka.isolation.level": "read_committed"})
    assert df.count() == PARTITIONS * PER_PARTITION


def test_deleted_records_are_data_loss(spark, odradek_broker):
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"trimmed": 1})
    produce(bootstrap, "trimmed", [(0, None, f"{i}".encode()) for i in range(10)])
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.delete_records({TopicPartition("trimmed", 0): 4})
    from_zero = {"startingOffsets": json.dumps({"trimmed": {"0": 0}}), "subscribe": "trimmed"}
    with pytest.raises(Exception, match="Cannot fetch offset 0 of trimmed-0"):
        read(spark, bootstrap, **from_zero).collect()
    rows = read(spark, bootstrap, failOnDataLoss="false", **from_zero).collect()
    assert sorted(r.offset for r in rows) == list(range(4, 10))


def test_schema_is_fixed(spark, events):
    with pytest.raises(Exception, match="fixed schema"):
        (spark.read.format("odradek").schema("value string")
         .option("kafka.bootstrap.servers", events).option("subscribe", "events").load()
         .collect())
