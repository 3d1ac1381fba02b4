"""Kafka Streams' WordCountDemo (quickstart step 5) as a Spark streaming query.

Reads lines from ``streams-plaintext-input``, lowercases them, splits them on ``\\W+``, counts
each word and writes the changed counts of every micro-batch to ``streams-wordcount-output``:
key = the word (UTF-8), value = the count as an 8-byte big-endian long (Kafka's LongSerializer,
so ``kafka-console-consumer --property value.deserializer=...LongDeserializer`` reads it). The
latest record per key is the word's count, as in the Streams application's changelog.

Unlike Java's ``String.split``, empty words (from leading punctuation) are not counted.

    python -m odradek.spark.jobs.wordcount --bootstrap-server 127.0.0.1:9092 \\
        --checkpoint /tmp/wordcount-checkpoint [--available-now]
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from odradek.spark.sink import foreach_batch_sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

INPUT_TOPIC = "streams-plaintext-input"
OUTPUT_TOPIC = "streams-wordcount-output"


def word_counts(lines: DataFrame) -> DataFrame:
    """Source rows -> (key: word, value: count as 8-byte big-endian long)."""
    from pyspark.sql import functions as F

    words = lines.select(
        F.explode(F.split(F.lower(F.col("value").cast("string")), r"\W+")).alias("word"))
    counts = words.where(F.col("word") != "").groupBy("word").count()
    # ANSI mode forbids CAST(bigint AS binary); the hex of a long is its two's complement.
    return counts.select(F.col("word").alias("key"),
                         F.unhex(F.lpad(F.hex("count"), 16, "0")).alias("value"))


def decode_count(value: bytes) -> int:
    """A count as the job writes it (Kafka's LongDeserializer)."""
    return int.from_bytes(value, "big", signed=True)


def start(
    spark: SparkSession,
    bootstrap_servers: str,
    checkpoint: str,
    *,
    input_topic: str = INPUT_TOPIC,
    output_topic: str = OUTPUT_TOPIC,
    available_now: bool = False,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
    output_mode: str = "update",
) -> StreamingQuery:
    """Start the word count query (resuming from `checkpoint` when it holds one).

    `output_mode` "update" writes the changed counts of each micro-batch (through
    ``foreachBatch``, as pyspark's Python sinks cannot take Update mode); "complete" writes
    every count each micro-batch through the streaming sink.
    """
    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", input_topic)
              .option("startingOffsets", starting_offsets))
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    sink_options = {"kafka.bootstrap.servers": bootstrap_servers, "topic": output_topic}
    writer = (word_counts(reader.load()).writeStream
              .option("checkpointLocation", checkpoint)
              .outputMode(output_mode)
              .queryName(f"wordcount-{input_topic}"))
    if output_mode == "update":
        writer = writer.foreachBatch(foreach_batch_sink(**sink_options))
    else:
        writer = writer.format("odradek").options(**sink_options)
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m odradek.spark.jobs.wordcount",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--input-topic", default=INPUT_TOPIC)
    parser.add_argument("--output-topic", default=OUTPUT_TOPIC)
    parser.add_argument("--available-now", action="store_true",
                        help="process what is there now, then stop")
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--output-mode", choices=("update", "complete"), default="update")
    args = parser.parse_args(argv)
    from odradek.spark import local_session

    spark = local_session("wordcount")
    try:
        query = start(spark, args.bootstrap_server, args.checkpoint,
                      input_topic=args.input_topic, output_topic=args.output_topic,
                      available_now=args.available_now,
                      max_offsets_per_trigger=args.max_offsets_per_trigger,
                      output_mode=args.output_mode)
        query.awaitTermination()
    except KeyboardInterrupt:
        pass
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
