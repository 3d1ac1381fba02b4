"""Validation of appended record batches and in-place offset assignment (Kafka's LogValidator).

Only batch headers are decoded: offsets, the leader epoch and LogAppendTime are patched into the
bytes in place, so a produce request's records are written to the log as they arrived. Records
are read only on compacted topics, where every record needs a key, and a batch is rewritten only
when the topic's compression.type names another codec than the producer's (recompressed at the
topic's compression.<codec>.level, as Kafka does).

`validate_produce_request_records` is Kafka's ProduceRequest.validateRecords: the checks that
depend on the Produce version, which the produce handler runs on each partition's records
before they reach the replica manager (as KafkaApis does).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from odradek.protocol.errors import CorruptRecordError, DecodeError, ErrorCode, KafkaError
from odradek.protocol.records import (
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    BatchHeader,
    Compression,
    decode_keys,
    iter_batches,
    kafka_level,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    read_magic,
    recompressed_batch,
    verify_crc,
)
from odradek.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_CODEC_MASK,
    MAGIC_OFFSET,
)
from odradek.storage.config import LogConfig

NO_TIMESTAMP = -1
# Produce v3 (KIP-98) carries exactly one v2 batch per partition; zstd came with produce v7.
SINGLE_BATCH_MIN_PRODUCE_VERSION = 3
ZSTD_MIN_PRODUCE_VERSION = 7


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


_HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1


def _whole_batch_size(records: bytes | bytearray | memoryview, position: int) -> int | None:
    """The size of the batch at `position` if all of it is there, else None (Kafka's
    ByteBufferLogInputStream.nextBatch() != null; a bad length is left to `analyze`)."""
    remaining = len(records) - position
    if remaining < _HEADER_SIZE_UP_TO_MAGIC:
        return None
    length_at = position + BATCH_LENGTH_OFFSET
    size = LOG_OVERHEAD + int.from_bytes(records[length_at:length_at + 4], "big", signed=True)
    return size if _HEADER_SIZE_UP_TO_MAGIC <= size <= remaining else None


def validate_produce_request_records(records: bytes | bytearray | memoryview,
                                     produce_version: int) -> None:
    """Kafka's ProduceRequest.validateRecords for one partition's records (a KafkaError).

    From produce v3: the first batch must have magic 2 (INVALID_RECORD), zstd needs produce v7+
    (UNSUPPORTED_COMPRESSION_TYPE), and a second whole batch is refused (INVALID_RECORD).
    Records without a whole first batch pass on to `validate_as_leader` (CORRUPT_MESSAGE).
    """
    if produce_version < SINGLE_BATCH_MIN_PRODUCE_VERSION:
        return  # Kafka does not check older versions, for clients that mix up magic and version
    first_size = _whole_batch_size(records, 0)
    if first_size is None:
        return
    if records[MAGIC_OFFSET] != MAGIC_V2:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Produce requests with version {produce_version} are only allowed to "
                         f"contain record batches with magic version 2")
    if produce_version < ZSTD_MIN_PRODUCE_VERSION and first_size >= ATTRIBUTES_OFFSET + 2 and \
            records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_CODEC_MASK == Compression.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         f"Produce requests with version {produce_version} are not allowed to "
                         f"use ZStandard compression")
    if _whole_batch_size(records, first_size) is not None:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Produce requests with version {produce_version} are only allowed to "
                         f"contain exactly one record batch per partition")


def _check_keys(records: bytes | bytearray | memoryview, position: int,
                header: BatchHeader) -> None:
    """A compacted topic's records (Kafka's LogValidator.validateKey): each has a key, and their
    offset deltas run 0..n-1; records whose lengths or keys do not decode are CORRUPT_MESSAGE.
    Only the keys are read (`decode_keys`: no timestamps, values or headers), about half the
    cost of decoding whole records on this per-record path."""
    try:
        found = decode_keys(records, position, header)
    except (CorruptRecordError, DecodeError) as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
    base = header.base_offset
    if found.offsets != list(range(base, base + len(found.offsets))):
        expected_delta, offset = next((delta, offset) for delta, offset
                                      in enumerate(found.offsets) if offset - base != delta)
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"record offset delta {offset - base} where {expected_delta} was "
                         f"expected in the batch at offset {base}")
    if found.null_keys:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         "Compacted topic cannot accept message without key")


def _check_timestamp(header: BatchHeader, config: LogConfig, now_ms: int) -> None:
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
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
    for position, header in result.batches:
        if origin == AppendOrigin.CLIENT:
            if header.base_offset != 0:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"the base offset of a produced batch must be 0, "
                                 f"not {header.base_offset}")
            if header.is_control:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 "clients are not allowed to write control records")
            if header.has_producer_id and header.base_sequence < 0:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"invalid sequence number {header.base_sequence} in a batch "
                                 f"with producer id {header.producer_id}")
        if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"inconsistent batch: {header.records_count} records, "
                             f"last offset delta {header.last_offset_delta}")
        if header.is_transactional and not header.has_producer_id:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             "a transactional batch must carry a producer id")
        try:
            header.compression  # noqa: B018 (raises for a codec id Kafka does not define)
        except CorruptRecordError as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
        if not config.log_append_time:
            _check_timestamp(header, config, now_ms)
        if config.compact and not header.is_control:
            _check_keys(records, position, header)
    target = _target_compression(config)
    if target is not None and any(header.compression != target and not header.is_control
                                  for _, header in result.batches):
        result = _recompressed(result, config, target)
    return result


def _target_compression(config: LogConfig) -> Compression | None:
    """The codec the topic's compression.type asks for; None for `producer` (keep it)."""
    if config.compression_type == "producer":
        return None
    if config.compression_type == "uncompressed":
        return Compression.NONE
    return Compression[config.compression_type.upper()]


def _recompressed(validated: ValidatedRecords, config: LogConfig,
                  target: Compression) -> ValidatedRecords:
    """The batches in the topic's codec, at its compression.<codec>.level (Kafka's
    LogValidator recompresses when compression.type is not the producer's codec; control
    batches stay as they are). Per batch, not per record: the records' bytes are the same in
    any codec. A batch grown beyond max.message.bytes is MESSAGE_TOO_LARGE, as Kafka checks
    the sizes again after recompressing."""
    level = kafka_level(target, config.compression_gzip_level, config.compression_lz4_level,
                        config.compression_zstd_level)
    records = bytearray()
    rebuilt = ValidatedRecords(records, record_count=validated.record_count)
    for position, header in validated.batches:
        if header.compression == target or header.is_control:
            batch: bytes | bytearray | memoryview = \
                memoryview(validated.records)[position:position + header.size]
        else:
            try:
                batch = recompressed_batch(validated.records, position, header, target, level)
            except CorruptRecordError as exc:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
            if len(batch) > config.max_message_bytes:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"batch of {len(batch)} bytes after recompression exceeds "
                                 f"max.message.bytes {config.max_message_bytes}")
        rebuilt.batches.append((len(records), BatchHeader.parse(batch)))
        records += batch
    if len(records) > config.segment_bytes:
        raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                         f"records of {len(records)} bytes after recompression exceed "
                         f"segment.bytes {config.segment_bytes}")
    return rebuilt


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
