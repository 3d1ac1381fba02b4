"""The producer: `AsyncProducer` (asyncio) and `Producer` (blocking), Kafka's KafkaProducer.

    with Producer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        future = producer.send("events", b"value", key=b"key")
        print(future.get(10))          # RecordMetadata(topic, partition, offset, ...)
        producer.flush()

    async with AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        metadata = await producer.send_and_wait("events", b"value")

How it works, as in Kafka's Java client:

* ``send`` serializes the record, picks its partition (`partitioner`) and appends it to the
  partition's open batch in the `RecordAccumulator`; it blocks (up to ``max.block.ms``) only
  for topic metadata or buffer memory. The blocking `Producer` appends from the calling
  thread, so a send costs no thread hop.
* The sender, a task on the client's event loop, sends batches that are ready (full, lingered
  ``linger.ms``, or flushing) to partition leaders, one Produce request per broker holding at
  most one batch per partition, with at most ``max.in.flight.requests.per.connection``
  requests in flight per broker.
* Retriable failures (lost connections, timeouts, NOT_LEADER_OR_FOLLOWER, ...) put the batch
  back at the head of its queue after ``retry.backoff.ms`` (exponential), refreshing the
  metadata when it is stale, until ``retries`` or ``delivery.timeout.ms`` run out.
* Idempotence (``enable.idempotence``, on by default): the producer gets a producer id and
  epoch (InitProducerId) and numbers each partition's records; a retried batch keeps its
  sequence numbers, so the broker drops duplicates, and while a partition has a batch being
  retried nothing else is sent to it, so order is kept. OUT_OF_ORDER_SEQUENCE_NUMBER or
  UNKNOWN_PRODUCER_ID for the first unacknowledged batch means the broker lost the producer's
  state: the producer bumps its epoch itself (as Kafka's Java producer does; at the highest
  epoch it asks for a new producer id instead), restarts every partition's sequence at 0 and
  resends.
* Transactions (``transactional.id``): `init_transactions`, `begin_transaction`,
  `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`; the state machine
  and the coordinator requests are in `transactions.TransactionManager`. The sender sends a
  batch only to a partition already added to the transaction (AddPartitionsToTxn first), and
  fails what is queued once the transaction can only abort.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self, TypeVar

from odradek.client.accumulator import (
    BufferFull,
    Callback,
    ProducerBatch,
    ProduceResult,
    RecordAccumulator,
    RecordFuture,
    RecordMetadata,
    TopicQueues,
    estimate_record_size,
)
from odradek.client.cluster import INVALID_METADATA_ERRORS, Cluster
from odradek.client.config import COMMON_CONFIG, ClientConfig, ConfigKey, at_least, one_of
from odradek.client.connection import Connection
from odradek.client.errors import (
    KafkaConfigError,
    KafkaConnectionError,
    KafkaTimeoutError,
    error_from_code,
)
from odradek.client.partitioner import partition_for_key
from odradek.client.retry import Deadline, ExponentialBackoff
from odradek.client.subscription import OffsetAndMetadata
from odradek.client.sync import SyncFacade, blocking
from odradek.client.transactions import (
    MAX_TRANSACTIONAL_PRODUCE_VERSION,
    PreparedTransaction,
    TransactionAbortedError,
    TransactionManager,
    TransactionState,
    TransactionStateError,
)
from odradek.client.types import ConsumerGroupMetadata, TopicMetadata, TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import BATCH_HEADER_SIZE, Compression, increment_sequence, kafka_level

__all__ = [
    "PRODUCER_CONFIG",
    "AsyncProducer",
    "Producer",
    "RecordFuture",
    "RecordMetadata",
]

log = logging.getLogger("odradek.client.producer")

_PRODUCE, _INIT_PRODUCER_ID = 0, 22
# A v2 batch's attributes (int16 after base offset, length, leader epoch, magic and CRC); the
# transactional flag is bit 4 of its low byte.
_ATTRIBUTES_OFFSET, _TRANSACTIONAL_FLAG = 21, 0x10
_MAX_IN_FLIGHT_WITH_IDEMPOTENCE = 5
# The highest producer epoch (an int16); past it a producer needs a new producer id.
MAX_PRODUCER_EPOCH = 32767
# How long the idle sender sleeps at most while anything is queued or in flight (expiry checks).
_MAX_SENDER_SLEEP_S = 1.0
T = TypeVar("T")
_client_ids = itertools.count(1)

Serializer = Callable[[Any], "bytes | None"]
HeadersArg = Iterable[tuple[str, "bytes | str | None"]] | Mapping[str, "bytes | str | None"] | None

#: The producer's configuration keys with Kafka 3.8's defaults (linger.ms is 0 before 4.0).
PRODUCER_CONFIG = COMMON_CONFIG.extend(keys=[
    ConfigKey("acks", "str", "all", one_of("all", "-1", "0", "1")),
    ConfigKey("batch.size", "int", 16_384, at_least(0)),
    ConfigKey("linger.ms", "int", 0, at_least(0)),
    ConfigKey("buffer.memory", "int", 33_554_432, at_least(0)),
    ConfigKey("compression.type", "str", "none",
              one_of("none", "gzip", "snappy", "lz4", "zstd")),
    ConfigKey("compression.gzip.level", "int", -1),
    ConfigKey("compression.lz4.level", "int", 9),
    ConfigKey("compression.zstd.level", "int", 3),
    ConfigKey("max.in.flight.requests.per.connection", "int", 5, at_least(1)),
    ConfigKey("delivery.timeout.ms", "int", 120_000, at_least(0)),
    ConfigKey("max.request.size", "int", 1_048_576, at_least(0)),
    ConfigKey("max.block.ms", "int", 60_000, at_least(0)),
    ConfigKey("enable.idempotence", "bool", True),
    ConfigKey("partitioner.ignore.keys", "bool", False),
    ConfigKey("partitioner.adaptive.partitioning.enable", "bool", True),
    ConfigKey("partitioner.availability.timeout.ms", "int", 0, at_least(0)),
    ConfigKey("transactional.id", "str", None),
    ConfigKey("transaction.timeout.ms", "int", 60_000),
    ConfigKey("metadata.max.idle.ms", "int", 300_000),
    # Java class names from properties files; records are bytes (or str) here.
    ConfigKey("key.serializer", "str", None),
    ConfigKey("value.serializer", "str", None),
])

_CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
           "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
_IDEMPOTENCE_ERRORS = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 ErrorCode.UNKNOWN_PRODUCER_ID,
                                 ErrorCode.INVALID_PRODUCER_EPOCH})


def parse_producer_config(config: Mapping[str, Any] | ClientConfig) -> ClientConfig:
    """Parse and reconcile the settings as Kafka's ProducerConfig does: idempotence is turned
    off quietly when it was not asked for and other settings conflict with it (and an error
    when it was asked for); ``delivery.timeout.ms`` must cover ``linger.ms`` plus
    ``request.timeout.ms``."""
    parsed = config if isinstance(config, ClientConfig) else PRODUCER_CONFIG.parse(config)
    values = dict(parsed)
    originals = parsed.originals
    transactional = bool(values["transactional.id"])
    if transactional and not values["enable.idempotence"]:
        raise KafkaConfigError("Cannot set a transactional.id without also enabling "
                               "idempotence.")
    if values["enable.idempotence"]:
        # A transactional producer needs idempotence: conflicts are errors, as when asked for.
        explicit = "enable.idempotence" in originals or transactional
        conflicts = []
        if values["max.in.flight.requests.per.connection"] > _MAX_IN_FLIGHT_WITH_IDEMPOTENCE:
            conflicts.append("Must set max.in.flight.requests.per.connection to at most 5 when "
                             "using the idempotent producer.")
        if values["retries"] == 0:
            conflicts.append("Must set retries to non-zero when using the idempotent producer.")
        if values["acks"] not in ("all", "-1"):
            conflicts.append("Must set acks to all in order to use the idempotent producer. "
                             "Otherwise we cannot guarantee idempotence.")
        if conflicts:
            if explicit:
                raise KafkaConfigError(conflicts[0])
            log.info("Idempotence will be disabled because %s", " ".join(conflicts))
            values["enable.idempotence"] = False
    minimum = values["linger.ms"] + values["request.timeout.ms"]
    if values["delivery.timeout.ms"] < minimum:
        if "delivery.timeout.ms" in originals:
            raise KafkaConfigError("delivery.timeout.ms should be equal to or larger than "
                                   "linger.ms + request.timeout.ms")
        values["delivery.timeout.ms"] = minimum
    return ClientConfig(values, dict(originals))


def to_bytes(data: Any) -> bytes | None:
    """The default serializer: bytes as they are, str as UTF-8, None as null."""
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"cannot serialize a {type(data).__name__}: pass bytes or str, or give the "
                    "producer a serializer")


def _headers(headers: HeadersArg) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(name), to_bytes(value)) for name, value in items]


#: a serialized record: (key, value, headers, estimated size in a batch)
Serialized = tuple["bytes | None", "bytes | None", "list[tuple[str, bytes | None]] | None", int]


class _TopicRoute:
    """What `AsyncProducer.append` needs of a topic, made once per metadata update."""

    __slots__ = ("queues", "topics")

    def __init__(self, topics: dict[str, TopicMetadata], queues: TopicQueues) -> None:
        #: the metadata's topic table this was made from: a new table means a new route
        self.topics = topics
        #: the topic's queues, partition count and sticky partition
        self.queues = queues


class _MetadataNeeded(Exception):
    """The topic's partitions are not known yet."""

    #: set by `AsyncProducer.append`: the serialized record, for the retry
    record: Serialized = (None, None, None, 0)


class _Idempotence:
    """Producer id, epoch and per-partition sequence numbers (Kafka's TransactionManager,
    idempotent part)."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1
        self.next_seq: dict[TopicPartition, int] = {}
        self.last_acked: dict[TopicPartition, int] = {}
        #: the producer must get a new epoch (and restart sequences) before sending more
        self.bump_needed = False
        self.task: asyncio.Task[None] | None = None
        self.retry_at = 0.0
        self.attempts = 0
        self.fatal: KafkaError | None = None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def take_sequence(self, tp: TopicPartition, count: int) -> int:
        sequence = self.next_seq.get(tp, 0)
        self.next_seq[tp] = increment_sequence(sequence, count)
        return sequence

    def expected_sequence(self, tp: TopicPartition) -> int:
        """The sequence the broker expects next: right after the last acknowledged one."""
        last = self.last_acked.get(tp)
        return 0 if last is None else increment_sequence(last, 1)

    def acknowledge(self, batch: ProducerBatch) -> None:
        if batch.base_sequence is None or batch.producer_epoch != self.epoch:
            return
        self.last_acked[batch.tp] = batch.last_sequence


class ProducerMetrics:
    """A few of Kafka's producer metrics (producer-metrics group)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.record_send_total = 0
        self.record_error_total = 0
        self.record_retry_total = 0
        self.batch_total = 0
        self.batch_bytes_total = 0
        self.uncompressed_bytes_total = 0
        self.request_total = 0
        self.request_latency_total = 0.0
        self.request_latency_max = 0.0

    def as_dict(self) -> dict[str, float]:
        elapsed = max(1e-9, time.monotonic() - self.started)
        requests = max(1, self.request_total)
        batches = max(1, self.batch_total)
        return {
            "batch-size-avg": self.batch_bytes_total / batches,
            "compression-rate-avg": (self.batch_bytes_total / self.uncompressed_bytes_total
                                     if self.uncompressed_bytes_total else 1.0),
            "record-error-total": self.record_error_total,
            "record-retry-total": self.record_retry_total,
            "record-send-rate": self.record_send_total / elapsed,
            "record-send-total": self.record_send_total,
            "records-per-request-avg": self.record_send_total / requests,
            "request-latency-avg": 1000 * self.request_latency_total / requests,
            "request-latency-max": 1000 * self.request_latency_max,
            "request-total": self.request_total,
        }


class AsyncProducer:
    """Kafka's producer on asyncio. Create it inside a running event loop; ``await close()``
    (or ``async with``) when done."""

    def __init__(
        self,
        config: Mapping[str, Any] | ClientConfig,
        *,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
    ) -> None:
        self.config = parse_producer_config(config)
        config = self.config
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.cluster = Cluster(config, default_client_id=f"producer-{next(_client_ids)}")
        self.client_id = self.cluster.client_id
        self.key_serializer = key_serializer or to_bytes
        self.value_serializer = value_serializer or to_bytes
        self._raw_keys = self.key_serializer is to_bytes
        self._raw_values = self.value_serializer is to_bytes
        self.acks = -1 if config["acks"] in ("all", "-1") else int(config["acks"])
        self.max_in_flight: int = config["max.in.flight.requests.per.connection"]
        self.max_request_size: int = config["max.request.size"]
        self.max_block_ms: int = config["max.block.ms"]
        self.request_timeout_ms: int = config["request.timeout.ms"]
        self.retries: int = config["retries"]
        self.buffer_memory: int = config["buffer.memory"]
        #: the largest record size estimate both limits allow (checked in full only above it)
        self._max_record_size = min(self.max_request_size - BATCH_HEADER_SIZE,
                                    self.buffer_memory)
        self.ignore_keys: bool = config["partitioner.ignore.keys"]
        self.retry_backoff = ExponentialBackoff(config["retry.backoff.ms"],
                                                config["retry.backoff.max.ms"])
        codec = _CODECS[config["compression.type"]]
        self.accumulator = RecordAccumulator(
            batch_size=config["batch.size"],
            linger_ms=config["linger.ms"],
            buffer_memory=self.buffer_memory,
            delivery_timeout_ms=config["delivery.timeout.ms"],
            compression=codec,
            compression_level=_compression_level(config, codec),
            adaptive_partitioning=config["partitioner.adaptive.partitioning.enable"],
        )
        self.accumulator.on_space_freed = self._on_space_freed
        self.metrics = ProducerMetrics()
        self._idempotence = _Idempotence() if config["enable.idempotence"] else None
        self._txn: TransactionManager | None = None
        if config["transactional.id"]:
            idempotence = self._idempotence
            assert idempotence is not None
            self._txn = TransactionManager(
                config["transactional.id"], config["transaction.timeout.ms"], self.cluster,
                request_timeout_ms=self.request_timeout_ms, backoff=self.retry_backoff,
                producer_id_and_epoch=lambda: (idempotence.producer_id, idempotence.epoch),
                set_producer_id=lambda pid, epoch: self._reset_sequences(idempotence, pid,
                                                                         epoch),
                spawn=self._spawn, wake=self.wake)
        #: node -> Produce requests in flight
        self._in_flight: dict[int, int] = defaultdict(int)
        #: partition -> its batches in flight, in send order
        self._in_flight_batches: dict[TopicPartition, list[ProducerBatch]] = defaultdict(list)
        self._connections: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Task[None]] = {}
        self._node_retry_at: dict[int, tuple[int, float]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_wanted: set[str] = set()
        self._metadata_retry_at = 0.0
        self._routes: dict[str, _TopicRoute] = {}
        self._wakeup = asyncio.Event()
        self._wake_scheduled = False
        self._space_freed = asyncio.Event()
        self._closing = False
        self._closed = False
        self._sender = self._loop.create_task(self._run_sender())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------ sending

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersArg = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Queue a record; returns its `RecordFuture` (``await`` it for the `RecordMetadata`).

        Waits up to ``max.block.ms`` for the topic's metadata or for buffer memory.
        `callback(metadata, error)` runs on the client's event loop when the record is
        acknowledged or failed; callbacks of one partition run in send order.
        """
        try:
            return self.append(topic, partition, timestamp_ms, callback, key, value, headers)
        except (_MetadataNeeded, BufferFull) as wait:
            record, reason = wait.record, wait
        deadline = Deadline(self.max_block_ms)
        while True:
            if isinstance(reason, _MetadataNeeded):
                await self.wait_on_metadata(topic, deadline, partition)
            else:
                await self._wait_for_space(reason.size, deadline)
            try:
                return self.append(topic, partition, timestamp_ms, callback, *record)
            except (_MetadataNeeded, BufferFull) as wait:
                reason = wait

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            **options: Any) -> RecordMetadata:
        """`send`, then wait for the acknowledgement."""
        future = await self.send(topic, value, key, **options)
        return await future

    def append(self, topic: str, partition: int | None, timestamp_ms: int | None,
               callback: Callback | None, key: Any, value: Any, headers: HeadersArg,
               size: int = -1) -> RecordFuture:
        """Serialize a record, partition it and append it to the accumulator without waiting.

        A `size` of 0 or more says `key`, `value` and `headers` are serialized already (as
        `_MetadataNeeded` and `BufferFull` carry them). Thread-safe. Raises `_MetadataNeeded`
        when the topic's partitions are unknown and `BufferFull` when ``buffer.memory`` is used
        up, each with the serialized record as ``record`` (key, value, headers, size) for the
        retry. One function for the hot path of every send: each call saved counts.
        """
        if size < 0:
            # bytes (or None) under the default serializers need no call: the common case
            if not (self._raw_keys and (key is None or type(key) is bytes)):
                key = self.key_serializer(key)
            if not (self._raw_values and (value is None or type(value) is bytes)):
                value = self.value_serializer(value)
            if headers:
                headers = _headers(headers)
                size = estimate_record_size(key, value, headers)
            else:  # estimate_record_size without headers, inline
                headers = None
                size = 21 + (0 if key is None else len(key)) + \
                    (0 if value is None else len(value))
            if size > self._max_record_size:
                self._check_record_size(size)
        if self._closing:
            raise RuntimeError("Cannot perform operation after producer has been closed")
        if self._txn is not None:
            self._txn.fail_if_not_ready_for_send()
        idempotence = self._idempotence
        if idempotence is not None and idempotence.fatal is not None:
            raise idempotence.fatal
        try:
            route = self._routes.get(topic)
            if route is None or route.topics is not self.cluster.metadata.topics:
                route = self._route(topic)
            if partition is not None:
                if partition < 0:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"Invalid partition given with record: {partition} is not "
                                     f"in the range [0...{route.queues.count}).")
                if partition >= route.queues.count:
                    raise _MetadataNeeded(topic)  # the topic may have grown: look again
            elif key is not None and not self.ignore_keys:
                partition = partition_for_key(key, route.queues.count)
            # else None: the accumulator appends to the topic's sticky partition
            if timestamp_ms is None:
                timestamp_ms = time.time_ns() // 1_000_000
            future, wake = self.accumulator.append(route.queues, partition, timestamp_ms, key,
                                                   value, headers, callback, size)
        except (_MetadataNeeded, BufferFull) as wait:
            wait.record = (key, value, headers, size)
            raise
        if wake:
            self.wake()
        return future

    def _check_record_size(self, size: int) -> None:
        """Raise MESSAGE_TOO_LARGE for a record over ``max.request.size`` or
        ``buffer.memory``."""
        if size + BATCH_HEADER_SIZE > self.max_request_size:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"The message is {size + BATCH_HEADER_SIZE} bytes when serialized "
                             f"which is larger than {self.max_request_size}, which is the "
                             "value of the max.request.size configuration.")
        if size > self.buffer_memory:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"The message is {size} bytes when serialized which is larger "
                             "than the total memory buffer you have configured with the "
                             "buffer.memory configuration.")

    def _route(self, topic: str) -> _TopicRoute:
        """`topic`'s route under the current metadata (made once per metadata update)."""
        topics = self.cluster.metadata.topics
        topic_metadata = topics.get(topic)
        if topic_metadata is None or not topic_metadata.partitions:
            raise _MetadataNeeded(topic)
        count = len(topic_metadata.partitions)
        available = sorted(p for p, md in topic_metadata.partitions.items() if md.leader >= 0)
        route = self._routes[topic] = _TopicRoute(
            topics, self.accumulator.topic_queues(topic, count, available))
        return route

    def append_record_batch(self, topic: str, partition: int, payload: bytearray,
                            record_count: int) -> ProduceResult:
        """Queue a v2 record batch built by the caller (base offset 0, no producer id, epoch
        or sequence: see `RecordAccumulator.append_batch`) for `partition` without waiting;
        the returned `ProduceResult` completes with the batch's base offset or error.

        Thread-safe. Raises `_MetadataNeeded` when the partition is not known yet and
        `BufferFull` when ``buffer.memory`` is used up.
        """
        if self._closing:
            raise RuntimeError("Cannot perform operation after producer has been closed")
        if self._txn is not None:
            self._txn.fail_if_not_ready_for_send()
            payload[_ATTRIBUTES_OFFSET + 1] |= _TRANSACTIONAL_FLAG  # the CRC is redone on send
        fatal = self._idempotence.fatal if self._idempotence is not None else None
        if fatal is not None:
            raise fatal
        if len(payload) > self.max_request_size:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"The record batch is {len(payload)} bytes which is larger than "
                             f"{self.max_request_size}, which is the value of the "
                             "max.request.size configuration.")
        topic_metadata = self.cluster.metadata.topics.get(topic)
        if topic_metadata is None or not topic_metadata.partitions:
            raise _MetadataNeeded(topic)
        if partition < 0:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Invalid partition given with record batch: {partition} is not "
                             f"in the range [0...{len(topic_metadata.partitions)}).")
        if partition >= len(topic_metadata.partitions):
            raise _MetadataNeeded(topic)
        result = self.accumulator.append_batch(TopicPartition(topic, partition), payload,
                                               record_count)
        self.wake()
        return result

    async def wait_on_metadata(self, topic: str, deadline: Deadline,
                               partition: int | None = None) -> TopicMetadata:
        """Refresh the metadata until `topic` has partitions (and `partition`, when given)
        (Kafka's waitOnMetadata); the broker creates topics it auto-creates."""
        attempts = 0
        while True:
            topic_metadata = self.cluster.metadata.topics.get(topic)
            if topic_metadata is not None and topic_metadata.partitions and (
                    partition is None or partition < len(topic_metadata.partitions)):
                return topic_metadata
            if topic_metadata is not None and topic_metadata.error != ErrorCode.NONE and \
                    not topic_metadata.error.retriable:
                raise KafkaError(topic_metadata.error, f"Topic {topic}: "
                                 f"{topic_metadata.error.message}")
            if deadline.expired():
                if topic_metadata is not None and topic_metadata.partitions:
                    raise KafkaTimeoutError(
                        f"Partition {partition} of topic {topic} with partition count "
                        f"{len(topic_metadata.partitions)} is not present in metadata after "
                        f"{self.max_block_ms} ms.")
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{self.max_block_ms} ms.")
            if attempts:
                await asyncio.sleep(min(self.retry_backoff.delay_ms(attempts - 1),
                                        deadline.remaining_ms()) / 1000)
            attempts += 1
            try:
                await self.cluster.refresh_metadata(
                    set(self.cluster.metadata.topics) | {topic}, allow_auto_topic_creation=True,
                    deadline=deadline)
            except KafkaError as error:
                log.debug("metadata refresh for %s failed: %s", topic, error)

    async def _wait_for_space(self, size: int, deadline: Deadline) -> None:
        self.accumulator.memory_waiters += 1
        try:
            while not self.accumulator.has_space(size):
                self._space_freed.clear()
                self.wake()
                if deadline.expired():
                    raise KafkaTimeoutError(f"Failed to allocate {size} bytes within the "
                                            f"configured max blocking time {self.max_block_ms} "
                                            "ms.")
                try:
                    async with asyncio.timeout(deadline.remaining_ms() / 1000):
                        await self._space_freed.wait()
                except TimeoutError:
                    pass
        finally:
            self.accumulator.memory_waiters -= 1

    def _on_space_freed(self) -> None:
        self._space_freed.set()

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (waits up to ``max.block.ms`` for the metadata)."""
        topic_metadata = await self.wait_on_metadata(topic, Deadline(self.max_block_ms))
        return sorted(topic_metadata.partitions)

    # ------------------------------------------------------------------------------ transactions

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError("Transactional method invoked on a non-transactional "
                                        "producer.")
        if self._closing:
            raise RuntimeError("Cannot perform operation after producer has been closed")
        return self._txn

    async def init_transactions(self, timeout_ms: float | None = None) -> None:
        """Get the producer id and epoch for ``transactional.id`` from its coordinator, which
        fences older producers with the same id and completes their open transaction (Kafka's
        initTransactions). Waits at most `timeout_ms` (default ``max.block.ms``); after a
        timeout, calling it again waits for the same initialization."""
        await self._transactions().initialize(
            self.max_block_ms if timeout_ms is None else timeout_ms)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on belong to it (no broker call)."""
        self._transactions().begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | tuple | str,
        timeout_ms: float | None = None,
    ) -> None:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn, then
        TxnOffsetCommit to the group's coordinator): they become visible to the group only if
        the transaction commits. `group_metadata` is the consumer's ``group_metadata()``."""
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        elif not isinstance(group_metadata, ConsumerGroupMetadata):
            group_metadata = ConsumerGroupMetadata(*group_metadata)
        await self._transactions().send_offsets(
            offsets, group_metadata, self.max_block_ms if timeout_ms is None else timeout_ms)

    async def commit_transaction(self, timeout_ms: float | None = None) -> None:
        """Send what is queued, wait for it, then commit (EndTxn). Raises the error of a
        failed send, after which only `abort_transaction` is allowed."""
        txn = self._transactions()
        await txn.commit(self.max_block_ms if timeout_ms is None else timeout_ms,
                         self._flush_all)

    async def abort_transaction(self, timeout_ms: float | None = None) -> None:
        """Fail the records not sent yet, wait for those in flight, then abort (EndTxn); after
        an abortable error the epoch is bumped when the coordinator supports it."""
        txn = self._transactions()
        await txn.abort(self.max_block_ms if timeout_ms is None else timeout_ms,
                        self._flush_all)

    async def prepare_transaction(self, timeout_ms: float | None = None
                                  ) -> PreparedTransaction:
        """Send the open transaction's records and hand the transaction off without ending it
        (KIP-939's prepare): the producer can then only be closed, and closing it leaves the
        transaction open. Whoever gets the returned `PreparedTransaction` commits or aborts it
        with `AdminClient.end_transaction`, before ``transaction.timeout.ms`` runs out (the
        coordinator aborts it then). For a coordinator of many producers, such as the Spark
        sink's driver."""
        txn = self._transactions()
        return await txn.prepare(self.max_block_ms if timeout_ms is None else timeout_ms,
                                 self._flush_all)

    async def _flush_all(self) -> None:
        await self.flush()

    async def flush(self, timeout_ms: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed."""
        accumulator = self.accumulator
        with accumulator.lock:
            accumulator.flushes_in_progress += 1
            pending = list(accumulator.incomplete)
        self.wake()
        try:
            waits = [batch.result.wait_async() for batch in pending]
            if waits:
                timeout = None if timeout_ms is None else timeout_ms / 1000
                try:
                    await asyncio.wait_for(asyncio.gather(*waits), timeout)
                except TimeoutError:
                    raise KafkaTimeoutError(f"Flush timed out after {timeout_ms} ms") from None
        finally:
            with accumulator.lock:
                accumulator.flushes_in_progress -= 1

    async def close(self, timeout_ms: float | None = None) -> None:
        """Send what is queued (waiting at most `timeout_ms`, forever when None), then close.
        With ``timeout_ms=0`` queued records fail at once."""
        if self._closed:
            return
        txn = self._txn
        if txn is not None and timeout_ms != 0 and txn.state in (
                TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
            # As Kafka's sender on shutdown: an incomplete transaction is aborted.
            log.info("Aborting incomplete transaction due to shutdown")
            try:
                await txn.abort(self.max_block_ms if timeout_ms is None else timeout_ms,
                                self._flush_all)
            except (KafkaError, TransactionStateError) as error:
                log.warning("Aborting the transaction on close failed: %s", error)
        if txn is not None:
            txn.close()
        self._closing = True
        self.accumulator.closing = True
        self.accumulator.wake_memory_waiters()
        self.wake()
        if timeout_ms != 0:
            try:
                await asyncio.wait_for(asyncio.shield(self._sender),
                                       None if timeout_ms is None else timeout_ms / 1000)
            except TimeoutError:
                log.warning("The producer did not send everything within %s ms of close()",
                            timeout_ms)
        self._sender.cancel()
        for task in list(self._tasks) + list(self._connecting.values()):
            task.cancel()
        await asyncio.gather(self._sender, *self._tasks, return_exceptions=True)
        error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "Producer is closed forcefully.")
        for batch in self.accumulator.abort_all() + [
                b for batches in self._in_flight_batches.values() for b in batches]:
            self._fail(batch, error)
        await self.cluster.close()
        self._closed = True

    def metrics_snapshot(self) -> dict[str, float]:
        return self.metrics.as_dict()

    # ------------------------------------------------------------------------------ the sender

    def wake(self) -> None:
        """Wake the sender (from any thread; wake-ups from other threads are coalesced)."""
        if threading.get_ident() == self._loop_thread:
            self._wakeup.set()
        elif not self._wake_scheduled:
            self._wake_scheduled = True
            self._loop.call_soon_threadsafe(self._wakeup.set)

    async def _run_sender(self) -> None:
        while True:
            self._wakeup.clear()
            self._wake_scheduled = False
            now = time.monotonic()
            try:
                delay = self._run_once(now)
            except Exception:  # keep sending; a bug here must not silently stop the producer
                log.exception("Uncaught error in the producer's sender")
                delay = 0.1
            if self._closing and not self._has_pending():
                return
            if self._has_pending():
                delay = min(delay, _MAX_SENDER_SLEEP_S)
            if delay <= 0:
                await asyncio.sleep(0)
                continue
            try:
                async with asyncio.timeout(None if delay == float("inf") else delay):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def _has_pending(self) -> bool:
        return self.accumulator.has_queued() or any(self._in_flight.values())

    def _run_once(self, now: float) -> float:
        """One pass of Kafka's Sender.runOnce; returns seconds until it has work again."""
        for batch in self.accumulator.expire(now):
            self._fail(batch, KafkaTimeoutError(
                f"Expiring {batch.record_count} record(s) for {batch.tp}:"
                f"{(now - batch.created) * 1000:.0f} ms has passed since batch creation"))
        txn = self._txn
        if txn is not None and txn.fails_queued_batches:
            # The transaction will not commit: what was not sent yet fails now (Kafka's
            # abortUndrainedBatches).
            error = txn.last_error if txn.last_error is not None else TransactionAbortedError()
            for batch in self.accumulator.abort_all():
                self._fail(batch, error)
        if self._idempotence is not None:
            wait = self._idempotence_wait(self._idempotence, now)
            if wait is not None:
                return wait
        if self.cluster.metadata_is_stale() and self.accumulator.has_queued():
            self._request_metadata(set(), now)
        ready, delay, unknown = self.accumulator.ready(now, self._leader_of)
        if unknown:
            self._request_metadata(unknown, now)
        for node, partitions in ready.items():
            connection = self._ready_connection(node, now)
            if connection is None:
                retry = self._node_retry_at.get(node)
                if retry is not None and retry[1] > now:
                    delay = min(delay, retry[1] - now)
                continue  # the connect task wakes the sender when it is done
            while self._in_flight[node] < self.max_in_flight:
                batches = self.accumulator.drain(node, partitions, self.max_request_size, now,
                                                 self._can_drain)
                if not batches:
                    break
                self._send_batches(node, connection, batches)
        if txn is not None:
            txn.maybe_add_partitions()  # partitions the drain found new to the transaction
        return delay

    def _leader_of(self, tp: TopicPartition) -> int | None:
        leader = self.cluster.metadata.leader(tp)
        if leader is None or leader not in self.cluster.metadata.brokers:
            return None
        return leader

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _request_metadata(self, topics: set[str], now: float) -> None:
        self._metadata_wanted |= topics
        if self._metadata_task is not None or now < self._metadata_retry_at:
            return
        self._metadata_task = self._spawn(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        wanted, self._metadata_wanted = self._metadata_wanted, set()
        try:
            await self.cluster.refresh_metadata(wanted | set(self.cluster.metadata.topics),
                                                allow_auto_topic_creation=True)
        except KafkaError as error:
            log.debug("metadata refresh failed: %s", error)
        finally:
            self._metadata_retry_at = time.monotonic() + self.retry_backoff.initial_ms / 1000
            self._metadata_task = None
            self.wake()

    def _ready_connection(self, node: int, now: float) -> Connection | None:
        """The node's connection when ready; otherwise starts connecting (once, respecting
        the reconnect backoff) and returns None."""
        connection = self._connections.get(node)
        if connection is not None and connection.ready:
            return connection
        retry = self._node_retry_at.get(node)
        if node not in self._connecting and (retry is None or now >= retry[1]):
            self._connecting[node] = self._spawn(self._connect(node))
        return None

    async def _connect(self, node: int) -> None:
        try:
            self._connections[node] = await self.cluster.connection(node)
            self._node_retry_at.pop(node, None)
        except KafkaError as error:
            failures = self._node_retry_at.get(node, (0, 0.0))[0] + 1
            delay_ms = self.cluster.reconnect_backoff.delay_ms(failures - 1)
            self._node_retry_at[node] = (failures, time.monotonic() + delay_ms / 1000)
            self.cluster.note_error(error)
            self._request_metadata(set(), 0.0)
            log.debug("connecting to node %s failed: %s", node, error)
        finally:
            self._connecting.pop(node, None)
            self.wake()

    def _can_drain(self, batch: ProducerBatch) -> bool:
        if self._txn is not None and not self._txn.send_allowed(batch.tp):
            return False
        in_flight = self._in_flight_batches.get(batch.tp)
        idempotence = self._idempotence
        if idempotence is not None:
            if idempotence.bump_needed:
                return False
            if in_flight:
                # A retried batch goes alone, and nothing follows it until it succeeds: the
                # broker must see the partition's sequences in order.
                if batch.base_sequence is not None or any(b.attempts > 1 for b in in_flight):
                    return False
                return len(in_flight) < _MAX_IN_FLIGHT_WITH_IDEMPOTENCE
            return True
        # Without idempotence, order is only kept with one request in flight.
        return not (self.max_in_flight == 1 and in_flight)

    def _send_batches(self, node: int, connection: Connection,
                      batches: list[ProducerBatch]) -> None:
        idempotence = self._idempotence
        by_topic: dict[str, list[Any]] = {}
        for batch in batches:
            first_send = batch.attempts == 0
            if batch.payload is None and batch.builder is not None:
                uncompressed = batch.builder.size_estimate - BATCH_HEADER_SIZE
                self.metrics.uncompressed_bytes_total += uncompressed
            else:
                uncompressed = 0  # retried, or built by the caller (append_record_batch)
            if idempotence is not None:
                sequence = batch.base_sequence
                if sequence is None:
                    sequence = idempotence.take_sequence(batch.tp, batch.record_count)
                payload = batch.close(idempotence.producer_id, idempotence.epoch, sequence,
                                      transactional=self._txn is not None)
            else:
                payload = batch.close()
            if first_send:
                if uncompressed:
                    self.accumulator.note_built(batch, uncompressed)
                self.metrics.batch_total += 1
                self.metrics.batch_bytes_total += len(payload)
            else:
                self.metrics.record_retry_total += batch.record_count
            batch.attempts += 1
            self._in_flight_batches[batch.tp].append(batch)
            by_topic.setdefault(batch.tp.topic, []).append(
                m.ProduceRequest.PartitionProduceData(index=batch.tp.partition, records=payload))
        request = m.ProduceRequest(
            transactional_id=None if self._txn is None else self._txn.transactional_id,
            acks=self.acks,
            timeout_ms=self.request_timeout_ms,
            topic_data=[m.ProduceRequest.TopicProduceData(name=name, partition_data=parts)
                        for name, parts in by_topic.items()],
        )
        self._in_flight[node] += 1
        # Tasks start in creation order and write their request before their first
        # suspension point, so requests to a broker go out in drain order.
        self._spawn(self._produce(node, connection, request, batches))

    async def _produce(self, node: int, connection: Connection, request: m.ProduceRequest,
                       batches: list[ProducerBatch]) -> None:
        started = time.monotonic()
        try:
            version = connection.pick_version(
                _PRODUCE, min_version=3,
                max_version=None if self._txn is None else MAX_TRANSACTIONAL_PRODUCE_VERSION)
            if self.acks == 0:
                await connection.send(request, api_version=version, expect_response=False)
                response = None
            else:
                response = await connection.send(request, api_version=version,
                                                 timeout_ms=self.request_timeout_ms)
        except KafkaError as error:
            self.cluster.note_error(error)
            for batch in batches:
                self._batch_done(batch)
                self._on_batch_error(batch, error)
        else:
            latency = time.monotonic() - started
            self.metrics.request_total += 1
            self.metrics.request_latency_total += latency
            self.metrics.request_latency_max = max(self.metrics.request_latency_max, latency)
            results = {}
            if response is not None:
                results = {(topic.name, p.index): p for topic in response.responses
                           for p in topic.partition_responses}
            for batch in batches:
                self._batch_done(batch)
                if response is None:
                    self._complete(batch, -1, -1)
                    continue
                result = results.get(batch.tp)
                if result is None:
                    self._on_batch_error(batch, KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, f"The response had no result for "
                        f"{batch.tp}"))
                    continue
                error = error_from_code(result.error_code, result.error_message)
                if error is None or error.code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    self._complete(batch, result.base_offset, result.log_append_time_ms)
                else:
                    self._on_batch_error(batch, error)
        finally:
            self._in_flight[node] -= 1
            self.wake()

    def _batch_done(self, batch: ProducerBatch) -> None:
        """The batch is no longer in flight."""
        in_flight = self._in_flight_batches.get(batch.tp)
        if in_flight is not None and batch in in_flight:
            in_flight.remove(batch)

    def _on_batch_error(self, batch: ProducerBatch, error: KafkaError) -> None:
        """Retry or fail a batch the broker did not take (Kafka's Sender.completeBatch)."""
        code = error.code
        idempotence = self._idempotence
        if self._txn is not None and code in _IDEMPOTENCE_ERRORS:
            # A transactional producer's epoch belongs to its coordinator: the transaction
            # aborts, and the abort bumps the epoch (KIP-360).
            self._fail(batch, error)
            return
        if idempotence is not None and code in _IDEMPOTENCE_ERRORS:
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and \
                    batch.producer_epoch == idempotence.epoch and \
                    batch.base_sequence != idempotence.expected_sequence(batch.tp):
                # An earlier batch of this partition failed: resend this one after it.
                self._retry(batch, error)
                return
            if batch.producer_epoch == idempotence.epoch:
                log.info("Producer %s: %s for %s; bumping the epoch and resetting sequences",
                         idempotence.producer_id, code.name, batch.tp)
                idempotence.bump_needed = True
            self._retry(batch, error)
            return
        if error.retriable or isinstance(error, (KafkaConnectionError, KafkaTimeoutError)):
            if code in INVALID_METADATA_ERRORS:
                self.cluster.note_error(error)
                self._request_metadata({batch.tp.topic}, 0.0)
            self._retry(batch, error)
            return
        self._fail(batch, error)

    def _retry(self, batch: ProducerBatch, error: KafkaError) -> None:
        now = time.monotonic()
        if batch.attempts > self.retries or now >= batch.deadline or self._closed:
            if now >= batch.deadline:
                error = KafkaTimeoutError(
                    f"Expiring {batch.record_count} record(s) for {batch.tp}:"
                    f"{(now - batch.created) * 1000:.0f} ms has passed since batch creation; "
                    f"the last error was {error}")
            self._fail(batch, error)
            return
        log.debug("Retrying %r after %s", batch, error)
        delay_ms = self.retry_backoff.delay_ms(batch.attempts - 1)
        self.accumulator.reenqueue(batch, now + delay_ms / 1000)

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if self._idempotence is not None:
            self._idempotence.acknowledge(batch)
        self.metrics.record_send_total += batch.record_count
        self.accumulator.release(batch)
        batch.complete(base_offset, log_append_time)

    def _fail(self, batch: ProducerBatch, error: KafkaError) -> None:
        idempotence = self._idempotence
        if self._txn is not None:
            self._txn.on_batch_failed(error, batch.base_sequence is not None)
        elif idempotence is not None and batch.base_sequence is not None and \
                batch.producer_epoch == idempotence.epoch and not self._closing:
            # The partition's later sequences no longer follow on: start a new epoch.
            idempotence.bump_needed = True
        self.metrics.record_error_total += batch.record_count
        self.accumulator.release(batch)
        batch.complete(-1, -1, error)

    # ------------------------------------------------------------------------------ idempotence

    def _idempotence_wait(self, idempotence: _Idempotence, now: float) -> float | None:
        """None when batches may be sent; otherwise seconds to wait (the sender is woken
        early when the InitProducerId call or an in-flight request completes), after starting
        to get a producer id or a new epoch when that is due."""
        if idempotence.fatal is not None:
            for batch in self.accumulator.abort_all():
                self._fail(batch, idempotence.fatal)
            return float("inf")
        if idempotence.has_producer_id and not idempotence.bump_needed:
            return None
        if self._txn is not None:
            # The transaction coordinator gives the producer id (init_transactions); until
            # then nothing can be appended.
            return None if idempotence.has_producer_id else float("inf")
        if not self.accumulator.has_queued() and not idempotence.bump_needed:
            return float("inf")  # nothing to send: no producer id needed yet
        if idempotence.task is not None or any(self._in_flight.values()):
            return float("inf")  # a bump waits until every in-flight request has come back
        if idempotence.bump_needed and idempotence.has_producer_id and \
                idempotence.epoch < MAX_PRODUCER_EPOCH:
            # An idempotent producer's epoch is its own to bump (Kafka's
            # bumpIdempotentProducerEpoch); a broker answers InitProducerId without a
            # transactional id with a new producer id.
            self._reset_sequences(idempotence, idempotence.producer_id, idempotence.epoch + 1)
            log.info("Producer %s: producer id %d, epoch bumped to %d", self.client_id,
                     idempotence.producer_id, idempotence.epoch)
            return None
        if now < idempotence.retry_at:
            return idempotence.retry_at - now
        idempotence.task = self._spawn(self._init_producer_id(idempotence))
        return float("inf")

    async def _init_producer_id(self, idempotence: _Idempotence) -> None:
        try:
            deadline = Deadline(self.request_timeout_ms)
            connection = await self.cluster.any_connection(deadline)
            version = connection.pick_version(_INIT_PRODUCER_ID)
            request = m.InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout_ms=self.config["transaction.timeout.ms"],
            )
            response = await connection.send(request, api_version=version,
                                              timeout_ms=self.request_timeout_ms)
            error = error_from_code(response.error_code)
            if error is not None:
                raise error
            self._reset_sequences(idempotence, response.producer_id, response.producer_epoch)
            idempotence.attempts = 0
            log.info("Producer %s: producer id %d, epoch %d", self.client_id,
                     idempotence.producer_id, idempotence.epoch)
        except KafkaError as error:
            if error.retriable or isinstance(error, (KafkaConnectionError, KafkaTimeoutError)):
                delay_ms = self.retry_backoff.delay_ms(idempotence.attempts)
                idempotence.attempts += 1
                idempotence.retry_at = time.monotonic() + delay_ms / 1000
                log.debug("InitProducerId failed (%s); retrying in %.0f ms", error, delay_ms)
            else:
                log.error("InitProducerId failed: %s", error)
                idempotence.fatal = error
        finally:
            idempotence.task = None
            self.wake()

    def _reset_sequences(self, idempotence: _Idempotence, producer_id: int, epoch: int) -> None:
        """A new producer id or epoch: every partition's sequences restart at 0, and batches
        waiting for a retry are renumbered in their queue order."""
        idempotence.producer_id = producer_id
        idempotence.epoch = epoch
        idempotence.next_seq.clear()
        idempotence.last_acked.clear()
        idempotence.bump_needed = False
        for tp in self.accumulator.partitions():
            for batch in self.accumulator.queued_batches(tp):
                if batch.base_sequence is None:
                    break
                batch.close(producer_id, epoch,
                            idempotence.take_sequence(tp, batch.record_count))


def _compression_level(config: ClientConfig, codec: Compression) -> int | None:
    """The codec's level from the producer's `compression.<codec>.level` settings."""
    return kafka_level(codec, config["compression.gzip.level"], config["compression.lz4.level"],
                       config["compression.zstd.level"])


class Producer(SyncFacade[AsyncProducer]):
    """The blocking producer. ``send`` appends from the calling thread and returns a
    `RecordFuture` at once (``future.get(timeout)`` waits for the acknowledgement); the I/O
    runs on a private event loop thread. Use as a context manager, or call `close`."""

    def __init__(
        self,
        config: Mapping[str, Any] | ClientConfig,
        *,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
    ) -> None:
        parsed = parse_producer_config(config)
        super().__init__(lambda: AsyncProducer(parsed, key_serializer=key_serializer,
                                               value_serializer=value_serializer),
                         "odradek-producer")

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersArg = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Queue a record (see `AsyncProducer.send`); blocks only for metadata or memory."""
        core = self._async
        try:
            return core.append(topic, partition, timestamp_ms, callback, key, value, headers)
        except (_MetadataNeeded, BufferFull) as wait:
            record = wait.record  # the slow path: wait for metadata or memory, then retry
        return self._append_blocking(
            topic, partition,
            lambda: core.append(topic, partition, timestamp_ms, callback, *record))

    def send_record_batch(self, topic: str, partition: int, payload: bytearray,
                          record_count: int) -> ProduceResult:
        """Queue a v2 record batch built by the caller (see
        `AsyncProducer.append_record_batch`); blocks only for metadata or memory, like
        `send`. The `ProduceResult` gives the batch's base offset or error once done."""
        core = self._async
        return self._append_blocking(
            topic, partition,
            lambda: core.append_record_batch(topic, partition, payload, record_count))

    def _append_blocking(self, topic: str, partition: int | None, append: Callable[[], T]) -> T:
        """Run `append` until it succeeds, waiting (up to ``max.block.ms``) for the topic's
        metadata or for buffer memory in between."""
        core = self._async
        deadline = Deadline(core.max_block_ms)
        while True:
            try:
                return append()
            except _MetadataNeeded:
                self._run(core.wait_on_metadata(topic, deadline, partition))
            except BufferFull as full:
                core.wake()
                if not core.accumulator.wait_for_space(full.size,
                                                       deadline.remaining_ms() / 1000):
                    if core.accumulator.closing:
                        raise RuntimeError("Cannot perform operation after producer has been "
                                           "closed") from None
                    raise KafkaTimeoutError(
                        f"Failed to allocate {full.size} bytes within the configured max "
                        f"blocking time {core.max_block_ms} ms.") from None

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait for it (at most `timeout` seconds)."""
        self._run(self._async.flush(None if timeout is None else timeout * 1000))

    def close(self, timeout: float | None = None) -> None:  # type: ignore[override]
        """Send what is queued (at most `timeout` seconds; forever when None) and close."""
        core = self._async
        self._close_async(lambda: core.close(None if timeout is None else timeout * 1000))

    def metrics(self) -> dict[str, float]:
        return self._async.metrics_snapshot()

    partitions_for = blocking(AsyncProducer.partitions_for)
    init_transactions = blocking(AsyncProducer.init_transactions)
    send_offsets_to_transaction = blocking(AsyncProducer.send_offsets_to_transaction)
    commit_transaction = blocking(AsyncProducer.commit_transaction)
    abort_transaction = blocking(AsyncProducer.abort_transaction)
    prepare_transaction = blocking(AsyncProducer.prepare_transaction)

    def begin_transaction(self) -> None:
        """See `AsyncProducer.begin_transaction`."""
        self._run(_call_on_loop(self._async.begin_transaction))


async def _call_on_loop(function: Callable[[], T]) -> T:
    return function()
