"""v2 record batches to and from Arrow columns, without a Python object per record.

Decoding (`ColumnarDecoder`): each added batch is decompressed and its records' start positions
are found by one lean loop over the record length varints (the only per-record Python work);
everything else is done once per group of batches with Arrow compute functions over the
concatenated record bytes: the varint fields are read by position (`take`), the keys, values
and header strings are gathered into Arrow binary columns through a list view over the bytes
(`flatten`), offsets and timestamps are added to each batch's base. The result is the same as
`iter_records` (``tests/spark/test_columnar.py``); on anything invalid the batches are
decoded again with `iter_records`, which raises the precise CorruptRecordError.

Encoding (`encode_record_batches`): the records of a column group are built with Arrow string
functions (lengths through a table of varint encodings, `binary_join_element_wise` for the
fields), cut into batches of at most ``max_batch_bytes`` (an upper bound of each record's size,
as Kafka's producer estimates) and each batch gets its header and CRC; the records' bytes are
copied once into the batch.

Needs pyarrow (the ``spark`` extra), which is why it lives here and not in `odradek.protocol`
(the bottom layer imports nothing beyond the compression codecs). Sans-I/O: bytes in, columns out.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from odradek.protocol.errors import CorruptRecordError, DecodeError
from odradek.protocol.primitives import read_uvarint, write_varlong
from odradek.protocol.records.batch import (
    BATCH_HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    Buffer,
    Compression,
    TimestampType,
    write_crc,
)
from odradek.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, compress
from odradek.protocol.records.record import HEADER_KEY_ERRORS, iter_records, records_section

__all__ = [
    "DECODED_SCHEMA",
    "HEADERS_TYPE",
    "ColumnarDecoder",
    "EncodedBatch",
    "encode_headers",
    "encode_record_batches",
]

#: headers as Arrow values: a list of (key, value) structs, null for a record with none
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

#: the columns `ColumnarDecoder.finish` returns (plus ``headers`` when asked for)
DECODED_SCHEMA = pa.schema([
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),  # milliseconds
    ("timestampType", pa.int32()),
    ("key", pa.binary()),
    ("value", pa.binary()),
])

_I64 = pa.int64()
_I32 = pa.int32()
# Python ints passed to compute functions are converted on every call: keep scalars ready.
_ZERO = pa.scalar(0, _I64)
_ONE = pa.scalar(1, _I64)
_MINUS_ONE = pa.scalar(-1, _I64)
_SEVEN_BITS = pa.scalar(0x7F, _I64)
_HIGH_BIT = pa.scalar(0x80, pa.uint8())
_NO_SIGN = pa.scalar(0x7FFFFFFFFFFFFFFF, _I64)
_SHIFTS = [pa.scalar(7 * k, _I64) for k in range(10)]
_OFFSETS = [pa.scalar(k, _I64) for k in range(10)]
#: one-byte varints (the common case) decoded by table lookup: zig-zag of 0..127
_ONE_BYTE_ZIGZAG = pa.array([(b >> 1) ^ -(b & 1) for b in range(128)], _I64)
_EIGHT = pa.scalar(8, _I32)


def _two_byte_varints() -> tuple[pa.Array, pa.Array]:
    """By first | second << 8 of a varint's bytes: its zig-zag value and size when it has
    one or two bytes (size 0 when longer)."""
    values, sizes = [0] * 65536, [0] * 65536
    for both in range(65536):
        first, second = both & 0xFF, both >> 8
        if first < 0x80:
            raw, sizes[both] = first, 1
        elif second < 0x80:
            raw, sizes[both] = (first & 0x7F) | (second << 7), 2
        else:
            continue
        values[both] = (raw >> 1) ^ -(raw & 1)
    return pa.array(values, _I64), pa.array(sizes, _I64)


_TWO_BYTE_ZIGZAG, _TWO_BYTE_SIZES = _two_byte_varints()
#: zero bytes after the records, so that reading a varint's next bytes never leaves the buffer
_PADDING = bytes(10)
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


class _Invalid(Exception):
    """The vectorized checks found something wrong: decode again the slow way for the error."""


# ------------------------------------------------------------------------------ decoding

def _record_advances() -> list[int]:
    """For the two bytes at a record's start (first | second << 8), how far the record
    reaches: its length varint's size plus the length, when the varint has one or two bytes;
    0 for a longer varint. (A negative length gives a wrong advance; it is caught later,
    as its record's fields do not end where the length says.)"""
    advances = [0] * 65536
    for both in range(65536):
        first, second = both & 0xFF, both >> 8
        if first < 0x80:
            advances[both] = 1 + (first >> 1)
        elif second < 0x80:
            advances[both] = 2 + (((first & 0x7F) | (second << 7)) >> 1)
    return advances


_ADVANCES = _record_advances()


def _record_starts(data: bytearray, start: int, count: int) -> list[int]:
    """The positions of the `count` records that must fill ``data[start:]`` exactly: the one
    per-record loop of the decoder, which only follows the record lengths."""
    starts = [0] * count
    advances = _ADVANCES
    pos = start
    try:
        for index in range(count):
            starts[index] = pos
            advance = advances[data[pos] | (data[pos + 1] << 8)]
            if advance:
                pos += advance
            else:
                raw, pos = read_uvarint(data, pos)  # type: ignore[arg-type]
                pos += raw >> 1
    except (IndexError, DecodeError):
        raise CorruptRecordError("truncated or invalid record") from None
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes left after the batch's {count} "
                                 "declared records")
    return starts


def _varints(data: pa.Array, positions: pa.Array, max_bytes: int,
             zigzag: bool = True) -> tuple[pa.Array, Any]:
    """The varints at `positions` of the byte array `data`: (values as int64, sizes as an
    int64 array or scalar). Zig-zag decoded unless `zigzag` is false."""
    first = pc.take(data, positions)
    if pc.max(first).as_py() < 0x80:
        if zigzag:
            return pc.take(_ONE_BYTE_ZIGZAG, first), _ONE
        return first.cast(_I64), _ONE
    if zigzag:  # one or two bytes (almost always): by table, indexed by first | second << 8
        second = pc.take(data, pc.add(positions, _ONE))
        both = pc.bit_wise_or(first.cast(_I32), pc.shift_left(second.cast(_I32), _EIGHT))
        sizes = pc.take(_TWO_BYTE_SIZES, both)
        if pc.min(sizes).as_py():
            return pc.take(_TWO_BYTE_ZIGZAG, both), sizes
    raw = first.cast(_I64)
    active = pc.greater_equal(first, _HIGH_BIT)
    raw = pc.bit_wise_and(raw, _SEVEN_BITS)
    sizes: Any = _ONE
    for k in range(1, max_bytes + 1):
        if not pc.any(active).as_py():
            break
        if k == max_bytes:
            raise _Invalid(f"varint longer than {max_bytes} bytes")
        sizes = pc.add(sizes, active.cast(_I64))
        byte = pc.take(data, pc.add(positions, _OFFSETS[k]))
        bits = pc.shift_left(pc.bit_wise_and(byte.cast(_I64), _SEVEN_BITS), _SHIFTS[k])
        raw = pc.bit_wise_or(raw, pc.if_else(active, bits, _ZERO))
        active = pc.and_(active, pc.greater_equal(byte, _HIGH_BIT))
    if not zigzag:
        return raw, sizes
    magnitude = pc.bit_wise_and(pc.shift_right(raw, _ONE), _NO_SIGN)  # a logical shift
    return pc.bit_wise_xor(magnitude, pc.negate(pc.bit_wise_and(raw, _ONE))), sizes


_INDEX_TABLE_SIZE = 1 << 16
_indices = pa.array(range(_INDEX_TABLE_SIZE), _I64)


def _index_range(count: int) -> pa.Array:
    """0..count-1 (a slice of a cached array, grown as needed)."""
    global _indices
    if count > len(_indices):
        _indices = pa.array(range(max(count, 2 * len(_indices))), _I64)
    return _indices.slice(0, count)


def _gather(data: pa.Buffer, starts: pa.Array, sizes: pa.Array, nulls: pa.Array | None,
            type_: pa.DataType = pa.binary()) -> pa.Array:
    """A binary (or string) array of the `sizes` bytes at `starts` of `data` (in order and
    not overlapping), copied once.

    The pieces and the gaps between them make one binary array over `data` without a copy
    (offsets start0, end0, start1, end1, ...); `take` of its even elements copies the pieces.
    """
    count = len(starts)
    if not count:
        return pa.array([], type_)
    bounds = pa.concat_arrays([starts, pc.add(starts, sizes)]).cast(_I32)
    index = _index_range(2 * count)
    interleave = pc.add(pc.shift_right(index, _ONE),
                        pc.multiply(pc.bit_wise_and(index, _ONE), pa.scalar(count, _I64)))
    spans = pa.Array.from_buffers(pa.binary(), 2 * count - 1,
                                  [None, pc.take(bounds, interleave).buffers()[1], data])
    pieces = pc.take(spans, pc.multiply(_index_range(count), pa.scalar(2, _I64)))
    if nulls is None and type_ == pa.binary():
        return pieces
    validity = None if nulls is None else pc.invert(nulls).buffers()[1]
    return pa.Array.from_buffers(type_, count, [validity, *pieces.buffers()[1:]])


def _bytes_column(data: pa.Buffer, starts: pa.Array, sizes: pa.Array,
                  lengths: pa.Array) -> pa.Array:
    """Keys or values: `lengths` is -1 for null."""
    shortest, longest = pc.min_max(lengths).values()
    if longest.as_py() == -1:
        return pa.nulls(len(lengths), pa.binary())  # e.g. records without keys
    nulls = pc.equal(lengths, _MINUS_ONE) if shortest.as_py() < 0 else None
    return _gather(data, starts, sizes, nulls)


def _raise_precise_error(buf: Buffer, pos: int, header: BatchHeader,
                         max_decompressed_size: int) -> None:
    """Decode the batch with `iter_records`, which raises CorruptRecordError with the
    details of what is wrong (returns if it finds nothing)."""
    for _ in iter_records(buf, pos, header, max_decompressed_size=max_decompressed_size):
        pass


class _Batch(NamedTuple):
    buf: Buffer
    pos: int
    header: BatchHeader
    count: int
    #: records outside [start, until) are dropped
    start: int
    until: int


class ColumnarDecoder:
    """Decodes the records of v2 batches into Arrow columns (`DECODED_SCHEMA`).

    `add_batch` every batch (in offset order), then `finish` once: the columns of all of them.
    With `include_headers` a ``headers`` column of `headers_type` (`HEADERS_TYPE` by default)
    is added: null for a record without headers, as Spark's Kafka source gives.
    """

    def __init__(self, include_headers: bool = False, headers_type: pa.DataType = HEADERS_TYPE,
                 max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> None:
        self.include_headers = include_headers
        self.headers_type = headers_type
        self.max_decompressed_size = max_decompressed_size
        self.schema = DECODED_SCHEMA.append(pa.field("headers", headers_type)) \
            if include_headers else DECODED_SCHEMA
        self._clear()

    def _clear(self) -> None:
        #: the records sections of the batches added, one after the other
        self._data = bytearray()
        self._starts = array("q")
        self._batches: list[_Batch] = []
        self._count = 0

    def __len__(self) -> int:
        """Records in the batches added so far (before dropping those outside the bounds)."""
        return self._count

    def add_batch(self, buf: Buffer, pos: int, header: BatchHeader, start: int | None = None,
                  until: int | None = None) -> None:
        """Add the records of the batch at `pos` of `buf` with offsets in [start, until).

        Raises CorruptRecordError when the records do not fill the batch exactly."""
        start = -1 if start is None else start
        until = 1 << 63 if until is None else until
        if header.last_offset < start or header.base_offset >= until:
            return
        count = header.records_count
        if count < 0:
            raise CorruptRecordError(f"negative record count {count}")
        data = self._data
        size = len(data)
        if header.compression == Compression.NONE:
            end = pos + header.size
            if pos < 0 or end > len(buf):
                records_section(buf, pos, header)  # raises the error for a truncated batch
            data += memoryview(buf)[pos + BATCH_HEADER_SIZE:end]
        else:
            data += records_section(buf, pos, header, self.max_decompressed_size)
        try:
            self._starts.fromlist(_record_starts(data, size, count))
        except CorruptRecordError:
            del data[size:]
            _raise_precise_error(buf, pos, header, self.max_decompressed_size)
            raise
        self._batches.append(_Batch(buf, pos, header, count, start, until))
        self._count += count

    def finish(self) -> pa.RecordBatch:
        """The columns of the records added since the last `finish`."""
        try:
            return self._decode()
        except (_Invalid, pa.ArrowIndexError, pa.ArrowInvalid) as exc:
            for batch in self._batches:
                _raise_precise_error(batch.buf, batch.pos, batch.header,
                                     self.max_decompressed_size)
            raise CorruptRecordError(f"invalid records: {exc}") from None
        finally:
            self._clear()

    def _per_record(self, typecode: str, value_of: Any) -> pa.Array:
        """A column repeating a per-batch value over the batch's records."""
        values = array(typecode)
        for batch in self._batches:
            values.extend(array(typecode, [value_of(batch)]) * batch.count)
        return pa.Array.from_buffers(_I64 if typecode == "q" else _I32, len(values),
                                     [None, pa.py_buffer(values)])

    def _decode(self) -> pa.RecordBatch:
        count = self._count
        if not count:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        self._data += _PADDING
        data_buffer = pa.py_buffer(self._data)
        data = pa.Array.from_buffers(pa.uint8(), data_buffer.size, [None, data_buffer])
        starts = pa.Array.from_buffers(_I64, count, [None, pa.py_buffer(self._starts)])

        # The sections are back to back and each record starts where the previous one ends
        # (the loop in add_batch checked that), so only the length's size is read here, and
        # its sign: a negative length is invalid.
        end = pa.concat_arrays([starts.slice(1),
                                pa.array([len(self._data) - len(_PADDING)], _I64)])
        length, size = _varints(data, starts, _MAX_VARINT_BYTES)
        if pc.min(length).as_py() < 0:
            raise _Invalid("negative record length")
        body = pc.add(starts, size)
        position = pc.add(body, _ONE)  # attributes: unused
        timestamp_delta, size = _varints(data, position, _MAX_VARLONG_BYTES)
        position = pc.add(position, size)
        offset_delta, size = _varints(data, position, _MAX_VARINT_BYTES)
        position = pc.add(position, size)

        key_length, size = _varints(data, position, _MAX_VARINT_BYTES)
        key_start = pc.add(position, size)
        key_size = pc.max_element_wise(key_length, _ZERO)
        position = pc.add(key_start, key_size)
        value_length, size = _varints(data, position, _MAX_VARINT_BYTES)
        value_start = pc.add(position, size)
        value_size = pc.max_element_wise(value_length, _ZERO)
        position = pc.add(value_start, value_size)
        header_count, size = _varints(data, position, _MAX_VARINT_BYTES)
        position = pc.add(position, size)
        if pc.min(key_length).as_py() < -1 or pc.min(value_length).as_py() < -1 or \
                pc.min(header_count).as_py() < 0:
            raise _Invalid("negative length")

        has_headers = pc.max(header_count).as_py() > 0
        headers = None
        if has_headers:
            if self.include_headers:
                headers = self._headers(data, data_buffer, position, end, header_count)
            else:  # still read, to find malformed records as iter_records does
                _walk_headers(data, position, end, header_count, collect=False)
            misplaced = pc.and_(pc.equal(header_count, _ZERO), pc.not_equal(position, end))
        else:
            misplaced = pc.not_equal(position, end)
        if pc.any(misplaced).as_py():
            raise _Invalid("record fields do not fill the record")

        batches = self._batches
        offsets = pc.add(self._per_record("q", lambda b: b.header.base_offset), offset_delta)
        log_append_time = [b.header.timestamp_type == TimestampType.LOG_APPEND_TIME
                           for b in batches]
        if any(log_append_time):
            delta_used = self._per_record(
                "q", lambda b: int(b.header.timestamp_type != TimestampType.LOG_APPEND_TIME))
            timestamp_delta = pc.multiply(timestamp_delta, delta_used)
        timestamps = pc.add(self._per_record("q", lambda b: b.header.max_timestamp if
                                             b.header.timestamp_type ==
                                             TimestampType.LOG_APPEND_TIME else
                                             b.header.base_timestamp), timestamp_delta)
        types = self._per_record("i", lambda b: int(b.header.timestamp_type))
        columns = [offsets, timestamps, types,
                   _bytes_column(data_buffer, key_start, key_size, key_length),
                   _bytes_column(data_buffer, value_start, value_size, value_length)]
        if self.include_headers:
            columns.append(headers if headers is not None else pa.nulls(count,
                                                                        self.headers_type))
        result = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        if any(b.start > b.header.base_offset or b.until <= b.header.last_offset
               for b in batches):
            keep = pc.and_(
                pc.greater_equal(offsets, self._per_record("q", lambda b: b.start)),
                pc.less(offsets, self._per_record("q", lambda b: b.until)))
            result = result.filter(keep)
        return result

    def _headers(self, data: pa.Array, data_buffer: pa.Buffer, position: pa.Array,
                 end: pa.Array, header_count: pa.Array) -> pa.Array:
        """The headers column: the headers of all records (`_walk_headers`) put back in
        record order, then gathered into a list of structs per record."""
        rounds = _walk_headers(data, position, end, header_count, collect=True)
        fields = [pa.concat_arrays([r[i] for r in rounds]) for i in range(6)]
        if len(rounds) > 1:
            # Round-major to record-major: a stable sort on the record index.
            order = pc.sort_indices(fields[0])
            fields = [pc.take(column, order) for column in fields]
        _, name_start, name_length, value_start, value_size, value_null = fields
        value_type = self.headers_type.value_type
        names = _gather(data_buffer, name_start, name_length, None)
        try:
            names = names.cast(value_type.field(0).type)
        except pa.ArrowInvalid:  # not UTF-8 (Arrow strings must be): U+FFFD for bad bytes
            names = pa.array([raw.decode("utf-8", "replace") for raw in names.to_pylist()],
                             value_type.field(0).type)
        values = _gather(data_buffer, value_start, value_size,
                         value_null if pc.any(value_null).as_py() else None,
                         value_type.field(1).type)
        entries = pa.StructArray.from_arrays([names, values], fields=list(value_type))
        list_offsets = pa.concat_arrays([pa.array([0], _I32),
                                         pc.cumulative_sum(header_count).cast(_I32)])
        return pa.ListArray.from_arrays(list_offsets, entries, type=self.headers_type,
                                        mask=pc.equal(header_count, _ZERO))


def _walk_headers(data: pa.Array, position: pa.Array, end: pa.Array, header_count: pa.Array,
                  collect: bool) -> list[tuple[pa.Array, ...]]:
    """Read the headers of every record (`position`: after its header count), one round per
    header index over the records that have that many, checking that each record's last
    header ends where the record does. With `collect`, returns per round (record index, name
    start, name length, value start, value size, value is null)."""
    records = pc.indices_nonzero(pc.greater(header_count, _ZERO)).cast(_I64)
    left = pc.take(header_count, records)
    position = pc.take(position, records)
    record_end = pc.take(end, records)
    # Each header takes at least two bytes: refuse absurd counts before looping on them.
    if pc.any(pc.greater(pc.multiply(left, pa.scalar(2, _I64)),
                         pc.subtract(record_end, position))).as_py():
        raise _Invalid("invalid header count")
    rounds: list[tuple[pa.Array, ...]] = []
    while len(records):
        name_length, size = _varints(data, position, _MAX_VARINT_BYTES)
        name_start = pc.add(position, size)
        position = pc.add(name_start, name_length)
        value_length, size = _varints(data, position, _MAX_VARINT_BYTES)
        value_start = pc.add(position, size)
        value_size = pc.max_element_wise(value_length, _ZERO)
        position = pc.add(value_start, value_size)
        if pc.min(name_length).as_py() < 0 or pc.min(value_length).as_py() < -1:
            raise _Invalid("invalid header length")
        if collect:
            rounds.append((records, name_start, name_length, value_start, value_size,
                           pc.equal(value_length, _MINUS_ONE)))
        left = pc.subtract(left, _ONE)
        more = pc.greater(left, _ZERO)
        if pc.any(pc.and_(pc.invert(more), pc.not_equal(position, record_end))).as_py():
            raise _Invalid("record fields do not fill the record")
        records, left, position, record_end = (
            pc.filter(column, more) for column in (records, left, position, record_end))
    return rounds


# ------------------------------------------------------------------------------ encoding

_VARINT_TABLE_SIZE = 1 << 14


def _zigzag_varint(value: int) -> bytes:
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


#: the zig-zag varint encodings of 0..16383 (lengths, counts, offset deltas)
_VARINTS = pa.array([_zigzag_varint(value) for value in range(_VARINT_TABLE_SIZE)], pa.binary())
_NULL_LENGTH = pa.scalar(b"\x01", pa.binary())  # zig-zag -1
_EMPTY = pa.scalar(b"", pa.binary())
#: attributes (unused) and timestamp delta 0: a batch's records share its timestamp
_ATTRIBUTES_AND_TIMESTAMP = pa.scalar(b"\x00\x00", pa.binary())
# An upper bound of what a record adds to its key, value and headers: attributes, timestamp
# delta, offset delta (< 16384: 3 bytes), length (5 bytes).
_RECORD_OVERHEAD = pa.scalar(2 + 3 + 5, _I64)


def _varints_of(lengths: pa.Array) -> pa.Array:
    """The zig-zag varints of non-negative `lengths` (nulls stay null)."""
    if not len(lengths) or (pc.max(lengths).as_py() or 0) < _VARINT_TABLE_SIZE:
        return pc.take(_VARINTS, lengths)
    return pa.array([None if v is None else _zigzag_varint(v) for v in lengths.to_pylist()],
                    pa.binary())


def _as_binary(column: pa.Array) -> pa.Array:
    if column.type == pa.binary():
        return column
    if column.type in (pa.string(), pa.large_string(), pa.large_binary(), pa.binary_view(),
                       pa.string_view()):
        return column.cast(pa.binary())
    raise TypeError(f"cannot write a {column.type} column as record bytes")


def encode_headers(headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    """The wire form of headers, without their count."""
    out = bytearray()
    for name, value in headers:
        encoded = name.encode("utf-8", HEADER_KEY_ERRORS)
        out += _zigzag_varint(len(encoded)) + encoded
        out += _NULL_LENGTH.as_py() if value is None else _zigzag_varint(len(value)) + value
    return bytes(out)


def _header_sections(headers: pa.Array | None, extra: Sequence[tuple[str, bytes | None]],
                     count: int) -> Any:
    """Each record's headers part (count, then headers): `headers` (list<struct<key, value>>
    per record) followed by the `extra` headers every record carries. A scalar when every
    record has the same."""
    extra_bytes = encode_headers(extra)
    if headers is None or headers.null_count == len(headers) or \
            not pc.max(pc.list_value_length(headers)).as_py():
        return pa.scalar(_zigzag_varint(len(extra)) + extra_bytes, pa.binary())
    entries = headers.values
    names = _as_binary(entries.field(0))
    if names.null_count:
        raise ValueError("a header key is null")
    values = _as_binary(entries.field(1))
    encoded = pc.binary_join_element_wise(
        _varints_of(pc.binary_length(names)), names,
        pc.fill_null(_varints_of(pc.binary_length(values)), _NULL_LENGTH), values, _EMPTY,
        null_handling="replace", null_replacement="")
    per_record = pc.binary_join(pa.ListArray.from_arrays(headers.offsets, encoded), _EMPTY)
    if headers.null_count:  # a null list's offsets may span entries: it has no headers
        per_record = pc.if_else(pc.is_valid(headers), per_record, _EMPTY)
    counts = pc.add(pc.fill_null(pc.list_value_length(headers), 0), len(extra))
    return pc.binary_join_element_wise(
        _varints_of(counts), per_record, pa.scalar(extra_bytes, pa.binary()), _EMPTY,
        null_handling="replace", null_replacement="")


class EncodedBatch(NamedTuple):
    """A built v2 record batch (base offset 0, no producer id/epoch/sequence) and how many
    records it holds."""

    payload: bytearray
    record_count: int


def encode_record_batches(
    values: pa.Array,
    keys: pa.Array | None = None,
    headers: pa.Array | None = None,
    *,
    extra_headers: Sequence[tuple[str, bytes | None]] = (),
    timestamp: int,
    max_batch_bytes: int,
    compression: Compression = Compression.NONE,
    compression_level: int | None = None,
) -> list[EncodedBatch]:
    """Encode one record per element of `values` (binary or string; null for a tombstone)
    into v2 record batches of at most `max_batch_bytes` (a record bigger than that gets a batch
    of its own), in order.

    `keys`: binary or string, null for no key. `headers`: list<struct<key: string, value:
    binary>> per record (null or empty for none); `extra_headers` are added after them to
    every record. Every record gets `timestamp` (CreateTime). The batches have base offset 0
    and no producer id, epoch or sequence: a producer stamps those.
    """
    count = len(values)
    if not count:
        return []
    values = _as_binary(values)
    value_lengths = _varints_of(pc.binary_length(values))
    parts: list[Any] = []
    if keys is None:
        parts.append(_NULL_LENGTH)
    else:
        keys = _as_binary(keys)
        parts += [pc.fill_null(_varints_of(pc.binary_length(keys)), _NULL_LENGTH), keys]
    parts += [pc.fill_null(value_lengths, _NULL_LENGTH), values,
              _header_sections(headers, extra_headers, count)]
    tail = pc.binary_join_element_wise(*parts, _EMPTY, null_handling="replace",
                                       null_replacement="")
    tail_sizes = pc.binary_length(tail).cast(_I64)

    # Cut into batches with an upper bound of each record's size (offset deltas and lengths
    # are not known before the cut).
    bounds = pc.cumulative_sum(pc.add(tail_sizes, _RECORD_OVERHEAD))
    ends = memoryview(bounds.buffers()[1]).cast("q")[bounds.offset:bounds.offset + count]
    limit = max(1, max_batch_bytes - BATCH_HEADER_SIZE)
    cuts: list[tuple[int, int]] = []
    first, before = 0, 0
    while first < count:
        last = bisect.bisect_right(ends, before + limit, first,
                                   min(count, first + _VARINT_TABLE_SIZE))
        last = max(last, first + 1)
        cuts.append((first, last))
        before = ends[last - 1]
        first = last

    offset_deltas = pa.concat_arrays([_VARINTS.slice(0, last - first) for first, last in cuts])
    lengths = _varints_of(pc.add(pc.add(tail_sizes, pc.binary_length(offset_deltas).cast(_I64)),
                                 pa.scalar(2, _I64)))
    records = pc.binary_join_element_wise(lengths, _ATTRIBUTES_AND_TIMESTAMP, offset_deltas,
                                          tail, _EMPTY)
    record_ends = memoryview(records.buffers()[1]).cast("i")[records.offset:]
    data = memoryview(records.buffers()[2])
    attributes = int(compression)
    batches = []
    for first, last in cuts:
        section = data[record_ends[first]:record_ends[last]]
        if compression != Compression.NONE:
            section = memoryview(compress(compression, section, compression_level))
        size = BATCH_HEADER_SIZE + len(section)
        out = bytearray(BATCH_HEADER_SIZE)
        out += section
        HEADER_STRUCT.pack_into(
            out, 0, 0, size - LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, MAGIC_V2, 0, attributes,
            last - first - 1, timestamp, timestamp, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
            NO_SEQUENCE, last - first)
        write_crc(out, 0, size)
        batches.append(EncodedBatch(out, last - first))
    return batches

