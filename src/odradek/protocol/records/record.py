"""Records inside a v2 batch: lazy decoding.

Record layout (varints are zig-zag)::

    length varint            (bytes after this field)
    attributes int8          (unused)
    timestampDelta varlong   (from the batch's baseTimestamp)
    offsetDelta varint       (from the batch's baseOffset)
    keyLength varint, key    (-1: null)
    valueLength varint, value
    headerCount varint, then per header: keyLength varint, key (UTF-8, never null),
                                         valueLength varint, value (-1: null)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from odradek.protocol import primitives
from odradek.protocol.errors import CorruptRecordError, DecodeError
from odradek.protocol.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Buffer,
    Compression,
    TimestampType,
)
from odradek.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, decompress

Header = tuple[str, bytes | None]
T = TypeVar("T")
#: builds one decoded record from (offset, timestamp, key, value, headers)
RecordFactory = Callable[[int, int, "bytes | None", "bytes | None", "list[Header]"], Any]

# primitives' readers index any byte sequence; records are decoded from `bytes` for fast slicing.
_VarintReader = Callable[[bytes, int], tuple[int, int]]
read_varint: _VarintReader = primitives.read_varint  # type: ignore[assignment]
read_varlong: _VarintReader = primitives.read_varlong  # type: ignore[assignment]

# Header keys are UTF-8 on the wire; surrogateescape keeps arbitrary bytes round-tripping.
HEADER_KEY_ERRORS = "surrogateescape"


class Record:
    """One decoded record, with absolute offset and timestamp."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[Header] | None = None,
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers: list[Header] = headers if headers is not None else []

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.offset == other.offset
            and self.timestamp == other.timestamp
            and self.key == other.key
            and self.value == other.value
            and self.headers == other.headers
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )


def records_section(
    buf: Buffer,
    pos: int,
    header: BatchHeader,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """The batch's records bytes, decompressed if the batch is compressed."""
    end = pos + header.size
    if pos < 0 or end > len(buf):
        raise CorruptRecordError(
            f"record batch at position {pos} needs {header.size} bytes, "
            f"{max(0, len(buf) - pos)} available"
        )
    raw = memoryview(buf)[pos + BATCH_HEADER_SIZE : end]
    codec = header.compression
    if codec == Compression.NONE:
        return bytes(raw)
    return decompress(codec, raw, max_decompressed_size)


def iter_records(
    buf: Buffer,
    pos: int = 0,
    header: BatchHeader | None = None,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    factory: RecordFactory = Record,
) -> Iterator[Any]:
    """Lazily decode the records of the v2 batch at `pos` (decompressing first if needed).

    Each record comes out as ``factory(offset, timestamp, key, value, headers)`` (a `Record`
    by default; a consumer builds its own record type directly, with no object in between).
    Raises CorruptRecordError on any inconsistency: a record running past its declared
    length, fewer or more records than recordsCount, bad lengths or varints.
    """
    if header is None:
        header = BatchHeader.parse(buf, pos)
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}")
    data = records_section(buf, pos, header, max_decompressed_size)
    log_append_time = (
        header.max_timestamp if header.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    )
    return _decode_records(
        data, header.records_count, header.base_offset, header.base_timestamp, log_append_time,
        factory,
    )


def _decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    factory: RecordFactory,
) -> Iterator[Any]:
    size = len(data)
    pos = 0
    try:
        for _ in range(count):
            # One- and two-byte varints are the common case for lengths and deltas: decode
            # them inline.
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            end = pos + length
            if length < 0 or end > size:
                raise CorruptRecordError(f"record length {length} is out of range")
            pos += 1  # attributes: unused
            byte = data[pos]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                timestamp_delta, pos = read_varlong(data, pos)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = read_varint(data, pos)

            byte = data[pos]
            if byte < 0x80:
                key_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                key_length, pos = read_varint(data, pos)
            if key_length < 0:
                if key_length != -1:
                    raise CorruptRecordError(f"invalid key length {key_length}")
                key = None
            else:
                if key_length > end - pos:
                    raise CorruptRecordError(f"key length {key_length} exceeds the record")
                key = data[pos : pos + key_length]
                pos += key_length

            byte = data[pos]
            if byte < 0x80:
                value_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                value_length, pos = read_varint(data, pos)
            if value_length < 0:
                if value_length != -1:
                    raise CorruptRecordError(f"invalid value length {value_length}")
                value = None
            else:
                if value_length > end - pos:
                    raise CorruptRecordError(f"value length {value_length} exceeds the record")
                value = data[pos : pos + value_length]
                pos += value_length

            byte = data[pos]
            if byte < 0x80:
                header_count = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                header_count, pos = read_varint(data, pos)
            headers: list[Header] = []
            if header_count:
                # Each header needs at least two bytes: reject absurd counts up front.
                if header_count < 0 or header_count > (end - pos) // 2:
                    raise CorruptRecordError(f"invalid header count {header_count}")
                for _ in range(header_count):
                    name_length, pos = read_varint(data, pos)
                    if name_length < 0 or name_length > end - pos:
                        raise CorruptRecordError(f"invalid header key length {name_length}")
                    name = data[pos : pos + name_length].decode("utf-8", HEADER_KEY_ERRORS)
                    pos += name_length
                    header_value_length, pos = read_varint(data, pos)
                    if header_value_length < 0:
                        if header_value_length != -1:
                            raise CorruptRecordError(
                                f"invalid header value length {header_value_length}"
                            )
                        headers.append((name, None))
                    else:
                        if header_value_length > end - pos:
                            raise CorruptRecordError("header value exceeds the record")
                        headers.append((name, data[pos : pos + header_value_length]))
                        pos += header_value_length
            if pos != end:
                raise CorruptRecordError(
                    f"record declared {length} bytes but its fields use {length + pos - end}"
                )
            timestamp = (
                base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            )
            yield factory(base_offset + offset_delta, timestamp, key, value, headers)
    except (IndexError, DecodeError) as exc:
        if isinstance(exc, CorruptRecordError):
            raise
        raise CorruptRecordError(f"truncated or invalid record: {exc}") from None
    if pos != size:
        raise CorruptRecordError(
            f"{size - pos} bytes left after the batch's {count} declared records"
        )
