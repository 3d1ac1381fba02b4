"""Building batches and decoding their records back."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    Record,
    RecordBatchBuilder,
    TimestampType,
    build_batch,
    iter_batches,
    iter_records,
    records_section,
    verify_crc,
)

NOW = 1_700_000_000_000


@pytest.mark.parametrize("compression", list(Compression))
def test_round_trip_keys_values_headers(compression: Compression) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    rows: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (NOW, b"k", b"v", []),
        (NOW + 5, None, b"null key", []),
        (NOW - 3, b"null value", None, []),
        (NOW + 1, None, None, []),
        (NOW, b"", b"", []),
        (NOW + 2**40, b"x" * 300, big, [("h1", b"a"), ("h2", None), ("", b""), ("ünï", b"\xff")]),
        (NOW, b"k2", b"v2", [("dup", b"1"), ("dup", b"2")]),
    ]
    builder = RecordBatchBuilder(base_offset=1000, compression=compression)
    for i, row in enumerate(rows):
        assert builder.append(*row) == i
    data = builder.build()
    header = BatchHeader.parse(data)
    verify_crc(data, 0, header)
    assert header.records_count == len(rows)
    assert header.compression is compression
    assert header.base_timestamp == NOW
    assert header.max_timestamp == NOW + 2**40
    records = list(iter_records(data, 0, header))
    assert records == [
        Record(1000 + i, ts, key, value, headers)
        for i, (ts, key, value, headers) in enumerate(rows)
    ]


def test_producer_fields_flags_and_timestamp_type() -> None:
    data = RecordBatchBuilder(
        base_offset=5,
        producer_id=2**40,
        producer_epoch=32767,
        base_sequence=2**31 - 1,
        is_transactional=True,
        partition_leader_epoch=12,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    data.append(NOW, b"a", b"b")
    built = data.build()
    header = BatchHeader.parse(built)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        2**40,
        32767,
        2**31 - 1,
    )
    assert header.is_transactional and not header.is_control
    assert header.partition_leader_epoch == 12
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    verify_crc(built, 0, header)


def test_records_are_lazy_and_the_header_needs_no_records() -> None:
    data = bytearray(build_batch([(NOW, b"k", b"v")] * 3))
    data[-1] ^= 0xFF  # damage the last record's last byte (the header count)
    header = BatchHeader.parse(data)  # header still readable
    records = iter_records(data, 0, header)
    assert next(records).offset == 0  # the first records decode before the damage is reached
    assert next(records).offset == 1
    with pytest.raises(CorruptRecordError):
        next(records)


def test_explicit_offsets_keep_gaps() -> None:
    builder = RecordBatchBuilder(base_offset=100)
    builder.append(NOW, b"a", b"1", offset=100)
    builder.append(NOW, b"b", b"2", offset=103)
    assert builder.append(NOW, b"c", b"3") == 4
    with pytest.raises(ValueError):
        builder.append(NOW, b"d", b"4", offset=104)
    data = builder.build()
    header = BatchHeader.parse(data)
    assert header.last_offset_delta == 4 and header.records_count == 3
    assert [r.offset for r in iter_records(data)] == [100, 103, 104]


def test_size_estimate_and_build_batch() -> None:
    builder = RecordBatchBuilder()
    assert builder.size_estimate == BATCH_HEADER_SIZE
    builder.append(NOW, b"key", b"value", [("h", b"v")])
    uncompressed = builder.build()
    assert builder.size_estimate == len(uncompressed)
    assert builder.records_count == 1
    same = build_batch([(NOW, b"key", b"value", [("h", b"v")])])
    assert same == uncompressed
    compressed = build_batch(
        [(NOW, b"key", b"value" * 1000)] * 50, compression=Compression.ZSTD, compression_level=5
    )
    assert len(compressed) < 50 * 5000 // 10


def test_empty_batch() -> None:
    data = RecordBatchBuilder(base_offset=9).build()
    header = BatchHeader.parse(data)
    assert header.records_count == 0
    assert header.size == BATCH_HEADER_SIZE
    assert header.base_timestamp == header.max_timestamp == -1
    assert list(iter_records(data)) == []


def test_timestamps_none_mean_no_timestamp() -> None:
    data = build_batch([(None, b"k", b"v")])
    assert BatchHeader.parse(data).max_timestamp == -1
    assert next(iter_records(data)).timestamp == -1


def test_record_count_mismatch_is_corrupt() -> None:
    data = bytearray(build_batch([(NOW, b"k", b"v")] * 3))
    struct.pack_into(">i", data, 57, 2)  # one record left over
    with pytest.raises(CorruptRecordError, match="left after"):
        list(iter_records(data))
    struct.pack_into(">i", data, 57, 4)  # one record missing
    with pytest.raises(CorruptRecordError):
        list(iter_records(data))
    struct.pack_into(">i", data, 57, -1)
    with pytest.raises(CorruptRecordError):
        list(iter_records(data))


def test_huge_claimed_lengths_do_not_allocate() -> None:
    builder = RecordBatchBuilder()
    builder.append(NOW, b"k", b"v")
    data = bytearray(builder.build())
    # record: length, attributes, tsDelta, offsetDelta, keyLength(=2 zig-zag), ...
    key_length_at = BATCH_HEADER_SIZE + 4
    assert data[key_length_at] == 2
    data[key_length_at : key_length_at + 1] = b"\xfe\xff\xff\xff\x0f"  # 2**31 - 1
    struct.pack_into(">i", data, 8, len(data) - 12)
    with pytest.raises(CorruptRecordError):
        list(iter_records(data))


def test_records_section_decompresses() -> None:
    data = build_batch([(NOW, b"k", b"v" * 1000)], compression=Compression.GZIP)
    header = BatchHeader.parse(data)
    section = records_section(data, 0, header)
    assert len(section) > 1000 > header.size
    with pytest.raises(CorruptRecordError):
        records_section(data[:-1], 0, header)


def test_many_batches_walk_and_decode() -> None:
    buf = b"".join(
        build_batch([(NOW + i, b"%d" % i, b"v")], base_offset=i, compression=Compression(i % 5))
        for i in range(50)
    )
    offsets = [
        record.offset
        for pos, header in iter_batches(buf)
        for record in iter_records(buf, pos, header)
    ]
    assert offsets == list(range(50))


header_strategy = st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20)))
record_strategy = st.tuples(
    st.integers(min_value=0, max_value=2**50),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.one_of(st.none(), st.binary(max_size=2000)),
    st.lists(header_strategy, max_size=4),
)


@given(
    rows=st.lists(record_strategy, max_size=30),
    compression=st.sampled_from(list(Compression)),
    base_offset=st.integers(min_value=0, max_value=2**62),
    producer_id=st.integers(min_value=-1, max_value=2**62),
    transactional=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_round_trip_property(
    rows: list, compression: Compression, base_offset: int, producer_id: int, transactional: bool
) -> None:
    data = build_batch(
        rows,
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
    )
    ((pos, header),) = list(iter_batches(data))
    verify_crc(data, pos, header)
    assert header.records_count == len(rows)
    assert header.is_transactional is transactional
    assert header.max_timestamp == max((row[0] for row in rows), default=-1)
    decoded = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(data)]
    assert decoded == [
        (base_offset + i, ts, key, value, headers)
        for i, (ts, key, value, headers) in enumerate(rows)
    ]


def test_header_keys_with_arbitrary_bytes_round_trip() -> None:
    builder = RecordBatchBuilder()
    builder.append(NOW, None, None, [("\udcff\udcfe", b"x")])  # surrogate-escaped raw bytes
    data = builder.build()
    assert b"\xff\xfe" in data
    assert next(iter_records(data)).headers == [("\udcff\udcfe", b"x")]
