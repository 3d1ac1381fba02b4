"""The log cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap).

Keys are stored as their MD5 digest (16 bytes), as Kafka does, so the map's size depends on
the number of distinct keys, not on their length. Its capacity is what Kafka's byte budget
allows: `memory // (16 + 8)` slots (digest plus offset), of which the cleaner fills at most
`slots * log.cleaner.io.buffer.load.factor` before it stops and cleans the prefix it mapped.
(Python's dict takes more memory per entry than Kafka's open-addressing array; the budget
bounds the number of entries the same way.)
"""

from __future__ import annotations

import hashlib

HASH_SIZE = 16  # MD5
BYTES_PER_ENTRY = HASH_SIZE + 8


class OffsetMap:
    """Key digests to the last offset seen for them, bounded by a memory budget."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.slots = max(memory // BYTES_PER_ENTRY, 1)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset the map covers (keys or no keys)

    @staticmethod
    def digest(key: bytes | bytearray | memoryview) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Records `offset` as the latest of `key` (the caller checks `is_full` first: an
        existing key never needs a new slot, but the cleaner stops at the bound anyway, as
        Kafka does)."""
        self._offsets[self.digest(key)] = offset
        self.latest_offset = max(self.latest_offset, offset)

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset of `key`, -1 when the map does not have it."""
        return self._offsets.get(self.digest(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots
