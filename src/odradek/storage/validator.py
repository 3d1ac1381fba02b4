"""Validation of appended record batches and in-place offset assignment (Kafka's LogValidator).

Only batch headers are decoded: offsets, the leader epoch and LogAppendTime are patched into the
bytes in place, so a produce request's records are written to the log as they arrived.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from odradek.protocol.errors import CorruptRecordError, DecodeError, ErrorCode, KafkaError
from odradek.protocol.records import (
    MAGIC_V0,
    MAGIC_V1,
    BatchHeader,
    iter_batches,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    read_magic,
    verify_crc,
)
from odradek.storage.config import LogConfig

NO_TIMESTAMP = -1


class AppendOrigin(enum.Enum):
    """Who is appending: checks differ for clients, the broker's coordinators and replication."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclass
class ValidatedRecords:
    """Records (patched in place when assigning offsets) and their batch headers."""

    records: bytes | bytearray | memoryview
    batches: list[tuple[int, BatchHeader]] = field(default_factory=list)
    record_count: int = 0
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    log_append_time: int = NO_TIMESTAMP
    # The bytes to write, in order, when the records were not patched in place (else None).
    chunks: list[bytes | bytearray | memoryview] | None = None

    def buffers(self) -> list[bytes | bytearray | memoryview]:
        return self.chunks if self.chunks is not None else [self.records]

    @property
    def first_offset(self) -> int:
        return self.batches[0][1].base_offset if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1][1].last_offset if self.batches else -1

    @property
    def size(self) -> int:
        return len(self.records)


def analyze(records: bytes | bytearray | memoryview, config: LogConfig, *,
            check_batch_size: bool) -> ValidatedRecords:
    """Structure + CRC of every batch; raises KafkaError with Kafka's error code."""
    result = ValidatedRecords(records)
    if len(records) > config.segment_bytes:
        raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                         f"records of {len(records)} bytes exceed segment.bytes "
                         f"{config.segment_bytes}")
    end = 0
    try:
        for position, header in iter_batches(records):
            if check_batch_size and header.size > config.max_message_bytes:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"batch of {header.size} bytes exceeds max.message.bytes "
                                 f"{config.max_message_bytes}")
            verify_crc(records, position, header)
            result.batches.append((position, header))
            result.record_count += header.records_count
            end = position + header.size
    except CorruptRecordError as exc:
        if len(records) - end > 16 and read_magic(records, end) in (MAGIC_V0, MAGIC_V1) and \
                int.from_bytes(records[end + 8:end + 12], "big", signed=True) > 0:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             "only record batches with magic 2 are accepted") from exc
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
    except DecodeError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
    if end != len(records):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                         f"records end with {len(records) - end} bytes of an incomplete batch")
    return result


def _check_timestamp(header: BatchHeader, config: LogConfig, now_ms: int) -> None:
    before = min(config.message_timestamp_before_max_ms,
                 config.message_timestamp_difference_max_ms)
    after = min(config.message_timestamp_after_max_ms, config.message_timestamp_difference_max_ms)
    for timestamp in (header.base_timestamp, header.max_timestamp):
        if timestamp == NO_TIMESTAMP:
            continue
        if timestamp < now_ms - before or timestamp > now_ms + after:
            raise KafkaError(ErrorCode.INVALID_TIMESTAMP,
                             f"timestamp {timestamp} of the batch at offset {header.base_offset} "
                             f"is out of range (broker time {now_ms}, before.max.ms {before}, "
                             f"after.max.ms {after})")


def validate_as_leader(records: bytes | bytearray | memoryview, config: LogConfig,
                       now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT
                       ) -> ValidatedRecords:
    """All checks that do not depend on the log's state (may run outside the log's lock)."""
    result = analyze(records, config, check_batch_size=True)
    for _, header in result.batches:
        if origin == AppendOrigin.CLIENT:
            if header.base_offset != 0:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"the base offset of a produced batch must be 0, "
                                 f"not {header.base_offset}")
            if header.is_control:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 "clients are not allowed to write control records")
        if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"inconsistent batch: {header.records_count} records, "
                             f"last offset delta {header.last_offset_delta}")
        if header.is_transactional and not header.has_producer_id:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             "a transactional batch must carry a producer id")
        if not config.log_append_time:
            _check_timestamp(header, config, now_ms)
    return result


_PATCHED_PREFIX = 16  # baseOffset, batchLength, partitionLeaderEpoch: outside the CRC


def assign_offsets(validated: ValidatedRecords, first_offset: int, leader_epoch: int,
                   config: LogConfig, now_ms: int) -> ValidatedRecords:
    """Patches base offsets, the leader epoch and (LogAppendTime) the max timestamp.

    Writable input is patched in place. Read-only input (a produce request's frame) is not
    copied: each batch becomes a patched 16-byte prefix plus a view of the rest, written with
    one `pwritev` (copying 1 MiB per append cost more than the CRC). LogAppendTime rewrites the
    CRC, so those batches are copied.
    """
    records = validated.records
    writable = isinstance(records, bytearray) or (
        isinstance(records, memoryview) and not records.readonly)
    if config.log_append_time and not writable:
        records, writable = bytearray(records), True
    view = memoryview(records)
    patched = ValidatedRecords(records, record_count=validated.record_count)
    chunks: list[bytes | bytearray | memoryview] = []
    next_offset = first_offset
    for position, header in validated.batches:
        target: bytearray | memoryview
        if writable:
            target, at = view, position
        else:
            target, at = bytearray(view[position:position + _PATCHED_PREFIX]), 0
            chunks += [target, view[position + _PATCHED_PREFIX:position + header.size]]
        patch_base_offset(target, at, next_offset)
        patch_partition_leader_epoch(target, at, leader_epoch)
        header.base_offset = next_offset
        header.partition_leader_epoch = leader_epoch
        if config.log_append_time:
            patch_log_append_time(target, at, now_ms)
            header = BatchHeader.parse(target, at)
        if header.max_timestamp > patched.max_timestamp:
            patched.max_timestamp = header.max_timestamp
            patched.offset_of_max_timestamp = header.last_offset
        patched.batches.append((position, header))
        next_offset = header.next_offset
    if not writable:
        patched.chunks = chunks
    if config.log_append_time:
        patched.log_append_time = now_ms
        patched.max_timestamp = now_ms
        patched.offset_of_max_timestamp = first_offset
    return patched


def validate_as_follower(records: bytes | bytearray | memoryview, config: LogConfig,
                         log_end_offset: int) -> ValidatedRecords:
    """Replicated batches keep their offsets; they must be increasing and start at/after LEO."""
    result = analyze(records, config, check_batch_size=False)
    expected = log_end_offset
    for _, header in result.batches:
        if header.base_offset < expected or header.last_offset_delta < 0:
            raise UnexpectedAppendOffsetError(
                f"batch with offsets {header.base_offset}..{header.last_offset} does not follow "
                f"offset {expected - 1}", header.base_offset, expected)
        if header.max_timestamp > result.max_timestamp:
            result.max_timestamp = header.max_timestamp
            result.offset_of_max_timestamp = header.last_offset
        expected = header.next_offset
    return result


class UnexpectedAppendOffsetError(KafkaError):
    """A replicated append whose offsets go backwards (Kafka's UnexpectedAppendOffsetException)."""

    def __init__(self, message: str, first_offset: int, expected_offset: int) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)
        self.first_offset = first_offset
        self.expected_offset = expected_offset
