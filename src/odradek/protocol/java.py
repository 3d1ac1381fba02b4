"""Java semantics that Kafka's behaviour depends on: String.hashCode, Utils.abs, HashMap order.

Kafka places a group on the `__consumer_offsets` partition ``abs(groupId.hashCode()) % N``, and
its tools print rows in the iteration order of Java HashMaps; reproducing either needs Java's
32-bit string hash, defined once here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = [
    "java_hashmap_order",
    "java_string_hashcode",
    "kafka_abs",
    "to_signed32",
    "to_unsigned32",
    "topic_partition_hashcode",
]

K = TypeVar("K")

_INT32_MIN = -(1 << 31)
_UINT32_MASK = 0xFFFFFFFF


def to_signed32(value: int) -> int:
    """The Java int that the low 32 bits of `value` make."""
    value &= _UINT32_MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def to_unsigned32(value: int) -> int:
    """A Java int's bits read as an unsigned number (Integer.toUnsignedLong)."""
    return value & _UINT32_MASK


def java_string_hashcode(text: str) -> int:
    """Java's String.hashCode: int32 arithmetic over the UTF-16 code units (signed result).

    Lone surrogates, which a Java String may hold, hash as their code unit.
    """
    value = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for index in range(0, len(data), 2):
        value = (31 * value + (data[index] << 8 | data[index + 1])) & _UINT32_MASK
    return to_signed32(value)


def kafka_abs(value: int) -> int:
    """Kafka's Utils.abs: Math.abs, except Integer.MIN_VALUE maps to 0."""
    return 0 if value == _INT32_MIN else abs(value)


def topic_partition_hashcode(tp: tuple[str, int]) -> int:
    """Java's TopicPartition.hashCode: ``31 * (31 + partition) + topic.hashCode()`` (int32)."""
    topic, partition = tp
    return to_signed32(31 * (31 + partition) + java_string_hashcode(topic))


def _table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the power of two at or above `capacity` (at least 1)."""
    return 1 if capacity <= 1 else 1 << (capacity - 1).bit_length()


def java_hashmap_order(keys: Iterable[K], hashcode: Callable[[K], int] | None = None,
                       initial_capacity: int | None = None, copy: bool = False) -> list[K]:
    """The iteration order of a Java HashMap after putting `keys` in this order.

    `hashcode` is the keys' Java hashCode (default: String.hashCode). The map is
    ``new HashMap<>(initial_capacity)`` (default 16) or, with `copy`, the copy constructor
    ``new HashMap<>(otherMap)``; the table doubles past 3/4 full. Iteration goes by bucket (the
    spread hash masked by the table size), and within a bucket by insertion order.
    """
    items = list(keys)
    key_hash: Callable[[Any], int] = java_string_hashcode if hashcode is None else hashcode
    count = len(items)
    if copy:
        capacity = _table_size_for(int(count / 0.75 + 1.0))
    else:
        capacity = _table_size_for(16 if initial_capacity is None else initial_capacity)
    while count > int(capacity * 0.75):
        capacity *= 2

    def bucket(key: K) -> int:
        hashed = key_hash(key) & _UINT32_MASK
        return (hashed ^ (hashed >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)
