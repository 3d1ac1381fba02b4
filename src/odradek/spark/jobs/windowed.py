"""A windowed aggregation with a watermark, Kafka Streams' ``windowedBy(...).count()``.

Counts records per key in tumbling event-time windows (the record timestamp), waiting
`watermark` for late records. A window is written once, when the watermark passes its end
(Append mode, through the streaming sink): key = the record key, value = JSON
``{"window_start": ms, "window_end": ms, "count": n}``. Records later than the watermark are
dropped, as Streams drops records after a window's grace period.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def windowed_counts(records: DataFrame, window: str, watermark: str) -> DataFrame:
    """Source rows -> one row per (key, window): key, value = the JSON above."""
    from pyspark.sql import functions as F

    counts = (records.withWatermark("timestamp", watermark)
              .groupBy(F.window("timestamp", window), "key")
              .count())
    return counts.select(
        "key",
        F.to_json(F.struct(
            F.unix_millis(F.col("window.start")).alias("window_start"),
            F.unix_millis(F.col("window.end")).alias("window_end"),
            F.col("count"),
        )).alias("value"))


def start(
    spark: SparkSession,
    bootstrap_servers: str,
    checkpoint: str,
    input_topic: str,
    output_topic: str,
    *,
    window: str = "1 minute",
    watermark: str = "10 seconds",
    available_now: bool = False,
) -> StreamingQuery:
    records = (spark.readStream.format("odradek")
               .option("kafka.bootstrap.servers", bootstrap_servers)
               .option("subscribe", input_topic)
               .option("startingOffsets", "earliest")
               .load())
    writer = (windowed_counts(records, window, watermark).writeStream.format("odradek")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("topic", output_topic)
              .option("checkpointLocation", checkpoint)
              .outputMode("append")
              .queryName(f"windowed-{input_topic}"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()
