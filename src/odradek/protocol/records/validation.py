"""Checks the broker runs on produced record batches before appending (Kafka's LogValidator and
ProduceRequest checks), raising `KafkaError` with the code the produce response should carry.

`validate_produce_records` and `validate_batch_for_append` never decompress; they check:

* framing: the records are complete v2 batches (CORRUPT_MESSAGE), exactly one batch per
  partition for produce v3+ and magic 2 (INVALID_RECORD);
* the batch size against max.message.bytes (MESSAGE_TOO_LARGE);
* the CRC (CORRUPT_MESSAGE) and a known compression codec (CORRUPT_MESSAGE); zstd needs produce
  v7+ (UNSUPPORTED_COMPRESSION_TYPE);
* recordsCount > 0 and lastOffsetDelta == recordsCount - 1 (INVALID_RECORD);
* no control batches from clients, and a base sequence for data batches with a producer id
  (INVALID_RECORD; transaction markers carry no sequence).

`validate_records_for_append` is the part that reads the records (decompressing if needed):
decodable records (CORRUPT_MESSAGE), offset deltas 0..n-1, keys on compacted topics
(INVALID_RECORD), CreateTime timestamps within the configured window (INVALID_TIMESTAMP).
"""

from __future__ import annotations

from typing import NamedTuple

from odradek.protocol.errors import (
    CorruptRecordError,
    DecodeError,
    ErrorCode,
    KafkaError,
)
from odradek.protocol.records.batch import (
    BatchHeader,
    Buffer,
    Compression,
    TimestampType,
    iter_batches,
    verify_crc,
)
from odradek.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from odradek.protocol.records.record import iter_records

ZSTD_MIN_PRODUCE_VERSION = 7
SINGLE_BATCH_MIN_PRODUCE_VERSION = 3


def validate_produce_records(
    records: Buffer,
    api_version: int,
    *,
    max_message_bytes: int | None = None,
    from_client: bool = True,
) -> list[tuple[int, BatchHeader]]:
    """Validate a partition's `records` from a Produce request; return its (position, header)
    pairs (one pair for produce v3+)."""
    try:
        batches = list(iter_batches(records))
    except DecodeError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    consumed = batches[-1][0] + batches[-1][1].size if batches else 0
    if consumed != len(records):
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE,
            f"records end with {len(records) - consumed} bytes that are not a complete batch",
        )
    if not batches:
        raise KafkaError(ErrorCode.INVALID_RECORD, "produce request holds no record batch")
    if api_version >= SINGLE_BATCH_MIN_PRODUCE_VERSION and len(batches) != 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"produce v{api_version} needs exactly one record batch per partition, "
            f"got {len(batches)}",
        )
    for pos, header in batches:
        validate_batch_for_append(
            records,
            pos,
            header,
            api_version=api_version,
            max_message_bytes=max_message_bytes,
            from_client=from_client,
        )
    return batches


def validate_batch_for_append(
    buf: Buffer,
    pos: int,
    header: BatchHeader,
    *,
    api_version: int | None = None,
    max_message_bytes: int | None = None,
    from_client: bool = True,
) -> None:
    """The checks that need no decompression (see the module doc). `api_version` is the
    Produce request version (None: skip version-dependent checks)."""
    if max_message_bytes is not None and header.size > max_message_bytes:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {header.size} bytes exceeds max.message.bytes {max_message_bytes}",
        )
    try:
        verify_crc(buf, pos, header)
        codec = header.compression
    except CorruptRecordError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    if (
        codec == Compression.ZSTD
        and api_version is not None
        and api_version < ZSTD_MIN_PRODUCE_VERSION
    ):
        raise KafkaError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"zstd batches need produce v{ZSTD_MIN_PRODUCE_VERSION}+, got v{api_version}",
        )
    if header.records_count <= 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"invalid record count {header.records_count}")
    if header.last_offset_delta != header.records_count - 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"offset range of {header.last_offset_delta + 1} does not match the record count "
            f"{header.records_count}",
        )
    if from_client and header.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if header.has_producer_id and header.base_sequence < 0 and not header.is_control:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"batch with producer id {header.producer_id} has invalid sequence "
            f"{header.base_sequence}",
        )


class RecordsSummary(NamedTuple):
    records_count: int
    max_timestamp: int
    offset_delta_of_max_timestamp: int


def validate_records_for_append(
    buf: Buffer,
    pos: int,
    header: BatchHeader,
    *,
    compacted: bool = False,
    now_ms: int | None = None,
    timestamp_before_max_ms: int | None = None,
    timestamp_after_max_ms: int | None = None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> RecordsSummary:
    """The checks that read the records. Timestamp bounds apply to CreateTime batches when
    `now_ms` is given (message.timestamp.before.max.ms / after.max.ms)."""
    earliest = latest = None
    if now_ms is not None and header.timestamp_type == TimestampType.CREATE_TIME:
        if timestamp_before_max_ms is not None:
            earliest = now_ms - timestamp_before_max_ms
        if timestamp_after_max_ms is not None:
            latest = now_ms + timestamp_after_max_ms
    max_timestamp = -1
    offset_delta_of_max = -1
    count = 0
    try:
        for record in iter_records(buf, pos, header, max_decompressed_size=max_decompressed_size):
            offset_delta = record.offset - header.base_offset
            if offset_delta != count:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD,
                    f"record offset delta {offset_delta} where {count} was expected",
                )
            if compacted and record.key is None and not header.is_control:
                raise KafkaError(
                    ErrorCode.INVALID_RECORD, "compacted topics do not accept records without key"
                )
            timestamp = record.timestamp
            if (earliest is not None and timestamp < earliest) or (
                latest is not None and timestamp > latest
            ):
                raise KafkaError(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"timestamp {timestamp} is outside the accepted window around {now_ms}",
                )
            if timestamp > max_timestamp:
                max_timestamp = timestamp
                offset_delta_of_max = offset_delta
            count += 1
    except (CorruptRecordError, DecodeError) as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    return RecordsSummary(count, max_timestamp, offset_delta_of_max)
