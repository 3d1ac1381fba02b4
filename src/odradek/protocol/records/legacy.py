"""Legacy message sets (magic v0 and v1): reading, up-conversion to v2, writing.

An entry is ``offset int64, messageSize int32`` followed by the message::

    crc uint32 (CRC32 of everything after it), magic int8, attributes int8,
    [timestamp int64: v1 only], key bytes (int32 length, -1: null), value bytes

Attributes: bits 0-2 compression (gzip, snappy, lz4; zstd never existed for v0/v1), bit 3 the
timestamp type (v1). A compressed message is a wrapper whose value is a compressed message set.
In v1 wrappers inner offsets are relative: the wrapper carries the absolute offset of the last
inner message. v0 wrappers carry absolute inner offsets.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from odradek.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from odradek.protocol.records.batch import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    Buffer,
    Compression,
    TimestampType,
    iter_batches,
)
from odradek.protocol.records.builder import RecordBatchBuilder
from odradek.protocol.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    compress,
    compress_lz4,
    decompress,
)
from odradek.protocol.records.record import iter_records

_ENTRY = struct.Struct(">qi")
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

# crc + magic + attributes + key length + value length (+ timestamp for v1)
MESSAGE_OVERHEAD_V0 = 14
MESSAGE_OVERHEAD_V1 = 22


class LegacyMessage:
    """One v0/v1 message. `timestamp` is NO_TIMESTAMP (-1) for v0."""

    __slots__ = ("attributes", "crc", "key", "magic", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        magic: int,
        attributes: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        crc: int = 0,
    ) -> None:
        self.offset = offset
        self.magic = magic
        self.attributes = attributes
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.crc = crc

    @property
    def compression(self) -> Compression:
        codec = self.attributes & COMPRESSION_CODEC_MASK
        if codec > Compression.LZ4:
            raise CorruptRecordError(
                f"invalid compression codec {codec} in a v{self.magic} message"
            )
        return Compression(codec)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LegacyMessage):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"LegacyMessage(offset={self.offset}, magic={self.magic}, "
            f"attributes={self.attributes}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r})"
        )


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise CorruptRecordError("legacy message is truncated")
    length = _INT32.unpack_from(view, pos)[0]
    pos += 4
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"invalid length {length} in a legacy message")
        return None, pos
    if length > end - pos:
        raise CorruptRecordError(f"length {length} runs past the legacy message")
    return bytes(view[pos : pos + length]), pos + length


def _decode_message(
    view: memoryview, pos: int, size: int, offset: int, check_crc: bool
) -> LegacyMessage:
    """The message of `size` bytes at `pos` (just after the entry's offset and size)."""
    end = pos + size
    stored_crc = _CRC.unpack_from(view, pos)[0]
    magic = view[pos + 4]
    if magic > MAGIC_V1:
        raise CorruptRecordError(f"legacy message magic is {magic}")
    if size < (MESSAGE_OVERHEAD_V0 if magic == MAGIC_V0 else MESSAGE_OVERHEAD_V1):
        raise CorruptRecordError(f"legacy v{magic} message of {size} bytes is too small")
    if check_crc:
        actual = zlib.crc32(view[pos + 4 : end])
        if actual != stored_crc:
            raise CorruptRecordError(
                f"legacy message at offset {offset} is corrupt: stored crc {stored_crc:#010x}, "
                f"computed {actual:#010x}"
            )
    attributes = view[pos + 5]
    cursor = pos + 6
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        timestamp = _INT64.unpack_from(view, cursor)[0]
        cursor += 8
    key, cursor = _read_bytes(view, cursor, end)
    value, cursor = _read_bytes(view, cursor, end)
    if cursor != end:
        raise CorruptRecordError(
            f"legacy message at offset {offset} has {end - cursor} extra bytes"
        )
    return LegacyMessage(offset, magic, attributes, timestamp, key, value, stored_crc)


def iter_message_set(
    buf: Buffer,
    pos: int = 0,
    end: int | None = None,
    *,
    check_crc: bool = True,
    strict: bool = False,
) -> Iterator[LegacyMessage]:
    """Shallow iteration: each entry as stored (compressed wrappers are not opened).

    Stops silently at an incomplete trailing entry unless `strict` (then CorruptRecordError).
    """
    view = memoryview(buf)
    if end is None:
        end = len(view)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            if strict:
                raise CorruptRecordError("message set ends with a truncated entry")
            return
        offset, size = _ENTRY.unpack_from(view, pos)
        if size < MESSAGE_OVERHEAD_V0:
            raise CorruptRecordError(f"legacy message size {size} at position {pos} is impossible")
        if end - pos - LOG_OVERHEAD < size:
            if strict:
                raise CorruptRecordError("message set ends with a truncated message")
            return
        yield _decode_message(view, pos + LOG_OVERHEAD, size, offset, check_crc)
        pos += LOG_OVERHEAD + size


def iter_legacy_records(
    buf: Buffer,
    pos: int = 0,
    end: int | None = None,
    *,
    check_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[LegacyMessage]:
    """Deep iteration: wrappers are decompressed and their inner messages yielded with absolute
    offsets (and, for v1 LogAppendTime wrappers, the wrapper's timestamp)."""
    for message in iter_message_set(buf, pos, end, check_crc=check_crc):
        codec = message.compression
        if codec == Compression.NONE:
            yield message
            continue
        yield from _unwrap(message, codec, check_crc, max_decompressed_size)


def _unwrap(
    wrapper: LegacyMessage, codec: Compression, check_crc: bool, max_decompressed_size: int
) -> list[LegacyMessage]:
    if wrapper.value is None:
        raise CorruptRecordError(f"compressed wrapper at offset {wrapper.offset} has no value")
    inner_bytes = decompress(codec, wrapper.value, max_decompressed_size)
    inner = list(iter_message_set(inner_bytes, check_crc=check_crc, strict=True))
    if not inner:
        raise CorruptRecordError(f"compressed wrapper at offset {wrapper.offset} is empty")
    for message in inner:
        if message.compression != Compression.NONE:
            raise CorruptRecordError("a compressed message set holds a compressed message")
    if wrapper.magic == MAGIC_V0:
        return inner
    base = wrapper.offset - inner[-1].offset
    log_append = wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME
    for message in inner:
        message.offset += base
        if log_append and message.magic == MAGIC_V1:
            message.timestamp = wrapper.timestamp
            message.attributes |= TIMESTAMP_TYPE_MASK
    return inner


def legacy_to_v2(
    buf: Buffer,
    pos: int = 0,
    end: int | None = None,
    *,
    compression: Compression = Compression.NONE,
    compression_level: int | None = None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """One v2 batch holding every message of the v0/v1 message set (as the broker up-converts
    old produce requests). Offsets are kept; v0 messages get no timestamp (-1)."""
    messages = list(iter_legacy_records(buf, pos, end, max_decompressed_size=max_decompressed_size))
    if not messages:
        raise CorruptRecordError("legacy message set holds no complete message")
    timestamp_type = messages[0].timestamp_type
    builder = RecordBatchBuilder(
        base_offset=messages[0].offset,
        timestamp_type=(
            TimestampType.LOG_APPEND_TIME
            if timestamp_type == TimestampType.LOG_APPEND_TIME
            else TimestampType.CREATE_TIME
        ),
        compression=compression,
        compression_level=compression_level,
    )
    for message in messages:
        try:
            builder.append(message.timestamp, message.key, message.value, offset=message.offset)
        except ValueError:
            raise CorruptRecordError("legacy message offsets are not increasing") from None
    return builder.build()


class LegacyMessageSetBuilder:
    """Writes a v0/v1 message set; with compression, one wrapper holds all the messages."""

    def __init__(
        self,
        magic: int,
        compression: Compression = Compression.NONE,
        compression_level: int | None = None,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    ) -> None:
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise ValueError(f"legacy message sets have magic 0 or 1, not {magic}")
        compression = Compression(compression)
        if compression == Compression.ZSTD:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd cannot be used with magic 0 or 1"
            )
        self.magic = magic
        self.compression = compression
        self.compression_level = compression_level
        self.timestamp_type = timestamp_type
        self._messages: list[tuple[int, int, bytes | None, bytes | None]] = []

    def append(
        self, offset: int, timestamp: int | None, key: bytes | None, value: bytes | None
    ) -> None:
        if self._messages and offset <= self._messages[-1][0]:
            raise ValueError(f"offset {offset} is not after the previous message's offset")
        ts = NO_TIMESTAMP if timestamp is None else timestamp
        self._messages.append((offset, ts, key, value))

    def __len__(self) -> int:
        return len(self._messages)

    def _timestamp_bit(self) -> int:
        if self.magic == MAGIC_V1 and self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return TIMESTAMP_TYPE_MASK
        return 0

    def build(self) -> bytes:
        if not self._messages:
            return b""
        if self.compression == Compression.NONE:
            out = bytearray()
            for offset, timestamp, key, value in self._messages:
                encode_message(
                    out, offset, self.magic, self._timestamp_bit(), timestamp, key, value
                )
            return bytes(out)
        first_offset = self._messages[0][0]
        inner = bytearray()
        for offset, timestamp, key, value in self._messages:
            # v1 inner offsets are relative to the first message; v0 ones are absolute.
            inner_offset = offset - first_offset if self.magic == MAGIC_V1 else offset
            encode_message(inner, inner_offset, self.magic, 0, timestamp, key, value)
        if self.compression == Compression.LZ4:
            payload = compress_lz4(
                inner, self.compression_level, broken_header_checksum=self.magic == MAGIC_V0
            )
        else:
            payload = compress(self.compression, inner, self.compression_level)
        wrapper = bytearray()
        encode_message(
            wrapper,
            self._messages[-1][0],
            self.magic,
            int(self.compression) | self._timestamp_bit(),
            max(timestamp for _, timestamp, _, _ in self._messages),
            None,
            payload,
        )
        return bytes(wrapper)


def encode_message(
    out: bytearray,
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
) -> None:
    """Append one v0/v1 entry (offset, size, crc, message) to `out`."""
    body = bytearray((magic, attributes))
    if magic == MAGIC_V1:
        body += _INT64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _INT32.pack(len(field))
            body += field
    out += _ENTRY.pack(offset, len(body) + 4)
    out += _CRC.pack(zlib.crc32(body))
    out += body


def v2_to_legacy(
    buf: Buffer,
    magic: int,
    pos: int = 0,
    end: int | None = None,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """Down-convert v2 batches to a v0/v1 message set (for old fetch versions).

    Control batches are dropped and headers lost, as in Kafka; each batch keeps its codec, and a
    zstd batch raises KafkaError(UNSUPPORTED_COMPRESSION_TYPE). An incomplete trailing batch is
    ignored.
    """
    out = bytearray()
    for batch_pos, header in iter_batches(buf, pos, end):
        if header.is_control:
            continue
        builder = LegacyMessageSetBuilder(
            magic, header.compression, timestamp_type=header.timestamp_type
        )
        for record in iter_records(
            buf, batch_pos, header, max_decompressed_size=max_decompressed_size
        ):
            builder.append(record.offset, record.timestamp, record.key, record.value)
        out += builder.build()
    return bytes(out)
