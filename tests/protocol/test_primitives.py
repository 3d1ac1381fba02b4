"""Wire primitives: varints, strings, bytes, arrays, uuids, tagged fields and `Reader`."""

from __future__ import annotations

import struct
import tracemalloc
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol import primitives as p
from odradek.protocol.errors import DecodeError
from odradek.protocol.primitives import FIXED_ARRAY_TYPES, ZERO_UUID, Reader


def encoded(write, *args) -> bytes:
    out = bytearray()
    write(out, *args)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**31 - 1, "ffffffff07"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_unsigned_varint(value: int, wire: str) -> None:
    assert encoded(p.write_uvarint, value) == bytes.fromhex(wire)
    assert p.read_uvarint(memoryview(bytes.fromhex(wire) + b"\xff"), 0) == (value, len(wire) // 2)
    assert p.uvarint_size(value) == len(wire) // 2


def test_unsigned_varint_limits() -> None:
    with pytest.raises(DecodeError, match="longer than 5"):
        p.read_uvarint(memoryview(b"\x80\x80\x80\x80\x80\x01"), 0)
    with pytest.raises(IndexError):  # truncated: callers translate to DecodeError
        p.read_uvarint(memoryview(b"\x80\x80"), 0)
    with pytest.raises(DecodeError):
        Reader(b"\x80\x80").uvarint()
    for bad in (-1, 2**32):
        with pytest.raises(ValueError):
            p.write_uvarint(bytearray(), bad)


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (64, "8001"), (-(2**31), "ffffffff0f")],
)
def test_zigzag_varint(value: int, wire: str) -> None:
    assert encoded(p.write_varint, value) == bytes.fromhex(wire)
    assert p.read_varint(memoryview(bytes.fromhex(wire)), 0) == (value, len(wire) // 2)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_zigzag_varlong_roundtrip(value: int) -> None:
    wire = encoded(p.write_varlong, value)
    assert len(wire) <= 10
    assert Reader(wire).varlong() == value


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_zigzag_varint_roundtrip(value: int) -> None:
    reader = Reader(encoded(p.write_varint, value))
    assert reader.varint() == value and reader.at_end()


def test_varint_range_checks() -> None:
    with pytest.raises(ValueError):
        p.write_varint(bytearray(), 2**31)
    with pytest.raises(ValueError):
        p.write_varlong(bytearray(), 2**63)
    with pytest.raises(DecodeError):
        Reader(b"\xff" * 11).varlong()


def test_strings_classic_and_compact() -> None:
    assert encoded(p.write_string, "héllo") == b"\x00\x06h\xc3\xa9llo"
    assert encoded(p.write_nullable_string, None) == b"\xff\xff"
    assert encoded(p.write_compact_string, "") == b"\x01"
    assert encoded(p.write_compact_nullable_string, None) == b"\x00"
    reader = Reader(b"\x00\x06h\xc3\xa9llo" + b"\xff\xff" + b"\x03ab" + b"\x00" + b"\x01")
    assert reader.string() == "héllo"
    assert reader.nullable_string() is None
    assert reader.compact_string() == "ab"
    assert reader.compact_nullable_string() is None
    assert reader.compact_string() == ""
    assert reader.at_end()


def test_string_errors() -> None:
    with pytest.raises(DecodeError, match="null"):
        Reader(b"\xff\xff").string()
    with pytest.raises(DecodeError, match="invalid string length"):
        Reader(b"\xff\xfe").nullable_string()
    with pytest.raises(DecodeError, match="exceeds"):
        Reader(b"\x00\x05abc").string()
    with pytest.raises(DecodeError, match="null"):
        Reader(b"\x00").compact_string()
    with pytest.raises(DecodeError):  # compact length above Kafka's 0x7fff limit
        Reader(bytes.fromhex("818002") + b"x" * 40000).compact_string()
    with pytest.raises(ValueError, match="longer"):
        p.write_string(bytearray(), "x" * 0x8000)
    with pytest.raises(ValueError, match="None"):
        p.write_compact_string(bytearray(), None)  # type: ignore[arg-type]


def test_malformed_utf8_is_replaced_like_java() -> None:
    assert Reader(b"\x00\x02\xff\xfe").string() == "\ufffd\ufffd"


def test_bytes_and_records() -> None:
    assert encoded(p.write_bytes, b"ab") == b"\x00\x00\x00\x02ab"
    assert encoded(p.write_nullable_bytes, None) == b"\xff\xff\xff\xff"
    assert encoded(p.write_compact_bytes, b"") == b"\x01"
    assert encoded(p.write_compact_nullable_bytes, None) == b"\x00"
    data = b"\x00\x00\x00\x02ab" + b"\xff\xff\xff\xff" + b"\x03xy" + b"\x00" + b"\x00\x00\x00\x01z"
    reader = Reader(data)
    assert reader.bytes() == b"ab"
    assert reader.nullable_bytes() is None
    assert reader.compact_bytes() == b"xy"
    assert reader.compact_nullable_bytes() is None
    records = reader.records()
    assert type(records) is memoryview and records == b"z" and records.obj is data
    with pytest.raises(DecodeError):
        Reader(b"\x00\x00\x00\x05ab").bytes()
    with pytest.raises(DecodeError):
        Reader(b"\xff\xff\xff\xfe").records()
    with pytest.raises(DecodeError):
        Reader(b"\x00").compact_bytes()


class FileRegion:
    """Stands in for the storage layer's sendfile region: has a length, is not a buffer."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def test_write_records_keeps_large_and_non_buffer_values_out_of_line() -> None:
    out, chunks = bytearray(b"head"), []
    p.write_records(out, chunks, b"small", compact=True)
    assert out == b"head\x06small" and chunks == []
    region = FileRegion(10)
    p.write_records(out, chunks, region, compact=False)
    assert chunks == [b"head\x06small\x00\x00\x00\x0a", region] and out == b""
    big = memoryview(bytes(100_000))
    p.write_records(out, chunks, big, compact=True)
    assert chunks[-1] is big and chunks[-2] == bytes.fromhex("a18d06")
    p.write_records(out, chunks, None, compact=True)
    assert out == b"\x00"


def test_uuid() -> None:
    value = uuid.uuid4()
    assert Reader(value.bytes).uuid() == value
    assert Reader(bytes(16)).uuid() is ZERO_UUID
    fast = p.uuid_from_int(value.int)
    assert fast == value and hash(fast) == hash(value) and str(fast) == str(value)
    with pytest.raises(DecodeError):
        Reader(bytes(15)).uuid()


def test_fixed_size_reads() -> None:
    reader = Reader(struct.pack(">bhiqHId?", -1, -2, -3, -4, 65535, 2**32 - 1, 1.5, True))
    assert reader.int8() == -1
    assert reader.int16() == -2
    assert reader.int32() == -3
    assert reader.int64() == -4
    assert reader.uint16() == 65535
    assert reader.uint32() == 2**32 - 1
    assert reader.float64() == 1.5
    assert reader.bool() is True
    with pytest.raises(DecodeError, match="truncated"):
        reader.int8()


def test_fixed_arrays() -> None:
    int32 = FIXED_ARRAY_TYPES["i"]
    out = bytearray()
    p.write_compact_fixed_array(out, [1, -2, 3], int32, False)
    assert out == bytes.fromhex("0400000001fffffffe00000003")
    assert p.read_compact_fixed_array(memoryview(out), 0, int32, False) == ([1, -2, 3], 13)
    long_list = list(range(200))  # beyond the precompiled shapes
    out = bytearray()
    p.write_fixed_array(out, long_list, int32, False)
    assert p.read_fixed_array(memoryview(out), 0, int32, False) == (long_list, 804)
    assert p.read_compact_fixed_array(memoryview(b"\x00"), 0, int32, True) == (None, 1)
    assert p.read_fixed_array(memoryview(b"\xff\xff\xff\xff"), 0, int32, True) == (None, 4)
    with pytest.raises(DecodeError):
        p.read_compact_fixed_array(memoryview(b"\x00"), 0, int32, False)
    with pytest.raises(DecodeError, match="exceeds"):
        p.read_compact_fixed_array(memoryview(b"\x03\x00\x00\x00\x01"), 0, int32, False)
    with pytest.raises(ValueError):
        p.write_fixed_array(bytearray(), None, int32, False)


def test_array_length_is_checked_before_allocation() -> None:
    claim = struct.pack(">i", 2**31 - 1) + b"\x00" * 64
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="exceeds"):
            p.read_array(memoryview(claim), 0, 1, False, p.read_string)
        with pytest.raises(DecodeError, match="exceeds"):
            p.read_fixed_array(memoryview(claim), 0, FIXED_ARRAY_TYPES["q"], False)
        with pytest.raises(DecodeError, match="exceeds"):
            p.read_compact_array(memoryview(b"\xff\xff\xff\xff\x07"), 0, 1, False, p.read_uuid)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    with pytest.raises(DecodeError, match="invalid array length"):
        p.read_array(memoryview(struct.pack(">i", -2)), 0, 1, True, p.read_string)


def test_reader_arrays() -> None:
    data = struct.pack(">i", 2) + b"\x00\x01a\x00\x01b" + b"\x03\x02c\x02d"
    reader = Reader(data)
    assert reader.array(Reader.string, 2) == ["a", "b"]
    assert reader.compact_array(Reader.compact_string) == ["c", "d"]
    assert reader.at_end()
    assert reader.remaining == 0


def test_reader_raw_and_skip() -> None:
    reader = Reader(bytearray(b"abcdef"))
    reader.skip(1)
    assert reader.raw(2) == b"bc"
    with pytest.raises(DecodeError):
        reader.raw(10)
    with pytest.raises(DecodeError):
        reader.skip(-1)


def test_tagged_fields() -> None:
    out = bytearray()
    p.write_tagged_fields(out, [(0, b"\x01")], {5: b"xy", 0: b"dropped", 2: b""}, frozenset({0}))
    assert out == bytes.fromhex("03000101020005027879")
    fields, pos = p.read_unknown_tagged_fields(memoryview(out), 0)
    assert fields == {0: b"\x01", 2: b"", 5: b"xy"} and pos == len(out)
    assert p.read_unknown_tagged_fields(memoryview(b"\x00"), 0) == (None, 1)
    assert encoded(p.write_unknown_tagged_fields, None) == b"\x00"
    with pytest.raises(DecodeError):  # a field whose size runs past the end
        Reader(bytes.fromhex("010005ab")).tagged_fields()
    with pytest.raises(DecodeError):  # more fields claimed than bytes could hold
        Reader(bytes.fromhex("ffffffff0700")).tagged_fields()
