"""Kafka message classes (generated from the Kafka 3.8 JSON specs) and their registries.

Every class is importable from here: requests and responses (``MetadataRequest``...), the
headers, the embedded data specs (``ConsumerProtocolSubscription``...), the KRaft control
records and the records of the internal topics (``OffsetCommitKey``, ``TopicRecord``...).

    msg.encode(version) -> bytes            body only
    Cls.decode(data, version) -> Cls        whole body, trailing bytes are an error
    Cls.read(reader, version) -> Cls        from a `Reader`, trailing bytes left alone

This module adds the API registry (`API_BY_KEY`, `API_BY_NAME`), header-version rules and the
framings of the internal topics' records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeVar

from odradek.protocol.errors import DecodeError, UnsupportedVersionError
from odradek.protocol.messages import generated
from odradek.protocol.messages._base import Message, Struct, as_view
from odradek.protocol.messages.generated import *  # noqa: F403, RUF100 (the generated classes)
from odradek.protocol.messages.generated import __all__ as _generated_names
from odradek.protocol.primitives import ZERO_UUID, read_uvarint, write_uvarint

__all__ = [
    "ALL_MESSAGES",
    "API_BY_KEY",
    "API_BY_NAME",
    "CONSUMER_OFFSETS_KEY_BY_VERSION",
    "CONSUMER_OFFSETS_VALUE_BY_KEY_VERSION",
    "MESSAGE_BY_NAME",
    "METADATA_RECORD_BY_TYPE",
    "TRANSACTION_STATE_KEY_BY_VERSION",
    "TRANSACTION_STATE_VALUE_BY_KEY_VERSION",
    "ZERO_UUID",
    "ApiSpec",
    "Message",
    "Struct",
    "decode_consumer_offsets_key",
    "decode_consumer_offsets_value",
    "decode_metadata_record",
    "decode_versioned",
    "encode_metadata_record",
    "encode_versioned",
    "request_header_version",
    "response_header_version",
]
__all__ += _generated_names  # noqa: PLE0605 (a list of str)

ALL_MESSAGES: tuple[type[Message], ...] = generated.ALL_MESSAGES
MESSAGE_BY_NAME: dict[str, type[Message]] = {cls.NAME: cls for cls in ALL_MESSAGES}

M = TypeVar("M", bound=Message)

API_VERSIONS_KEY = 18


@dataclass(frozen=True)
class ApiSpec:
    """One API key: its classes and the version facts of its specs."""

    api_key: int
    name: str
    request: type[Message]
    response: type[Message]
    min_version: int
    max_version: int
    #: First flexible version; None when no version is flexible.
    flexible_min: int | None
    #: Listener kinds that advertise the API: "zkBroker", "broker", "controller".
    listeners: frozenset[str]
    #: Deprecated versions (empty range when none).
    deprecated_versions: range

    def is_flexible(self, version: int) -> bool:
        return self.flexible_min is not None and version >= self.flexible_min

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _api_spec(row: tuple) -> ApiSpec:
    api_key, name, request, response, listeners, deprecated = row
    return ApiSpec(
        api_key=api_key,
        name=name,
        request=request,
        response=response,
        min_version=request.MIN_VERSION,
        max_version=request.MAX_VERSION,
        flexible_min=request.FLEXIBLE_MIN,
        listeners=frozenset(listeners),
        deprecated_versions=range(0)
        if deprecated is None
        else range(deprecated[0], deprecated[1] + 1),
    )


API_BY_KEY: dict[int, ApiSpec] = {row[0]: _api_spec(row) for row in generated.APIS}
API_BY_NAME: dict[str, ApiSpec] = {spec.name: spec for spec in API_BY_KEY.values()}


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version: 2 for flexible versions, else 1.

    Versions above an API's maximum count as flexible when the API has flexible versions (the
    flexible range is open ended), so the header of a too-new request still parses.
    """
    spec = API_BY_KEY.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}")
    return 2 if spec.is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version: 1 for flexible versions, else 0; ApiVersions always 0."""
    spec = API_BY_KEY.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}")
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if spec.is_flexible(api_version) else 0


# ------------------------------------------------------------------------------------------------
# int16-version-prefixed records: __consumer_offsets, __transaction_state, and the embedded
# ConsumerProtocolSubscription/Assignment and DefaultPrincipalData payloads

_VERSION_PREFIX = struct.Struct(">h")


def encode_versioned(record: Message, version: int) -> bytes:
    """int16 `version` followed by the record's body at that version."""
    out = bytearray(_VERSION_PREFIX.pack(version))
    record.write_to(out, [], version)
    return bytes(out)


def decode_versioned(cls: type[M], data: bytes | memoryview) -> tuple[M, int]:
    """Read the int16 version prefix, then the body of `cls` at that version."""
    view = as_view(data)
    if len(view) < 2:
        raise DecodeError(f"{cls.NAME}: missing version prefix")
    (version,) = _VERSION_PREFIX.unpack_from(view, 0)
    return cls.decode(view[2:], version), version


def _by_key_version(pairs: tuple) -> tuple[dict[int, type[Message]], dict[int, type[Message]]]:
    keys: dict[int, type[Message]] = {}
    values: dict[int, type[Message]] = {}
    for key_cls, value_cls in pairs:
        for version in range(key_cls.MIN_VERSION, key_cls.MAX_VERSION + 1):
            keys[version] = key_cls
            values[version] = value_cls
    return keys, values


#: __consumer_offsets: key version (the record type) -> key class / value class
CONSUMER_OFFSETS_KEY_BY_VERSION, CONSUMER_OFFSETS_VALUE_BY_KEY_VERSION = _by_key_version(
    generated.CONSUMER_OFFSETS_RECORDS
)
TRANSACTION_STATE_KEY_BY_VERSION, TRANSACTION_STATE_VALUE_BY_KEY_VERSION = _by_key_version(
    generated.TRANSACTION_STATE_RECORDS
)


def _decode_key(table: dict[int, type[Message]], topic: str, data: bytes | memoryview):
    view = as_view(data)
    if len(view) < 2:
        raise DecodeError(f"{topic} key: missing version prefix")
    (version,) = _VERSION_PREFIX.unpack_from(view, 0)
    key_cls = table.get(version)
    if key_cls is None:
        raise DecodeError(f"{topic} key: unknown key version {version}")
    return key_cls.decode(view[2:], version), version


def decode_consumer_offsets_key(data: bytes | memoryview) -> tuple[Message, int]:
    """A __consumer_offsets record key -> (key, key version); the version names the type."""
    return _decode_key(CONSUMER_OFFSETS_KEY_BY_VERSION, "__consumer_offsets", data)


def decode_consumer_offsets_value(
    data: bytes | memoryview | None, key_version: int
) -> tuple[Message, int] | None:
    """A __consumer_offsets record value for a key of `key_version` -> (value, value version);
    None for a tombstone."""
    if data is None:
        return None
    value_cls = CONSUMER_OFFSETS_VALUE_BY_KEY_VERSION.get(key_version)
    if value_cls is None:
        raise DecodeError(f"__consumer_offsets: unknown key version {key_version}")
    return decode_versioned(value_cls, data)


def decode_transaction_state_key(data: bytes | memoryview) -> tuple[Message, int]:
    return _decode_key(TRANSACTION_STATE_KEY_BY_VERSION, "__transaction_state", data)


# ------------------------------------------------------------------------------------------------
# __cluster_metadata records

#: record type (the spec's apiKey) -> record class
METADATA_RECORD_BY_TYPE: dict[int, type[Message]] = dict(generated.METADATA_RECORDS)
_METADATA_FRAME_VERSION = 1


def encode_metadata_record(record: Message, version: int) -> bytes:
    """Unsigned varints frame version (1), record type and record version, then the record."""
    record_type = type(record).API_KEY
    if record_type is None or METADATA_RECORD_BY_TYPE.get(record_type) is not type(record):
        raise TypeError(f"{type(record).__name__} is not a __cluster_metadata record")
    out = bytearray()
    write_uvarint(out, _METADATA_FRAME_VERSION)
    write_uvarint(out, record_type)
    write_uvarint(out, version)
    record.write_to(out, [], version)
    return bytes(out)


def decode_metadata_record(data: bytes | memoryview) -> tuple[Message, int]:
    """The inverse of `encode_metadata_record`: (record, record version)."""
    view = as_view(data)
    try:
        frame_version, pos = read_uvarint(view, 0)
        record_type, pos = read_uvarint(view, pos)
        version, pos = read_uvarint(view, pos)
    except IndexError:
        raise DecodeError("truncated metadata record header") from None
    if frame_version != _METADATA_FRAME_VERSION:
        raise DecodeError(f"unknown metadata record frame version {frame_version}")
    record_cls = METADATA_RECORD_BY_TYPE.get(record_type)
    if record_cls is None:
        raise DecodeError(f"unknown metadata record type {record_type}")
    return record_cls.decode(view[pos:], version), version
