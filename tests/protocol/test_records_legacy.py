"""Legacy message sets (v0/v1): reading, up-conversion, writing, down-conversion."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import CorruptRecordError, DecodeError, ErrorCode, KafkaError
from odradek.protocol.records import (
    BatchHeader,
    Compression,
    LegacyMessage,
    LegacyMessageSetBuilder,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_legacy_records,
    iter_message_set,
    iter_records,
    legacy_to_v2,
    v2_to_legacy,
    verify_crc,
)
from odradek.protocol.records.legacy import encode_message

LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
NOW = 1_600_000_000_000


def sample_set(magic: int, compression: Compression, base: int = 10, count: int = 5) -> bytes:
    builder = LegacyMessageSetBuilder(magic, compression)
    for i in range(count):
        key = None if i == 1 else b"key%d" % i
        value = None if i == 2 else b"value-%d" % i * (i + 1)
        builder.append(base + i, NOW + i, key, value)
    return builder.build()


def test_v0_message_layout_by_hand() -> None:
    body = struct.pack(">bb", 0, 0) + struct.pack(">i", 1) + b"k" + struct.pack(">i", 2) + b"vv"
    entry = struct.pack(">qiI", 7, len(body) + 4, zlib.crc32(body)) + body
    builder = LegacyMessageSetBuilder(0)
    builder.append(7, None, b"k", b"vv")
    assert builder.build() == entry
    (message,) = list(iter_message_set(entry))
    assert message == LegacyMessage(7, 0, 0, -1, b"k", b"vv", zlib.crc32(body))
    assert message.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", LEGACY_CODECS)
def test_round_trip(magic: int, compression: Compression) -> None:
    data = sample_set(magic, compression)
    messages = list(iter_legacy_records(data))
    assert [m.offset for m in messages] == [10, 11, 12, 13, 14]
    assert [m.key for m in messages] == [b"key0", None, b"key2", b"key3", b"key4"]
    assert [m.value for m in messages] == [
        b"value-0",
        b"value-1" * 2,
        None,
        b"value-3" * 4,
        b"value-4" * 5,
    ]
    expected_ts = [NOW + i for i in range(5)] if magic == 1 else [-1] * 5
    assert [m.timestamp for m in messages] == expected_ts
    shallow = list(iter_message_set(data))
    if compression == Compression.NONE:
        assert len(shallow) == 5
    else:
        (wrapper,) = shallow
        assert wrapper.compression is compression
        assert wrapper.offset == 14  # the last inner offset
        assert wrapper.key is None


def test_v1_relative_inner_offsets_and_log_append_time() -> None:
    builder = LegacyMessageSetBuilder(
        1, Compression.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    for offset in (100, 101, 105):  # a compacted set with a gap
        builder.append(offset, NOW + offset, b"k", b"v")
    data = builder.build()
    (wrapper,) = list(iter_message_set(data))
    assert wrapper.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert wrapper.timestamp == NOW + 105
    messages = list(iter_legacy_records(data))
    assert [m.offset for m in messages] == [100, 101, 105]
    assert {m.timestamp for m in messages} == {NOW + 105}
    assert all(m.timestamp_type is TimestampType.LOG_APPEND_TIME for m in messages)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", LEGACY_CODECS)
@pytest.mark.parametrize("target", [Compression.NONE, Compression.ZSTD])
def test_legacy_to_v2(magic: int, compression: Compression, target: Compression) -> None:
    data = sample_set(magic, compression)
    batch = legacy_to_v2(data, compression=target)
    header = BatchHeader.parse(batch)
    verify_crc(batch, 0, header)
    assert header.base_offset == 10 and header.records_count == 5
    assert header.compression is target
    records = list(iter_records(batch))
    legacy = list(iter_legacy_records(data))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (m.offset, m.timestamp, m.key, m.value, []) for m in legacy
    ]


def test_legacy_to_v2_multiple_wrappers_and_log_append_time() -> None:
    first = LegacyMessageSetBuilder(
        1, Compression.SNAPPY, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    first.append(0, NOW, b"a", b"1")
    first.append(1, NOW + 1, b"b", b"2")
    second = LegacyMessageSetBuilder(1, timestamp_type=TimestampType.LOG_APPEND_TIME)
    second.append(2, NOW + 9, b"c", b"3")
    batch = legacy_to_v2(first.build() + second.build())
    header = BatchHeader.parse(batch)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == NOW + 9
    assert [r.offset for r in iter_records(batch)] == [0, 1, 2]


def test_legacy_to_v2_rejects_empty_and_unordered_sets() -> None:
    with pytest.raises(CorruptRecordError):
        legacy_to_v2(b"")
    one = LegacyMessageSetBuilder(1)
    one.append(5, NOW, None, b"x")
    with pytest.raises(CorruptRecordError, match="increasing"):
        legacy_to_v2(one.build() + one.build())


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", LEGACY_CODECS)
def test_v2_to_legacy(magic: int, compression: Compression) -> None:
    rows = [(NOW + i, b"k%d" % i, b"v%d" % i, [("dropped", b"h")]) for i in range(4)]
    buf = (
        build_batch(rows[:2], base_offset=0, compression=compression)
        + build_control_batch(1, 0, True, 0, NOW, base_offset=2)
        + build_batch(rows[2:], base_offset=3, compression=compression)
    )
    legacy = v2_to_legacy(buf, magic)
    messages = list(iter_legacy_records(legacy))
    assert [m.offset for m in messages] == [0, 1, 3, 4]
    assert all(m.magic == magic for m in messages)
    assert [m.key for m in messages] == [b"k0", b"k1", b"k2", b"k3"]
    if magic == 1:
        assert [m.timestamp for m in messages] == [NOW, NOW + 1, NOW + 2, NOW + 3]
    expected_wrappers = 4 if compression == Compression.NONE else 2
    assert len(list(iter_message_set(legacy))) == expected_wrappers


def test_zstd_cannot_be_down_converted() -> None:
    with pytest.raises(KafkaError) as info:
        v2_to_legacy(build_batch([(NOW, b"k", b"v")], compression=Compression.ZSTD), 1)
    assert info.value.code is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_iter_message_set_stops_at_partial_trailing_entry() -> None:
    data = sample_set(1, Compression.NONE)
    complete = len(list(iter_message_set(data)))
    for cut in range(1, 40):
        assert len(list(iter_message_set(data[:-cut]))) == complete - 1
    with pytest.raises(CorruptRecordError):
        list(iter_message_set(data[:-3], strict=True))


def test_crc_is_checked() -> None:
    data = bytearray(sample_set(1, Compression.NONE, count=1))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="crc"):
        list(iter_message_set(data))
    assert len(list(iter_message_set(data, check_crc=False))) == 1


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", LEGACY_CODECS)
def test_truncation_and_bit_flips_raise_only_decode_errors(
    magic: int, compression: Compression
) -> None:
    data = sample_set(magic, compression, count=3)
    for cut in range(len(data)):
        try:
            list(iter_legacy_records(data[:cut]))
        except DecodeError:
            pass
    original = [(m.timestamp, m.key, m.value) for m in iter_legacy_records(data)]
    for position in range(len(data)):
        flipped = bytearray(data)
        flipped[position] ^= 0x10
        try:
            decoded = [(m.timestamp, m.key, m.value) for m in iter_legacy_records(flipped)]
        except DecodeError:
            continue
        # Only the unchecksummed offset/size fields can change without an error: contents stay
        # intact (a damaged size at most ends the set early).
        assert decoded == original[: len(decoded)], f"flip at {position} went unnoticed"


def test_nested_compression_is_corrupt() -> None:
    inner = sample_set(1, Compression.GZIP)
    entry = bytearray()
    encode_message(entry, 4, 1, int(Compression.GZIP), NOW, None, gzip.compress(inner))
    with pytest.raises(CorruptRecordError, match="compressed message"):
        list(iter_legacy_records(entry))


def test_builder_argument_checks() -> None:
    with pytest.raises(ValueError):
        LegacyMessageSetBuilder(2)
    with pytest.raises(KafkaError):
        LegacyMessageSetBuilder(1, Compression.ZSTD)
    builder = LegacyMessageSetBuilder(0)
    builder.append(3, None, None, None)
    with pytest.raises(ValueError):
        builder.append(3, None, None, None)
    assert len(builder) == 1
    assert LegacyMessageSetBuilder(1).build() == b""


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_raise_only_decode_errors(data: bytes) -> None:
    try:
        list(iter_legacy_records(data, max_decompressed_size=1 << 20))
    except DecodeError:
        pass
