"""The producer's record accumulator: per-partition queues of record batches being filled.

`RecordAccumulator` is shared by the threads that call ``send`` (the blocking producer appends
from the caller's thread, so a send costs no thread hop) and the sender running on the client's
event loop, which asks which partitions are ready (`ready`), takes batches out (`drain`), puts
failed ones back for a retry (`reenqueue`) and removes expired ones (`expire`). One lock
guards the queues; ``buffer.memory`` is accounted per record and a full buffer makes
``send`` wait (`BufferFull`).

A `ProducerBatch` owns a `RecordBatchBuilder`; when drained it is built once (compression
included) and its bytes are kept for retries. Every record gets a `RecordFuture` that shares its
batch's `ProduceResult`, so completing a batch of a thousand records is one event, not a
thousand.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable
from typing import Any, NamedTuple

from odradek.client.errors import KafkaTimeoutError
from odradek.client.partitioner import StickyPartitioner
from odradek.client.types import TopicPartition
from odradek.protocol.errors import KafkaError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Compression,
    RecordBatchBuilder,
    increment_sequence,
    write_crc,
)
from odradek.protocol.records.batch import ATTRIBUTES_OFFSET, TRANSACTIONAL_FLAG_MASK

__all__ = [
    "BufferFull",
    "ProduceResult",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordFuture",
    "RecordMetadata",
    "TopicQueues",
    "estimate_record_size",
]

log = logging.getLogger("odradek.client.producer")

Header = tuple[str, bytes | None]
Callback = Callable[["RecordMetadata | None", "KafkaError | None"], Any]

# Where the producer fields sit in a v2 batch header (inside the CRC range).
_PRODUCER_FIELDS = struct.Struct(">qhi")
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER_FIELDS_OFFSET = 43
_batch_order = itertools.count()
# Kafka's fudge factor on the estimated compressed size of an open batch.
_COMPRESSION_ESTIMATION_FACTOR = 1.05


class RecordMetadata(NamedTuple):
    """Where a record was written (Kafka's RecordMetadata)."""

    topic: str
    partition: int
    #: -1 with acks=0 (the broker does not say)
    offset: int
    #: the record's timestamp, or the broker's LogAppendTime when the topic uses it
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def estimate_record_size(key: bytes | None, value: bytes | None,
                         headers: Iterable[Header] | None) -> int:
    """An upper bound of a record's size inside a batch (Kafka's recordSizeUpperBound)."""
    size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        for name, header_value in headers:
            size += 10 + len(name) + (len(header_value) if header_value is not None else 0)
    return size


class BufferFull(Exception):
    """The accumulator cannot take `size` more bytes before batches in it are sent."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size
        #: set by the producer: the serialized record that did not fit, for the retry
        self.record: tuple[Any, ...] = ()


class ProduceResult:
    """The outcome of one batch, shared by its records' futures. Completed once, on the
    client's event loop; waited for from any thread (`wait`) or on that loop (`wait_async`)."""

    __slots__ = ("_event", "_waiters", "base_offset", "error", "log_append_time", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.base_offset = -1
        self.log_append_time = -1
        self.error: KafkaError | None = None
        self._event = threading.Event()
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def complete(self, base_offset: int, log_append_time: int, error: KafkaError | None) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self._event.set()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    async def wait_async(self) -> None:
        if self._event.is_set():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter


class RecordFuture(tuple):  # type: ignore[type-arg]
    """The future of one sent record (Kafka's FutureRecordMetadata).

    ``await future`` (on the producer's event loop) or ``future.result(timeout)`` /
    ``future.get(timeout)`` (blocking, from any other thread) give its `RecordMetadata` or raise
    the batch's error.

    A tuple of (batch result, offset delta, timestamp, key size, value size): one is made per
    record sent, and a tuple is the cheapest object to make.
    """

    __slots__ = ()

    @property
    def _result(self) -> ProduceResult:
        return self[0]  # type: ignore[no-any-return]

    def done(self) -> bool:
        return self._result.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._result.wait(timeout):
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} s for the record of "
                                    f"{self._result.tp} to be acknowledged")
        return self.metadata()

    get = result

    def exception(self, timeout: float | None = None) -> KafkaError | None:
        if not self._result.wait(timeout):
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} s")
        return self._result.error

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        yield from self._result.wait_async().__await__()
        return self.metadata()

    def metadata(self) -> RecordMetadata:
        """The record's metadata once done; raises the batch's error if it failed."""
        result = self._result
        if result.error is not None:
            raise result.error
        _, relative_offset, create_time, key_size, value_size = self
        offset = result.base_offset + relative_offset if result.base_offset >= 0 else -1
        timestamp = result.log_append_time if result.log_append_time >= 0 else create_time
        return RecordMetadata(result.tp.topic, result.tp.partition, offset, timestamp,
                              key_size, value_size)

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<RecordFuture {self._result.tp} {state}>"


class ProducerBatch:
    """Records for one partition, sent together."""

    __slots__ = (
        "_record_count",
        "attempts",
        "base_sequence",
        "buffer_bytes",
        "builder",
        "callbacks",
        "created",
        "deadline",
        "estimate",
        "full",
        "order",
        "payload",
        "producer_epoch",
        "producer_id",
        "result",
        "retry_at",
        "tp",
    )

    def __init__(self, tp: TopicPartition, builder: RecordBatchBuilder | None, now: float,
                 delivery_timeout_s: float) -> None:
        self.tp = tp
        #: creation order (a counter: clock readings can tie)
        self.order = next(_batch_order)
        self.builder: RecordBatchBuilder | None = builder
        self.result = ProduceResult(tp)
        self.callbacks: list[tuple[Callback, RecordFuture]] = []
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.attempts = 0
        self.retry_at = 0.0
        #: the count of a batch given whole or already built (the builder counts open ones)
        self._record_count = 0
        self.buffer_bytes = 0
        #: the open batch's uncompressed size estimate after its last append
        self.estimate = builder.size_estimate if builder is not None else 0
        self.full = False
        #: the built batch, once drained; kept for retries
        self.payload: bytearray | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        #: None until the batch gets its sequence numbers (on its first drain)
        self.base_sequence: int | None = None

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.tp} records={self.record_count} "
                f"seq={self.base_sequence} attempts={self.attempts}>")

    @property
    def record_count(self) -> int:
        builder = self.builder
        return builder.records_count if builder is not None else self._record_count

    @property
    def last_sequence(self) -> int:
        if self.base_sequence is None:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.record_count - 1)

    @property
    def estimated_size(self) -> int:
        if self.payload is not None:
            return len(self.payload)
        assert self.builder is not None
        return self.builder.size_estimate

    def close(self, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
              base_sequence: int | None = None, transactional: bool = False) -> bytearray:
        """Build the batch bytes (once); later calls restamp the producer fields. A batch the
        caller built (`append_record_batch`) is marked transactional here when it goes out in
        a transaction."""
        if self.payload is None:
            builder = self.builder
            assert builder is not None
            builder.producer_id = producer_id
            builder.producer_epoch = producer_epoch
            builder.base_sequence = NO_SEQUENCE if base_sequence is None else base_sequence
            builder.is_transactional = builder.is_transactional or transactional
            self.payload = bytearray(builder.build())
            self._record_count = builder.records_count
            self.builder = None
            return self._stamped(producer_id, producer_epoch, base_sequence)
        restamp = (producer_id, producer_epoch, base_sequence) != (
            self.producer_id, self.producer_epoch, self.base_sequence)
        if restamp:
            _PRODUCER_FIELDS.pack_into(self.payload, _PRODUCER_FIELDS_OFFSET, producer_id,
                                       producer_epoch,
                                       NO_SEQUENCE if base_sequence is None else base_sequence)
        (attributes,) = _ATTRIBUTES.unpack_from(self.payload, ATTRIBUTES_OFFSET)
        if transactional and not attributes & TRANSACTIONAL_FLAG_MASK:
            _ATTRIBUTES.pack_into(self.payload, ATTRIBUTES_OFFSET,
                                  attributes | TRANSACTIONAL_FLAG_MASK)
            restamp = True
        if restamp:
            write_crc(self.payload, 0, len(self.payload))
        return self._stamped(producer_id, producer_epoch, base_sequence)

    def _stamped(self, producer_id: int, producer_epoch: int,
                 base_sequence: int | None) -> bytearray:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        assert self.payload is not None
        return self.payload

    def complete(self, base_offset: int, log_append_time: int,
                 error: KafkaError | None = None) -> None:
        """Resolve the records' futures and run their callbacks (in send order)."""
        if self.result.done:
            return
        self.result.complete(base_offset, log_append_time, error)
        for callback, future in self.callbacks:
            try:
                if error is None:
                    callback(future.metadata(), None)
                else:
                    callback(None, error)
            except Exception:  # a user callback must not break the sender
                log.exception("Error executing user-provided callback on message for %s",
                              self.tp)


class TopicQueues:
    """One topic's partition queues and its sticky partition for keyless records (Kafka's
    TopicInfo with its BuiltInPartitioner state): an append finds both by index."""

    __slots__ = ("available", "count", "partitions", "queues", "sticky", "sticky_bytes",
                 "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.count = 0
        #: one shared TopicPartition and one queue per partition
        self.partitions: list[TopicPartition] = []
        self.queues: list[deque[ProducerBatch]] = []
        #: partitions with a leader: where the next sticky partition may go
        self.available: list[int] = []
        #: the partition keyless records go to; -1 until chosen
        self.sticky = -1
        #: bytes appended to the sticky partition since it was chosen
        self.sticky_bytes = 0


class RecordAccumulator:
    """Per-partition batch queues, shared between sending threads and the sender."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: float,
        buffer_memory: int,
        delivery_timeout_ms: float,
        compression: Compression = Compression.NONE,
        compression_level: int | None = None,
        adaptive_partitioning: bool = True,
    ) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.compression = compression
        self.compression_level = compression_level
        self._compressed = compression is not Compression.NONE
        self.lock = threading.Lock()
        self._space = threading.Condition(self.lock)
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._topics: dict[str, TopicQueues] = {}
        #: picks the next sticky partition of a topic once `batch_size` bytes went to it
        self.partitioner = StickyPartitioner(adaptive=adaptive_partitioning,
                                             queue_sizes=self.queue_sizes)
        #: batches not completed yet (queued or in flight), for flush
        self.incomplete: set[ProducerBatch] = set()
        self.used_bytes = 0
        self.memory_waiters = 0
        self.flushes_in_progress = 0
        self.closing = False
        #: estimated compressed/uncompressed ratio per topic (Kafka's CompressionRatioEstimator)
        self._ratios: dict[str, float] = {}
        #: called (on the sender's thread) whenever buffer memory is freed
        self.on_space_freed: Callable[[], None] | None = None
        self._drain_index: dict[int, int] = {}

    # ------------------------------------------------------------------------------ appending

    def topic_queues(self, topic: str, count: int, available: list[int]) -> TopicQueues:
        """`topic`'s queues for `count` partitions, `available` of them with a leader (called
        when the producer learns new metadata)."""
        with self.lock:
            queues = self._topics.get(topic)
            if queues is None:
                queues = self._topics[topic] = TopicQueues(topic)
            for partition in range(len(queues.queues), count):
                tp = TopicPartition(topic, partition)
                queues.partitions.append(tp)
                queues.queues.append(self._queue(tp))
            queues.count = count
            queues.available = available
            if queues.sticky >= count:
                queues.sticky = -1
            return queues

    def _queue(self, tp: TopicPartition) -> deque[ProducerBatch]:
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        return queue

    def append(self, topic: TopicQueues, partition: int | None, timestamp: int,
               key: bytes | None, value: bytes | None, headers: list[Header] | None,
               callback: Callback | None, size: int) -> tuple[RecordFuture, bool]:
        """Add a record to its partition's open batch (opening one if needed); a `partition`
        of None means the topic's sticky partition (KIP-794: it moves on once ``batch.size``
        bytes went to it).

        Returns the record's future and whether the sender should be woken (a batch was
        opened or filled). Raises `BufferFull` when ``buffer.memory`` is used up.
        """
        # Every send comes through here: explicit acquire/release (cheaper than `with`),
        # queues found by index, no compression-ratio lookup for uncompressed batches.
        limit = self.batch_size
        if self._compressed:
            limit /= self._ratio(topic.topic)
        lock = self.lock
        lock.acquire()
        try:
            used = self.used_bytes
            if used + size > self.buffer_memory and used > 0:
                raise BufferFull(size)
            keyless = partition is None
            if keyless:
                partition = topic.sticky
                if partition < 0:
                    partition = topic.sticky = self.partitioner.next_partition(
                        topic.topic, topic.count, topic.available, -1)
            queue = topic.queues[partition]
            wake = False
            batch = queue[-1] if queue else None
            if batch is None or batch.full or batch.estimate + size > limit:
                if batch is not None:
                    batch.full = True
                batch = self._new_batch(topic.partitions[partition], time.monotonic())
                queue.append(batch)
                wake = True
            builder = batch.builder
            relative = builder.append(timestamp, key, value, headers) if headers \
                else builder.append_next(timestamp, key, value)
            future = RecordFuture((batch.result, relative, timestamp,
                                   -1 if key is None else len(key),
                                   -1 if value is None else len(value)))
            if callback is not None:
                batch.callbacks.append((callback, future))
            batch.buffer_bytes += size
            self.used_bytes = used + size
            estimate = batch.estimate = builder.size_estimate
            if estimate >= limit:
                batch.full = True
                wake = True
            if keyless:
                produced = topic.sticky_bytes = topic.sticky_bytes + size
                if produced >= self.batch_size:
                    topic.sticky = self.partitioner.next_partition(
                        topic.topic, topic.count, topic.available, partition)
                    topic.sticky_bytes = 0
            return future, wake
        finally:
            lock.release()

    def append_batch(self, tp: TopicPartition, payload: bytearray, record_count: int
                     ) -> ProduceResult:
        """Queue a v2 record batch built by the caller as one batch of its own.

        The batch has base offset 0 and no producer id, epoch or sequence (the sender stamps
        them, as for built batches); it is sendable at once. The partition's open batch is
        closed first, so records keep their order. Raises `BufferFull` like `append`.
        """
        size = len(payload)
        with self.lock:
            if self.used_bytes + size > self.buffer_memory and self.used_bytes > 0:
                raise BufferFull(size)
            queue = self._queue(tp)
            if queue:
                queue[-1].full = True
            batch = ProducerBatch(tp, None, time.monotonic(), self.delivery_timeout_s)
            batch.payload = payload
            batch.estimate = size
            batch._record_count = record_count
            batch.buffer_bytes = size
            batch.full = True
            self.incomplete.add(batch)
            queue.append(batch)
            self.used_bytes += size
            return batch.result

    def _ratio(self, topic: str) -> float:
        if self.compression == Compression.NONE:
            return 1.0
        return self._ratios.get(topic, 1.0) * _COMPRESSION_ESTIMATION_FACTOR

    def _new_batch(self, tp: TopicPartition, now: float) -> ProducerBatch:
        builder = RecordBatchBuilder(compression=self.compression,
                                     compression_level=self.compression_level)
        batch = ProducerBatch(tp, builder, now, self.delivery_timeout_s)
        self.incomplete.add(batch)
        return batch

    def wait_for_space(self, size: int, timeout_s: float) -> bool:
        """Block the calling thread until `size` bytes fit (or `timeout_s` passes)."""
        deadline = time.monotonic() + timeout_s
        with self._space:
            self.memory_waiters += 1
            try:
                while self.used_bytes + size > self.buffer_memory and self.used_bytes > 0:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self.closing:
                        return False
                    self._space.wait(remaining)
                return True
            finally:
                self.memory_waiters -= 1

    def has_space(self, size: int) -> bool:
        return self.used_bytes + size <= self.buffer_memory or self.used_bytes == 0

    def queue_sizes(self, topic: str) -> dict[int, int]:
        """Batches queued per partition of `topic` (for adaptive partitioning)."""
        queues = self._topics.get(topic)
        return {} if queues is None else {
            partition: len(queue) for partition, queue in enumerate(queues.queues)}

    # ------------------------------------------------------------------------------ sending

    def ready(
        self, now: float, leader_of: Callable[[TopicPartition], int | None]
    ) -> tuple[dict[int, list[TopicPartition]], float, set[str]]:
        """Which brokers have something to send.

        Returns (node -> its partitions with queued batches, for nodes with at least one
        sendable batch; seconds until the next batch becomes sendable; topics whose leader is
        unknown). A batch is sendable when full, lingered long enough, or when the producer is
        flushing, closing or out of buffer memory; and not while it backs off before a retry.
        """
        ready_nodes: set[int] = set()
        by_node: dict[int, list[TopicPartition]] = {}
        unknown: set[str] = set()
        next_delay = float("inf")
        with self.lock:
            urgent = self.flushes_in_progress > 0 or self.closing or self.memory_waiters > 0
            for tp, queue in self._queues.items():
                if not queue:
                    continue
                leader = leader_of(tp)
                if leader is None:
                    unknown.add(tp.topic)
                    continue
                by_node.setdefault(leader, []).append(tp)
                batch = queue[0]
                if batch.retry_at > now:
                    next_delay = min(next_delay, batch.retry_at - now)
                    continue
                waited = now - batch.created
                if urgent or batch.full or len(queue) > 1 or waited >= self.linger_s:
                    ready_nodes.add(leader)
                else:
                    next_delay = min(next_delay, self.linger_s - waited)
        return {node: by_node[node] for node in ready_nodes}, next_delay, unknown

    def drain(
        self,
        node: int,
        partitions: list[TopicPartition],
        max_request_size: int,
        now: float,
        can_drain: Callable[[ProducerBatch], bool],
    ) -> list[ProducerBatch]:
        """Take at most one batch per partition of `node`, up to `max_request_size` bytes,
        starting where the last drain of this node stopped (so no partition starves)."""
        drained: list[ProducerBatch] = []
        size = 0
        with self.lock:
            count = len(partitions)
            start = self._drain_index.get(node, 0) % max(count, 1)
            for step in range(count):
                tp = partitions[(start + step) % count]
                queue = self._queues.get(tp)
                if not queue:
                    continue
                batch = queue[0]
                if batch.retry_at > now or not can_drain(batch):
                    continue
                batch_size = batch.estimated_size
                if drained and size + batch_size > max_request_size:
                    self._drain_index[node] = (start + step) % count
                    return drained
                queue.popleft()
                batch.full = True  # nothing more goes into a drained batch
                drained.append(batch)
                size += batch_size
            self._drain_index[node] = (start + 1) % max(count, 1)
        return drained

    def note_built(self, batch: ProducerBatch, uncompressed: int) -> None:
        """Update the topic's compression ratio estimate from a built batch."""
        if self.compression == Compression.NONE or batch.payload is None or uncompressed <= 0:
            return
        observed = max(0.05, (len(batch.payload) - BATCH_HEADER_SIZE) / uncompressed)
        topic = batch.tp.topic
        estimate = self._ratios.get(topic, 1.0)
        # Kafka's estimator: move down slowly, up quickly.
        if observed < estimate:
            estimate = max(estimate - 0.005, observed)
        else:
            estimate = min(1.0, max(estimate + 0.05, observed))
        self._ratios[topic] = estimate

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch back into its queue for a retry, in creation order: before younger
        batches, after older ones being retried too. (Sequence numbers are given in queue
        order, so this is also sequence order.)"""
        batch.retry_at = retry_at
        with self.lock:
            queue = self._queue(batch.tp)
            index = next((i for i, queued in enumerate(queue) if queued.order > batch.order),
                         len(queue))
            queue.insert(index, batch)

    def queued_batches(self, tp: TopicPartition) -> list[ProducerBatch]:
        with self.lock:
            return list(self._queues.get(tp, ()))

    def partitions(self) -> list[TopicPartition]:
        with self.lock:
            return [tp for tp, queue in self._queues.items() if queue]

    def expire(self, now: float) -> list[ProducerBatch]:
        """Remove queued batches past their delivery timeout (they are failed by the caller)."""
        expired: list[ProducerBatch] = []
        with self.lock:
            for queue in self._queues.values():
                # Retried batches sit at the head; behind them batches are in creation order,
                # so the scan stops at the first live batch that was never sent.
                index = 0
                while index < len(queue):
                    batch = queue[index]
                    if batch.deadline <= now:
                        del queue[index]
                        expired.append(batch)
                    elif batch.attempts == 0:
                        break
                    else:
                        index += 1
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (the producer is closing forcefully)."""
        with self.lock:
            batches = [batch for queue in self._queues.values() for batch in queue]
            for queue in self._queues.values():
                queue.clear()
        return batches

    def has_queued(self) -> bool:
        with self.lock:
            return any(self._queues.values())

    def release(self, batch: ProducerBatch) -> None:
        """The batch is done: free its buffer memory and forget it."""
        with self._space:
            self.used_bytes -= batch.buffer_bytes
            batch.buffer_bytes = 0
            self.incomplete.discard(batch)
            if self.memory_waiters:
                self._space.notify_all()
        if self.on_space_freed is not None:
            self.on_space_freed()

    def wake_memory_waiters(self) -> None:
        with self._space:
            self._space.notify_all()
