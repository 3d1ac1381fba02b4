"""Produce-side batch validation and the Kafka error codes it maps to."""

from __future__ import annotations

import struct

import pytest

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import (
    BatchHeader,
    Compression,
    RecordBatchBuilder,
    build_batch,
    build_control_batch,
    validate_batch_for_append,
    validate_produce_records,
    validate_records_for_append,
    write_crc,
)

NOW = 1_700_000_000_000


def code_of(call) -> ErrorCode:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaError) as info:
        call()
    return info.value.code


def rewrite(data: bytes, fmt: str, offset: int, value: int, fix_crc: bool = True) -> bytearray:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    if fix_crc:
        write_crc(buf, 0, len(buf))
    return buf


def good_batch(**options: object) -> bytes:
    return build_batch([(NOW, b"k%d" % i, b"v") for i in range(3)], **options)


def test_good_batches_pass() -> None:
    for compression in Compression:
        data = good_batch(compression=compression, producer_id=9, producer_epoch=0, base_sequence=0)
        ((pos, header),) = validate_produce_records(data, api_version=9)
        assert pos == 0 and header.records_count == 3
        summary = validate_records_for_append(data, 0, header, compacted=True, now_ms=NOW)
        assert summary == (3, NOW, 0)


def test_crc_and_framing_errors_are_corrupt_message() -> None:
    data = bytearray(good_batch())
    data[-1] ^= 1
    assert code_of(lambda: validate_produce_records(data, 9)) is ErrorCode.CORRUPT_MESSAGE
    good = good_batch()
    assert code_of(lambda: validate_produce_records(good + b"\x00" * 5, 9)) is (
        ErrorCode.CORRUPT_MESSAGE
    )
    assert code_of(lambda: validate_produce_records(good[:-1], 9)) is ErrorCode.CORRUPT_MESSAGE
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    assert code_of(lambda: validate_produce_records(bad_magic, 9)) is ErrorCode.CORRUPT_MESSAGE
    bad_codec = rewrite(good, ">h", 21, 6)
    assert code_of(lambda: validate_produce_records(bad_codec, 9)) is ErrorCode.CORRUPT_MESSAGE


def test_record_count_and_offset_range() -> None:
    good = good_batch()
    zero = rewrite(good, ">i", 57, 0)
    assert code_of(lambda: validate_produce_records(zero, 9)) is ErrorCode.INVALID_RECORD
    mismatch = rewrite(good, ">i", 23, 5)
    assert code_of(lambda: validate_produce_records(mismatch, 9)) is ErrorCode.INVALID_RECORD
    empty = RecordBatchBuilder().build()
    assert code_of(lambda: validate_produce_records(empty, 9)) is ErrorCode.INVALID_RECORD
    assert code_of(lambda: validate_produce_records(b"", 9)) is ErrorCode.INVALID_RECORD


def test_one_batch_per_partition_from_produce_v3() -> None:
    two = good_batch() + good_batch()
    assert code_of(lambda: validate_produce_records(two, 3)) is ErrorCode.INVALID_RECORD
    assert len(validate_produce_records(two, 2)) == 2


def test_zstd_needs_produce_v7() -> None:
    data = good_batch(compression=Compression.ZSTD)
    assert code_of(lambda: validate_produce_records(data, 6)) is (
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )
    validate_produce_records(data, 7)


def test_control_batches_and_sequences() -> None:
    control = build_control_batch(1, 0, True, 0, NOW)
    assert code_of(lambda: validate_produce_records(control, 9)) is ErrorCode.INVALID_RECORD
    validate_produce_records(control, 9, from_client=False)
    no_sequence = good_batch(producer_id=5, producer_epoch=0)
    assert code_of(lambda: validate_produce_records(no_sequence, 9)) is ErrorCode.INVALID_RECORD


def test_message_too_large() -> None:
    data = good_batch()
    header = BatchHeader.parse(data)
    assert (
        code_of(lambda: validate_batch_for_append(data, 0, header, max_message_bytes=len(data) - 1))
        is ErrorCode.MESSAGE_TOO_LARGE
    )
    validate_batch_for_append(data, 0, header, max_message_bytes=len(data))


def test_record_level_checks() -> None:
    null_key = build_batch([(NOW, b"k", b"v"), (NOW, None, b"v")], compression=Compression.LZ4)
    header = BatchHeader.parse(null_key)
    validate_records_for_append(null_key, 0, header)
    assert (
        code_of(lambda: validate_records_for_append(null_key, 0, header, compacted=True))
        is ErrorCode.INVALID_RECORD
    )

    builder = RecordBatchBuilder()
    builder.append(NOW, b"a", b"1")
    builder.append(NOW, b"b", b"2", offset=5)
    gappy = builder.build()
    assert (
        code_of(lambda: validate_records_for_append(gappy, 0, BatchHeader.parse(gappy)))
        is ErrorCode.INVALID_RECORD
    )

    old = build_batch([(NOW - 10_000, b"k", b"v")])
    header = BatchHeader.parse(old)
    assert (
        code_of(
            lambda: validate_records_for_append(
                old, 0, header, now_ms=NOW, timestamp_before_max_ms=5_000
            )
        )
        is ErrorCode.INVALID_TIMESTAMP
    )
    validate_records_for_append(old, 0, header, now_ms=NOW, timestamp_after_max_ms=0)
    future = build_batch([(NOW + 10_000, b"k", b"v")])
    assert (
        code_of(
            lambda: validate_records_for_append(
                future, 0, BatchHeader.parse(future), now_ms=NOW, timestamp_after_max_ms=1_000
            )
        )
        is ErrorCode.INVALID_TIMESTAMP
    )

    broken = bytearray(good_batch())
    broken[-1] = 0x7F  # a header count far beyond the record
    assert (
        code_of(lambda: validate_records_for_append(broken, 0, BatchHeader.parse(broken)))
        is ErrorCode.CORRUPT_MESSAGE
    )
