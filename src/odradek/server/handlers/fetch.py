"""Fetch (long poll, incremental sessions, file regions), ListOffsets, OffsetForLeaderEpoch."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.fetch_session import (
    CachedPartition,
    PartitionKey,
    SessionFetch,
    from_request_partition,
    new_fetch,
)
from odradek.server.handlers.leader_hints import LeaderHints
from odradek.server.replica_manager import (
    NO_EPOCH,
    ClientMetadata,
    ReadResult,
    ReplicaManager,
)
from odradek.storage.log import FetchIsolation, LogEnd

if TYPE_CHECKING:
    from odradek.server.client_quotas import ClientQuotas
    from odradek.server.fetch_session import FetchSessionCache
    from odradek.server.network import RequestContext

FR = m.FetchResponse
READ_COMMITTED = 1
ZERO_UUID = uuid.UUID(int=0)


def isolation_of(version_has_isolation: bool, isolation_level: int) -> FetchIsolation:
    """A consumer's isolation level as the bound of what it may read."""
    if version_has_isolation and isolation_level == READ_COMMITTED:
        return FetchIsolation.TXN_COMMITTED
    return FetchIsolation.HIGH_WATERMARK


@dataclass(slots=True)
class _Wanted:
    key: Any  # name (v<=12) or topic id (v13+), as the client names it
    topic: str | None
    partition: int
    fetch: CachedPartition
    start: LogEnd | None = None  # where a long poll's data starts, computed once
    denied: bool = False  # the principal may not read it (TOPIC_AUTHORIZATION_FAILED)


def _requested(version: int, req: m.FetchRequest) -> list[tuple[PartitionKey, CachedPartition]]:
    return [((t.topic_id if version >= 13 else t.topic, p.partition), from_request_partition(p))
            for t in req.topics for p in t.partitions]


def _forgotten(version: int, req: m.FetchRequest) -> list[PartitionKey]:
    if version < 7:
        return []
    return [(t.topic_id if version >= 13 else t.topic, p)
            for t in req.forgotten_topics_data for p in t.partitions]


def _aborted_transactions(result: ReadResult) -> list[FR.AbortedTransaction]:
    return [FR.AbortedTransaction(producer_id=txn.producer_id, first_offset=txn.first_offset)
            for txn in result.aborted_transactions or ()]


@dataclass(frozen=True, slots=True)
class _Follower:
    """A fetch from a replica: the broker's id and epoch (Fetch v15+ ReplicaState)."""

    replica_id: int
    broker_epoch: int


def _read_all(replica_manager: ReplicaManager, version: int, wanted: list[_Wanted],
              max_bytes: int, isolation: FetchIsolation,
              follower: _Follower | None = None,
              client: ClientMetadata | None = None) -> tuple[list[ReadResult], int]:
    results = []
    total = 0
    for w in wanted:
        if w.topic is None:
            results.append(ReadResult(ErrorCode.UNKNOWN_TOPIC_ID))
            continue
        if w.denied:
            results.append(ReadResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        budget = min(w.fetch.max_bytes, max(0, max_bytes - total))
        if follower is not None:
            result = replica_manager.read_for_follower(
                w.topic, w.partition, follower.replica_id, follower.broker_epoch,
                w.fetch.fetch_offset, w.fetch.log_start_offset, budget,
                current_leader_epoch=w.fetch.current_leader_epoch,
                min_one_batch=total == 0,
                last_fetched_epoch=w.fetch.last_fetched_epoch if version >= 12 else NO_EPOCH)
            if result.records is not None:
                total += len(result.records)
            results.append(result)
            continue
        result = replica_manager.read(
            w.topic, w.partition, w.fetch.fetch_offset, budget,
            current_leader_epoch=w.fetch.current_leader_epoch,
            isolation=isolation,
            # Like Kafka: the first partition with data may exceed the limits so progress is
            # always possible.
            min_one_batch=total == 0,
            last_fetched_epoch=w.fetch.last_fetched_epoch if version >= 12 else NO_EPOCH,
            client=client,
        )
        if result.records is not None:
            total += len(result.records)
        results.append(result)
    return results, total


async def _long_poll(replica_manager: ReplicaManager, wanted: list[_Wanted], min_bytes: int,
                     max_wait_ms: int, isolation: FetchIsolation, replica_id: int,
                     leader_only: bool) -> None:
    """Kafka's delayed fetch: waits until `min_bytes` are readable or `max_wait_ms` passed.
    Each wake-up compares end positions with start positions computed once, reading no data."""
    polled = [w for w in wanted if w.topic is not None and not w.denied]
    for w in polled:
        w.start = replica_manager.fetch_position(w.topic, w.partition, w.fetch.fetch_offset,
                                                 leader_only)

    def enough() -> bool:
        available = 0
        for w in polled:
            available += replica_manager.readable_bytes(w.topic, w.partition, w.start,
                                                        isolation, replica_id, leader_only)
            if available >= min_bytes:
                return True
        return False

    keys = [(w.topic, w.partition) for w in polled]
    await replica_manager.fetch_purgatory.wait_until(keys, enough, max_wait_ms / 1000)


class FetchApis:
    """Fetch, ListOffsets, OffsetForLeaderEpoch: reads through the replica manager."""

    def __init__(self, replica_manager: ReplicaManager, sessions: FetchSessionCache,
                 fetch_max_bytes: int) -> None:
        self.replica_manager = replica_manager
        self.sessions = sessions
        self.fetch_max_bytes = fetch_max_bytes
        self.client_quotas: ClientQuotas | None = None  # consumer byte-rate quotas

    async def fetch(self, ctx: RequestContext, req: m.FetchRequest):
        quotas = self.client_quotas
        if quotas is not None and quotas.fetch.enabled and ctx.api_version >= 3:
            # Kafka caps a consumer's fetch at what its quota lets through in one window, so
            # one fetch cannot earn a throttle that is sure to be long.
            cap = quotas.fetch_max_bytes(ctx.principal, ctx.client_id)
            if cap is not None and (req.replica_state.replica_id if ctx.api_version >= 15
                                    else req.replica_id) < 0:
                req.max_bytes = min(req.max_bytes, max(1, int(cap)))
        hints = (LeaderHints(self.replica_manager.image, ctx.listener)
                 if ctx.api_version >= NEW_LEADER_HINT_VERSION else None)
        return await fetch(self, ctx.api_version, req, hints, ctx.listener,
                           readable=_readable_topics(ctx, req))

    def list_offsets(self, ctx: RequestContext, req: m.ListOffsetsRequest):
        described = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                         (t.name for t in req.topics))
        return list_offsets(self.replica_manager, ctx.api_version, req, described)

    def offset_for_leader_epoch(self, ctx: RequestContext, req: m.OffsetForLeaderEpochRequest):
        # Kafka: followers by CLUSTER_ACTION, consumers by DESCRIBE on each topic
        described = None if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION) else \
            ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                 (t.topic for t in req.topics))
        return offset_for_leader_epoch(self.replica_manager, req, described)


def _readable_topics(ctx: RequestContext, req: m.FetchRequest) -> Callable[[str], bool] | None:
    """Which topics the fetch may read (None: all): a follower's fetch needs CLUSTER_ACTION
    (every partition of a follower without it fails), a consumer's READ on each topic."""
    if ctx.authorizer is None:
        return None
    replica_id = req.replica_state.replica_id if ctx.api_version >= 15 else req.replica_id
    if replica_id >= 0:
        allowed = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
        return lambda _topic: allowed
    return lambda topic: ctx.authorize_topic(AclOperation.READ, topic)


# Fetch v16+ carries where a moved partition's leader is now (KIP-951).
NEW_LEADER_HINT_VERSION = 16
# Fetch v11+ from a consumer carries its rack: followers may serve it (KIP-392).
CLIENT_METADATA_VERSION = 11


async def fetch(apis: FetchApis, version: int, req: m.FetchRequest,
                hints: LeaderHints | None = None, listener: str = "",
                readable: Callable[[str], bool] | None = None):
    replica_id = req.replica_state.replica_id if version >= 15 else req.replica_id
    follower = None
    client = None
    if replica_id < 0 and version >= CLIENT_METADATA_VERSION:
        client = ClientMetadata(req.rack_id or "", listener)
    if replica_id >= 0:
        # A follower replicating: it reads up to the log end, and its fetch offsets tell the
        # leader how far it has come (the high watermark, the ISR).
        follower = _Follower(replica_id,
                             req.replica_state.replica_epoch if version >= 15 else -1)
        isolation = FetchIsolation.LOG_END
    else:
        isolation = isolation_of(version >= 4, req.isolation_level)
    max_bytes = req.max_bytes if version >= 3 else 2**31 - 1
    max_bytes = min(max_bytes, apis.fetch_max_bytes)
    replica_manager = apis.replica_manager

    requested = _requested(version, req)
    if version >= 7:
        context = new_fetch(apis.sessions, req.session_id, req.session_epoch,
                            requested, _forgotten(version, req))
        if context.error != ErrorCode.NONE:
            return FR(error_code=context.error, session_id=0)
    else:
        context = SessionFetch(partitions=requested)
    by_id = replica_manager.by_topic_id
    wanted = [_Wanted(key, by_id.get(key) if version >= 13 else key, partition, cached)
              for (key, partition), cached in context.partitions]
    if readable is not None:
        for w in wanted:
            w.denied = w.topic is not None and not readable(w.topic)

    results, total = _read_all(replica_manager, version, wanted, max_bytes, isolation,
                               follower, client)
    # An error, a divergence or a preferred read replica is answered at once.
    answer_now = any(r.error != ErrorCode.NONE or r.diverging_epoch
                     or r.preferred_read_replica >= 0 for r in results)
    if total < req.min_bytes and req.max_wait_ms > 0 and not answer_now and wanted:
        await _long_poll(replica_manager, wanted, req.min_bytes, req.max_wait_ms, isolation,
                         replica_id, leader_only=client is None)
        results, total = _read_all(replica_manager, version, wanted, max_bytes, isolation,
                                   follower, client)
    quota = replica_manager.leader_quota
    if follower is not None and quota is not None:
        # Every byte of a throttled partition sent to a follower counts (Kafka's
        # sizeOfThrottledPartitions), whether or not that follower was held back.
        quota.record(sum(len(r.records) for w, r in zip(wanted, results)
                         if r.records is not None and w.topic is not None
                         and quota.is_throttled(w.topic, w.partition)))

    read_committed = isolation is FetchIsolation.TXN_COMMITTED
    topics_out: dict[Any, FR.FetchableTopicResponse] = {}
    topic_stats = replica_manager.topic_stats
    for w, r in zip(wanted, results):
        has_records = r.records is not None and len(r.records) > 0
        # A preferred read replica must reach the consumer, as data would (Kafka's
        # CachedPartition.maybeUpdateResponseData).
        if not context.include(w.fetch, has_records or r.preferred_read_replica >= 0, r.error,
                               r.high_watermark, r.log_start_offset, r.last_stable_offset):
            continue
        if has_records:  # BytesOutPerSec (ReplicationBytesOutPerSec for a follower)
            topic_stats.record_out(w.topic, len(r.records), follower is not None)
        pd = FR.PartitionData(
            partition_index=w.partition,
            error_code=r.error,
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
            aborted_transactions=_aborted_transactions(r) if read_committed else None,
            preferred_read_replica=r.preferred_read_replica,
            records=r.records if has_records else b"",
        )
        if r.diverging_epoch is not None:
            pd.diverging_epoch = FR.EpochEndOffset(epoch=r.diverging_epoch[0],
                                                   end_offset=r.diverging_epoch[1])
        leader = hints.current_leader(w.topic, w.partition, r.error) if hints else None
        if leader is not None:
            pd.current_leader = FR.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
        topic_out = topics_out.get(w.key)
        if topic_out is None:
            topic_out = FR.FetchableTopicResponse(partitions=[])
            if version >= 13:
                topic_out.topic_id = w.key
            else:
                topic_out.topic = w.key
            topics_out[w.key] = topic_out
        topic_out.partitions.append(pd)
    return FR(error_code=ErrorCode.NONE, session_id=context.session_id,
              responses=list(topics_out.values()),
              node_endpoints=hints.node_endpoints(FR.NodeEndpoint) if hints else [])


def list_offsets(replica_manager: ReplicaManager, version: int, req: m.ListOffsetsRequest,
                 described: set[str] | None = None):
    """`described`: the topics the principal may DESCRIBE (None: all)."""
    R = m.ListOffsetsResponse
    isolation = isolation_of(version >= 2, req.isolation_level)
    topics_out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out = R.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                 timestamp=-1, offset=-1, leader_epoch=-1)
            if described is not None and t.name not in described:
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(out)
                continue
            try:
                offset, found_ts, epoch = replica_manager.offset_for_timestamp(
                    t.name, p.partition_index, p.timestamp,
                    p.current_leader_epoch if version >= 4 else NO_EPOCH, isolation)
            except KafkaError as exc:
                out.error_code = exc.code
                parts.append(out)
                continue
            out.offset = offset
            out.timestamp = found_ts
            if version >= 4:
                out.leader_epoch = epoch
            parts.append(out)
        topics_out.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(topics=topics_out)


def offset_for_leader_epoch(replica_manager: ReplicaManager,
                            req: m.OffsetForLeaderEpochRequest,
                            described: set[str] | None = None):
    R = m.OffsetForLeaderEpochResponse
    topics_out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out = R.EpochEndOffset(partition=p.partition, leader_epoch=-1, end_offset=-1)
            if described is not None and t.topic not in described:
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(out)
                continue
            try:
                out.leader_epoch, out.end_offset = replica_manager.end_offset_for_epoch(
                    t.topic, p.partition, p.leader_epoch, p.current_leader_epoch)
            except KafkaError as exc:
                out.error_code = exc.code
            parts.append(out)
        topics_out.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(topics=topics_out)
