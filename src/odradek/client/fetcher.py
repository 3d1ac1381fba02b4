"""The consumer's fetcher: Fetch requests with incremental fetch sessions, record decoding.

* One Fetch request in flight per broker, for the assigned, unpaused partitions it leads that
  have a position and no buffered data (Kafka's AbstractFetch). The consumer sends the next
  fetches before handing records to the application, so the broker's long poll runs while the
  application works (pipelining).
* `FetchSessionHandler` (KIP-227): the first request to a broker is a full fetch that opens a
  session; later ones name only partitions whose fetch position changed, and forget the ones
  no longer fetched. Session errors fall back to a full fetch.
* `CompletedFetch` decodes a partition's records lazily, batch by batch (``decode_records``):
  records below the fetch position (inside a batch that starts earlier) are skipped, control
  batches are never returned, and with ``read_committed`` batches of aborted transactions are
  dropped using the response's aborted transactions and the ABORT markers. ``check.crcs``
  verifies each batch's CRC32C.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from odradek.client.cluster import Cluster
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError
from odradek.client.retry import Deadline
from odradek.client.subscription import OffsetResetStrategy, PartitionState, SubscriptionState
from odradek.client.types import TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from odradek.protocol.records import (
    BatchHeader,
    ControlRecordType,
    TimestampType,
    decode_control_key,
    decode_records,
    iter_batches,
    verify_crc,
)

__all__ = ["CompletedFetch", "ConsumerRecord", "FetchSessionHandler", "Fetcher",
           "OffsetOutOfRangeError", "PartitionFetch"]

log = logging.getLogger("odradek.client.consumer")

_FETCH = 1
INITIAL_EPOCH = 0
INVALID_SESSION_ID = 0
_INT32_MAX = 2**31 - 1
_ZERO_UUID = uuid.UUID(int=0)

#: Partition errors after which the leader or metadata must be looked up again.
_REFRESH_METADATA_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.LEADER_NOT_AVAILABLE,
})


Deserializer = Callable[["bytes | None"], Any]


class ConsumerRecord(NamedTuple):
    """A record as `poll` returns it (Kafka's ConsumerRecord). The fields come in the order the
    record decoder gives them (`decode_records`), so a record is made with no call."""

    offset: int
    timestamp: int
    key: Any
    value: Any
    #: (name, value) pairs; the empty tuple when the record has none
    headers: Sequence[tuple[str, bytes | None]]
    serialized_key_size: int
    serialized_value_size: int
    topic: str
    partition: int
    timestamp_type: TimestampType
    #: the partition leader epoch the record was written in (None when unknown)
    leader_epoch: int | None


class OffsetOutOfRangeError(KafkaError):
    """A fetch position is out of range and ``auto.offset.reset`` is ``none``."""

    def __init__(self, offsets: dict[TopicPartition, int]) -> None:
        described = ", ".join(f"{tp}={offset}" for tp, offset in offsets.items())
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"Fetch position FetchPosition{{offset={described}}} is out of range "
                         "and no reset policy is configured")
        self.offsets = offsets


BatchDecoder = Callable[[TopicPartition, BatchHeader, Any, int, int], list[ConsumerRecord]]


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What a Fetch request says about one partition."""

    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    max_bytes: int


@dataclass(slots=True)
class FetchRequestData:
    #: partitions named in the request (all of them for a full fetch)
    to_send: dict[TopicPartition, PartitionFetch]
    #: partitions leaving the session (with their topic ids)
    to_forget: dict[TopicPartition, uuid.UUID]
    #: the session's partitions once the broker has taken this request
    session_after: dict[TopicPartition, PartitionFetch]
    session_id: int
    epoch: int
    full: bool


class FetchSessionHandler:
    """The client side of one broker's incremental fetch session (Kafka's
    FetchSessionHandler)."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TopicPartition, PartitionFetch] = {}

    def build(self, wanted: dict[TopicPartition, PartitionFetch]) -> FetchRequestData:
        if self.epoch == INITIAL_EPOCH:
            # Full fetch; with a session id it also closes that session on the broker.
            return FetchRequestData(dict(wanted), {}, dict(wanted), self.session_id,
                                    INITIAL_EPOCH, True)
        changed = {tp: data for tp, data in wanted.items() if self.partitions.get(tp) != data}
        forget = {tp: data.topic_id for tp, data in self.partitions.items() if tp not in wanted}
        return FetchRequestData(changed, forget, dict(wanted), self.session_id, self.epoch,
                                False)

    def handle_response(self, response: m.FetchResponse, data: FetchRequestData) -> bool:
        """Advance the session after a response; False for a top-level error."""
        if response.error_code != ErrorCode.NONE:
            if response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        if data.full:
            if response.session_id != INVALID_SESSION_ID:
                self.session_id = response.session_id
                self.epoch = 1
            else:  # the broker keeps no session: stay with full fetches
                self.session_id = INVALID_SESSION_ID
                self.epoch = INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch >= _INT32_MAX else self.epoch + 1
        self.partitions = data.session_after
        return True

    def handle_error(self) -> None:
        """The request failed: the next one is a full fetch (closing the old session)."""
        self.epoch = INITIAL_EPOCH


class CompletedFetch:
    """One partition's data from a Fetch response, consumed record by record."""

    __slots__ = ("_aborted", "_aborted_pids", "_batches", "_pending", "_pending_index",
                 "_pending_next", "data", "error", "fetch_offset", "high_watermark",
                 "initialized", "last_stable_offset", "log_start_offset", "next_offset", "tp")

    def __init__(self, tp: TopicPartition, fetch_offset: int, partition: Any) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        #: the position after the records handed out so far
        self.next_offset = fetch_offset
        self.error = ErrorCode.from_code(partition.error_code)
        self.high_watermark = partition.high_watermark
        self.last_stable_offset = partition.last_stable_offset
        self.log_start_offset = partition.log_start_offset
        self.data = partition.records if partition.records is not None else b""
        aborted = partition.aborted_transactions or []
        self._aborted = collections.deque(sorted((a.first_offset, a.producer_id)
                                                  for a in aborted))
        self._aborted_pids: set[int] = set()
        self._batches: Any = None
        self._pending: list[Any] = []
        self._pending_index = 0
        self._pending_next = fetch_offset
        self.initialized = False

    @property
    def exhausted(self) -> bool:
        return self._batches is StopIteration and self._pending_index >= len(self._pending)

    def prefetch_position(self) -> tuple[int, int] | None:
        """(offset, leader epoch) just after this fetch's last complete batch: where the
        partition's next fetch can start while these records are still being handed out.
        None when the fetch failed or holds no complete batch."""
        if self.error != ErrorCode.NONE:
            return None
        last = None
        for _, header in iter_batches(self.data):
            last = header
        if last is None or last.next_offset <= self.fetch_offset:
            return None
        return last.next_offset, last.partition_leader_epoch

    def take(self, limit: int, out: list[ConsumerRecord], read_committed: bool,
             check_crcs: bool, decode: BatchDecoder) -> None:
        """Append up to `limit` records at or after `next_offset` to `out`."""
        if self._batches is None:
            self._batches = iter_batches(self.data)
        taken = 0
        while taken < limit:
            if self._pending_index < len(self._pending):
                chunk = self._pending[self._pending_index:self._pending_index + limit - taken]
                out.extend(chunk)
                taken += len(chunk)
                self._pending_index += len(chunk)
                if self._pending_index >= len(self._pending):
                    self.next_offset = self._pending_next
                else:
                    self.next_offset = chunk[-1].offset + 1
                continue
            if self._batches is StopIteration:
                return
            try:
                pos, header = next(self._batches)
            except StopIteration:
                self._batches = StopIteration
                return
            self._load_batch(pos, header, read_committed, check_crcs, decode)

    def _load_batch(self, pos: int, header: BatchHeader, read_committed: bool,
                    check_crcs: bool, decode: BatchDecoder) -> None:
        next_offset = header.next_offset
        if next_offset <= self.next_offset:
            return  # the whole batch is below the position
        if check_crcs:
            try:
                verify_crc(self.data, pos, header)
            except CorruptRecordError as exc:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"Record batch for partition {self.tp} at offset "
                                 f"{header.base_offset} is invalid, cause: {exc}") from None
        if read_committed and header.has_producer_id:
            aborted = self._aborted
            while aborted and aborted[0][0] <= header.last_offset:
                self._aborted_pids.add(aborted.popleft()[1])
            if header.is_control:
                if self._is_abort_marker(pos, header):
                    self._aborted_pids.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in self._aborted_pids:
                self.next_offset = next_offset  # an aborted transaction's records
                return
        if header.is_control:
            self.next_offset = next_offset
            return
        try:
            records = decode(self.tp, header, self.data, pos, self.next_offset)
        except CorruptRecordError as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                             f"Record batch for partition {self.tp} at offset "
                             f"{header.base_offset} could not be decoded: {exc}") from None
        self._pending = records
        self._pending_index = 0
        self._pending_next = next_offset
        if not records:
            self.next_offset = next_offset

    def _is_abort_marker(self, pos: int, header: BatchHeader) -> bool:
        for record in decode_records(self.data, pos, header):
            return decode_control_key(record[2]) == ControlRecordType.ABORT  # its key
        return False


@dataclass
class _NodeState:
    session: FetchSessionHandler
    in_flight: bool = False
    failures: int = 0
    retry_at: float = 0.0
    sent: dict[TopicPartition, int] = field(default_factory=dict)


class ConsumerMetrics:
    """A few of Kafka's consumer metrics (consumer-fetch-manager-metrics), counted per poll
    and per fetch response, never per record."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.records_consumed_total = 0
        self.bytes_consumed_total = 0
        self.fetch_total = 0
        self.fetch_latency_total = 0.0
        self.fetch_latency_max = 0.0

    def on_fetch(self, latency_s: float, size: int) -> None:
        self.fetch_total += 1
        self.fetch_latency_total += latency_s
        self.fetch_latency_max = max(self.fetch_latency_max, latency_s)
        self.bytes_consumed_total += size

    def as_dict(self, subscriptions: SubscriptionState) -> dict[str, float]:
        elapsed = max(1e-9, time.monotonic() - self.started)
        fetches = max(1, self.fetch_total)
        # Kafka's records-lag-max is the largest lag over its sample window; here, the
        # largest lag now (the last fetched high watermark less the position).
        lags = [state.high_watermark - state.position for _tp, state in subscriptions.items()
                if state.position is not None and state.high_watermark >= 0]
        return {
            "bytes-consumed-rate": self.bytes_consumed_total / elapsed,
            "bytes-consumed-total": self.bytes_consumed_total,
            "fetch-latency-avg": 1000 * self.fetch_latency_total / fetches,
            "fetch-latency-max": 1000 * self.fetch_latency_max,
            "fetch-rate": self.fetch_total / elapsed,
            "fetch-total": self.fetch_total,
            "records-consumed-rate": self.records_consumed_total / elapsed,
            "records-consumed-total": self.records_consumed_total,
            "records-lag-max": max(lags, default=0),
        }


class Fetcher:
    """Sends Fetch requests and turns responses into records."""

    def __init__(
        self,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        config: Any,
        request_metadata: Callable[[], None],
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
    ) -> None:
        self.cluster = cluster
        self.subscriptions = subscriptions
        self.request_metadata = request_metadata
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.min_bytes: int = config["fetch.min.bytes"]
        self.max_bytes: int = config["fetch.max.bytes"]
        self.max_wait_ms: int = config["fetch.max.wait.ms"]
        self.partition_max_bytes: int = config["max.partition.fetch.bytes"]
        self.read_committed = config["isolation.level"] == "read_committed"
        self.check_crcs: bool = config["check.crcs"]
        self.rack: str = config["client.rack"]
        self.request_timeout_ms: int = config["request.timeout.ms"]
        self.completed: collections.deque[CompletedFetch] = collections.deque()
        self._nodes: dict[int, _NodeState] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.data_ready = asyncio.Event()
        #: an error to raise from the next poll (e.g. a fetch that failed for good)
        self.pending_error: KafkaError | None = None
        self.metrics = ConsumerMetrics()

    # ------------------------------------------------------------------------------ sending

    def _buffered(self) -> dict[TopicPartition, list[CompletedFetch]]:
        buffered: dict[TopicPartition, list[CompletedFetch]] = {}
        for fetch in self.completed:
            buffered.setdefault(fetch.tp, []).append(fetch)
        return buffered

    def send_fetches(self) -> int:
        """Send a Fetch to every broker with fetchable partitions and none in flight.

        Only one Fetch is in flight per broker, so a long poll for partitions at their log
        end would hold back, for up to ``fetch.max.wait.ms``, partitions whose buffers run
        dry meanwhile. Two rules prevent that (librdkafka prefetches likewise):

        * a partition with one fetch's data still buffered is fetched ahead, from the end of
          that data, so it rides along in the same requests (at most two buffered fetches
          per partition; positions still advance only as `poll` hands records out);
        * a request naming only partitions known to be at their end is not sent while
          another partition of that broker waits, buffer full, with more data in the log:
          the at-end partitions go with that partition's next fetch.
        """
        buffered = self._buffered()
        metadata = self.cluster.metadata
        wanted: dict[int, dict[TopicPartition, PartitionFetch]] = {}
        #: per broker: are all wanted partitions at their known log end?
        all_at_end: dict[int, bool] = {}
        #: brokers with a partition held back (buffer full) that has more to read
        held_back: set[int] = set()
        now = time.monotonic()
        missing_leader = False
        for tp in self.subscriptions.fetchable():
            partition = metadata.partition(tp)
            if partition is None or partition.leader < 0 or \
                    partition.leader not in metadata.brokers:
                missing_leader = True
                continue
            state = self.subscriptions.require(tp)
            queued = buffered.get(tp)
            if queued is None:
                assert state.position is not None
                offset, epoch = state.position, state.position_epoch
            else:
                ahead = queued[0].prefetch_position() if len(queued) == 1 else None
                if ahead is None:
                    last = queued[-1].prefetch_position()
                    if last is not None and last[0] < self._known_end(state, queued):
                        held_back.add(partition.leader)
                    continue
                offset, epoch = ahead
            node = self._nodes.get(partition.leader)
            if node is not None and (node.in_flight or now < node.retry_at):
                continue
            topic = metadata.topics[tp.topic]
            wanted.setdefault(partition.leader, {})[tp] = PartitionFetch(
                topic.topic_id, offset, partition.leader_epoch, epoch, self.partition_max_bytes)
            end = self._known_end(state, queued)
            all_at_end[partition.leader] = all_at_end.get(partition.leader, True) and (
                0 <= end <= offset)
        if missing_leader:
            self.request_metadata()
        sent = 0
        for node_id, partitions in wanted.items():
            if node_id in held_back and all_at_end[node_id]:
                continue
            node = self._nodes.get(node_id)
            if node is None:
                node = self._nodes[node_id] = _NodeState(FetchSessionHandler(node_id))
            node.in_flight = True
            task = asyncio.get_running_loop().create_task(self._fetch(node, partitions))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            sent += 1
        return sent

    def _known_end(self, state: PartitionState, queued: list[CompletedFetch] | None) -> int:
        """The partition's readable end as last reported (high watermark, or last stable
        offset with read_committed); -1 when unknown."""
        reports = [state.last_stable_offset if self.read_committed else state.high_watermark]
        for fetch in queued or ():
            reports.append(fetch.last_stable_offset if self.read_committed
                           else fetch.high_watermark)
        return max(reports)

    async def _fetch(self, node: _NodeState, partitions: dict[TopicPartition, PartitionFetch]
                     ) -> None:
        session = node.session
        try:
            deadline = Deadline(self.request_timeout_ms)
            connection = await self.cluster.connection(session.node, deadline)
            by_id = all(p.topic_id != _ZERO_UUID for p in partitions.values()) and all(
                p.topic_id != _ZERO_UUID for p in session.partitions.values())
            version = connection.pick_version(_FETCH, min_version=4,
                                              max_version=None if by_id else 12)
            data = session.build(partitions)
            request = self._request(data, version)
            sent_at = time.monotonic()
            response = await connection.send(
                request, api_version=version,
                timeout_ms=self.request_timeout_ms + self.max_wait_ms)
        except KafkaError as error:
            session.handle_error()
            self._backoff(node, error)
        else:
            self.metrics.on_fetch(time.monotonic() - sent_at, sum(
                len(p.records) for t in response.responses for p in t.partitions
                if p.records is not None))
            if session.handle_response(response, data):
                node.failures = 0
                self._take_response(response, data, version)
            else:
                self._backoff(node, KafkaError(response.error_code))
        finally:
            node.in_flight = False
            self.data_ready.set()

    def _backoff(self, node: _NodeState, error: KafkaError) -> None:
        log.debug("Fetch from node %s failed: %s", node.session.node, error)
        self.cluster.note_error(error)
        if isinstance(error, (KafkaConnectionError, KafkaTimeoutError)) or \
                error.code in _REFRESH_METADATA_ERRORS:
            self.request_metadata()
        delay_ms = self.cluster.retry_backoff.delay_ms(node.failures)
        node.failures += 1
        node.retry_at = time.monotonic() + delay_ms / 1000

    def _request(self, data: FetchRequestData, version: int) -> m.FetchRequest:
        by_id = version >= 13
        topics: dict[Any, list[m.FetchRequest.FetchPartition]] = {}
        for tp, p in data.to_send.items():
            key = p.topic_id if by_id else tp.topic
            topics.setdefault(key, []).append(m.FetchRequest.FetchPartition(
                partition=tp.partition, current_leader_epoch=p.current_leader_epoch,
                fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                partition_max_bytes=p.max_bytes))
        forgotten: dict[Any, list[int]] = {}
        for tp, topic_id in data.to_forget.items():
            forgotten.setdefault(topic_id if by_id else tp.topic, []).append(tp.partition)

        def topic(key: Any, partitions: list[Any]) -> m.FetchRequest.FetchTopic:
            if by_id:
                return m.FetchRequest.FetchTopic(topic_id=key, partitions=partitions)
            return m.FetchRequest.FetchTopic(topic=key, partitions=partitions)

        def forgotten_topic(key: Any, partitions: list[int]) -> m.FetchRequest.ForgottenTopic:
            if by_id:
                return m.FetchRequest.ForgottenTopic(topic_id=key, partitions=partitions)
            return m.FetchRequest.ForgottenTopic(topic=key, partitions=partitions)

        return m.FetchRequest(
            replica_id=-1,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
            isolation_level=1 if self.read_committed else 0,
            session_id=data.session_id,
            session_epoch=data.epoch,
            topics=[topic(key, parts) for key, parts in topics.items()],
            forgotten_topics_data=[forgotten_topic(key, parts)
                                   for key, parts in forgotten.items()],
            rack_id=self.rack,
        )

    def _take_response(self, response: m.FetchResponse, data: FetchRequestData,
                       version: int) -> None:
        names = {p.topic_id: tp.topic for tp, p in data.session_after.items()}
        for topic in response.responses:
            name = names.get(topic.topic_id) if version >= 13 else topic.topic
            if name is None:
                continue
            for partition in topic.partitions:
                tp = TopicPartition(name, partition.partition_index)
                sent = data.session_after.get(tp)
                if sent is None:
                    continue
                fetch = CompletedFetch(tp, sent.fetch_offset, partition)
                if fetch.error == ErrorCode.NONE and len(fetch.data) == 0:
                    # Nothing to return: just note the partition's offsets.
                    state = self.subscriptions.state(tp)
                    if state is not None and state.position == sent.fetch_offset:
                        self._update_offsets(state, fetch)
                    continue
                self.completed.append(fetch)

    # ------------------------------------------------------------------------------ records

    def collect(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` buffered records, advancing the positions."""
        if self.pending_error is not None:
            error, self.pending_error = self.pending_error, None
            raise error
        records: list[ConsumerRecord] = []
        #: partitions whose earlier fetch stays buffered: their later (prefetched) ones wait
        behind: set[TopicPartition] = set()
        for fetch in list(self.completed):
            if len(records) >= max_records:
                break
            if fetch.tp in behind:
                continue
            state = self.subscriptions.state(fetch.tp)
            if state is None or state.position != fetch.next_offset or \
                    state.reset_strategy is not None:
                self.completed.remove(fetch)  # unassigned, or the position moved (seek)
                continue
            if state.paused:
                behind.add(fetch.tp)
                continue  # kept until the partition is resumed
            if not fetch.initialized:
                fetch.initialized = True
                try:
                    readable = self._initialize(fetch, state)
                except KafkaError:
                    self.completed.remove(fetch)
                    raise
                if not readable:
                    self.completed.remove(fetch)
                    continue
            before = len(records)
            try:
                fetch.take(max_records - before, records, self.read_committed,
                           self.check_crcs, self.decode_batch)
            except Exception:
                self.completed.remove(fetch)
                raise
            state.position = fetch.next_offset
            if len(records) > before:
                epoch = records[-1].leader_epoch
                state.position_epoch = -1 if epoch is None else epoch
            if fetch.exhausted:
                self.completed.remove(fetch)
            else:
                behind.add(fetch.tp)
        self.metrics.records_consumed_total += len(records)
        return records

    def _initialize(self, fetch: CompletedFetch, state: PartitionState) -> bool:
        """Handle the partition's error; True when it has records to read."""
        error = fetch.error
        if error == ErrorCode.NONE:
            self._update_offsets(state, fetch)
            return True
        if error in _REFRESH_METADATA_ERRORS:
            log.debug("Fetch of %s failed with %s; refreshing metadata", fetch.tp, error.name)
            self.cluster.note_error(KafkaError(error))
            self.request_metadata()
            return False
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.subscriptions.default_reset is OffsetResetStrategy.NONE:
                raise OffsetOutOfRangeError({fetch.tp: fetch.fetch_offset})
            log.info("Fetch position %d is out of range for partition %s, resetting offset",
                     fetch.fetch_offset, fetch.tp)
            state.request_reset(self.subscriptions.default_reset)
            return False
        if error == ErrorCode.UNKNOWN_SERVER_ERROR:
            log.warning("Unknown server error while fetching offset %d for %s",
                        fetch.fetch_offset, fetch.tp)
            return False
        raise KafkaError(error, f"Unexpected error code {error.value} while fetching at offset "
                                f"{fetch.fetch_offset} from topic-partition {fetch.tp}")

    def decode_batch(self, tp: TopicPartition, header: BatchHeader, data: Any, pos: int,
                     position: int) -> list[ConsumerRecord]:
        """The records of one batch at or after `position`, as ConsumerRecords."""
        epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else None
        records = decode_records(data, pos, header, record_type=ConsumerRecord,
                                 extra=(tp.topic, tp.partition, header.timestamp_type, epoch))
        if header.base_offset < position:
            # A compressed batch fetched from its middle: skip the records below the position.
            records = [record for record in records if record.offset >= position]
        key_deserializer = self.key_deserializer
        value_deserializer = self.value_deserializer
        if key_deserializer is not None:
            records = [record._replace(key=key_deserializer(record.key)) for record in records]
        if value_deserializer is not None:
            records = [record._replace(value=value_deserializer(record.value))
                       for record in records]
        return records

    @staticmethod
    def _update_offsets(state: PartitionState, fetch: CompletedFetch) -> None:
        if fetch.high_watermark >= 0:
            state.high_watermark = fetch.high_watermark
        if fetch.log_start_offset >= 0:
            state.log_start_offset = fetch.log_start_offset
        if fetch.last_stable_offset >= 0:
            state.last_stable_offset = fetch.last_stable_offset

    def drop(self, partitions: set[TopicPartition]) -> None:
        """Forget buffered data of partitions no longer assigned."""
        self.completed = collections.deque(f for f in self.completed if f.tp not in partitions)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
