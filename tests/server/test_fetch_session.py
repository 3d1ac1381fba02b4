"""Incremental fetch sessions (KIP-227): the bounded LRU cache, the session epochs of
new_fetch, and which partitions a full or incremental response carries."""

from __future__ import annotations

import random
from types import SimpleNamespace

from odradek.protocol.errors import ErrorCode
from odradek.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    PartitionKey,
    SessionFetch,
    from_request_partition,
    new_fetch,
    partition_changed,
)


def cached(fetch_offset: int = 0) -> CachedPartition:
    return CachedPartition(fetch_offset=fetch_offset, max_bytes=1 << 20, current_leader_epoch=0,
                           last_fetched_epoch=-1, log_start_offset=-1)


def requested(*keys: PartitionKey, offset: int = 0) -> list[tuple[PartitionKey, CachedPartition]]:
    return [(key, cached(offset)) for key in keys]


A, B, C = ("a", 0), ("a", 1), ("b", 0)


def new_cache(max_sessions: int = 10) -> FetchSessionCache:
    return FetchSessionCache(max_sessions, rng=random.Random(13))


def open_session(cache: FetchSessionCache, *keys: PartitionKey) -> SessionFetch:
    fetch = new_fetch(cache, INVALID_SESSION_ID, INITIAL_EPOCH, requested(*keys), [])
    assert fetch.error == ErrorCode.NONE and fetch.session is not None
    return fetch


# -- the cache ---------------------------------------------------------------------------------
def test_cache_evicts_the_least_recently_used_session() -> None:
    cache = new_cache(max_sessions=2)
    first, second = cache.create(), cache.create()
    assert first is not None and second is not None
    assert first.session_id != second.session_id
    assert first.epoch == 1  # the next request of the session carries epoch 1
    assert cache.get(first.session_id) is first  # used: now the most recent
    third = cache.create()
    assert third is not None
    assert set(cache.sessions) == {first.session_id, third.session_id}
    assert cache.get(second.session_id) is None


def test_cache_without_slots_creates_no_session() -> None:
    cache = new_cache(max_sessions=0)
    assert cache.create() is None
    fetch = new_fetch(cache, INVALID_SESSION_ID, INITIAL_EPOCH, requested(A), [])
    assert fetch.error == ErrorCode.NONE and fetch.session is None
    assert fetch.session_id == INVALID_SESSION_ID
    assert [key for key, _ in fetch.partitions] == [A]


def test_remove_forgets_the_session() -> None:
    cache = new_cache()
    session = cache.create()
    assert session is not None
    cache.remove(session.session_id)
    cache.remove(session.session_id)  # twice is harmless
    assert cache.get(session.session_id) is None and not cache.sessions


def test_session_ids_are_never_the_invalid_id() -> None:
    cache = new_cache(max_sessions=200)
    ids = {session.session_id for session in (cache.create() for _ in range(200))
           if session is not None}
    assert len(ids) == 200 and INVALID_SESSION_ID not in ids


# -- new_fetch epochs --------------------------------------------------------------------------
def test_final_epoch_is_a_sessionless_full_fetch_that_closes_the_session() -> None:
    cache = new_cache()
    opened = open_session(cache, A)
    fetch = new_fetch(cache, opened.session_id, FINAL_EPOCH, requested(A, B), [])
    assert fetch.error == ErrorCode.NONE and fetch.session is None
    assert fetch.session_id == INVALID_SESSION_ID and not fetch.incremental
    assert [key for key, _ in fetch.partitions] == [A, B]
    assert opened.session_id not in cache.sessions
    # Without a session id (a plain sessionless fetch) nothing is removed.
    other = open_session(cache, C)
    assert new_fetch(cache, INVALID_SESSION_ID, FINAL_EPOCH, requested(A), []).error == 0
    assert other.session_id in cache.sessions


def test_initial_epoch_opens_a_session_with_the_partitions_named() -> None:
    cache = new_cache()
    fetch = open_session(cache, A, B)
    assert fetch.session is not None and not fetch.incremental
    assert fetch.session_id == fetch.session.session_id != INVALID_SESSION_ID
    assert list(fetch.session.partitions) == [A, B]
    assert [key for key, _ in fetch.partitions] == [A, B]


def test_initial_epoch_with_a_session_id_replaces_that_session() -> None:
    cache = new_cache()
    old = open_session(cache, A)
    fetch = new_fetch(cache, old.session_id, INITIAL_EPOCH, requested(B), [])
    assert fetch.session is not None and fetch.session_id != old.session_id
    assert set(cache.sessions) == {fetch.session_id}
    assert list(fetch.session.partitions) == [B]


def test_incremental_fetch_advances_the_epoch_and_fetches_every_session_partition() -> None:
    cache = new_cache()
    opened = open_session(cache, A, B)
    # Epoch 1 names only a changed position (B) and a new partition (C).
    fetch = new_fetch(cache, opened.session_id, 1, requested(B, C, offset=40), [])
    assert fetch.error == ErrorCode.NONE and fetch.incremental
    assert fetch.session is opened.session and fetch.session_id == opened.session_id
    assert fetch.session.epoch == 2
    positions = {key: partition.fetch_offset for key, partition in fetch.partitions}
    assert positions == {A: 0, B: 40, C: 40}
    assert new_fetch(cache, opened.session_id, 2, [], []).error == ErrorCode.NONE


def test_forgotten_partitions_leave_the_session() -> None:
    cache = new_cache()
    opened = open_session(cache, A, B, C)
    fetch = new_fetch(cache, opened.session_id, 1, [], [B, ("never", 9)])
    assert fetch.error == ErrorCode.NONE
    assert [key for key, _ in fetch.partitions] == [A, C]
    assert opened.session is not None and list(opened.session.partitions) == [A, C]


def test_unknown_session_is_an_error() -> None:
    cache = new_cache()
    fetch = new_fetch(cache, 12345, 1, requested(A), [])
    assert fetch.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert fetch.session is None and fetch.partitions == []


def test_wrong_epoch_is_an_error_and_does_not_advance_the_session() -> None:
    cache = new_cache()
    opened = open_session(cache, A)
    assert opened.session is not None
    for wrong in (2, 5):
        fetch = new_fetch(cache, opened.session_id, wrong, requested(A), [])
        assert fetch.error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert fetch.partitions == []
    assert opened.session.epoch == 1
    assert new_fetch(cache, opened.session_id, 1, [], []).error == ErrorCode.NONE
    # A replayed epoch (the same request sent twice) is refused too.
    assert new_fetch(cache, opened.session_id, 1, [], []).error == \
        ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_an_evicted_session_is_not_found() -> None:
    cache = new_cache(max_sessions=1)
    first = open_session(cache, A)
    open_session(cache, B)
    assert new_fetch(cache, first.session_id, 1, [], []).error == \
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND


# -- what a response carries -------------------------------------------------------------------
def include(fetch: SessionFetch, partition: CachedPartition, *, records: bool = False,
            error: int = 0, hw: int = 10, log_start: int = 0, lso: int = 10) -> bool:
    return fetch.include(partition, records, error, hw, log_start, lso)


def test_sessionless_fetch_includes_everything() -> None:
    fetch = new_fetch(new_cache(), INVALID_SESSION_ID, FINAL_EPOCH, requested(A), [])
    partition = fetch.partitions[0][1]
    assert include(fetch, partition) and include(fetch, partition)


def test_full_fetch_includes_every_partition_and_remembers_what_it_sent() -> None:
    cache = new_cache()
    opened = open_session(cache, A)
    partition = opened.partitions[0][1]
    assert include(opened, partition, hw=10, log_start=2, lso=9)
    assert include(opened, partition, hw=10, log_start=2, lso=9)  # unchanged: still included
    assert (partition.sent_high_watermark, partition.sent_log_start_offset,
            partition.sent_last_stable_offset) == (10, 2, 9)


def test_incremental_fetch_includes_only_what_changed() -> None:
    cache = new_cache()
    opened = open_session(cache, A, B)
    for _, partition in opened.partitions:
        include(opened, partition, hw=10, log_start=0, lso=10)
    fetch = new_fetch(cache, opened.session_id, 1, [], [])
    parts = dict(fetch.partitions)
    assert not include(fetch, parts[A], hw=10, log_start=0, lso=10)
    assert include(fetch, parts[A], records=True)
    assert include(fetch, parts[A], error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert include(fetch, parts[B], hw=11, lso=10)
    assert not include(fetch, parts[B], hw=11, lso=10)  # what was sent is remembered
    assert include(fetch, parts[B], hw=11, lso=11)
    assert include(fetch, parts[B], hw=11, lso=11, log_start=3)


def test_a_new_position_keeps_what_the_client_was_last_told() -> None:
    cache = new_cache()
    opened = open_session(cache, A)
    include(opened, opened.partitions[0][1], hw=10, log_start=0, lso=10)
    moved = requested(A, offset=10)
    fetch = new_fetch(cache, opened.session_id, 1, moved, [])
    partition = dict(fetch.partitions)[A]
    assert partition is moved[0][1] and partition.fetch_offset == 10
    assert (partition.sent_high_watermark, partition.sent_last_stable_offset) == (10, 10)
    assert not include(fetch, partition, hw=10, log_start=0, lso=10)


def test_partition_changed_records_the_sent_offsets_only_when_changed() -> None:
    partition = cached()
    assert partition_changed(partition, False, 0, 5, 0, 5)
    partition.sent_high_watermark = 7  # pretend something else was sent
    assert partition_changed(partition, False, 0, 5, 0, 5)
    assert partition.sent_high_watermark == 5
    assert not partition_changed(partition, False, 0, 5, 0, 5)


def test_from_request_partition_takes_the_request_fields() -> None:
    request_partition = SimpleNamespace(fetch_offset=42, partition_max_bytes=1024,
                                        current_leader_epoch=3, last_fetched_epoch=2,
                                        log_start_offset=-1)
    partition = from_request_partition(request_partition)
    assert (partition.fetch_offset, partition.max_bytes, partition.current_leader_epoch,
            partition.last_fetched_epoch, partition.log_start_offset) == (42, 1024, 3, 2, -1)
    assert partition.sent_high_watermark == -1
