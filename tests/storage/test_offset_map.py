"""The cleaner's offset map: the latest offset per key, within its memory budget."""

from __future__ import annotations

import resource

import pytest

from odradek.storage.offset_map import ENTRY_OVERHEAD, OffsetMap


def test_latest_offset_per_key_batch_and_one_by_one() -> None:
    offset_map = OffsetMap(10_000_000)
    keys = [b"key-%d" % number for number in range(64)]
    for round_number in range(3):  # updates of 60 keys, batch-wise and one by one
        offsets = [round_number * 100 + index for index in range(60)]
        if round_number == 1:
            assert not offset_map.put_all(zip(keys[:60], offsets))
        else:
            assert not offset_map.put_batch(keys[:60], offsets, sum(map(len, keys[:60])))
    assert not offset_map.put_all((key, 300 + index) for index, key in enumerate(keys[60:]))
    assert len(offset_map) == 64
    assert offset_map.get_many(keys) == [200 + index for index in range(60)] + [300, 301, 302,
                                                                                   303]
    assert offset_map.get(b"absent") == -1
    assert offset_map.get_many([None, keys[3]]) == [-1, 203]
    assert offset_map.latest_offset == 303
    # Offsets 200..259 and 300..303 are the latest of their key; 0..199 are superseded.
    assert offset_map.live_count(0, 199) == 0
    assert offset_map.live_count(200, 259) == 60
    assert offset_map.live_count(250, 301) == 12
    offset_map.put(keys[0], 1000)  # the sorted live offsets follow a later put
    assert offset_map.live_count(200, 200) == 0 and offset_map.live_count(1000, 1000) == 1
    offset_map.clear()
    assert len(offset_map) == 0 and offset_map.latest_offset == -1
    assert offset_map.get(keys[0]) == -1 and offset_map.used_bytes == 0


def test_budget_and_load_factor_bound_the_entries() -> None:
    per_key = ENTRY_OVERHEAD + len(b"k0000")
    offset_map = OffsetMap(1000 * per_key, load_factor=0.9)
    keys = [b"k%04d" % number for number in range(1000)]
    # put_all stops before the entry that would pass the bound and says so.
    assert offset_map.put_all((key, number) for number, key in enumerate(keys))
    assert len(offset_map) == 900 and offset_map.latest_offset == 899
    assert offset_map.get(keys[899]) == 899 and offset_map.get(keys[900]) == -1
    assert offset_map.is_full and offset_map.utilization == pytest.approx(0.9)
    # Updates of known keys cost nothing, even on a full map.
    assert not offset_map.put_all([(keys[0], 2000)])
    assert offset_map.get(keys[0]) == 2000
    with pytest.raises(OverflowError):  # as Kafka's put: a new key on a full map
        offset_map.put(b"k-new", 3000)
    # A batch that might not fit goes key by key, to exactly the same bound.
    offset_map.clear()
    assert not offset_map.put_batch(keys[:800], list(range(800)), 5 * 800)
    assert offset_map.put_batch(keys[800:], list(range(800, 1000)), 5 * 200)
    assert len(offset_map) == 900 and offset_map.latest_offset == 899
    # Offset 0 is a real offset.
    offset_map.clear()
    offset_map.put(b"zero", 0)
    assert offset_map.get(b"zero") == 0


def test_memory_stays_within_the_budget() -> None:
    """Filling a 24 MB map grows the process by at most about the budget."""
    def rss_kib() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize() // 1024

    budget = 24_000_000
    keys = [b"key-%08d" % number for number in range(300_000)]  # made before measuring
    before = rss_kib()
    offset_map = OffsetMap(budget, load_factor=0.9)
    full = False
    for start in range(0, len(keys), 200):
        batch = keys[start:start + 200]
        if offset_map.put_batch([bytes(key) for key in batch],
                                list(range(start, start + len(batch))), 12 * len(batch)):
            full = True
            break
    offset_map.live_count(0, 10)  # with its sorted live offsets
    grown_kib = rss_kib() - before
    assert full and len(offset_map) > 100_000
    assert offset_map.used_bytes <= budget * 0.9
    assert grown_kib < budget / 1024 + 4 * 1024, f"grew {grown_kib} KiB for a {budget} B map"
    assert offset_map.get(b"key-%08d" % 12345) == 12345

