"""Building v2 record batches."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from odradek.protocol.primitives import _SMALL_UVARINTS, write_uvarint, write_varlong
from odradek.protocol.records.batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Buffer,
    Compression,
    TimestampType,
    write_crc,
)
from odradek.protocol.records.compression import compress
from odradek.protocol.records.record import HEADER_KEY_ERRORS, records_section

_INT32_MIN = -0x80000000
_INT32_MAX = 0x7FFFFFFF

# Zig-zag varint encodings of 0..8191 (at most two bytes), for the fast append path.
_SMALL_ZIGZAG = _SMALL_UVARINTS[0:16384:2]
_SMALL_LIMIT = len(_SMALL_ZIGZAG)
_NULL_LENGTH = b"\x01"  # zig-zag -1


def _write_varint(out: bytearray, value: int) -> None:
    """Zig-zag int32 varint (write_uvarint caches the encodings of small values)."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of range: {value}")
    write_uvarint(out, (value << 1) ^ (value >> 31))


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    _write_varint(out, value)
    return bytes(out)


def _write_length_prefixed(out: bytearray, data: bytes | bytearray | memoryview | None) -> None:
    if data is None:
        out.append(1)  # zig-zag -1
    else:
        _write_varint(out, len(data))
        out += data


class RecordBatchBuilder:
    """Accumulates records and builds one v2 batch (lengths, max timestamp, CRC, compression)."""

    def __init__(
        self,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        compression: Compression = Compression.NONE,
        compression_level: int | None = None,
        delete_horizon_ms: int | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.timestamp_type = TimestampType(timestamp_type)
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self._records = bytearray()
        #: size of the batch if built now without compression (an upper bound in practice);
        #: kept up to date by `append` (the producer reads it after every record)
        self.size_estimate = BATCH_HEADER_SIZE
        self._count = 0
        self._last_offset_delta = -1
        # KIP-534: the log cleaner's delete horizon is carried in baseTimestamp (flagged in the
        # attributes); record timestamps are then deltas from it.
        self.delete_horizon_ms = delete_horizon_ms
        self._base_timestamp: int | None = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP
        #: a rewrite (the log cleaner) keeps the original batch's last offset even when its last
        #: records are gone, so the producer's last sequence stays derivable from the header
        self.last_offset_override: int | None = None

    @property
    def records_count(self) -> int:
        return self._count

    def append(
        self,
        timestamp: int | None,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        offset: int | None = None,
    ) -> int:
        """Add a record; return its offset delta.

        `offset` (absolute) lets a rewrite keep gaps, as the log cleaner does; by default the
        record takes the next offset.
        """
        if offset is None and not headers and timestamp is not None:
            return self.append_next(timestamp, key, value)
        return self._append_any(timestamp, key, value, headers, offset)

    def append_next(self, timestamp: int, key: bytes | bytearray | memoryview | None,
                    value: bytes | bytearray | memoryview | None) -> int:
        """`append` of the producer's common case: the next offset, a timestamp, no headers.

        The same bytes in one pass: encodings of small numbers come from a table, and the
        parts are joined once.
        """
        base_timestamp = self._base_timestamp
        if base_timestamp is None or not 0 <= timestamp - base_timestamp <= _INT32_MAX:
            return self._append_any(timestamp, key, value, (), None)  # first, or out of order
        small = _SMALL_ZIGZAG
        offset_delta = self._last_offset_delta + 1
        timestamp_delta = timestamp - base_timestamp
        timestamp_part = small[timestamp_delta] if timestamp_delta < _SMALL_LIMIT \
            else _varint_bytes(timestamp_delta)
        offset_part = small[offset_delta] if offset_delta < _SMALL_LIMIT \
            else _varint_bytes(offset_delta)
        if key is None:
            key, key_length = b"", _NULL_LENGTH
        else:
            size = len(key)
            key_length = small[size] if size < _SMALL_LIMIT else _varint_bytes(size)
        if value is None:
            value, value_length = b"", _NULL_LENGTH
        else:
            size = len(value)
            value_length = small[size] if size < _SMALL_LIMIT else _varint_bytes(size)
        body = b"".join((b"\x00", timestamp_part, offset_part, key_length, key, value_length,
                         value, b"\x00"))
        length = len(body)
        length_part = small[length] if length < _SMALL_LIMIT else _varint_bytes(length)
        records = self._records
        records += length_part
        records += body
        self.size_estimate += len(length_part) + length
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        self._count += 1
        self._last_offset_delta = offset_delta
        return offset_delta

    def _append_any(self, timestamp: int | None, key: bytes | bytearray | memoryview | None,
                    value: bytes | bytearray | memoryview | None,
                    headers: Iterable[tuple[str, bytes | None]], offset: int | None) -> int:
        if offset is None:
            offset_delta = self._last_offset_delta + 1
        else:
            offset_delta = offset - self.base_offset
            if offset_delta <= self._last_offset_delta:
                raise ValueError(f"offset {offset} is not after the previous record's offset")
        if timestamp is None:
            timestamp = NO_TIMESTAMP
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        self._max_timestamp = max(self._max_timestamp, timestamp)

        body = bytearray(b"\x00")  # attributes
        timestamp_delta = timestamp - self._base_timestamp
        if _INT32_MIN <= timestamp_delta <= _INT32_MAX:
            _write_varint(body, timestamp_delta)  # same bytes, cached for small deltas
        else:
            write_varlong(body, timestamp_delta)
        _write_varint(body, offset_delta)
        _write_length_prefixed(body, key)
        _write_length_prefixed(body, value)
        if headers:
            header_list = list(headers)
            _write_varint(body, len(header_list))
            for name, header_value in header_list:
                _write_length_prefixed(body, name.encode("utf-8", HEADER_KEY_ERRORS))
                _write_length_prefixed(body, header_value)
        else:
            body.append(0)
        records = self._records
        size_before = len(records)
        _write_varint(records, len(body))
        records += body
        self.size_estimate += len(records) - size_before
        self._count += 1
        self._last_offset_delta = offset_delta
        return offset_delta

    def build(self) -> bytes:
        """The complete batch: header, (compressed) records, CRC."""
        records: bytes | bytearray = self._records
        if self.compression != Compression.NONE:
            records = compress(self.compression, records, self.compression_level)
        attributes = int(self.compression)
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_FLAG_MASK
        if self.is_control:
            attributes |= CONTROL_FLAG_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_FLAG_MASK
        last_offset_delta = max(self._last_offset_delta, 0)
        if self.last_offset_override is not None:
            last_offset_delta = max(last_offset_delta, self.last_offset_override - self.base_offset)
        size = BATCH_HEADER_SIZE + len(records)
        out = bytearray(size)
        HEADER_STRUCT.pack_into(
            out,
            0,
            self.base_offset,
            size - LOG_OVERHEAD,
            self.partition_leader_epoch,
            MAGIC_V2,
            0,  # crc, computed below
            attributes,
            last_offset_delta,
            NO_TIMESTAMP if self._base_timestamp is None else self._base_timestamp,
            self._max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
        )
        out[BATCH_HEADER_SIZE:] = records
        write_crc(out, 0, size)
        return bytes(out)


def build_batch(records: Iterable[Sequence[Any]], **builder_options: Any) -> bytes:
    """Build one batch from (timestamp, key, value[, headers]) tuples.

    `builder_options` are RecordBatchBuilder's keyword arguments.
    """
    builder = RecordBatchBuilder(**builder_options)
    for record in records:
        builder.append(*record)
    return builder.build()


def recompressed_batch(buf: Buffer, pos: int, header: BatchHeader, codec: Compression,
                       level: int | None = None) -> bytearray:
    """The v2 batch at `pos` with its records compressed with `codec` (at `level`) instead of
    its own codec: every header field kept but the codec bits, the length and the CRC. The
    records are not decoded: their bytes are the same whatever the codec (what a broker
    writes when a topic's compression.type is not the producer's).

    CorruptRecordError if the batch's records do not decompress."""
    records = records_section(buf, pos, header)
    if codec != Compression.NONE:
        records = compress(codec, records, level)
    out = bytearray(BATCH_HEADER_SIZE + len(records))
    rebuilt = BatchHeader(*(getattr(header, name) for name in BatchHeader.FIELDS))
    rebuilt.attributes = (header.attributes & ~COMPRESSION_CODEC_MASK) | int(codec)
    rebuilt.batch_length = len(out) - LOG_OVERHEAD
    rebuilt.pack_into(out)
    out[BATCH_HEADER_SIZE:] = records
    write_crc(out, 0, len(out))
    return out
