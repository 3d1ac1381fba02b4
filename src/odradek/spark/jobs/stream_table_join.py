"""A stream-table join, Kafka Streams' ``KStream.leftJoin(KTable)``.

The table is a compacted topic read as a table: the latest value per key, a null value
(tombstone) deleting the key. Each micro-batch of the stream is joined with the table as it
is when the micro-batch runs (the table side is a batch read, planned again for every
micro-batch). Output: key = the stream record's key, value = JSON
``{"value": <stream value>, "table": <table value or null>}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def latest_per_key(table_records: DataFrame) -> DataFrame:
    """A topic's records -> (key, value) of the latest record per key, tombstones removed."""
    from pyspark.sql import functions as F

    latest = table_records.groupBy("key").agg(F.max_by("value", "offset").alias("value"))
    return latest.where(F.col("value").isNotNull())


def enrich(stream: DataFrame, table: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    joined = stream.alias("s").join(table.alias("t"), F.col("s.key") == F.col("t.key"), "left")
    return joined.select(
        F.col("s.key").alias("key"),
        F.to_json(F.struct(F.col("s.value").cast("string").alias("value"),
                           F.col("t.value").cast("string").alias("table")),
                  {"ignoreNullFields": "false"}).alias("value"))


def start(
    spark: SparkSession,
    bootstrap_servers: str,
    checkpoint: str,
    stream_topic: str,
    table_topic: str,
    output_topic: str,
    *,
    available_now: bool = False,
) -> StreamingQuery:
    def source(reader):  # type: ignore[no-untyped-def]
        return reader.format("odradek").option("kafka.bootstrap.servers", bootstrap_servers)

    stream = source(spark.readStream).option("subscribe", stream_topic) \
        .option("startingOffsets", "earliest").load()
    table = latest_per_key(source(spark.read).option("subscribe", table_topic).load())
    writer = (enrich(stream, table).writeStream.format("odradek")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("topic", output_topic)
              .option("checkpointLocation", checkpoint)
              .queryName(f"join-{stream_topic}-{table_topic}"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()
