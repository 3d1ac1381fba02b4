"""Idempotent producer state of one partition (Kafka's ProducerStateManager, idempotence part).

For each producer id the partition remembers the epoch and the sequence ranges of its last
five batches, so a retried batch is recognised (and answered with its original offset) and a
gap or reordering is refused with OUT_OF_ORDER_SEQUENCE_NUMBER. The state is rebuilt from batch
headers alone (no record decoding), so it survives restarts without snapshot files.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import NO_PRODUCER_ID, BatchHeader

MAX_CACHED_BATCHES = 5  # max.in.flight.requests.per.connection upper bound with idempotence
INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """Validates an incoming client batch; returns the original of a retried batch."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(header.producer_id)
        first_seq, last_seq = header.base_sequence, header.last_sequence
        if entry is None:
            if first_seq != 0:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"Unknown producer {header.producer_id}: first sequence "
                                 f"{first_seq} is not 0")
            return None
        if header.producer_epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"Epoch {header.producer_epoch} of producer {header.producer_id} "
                             f"is older than the current epoch {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if first_seq != 0:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"Invalid sequence number for new epoch {header.producer_epoch}"
                                 f": {first_seq} (request epoch), 0 (expected)")
            return None
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        expected = _next_seq(entry.last_seq)
        if first_seq != expected:
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"Out of order sequence number for producer {header.producer_id}: "
                             f"{first_seq} (incoming seq. number), {entry.last_seq} "
                             "(current end sequence number)")
        return None

    def update(self, header: BatchHeader) -> None:
        """Records a batch now in the log (its header carries the assigned offsets)."""
        self.record(header, header.base_offset, header.last_offset)

    def record(self, header: BatchHeader, first_offset: int, last_offset: int) -> None:
        """Records a batch appended at [first_offset, last_offset]."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
            self.producers[header.producer_id] = entry
        if header.is_control:
            return
        entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence,
                                           first_offset, last_offset, header.max_timestamp))
        entry.last_timestamp = header.max_timestamp

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        self.producers.clear()
        for header in headers:
            self.update(header)

    def truncate(self) -> None:
        """After a log truncation the state must be rebuilt from what remains."""
        self.producers.clear()
