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
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

from odradek.client.accumulator import ProduceResult
from odradek.client.admin import ADMIN_CONFIG, Admin
from odradek.client.admin_transactions import TransactionDescription
from odradek.client.errors import KafkaError
from odradek.client.partitioner import partition_for_key
from odradek.client.producer import PRODUCER_CONFIG, Producer, _compression_level
from odradek.client.transactions import PreparedTransaction
from odradek.client.types import TopicPartition
from odradek.protocol.records import Compression
from odradek.spark.columnar import (
    EncodedBatch,
    encode_headers,
    encode_record_batches,
)
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
    #: exactly-once: the task's open transaction, for the driver to end
    prepared: PreparedTransaction | None = None
    #: exactly-once: this task's transaction of this micro-batch was committed by an earlier
    #: run (the micro-batch is a replay), so the task published nothing
    committed_before: bool = False


#: The sink's record batch size when ``kafka.batch.size`` is not set, instead of the Java
#: producer's 16 KiB: every batch costs Python work in the producer and in the broker, and
#: bigger batches halve that cost per row (librdkafka's default is 1 MB).
SINK_BATCH_SIZE = 256 * 1024


class RecordBatchEncoder:
    """A task's rows (Spark's Kafka sink columns) as v2 record batches per topic partition,
    encoded column-wise (`encode_record_batches`: no Python object per row), the marker
    headers on every record.

    Partitions as Kafka's producer picks them: the ``partition`` column when set, else
    murmur2 of the key (unless ``partitioner.ignore.keys``), else the topic's sticky partition,
    which moves to the next partition (round robin from a random one) once ``batch.size``
    bytes went to it. Record batches hold at most ``batch.size`` bytes (`SINK_BATCH_SIZE`
    unless ``kafka.batch.size`` is set; one bigger record gets its own batch) and use
    ``compression.type``; the records of an Arrow batch share one timestamp (CreateTime),
    taken when it is encoded.
    """

    def __init__(self, options: SinkOptions, marker: BatchMarker,
                 partition_count: Callable[[str], int]) -> None:
        config = client_config(PRODUCER_CONFIG, options.client)
        self.topic = options.topic
        self.extra_headers = marker.headers() if options.batch_marker else []
        self.batch_size = max(1, config["batch.size"] if "batch.size" in options.client
                              else SINK_BATCH_SIZE)
        self.compression = Compression[config["compression.type"].upper()]
        self.compression_level = _compression_level(config, self.compression)
        self.ignore_keys: bool = config["partitioner.ignore.keys"]
        self.partition_count = partition_count
        self._extra_size = len(encode_headers(self.extra_headers))
        #: topic -> [sticky partition, bytes sent to it]
        self._sticky: dict[str, list[int]] = {}

    def encode(self, batch: pa.RecordBatch) -> Iterator[tuple[TopicPartition, bytearray, int]]:
        """(topic partition, record batch, records in it) for the rows of `batch`, in row
        order within each partition."""
        names = {name.lower(): index for index, name in enumerate(batch.schema.names)}
        columns = {name: batch.column(names[name])
                   for name in ("key", "value", "partition", "headers") if name in names}
        rows = pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
        timestamp = int(time.time() * 1000)
        for topic, topic_rows in self._by_topic(rows, batch.column(names["topic"])
                                                if self.topic is None else None):
            if not topic_rows.num_rows:
                continue
            count = self.partition_count(topic)
            if self._all_sticky(topic_rows):
                # One pass; each record batch goes to the sticky partition of the moment.
                for payload, records in self._encode(topic_rows, timestamp):
                    yield TopicPartition(topic, self._sticky_partition(topic, count,
                                                                       len(payload))), \
                        payload, records
                continue
            for partition, partition_rows in self._by_partition(topic, count, topic_rows):
                for payload, records in self._encode(partition_rows, timestamp):
                    yield TopicPartition(topic, partition), payload, records

    def _encode(self, rows: pa.RecordBatch, timestamp: int) -> list[EncodedBatch]:
        return encode_record_batches(
            rows.column("value"), _optional(rows, "key"), _optional(rows, "headers"),
            extra_headers=self.extra_headers, timestamp=timestamp,
            max_batch_bytes=self.batch_size, compression=self.compression,
            compression_level=self.compression_level)

    def _all_sticky(self, rows: pa.RecordBatch) -> bool:
        """No row has a partition or (unless keys are ignored) a key."""
        explicit = _optional(rows, "partition")
        keys = None if self.ignore_keys else _optional(rows, "key")
        return (explicit is None or explicit.null_count == len(explicit)) and \
            (keys is None or keys.null_count == len(keys))

    def _sticky_partition(self, topic: str, count: int, size: int) -> int:
        """The topic's sticky partition for `size` more bytes: it moves to the next one once
        ``batch.size`` bytes went to it."""
        state = self._sticky.get(topic)
        if state is None or state[0] >= count:
            state = self._sticky[topic] = [random.randrange(count), 0]
        partition = state[0]
        state[1] += size
        if state[1] >= self.batch_size:
            state[0], state[1] = (partition + 1) % count, 0
        return partition

    def _by_topic(self, rows: pa.RecordBatch, topics: pa.Array | None
                  ) -> Iterator[tuple[str, pa.RecordBatch]]:
        if topics is None:
            assert self.topic is not None
            yield self.topic, rows
            return
        if topics.null_count:
            raise ValueError("null topic present in the data. Use the topic option for "
                             "setting a topic.")
        encoded = pc.dictionary_encode(topics)
        names = encoded.dictionary.to_pylist()
        if len(names) == 1:
            yield names[0], rows
            return
        for index, name in enumerate(names):
            yield name, rows.filter(pc.equal(encoded.indices, pa.scalar(index, pa.int32())))

    def _by_partition(self, topic: str, count: int, rows: pa.RecordBatch
                      ) -> Iterator[tuple[int, pa.RecordBatch]]:
        partitions = self._partitions(topic, count, rows)
        if isinstance(partitions, int):
            yield partitions, rows
            return
        for partition in sorted(pc.unique(partitions).to_pylist()):
            yield partition, rows.filter(pc.equal(partitions, pa.scalar(partition, pa.int32())))

    def _partitions(self, topic: str, count: int, rows: pa.RecordBatch) -> pa.Array | int:
        """Each row's partition (an int when all rows share one)."""
        explicit = _optional(rows, "partition")
        keys = None if self.ignore_keys else _optional(rows, "key")
        if keys is not None and keys.null_count == len(keys):
            keys = None
        if explicit is not None and not explicit.null_count:
            return explicit.cast(pa.int32())
        result = (pa.nulls(rows.num_rows, pa.int32()) if explicit is None
                  else explicit.cast(pa.int32()))
        if keys is not None:
            hashed = pc.and_(pc.is_null(result), pc.is_valid(keys))
            if pc.any(hashed).as_py():
                keyed = pc.filter(_as_bytes(keys), hashed).to_pylist()
                result = pc.replace_with_mask(result, hashed, pa.array(
                    [partition_for_key(key, count) for key in keyed], pa.int32()))
        sticky = pc.is_null(result)
        if pc.any(sticky).as_py():
            chosen = self._sticky_partitions(topic, count, rows.filter(sticky))
            result = pc.replace_with_mask(result, sticky, chosen if not isinstance(chosen, int)
                                          else pa.repeat(pa.scalar(chosen, pa.int32()),
                                                         pc.sum(sticky).as_py()))
        return result

    def _sticky_partitions(self, topic: str, count: int, rows: pa.RecordBatch
                           ) -> pa.Array | int:
        """The sticky partition of each row, when rows with and without a partition are
        mixed: it moves on once ``batch.size`` bytes (estimated record sizes, as Kafka's
        producer counts them) went to it."""
        state = self._sticky.get(topic)
        if state is None or state[0] >= count:
            state = self._sticky[topic] = [random.randrange(count), 0]
        sizes = pc.add(pc.fill_null(pc.binary_length(_as_bytes(rows.column("value"))), 0),
                       pa.scalar(self._extra_size + _RECORD_SIZE_OVERHEAD, pa.int32())
                       ).cast(pa.int64())
        key = _optional(rows, "key")
        if key is not None:
            sizes = pc.add(sizes, pc.fill_null(pc.binary_length(_as_bytes(key)), 0))
        headers = _optional(rows, "headers")
        if headers is not None and headers.null_count < len(headers):
            sizes = pc.add(sizes, _headers_size(headers))
        before = pc.subtract(pc.cumulative_sum(sizes), sizes)  # bytes sent before each row
        first, used = state
        total = used + pc.sum(sizes).as_py()
        state[0] = (first + total // self.batch_size) % count
        state[1] = total % self.batch_size
        if total < self.batch_size:
            return first
        moves = pc.divide(pc.add(before, pa.scalar(used, pa.int64())),
                          pa.scalar(self.batch_size, pa.int64()))
        return pc.modulo(pc.add(moves, pa.scalar(first, pa.int64())),
                         pa.scalar(count, pa.int64())).cast(pa.int32())


# Bytes a record adds to its key, value and headers (Kafka's recordSizeUpperBound counts 21).
_RECORD_SIZE_OVERHEAD = 21


def _headers_size(headers: pa.Array) -> pa.Array:
    """Per row, the bytes of its headers' keys and values plus 10 per header (int64)."""
    entries = headers.values
    both = pc.binary_join_element_wise(_as_bytes(entries.field(0)), _as_bytes(entries.field(1)),
                                       b"", null_handling="replace", null_replacement="")
    joined = pc.binary_join(pa.ListArray.from_arrays(headers.offsets, both), b"")
    joined = pc.if_else(pc.is_valid(headers), joined, b"")
    count = pc.fill_null(pc.list_value_length(headers), 0)
    return pc.add(pc.binary_length(joined), pc.multiply(count, 10)).cast(pa.int64())


def _optional(rows: pa.RecordBatch, name: str) -> pa.Array | None:
    index = rows.schema.get_field_index(name)
    return None if index < 0 else rows.column(index)


def _as_bytes(column: pa.Array) -> pa.Array:
    return column if column.type == pa.binary() else column.cast(pa.binary())


#: Spark hands the sink Arrow batches of 10,000 rows; encoding fewer, bigger ones makes fewer
#: Arrow calls, each of which gives up the GIL to the producer's I/O thread and waits to get
#: it back.
_ENCODE_MIN_ROWS = 65_536
_ENCODE_MAX_BYTES = 64 * 1024 * 1024


def _coalesced(batches: Iterator[pa.RecordBatch], min_rows: int,
               max_bytes: int = _ENCODE_MAX_BYTES) -> Iterator[pa.RecordBatch]:
    """`batches` concatenated into batches of at least `min_rows` rows (but the last), or
    fewer when they reach `max_bytes`."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= min_rows or size >= max_bytes:
            yield _concatenated(pending)
            pending, rows, size = [], 0, 0
    if pending:
        yield _concatenated(pending)


def _concatenated(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def publish_rows(producer: Producer, options: SinkOptions, batches: Iterator[pa.RecordBatch],
                 marker: BatchMarker, published: PublishedTask) -> KafkaError | None:
    """Send every row of `batches` (Spark's Kafka sink columns) through `producer` as record
    batches (`RecordBatchEncoder`), flush, and count what was acknowledged into `published`.
    Returns the first error (sending stops after an Arrow batch once one is known)."""
    partition_counts: dict[str, int] = {}

    def partition_count(topic: str) -> int:
        if topic not in partition_counts:
            partition_counts[topic] = len(producer.partitions_for(topic))
        return partition_counts[topic]

    encoder = RecordBatchEncoder(options, marker, partition_count)
    sent: list[tuple[TopicPartition, int, ProduceResult]] = []
    settled = 0  # sent[:settled] are acknowledged without error
    for batch in _coalesced(batches, _ENCODE_MIN_ROWS):
        for tp, payload, count in encoder.encode(batch):
            sent.append((tp, count, producer.send_record_batch(tp.topic, tp.partition,
                                                               payload, count)))
        while settled < len(sent) and sent[settled][2].done and \
                sent[settled][2].error is None:
            settled += 1
        if settled < len(sent) and sent[settled][2].done:
            break  # a batch failed for good: fail the task without sending the rest
    producer.flush()
    for tp, count, result in sent:
        if result.error is not None:
            return result.error
        published.records += count
        key = (tp.topic, tp.partition)
        first, last = result.base_offset, result.base_offset + count - 1
        if result.base_offset < 0:  # acks=0: the broker does not say
            first = last = -1
        span = published.offsets.get(key)
        published.offsets[key] = (first, last) if span is None else \
            (min(span[0], first), max(span[1], last))
    return None


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
        config = client_config(PRODUCER_CONFIG, self.options.client, **{
            "client.id": self.options.client.get("client.id", "odradek-spark-writer")})
        with Producer(config) as producer:
            error = publish_rows(producer, self.options, batches, marker, published)
        if error is not None:
            raise error
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


#: the coordinator's states of a transaction that is (or is being) committed
_COMMITTED_STATES = frozenset({"PrepareCommit", "CompleteCommit"})


class ExactlyOnce:
    """Each task writes its rows of a micro-batch in a transaction of its own, named by
    (query id, batch id, task partition), and hands it to the driver open (prepared); the
    driver commits every task's transaction once all succeeded, or aborts them.

    A replay of the micro-batch (a driver crash after the commit and before Spark's commit log)
    publishes nothing again: each task first asks the coordinator about its transactional id
    and finds its transaction committed. A task whose earlier transaction was left open (a
    crash before the commit) or aborted starts over: `init_transactions` on the same id fences
    the earlier attempt and aborts what it wrote. Read_committed readers so see each row once,
    provided a replayed micro-batch gives each task the same rows (Spark's replay of the same
    source offsets through a deterministic plan does)."""

    name: ClassVar[str] = "exactly-once"

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def transactional_id(self, marker: BatchMarker) -> str:
        task_partition = (marker.task or "0").split(".", 1)[0]
        batch = marker.batch_id if marker.batch_id is not None else "write"
        return (f"{self.options.transactional_id_prefix}-{marker.query_id}-{batch}-"
                f"{task_partition}")

    def _admin(self) -> Admin:
        return Admin(client_config(ADMIN_CONFIG, self.options.client, **{
            "client.id": self.options.client.get("client.id", "odradek-spark-txn")}))

    def publish_task(self, batches: Iterator[pa.RecordBatch], marker: BatchMarker
                     ) -> PublishedTask:
        """Executor: publish the task's rows in its transaction and prepare it (unless an
        earlier run committed this task's transaction of the micro-batch)."""
        published = PublishedTask(marker)
        transactional_id = self.transactional_id(marker)
        with self._admin() as admin:
            described = admin.describe_transactions([transactional_id],
                                                    raise_errors=False)[transactional_id]
        if isinstance(described, TransactionDescription) and \
                described.state in _COMMITTED_STATES:
            log.info("odradek sink: %s was committed by an earlier run: publishing nothing",
                     transactional_id)
            published.committed_before = True
            return published
        config = client_config(PRODUCER_CONFIG, self.options.client, **{
            "client.id": self.options.client.get("client.id", "odradek-spark-writer"),
            "transactional.id": transactional_id})
        with Producer(config) as producer:  # closing aborts unless prepared
            producer.init_transactions()
            producer.begin_transaction()
            error = publish_rows(producer, self.options, batches, marker, published)
            if error is not None:
                raise error
            published.prepared = producer.prepare_transaction()
        return published

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Driver, all tasks succeeded: commit every task's transaction (ending one that is
        already committed is a no-op, so a replayed commit is safe)."""
        tasks = [m for m in messages if isinstance(m, PublishedTask)]
        with self._admin() as admin:
            for task in tasks:
                if task.prepared is not None:
                    admin.end_transaction(task.prepared, commit=True)
        log.info("odradek sink: batch %s committed, %d records in %d transactions (%d tasks "
                 "committed by an earlier run)", batch_id, sum(t.records for t in tasks),
                 sum(t.prepared is not None and t.prepared.started for t in tasks),
                 sum(t.committed_before for t in tasks))

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        """Driver, a task failed: abort the transactions the others prepared (those left
        open by a failed task are aborted when the batch is run again, or at their timeout)."""
        prepared = [m.prepared for m in messages
                    if isinstance(m, PublishedTask) and m.prepared is not None]
        with self._admin() as admin:
            for transaction in prepared:
                try:
                    admin.end_transaction(transaction, commit=False)
                except KafkaError as error:
                    log.warning("odradek sink: aborting %s failed: %s",
                                transaction.transactional_id, error)
        log.warning("odradek sink: batch %s aborted, %d prepared transactions aborted",
                    batch_id, len(prepared))


_PROTOCOLS: dict[str, Callable[[SinkOptions], CommitProtocol]] = {
    AtLeastOnce.name: AtLeastOnce,
    ExactlyOnce.name: ExactlyOnce,
}


def commit_protocol(options: SinkOptions) -> CommitProtocol:
    return _PROTOCOLS[options.delivery_guarantee](options)


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
