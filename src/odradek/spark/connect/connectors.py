"""FileStreamSource and FileStreamSink, each run as one Spark streaming query.

* FileStreamSource: the file's lines (format ``odradek-connect-file``) become Connect records
  (no key, the line as a string value, the connector's ``topic``), go through the
  transformation chain, are serialized by the key and value converters and published with the
  "odradek" batch sink from ``foreachBatch``.
* FileStreamSink: the ``topics`` / ``topics.regex`` records (the "odradek" streaming source,
  from the earliest offsets at the first start) are deserialized by the converters, go through
  the chain, and each record's value is appended to ``file`` as Java's ``println`` prints it.

Positions live in the query checkpoints. Stopping waits for a micro-batch that is publishing
or writing to finish, and a micro-batch starting after the stop began fails before it writes
anything, so a stopped connector resumes without loss or duplicates. The file sink also
records, per micro-batch, the file size before and after its append, so that a micro-batch
Spark replays after a crash (same batch id, same records) is not appended twice: its
interrupted partial write is cut off and it is written once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from odradek.spark.connect.converters import Converter
from odradek.spark.connect.file_source import FORMAT as FILE_FORMAT
from odradek.spark.connect.records import RecordFrame, source_frame
from odradek.spark.connect.render import java_string
from odradek.spark.connect.transforms import ChainStep, apply_chain

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("org.apache.kafka.connect.runtime.Worker")

PROGRESS_FILE = "file-sink-progress.json"


class StopRequested(RuntimeError):
    """Raised in a micro-batch that starts while its connector is stopping (before it writes)."""


@dataclass(frozen=True)
class ConnectorSettings:
    """What a connector query needs from the worker and connector configs."""

    name: str
    bootstrap_servers: str
    key_converter: Converter
    value_converter: Converter
    transforms: tuple[ChainStep, ...]
    checkpoint: str
    trigger_interval_ms: int
    #: extra client settings for the "odradek" source or sink (``kafka.<name>`` options)
    client_options: tuple[tuple[str, str], ...] = ()


# ------------------------------------------------------------------------------ the pipelines


def serialize(frames: list[RecordFrame], key_converter: Converter,
              value_converter: Converter) -> DataFrame:
    """The records as the sink's columns: key and value bytes, topic."""
    outputs = []
    for frame in frames:
        key = key_converter.serialize(F.col("key"), frame.key_schema, frame.type_of("key"))
        value = value_converter.serialize(F.col("value"), frame.value_schema,
                                          frame.type_of("value"))
        outputs.append(frame.df.select(key.cast("binary").alias("key"),
                                       value.cast("binary").alias("value"), F.col("topic")))
    return reduce(lambda a, b: a.unionByName(b), outputs)


def source_records(lines: DataFrame, topic: str, transforms: tuple[ChainStep, ...],
                   key_converter: Converter, value_converter: Converter) -> DataFrame:
    """FileStreamSource: lines (``value``, ``timestamp``) -> Kafka records (key, value,
    topic)."""
    frames = apply_chain([source_frame(lines, topic)], transforms)
    return serialize(frames, key_converter, value_converter)


def _uses_key(transforms: tuple[ChainStep, ...]) -> bool:
    return any(step.transform.part == "key" for step in transforms)


def sink_frames(records: DataFrame, key_converter: Converter, value_converter: Converter,
                decode_key: bool) -> list[RecordFrame]:
    """Kafka records (the "odradek" source's rows, with headers) -> Connect records, one frame
    per distinct key/value schema found in `records` (a batch DataFrame)."""
    key_label = key_converter.group(F.col("key")) if decode_key else F.lit("")
    labelled = records.select("*", key_label.alias("_key_label"),
                              value_converter.group(F.col("value")).alias("_value_label"))
    labels = labelled.select("_key_label", "_value_label").distinct().collect()
    frames = []
    for key_label_value, value_label_value in sorted(labels):
        part = labelled.where((F.col("_key_label") == key_label_value)
                              & (F.col("_value_label") == value_label_value))
        value, value_schema = value_converter.typed(F.col("value"), value_label_value)
        if decode_key:
            key, key_schema = key_converter.typed(F.col("key"), key_label_value)
        else:
            key, key_schema = F.col("key"), None  # no transform reads the key
        df = part.select(key.alias("key"), value.alias("value"), "topic", "partition", "offset",
                         "timestamp", "headers")
        frames.append(RecordFrame(df, key_schema, value_schema, sink=True))
    return frames


def sink_lines(records: DataFrame, transforms: tuple[ChainStep, ...], key_converter: Converter,
               value_converter: Converter) -> DataFrame | None:
    """FileStreamSink: Kafka records -> the lines to append (``line``), in offset order per
    partition; None when there are none."""
    frames = sink_frames(records, key_converter, value_converter, _uses_key(transforms))
    frames = apply_chain(frames, transforms)
    if not frames:
        return None
    lines = [frame.df.select("topic", "partition", "offset",
                             java_string(F.col("value"), frame.value_schema,
                                         frame.type_of("value")).alias("line"))
             for frame in frames]
    return reduce(lambda a, b: a.unionByName(b), lines).orderBy("topic", "partition", "offset")


# ------------------------------------------------------------------------------ the queries


class ConnectorQuery:
    """One connector's streaming query, stoppable between micro-batches."""

    kind = ""

    def __init__(self, settings: ConnectorSettings) -> None:
        self.settings = settings
        self.query: StreamingQuery | None = None
        self._batch_lock = threading.Lock()
        self._stopping = False

    @property
    def name(self) -> str:
        return self.settings.name

    def start(self, spark: SparkSession) -> StreamingQuery:
        raise NotImplementedError

    def _writer(self, df: DataFrame, batch_function: Any):
        return (df.writeStream.queryName(self.name)
                .foreachBatch(batch_function)
                .option("checkpointLocation", self.settings.checkpoint)
                .trigger(processingTime=f"{self.settings.trigger_interval_ms} milliseconds"))

    def _begin_batch(self) -> None:
        if self._stopping:
            raise StopRequested(f"connector {self.name} is stopping")

    def stop(self) -> None:
        """Let a running micro-batch finish its writing, keep new ones from writing, stop."""
        with self._batch_lock:
            self._stopping = True
        if self.query is not None:
            self.query.stop()

    def failure(self) -> str | None:
        """The query's error when it failed on its own (not because it was stopped)."""
        if self.query is None or self.query.isActive or self._stopping:
            return None
        error = self.query.exception()
        return None if error is None else error_summary(str(error))


def error_summary(text: str) -> str:
    """The line of a failed query's error that says what went wrong (Spark's text carries the
    Python traceback of foreachBatch and the query plan)."""
    head = text.split("=== Streaming Query ===")[0]
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    for line in lines:
        if "[USER_RAISED_EXCEPTION]" in line:
            return line.split("[USER_RAISED_EXCEPTION]", 1)[1].split(" SQLSTATE:")[0].strip()
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return errors[-1] if errors else (lines[0] if lines else text)


class FileStreamSourceQuery(ConnectorQuery):
    kind = "source"

    def __init__(self, settings: ConnectorSettings, file: str, topic: str,
                 batch_size: int) -> None:
        super().__init__(settings)
        self.file = file
        self.topic = topic
        self.batch_size = batch_size

    def start(self, spark: SparkSession) -> StreamingQuery:
        s = self.settings
        lines = (spark.readStream.format(FILE_FORMAT)
                 .option("file", self.file)
                 .option("batchSize", str(self.batch_size))
                 .load())
        records = source_records(lines, self.topic, s.transforms, s.key_converter,
                                 s.value_converter)
        self.query = self._writer(records, self._publish).start()
        return self.query

    def _publish(self, batch: DataFrame, batch_id: int) -> None:
        with self._batch_lock:
            self._begin_batch()
            writer = (batch.write.format("odradek")
                      .option("kafka.bootstrap.servers", self.settings.bootstrap_servers)
                      .option("batchMarker", "false")  # records as Kafka Connect writes them
                      .mode("append"))
            for name, value in self.settings.client_options:
                writer = writer.option(name, value)
            writer.save()


class FileStreamSinkQuery(ConnectorQuery):
    kind = "sink"

    def __init__(self, settings: ConnectorSettings, file: str | None, topics: list[str],
                 topics_regex: str | None) -> None:
        super().__init__(settings)
        self.file = file
        self.topics = topics
        self.topics_regex = topics_regex

    def start(self, spark: SparkSession) -> StreamingQuery:
        s = self.settings
        reader = (spark.readStream.format("odradek")
                  .option("kafka.bootstrap.servers", s.bootstrap_servers)
                  .option("startingOffsets", "earliest")  # Connect's auto.offset.reset
                  .option("includeHeaders", "true")
                  .option("failOnDataLoss", "false")
                  .option("maxOffsetsPerTrigger", "500000"))
        if self.topics_regex is not None:
            reader = reader.option("subscribePattern", self.topics_regex)
        else:
            reader = reader.option("subscribe", ",".join(self.topics))
        for name, value in s.client_options:
            reader = reader.option(name, value)
        self.query = self._writer(reader.load(), self._write).start()
        return self.query

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        with self._batch_lock:
            self._begin_batch()
            s = self.settings
            progress = SinkProgress(Path(s.checkpoint) / PROGRESS_FILE, self.file)
            if progress.written(batch_id):
                log.info("%s: micro-batch %d was appended already", self.name, batch_id)
                return
            batch = batch.persist()
            try:
                lines = sink_lines(batch, s.transforms, s.key_converter, s.value_converter)
                texts = ([] if lines is None
                         else (row.line for row in lines.select("line").toLocalIterator()))
                if self.file is None:
                    for text in texts:
                        sys.stdout.write(text + "\n")
                    sys.stdout.flush()
                else:
                    progress.append(batch_id, texts)
            finally:
                batch.unpersist()


class SinkProgress:
    """The file sink's record of its appends (in the query checkpoint): the last micro-batch,
    the file size before its append, and whether the append finished."""

    def __init__(self, path: Path, file: str | None) -> None:
        self.path = path
        self.file = file
        try:
            self.state: dict[str, Any] | None = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            self.state = None
        if self.state is not None and self.state.get("file") != file:
            self.state = None  # another file: its history does not apply

    def written(self, batch_id: int) -> bool:
        state = self.state
        if state is None:
            return False
        return state["batch"] > batch_id or (state["batch"] == batch_id and state["done"])

    def append(self, batch_id: int, lines: Any) -> None:
        assert self.file is not None
        target = Path(self.file)
        size = target.stat().st_size if target.exists() else 0
        state = self.state
        if state is not None and not state["done"] and size > state["size_before"]:
            # our append of this micro-batch was cut short: drop it, write it whole
            with open(target, "r+b") as handle:
                handle.truncate(state["size_before"])
            size = state["size_before"]
        self._save({"file": self.file, "batch": batch_id, "size_before": size, "done": False})
        with open(target, "ab") as handle:
            for line in lines:
                handle.write(line.encode("utf-8", "replace") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
            size_after = handle.tell()
        self._save({"file": self.file, "batch": batch_id, "size_before": size,
                    "size": size_after, "done": True})

    def _save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.path)
        self.state = state
