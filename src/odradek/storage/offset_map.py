"""The log cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap), in a memory budget.

Kafka stores each key as its MD5 digest in an open-addressing table of 24-byte slots. In
Python such a table costs a hash call and a probing loop in the interpreter per record (about
4 us a record, most of a cleaning's time); a `dict` does the same in C, one `dict.update` a
batch (about 0.15 us a record). So the map is a `dict` of the keys themselves (bytes, as
decoded) to their latest offset: no digest to compute and no collisions at all (Kafka accepts
the tiny risk of two keys with one MD5).

The price is memory per entry: the dict slot, the key object and the offset object, about
`ENTRY_OVERHEAD + len(key)` bytes instead of Kafka's 24. The budget
(`log.cleaner.dedupe.buffer.size / log.cleaner.threads`, times
`log.cleaner.io.buffer.load.factor`) is kept by counting that estimate for every new key;
when a batch would pass it, its keys are put one at a time up to the bound and the cleaner
cleans the prefix it mapped (Kafka's behaviour with a full map). A budget thus holds about a
fifth of the keys Kafka's would: a log with more distinct keys than that is cleaned in more
passes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from itertools import repeat

# dict slot (index + entry, at the dict's fill) + offset int + the key object's header + the
# sorted live-offset list's slot (`live_offsets`), measured with tracemalloc on CPython 3.11
# (about 85-120 bytes for 12-byte keys), rounded up.
ENTRY_OVERHEAD = 136


class OffsetMap:
    """Keys to the last offset seen for them, in a fixed memory budget."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory = max(memory, 1)
        self.load_factor = load_factor
        self.max_bytes = max(int(self.memory * min(load_factor, 1.0)), 1)
        self._latest: dict[bytes, int] = {}
        self._bytes = 0
        self.latest_offset = -1  # the last offset the map covers (keys or no keys)
        self._live: list[int] | None = None

    def __len__(self) -> int:
        return len(self._latest)

    @property
    def used_bytes(self) -> int:
        """The estimated memory of the entries put."""
        return self._bytes

    @property
    def is_full(self) -> bool:
        return self._bytes >= self.max_bytes

    def put(self, key: bytes, offset: int) -> None:
        """Records `offset` as the latest of `key`; OverflowError when the map is full."""
        if self.put_all(((key, offset),)):
            raise OverflowError("the offset map is full")

    def put_all(self, keys_and_offsets: Iterable[tuple[bytes, int]]) -> bool:
        """Puts each (key, offset) in order until the map is full; returns True when it
        filled up before the end (the rest was not put)."""
        latest = self._latest
        for key, offset in keys_and_offsets:
            if key not in latest:
                cost = ENTRY_OVERHEAD + len(key)
                if self._bytes + cost > self.max_bytes:
                    return True
                self._bytes += cost
            latest[key] = offset
            if offset > self.latest_offset:  # noqa: PLR1730
                self.latest_offset = offset
        self._live = None
        return False

    def put_batch(self, keys: Sequence[bytes], offsets: Sequence[int],
                  key_bytes: int) -> bool:
        """`put_all(zip(keys, offsets))` for one batch's records in offset order, whose keys
        total `key_bytes`: in C (one `dict.update`) when the whole batch fits the budget even
        if every key were new, else key by key. Returns True when the map filled up."""
        if self._bytes + ENTRY_OVERHEAD * len(keys) + key_bytes > self.max_bytes:
            return self.put_all(zip(keys, offsets))
        latest = self._latest
        before = len(latest)
        latest.update(zip(keys, offsets))
        added = len(latest) - before
        if added:
            # Exact for a batch of new keys, an estimate for a mix (the average key size).
            self._bytes += added * ENTRY_OVERHEAD + key_bytes * added // len(keys)
        if offsets and offsets[-1] > self.latest_offset:
            self.latest_offset = offsets[-1]
        self._live = None
        return False

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, -1 when the map does not have it."""
        return self._latest.get(key, -1)

    def get_many(self, keys: Iterable[bytes | None]) -> list[int]:
        """`get` of each key (-1 for a None key or one the map does not have), in C."""
        # None is never a key of the map, so it gets the default too.
        return list(map(self._latest.get, keys, repeat(-1)))

    def live_count(self, first: int, last: int) -> int:
        """How many of the offsets in [first, last] are the latest of their key: a batch
        wholly covered by the map is dropped (0) or kept as it is (all of its records)
        without decoding its records."""
        live = self._live
        if live is None:
            live = self._live = sorted(self._latest.values())
        return bisect.bisect_right(live, last) - bisect.bisect_left(live, first)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        self._latest = {}
        self._bytes = 0
        self._live = None
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return self._bytes / self.memory
