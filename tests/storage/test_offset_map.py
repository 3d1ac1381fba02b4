"""The cleaner's offset map: an open-addressing table whose memory is the configured budget."""

from __future__ import annotations

import resource

import pytest

from odradek.storage.offset_map import BYTES_PER_ENTRY, OffsetMap


def test_latest_offset_per_key_with_collisions_and_wraparound() -> None:
    offset_map = OffsetMap(BYTES_PER_ENTRY * 64, load_factor=1.0)
    assert offset_map.slots == 64 and offset_map.max_entries == 64
    keys = [b"key-%d" % number for number in range(64)]
    for round_number in range(3):  # updates of 60 keys, then 4 more fill every slot
        assert not offset_map.put_all((key, round_number * 100 + index)
                                      for index, key in enumerate(keys[:60]))
    assert not offset_map.put_all((key, 300 + index) for index, key in enumerate(keys[60:]))
    assert len(offset_map) == 64 and offset_map.is_full
    assert offset_map.get_many(keys) == [200 + index for index in range(60)] + [300, 301, 302,
                                                                                   303]
    assert offset_map.get(b"absent") == -1  # a full table: the probe stops after every slot
    assert offset_map.get_many([None, keys[3]]) == [-1, 203]
    assert offset_map.latest_offset == 303
    assert offset_map.collision_rate > 0  # 64 keys in 64 slots must collide
    with pytest.raises(OverflowError):  # as Kafka's put: no put at all on a full map
        offset_map.put(keys[0], 1000)
    assert offset_map.get(keys[0]) == 200
    offset_map.clear()
    assert len(offset_map) == 0 and offset_map.latest_offset == -1
    assert offset_map.get(keys[0]) == -1


def test_capacity_and_load_factor_as_kafka() -> None:
    offset_map = OffsetMap(1000 * BYTES_PER_ENTRY + 7, load_factor=0.9)
    assert offset_map.slots == 1000 and offset_map.max_entries == 900
    assert offset_map.memory == 24_000
    keys = [b"k%d" % number for number in range(1000)]
    # put_all stops before the entry that would pass the bound and says so.
    assert offset_map.put_all((key, number) for number, key in enumerate(keys))
    assert len(offset_map) == 900 and offset_map.latest_offset == 899
    assert offset_map.get(keys[899]) == 899 and offset_map.get(keys[900]) == -1
    assert offset_map.utilization == 0.9
    # Offset 0 is a real offset (slots store offset + 1: zero means empty).
    offset_map.clear()
    offset_map.put(b"zero", 0)
    assert offset_map.get(b"zero") == 0


def test_memory_is_the_budget_not_per_entry_objects() -> None:
    """500k keys in a 24 MB map: the process grows by about the budget (the dict version
    took over 100 bytes per entry on top, 60+ MB here)."""
    def rss_kib() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize() // 1024

    budget = 1_000_000 * BYTES_PER_ENTRY
    before = rss_kib()
    offset_map = OffsetMap(budget, load_factor=0.9)
    for start in range(0, 500_000, 10_000):
        offset_map.put_all((b"key-%d" % number, number) for number in range(start, start + 10_000))
    grown_kib = rss_kib() - before
    assert len(offset_map) == 500_000
    assert grown_kib < budget / 1024 + 8 * 1024, f"grew {grown_kib} KiB for a {budget} B map"
    assert offset_map.get(b"key-123456") == 123456
    # A map over a few keys touches only their pages: lazily zero anonymous memory.
    small_before = rss_kib()
    big = OffsetMap(128 * 1024 * 1024)
    big.put_all((b"key-%d" % number, number) for number in range(100))
    assert rss_kib() - small_before < 8 * 1024
