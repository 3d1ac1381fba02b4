"""Choosing a record's partition the way Kafka's Java producer does.

* A record with a key goes to ``toPositive(murmur2(key)) % numPartitions``: Kafka's
  ``Utils.murmur2`` over the serialized key, so a key lands on the same partition as with the
  Java client (and librdkafka's ``murmur2_random`` partitioner).
* A record without a key (or with ``partitioner.ignore.keys``) goes to the topic's current
  "sticky" partition (KIP-480), which changes once ``batch.size`` bytes have been produced to it
  (KIP-794, uniform sticky partitioning; the accumulator counts them). The next sticky
  partition is drawn among partitions that have a leader; with
  ``partitioner.adaptive.partitioning.enable`` the draw favours partitions with shorter queues
  in the accumulator, like Kafka's BuiltInPartitioner.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2`` (MurmurHash2, seed 0x9747b28c) as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    if whole:
        for k in struct.unpack_from(f"<{whole // 4}I", data):
            k = (k * _M) & _MASK32
            k ^= k >> 24
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[whole + 2] << 16
    if extra >= 2:
        h ^= data[whole + 1] << 8
    if extra >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of a 32-bit value."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Where the sticky partition of a topic goes next (Kafka's BuiltInPartitioner policy).

    The accumulator keeps each topic's current sticky partition and the bytes produced to it
    (it appends under its own lock) and asks `next_partition` when a new one is needed.
    `queue_sizes(topic)` returns the number of batches queued per partition; it is used for
    adaptive partitioning when given.
    """

    def __init__(
        self,
        *,
        adaptive: bool = True,
        queue_sizes: Callable[[str], dict[int, int]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.adaptive = adaptive
        self._queue_sizes = queue_sizes
        self._rng = rng or random.Random()

    def next_partition(self, topic: str, num_partitions: int, available: Sequence[int],
                       previous: int) -> int:
        """A partition with a leader (any partition when none has one), other than
        `previous` when there is a choice; with adaptive partitioning, likelier the shorter
        its queue."""
        candidates = [p for p in available if p < num_partitions] or list(range(num_partitions))
        if len(candidates) > 1 and previous in candidates:
            candidates.remove(previous)
        if self.adaptive and self._queue_sizes is not None and len(candidates) > 1:
            queued = self._queue_sizes(topic)
            sizes = [queued.get(p, 0) for p in candidates]
            longest = max(sizes)
            if longest > min(sizes):
                # Kafka's weights: the shorter a partition's queue, the likelier it is chosen.
                weights = [longest + 1 - size for size in sizes]
                return self._rng.choices(candidates, weights)[0]
        return self._rng.choice(candidates)
