"""RecordBatch v2 header: parsing, CRC, walking buffers, patching, corrupt input."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import CorruptRecordError, DecodeError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_SEQUENCE,
    BatchHeader,
    Compression,
    RecordBatchBuilder,
    TimestampType,
    iter_batches,
    iter_records,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    read_magic,
    verify_crc,
)


def make_batch(
    count: int = 3,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    value_size: int = 10,
    **options: object,
) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset, compression=compression, **options)
    for i in range(count):
        builder.append(1_700_000_000_000 + i, b"key-%d" % i, bytes([i % 256]) * value_size)
    return builder.build()


def test_header_fields_and_properties() -> None:
    data = make_batch(
        count=5,
        base_offset=100,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        is_transactional=True,
        partition_leader_epoch=9,
        compression=Compression.GZIP,
    )
    header = BatchHeader.parse(data)
    assert header.base_offset == 100
    assert header.batch_length == len(data) - LOG_OVERHEAD
    assert header.size == len(data)
    assert header.partition_leader_epoch == 9
    assert header.magic == MAGIC_V2
    assert header.crc == crc32c(data[21:])
    assert header.last_offset_delta == 4
    assert header.last_offset == 104
    assert header.next_offset == 105
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_004
    assert header.producer_id == 42
    assert header.producer_epoch == 3
    assert header.base_sequence == 7
    assert header.last_sequence == 11
    assert header.records_count == 5
    assert header.compression is Compression.GZIP
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional
    assert not header.is_control
    assert not header.has_delete_horizon
    assert header.delete_horizon_ms is None
    assert "base_offset=100" in repr(header)
    assert header == BatchHeader.parse(bytearray(data))
    verify_crc(data, 0, header)


def test_header_uses_one_struct_at_any_position() -> None:
    data = make_batch()
    buf = b"\x00" * 17 + data
    assert BatchHeader.parse(buf, 17) == BatchHeader.parse(data)
    assert BatchHeader.parse(memoryview(buf), 17) == BatchHeader.parse(data)


def test_attribute_bits() -> None:
    header = BatchHeader.parse(make_batch())
    header.attributes = 0x08 | 0x20 | 0x40 | 4
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.is_control and header.has_delete_horizon
    assert header.delete_horizon_ms == header.base_timestamp
    assert header.compression is Compression.ZSTD
    header.attributes = 5
    with pytest.raises(CorruptRecordError):
        _ = header.compression


def test_last_sequence_wraps_like_kafka() -> None:
    header = BatchHeader.parse(make_batch(count=10, producer_id=1, base_sequence=2**31 - 5))
    assert header.last_sequence == 4  # 2**31-5 + 9 wraps past INT32_MAX to 0
    assert BatchHeader.parse(make_batch()).last_sequence == NO_SEQUENCE


def test_parse_errors() -> None:
    data = make_batch()
    for size in range(BATCH_HEADER_SIZE):
        with pytest.raises(DecodeError):
            BatchHeader.parse(data[:size])
    bad_magic = bytearray(data)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        BatchHeader.parse(bad_magic)
    short = bytearray(data)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecordError, match="length"):
        BatchHeader.parse(short)
    with pytest.raises(DecodeError):
        BatchHeader.parse(data, -1)


def test_read_magic() -> None:
    assert read_magic(make_batch()) == 2
    assert read_magic(b"\x00" * 16 + b"\x01") == 1
    with pytest.raises(DecodeError):
        read_magic(b"\x00" * 16)


def test_verify_crc_detects_every_single_bit_flip_in_the_crc_range() -> None:
    data = make_batch(count=2, value_size=3)
    header = BatchHeader.parse(data)
    for position in range(21, len(data)):
        for bit in (0, 7):
            flipped = bytearray(data)
            flipped[position] ^= 1 << bit
            with pytest.raises(CorruptRecordError):
                verify_crc(flipped, 0, header)
    with pytest.raises(CorruptRecordError):
        verify_crc(data[:-1], 0, header)


def test_iter_batches_yields_complete_batches_and_stops_at_a_partial_one() -> None:
    batches = [make_batch(count=i + 1, base_offset=i * 10) for i in range(4)]
    buf = b"".join(batches)
    positions = [sum(len(b) for b in batches[:i]) for i in range(4)]
    found = list(iter_batches(buf))
    assert [pos for pos, _ in found] == positions
    assert [header.base_offset for _, header in found] == [0, 10, 20, 30]
    for cut in range(len(batches[-1])):
        partial = buf[: positions[-1] + cut]
        assert [pos for pos, _ in iter_batches(partial)] == positions[:3]
    assert [pos for pos, _ in iter_batches(buf, positions[1], positions[3])] == positions[1:3]
    assert list(iter_batches(b"")) == []


def test_iter_batches_rejects_impossible_lengths() -> None:
    buf = bytearray(make_batch() + make_batch())
    second = len(buf) // 2
    for bad_length in (-1, 0, 48, -(2**31)):
        broken = bytearray(buf)
        struct.pack_into(">i", broken, second + 8, bad_length)
        walker = iter_batches(broken)
        assert next(walker)[0] == 0
        with pytest.raises(CorruptRecordError):
            next(walker)


def test_patch_base_offset_and_leader_epoch_keep_the_crc_valid() -> None:
    data = bytearray(make_batch(count=3, compression=Compression.LZ4))
    patch_base_offset(data, 0, 1_000_000)
    patch_partition_leader_epoch(data, 0, 17)
    header = BatchHeader.parse(data)
    assert header.base_offset == 1_000_000
    assert header.partition_leader_epoch == 17
    verify_crc(data, 0, header)
    assert [r.offset for r in iter_records(data, 0, header)] == [1_000_000, 1_000_001, 1_000_002]


def test_patches_work_through_a_memoryview_at_an_offset() -> None:
    data = make_batch()
    buf = bytearray(b"\xaa" * 5 + data)
    view = memoryview(buf)
    patch_base_offset(view, 5, 77)
    patch_partition_leader_epoch(view, 5, 3)
    patch_log_append_time(view, 5, 123)
    header = BatchHeader.parse(buf, 5)
    assert (header.base_offset, header.partition_leader_epoch, header.max_timestamp) == (77, 3, 123)
    verify_crc(buf, 5, header)
    assert buf[:5] == b"\xaa" * 5


@pytest.mark.parametrize("compression", list(Compression))
def test_patch_log_append_time(compression: Compression) -> None:
    data = bytearray(make_batch(count=4, compression=compression))
    before = BatchHeader.parse(data)
    patch_log_append_time(data, 0, 1_800_000_000_000)
    header = BatchHeader.parse(data)
    verify_crc(data, 0, header)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 1_800_000_000_000
    assert header.base_timestamp == before.base_timestamp
    assert header.attributes == before.attributes | 0x08
    assert header.compression is compression
    # Readers take every record's timestamp from the batch under LogAppendTime.
    assert [r.timestamp for r in iter_records(data, 0, header)] == [1_800_000_000_000] * 4
    unchanged = bytes(data)
    patch_log_append_time(data, 0, 1_800_000_000_000)  # already stamped: no-op
    assert bytes(data) == unchanged


def test_patches_refuse_truncated_buffers() -> None:
    with pytest.raises(DecodeError):
        patch_base_offset(bytearray(11), 0, 1)
    with pytest.raises(DecodeError):
        patch_partition_leader_epoch(bytearray(15), 0, 1)
    data = bytearray(make_batch())
    with pytest.raises(DecodeError):
        patch_log_append_time(data[:-1], 0, 1)


@pytest.mark.parametrize("compression", list(Compression))
def test_truncation_at_every_position_raises_only_decode_errors(compression: Compression) -> None:
    data = make_batch(
        count=3, value_size=5, compression=compression, producer_id=3, base_sequence=0
    )
    for cut in range(len(data)):
        truncated = data[:cut]
        assert list(iter_batches(truncated)) == []
        with pytest.raises(DecodeError):
            header = BatchHeader.parse(truncated)
            verify_crc(truncated, 0, header)
        with pytest.raises(DecodeError):
            list(iter_records(truncated, 0))


@pytest.mark.parametrize("compression", list(Compression))
def test_bit_flips_anywhere_raise_only_decode_errors(compression: Compression) -> None:
    data = make_batch(count=3, value_size=5, compression=compression)
    for position in range(len(data)):
        for bit in range(0, 8, 3):
            flipped = bytearray(data)
            flipped[position] ^= 1 << bit
            # Either the CRC catches it, or (outside the CRC range) decoding still works.
            try:
                for _, header in iter_batches(flipped):
                    verify_crc(flipped, 0, header)
                    list(iter_records(flipped, 0, header))
            except DecodeError:
                continue
            assert position < 21, f"flip at {position} went unnoticed"


@given(st.binary(max_size=400))
@settings(max_examples=400, deadline=None)
def test_arbitrary_bytes_never_raise_anything_but_decode_errors(data: bytes) -> None:
    try:
        for pos, header in iter_batches(data):
            list(iter_records(data, pos, header, max_decompressed_size=1 << 20))
    except DecodeError:
        pass


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_records_region_garbage_with_a_valid_header(data: st.DataObject) -> None:
    """Garbage records behind a valid-looking header: decoding is bounded and only DecodeError."""
    compression = data.draw(st.sampled_from(list(Compression)))
    body = data.draw(st.binary(max_size=200))
    count = data.draw(st.integers(min_value=-3, max_value=2**31 - 1))
    builder = RecordBatchBuilder(compression=compression)
    header_bytes = bytearray(builder.build())
    struct.pack_into(">i", header_bytes, 57, count)
    batch = header_bytes + body
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    try:
        list(iter_records(batch, 0, max_decompressed_size=1 << 20))
    except DecodeError:
        pass
