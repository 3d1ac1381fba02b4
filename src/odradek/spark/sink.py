"""The "odradek" sink: ``df.write.format("odradek")`` and ``writeStream.format("odradek")``.

Columns as Spark's Kafka sink: ``value`` (string or binary, required), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; otherwise
the producer's partitioner picks), ``headers`` (array<struct<key:string,value:binary>>).

Delivery is at-least-once, like Spark's Kafka sink: each task sends its rows with an idempotent
producer (acks=all, so retries inside a task add no duplicates) and succeeds only when every
record is acknowledged. A task or micro-batch that is run again publishes its rows again; to
make such a replay recognisable, every record carries marker headers (option ``batchMarker``,
default true):

* ``odradek.query.id``: the streaming query's id (stable across restarts from a checkpoint),
  or for a batch write an id made per write;
* ``odradek.batch.id``: the micro-batch id (streaming only);
* ``odradek.run.id``: the run of the streaming query (a restart gets a new one);
* ``odradek.task``: ``<task partition>.<attempt>``.

The commit path is a `CommitProtocol`: tasks publish and return a `PublishedTask`, the driver
then commits or aborts the micro-batch with all of them. `AtLeastOnce` has nothing left to do
at commit (the records are visible once acknowledged). An exactly-once protocol (each task
writing in a transaction that the driver commits, made idempotent per micro-batch) plugs in
behind the same three calls when Odradek has transactions; see docs/spark.md.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

from odradek.client.errors import KafkaError
from odradek.client.producer import PRODUCER_CONFIG, Producer, RecordMetadata
from odradek.spark.options import SinkOptions, client_config, parse_sink_options
from odradek.spark.schema import validate_sink_schema

log = logging.getLogger("odradek.spark")

QUERY_ID_HEADER = "odradek.query.id"
BATCH_ID_HEADER = "odradek.batch.id"
RUN_ID_HEADER = "odradek.run.id"
TASK_HEADER = "odradek.task"

# Local properties Structured Streaming sets on the jobs of a micro-batch.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_RUN_ID_PROPERTY = "spark.jobGroup.id"  # StreamExecution names the job group after the run id

Header = tuple[str, bytes | None]


# ------------------------------------------------------------------------------ markers

@dataclass(frozen=True)
class BatchMarker:
    """Who wrote a record: query, micro-batch, run and task."""

    query_id: str
    batch_id: str | None = None
    run_id: str | None = None
    task: str | None = None

    @classmethod
    def current(cls, write_id: str) -> BatchMarker:
        """The marker of the running Spark task (`write_id` names a batch write)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return cls(write_id)
        task = f"{context.partitionId()}.{context.attemptNumber()}"
        query_id = context.getLocalProperty(_QUERY_ID_PROPERTY)
        if query_id is None:
            return cls(write_id, task=task)
        return cls(query_id, context.getLocalProperty(_BATCH_ID_PROPERTY),
                   context.getLocalProperty(_RUN_ID_PROPERTY), task)

    def headers(self) -> list[Header]:
        fields = ((QUERY_ID_HEADER, self.query_id), (BATCH_ID_HEADER, self.batch_id),
                  (RUN_ID_HEADER, self.run_id), (TASK_HEADER, self.task))
        return [(name, value.encode()) for name, value in fields if value is not None]

    @classmethod
    def from_headers(cls, headers: Mapping[str, bytes | None]) -> BatchMarker | None:
        """The marker a record carries, or None."""
        def text(name: str) -> str | None:
            value = headers.get(name)
            return None if value is None else value.decode()

        query_id = text(QUERY_ID_HEADER)
        if query_id is None:
            return None
        return cls(query_id, text(BATCH_ID_HEADER), text(RUN_ID_HEADER), text(TASK_HEADER))


# ------------------------------------------------------------------------------ publishing

@dataclass
class PublishedTask(WriterCommitMessage):
    """What one task published: record count and, per topic partition, the first and last
    offset written."""

    marker: BatchMarker
    records: int = 0
    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)


class _Acknowledgements:
    """Collects the producer's per-record callbacks (run on the producer's I/O thread)."""

    def __init__(self, published: PublishedTask) -> None:
        self.published = published
        self.error: KafkaError | None = None
        self._lock = threading.Lock()

    def __call__(self, metadata: RecordMetadata | None, error: KafkaError | None) -> None:
        with self._lock:
            if error is not None or metadata is None:
                self.error = self.error or error
                return
            self.published.records += 1
            key = (metadata.topic, metadata.partition)
            span = self.published.offsets.get(key)
            offset = metadata.offset
            self.published.offsets[key] = (offset, offset) if span is None else \
                (min(span[0], offset), max(span[1], offset))


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    names = [n.lower() for n in batch.schema.names]
    return batch.column(names.index(name)).to_pylist() if name in names else None


def publish_rows(producer: Producer, options: SinkOptions, batches: Iterator[pa.RecordBatch],
                 marker: BatchMarker, acknowledge: _Acknowledgements) -> None:
    """Send every row of `batches` (Spark's Kafka sink columns) through `producer`."""
    marker_headers = marker.headers() if options.batch_marker else []
    for batch in batches:
        rows = batch.num_rows
        values = _column(batch, "value")
        assert values is not None  # the schema was validated
        keys = _column(batch, "key") or [None] * rows
        partitions = _column(batch, "partition") or [None] * rows
        topics = [options.topic] * rows if options.topic is not None else _column(batch, "topic")
        header_lists = _column(batch, "headers") or [None] * rows
        assert topics is not None
        for topic, key, value, partition, headers in zip(
                topics, keys, values, partitions, header_lists, strict=True):
            if topic is None:
                raise ValueError("null topic present in the data. Use the topic option for "
                                 "setting a topic.")
            record_headers = [(h["key"], h["value"]) for h in headers] if headers else []
            producer.send(topic, value, key, partition=partition,
                          headers=record_headers + marker_headers or None, callback=acknowledge)
        if acknowledge.error is not None:
            break  # a record failed for good: fail the task without sending the rest


class CommitProtocol(Protocol):
    """How a write is made durable: `publish_task` on executors, then on the driver `commit`
    (every task succeeded) or `abort`, with the tasks' messages."""

    name: ClassVar[str]

    def publish_task(self, batches: Iterator[pa.RecordBatch], marker: BatchMarker
                     ) -> PublishedTask: ...

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None
               ) -> None: ...

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int | None
              ) -> None: ...


class AtLeastOnce:
    """Tasks publish with an idempotent producer and flush; commit has nothing left to do."""

    name: ClassVar[str] = "at-least-once"

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def publish_task(self, batches: Iterator[pa.RecordBatch], marker: BatchMarker
                     ) -> PublishedTask:
        """Executor: publish the task's rows; returns only when all are acknowledged."""
        published = PublishedTask(marker)
        acknowledge = _Acknowledgements(published)
        config = client_config(PRODUCER_CONFIG, self.options.client, **{
            "client.id": self.options.client.get("client.id", "odradek-spark-writer")})
        with Producer(config) as producer:
            publish_rows(producer, self.options, batches, marker, acknowledge)
            producer.flush()
        if acknowledge.error is not None:
            raise acknowledge.error
        return published

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Driver, all tasks succeeded: the records are already visible."""
        records = sum(m.records for m in messages if isinstance(m, PublishedTask))
        log.info("odradek sink: batch %s committed, %d records", batch_id, records)

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Driver, a task failed: what the other tasks published stays (at-least-once); the
        batch is run again and its markers show the replay."""
        published = [m for m in messages if isinstance(m, PublishedTask)]
        log.warning("odradek sink: batch %s aborted after %d task(s) published %d records",
                    batch_id, len(published), sum(m.records for m in published))


_PROTOCOLS: dict[str, Callable[[SinkOptions], CommitProtocol]] = {
    AtLeastOnce.name: AtLeastOnce,
}


def commit_protocol(options: SinkOptions) -> CommitProtocol:
    protocol = _PROTOCOLS.get(options.delivery_guarantee)
    if protocol is None:
        raise ValueError(f"deliveryGuarantee {options.delivery_guarantee} is not available: "
                         "exactly-once needs Odradek transactions, which do not exist yet")
    return protocol(options)


# ------------------------------------------------------------------------------ writers

class _Publishing:
    def __init__(self, raw_options: Mapping[str, Any], schema: StructType) -> None:
        options = parse_sink_options(raw_options)
        validate_sink_schema(schema, options.topic)
        self.protocol = commit_protocol(options)
        #: names a batch write in its markers (streaming writes use the query id)
        self.write_id = str(uuid.uuid4())

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self.protocol.publish_task(iterator, BatchMarker.current(self.write_id))


class OdradekBatchWriter(_Publishing, DataSourceArrowWriter):
    def __init__(self, raw_options: Mapping[str, Any], schema: StructType,
                 overwrite: bool) -> None:
        if overwrite:
            raise ValueError("Save mode Overwrite not allowed for Kafka. Allowed save modes are "
                             "Append and ErrorIfExists (default).")
        super().__init__(raw_options, schema)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self.protocol.commit(messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self.protocol.abort(messages, None)


class OdradekStreamWriter(_Publishing, DataSourceStreamArrowWriter):
    """``writeStream.format("odradek")`` in Append or Complete mode (pyspark's Python data
    sources cannot take Update mode: use `foreach_batch_sink` for it)."""

    def __init__(self, raw_options: Mapping[str, Any], schema: StructType,
                 overwrite: bool) -> None:
        # Complete output mode arrives as overwrite: the sink appends every row, as Spark's.
        super().__init__(raw_options, schema)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.protocol.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.protocol.abort(messages, batchId)


def foreach_batch_sink(**options: str) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function that writes each micro-batch with the batch writer.

    For output modes the streaming sink cannot take (Update). The records carry the same
    markers: the micro-batch's jobs run with the query's and batch's ids.
    """
    def write(batch: DataFrame, batch_id: int) -> None:
        batch.write.format("odradek").options(**options).mode("append").save()

    return write
