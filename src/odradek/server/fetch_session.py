"""Incremental fetch sessions (KIP-227).

A client that fetches many partitions can open a session with a full fetch (epoch 0); later
fetches (epoch 1, 2, ...) only name partitions whose fetch position changed, and responses only
carry partitions with something new. The cache is bounded and evicts the least recently used
session, like Kafka's `max.incremental.fetch.session.cache.slots`.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    # What the client was last told, so unchanged partitions can be left out.
    sent_high_watermark: int = -1
    sent_log_start_offset: int = -1
    sent_last_stable_offset: int = -1


@dataclass
class FetchSession:
    session_id: int
    epoch: int
    partitions: OrderedDict[Hashable, CachedPartition] = field(default_factory=OrderedDict)
    last_used: float = 0.0


class FetchSessionCache:
    def __init__(self, max_sessions: int = 1000, rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._rng = rng or random.Random()

    def _new_id(self) -> int:
        for _ in itertools.repeat(None, 100):
            session_id = self._rng.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                return session_id
        raise RuntimeError("could not allocate a fetch session id")

    def create(self) -> FetchSession | None:
        if self.max_sessions <= 0:
            return None
        while len(self.sessions) >= self.max_sessions:
            self.sessions.popitem(last=False)
        session = FetchSession(self._new_id(), epoch=1, last_used=time.monotonic())
        self.sessions[session.session_id] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        if session is not None:
            self.sessions.move_to_end(session_id)
            session.last_used = time.monotonic()
        return session

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)


#: a partition as a fetch names it: (topic name (v<=12) or topic id (v13+), partition index)
PartitionKey = tuple[Hashable, int]


@dataclass
class SessionFetch:
    """What one Fetch request asks for once its session is applied (Kafka's FetchContext)."""

    error: ErrorCode = ErrorCode.NONE
    session: FetchSession | None = None
    session_id: int = INVALID_SESSION_ID  # what the response carries
    incremental: bool = False
    partitions: list[tuple[PartitionKey, CachedPartition]] = field(default_factory=list)

    def include(self, cached: CachedPartition, has_records: bool, error: int,
                high_watermark: int, log_start_offset: int, last_stable_offset: int) -> bool:
        """Whether the response carries this partition; a session remembers what was sent.
        Full fetches carry every partition, incremental ones only those that changed."""
        if self.session is None:
            return True
        changed = partition_changed(cached, has_records, error, high_watermark,
                                    log_start_offset, last_stable_offset)
        return changed or not self.incremental


def new_fetch(cache: FetchSessionCache, session_id: int, session_epoch: int,
              requested: list[tuple[PartitionKey, CachedPartition]],
              forgotten: Iterable[PartitionKey]) -> SessionFetch:
    """Applies a Fetch v7+ request's session fields (KIP-227): epoch -1 closes the session
    (a sessionless full fetch), epoch 0 opens a new one with the partitions named, later
    epochs update the session's partitions and fetch all of them."""
    if session_epoch == FINAL_EPOCH:
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        return SessionFetch(partitions=requested)
    if session_epoch == INITIAL_EPOCH:
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        session = cache.create()
        if session is None:
            return SessionFetch(partitions=requested)
        for key, cached in requested:
            session.partitions[key] = cached
        return SessionFetch(session=session, session_id=session.session_id,
                            partitions=requested)
    session = cache.get(session_id)
    if session is None:
        return SessionFetch(error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != session_epoch:
        return SessionFetch(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    session.epoch += 1
    for key, cached in requested:
        prior = session.partitions.get(key)
        if prior is not None:
            # Keep what the client was last told; take its new position.
            cached.sent_high_watermark = prior.sent_high_watermark
            cached.sent_log_start_offset = prior.sent_log_start_offset
            cached.sent_last_stable_offset = prior.sent_last_stable_offset
        session.partitions[key] = cached
    for key in forgotten:
        session.partitions.pop(key, None)
    return SessionFetch(session=session, session_id=session.session_id, incremental=True,
                        partitions=list(session.partitions.items()))


def partition_changed(cached: CachedPartition, has_records: bool, error: int,
                      high_watermark: int, log_start_offset: int, last_stable_offset: int) -> bool:
    """Whether an incremental response must include this partition (and remember what it sent)."""
    changed = (
        has_records
        or error != 0
        or high_watermark != cached.sent_high_watermark
        or log_start_offset != cached.sent_log_start_offset
        or last_stable_offset != cached.sent_last_stable_offset
    )
    if changed:
        cached.sent_high_watermark = high_watermark
        cached.sent_log_start_offset = log_start_offset
        cached.sent_last_stable_offset = last_stable_offset
    return changed


def from_request_partition(p: Any) -> CachedPartition:
    return CachedPartition(
        fetch_offset=p.fetch_offset,
        max_bytes=p.partition_max_bytes,
        current_leader_epoch=p.current_leader_epoch,
        last_fetched_epoch=p.last_fetched_epoch,
        log_start_offset=p.log_start_offset,
    )
