"""The KRaft metadata quorum of this node: the `__cluster_metadata` log, driven by Raft
(`odradek.raft.RaftClient`), and the image replayed from its committed records.

`MetadataQuorum` is the asyncio driver of the sans-I/O `RaftClient`: it feeds it inputs (appends,
inbound requests, responses, send failures), calls `poll` after every input and at the client's
next deadline (timers on the injected clock, never a sleep), sends what `poll` returns, and
flushes the log on a worker thread (`flush_in_poll=False`: the event loop never fsyncs; appends
made while a flush runs share the next one, a group commit). The `quorum-state` file is in the
metadata log's directory (`__cluster_metadata-0/quorum-state`), as in Kafka.

Commit path, the same on every node, leader or follower: the client's high watermark (the
offset a majority of voters has flushed) passes a batch, `take_committed` hands it out, its
records are decoded and replayed into the next immutable `MetadataImage`, listeners see it, then
the appenders' futures complete (`CommitWaiters`). Nothing is visible before it is committed;
control batches (LeaderChange) move the image's offset and epoch only.

Appends (`append(records)`: one batch, a future of its last offset once committed) are taken
only by the active controller: the quorum leader whose image has everything of earlier epochs
(Kafka's QuorumController claims leadership only once caught up); anyone else gets
NOT_CONTROLLER. A leader that loses its epoch fails its pending appends with NOT_CONTROLLER
(their records may still commit under the next leader; the image will show them then).

One voter: the node leads at once, and `load()` replays the whole log as committed (what is on
this voter's disk is what the quorum has), so start-up is what it was before Raft: replay, then a
new epoch marked by a LeaderChange record. Several voters: `load()` replays nothing (this node's
log tail may be uncommitted); the image follows the high watermark the leader reports.
Outbound requests go through `send(destination, request) -> awaitable response` (the network
side, in `odradek.server.node_channel`); inbound ones come in through `handle_request`.

Snapshots (KIP-630, see odradek.raft.snapshot): once `snapshot_max_bytes` of records were
committed since the last snapshot, or `snapshot_interval_ms` passed with new records, the
committed image is written as a snapshot (`image_records`) on a worker thread (the image is
immutable), then the retention rules (`retention_bytes`, `retention_ms`) delete old snapshots
and the log segments wholly before the oldest kept one. `load()` starts from the newest valid
snapshot and replays the log after it (one voter) or nothing more (several: the snapshot is
committed by definition). A snapshot the Raft client hands out (one this follower downloaded
from its leader) replaces the image through the normal path: listeners see it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.commit import CommitWaiters, wait_for_commits
from odradek.metadata.image import (
    EMPTY_IMAGE,
    MetadataDelta,
    MetadataImage,
    image_records,
    replay_records,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError, ProtocolError
from odradek.protocol.messages import API_BY_KEY
from odradek.protocol.records import iter_batches, iter_records
from odradek.raft import (
    CommittedBatch,
    FileQuorumStateStore,
    OutboundReply,
    OutboundRequest,
    QuorumStateStore,
    RaftClient,
    RaftConfig,
    StorageRaftLog,
)
from odradek.raft import messages as raft_messages
from odradek.raft.client import CommittedSnapshot, read_voter_history
from odradek.raft.config import METADATA_TOPIC
from odradek.raft.log import OffsetAndEpoch
from odradek.raft.quorum_state import QUORUM_STATE_FILE
from odradek.raft.snapshot import (
    CorruptSnapshotError,
    SnapshotWriter,
    clean_snapshots,
    read_snapshot,
)
from odradek.raft.voters import VoterSetHistory
from odradek.storage.log import Log
from odradek.windowed_stat import WindowedStat

log = logging.getLogger("odradek.quorum")

__all__ = ["METADATA_TOPIC", "MetadataQuorum", "RaftSend"]

READ_CHUNK = 8 * 1024 * 1024
# Kafka's defaults: metadata.log.max.record.bytes.between.snapshots,
# metadata.log.max.snapshot.interval.ms, metadata.max.retention.bytes/.ms.
DEFAULT_SNAPSHOT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_SNAPSHOT_INTERVAL_MS = 3_600_000
DEFAULT_RETENTION_BYTES = 100 * 1024 * 1024
DEFAULT_RETENTION_MS = 7 * 24 * 3_600_000

# Makes the log durable up to (excluding) an end offset; awaited by the flusher.
FlushFunction = Callable[[int], Awaitable[None]]
MetadataListener = Callable[[MetadataImage], None]
# Called on the loop with an image about to be published; returns blocking work (e.g. creating
# the logs of new local partitions) for a worker thread, done before any listener sees the
# image, or None when there is none.
MetadataPreparer = Callable[[MetadataImage], Callable[[], None] | None]
# Sends a Raft request to a voter and returns its answer; raises if it cannot be delivered.
RaftSend = Callable[[int, m.Message], Awaitable[m.Message]]
# Told (is_active_controller) whenever this node becomes or stops being the active controller.
ActivationListener = Callable[[bool], None]


class MetadataQuorum:
    def __init__(self, metadata_log: Log, node_id: int, *, voters: Iterable[int] | None = None,
                 cluster_id: str = "", clock: Clock = SYSTEM_CLOCK,
                 flush: FlushFunction | None = None, raft_config: RaftConfig | None = None,
                 send: RaftSend | None = None,
                 state_store: QuorumStateStore | None = None,
                 snapshot_max_bytes: int = DEFAULT_SNAPSHOT_MAX_BYTES,
                 snapshot_interval_ms: int = DEFAULT_SNAPSHOT_INTERVAL_MS,
                 retention_bytes: int = DEFAULT_RETENTION_BYTES,
                 retention_ms: int = DEFAULT_RETENTION_MS, dynamic: bool = False,
                 directory_id: uuid.UUID | None = None, listener: str | None = None,
                 local_endpoints: Mapping[str, tuple[str, int]] | None = None,
                 bootstrap: Mapping[int, tuple[str, int]] | None = None,
                 voter_endpoints: Mapping[int, tuple[str, int]] | None = None) -> None:
        """`dynamic`: the voters are in the log (KIP-853), not `voters`; `voter_endpoints`:
        the static voters' controller endpoints. The other KIP-853 settings go to the Raft
        client (see RaftClient)."""
        self.log = metadata_log
        # Opening it finishes a snapshot install a crash interrupted (see StorageRaftLog).
        self.raft_log = StorageRaftLog(metadata_log)
        self.snapshot_max_bytes = snapshot_max_bytes
        self.snapshot_interval_ms = snapshot_interval_ms
        self.retention_bytes = retention_bytes
        self.retention_ms = retention_ms
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = clock.time_ms()
        self._snapshotting: asyncio.Future[None] | None = None
        self.snapshots_written = 0
        self.node_id = node_id
        self._static_voters: frozenset[int] = (
            frozenset() if dynamic else frozenset(voters) if voters is not None
            else frozenset({node_id}))
        self.dynamic = dynamic
        self._history: VoterSetHistory | None = None  # a dynamic quorum's, read at load
        self.directory_id = directory_id
        self.listener = listener
        self.local_endpoints = local_endpoints if local_endpoints is not None else {}
        self.bootstrap = dict(bootstrap or {})
        self.voter_endpoints = dict(voter_endpoints or {})
        self.cluster_id = cluster_id
        self.clock = clock
        self.raft_config = raft_config or RaftConfig()
        self.image: MetadataImage = EMPTY_IMAGE  # as of the commit index, never ahead of it
        self.listeners: list[MetadataListener] = []
        self.preparers: list[MetadataPreparer] = []
        # Committed batches held back while their image's preparation runs in a thread.
        self._unpublished: list[CommittedBatch] = []
        self._preparation: Callable[[], None] | None = None
        self._prepared_offset = -1  # the batch whose preparation ran: publish it now
        self.activation_listeners: list[ActivationListener] = []
        self._flush: FlushFunction = flush if flush is not None else self._flush_log
        self._send = send
        self._store = state_store or FileQuorumStateStore(
            os.path.join(metadata_log.dir, QUORUM_STATE_FILE))
        self._client: RaftClient | None = None
        self._loaded_epoch = 0  # the last epoch in the log at load, before Raft runs
        self._appended: deque[int] = deque()  # last offsets appended here, not yet committed
        self._appended_at: deque[int] = deque()  # when each was appended (clock ms)
        # Kafka's raft-metrics commit-latency-avg/-max (append to commit, on the leader) and
        # poll-idle-ratio-avg (the driver's share of time waiting for input), read by
        # server.metrics.
        self.commit_latency = WindowedStat()
        self.poll_idle_ratio = WindowedStat()
        self._commits = CommitWaiters()  # the appenders' futures (the one commit mechanism)
        self._parked: dict[int, asyncio.Future[m.Message]] = {}  # long-poll Fetches
        self._next_request_id = 0
        self._sends: set[asyncio.Task[None]] = set()
        self._wakeup = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._active = False
        self._caught_up = asyncio.Event()

    # -- state
    @property
    def voters(self) -> frozenset[int]:
        """The voter ids in effect (a dynamic quorum's change as the log does)."""
        if self._client is not None:
            return frozenset(self._client.voters)
        if self._history is not None:
            return frozenset(self._history.latest)
        return self._static_voters

    def endpoint_of(self, node_id: int) -> tuple[str, int] | None:
        """Where to reach `node_id`'s controller listener: a static voter's configured address,
        else what Raft learned (dynamic voters, a leader named in a Fetch answer, bootstrap
        servers by their negative ids)."""
        endpoint = self.voter_endpoints.get(node_id)
        if endpoint is None and self._client is not None:
            endpoint = self._client.endpoints.get(node_id)
        if endpoint is None:
            endpoint = self.bootstrap.get(node_id)
        return endpoint

    @property
    def is_single_voter(self) -> bool:
        return self.voters == {self.node_id}

    @property
    def epoch(self) -> int:
        return self._client.epoch if self._client is not None else self._loaded_epoch

    @property
    def leader_id(self) -> int | None:
        return self._client.leader_id if self._client is not None else None

    @property
    def is_leader(self) -> bool:
        return self._client is not None and self._client.is_leader

    @property
    def is_active(self) -> bool:
        """The active controller: the leader, with everything of earlier epochs in its image
        (so records computed from the image are computed from the whole committed state)."""
        client = self._client
        if client is None or not client.is_leader:
            return False
        start = client.epoch_start_offset
        return start is not None and self.image.offset >= start - 1

    @property
    def raft(self) -> RaftClient | None:
        return self._client

    @property
    def committed_offset(self) -> int:
        """The last committed offset of the metadata log (-1: nothing committed)."""
        return self.log.high_watermark - 1

    @property
    def high_watermark(self) -> int:
        """Raft's high watermark: the offset after the last committed one."""
        return self.log.high_watermark

    @property
    def pending_batches(self) -> int:
        """Batches appended but not yet committed."""
        return len(self._appended)

    # -- start
    def _load_snapshot(self) -> OffsetAndEpoch | None:
        """The image from the newest snapshot that reads back whole and valid (an older one
        if not); None if there is none."""
        store = self.raft_log.snapshots
        for snapshot_id in reversed(store.ids()):
            if snapshot_id.offset < self.log.log_start_offset:
                break  # the log has a gap after it: of no use
            try:
                self.image = image_from_snapshot(store.read_all(snapshot_id), snapshot_id)
            except (CorruptSnapshotError, OSError, ProtocolError, ValueError) as exc:
                log.warning("ignoring metadata snapshot %s: %s", snapshot_id, exc)
                continue
            log.info("loaded the metadata snapshot %s", snapshot_id)
            return snapshot_id
        if self.log.log_start_offset > 0:
            raise RuntimeError(
                f"the metadata log {self.log.dir} starts at {self.log.log_start_offset} but "
                f"no valid snapshot covers what is before")
        return None

    def load(self) -> MetadataImage:
        """Start from the newest valid snapshot, if any. With one voter, replay the metadata
        log after it into the image: all of it counts as committed. With several, nothing
        after the snapshot is known committed before the leader says so."""
        self._loaded_epoch = self.raft_log.last_fetched_epoch
        if self.dynamic:
            self._history = read_voter_history(self.raft_log, VoterSetHistory())
            log.info("dynamic quorum: voters %s (kraft.version %d)", self._history.latest.ids,
                     self._history.kraft_version)
        snapshot_id = self._load_snapshot()
        if not self.is_single_voter:
            return self.image
        delta = MetadataDelta(self.image)
        count = 0
        offset = max(self.log.log_start_offset,
                     snapshot_id.offset if snapshot_id is not None else 0)
        end = self.log.log_end_offset
        while offset < end:
            data = self.log.read(offset, READ_CHUNK, max_offset=None, min_one_batch=True)
            buf = data.read_bytes()
            if not buf:
                break
            for pos, header in iter_batches(buf):
                if header.last_offset < offset:
                    continue
                self._loaded_epoch = max(self._loaded_epoch, header.partition_leader_epoch)
                if not header.is_control:
                    for record in iter_records(buf, pos, header):
                        if record.offset < offset:
                            continue
                        decoded, _version = m.decode_metadata_record(record.value)
                        delta.replay(decoded)
                        count += 1
                delta.offset = header.last_offset
                delta.epoch = header.partition_leader_epoch
                offset = header.next_offset
        self.image = delta.apply()
        # What survived log recovery is what the quorum has: all of it counts as committed.
        # A tail a crash left only in the page cache is synced by the next flush (the
        # LeaderChange's), which starts at the recovery point.
        self.log.update_high_watermark(self.log.log_end_offset)
        self._commits.reset(self.log.log_end_offset)
        log.info("replayed %d metadata records up to offset %d (epoch %d)", count,
                 self.image.offset, self._loaded_epoch)
        return self.image

    def start(self) -> None:
        """Start Raft (a lone voter leads at once, writing its epoch's LeaderChange) and the
        driver task. Needs a running event loop."""
        if self._client is not None:
            return
        if self._closed:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is shut down")
        self._client = RaftClient(
            self.node_id, None if self.dynamic else sorted(self._static_voters), self.raft_log,
            self._store, cluster_id=self.cluster_id, now_ms=self.clock.time_ms(),
            config=self.raft_config, flush_in_poll=False, directory_id=self.directory_id,
            listener=self.listener, local_endpoints=self.local_endpoints,
            bootstrap=self.bootstrap, history=self._history)
        # Static voters' addresses: DescribeQuorum v2 lists every voter's endpoint.
        self._client.endpoints.update(self.voter_endpoints)
        log.info("metadata quorum started: %r, voters %s", self._client, sorted(self.voters))
        self._driver = asyncio.get_running_loop().create_task(self._drive())

    def become_leader(self) -> asyncio.Future[int]:
        """One voter: start, leading a new epoch marked by a LeaderChange control record; the
        future completes with that record's offset once it is committed."""
        if not self.is_single_voter:
            raise RuntimeError("only a lone voter becomes leader by itself; use start()")
        self.start()
        start = self._client.epoch_start_offset  # type: ignore[union-attr]
        assert start is not None
        self._note_appended(start)
        return self._commits.wait(start)

    async def wait_until_caught_up(self) -> None:
        """Until a leader is known and this node's image has every record of the epochs before
        the leader's (its LeaderChange record is committed and replayed here)."""
        await self._caught_up.wait()

    # -- append
    def append(self, records: Iterable[Any]) -> asyncio.Future[int]:
        """Append records as one batch now; the future completes with the batch's last offset
        once it is committed, after the image includes the records and listeners have seen it.

        Raises KafkaError at once if this node is not the active controller, the quorum is
        closed or its log failed. An empty append completes once everything appended before
        it is committed."""
        records = list(records)
        self._check_writable()
        if not records:
            return self._barrier()
        if self._client is None and self.is_single_voter:
            self.start()  # a lone voter loaded but not started yet: it leads at once
        client = self._client
        if client is None or not self.is_active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER,
                             f"node {self.node_id} is not the active controller (leader: "
                             f"{self.leader_id})")
        values = [m.encode_metadata_record(record, type(record).MAX_VERSION)
                  for record in records]
        try:
            last_offset = client.append(values, self.clock.time_ms())
        except KafkaError as exc:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
        self._note_appended(last_offset)
        committed = self._commits.wait(last_offset)
        self._wake()
        return committed

    def _note_appended(self, last_offset: int) -> None:
        self._appended.append(last_offset)
        self._appended_at.append(self.clock.time_ms())

    def _forget_appended(self) -> None:
        self._appended.clear()
        self._appended_at.clear()

    def _check_writable(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is shut down")
        if self._failure is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"the metadata log failed: {self._failure}")

    def _barrier(self) -> asyncio.Future[int]:
        if self._appended:
            return self._commits.wait(self._appended[-1])
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiter.set_result(self.committed_offset)
        return waiter

    # -- inbound Raft requests (from the controller listener)
    async def handle_request(self, sender_id: int, request: m.Message) -> m.Message:
        """The answer to a Raft request (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
        DescribeQuorum); a Fetch with nothing to return waits (long poll) for data, a high
        watermark move or its max wait."""
        client = self._client
        if client is None or self._closed:
            return _not_available(request)
        self._next_request_id += 1
        request_id = self._next_request_id
        response = client.handle_request(sender_id, request, self.clock.time_ms(), request_id)
        self._wake()
        if response is not None:
            return response
        parked: asyncio.Future[m.Message] = asyncio.get_running_loop().create_future()
        self._parked[request_id] = parked
        try:
            return await parked
        finally:
            self._parked.pop(request_id, None)

    def describe_quorum(self) -> m.DescribeQuorumResponse:
        client = self._client
        if client is None:
            return raft_messages.top_level_error(m.DescribeQuorumResponse,
                                                 ErrorCode.NOT_CONTROLLER)
        return client.describe_quorum(self.clock.time_ms())

    # -- the driver
    def _wake(self) -> None:
        self._wakeup.set()

    async def _drive(self) -> None:
        """Poll after every input and at the client's deadline."""
        client = self._client
        assert client is not None
        busy_since = time.perf_counter()
        try:
            while True:
                self._wakeup.clear()
                self._step(client)
                if self._preparation is not None:
                    await self._prepare_in_thread()
                    continue  # publish what waited for it
                now = self.clock.time_ms()
                delay_s = max(client.next_deadline_ms(now) - now, 0) / 1000
                timer = self.clock.call_later(delay_s, self._wakeup.set)
                idle_since = time.perf_counter()
                try:
                    await self._wakeup.wait()
                finally:
                    timer.cancel()
                # Kafka's poll-idle-ratio: per poll cycle, the time waiting over the whole.
                woken = time.perf_counter()
                cycle = woken - busy_since
                if cycle > 0:
                    self.poll_idle_ratio.record((woken - idle_since) / cycle,
                                                self.clock.time_ms())
                busy_since = woken
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: without the driver, nothing commits any more
            log.exception("the metadata quorum driver failed")
            self._fail(KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum failed"))

    def _step(self, client: RaftClient) -> None:
        for message in client.poll(self.clock.time_ms()):
            if isinstance(message, OutboundRequest):
                self._dispatch(client, message)
            elif isinstance(message, OutboundReply):
                parked = self._parked.get(message.request_id)
                if parked is not None and not parked.done():
                    parked.set_result(message.response)
        batches, self._unpublished = self._unpublished, []
        self._apply_committed(batches + client.take_committed())
        self._maybe_snapshot(client)
        self._track_activation()
        if client.log.flushed_end < client.log.end_offset:
            self._schedule_flush()

    def _dispatch(self, client: RaftClient, request: OutboundRequest) -> None:
        if self._send is None:
            # No network (a lone voter never sends): the request fails like a refused connection.
            client.handle_send_failure(request.destination, request.correlation_id,
                                       self.clock.time_ms())
            return
        task = asyncio.get_running_loop().create_task(self._deliver(client, request))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _deliver(self, client: RaftClient, request: OutboundRequest) -> None:
        assert self._send is not None
        try:
            response = await self._send(request.destination, request.request)
        except (KafkaError, ProtocolError, OSError, TimeoutError) as exc:
            # Refused, reset, timed out or garbled: undelivered, as far as Raft is concerned.
            log.debug("raft request to %d failed: %s", request.destination, exc)
            client.handle_send_failure(request.destination, request.correlation_id,
                                       self.clock.time_ms())
        else:
            client.handle_response(request.destination, response, self.clock.time_ms(),
                                   request.correlation_id)
        self._wake()

    def _track_activation(self) -> None:
        client = self._client
        assert client is not None
        if (not self._caught_up.is_set() and client.leader_id is not None
                and self.image.epoch >= client.epoch):
            self._caught_up.set()
        active = self.is_active
        if active == self._active:
            return
        self._active = active
        if active:
            log.info("node %d is the active controller (epoch %d)", self.node_id, client.epoch)
        else:
            log.info("node %d is no longer the active controller (%r)", self.node_id, client)
            # What we appended may still commit under the next leader (the image shows it
            # then); the appenders learn now that this controller cannot promise it.
            self._forget_appended()
            self._commits.fail_all(KafkaError(ErrorCode.NOT_CONTROLLER,
                                              f"node {self.node_id} lost the leadership"))
        for listener in list(self.activation_listeners):
            try:
                listener(active)
            except Exception:
                log.exception("activation listener %r failed", listener)

    # -- commit path
    def _schedule_flush(self) -> None:
        if self._flusher is None and self._failure is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_pending())

    async def _flush_pending(self) -> None:
        """Flush until the log is on disk to its end; each round covers every batch appended
        while the previous one ran (group commit). Raft polls after each round."""
        try:
            while self.log.recovery_point < self.log.log_end_offset:
                end_offset = self.log.log_end_offset
                await self._flush(end_offset)
                self._wake()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("cannot flush the metadata log: pending metadata changes fail")
            self._fail(exc)
        finally:
            self._flusher = None

    async def _flush_log(self, end_offset: int) -> None:
        await asyncio.to_thread(self.log.flush, end_offset)

    def _apply_committed(self, batches: list[CommittedBatch]) -> None:
        """Replay committed batches in offset order: each becomes the next image, listeners
        see it, then its waiters complete."""
        if not batches:
            return
        failed: dict[int, BaseException] = {}
        for batch in batches:
            if batch.last_offset <= self.image.offset:
                continue  # replayed by load()
            if self._preparation is not None:
                self._unpublished.append(batch)  # in order, after the one being prepared
                continue
            if isinstance(batch, CommittedSnapshot):
                self._publish_snapshot(batch)
                continue
            error = self._publish(batch)
            if error is _PREPARING:
                self._unpublished.append(batch)
                continue
            if not batch.is_control:
                self._bytes_since_snapshot += len(batch.data)
            if error is not None:
                failed[batch.last_offset] = error
        committed = self.image.offset + 1
        now_ms = self.clock.time_ms() if self._appended else 0
        while self._appended and self._appended[0] < committed:
            self._appended.popleft()
            self.commit_latency.record(now_ms - self._appended_at.popleft(), now_ms)
        self._commits.advance(committed, failed)

    def _publish_snapshot(self, snapshot: CommittedSnapshot) -> None:
        """A snapshot downloaded from the leader: it becomes the image, listeners see it."""
        try:
            image = image_from_snapshot(snapshot.store.read_all(snapshot.snapshot_id),
                                        snapshot.snapshot_id)
        except (CorruptSnapshotError, OSError, ProtocolError, ValueError) as exc:
            # Frozen snapshots were validated: this is a bug or a disk gone bad.
            raise RuntimeError(f"cannot load the metadata snapshot {snapshot.snapshot_id}: "
                               f"{exc}") from exc
        log.info("node %d: metadata image replaced by snapshot %s", self.node_id,
                 snapshot.snapshot_id)
        self.image = image
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.clock.time_ms()
        for listener in list(self.listeners):
            try:
                listener(image)
            except Exception:
                log.exception("metadata listener %r failed at snapshot %s", listener,
                              snapshot.snapshot_id)
        self._clean_log()

    # -- snapshots
    def _maybe_snapshot(self, client: RaftClient) -> None:
        """Kafka's SnapshotGenerator: enough bytes committed since the last snapshot, or new
        records and the interval passed; one snapshot at a time."""
        if self._snapshotting is not None or self._closed or self.image.offset < 0:
            return
        if self._bytes_since_snapshot <= 0:
            return
        now = self.clock.time_ms()
        due_by_time = (self.snapshot_interval_ms > 0
                       and now - self._last_snapshot_ms >= self.snapshot_interval_ms)
        if self._bytes_since_snapshot < self.snapshot_max_bytes and not due_by_time:
            return
        image = self.image
        snapshot_id = OffsetAndEpoch(image.offset + 1, image.epoch)
        try:
            writer = client.create_snapshot(snapshot_id, now)
        except ValueError as exc:
            log.warning("cannot snapshot the metadata image at %s: %s", snapshot_id, exc)
            return
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        if writer is None:
            return  # there is one already
        self._snapshotting = asyncio.get_running_loop().create_task(
            self._write_snapshot(image, writer))

    async def _write_snapshot(self, image: MetadataImage, writer: SnapshotWriter) -> None:
        try:
            size = await asyncio.to_thread(write_image_snapshot, image, writer)
        except Exception:
            log.exception("cannot write the metadata snapshot %s", writer.snapshot_id)
            return
        finally:
            self._snapshotting = None
        self.snapshots_written += 1
        log.info("node %d: wrote metadata snapshot %s (%d bytes)", self.node_id,
                 writer.snapshot_id, size)
        self._clean_log()
        self._wake()

    def _clean_log(self) -> None:
        """Retention: old snapshots and the log segments before the oldest kept one."""
        try:
            if clean_snapshots(self.raft_log, self.retention_bytes, self.retention_ms,
                               self.clock.time_ms()):
                log.info("node %d: metadata log now starts at %d (snapshots %s)",
                         self.node_id, self.log.log_start_offset,
                         self.raft_log.snapshots.ids())
            self.log.run_pending_deletes()
        except Exception:
            log.exception("cannot clean the metadata log")

    def _publish(self, batch: CommittedBatch) -> BaseException | None:
        try:
            delta = MetadataDelta(self.image)
            if not batch.is_control:
                for pos, header in iter_batches(batch.data):
                    for record in iter_records(batch.data, pos, header):
                        decoded, _version = m.decode_metadata_record(record.value)
                        delta.replay(decoded)
            delta.offset = batch.last_offset
            delta.epoch = batch.epoch
            image = delta.apply()
        except Exception as exc:  # a record the image cannot take: fail its op, keep going
            log.exception("cannot replay the metadata batch ending at offset %d",
                          batch.last_offset)
            # The offset still passed: the next batch applies on top of the image before it.
            self.image = _at_offset(self.image, batch.last_offset, batch.epoch)
            return exc
        if self._prepared_offset != batch.last_offset and self._needs_preparation(image):
            return _PREPARING
        self.image = image
        for listener in list(self.listeners):
            try:
                listener(image)
            except Exception:  # one failing listener must not hold back the others
                log.exception("metadata listener %r failed at offset %d", listener,
                              batch.last_offset)
        return None

    def _needs_preparation(self, image: MetadataImage) -> bool:
        """Asks the preparers about `image`; their blocking work becomes `_preparation`."""
        works = []
        for preparer in self.preparers:
            try:
                work = preparer(image)
            except Exception:
                log.exception("metadata preparer %r failed at offset %d", preparer, image.offset)
                continue
            if work is not None:
                works.append(work)
        if not works:
            return False

        def prepare() -> None:
            for work in works:
                work()

        self._preparation = prepare
        self._prepared_offset = image.offset
        return True

    async def _prepare_in_thread(self) -> None:
        """Runs the preparation off the event loop (requests keep being served meanwhile,
        against the image before), then lets the held batches publish."""
        preparation, self._preparation = self._preparation, None
        assert preparation is not None
        try:
            await asyncio.to_thread(preparation)
        except Exception:  # the listeners still run: they do the work on the loop instead
            log.exception("preparing the metadata image at offset %d failed",
                          self._prepared_offset)

    def _fail(self, exc: BaseException) -> None:
        """The log can no longer commit: fail what is pending and refuse further appends."""
        if self._failure is None:
            self._failure = exc
        self._forget_appended()
        self._commits.fail_all(exc)

    # -- stop
    async def close(self) -> None:
        """Refuse new appends, let pending ones commit (or fail; with other voters, within
        the request timeout), resign if leading (EndQuorumEpoch tells the voters to elect at
        once), then close the log."""
        self._closed = True
        if self._flusher is not None:
            await asyncio.wait([self._flusher])
        client = self._client
        if self._appended and client is not None and self._failure is None:
            pending = [self._commits.wait(self._appended[-1])]
            await wait_for_commits(pending, self.raft_config.request_timeout_ms / 1000,
                                   self.clock)
        if client is not None and client.is_leader and not self.is_single_voter:
            client.resign(self.clock.time_ms())
            self._step(client)  # sends EndQuorumEpoch; best effort
            if self._sends:
                await asyncio.wait(set(self._sends), timeout=0.5)
        if self._driver is not None:
            self._driver.cancel()
            await asyncio.gather(self._driver, return_exceptions=True)
        for task in list(self._sends):
            task.cancel()
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)
        if self._flusher is not None:
            await asyncio.wait([self._flusher])
        if self._snapshotting is not None:
            await asyncio.wait([self._snapshotting])
        for parked in self._parked.values():
            if not parked.done() and client is not None:
                parked.set_result(raft_messages.fetch_response(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, None, client.epoch,
                    client.high_watermark))
        if self._appended:
            self._fail(KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is shut down"))
        self.log.close()


def write_image_snapshot(image: MetadataImage, writer: SnapshotWriter) -> int:
    """Writes the image's records into the snapshot and freezes it (on a worker thread);
    the snapshot's size."""
    try:
        writer.append(m.encode_metadata_record(record, type(record).MAX_VERSION)
                      for record in image_records(image))
        return writer.freeze()
    except BaseException:
        writer.abort()
        raise


def image_from_snapshot(data: bytes, snapshot_id: OffsetAndEpoch) -> MetadataImage:
    """The image a metadata snapshot holds (validated), as of its last included offset."""
    content = read_snapshot(data)
    records = (m.decode_metadata_record(value)[0] for value in content.values)
    return replay_records(records, snapshot_id.offset - 1, snapshot_id.epoch)


_PREPARING = RuntimeError("the image waits for its preparation")  # a marker, never raised


def _at_offset(image: MetadataImage, offset: int, epoch: int) -> MetadataImage:
    delta = MetadataDelta(image)
    delta.offset = offset
    delta.epoch = epoch
    return delta.apply()


def _not_available(request: m.Message) -> m.Message:
    """The answer to a Raft request before the quorum runs or after it stopped."""
    if isinstance(request, m.FetchRequest):
        return raft_messages.top_level_error(m.FetchResponse, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if isinstance(request, (m.AddRaftVoterRequest, m.RemoveRaftVoterRequest,
                            m.UpdateRaftVoterRequest)):
        return API_BY_KEY[request.API_KEY].response(error_code=ErrorCode.NOT_CONTROLLER.code)
    response_type = {
        m.FetchSnapshotRequest: m.FetchSnapshotResponse,
        m.VoteRequest: m.VoteResponse, m.BeginQuorumEpochRequest: m.BeginQuorumEpochResponse,
        m.EndQuorumEpochRequest: m.EndQuorumEpochResponse,
        m.DescribeQuorumRequest: m.DescribeQuorumResponse,
    }[type(request)]
    return raft_messages.top_level_error(response_type, ErrorCode.NOT_CONTROLLER)
