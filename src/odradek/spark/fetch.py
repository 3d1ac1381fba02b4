"""Executor side: read one partition's offset range into Arrow record batches.

A task sends Fetch requests (sessionless, one partition) to the partition's leader through the
client's `Cluster` and decodes each response's record batches straight into Arrow columns
(`odradek.spark.columnar.ColumnarDecoder`: no consumer, no Python object per
record). One Arrow batch per Fetch response.

* Control batches (transaction markers) are skipped; under ``read_committed`` the batches of
  aborted transactions are dropped with Kafka's rule (`AbortedTransactions`).
* Offsets missing inside the range (compaction, aborted or control records) are simply not
  returned; the range is done once a batch at or past its end is seen.
* Data loss: when the range starts below the log start offset (retention, DeleteRecords) or
  past the log end (topic recreated), the task fails when ``failOnDataLoss`` is true (the
  default), else it skips what is gone. Records that do not become readable within
  ``kafkaConsumer.pollTimeoutMs`` are treated the same way.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from odradek.client.admin import AdminClient
from odradek.client.admin_types import IsolationLevel, OffsetSpec
from odradek.client.config import ADMIN_CONFIG
from odradek.client.consumer import CONSUMER_CONFIG
from odradek.client.retry import Deadline
from odradek.client.types import TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from odradek.protocol.records import (
    BatchHeader,
    ControlRecordType,
    decode_control_key,
    iter_batches,
    iter_records,
    verify_crc,
)
from odradek.spark.columnar import HEADERS_TYPE, ColumnarDecoder
from odradek.spark.offsets import OffsetRange
from odradek.spark.options import SourceOptions, client_config

log = logging.getLogger("odradek.spark")

_FETCH = 1
_SESSIONLESS_ID = 0
_SESSIONLESS_EPOCH = -1  # FINAL_EPOCH with no session id: a full fetch that opens no session
_ZERO_UUID = uuid.UUID(int=0)
_LAST_VERSION_WITH_TOPIC_NAMES = 12
_NO_PROGRESS_PAUSE_S = 0.05
_MICROS_PER_MILLI = pa.scalar(1000, pa.int64())

DATA_LOSS_HINT = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you don't want your streaming query to fail on such cases, set "
    "the source option \"failOnDataLoss\" to \"false\".")


class DataLossError(RuntimeError):
    """Records a query was to read are gone (``failOnDataLoss`` is true)."""


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    if fail_on_data_loss:
        raise DataLossError(f"{message} {DATA_LOSS_HINT}")
    log.warning("%s Some data may have been lost.", message)


@dataclass(frozen=True)
class FetchSettings:
    """What a task needs to read a range; pickled with every input partition."""

    client: dict[str, str]
    include_headers: bool
    fail_on_data_loss: bool
    read_committed: bool
    poll_timeout_ms: int

    @classmethod
    def from_options(cls, options: SourceOptions) -> FetchSettings:
        return cls(options.client, options.include_headers, options.fail_on_data_loss,
                   options.read_committed, options.poll_timeout_ms)


# ------------------------------------------------------------------------------ decoding

class AbortedTransactions:
    """Kafka's read_committed filter over one partition's fetched batches, in offset order.

    The response lists the aborted transactions overlapping it (producer id, first offset); a
    producer's transactional batches are dropped from its transaction's first offset until its
    ABORT marker.
    """

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        #: (first offset, producer id), lowest first
        self._pending = collections.deque(sorted(aborted))
        self._aborting: set[int] = set()

    def is_aborted(self, data: Any, pos: int, header: BatchHeader) -> bool:
        if not header.has_producer_id:
            return False
        pending = self._pending
        while pending and pending[0][0] <= header.last_offset:
            self._aborting.add(pending.popleft()[1])
        if header.is_control:
            if _is_abort_marker(data, pos, header):
                self._aborting.discard(header.producer_id)
            return False
        return header.is_transactional and header.producer_id in self._aborting


def _is_abort_marker(data: Any, pos: int, header: BatchHeader) -> bool:
    for record in iter_records(data, pos, header):
        return decode_control_key(record.key) == ControlRecordType.ABORT
    return False


class ArrowColumns:
    """Rows of one topic partition as one Arrow batch of the source schema: the batches'
    records are decoded column by column (`ColumnarDecoder`: no Python object per record)."""

    def __init__(self, tp: TopicPartition, schema: pa.Schema, include_headers: bool) -> None:
        self.tp = tp
        self.schema = schema
        self.include_headers = include_headers
        self.decoder = ColumnarDecoder(
            include_headers, schema.field("headers").type if include_headers else HEADERS_TYPE)

    def __len__(self) -> int:
        """Records added (some may fall outside their bounds and be dropped)."""
        return len(self.decoder)

    def add_batch(self, data: Any, pos: int, header: BatchHeader, start: int, until: int) -> None:
        """Add the batch's records with offsets in ``[start, until)``."""
        self.decoder.add_batch(data, pos, header, start, until)

    def to_record_batch(self) -> pa.RecordBatch:
        decoded = self.decoder.finish()
        schema = self.schema
        rows = decoded.num_rows
        types = [f.type for f in schema]
        microseconds = pc.multiply_checked(decoded.column("timestamp"), _MICROS_PER_MILLI)
        columns = [
            decoded.column("key"),
            decoded.column("value"),
            pa.repeat(pa.scalar(self.tp.topic, types[2]), rows),
            pa.repeat(pa.scalar(self.tp.partition, types[3]), rows),
            decoded.column("offset"),
            microseconds.view(types[5]),
            decoded.column("timestampType"),
        ]
        if self.include_headers:
            columns.append(decoded.column("headers"))
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def decode_partition(
    data: Any,
    columns: ArrowColumns,
    position: int,
    until: int,
    aborted: AbortedTransactions | None,
    check_crcs: bool,
) -> int:
    """Decode one fetched partition's records from `position` (below `until`) into `columns`;
    returns the offset to fetch next (`until` once the range is done)."""
    next_offset = position
    for pos, header in iter_batches(data):
        if header.base_offset >= until:
            return until  # nothing left below `until`: the gap was compacted or aborted
        if header.next_offset <= next_offset:
            if aborted is not None:
                aborted.is_aborted(data, pos, header)  # keep the filter's state in order
            continue
        if check_crcs:
            verify_crc(data, pos, header)
        if aborted is not None and aborted.is_aborted(data, pos, header):
            next_offset = header.next_offset
            continue
        if not header.is_control:
            columns.add_batch(data, pos, header, next_offset, until)
        next_offset = header.next_offset
    return min(next_offset, until)


# ------------------------------------------------------------------------------ fetching

class PartitionFetcher:
    """Sessionless Fetch requests for one partition on one event loop (a task's)."""

    def __init__(self, settings: FetchSettings) -> None:
        consumer = client_config(CONSUMER_CONFIG, settings.client)
        self.settings = settings
        self.admin = AdminClient(client_config(
            ADMIN_CONFIG, settings.client,
            **{"client.id": settings.client.get("client.id", "odradek-spark-reader")}))
        self.cluster = self.admin.cluster
        self.max_wait_ms: int = consumer["fetch.max.wait.ms"]
        self.max_bytes: int = consumer["fetch.max.bytes"]
        self.partition_max_bytes: int = consumer["max.partition.fetch.bytes"]
        self.check_crcs: bool = consumer["check.crcs"]
        self.isolation = (IsolationLevel.READ_COMMITTED if settings.read_committed
                          else IsolationLevel.READ_UNCOMMITTED)

    async def close(self) -> None:
        await self.admin.close()

    async def fetch(self, tp: TopicPartition, offset: int) -> Any:
        """The partition's part of a Fetch response at `offset`, retrying retriable errors
        until ``kafkaConsumer.pollTimeoutMs``; OFFSET_OUT_OF_RANGE is returned, not raised."""
        deadline = Deadline(self.settings.poll_timeout_ms)
        attempts = 0
        while True:
            try:
                partition = await self._fetch_once(tp, offset, deadline)
                error = ErrorCode.from_code(partition.error_code)
                if error in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                    return partition
                raise KafkaError(error, f"Fetch of {tp} at offset {offset} failed")
            except KafkaError as error:
                if not error.retriable or deadline.expired():
                    raise
                self.cluster.note_error(error)
                self.cluster.request_update()
                delay_ms = deadline.cap(self.cluster.retry_backoff.delay_ms(attempts))
                attempts += 1
                log.debug("Fetch of %s at %d failed (%s); retrying in %.0f ms", tp, offset,
                          error, delay_ms)
                await asyncio.sleep(delay_ms / 1000)

    async def _fetch_once(self, tp: TopicPartition, offset: int, deadline: Deadline) -> Any:
        leader = (await self.cluster.leaders([tp], deadline))[tp]
        if isinstance(leader, KafkaError):
            raise leader
        topic_id = self.cluster.metadata.topics[tp.topic].topic_id
        connection = await self.cluster.connection(leader, deadline)
        by_id = topic_id != _ZERO_UUID
        version = connection.pick_version(
            _FETCH, min_version=4, max_version=None if by_id else _LAST_VERSION_WITH_TOPIC_NAMES)
        by_id = version > _LAST_VERSION_WITH_TOPIC_NAMES
        fetch_partition = m.FetchRequest.FetchPartition(
            partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=self.partition_max_bytes)
        topic = (m.FetchRequest.FetchTopic(topic_id=topic_id, partitions=[fetch_partition])
                 if by_id else
                 m.FetchRequest.FetchTopic(topic=tp.topic, partitions=[fetch_partition]))
        request = m.FetchRequest(
            replica_id=-1, max_wait_ms=self.max_wait_ms, min_bytes=1, max_bytes=self.max_bytes,
            isolation_level=int(self.isolation), session_id=_SESSIONLESS_ID,
            session_epoch=_SESSIONLESS_EPOCH, topics=[topic], forgotten_topics_data=[],
            rack_id="")
        response = await connection.send(
            request, api_version=version,
            timeout_ms=self.cluster.request_timeout(deadline) + self.max_wait_ms)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(response.error_code, f"Fetch of {tp} failed")
        for topic_response in response.responses:
            if (topic_response.topic_id == topic_id) if by_id else \
                    (topic_response.topic == tp.topic):
                for partition in topic_response.partitions:
                    if partition.partition_index == tp.partition:
                        return partition
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"The Fetch response does not mention {tp}")

    async def log_bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, end offset) of the partition."""
        earliest = await self.admin.list_offsets({tp: OffsetSpec.earliest()},
                                                 isolation_level=self.isolation)
        latest = await self.admin.list_offsets({tp: OffsetSpec.latest()},
                                               isolation_level=self.isolation)
        return earliest[tp].offset, latest[tp].offset  # type: ignore[union-attr]


def read_range(settings: FetchSettings, offset_range: OffsetRange,
               schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The records of `offset_range` as Arrow batches of `schema` (one per Fetch response)."""
    loop = asyncio.new_event_loop()
    fetcher = PartitionFetcher(settings)
    try:
        yield from _read(loop, fetcher, offset_range, schema)
    finally:
        loop.run_until_complete(fetcher.close())
        loop.close()


def _read(loop: asyncio.AbstractEventLoop, fetcher: PartitionFetcher,
          offset_range: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    settings = fetcher.settings
    tp, offset, until = offset_range.tp, offset_range.from_offset, offset_range.until_offset
    columns = ArrowColumns(tp, schema, settings.include_headers)
    stalled_since: float | None = None
    while offset < until:
        partition = loop.run_until_complete(fetcher.fetch(tp, offset))
        if partition.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log_start, log_end = loop.run_until_complete(fetcher.log_bounds(tp))
            if offset < log_start:
                report_data_loss(f"Cannot fetch offset {offset} of {tp}: the log now starts at "
                                 f"{log_start}.", settings.fail_on_data_loss)
                offset = log_start
                continue
            report_data_loss(f"Cannot fetch offsets [{offset}, {until}) of {tp}: the log ends "
                             f"at {log_end}.", settings.fail_on_data_loss)
            return
        aborted = None
        if settings.read_committed:
            aborted = AbortedTransactions((a.first_offset, a.producer_id)
                                          for a in partition.aborted_transactions or ())
        data = partition.records if partition.records is not None else b""
        try:
            next_offset = decode_partition(data, columns, offset, until, aborted,
                                           fetcher.check_crcs)
        except CorruptRecordError as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                             f"Records of {tp} fetched at offset {offset} are invalid: {exc}"
                             ) from None
        if len(columns):
            batch = columns.to_record_batch()
            if batch.num_rows:
                yield batch
        if next_offset > offset:
            offset, stalled_since = next_offset, None
            continue
        # Nothing readable yet (e.g. an open transaction under read_committed): poll again.
        now = time.monotonic()
        stalled_since = stalled_since or now
        if (now - stalled_since) * 1000 >= settings.poll_timeout_ms:
            report_data_loss(f"Cannot fetch records in [{offset}, {until}) of {tp} within "
                             f"{settings.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs).",
                             settings.fail_on_data_loss)
            return
        time.sleep(_NO_PROGRESS_PAUSE_S)
