"""Records inside a v2 batch: decoding.

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

from collections.abc import Callable, Iterator, Sequence
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

# primitives' readers index any byte sequence; records are decoded from `bytes` for fast slicing.
_VarintReader = Callable[[bytes, int], tuple[int, int]]
read_varint: _VarintReader = primitives.read_varint  # type: ignore[assignment]
read_varlong: _VarintReader = primitives.read_varlong  # type: ignore[assignment]

# Zig-zag decodings of the raw values of one- and two-byte varints (7 and 14 bits).
_UNZIGZAG = tuple((raw >> 1) ^ -(raw & 1) for raw in range(1 << 14))
#: ... of a two-byte varint by ``first | second << 8`` (first >= 0x80, second < 0x80)
_UNZIGZAG_2 = tuple(_UNZIGZAG[(index & 0x7F) | (index >> 8) << 7] for index in range(1 << 15))

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
) -> Iterator[Record]:
    """The records of the v2 batch at `pos` as `Record`s (decompressing first if needed).

    Raises CorruptRecordError on any inconsistency (a record running past its declared length,
    fewer or more records than recordsCount, bad lengths or varints), after yielding the
    records before the damage.
    """
    try:
        fields = decode_records(buf, pos, header, max_decompressed_size=max_decompressed_size)
    except CorruptRecordError as error:
        for offset, timestamp, key, value, headers, _, _ in error.records_before:
            yield Record(offset, timestamp, key, value, list(headers))
        raise
    for offset, timestamp, key, value, headers, _, _ in fields:
        yield Record(offset, timestamp, key, value, list(headers))


def decode_records(
    buf: Buffer,
    pos: int = 0,
    header: BatchHeader | None = None,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    record_type: type[T] = tuple,  # type: ignore[assignment]
    extra: tuple[Any, ...] = (),
) -> list[T]:
    """All records of the v2 batch at `pos` at once (decompressing first if needed), each as
    ``record_type((offset, timestamp, key, value, headers, key size, value size) + extra)``:
    a tuple subclass whose first fields are those (sizes are -1 for null) and the rest
    `extra`. A consumer gets its own record type with no object in between.

    Raises CorruptRecordError (with the records decoded before the damage as
    ``records_before``, as plain tuples) like `iter_records`.
    """
    if header is None:
        header = BatchHeader.parse(buf, pos)
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}")
    data = records_section(buf, pos, header, max_decompressed_size)
    log_append_time = (
        header.max_timestamp if header.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    )
    return _decode_records(data, header.records_count, header.base_offset,
                           header.base_timestamp, log_append_time, record_type, extra)


def _decode_records(  # one loop with no calls per record: each call costs
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    record_type: type[T],
    extra: tuple[Any, ...],
) -> list[T]:
    records: list[Any] = []
    append = records.append
    unzigzag = _UNZIGZAG
    unzigzag2 = _UNZIGZAG_2
    new = tuple.__new__
    size = len(data)
    pos = 0
    try:
        for _ in range(count):
            # One- and two-byte varints are the common case for lengths and deltas: they are
            # decoded inline. Overruns need no check per field: a record whose fields do not
            # end exactly at its declared length is rejected at its end.
            byte = data[pos]
            if byte < 0x80:
                length = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                length = unzigzag2[byte | second << 8]
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            end = pos + length
            if length < 0 or end > size:
                raise CorruptRecordError(f"record length {length} is out of range")
            byte = data[pos + 1]  # after the attributes (unused)
            if byte < 0x80:
                timestamp_delta = unzigzag[byte]
                pos += 2
            else:
                timestamp_delta, pos = read_varlong(data, pos + 1)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                offset_delta = unzigzag2[byte | second << 8]
                pos += 2
            else:
                offset_delta, pos = read_varint(data, pos)

            byte = data[pos]
            if byte < 0x80:
                key_length = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                key_length = unzigzag2[byte | second << 8]
                pos += 2
            else:
                key_length, pos = read_varint(data, pos)
            if key_length < 0:
                if key_length != -1:
                    raise CorruptRecordError(f"invalid key length {key_length}")
                key = None
            else:
                key = data[pos : pos + key_length]
                pos += key_length

            byte = data[pos]
            if byte < 0x80:
                value_length = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                value_length = unzigzag2[byte | second << 8]
                pos += 2
            else:
                value_length, pos = read_varint(data, pos)
            if value_length < 0:
                if value_length != -1:
                    raise CorruptRecordError(f"invalid value length {value_length}")
                value = None
            else:
                value = data[pos : pos + value_length]
                pos += value_length

            if data[pos] == 0:  # no headers: the shared empty tuple (no allocation)
                pos += 1
                headers: Sequence[Header] = ()
            else:
                headers, pos = _decode_headers(data, pos, end)
            if pos != end:
                raise CorruptRecordError(
                    f"record declared {length} bytes but its fields use {length + pos - end}"
                )
            append(new(record_type, (
                base_offset + offset_delta,
                base_timestamp + timestamp_delta if log_append_time is None
                else log_append_time,
                key, value, headers, key_length, value_length) + extra))
    except (IndexError, DecodeError) as exc:
        error = exc if isinstance(exc, CorruptRecordError) else CorruptRecordError(
            f"truncated or invalid record: {exc}")
        error.records_before = records
        raise error from None
    if pos != size:
        error = CorruptRecordError(
            f"{size - pos} bytes left after the batch's {count} declared records")
        error.records_before = records
        raise error
    return records


class RecordKeys:
    """The keys of a batch's records, for the log cleaner (`decode_keys`)."""

    __slots__ = ("key_bytes", "keys", "null_keys", "null_values", "offsets")

    def __init__(self, offsets: list[int], keys: list[bytes | None], key_bytes: int,
                 null_keys: bool, null_values: bool) -> None:
        self.offsets = offsets
        self.keys = keys
        self.key_bytes = key_bytes  # the keys' total size
        self.null_keys = null_keys
        self.null_values = null_values  # a tombstone among the records


def decode_keys(buf: Buffer, pos: int = 0, header: BatchHeader | None = None) -> RecordKeys:
    """Each record's offset and key, and whether any value is null, checking the records as
    `decode_records` does (CorruptRecordError) but making no objects for timestamps, values
    and headers: about half its cost. For the per-record readers that need only keys: a
    compacted topic's produce validation, the log cleaner's offset map and clean section."""
    if header is None:
        header = BatchHeader.parse(buf, pos)
    data = records_section(buf, pos, header)
    base_offset = header.base_offset
    unzigzag = _UNZIGZAG
    unzigzag2 = _UNZIGZAG_2
    offsets: list[int] = []
    keys: list[bytes | None] = []
    add_offset, add_key = offsets.append, keys.append
    key_bytes = 0
    null_keys = null_values = False
    size = len(data)
    pos = 0
    try:
        for _ in range(header.records_count):
            byte = data[pos]
            if byte < 0x80:
                length = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                length = unzigzag2[byte | second << 8]
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            end = pos + length
            if length < 0 or end > size:
                raise CorruptRecordError(f"record length {length} is out of range")
            pos += 1  # attributes
            while data[pos] >= 0x80:  # the timestamp delta, skipped
                pos += 1
            pos += 1
            byte = data[pos]
            if byte < 0x80:
                offset_delta = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                offset_delta = unzigzag2[byte | second << 8]
                pos += 2
            else:
                offset_delta, pos = read_varint(data, pos)
            byte = data[pos]
            if byte < 0x80:
                key_length = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                key_length = unzigzag2[byte | second << 8]
                pos += 2
            else:
                key_length, pos = read_varint(data, pos)
            if key_length >= 0:
                pos += key_length
                add_key(data[pos - key_length : pos])
                key_bytes += key_length
            elif key_length == -1:
                add_key(None)
                null_keys = True
            else:
                raise CorruptRecordError(f"invalid key length {key_length}")
            byte = data[pos]
            if byte < 0x80:
                value_length = unzigzag[byte]
                pos += 1
            elif (second := data[pos + 1]) < 0x80:
                value_length = unzigzag2[byte | second << 8]
                pos += 2
            else:
                value_length, pos = read_varint(data, pos)
            if value_length >= 0:
                pos += value_length  # skipped
            elif value_length == -1:
                null_values = True
            else:
                raise CorruptRecordError(f"invalid value length {value_length}")
            if data[pos] == 0:
                pos += 1
            else:  # checked, not kept
                _headers, pos = _decode_headers(data, pos, end)
            if pos != end:
                raise CorruptRecordError(
                    f"record declared {length} bytes but its fields use {length + pos - end}")
            add_offset(base_offset + offset_delta)
    except (IndexError, DecodeError) as exc:
        raise CorruptRecordError(f"truncated or invalid record: {exc}") from None
    if pos != size:
        raise CorruptRecordError(
            f"{size - pos} bytes left after the batch's {header.records_count} records")
    return RecordKeys(offsets, keys, key_bytes, null_keys, null_values)


def _decode_headers(data: bytes, pos: int, end: int) -> tuple[list[Header], int]:
    """A record's headers (from its header count at `pos`) and the position after them."""
    header_count, pos = read_varint(data, pos)
    # Each header needs at least two bytes: reject absurd counts up front.
    if header_count < 0 or header_count > (end - pos) // 2:
        raise CorruptRecordError(f"invalid header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        name_length, pos = read_varint(data, pos)
        if name_length < 0 or name_length > end - pos:
            raise CorruptRecordError(f"invalid header key length {name_length}")
        name = data[pos : pos + name_length].decode("utf-8", HEADER_KEY_ERRORS)
        pos += name_length
        header_value_length, pos = read_varint(data, pos)
        if header_value_length < 0:
            if header_value_length != -1:
                raise CorruptRecordError(f"invalid header value length {header_value_length}")
            headers.append((name, None))
        else:
            if header_value_length > end - pos:
                raise CorruptRecordError("header value exceeds the record")
            headers.append((name, data[pos : pos + header_value_length]))
            pos += header_value_length
    return headers, pos
