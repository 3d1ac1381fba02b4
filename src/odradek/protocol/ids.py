"""Kafka's text form of a `Uuid` (topic ids, directory ids, cluster ids).

Kafka prints a Uuid as the URL-safe base64 of its 16 bytes without padding: 22 characters,
e.g. ``NPmZHyhbR9y00wMglMH2sg``. Tools, logs and `partition.metadata` files use this form.
"""

from __future__ import annotations

import base64
import re
import uuid

__all__ = ["kafka_str_to_uuid", "uuid_to_kafka_str"]

_UUID_BYTES = 16
# 22 characters encode 132 bits; the last one carries only 2 data bits (A, Q, g or w).
_KAFKA_UUID = re.compile(r"[A-Za-z0-9_-]{21}[AQgw]")


def uuid_to_kafka_str(value: uuid.UUID | bytes) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, no ``=`` padding."""
    raw = value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    if len(raw) != _UUID_BYTES:
        raise ValueError(f"a uuid has {_UUID_BYTES} bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def kafka_str_to_uuid(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString()``; raises ValueError for anything but 16 encoded bytes."""
    if not _KAFKA_UUID.fullmatch(text):
        raise ValueError(f"invalid uuid {text!r}: expected 22 base64url characters")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
