"""Fetch (long poll, incremental sessions, file regions), ListOffsets, OffsetForLeaderEpoch."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    from_request_partition,
    partition_changed,
)
from odradek.server.replica_manager import (
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_EPOCH,
    ReadResult,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.network import RequestContext

FR = m.FetchResponse
READ_COMMITTED = 1
ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class _Wanted:
    key: Any  # name (v<=12) or topic id (v13+), as the client names it
    topic: str | None
    partition: int
    fetch: CachedPartition


def _resolve(broker: Broker, version: int, req: m.FetchRequest) -> list[_Wanted]:
    wanted = []
    by_id = broker.replica_manager.by_topic_id
    for t in req.topics:
        if version >= 13:
            key, topic = t.topic_id, by_id.get(t.topic_id)
        else:
            key, topic = t.topic, t.topic
        for p in t.partitions:
            wanted.append(_Wanted(key, topic, p.partition, from_request_partition(p)))
    return wanted


def _read_all(broker: Broker, version: int, wanted: list[_Wanted], max_bytes: int,
              read_committed: bool) -> tuple[list[ReadResult], int]:
    replica_manager = broker.replica_manager
    results = []
    total = 0
    for w in wanted:
        if w.topic is None:
            results.append(ReadResult(ErrorCode.UNKNOWN_TOPIC_ID))
            continue
        budget = min(w.fetch.max_bytes, max(0, max_bytes - total))
        result = replica_manager.read(
            w.topic, w.partition, w.fetch.fetch_offset, budget,
            current_leader_epoch=w.fetch.current_leader_epoch,
            read_committed=read_committed,
            # Like Kafka: the first partition with data may exceed the limits so progress is
            # always possible.
            min_one_batch=total == 0,
            last_fetched_epoch=w.fetch.last_fetched_epoch if version >= 12 else NO_EPOCH,
        )
        if result.records is not None:
            total += len(result.records)
        results.append(result)
    return results, total


async def fetch(broker: Broker, ctx: RequestContext, req: m.FetchRequest):
    version = ctx.api_version
    replica_id = req.replica_state.replica_id if version >= 15 else req.replica_id
    if replica_id >= 0:
        # Follower fetching comes with replication; until then no broker fetches from us.
        return FR(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    read_committed = version >= 4 and req.isolation_level == READ_COMMITTED
    max_bytes = req.max_bytes if version >= 3 else 2**31 - 1
    max_bytes = min(max_bytes, broker.fetch_max_bytes)

    sessions = broker.fetch_sessions
    session = None
    new_session_id = INVALID_SESSION_ID
    incremental = False
    requested = _resolve(broker, version, req)
    if version >= 7:
        if req.session_epoch == FINAL_EPOCH:
            if req.session_id != INVALID_SESSION_ID:
                sessions.remove(req.session_id)
        elif req.session_epoch == INITIAL_EPOCH:
            if req.session_id != INVALID_SESSION_ID:
                sessions.remove(req.session_id)
            session = sessions.create()
            if session is not None:
                for w in requested:
                    session.partitions[(w.key, w.partition)] = w.fetch
                new_session_id = session.session_id
        else:
            session = sessions.get(req.session_id)
            if session is None:
                return FR(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                          session_id=INVALID_SESSION_ID)
            if session.epoch != req.session_epoch:
                return FR(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                          session_id=INVALID_SESSION_ID)
            session.epoch += 1
            incremental = True
            for w in requested:
                prior = session.partitions.get((w.key, w.partition))
                if prior is not None:
                    # Keep what the client was last told; take its new position.
                    w.fetch.sent_high_watermark = prior.sent_high_watermark
                    w.fetch.sent_log_start_offset = prior.sent_log_start_offset
                    w.fetch.sent_last_stable_offset = prior.sent_last_stable_offset
                session.partitions[(w.key, w.partition)] = w.fetch
            for t in req.forgotten_topics_data:
                key = t.topic_id if version >= 13 else t.topic
                for p in t.partitions:
                    session.partitions.pop((key, p), None)
            new_session_id = session.session_id
            by_id = broker.replica_manager.by_topic_id
            requested = [
                _Wanted(key, by_id.get(key) if version >= 13 else key, p, cached)
                for (key, p), cached in session.partitions.items()
            ]

    results, total = _read_all(broker, version, requested, max_bytes, read_committed)
    has_error = any(r.error != ErrorCode.NONE or r.diverging_epoch for r in results)
    if total < req.min_bytes and req.max_wait_ms > 0 and not has_error and requested:
        keys = [(w.topic, w.partition) for w in requested if w.topic is not None]
        replica_manager = broker.replica_manager

        def enough() -> bool:
            available = 0
            for w in requested:
                if w.topic is None:
                    continue
                available += replica_manager.fetchable_bytes(
                    w.topic, w.partition, w.fetch.fetch_offset, read_committed)
                if available >= req.min_bytes:
                    return True
            return False

        await replica_manager.fetch_purgatory.wait_until(keys, enough, req.max_wait_ms / 1000)
        results, total = _read_all(broker, version, requested, max_bytes, read_committed)

    topics_out: dict[Any, FR.FetchableTopicResponse] = {}
    for w, r in zip(requested, results):
        has_records = r.records is not None and len(r.records) > 0
        if incremental and not partition_changed(
            w.fetch, has_records, r.error, r.high_watermark, r.log_start_offset,
            r.last_stable_offset,
        ):
            continue
        if session is not None and not incremental:
            partition_changed(w.fetch, has_records, r.error, r.high_watermark,
                              r.log_start_offset, r.last_stable_offset)
        pd = FR.PartitionData(
            partition_index=w.partition,
            error_code=r.error,
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
            aborted_transactions=[] if read_committed else None,
            preferred_read_replica=-1,
            records=r.records if has_records else b"",
        )
        if r.diverging_epoch is not None:
            pd.diverging_epoch = FR.EpochEndOffset(epoch=r.diverging_epoch[0],
                                                   end_offset=r.diverging_epoch[1])
        topic_out = topics_out.get(w.key)
        if topic_out is None:
            topic_out = FR.FetchableTopicResponse(partitions=[])
            if version >= 13:
                topic_out.topic_id = w.key
            else:
                topic_out.topic = w.key
            topics_out[w.key] = topic_out
        topic_out.partitions.append(pd)
    return FR(error_code=ErrorCode.NONE, session_id=new_session_id,
              responses=list(topics_out.values()))


def list_offsets(broker: Broker, ctx: RequestContext, req: m.ListOffsetsRequest):
    version = ctx.api_version
    R = m.ListOffsetsResponse
    replica_manager = broker.replica_manager
    read_committed = version >= 2 and req.isolation_level == READ_COMMITTED
    topics_out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out = R.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                 timestamp=-1, offset=-1, leader_epoch=-1)
            partition, error = replica_manager.leader_partition(
                t.name, p.partition_index,
                p.current_leader_epoch if version >= 4 else NO_EPOCH)
            if partition is None:
                out.error_code = error
                parts.append(out)
                continue
            storage_log = partition.log
            try:
                if p.timestamp == LATEST_TIMESTAMP:
                    # Consumers may only see up to the high watermark (or LSO).
                    offset = storage_log.high_watermark
                    if read_committed and hasattr(storage_log, "last_stable_offset"):
                        offset = storage_log.last_stable_offset
                    found = (offset, -1, partition.leader_epoch)
                elif p.timestamp == LATEST_TIERED_TIMESTAMP:
                    found = (-1, -1, -1)  # no tiered storage
                else:
                    found = storage_log.fetch_offset_by_timestamp(p.timestamp)
                    if found is None or (found[0] >= storage_log.high_watermark
                                         and p.timestamp >= 0):
                        found = (-1, -1, -1)
            except KafkaError as exc:
                out.error_code = exc.code
                parts.append(out)
                continue
            offset, found_ts, epoch = found
            out.offset = offset
            out.timestamp = found_ts
            if version >= 4:
                out.leader_epoch = epoch
            parts.append(out)
        topics_out.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(topics=topics_out)


def offset_for_leader_epoch(broker: Broker, ctx: RequestContext,
                            req: m.OffsetForLeaderEpochRequest):
    R = m.OffsetForLeaderEpochResponse
    replica_manager = broker.replica_manager
    topics_out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out = R.EpochEndOffset(partition=p.partition, leader_epoch=-1, end_offset=-1)
            partition, error = replica_manager.leader_partition(
                t.topic, p.partition, p.current_leader_epoch)
            if partition is None:
                out.error_code = error
            else:
                epoch, end = partition.log.end_offset_for_epoch(p.leader_epoch)
                out.leader_epoch, out.end_offset = epoch, end
            parts.append(out)
        topics_out.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(topics=topics_out)
