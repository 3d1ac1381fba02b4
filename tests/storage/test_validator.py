"""The broker's record validation (`odradek.storage.validator`) and the Kafka error codes it maps
to: Kafka's ProduceRequest.validateRecords (`validate_produce_request_records`, per Produce
version) and LogValidator (`validate_as_leader`, per topic config).

Moved from tests/protocol/test_records_validation.py, which tested a second validator
(`odradek.protocol.records.validation`) that the broker did not run; the checks it held that the
broker lacked now live here, in the one validator the broker runs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import (
    Compression,
    RecordBatchBuilder,
    build_batch,
    build_control_batch,
    write_crc,
)
from odradek.storage.config import LogConfig
from odradek.storage.validator import (
    AppendOrigin,
    ValidatedRecords,
    assign_offsets,
    validate_as_leader,
    validate_produce_request_records,
)

NOW = 1_700_000_000_000
PRODUCE_VERSION = 9
DEFAULT = LogConfig()
COMPACTED = LogConfig.from_props({"cleanup.policy": "compact"})


def code_of(call: Callable[[], object]) -> ErrorCode:
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
    records = [(NOW, b"k%d" % i, b"v") for i in range(3)]
    return build_batch(records, **options)  # type: ignore[arg-type]


def produce(records: bytes | bytearray, version: int = PRODUCE_VERSION,
            config: LogConfig = DEFAULT,
            origin: AppendOrigin = AppendOrigin.CLIENT) -> ValidatedRecords:
    """What the broker runs on one partition's records of a Produce request: the handler's
    version checks, then the log's."""
    validate_produce_request_records(records, version)
    return validate_as_leader(records, config, NOW, origin)


def test_good_batches_pass() -> None:
    for compression in Compression:
        data = good_batch(compression=compression, producer_id=9, producer_epoch=0,
                          base_sequence=0)
        validated = produce(data, config=COMPACTED)
        ((position, header),) = validated.batches
        assert position == 0 and header.records_count == 3 and validated.record_count == 3
        assert assign_offsets(validated, 0, 0, COMPACTED, NOW).max_timestamp == NOW


def test_crc_and_framing_errors_are_corrupt_message() -> None:
    data = bytearray(good_batch())
    data[-1] ^= 1
    assert code_of(lambda: produce(data)) is ErrorCode.CORRUPT_MESSAGE
    good = good_batch()
    assert code_of(lambda: produce(good + b"\x00" * 5)) is ErrorCode.CORRUPT_MESSAGE
    assert code_of(lambda: produce(good[:-1])) is ErrorCode.CORRUPT_MESSAGE
    bad_codec = rewrite(good, ">h", 21, 6)
    assert code_of(lambda: produce(bad_codec)) is ErrorCode.CORRUPT_MESSAGE


def test_a_batch_of_another_magic_is_invalid_record() -> None:
    # Kafka's ProduceRequest.validateRecords: produce v3+ takes magic 2 batches only. (The moved
    # test expected CORRUPT_MESSAGE, the retired validator's code; the broker said INVALID_RECORD
    # before and after, as Kafka does.)
    bad_magic = bytearray(good_batch())
    bad_magic[16] = 1
    assert code_of(lambda: produce(bad_magic)) is ErrorCode.INVALID_RECORD


def test_record_count_and_offset_range() -> None:
    good = good_batch()
    zero = rewrite(good, ">i", 57, 0)
    assert code_of(lambda: produce(zero)) is ErrorCode.INVALID_RECORD
    mismatch = rewrite(good, ">i", 23, 5)
    assert code_of(lambda: produce(mismatch)) is ErrorCode.INVALID_RECORD
    empty = RecordBatchBuilder().build()
    assert code_of(lambda: produce(empty)) is ErrorCode.INVALID_RECORD
    # No batch at all is refused by the produce handler (tests/server/test_bad_input.py); the
    # log appends nothing.
    assert produce(b"").batches == []


def test_one_batch_per_partition_from_produce_v3() -> None:
    two = good_batch() + good_batch()
    assert code_of(lambda: produce(two, version=3)) is ErrorCode.INVALID_RECORD
    assert len(produce(two, version=2).batches) == 2
    # A second batch that is not whole is not "another batch": the bytes are corrupt.
    assert code_of(lambda: produce(two[:-1], version=3)) is ErrorCode.CORRUPT_MESSAGE


def test_zstd_needs_produce_v7() -> None:
    data = good_batch(compression=Compression.ZSTD)
    assert code_of(lambda: produce(data, version=6)) is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    produce(data, version=7)
    produce(data, version=2)  # Kafka checks produce v3+ only


def test_control_batches_and_sequences() -> None:
    control = build_control_batch(1, 0, True, 0, NOW)
    assert code_of(lambda: produce(control)) is ErrorCode.INVALID_RECORD
    produce(control, origin=AppendOrigin.COORDINATOR)
    no_sequence = good_batch(producer_id=5, producer_epoch=0)
    assert code_of(lambda: produce(no_sequence)) is ErrorCode.INVALID_RECORD


def test_message_too_large() -> None:
    data = good_batch()
    too_small = LogConfig.from_props({"max.message.bytes": len(data) - 1})
    assert code_of(lambda: produce(data, config=too_small)) is ErrorCode.MESSAGE_TOO_LARGE
    produce(data, config=LogConfig.from_props({"max.message.bytes": len(data)}))


def test_record_level_checks() -> None:
    null_key = build_batch([(NOW, b"k", b"v"), (NOW, None, b"v")], compression=Compression.LZ4)
    produce(null_key)
    assert code_of(lambda: produce(null_key, config=COMPACTED)) is ErrorCode.INVALID_RECORD

    builder = RecordBatchBuilder()
    builder.append(NOW, b"a", b"1")
    builder.append(NOW, b"b", b"2", offset=5)
    gappy = builder.build()
    assert code_of(lambda: produce(gappy)) is ErrorCode.INVALID_RECORD
    assert code_of(lambda: produce(gappy, config=COMPACTED)) is ErrorCode.INVALID_RECORD

    old = build_batch([(NOW - 10_000, b"k", b"v")])
    before_5s = LogConfig.from_props({"message.timestamp.before.max.ms": 5_000})
    assert code_of(lambda: produce(old, config=before_5s)) is ErrorCode.INVALID_TIMESTAMP
    produce(old, config=LogConfig.from_props({"message.timestamp.after.max.ms": 0}))
    future = build_batch([(NOW + 10_000, b"k", b"v")])
    after_1s = LogConfig.from_props({"message.timestamp.after.max.ms": 1_000})
    assert code_of(lambda: produce(future, config=after_1s)) is ErrorCode.INVALID_TIMESTAMP

    # Records are read on compacted topics only: there, records that do not decode are corrupt.
    broken = bytearray(good_batch())
    broken[-1] = 0x7F  # the last record's header count, far beyond the record
    write_crc(broken, 0, len(broken))
    produce(broken)
    assert code_of(lambda: produce(broken, config=COMPACTED)) is ErrorCode.CORRUPT_MESSAGE
