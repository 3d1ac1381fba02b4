"""The log cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap).

Keys are stored as their MD5 digest (16 bytes), as Kafka does, so the map's size depends on
the number of distinct keys, not on their length. The map is one open-addressing hash table
of `memory // 24` slots, each a 16-byte digest and an 8-byte offset, so its memory is the
configured budget (`log.cleaner.dedupe.buffer.size / log.cleaner.threads`) and nothing more:
no per-entry Python objects. The cleaner fills at most `slots * load factor` of them
(`log.cleaner.io.buffer.load.factor`) before it stops and cleans the prefix it mapped.

Layout: two anonymous private mmaps, the digests (`slots * 16` bytes) and the offsets
(`slots` signed 64-bit integers, stored as offset + 1 so that a zero-filled slot is empty).
Anonymous pages are zero until first written, so a map over a small log touches only the pages
its keys land in, and `clear()` maps fresh zero pages instead of rewriting the whole budget.
Collisions are resolved by linear probing from the slot the digest's value selects, as
Kafka's SkimpyOffsetMap (which first tries other 4-byte windows of the digest) ends up doing.
"""

from __future__ import annotations

import hashlib
import mmap
from collections.abc import Iterable

HASH_SIZE = 16  # MD5
OFFSET_SIZE = 8
BYTES_PER_ENTRY = HASH_SIZE + OFFSET_SIZE

_md5 = hashlib.md5


def _anonymous(size: int) -> mmap.mmap:
    return mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class OffsetMap:
    """Key digests to the last offset seen for them, in a fixed memory budget."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.slots = max(memory // BYTES_PER_ENTRY, 1)
        self.max_entries = max(min(int(self.slots * load_factor), self.slots), 1)
        self._entries = 0
        self.latest_offset = -1  # the last offset the map covers (keys or no keys)
        self.lookups = 0
        self.probes = 0
        self._allocate()

    def _allocate(self) -> None:
        self._hash_buffer = _anonymous(self.slots * HASH_SIZE)
        self._offset_buffer = _anonymous(self.slots * OFFSET_SIZE)
        self._offsets = memoryview(self._offset_buffer).cast("q")

    @property
    def memory(self) -> int:
        """The bytes the table takes (its two buffers)."""
        return self.slots * BYTES_PER_ENTRY

    @staticmethod
    def digest(key: bytes | bytearray | memoryview) -> bytes:
        return _md5(key, usedforsecurity=False).digest()

    def __len__(self) -> int:
        return self._entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Records `offset` as the latest of `key`; OverflowError when the map is full."""
        if self.put_all(((key, offset),)):
            raise OverflowError("the offset map is full")

    def put_all(self, keys_and_offsets: Iterable[tuple[bytes | memoryview, int]]) -> bool:
        """Puts each (key, offset) in order until the map is full; returns True when it
        filled up before the end (the rest was not put). One call per batch of records: the
        loop keeps its lookups in locals, which is most of the cost in Python."""
        slots, hashes, offsets = self.slots, self._hash_buffer, self._offsets
        entries, max_entries, latest = self._entries, self.max_entries, self.latest_offset
        full = False
        for key, offset in keys_and_offsets:
            if entries >= max_entries:
                full = True
                break
            digest = _md5(key, usedforsecurity=False).digest()
            slot = int.from_bytes(digest, "little") % slots
            probes = 0
            while True:
                stored = offsets[slot]
                position = slot * HASH_SIZE
                if stored == 0:
                    hashes[position:position + HASH_SIZE] = digest
                    entries += 1
                    break
                if hashes[position:position + HASH_SIZE] == digest:
                    break
                probes += 1
                if probes == slots:  # cannot happen below max_entries <= slots; a guard
                    raise OverflowError("the offset map is full")
                slot += 1
                if slot == slots:
                    slot = 0
            offsets[slot] = offset + 1
            if offset > latest:  # noqa: PLR1730 (max() is a call per record)
                latest = offset
        self._entries, self.latest_offset = entries, latest
        return full

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset of `key`, -1 when the map does not have it."""
        return self.get_many((key,))[0]

    def get_many(self, keys: Iterable[bytes | memoryview | None]) -> list[int]:
        """`get` of each key (-1 for a None key or one the map does not have), in one call:
        the cleaner asks for the keys of a whole batch at once."""
        slots, hashes, offsets = self.slots, self._hash_buffer, self._offsets
        result: list[int] = []
        append = result.append
        lookups = probes = 0
        for key in keys:
            if key is None:
                append(-1)
                continue
            lookups += 1
            digest = _md5(key, usedforsecurity=False).digest()
            slot = int.from_bytes(digest, "little") % slots
            first_probe = probes
            while True:
                stored = offsets[slot]
                if stored == 0:
                    append(-1)
                    break
                position = slot * HASH_SIZE
                if hashes[position:position + HASH_SIZE] == digest:
                    append(stored - 1)
                    break
                probes += 1
                if probes - first_probe == slots:  # a full table without this key
                    append(-1)
                    break
                slot += 1
                if slot == slots:
                    slot = 0
        self.lookups += lookups
        self.probes += probes
        return result

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        """Empties the map. Fresh zero pages rather than a rewrite of the whole budget: the
        old pages go back to the system, and only the slots the next cleaning uses are
        touched."""
        self._offsets.release()
        self._hash_buffer.close()
        self._offset_buffer.close()
        self._allocate()
        self._entries = 0
        self.latest_offset = -1
        self.lookups = self.probes = 0

    @property
    def utilization(self) -> float:
        return self._entries / self.slots

    @property
    def collision_rate(self) -> float:
        """Extra probes per lookup (Kafka's collisionRate)."""
        return self.probes / self.lookups if self.lookups else 0.0
