from __future__ import annotations

from pathlib import Path

from odradek.storage.checkpoint import LeaderEpochCheckpointFile
from odradek.storage.epoch import LeaderEpochFileCache


def make_cache(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_assign_is_monotonic_and_persisted(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(0, 0), (1, 10), (1, 15), (3, 20)])
    assert cache.entries == [(0, 0), (1, 10), (3, 20)]
    # A new entry that breaks monotonicity removes the entries it conflicts with.
    cache.assign(2, 15)
    assert cache.entries == [(0, 0), (1, 10), (2, 15)]
    reloaded = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    assert reloaded.entries == [(0, 0), (1, 10), (2, 15)]
    assert reloaded.latest_epoch == 2


def test_end_offset_for_follows_offsets_for_leader_epoch(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(1, 5), (3, 20), (6, 40)])
    log_end = 55
    assert cache.end_offset_for(6, log_end) == (6, 55)  # latest epoch: log end offset
    assert cache.end_offset_for(3, log_end) == (3, 40)
    assert cache.end_offset_for(4, log_end) == (3, 40)  # unknown epoch: the one below it
    assert cache.end_offset_for(0, log_end) == (0, 5)  # older than all: first start offset
    assert cache.end_offset_for(7, log_end) == (-1, -1)
    assert cache.end_offset_for(-1, log_end) == (-1, -1)


def test_empty_cache_knows_no_epoch() -> None:
    cache = LeaderEpochFileCache(None)
    assert cache.end_offset_for(1, 3) == (-1, -1)
    assert cache.latest_epoch is None


def test_truncate_from_end_and_start(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(1, 5), (3, 20), (6, 40)])
    cache.truncate_from_end(40)
    assert cache.entries == [(1, 5), (3, 20)]
    cache.truncate_from_end(100)  # nothing at/after 100
    assert cache.entries == [(1, 5), (3, 20)]
    cache.truncate_from_start(25)
    assert cache.entries == [(3, 25)]
    assert cache.epoch_for_offset(30) == 3
    assert cache.epoch_for_offset(3) is None
    cache.clear_and_flush()
    assert cache.entries == []
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n0\n"
