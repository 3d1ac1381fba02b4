"""Followers replicate by fetching (Kafka's ReplicaFetcherManager / ReplicaFetcherThread).

A broker that follows partitions runs one fetcher per (leader broker, fetcher id); a partition
goes to fetcher `crc32(topic, partition) % num.replica.fetchers` of its leader, so each fetcher
batches many partitions into one Fetch. A fetcher is an asyncio task with its own connection
to the leader's inter-broker listener; it sends Fetch v17 as a replica (`ReplicaState` with
this broker's id and epoch, no fetch session), with each partition's log end offset, last
fetched epoch and current leader epoch, and waits up to `replica.fetch.wait.max.ms`.

For each partition in the answer:
- records are appended with the leader's offsets (`Log.append_as_follower`), and the
  follower's high watermark becomes the leader's (up to its own log end), as does a higher log
  start offset;
- a diverging epoch (KIP-595/KIP-320 truncation on fetch) truncates the log to where it agrees
  with the leader: the smaller of the leader's end offset for that epoch and ours (or to the
  high watermark when our log has no such epoch); the next fetch checks again;
- OFFSET_OUT_OF_RANGE: below the leader's log start, the log restarts empty there; above the
  leader's log (a leader that lost data in an unclean election), truncate to its high watermark;
- other errors (the leader moved on, or has not seen our epoch yet) put the partition aside
  for `replica.fetch.backoff.ms` (UNKNOWN_LEADER_EPOCH, which metadata propagation resolves in
  milliseconds, for a short retry instead); the metadata image re-targets the partition when
  its leader changes.

An answer is applied only while the broker still follows the partition in the leader epoch the
fetch was sent for: a late answer from an old leader never touches the log.

Replication throttling, follower side (Kafka's shouldFollowerThrottle): while the follower
replication quota is exceeded, throttled partitions this broker is not in the ISR of are left
out of fetches (retried after `replica.fetch.backoff.ms`); every byte fetched for a throttled
partition counts against the quota.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from odradek.client.security import ClientSecurity
from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.server.node_channel import NodeChannel
from odradek.server.quotas import ReplicationQuota
from odradek.server.replica_manager import NO_EPOCH, Partition, ReplicaManager

log = logging.getLogger("odradek.replica.fetcher")

FETCH_VERSION = 17
UNKNOWN_LEADER_EPOCH_RETRY_MS = 50
FR = m.FetchResponse


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """Kafka's replica.* settings."""

    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    partition_max_bytes: int = 1 << 20  # replica.fetch.max.bytes
    response_max_bytes: int = 10 << 20  # replica.fetch.response.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    num_fetchers: int = 1  # num.replica.fetchers
    # TLS/SASL of the inter-broker listener (None: plaintext)
    security: ClientSecurity | None = None


@dataclass(slots=True)
class _Fetching:
    partition: Partition
    leader_epoch: int
    delayed_until_ms: int = 0


# The leader's inter-broker endpoint (host, port), None while unknown.
EndpointLookup = Callable[[int], "tuple[str, int] | None"]


class ReplicaFetcherManager:
    def __init__(self, broker_id: int, replica_manager: ReplicaManager,
                 endpoint_of: EndpointLookup, broker_epoch: Callable[[], int],
                 config: FetcherConfig = FetcherConfig(), clock: Clock = SYSTEM_CLOCK,
                 quota: ReplicationQuota | None = None) -> None:
        self.broker_id = broker_id
        self.quota = quota  # follower.replication.throttled.rate
        self.replica_manager = replica_manager
        self.endpoint_of = endpoint_of
        self.broker_epoch = broker_epoch
        self.config = config
        self.clock = clock
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[tuple[str, int], tuple[int, int]] = {}
        self._closed = False

    def fetcher_id(self, key: tuple[str, int]) -> int:
        return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % max(1, self.config.num_fetchers)

    # -- the replica manager's hooks (FollowerHooks)
    def follow(self, partitions: Iterable[Partition]) -> None:
        """Fetch these partitions from their (new) leaders, from their log ends."""
        if self._closed:
            return
        for partition in partitions:
            key = partition.key
            self._remove(key)
            if partition.is_leader or partition.leader < 0:
                continue
            target = (partition.leader, self.fetcher_id(key))
            fetcher = self.fetchers.get(target)
            if fetcher is None:
                fetcher = self.fetchers[target] = ReplicaFetcher(self, *target)
            partition.following_epoch = partition.leader_epoch
            fetcher.add(partition)
            self._assigned[key] = target
            log.info("broker %d: following %s-%d from leader %d in epoch %d from offset %d",
                     self.broker_id, partition.topic, partition.index, partition.leader,
                     partition.leader_epoch, partition.log.log_end_offset)

    def unfollow(self, keys: Iterable[tuple[str, int]]) -> None:
        for key in keys:
            self._remove(key)

    def _remove(self, key: tuple[str, int]) -> None:
        target = self._assigned.pop(key, None)
        if target is None:
            return
        fetcher = self.fetchers.get(target)
        if fetcher is not None:
            fetcher.remove(key)
            if not fetcher.partitions:
                del self.fetchers[target]
                fetcher.close()

    async def close(self) -> None:
        self._closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._assigned.clear()
        for fetcher in fetchers:
            fetcher.close()
        await asyncio.gather(*(f.closed() for f in fetchers), return_exceptions=True)


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[tuple[str, int], _Fetching] = {}
        config = manager.config
        # The same request channel (connect, reconnect backoff, timeouts) the quorum and the
        # broker lifecycle use, to this one leader's inter-broker listener.
        self._channel = NodeChannel(
            manager.broker_id, manager.endpoint_of,
            request_timeout_ms=config.socket_timeout_ms + config.max_wait_ms,
            client_id=f"broker-{manager.broker_id}-fetcher-{fetcher_id}",
            security=config.security)
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{manager.broker_id}-{leader_id}-{fetcher_id}")

    def add(self, partition: Partition) -> None:
        self.partitions[partition.key] = _Fetching(partition, partition.leader_epoch)
        self._wakeup.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)

    def close(self) -> None:
        self._task.cancel()

    async def closed(self) -> None:
        await asyncio.gather(self._task, return_exceptions=True)
        await self._channel.close()

    # -- the loop
    async def _run(self) -> None:
        clock = self.manager.clock
        while True:
            now = clock.time_ms()
            ready = {key: state for key, state in self.partitions.items()
                     if state.delayed_until_ms <= now}
            self._hold_throttled(ready)
            if not ready:
                delays = [s.delayed_until_ms - now for s in self.partitions.values()]
                self._wakeup.clear()
                try:
                    timeout = min(delays) / 1000 if delays else None
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
                except TimeoutError:
                    pass
                continue
            try:
                response = await self._fetch(ready)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - unreachable, reset, timed out: back off and retry
                log.info("broker %d: fetch from leader %d failed: %s", self.manager.broker_id,
                         self.leader_id, exc)
                self._delay(ready.values(), self.manager.config.backoff_ms)
                continue
            self._process(ready, response)

    def _hold_throttled(self, ready: dict[tuple[str, int], _Fetching]) -> None:
        """Takes out of `ready` (and delays) the throttled out-of-ISR partitions while the
        follower replication quota is exceeded."""
        quota = self.manager.quota
        if quota is None or not ready:
            return
        broker_id = self.manager.broker_id
        held = [key for key, state in ready.items()
                if broker_id not in state.partition.isr
                and quota.is_throttled(state.partition.topic, state.partition.index)]
        if held and quota.is_quota_exceeded():
            self._delay([ready.pop(key) for key in held], self.manager.config.backoff_ms)

    async def _fetch(self, ready: dict[tuple[str, int], _Fetching]) -> m.FetchResponse:
        config = self.manager.config
        by_topic: dict[uuid.UUID, list[m.FetchRequest.FetchPartition]] = {}
        for state in ready.values():
            storage_log = state.partition.log
            latest_epoch = storage_log.latest_epoch
            by_topic.setdefault(state.partition.topic_id, []).append(m.FetchRequest.FetchPartition(
                partition=state.partition.index,
                current_leader_epoch=state.leader_epoch,
                fetch_offset=storage_log.log_end_offset,
                last_fetched_epoch=latest_epoch if latest_epoch is not None else NO_EPOCH,
                log_start_offset=storage_log.log_start_offset,
                partition_max_bytes=config.partition_max_bytes))
        request = m.FetchRequest(
            replica_state=m.FetchRequest.ReplicaState(
                replica_id=self.manager.broker_id, replica_epoch=self.manager.broker_epoch()),
            max_wait_ms=config.max_wait_ms, min_bytes=config.min_bytes,
            max_bytes=config.response_max_bytes, isolation_level=0, session_id=0,
            session_epoch=-1,
            topics=[m.FetchRequest.FetchTopic(topic_id=topic_id, partitions=parts)
                    for topic_id, parts in by_topic.items()],
            forgotten_topics_data=[], rack_id="")
        return await self._channel.send(self.leader_id, request, api_version=FETCH_VERSION)

    def _process(self, sent: dict[tuple[str, int], _Fetching], response: m.FetchResponse) -> None:
        manager = self.manager
        if response.error_code != ErrorCode.NONE:
            log.info("broker %d: fetch from leader %d answered %s", manager.broker_id,
                     self.leader_id, ErrorCode(response.error_code).name)
            self._delay(sent.values(), manager.config.backoff_ms)
            return
        names = {state.partition.topic_id: state.partition.topic for state in sent.values()}
        for topic in response.responses:
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for data in topic.partitions:
                key = (name, data.partition_index)
                state = sent.get(key)
                if state is None or self.partitions.get(key) is not state:
                    continue  # no longer fetched from here
                partition = manager.replica_manager.follower_partition(key, state.leader_epoch)
                if partition is None:
                    continue
                try:
                    self._process_partition(state, partition, data)
                except Exception as exc:  # noqa: BLE001 - one partition must not stop the rest
                    log.warning("broker %d: %s-%d: could not apply the leader's answer: %s",
                                manager.broker_id, key[0], key[1], exc)
                    self._delay([state], manager.config.backoff_ms)

    def _process_partition(self, state: _Fetching, partition: Partition,
                           data: FR.PartitionData) -> None:
        manager = self.manager
        storage_log = partition.log
        error = data.error_code
        diverging = data.diverging_epoch
        if error == ErrorCode.NONE and diverging is not None and diverging.epoch >= 0:
            self._truncate_on_divergence(partition, diverging.epoch, diverging.end_offset)
            return
        if error == ErrorCode.NONE:
            records = data.records or b""
            manager.replica_manager.append_as_follower(
                partition, records, data.high_watermark, data.log_start_offset)
            quota = manager.quota
            if quota is not None and quota.is_throttled(partition.topic, partition.index):
                quota.record(len(records))
            return
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._handle_out_of_range(partition, data)
            return
        delay = (UNKNOWN_LEADER_EPOCH_RETRY_MS if error == ErrorCode.UNKNOWN_LEADER_EPOCH
                 else manager.config.backoff_ms)
        log.info("broker %d: %s-%d: leader %d answered %s (fetch offset %d)",
                 manager.broker_id, partition.topic, partition.index, self.leader_id,
                 ErrorCode(error).name, storage_log.log_end_offset)
        self._delay([state], delay)

    def _truncate_on_divergence(self, partition: Partition, leader_epoch: int,
                                leader_end_offset: int) -> None:
        storage_log = partition.log
        our_epoch, our_end = storage_log.end_offset_for_epoch(leader_epoch)
        if our_epoch < 0 or our_end < 0:
            target = storage_log.high_watermark
        else:
            target = min(leader_end_offset, our_end)
        if storage_log.truncate_to(target):
            log.info("broker %d: %s-%d: truncated to offset %d (diverging from leader %d's "
                     "epoch %d ending at %d)", self.manager.broker_id, partition.topic,
                     partition.index, storage_log.log_end_offset, self.leader_id,
                     leader_epoch, leader_end_offset)

    def _handle_out_of_range(self, partition: Partition, data: FR.PartitionData) -> None:
        storage_log = partition.log
        fetch_offset = storage_log.log_end_offset
        if data.log_start_offset >= 0 and fetch_offset < data.log_start_offset:
            storage_log.truncate_fully_and_start_at(data.log_start_offset)
            log.info("broker %d: %s-%d: behind the leader's log start: restarting at %d",
                     self.manager.broker_id, partition.topic, partition.index,
                     data.log_start_offset)
        elif 0 <= data.high_watermark < fetch_offset:
            storage_log.truncate_to(data.high_watermark)
            log.info("broker %d: %s-%d: ahead of the leader's log: truncated to its high "
                     "watermark %d", self.manager.broker_id, partition.topic, partition.index,
                     data.high_watermark)
        else:
            self._delay([self.partitions[partition.key]], self.manager.config.backoff_ms)

    def _delay(self, states: Iterable[_Fetching], delay_ms: int) -> None:
        until = self.manager.clock.time_ms() + delay_ms
        for state in states:
            state.delayed_until_ms = until
