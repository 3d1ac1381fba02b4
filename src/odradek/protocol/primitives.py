"""Kafka wire primitives: fixed-size integers, varints, (compact) strings/bytes/arrays, uuids and
tagged-field sections.

Decoding works on a ``memoryview`` and an integer position: every ``read_*`` function takes
``(buf, pos)`` and returns ``(value, new_pos)``. The generated message codecs call these
functions directly (a method call per field would cost more than the work itself); `Reader`
wraps the same functions for hand-written code. Lengths are checked against the remaining
bytes *before* anything is allocated, so a frame can never make us allocate more than its own
size implies.

Truncation inside a fixed-size read surfaces as ``struct.error`` or ``IndexError`` from the
fast functions; the message classes and `Reader` turn those into `DecodeError`.

Encoding functions append to a ``bytearray``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from odradek.protocol.errors import DecodeError

__all__ = [
    "DECODE_FAILURES",
    "FIXED_ARRAY_TYPES",
    "ZERO_UUID",
    "FixedArrayType",
    "Reader",
    "read_array",
    "read_array_length",
    "read_bytes",
    "read_compact_array",
    "read_compact_array_length",
    "read_compact_bytes",
    "read_compact_fixed_array",
    "read_compact_nullable_bytes",
    "read_compact_nullable_string",
    "read_compact_records",
    "read_compact_string",
    "read_fixed_array",
    "read_nullable_bytes",
    "read_nullable_string",
    "read_records",
    "read_string",
    "read_tagged_header",
    "read_unknown_tagged_fields",
    "read_uuid",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "records_length",
    "uuid_from_bytes",
    "uuid_from_int",
    "uvarint_size",
    "write_array",
    "write_array_chunked",
    "write_bytes",
    "write_compact_array",
    "write_compact_array_chunked",
    "write_compact_bytes",
    "write_compact_fixed_array",
    "write_compact_nullable_bytes",
    "write_compact_nullable_string",
    "write_compact_string",
    "write_fixed_array",
    "write_nullable_bytes",
    "write_nullable_string",
    "write_records",
    "write_string",
    "write_tagged_fields",
    "write_unknown_tagged_fields",
    "write_uuid",
    "write_uvarint",
    "write_varint",
    "write_varlong",
]

#: The "no id" uuid: sixteen zero bytes on the wire.
ZERO_UUID = uuid.UUID(int=0)

#: Exceptions that the fast ``(buf, pos)`` functions and the generated decoders may raise on
#: malformed input, besides `DecodeError` itself. Callers translate them into `DecodeError`.
DECODE_FAILURES = (struct.error, IndexError, ValueError, OverflowError)

_MAX_STRING_LENGTH = 0x7FFF  # Kafka refuses longer strings in both directions
_MAX_UVARINT_BYTES = 5  # unsigned varints carry at most 32 bits
_MAX_VARLONG_BYTES = 10

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")

_NULL_I16 = b"\xff\xff"
_NULL_I32 = b"\xff\xff\xff\xff"

_new_object = object.__new__
_set_attribute = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


# ----------------------------------------------------------------------------------------------
# uuids


def uuid_from_int(value: int) -> uuid.UUID:
    """A `uuid.UUID` for a 128-bit integer without `UUID.__init__`'s argument parsing."""
    if value == 0:
        return ZERO_UUID
    result = _new_object(uuid.UUID)
    _set_attribute(result, "int", value)
    _set_attribute(result, "is_safe", _SAFE_UNKNOWN)
    return result


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    return uuid_from_int(int.from_bytes(raw, "big"))


def read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise DecodeError("truncated uuid")
    return uuid_from_int(int.from_bytes(buf[pos:end], "big")), end


# ----------------------------------------------------------------------------------------------
# varints


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 32 bits (5 bytes), least significant group first."""
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 7 * _MAX_UVARINT_BYTES:
            raise DecodeError("unsigned varint longer than 5 bytes")


def _read_zigzag(buf: memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    limit = 7 * max_bytes
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= limit:
            raise DecodeError(f"varint longer than {max_bytes} bytes")


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Zig-zag signed varint of at most 32 bits (record batches)."""
    byte = buf[pos]
    if byte < 0x80:  # one byte: the common case for record fields
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return _read_zigzag(buf, pos, _MAX_UVARINT_BYTES)


def read_varlong(buf: memoryview, pos: int) -> tuple[int, int]:
    """Zig-zag signed varlong of at most 64 bits (record batches)."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return _read_zigzag(buf, pos, _MAX_VARLONG_BYTES)


def _uvarint_encoding(value: int) -> bytes:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Encodings of the small values that lengths and counts almost always are.
_SMALL_UVARINTS = tuple(_uvarint_encoding(value) for value in range(16384))


def uvarint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint cannot hold {value}")
        out.append(value)
    elif value < 16384:
        out += _SMALL_UVARINTS[value]
    elif value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint cannot hold {value}")
    else:
        out += _uvarint_encoding(value)


def _write_zigzag(out: bytearray, zigzag: int) -> None:
    if zigzag < 0x80:
        out.append(zigzag)
    elif zigzag < 16384:
        out += _SMALL_UVARINTS[zigzag]
    else:
        out += _uvarint_encoding(zigzag)


def write_varint(out: bytearray, value: int) -> None:
    """Zig-zag signed 32-bit varint."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise ValueError(f"varint out of range: {value}")
    _write_zigzag(out, (value << 1) ^ (value >> 31))


def write_varlong(out: bytearray, value: int) -> None:
    """Zig-zag signed 64-bit varlong."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of range: {value}")
    _write_zigzag(out, (value << 1) ^ (value >> 63))


# ----------------------------------------------------------------------------------------------
# strings


def _decode_text(buf: memoryview, pos: int, length: int) -> tuple[str, int]:
    if length > _MAX_STRING_LENGTH:
        raise DecodeError(f"string length {length} exceeds {_MAX_STRING_LENGTH}")
    end = pos + length
    if end > len(buf):
        raise DecodeError(f"string of {length} bytes exceeds the remaining {len(buf) - pos}")
    # Kafka's Java decoder replaces malformed UTF-8 instead of failing; so do we.
    return buf[pos:end].tobytes().decode("utf-8", "replace"), end


def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    (length,) = _I16.unpack_from(buf, pos)
    if length < 0:
        raise DecodeError("non-nullable string is null")
    return _decode_text(buf, pos + 2, length)


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    (length,) = _I16.unpack_from(buf, pos)
    if length < 0:
        if length != -1:
            raise DecodeError(f"invalid string length {length}")
        return None, pos + 2
    return _decode_text(buf, pos + 2, length)


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    length = buf[pos]
    if length < 0x80:
        pos += 1
    else:
        length, pos = read_uvarint(buf, pos)
    if length == 0:
        raise DecodeError("non-nullable string is null")
    return _decode_text(buf, pos, length - 1)


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    length = buf[pos]
    if length < 0x80:
        pos += 1
    else:
        length, pos = read_uvarint(buf, pos)
    if length == 0:
        return None, pos
    return _decode_text(buf, pos, length - 1)


def _encode_text(value: str) -> bytes:
    if value is None:
        raise ValueError("non-nullable string is None")
    raw = value.encode("utf-8")
    if len(raw) > _MAX_STRING_LENGTH:
        raise ValueError(f"string of {len(raw)} bytes is longer than {_MAX_STRING_LENGTH}")
    return raw


def write_string(out: bytearray, value: str) -> None:
    raw = _encode_text(value)
    out += _I16.pack(len(raw))
    out += raw


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _NULL_I16
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    raw = _encode_text(value)
    write_uvarint(out, len(raw) + 1)
    out += raw


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_string(out, value)


# ----------------------------------------------------------------------------------------------
# bytes and records


def _slice(buf: memoryview, pos: int, length: int) -> tuple[memoryview, int]:
    end = pos + length
    if end > len(buf):
        raise DecodeError(f"{length} bytes declared but only {len(buf) - pos} remain")
    return buf[pos:end], end


def read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    (length,) = _I32.unpack_from(buf, pos)
    if length < 0:
        raise DecodeError("non-nullable bytes are null")
    view, end = _slice(buf, pos + 4, length)
    return view.tobytes(), end


def read_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    (length,) = _I32.unpack_from(buf, pos)
    if length < 0:
        if length != -1:
            raise DecodeError(f"invalid bytes length {length}")
        return None, pos + 4
    view, end = _slice(buf, pos + 4, length)
    return view.tobytes(), end


def read_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    length, pos = read_uvarint(buf, pos)
    if length == 0:
        raise DecodeError("non-nullable bytes are null")
    view, end = _slice(buf, pos, length - 1)
    return view.tobytes(), end


def read_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_uvarint(buf, pos)
    if length == 0:
        return None, pos
    view, end = _slice(buf, pos, length - 1)
    return view.tobytes(), end


def read_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Classic nullable records: a zero-copy slice of `buf` (or None)."""
    (length,) = _I32.unpack_from(buf, pos)
    if length < 0:
        if length != -1:
            raise DecodeError(f"invalid records length {length}")
        return None, pos + 4
    return _slice(buf, pos + 4, length)


def read_compact_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    length, pos = read_uvarint(buf, pos)
    if length == 0:
        return None, pos
    return _slice(buf, pos, length - 1)


def _encode_bytes(value: Any) -> Any:
    if value is None:
        raise ValueError("non-nullable bytes are None")
    return value


def write_bytes(out: bytearray, value: bytes) -> None:
    value = _encode_bytes(value)
    out += _I32.pack(len(value))
    out += value


def write_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _NULL_I32
    else:
        write_bytes(out, value)


def write_compact_bytes(out: bytearray, value: bytes) -> None:
    value = _encode_bytes(value)
    write_uvarint(out, len(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_bytes(out, value)


_BUFFER_TYPES = (bytes, bytearray, memoryview)
# Records up to this size are copied into the output; larger ones (and anything that is not a
# buffer, such as a file region to be sent with sendfile) become a chunk of their own.
_INLINE_RECORDS_LIMIT = 16384


def records_length(value: Any) -> int:
    """Byte length of a records value: `nbytes` for memoryviews, `len()` for anything else."""
    if type(value) is memoryview:
        return value.nbytes
    return len(value)


def write_records(out: bytearray, chunks: list[Any], value: Any, compact: bool) -> None:
    """Write a nullable records field.

    Small buffers are copied into `out`. A large buffer or a non-buffer object (a file region)
    ends the current chunk: `out` is flushed into `chunks` as bytes and the value itself is
    appended, so it is never copied here.
    """
    if value is None:
        if compact:
            out.append(0)
        else:
            out += _NULL_I32
        return
    length = records_length(value)
    if compact:
        write_uvarint(out, length + 1)
    else:
        out += _I32.pack(length)
    if length <= _INLINE_RECORDS_LIMIT and isinstance(value, _BUFFER_TYPES):
        out += value
    else:
        chunks.append(bytes(out))
        out.clear()
        chunks.append(value)


# ----------------------------------------------------------------------------------------------
# arrays


def read_array_length(
    buf: memoryview, pos: int, min_element_size: int, nullable: bool
) -> tuple[int, int]:
    """Classic int32 element count; -1 for null. Fails before allocation when the remaining
    bytes cannot hold that many elements of at least `min_element_size` bytes."""
    (count,) = _I32.unpack_from(buf, pos)
    pos += 4
    if count < 0:
        if count == -1 and nullable:
            return -1, pos
        raise DecodeError(f"invalid array length {count}")
    if count * min_element_size > len(buf) - pos:
        raise DecodeError(f"array of {count} elements exceeds the remaining {len(buf) - pos} bytes")
    return count, pos


def read_compact_array_length(
    buf: memoryview, pos: int, min_element_size: int, nullable: bool
) -> tuple[int, int]:
    """Compact (varint length+1) element count; -1 for null. Checked like `read_array_length`."""
    count = buf[pos]
    if count < 0x80:
        pos += 1
    else:
        count, pos = read_uvarint(buf, pos)
    count -= 1
    if count < 0:
        if nullable:
            return -1, pos
        raise DecodeError("non-nullable array is null")
    if count * min_element_size > len(buf) - pos:
        raise DecodeError(f"array of {count} elements exceeds the remaining {len(buf) - pos} bytes")
    return count, pos


class FixedArrayType:
    """Precompiled struct formats for arrays of one fixed-size element type."""

    __slots__ = ("code", "size", "structs")
    _PRECOMPILED = 65  # arrays up to this length use a ready Struct

    def __init__(self, code: str) -> None:
        self.code = code
        self.size = struct.calcsize(">" + code)
        self.structs = tuple(struct.Struct(f">{n}{code}") for n in range(self._PRECOMPILED))

    def struct_for(self, count: int) -> struct.Struct:
        if count < self._PRECOMPILED:
            return self.structs[count]
        return struct.Struct(f">{count}{self.code}")


#: struct format code ("b", "?", "h", "H", "i", "I", "q", "d") -> its `FixedArrayType`
FIXED_ARRAY_TYPES = {code: FixedArrayType(code) for code in "b?hHiIqd"}


def _read_fixed_elements(
    buf: memoryview, pos: int, count: int, kind: FixedArrayType
) -> tuple[list, int]:
    end = pos + count * kind.size
    if end > len(buf):
        raise DecodeError(f"array of {count} elements exceeds the remaining {len(buf) - pos} bytes")
    structs = kind.structs
    compiled = structs[count] if count < len(structs) else kind.struct_for(count)
    return list(compiled.unpack_from(buf, pos)), end


def read_fixed_array(
    buf: memoryview, pos: int, kind: FixedArrayType, nullable: bool
) -> tuple[list | None, int]:
    """Classic array of fixed-size elements."""
    (count,) = _I32.unpack_from(buf, pos)
    pos += 4
    if count <= 0:
        if count == 0:
            return [], pos
        if count == -1 and nullable:
            return None, pos
        raise DecodeError(f"invalid array length {count}")
    return _read_fixed_elements(buf, pos, count, kind)


def read_compact_fixed_array(
    buf: memoryview, pos: int, kind: FixedArrayType, nullable: bool
) -> tuple[list | None, int]:
    count = buf[pos]
    if count < 0x80:
        pos += 1
    else:
        count, pos = read_uvarint(buf, pos)
    count -= 1
    if count <= 0:
        if count == 0:
            return [], pos
        if nullable:
            return None, pos
        raise DecodeError("non-nullable array is null")
    # _read_fixed_elements, inlined: this is the hottest array shape (replica lists)
    end = pos + count * kind.size
    if end > len(buf):
        raise DecodeError(f"array of {count} elements exceeds the remaining {len(buf) - pos} bytes")
    structs = kind.structs
    compiled = structs[count] if count < len(structs) else kind.struct_for(count)
    return list(compiled.unpack_from(buf, pos)), end


def read_array(
    buf: memoryview,
    pos: int,
    min_element_size: int,
    nullable: bool,
    read_element: Callable[[memoryview, int], tuple[Any, int]],
) -> tuple[list | None, int]:
    """Classic array whose elements `read_element(buf, pos) -> (element, pos)` decodes."""
    count, pos = read_array_length(buf, pos, min_element_size, nullable)
    if count < 0:
        return None, pos
    items = []
    append = items.append
    for _ in range(count):
        item, pos = read_element(buf, pos)
        append(item)
    return items, pos


def read_compact_array(
    buf: memoryview,
    pos: int,
    min_element_size: int,
    nullable: bool,
    read_element: Callable[[memoryview, int], tuple[Any, int]],
) -> tuple[list | None, int]:
    count, pos = read_compact_array_length(buf, pos, min_element_size, nullable)
    if count < 0:
        return None, pos
    items = []
    append = items.append
    for _ in range(count):
        item, pos = read_element(buf, pos)
        append(item)
    return items, pos


def _write_null_array(out: bytearray, compact: bool, nullable: bool) -> None:
    if not nullable:
        raise ValueError("non-nullable array is None")
    if compact:
        out.append(0)
    else:
        out += _NULL_I32


def write_fixed_array(
    out: bytearray, values: list | None, kind: FixedArrayType, nullable: bool
) -> None:
    if values is None:
        _write_null_array(out, False, nullable)
        return
    count = len(values)
    out += _I32.pack(count)
    if count:
        structs = kind.structs
        out += (structs[count] if count < len(structs) else kind.struct_for(count)).pack(*values)


def write_compact_fixed_array(
    out: bytearray, values: list | None, kind: FixedArrayType, nullable: bool
) -> None:
    if values is None:
        _write_null_array(out, True, nullable)
        return
    count = len(values)
    if count < 0x7F:
        out.append(count + 1)
    else:
        write_uvarint(out, count + 1)
    if count:
        structs = kind.structs
        out += (structs[count] if count < len(structs) else kind.struct_for(count)).pack(*values)


def write_array(
    out: bytearray,
    values: list | None,
    nullable: bool,
    write_element: Callable[[bytearray, Any], None],
) -> None:
    """Classic array whose elements `write_element(out, element)` encodes."""
    if values is None:
        _write_null_array(out, False, nullable)
        return
    out += _I32.pack(len(values))
    for item in values:
        write_element(out, item)


def write_compact_array(
    out: bytearray,
    values: list | None,
    nullable: bool,
    write_element: Callable[[bytearray, Any], None],
) -> None:
    if values is None:
        _write_null_array(out, True, nullable)
        return
    write_uvarint(out, len(values) + 1)
    for item in values:
        write_element(out, item)


def write_array_chunked(
    out: bytearray,
    chunks: list,
    values: list | None,
    nullable: bool,
    write_element: Callable[[bytearray, list, Any], None],
) -> None:
    """`write_array` for elements that contain records (see `write_records`)."""
    if values is None:
        _write_null_array(out, False, nullable)
        return
    out += _I32.pack(len(values))
    for item in values:
        write_element(out, chunks, item)


def write_compact_array_chunked(
    out: bytearray,
    chunks: list,
    values: list | None,
    nullable: bool,
    write_element: Callable[[bytearray, list, Any], None],
) -> None:
    if values is None:
        _write_null_array(out, True, nullable)
        return
    write_uvarint(out, len(values) + 1)
    for item in values:
        write_element(out, chunks, item)


def write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


# ----------------------------------------------------------------------------------------------
# tagged fields


def read_tagged_header(buf: memoryview, pos: int) -> tuple[int, int, int]:
    """One tagged field's tag and payload size; returns (tag, size, payload_pos) after checking
    that the payload fits."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    if pos + size > len(buf):
        raise DecodeError(f"tagged field {tag} of {size} bytes exceeds the buffer")
    return tag, size, pos


def read_unknown_tagged_fields(buf: memoryview, pos: int) -> tuple[dict[int, bytes] | None, int]:
    """A tagged-field section none of whose tags the caller knows: all kept as raw bytes."""
    count, pos = read_uvarint(buf, pos)
    if count == 0:
        return None, pos
    if count * 2 > len(buf) - pos:
        raise DecodeError(f"{count} tagged fields cannot fit in {len(buf) - pos} bytes")
    fields: dict[int, bytes] = {}
    for _ in range(count):
        tag, size, pos = read_tagged_header(buf, pos)
        end = pos + size
        fields[tag] = buf[pos:end].tobytes()
        pos = end
    return fields, pos


def write_tagged_fields(
    out: bytearray,
    known: list[tuple[int, bytes | bytearray]] | None,
    unknown: Mapping[int, bytes] | None,
    known_tags: frozenset[int],
) -> None:
    """A tagged-field section: the known fields already encoded as (tag, payload), plus the
    unknown ones (those whose tag a known field of this version uses are dropped), ascending."""
    fields: list[tuple[int, Any]] = list(known) if known else []
    if unknown:
        fields.extend(item for item in unknown.items() if item[0] not in known_tags)
        fields.sort(key=_first)
    write_uvarint(out, len(fields))
    for tag, payload in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(payload))
        out += payload


def write_unknown_tagged_fields(out: bytearray, unknown: Mapping[int, bytes] | None) -> None:
    if not unknown:
        out.append(0)
    else:
        write_tagged_fields(out, None, unknown, frozenset())


def _first(item: tuple[int, Any]) -> int:
    return item[0]


# ----------------------------------------------------------------------------------------------
# Reader


def _checked(function: Callable[..., Any]) -> Callable[..., Any]:
    """Make a Reader method out of a ``(buf, pos, ...) -> (value, pos)`` function."""

    def method(self: Reader, *args: Any) -> Any:
        try:
            value, self.pos = function(self.buf, self.pos, *args)
        except DECODE_FAILURES as exc:
            raise DecodeError(f"{function.__name__}: {exc}") from exc
        return value

    method.__name__ = function.__name__.removeprefix("read_")
    method.__doc__ = function.__doc__
    return method


def _fixed(compiled: struct.Struct) -> Callable[[Reader], Any]:
    size = compiled.size
    unpack_from = compiled.unpack_from

    def method(self: Reader) -> Any:
        pos = self.pos
        if pos + size > len(self.buf):
            raise DecodeError(f"truncated: {size} bytes needed, {len(self.buf) - pos} remain")
        self.pos = pos + size
        return unpack_from(self.buf, pos)[0]

    return method


class Reader:
    """A cursor over a frame. Every read checks bounds and raises `DecodeError` on failure.

    `buf` is a byte-format memoryview and `pos` the offset of the next unread byte; generated
    codecs read ``(reader.buf, reader.pos)`` directly and store the new position back.
    """

    __slots__ = ("buf", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        view = data if type(data) is memoryview else memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self.buf: memoryview = view
        self.pos: int = pos

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)

    def skip(self, count: int) -> None:
        if count < 0 or self.pos + count > len(self.buf):
            raise DecodeError(f"cannot skip {count} bytes, {self.remaining} remain")
        self.pos += count

    def raw(self, count: int) -> memoryview:
        """The next `count` bytes as a zero-copy slice."""
        if count < 0 or self.pos + count > len(self.buf):
            raise DecodeError(f"cannot read {count} bytes, {self.remaining} remain")
        start = self.pos
        self.pos = start + count
        return self.buf[start : self.pos]

    int8 = _fixed(_I8)
    int16 = _fixed(_I16)
    int32 = _fixed(_I32)
    int64 = _fixed(_I64)
    uint16 = _fixed(_U16)
    uint32 = _fixed(_U32)
    float64 = _fixed(_F64)

    def bool(self) -> bool:
        return self.int8() != 0

    uuid = _checked(read_uuid)
    uvarint = _checked(read_uvarint)
    varint = _checked(read_varint)
    varlong = _checked(read_varlong)
    string = _checked(read_string)
    nullable_string = _checked(read_nullable_string)
    compact_string = _checked(read_compact_string)
    compact_nullable_string = _checked(read_compact_nullable_string)
    bytes = _checked(read_bytes)
    nullable_bytes = _checked(read_nullable_bytes)
    compact_bytes = _checked(read_compact_bytes)
    compact_nullable_bytes = _checked(read_compact_nullable_bytes)
    records = _checked(read_records)
    compact_records = _checked(read_compact_records)
    array_length = _checked(read_array_length)
    compact_array_length = _checked(read_compact_array_length)
    tagged_fields = _checked(read_unknown_tagged_fields)

    def array(self, read_element: Callable[[Reader], Any], min_element_size: int = 1) -> list:
        """A classic non-null array whose elements `read_element(reader)` decodes."""
        count = self.array_length(max(min_element_size, 1), False)
        return [read_element(self) for _ in range(count)]

    def compact_array(
        self, read_element: Callable[[Reader], Any], min_element_size: int = 1
    ) -> list:
        count = self.compact_array_length(max(min_element_size, 1), False)
        return [read_element(self) for _ in range(count)]
