"""A single-voter KRaft quorum: the `__cluster_metadata` log and the image replayed from it.

In combined mode with one voter, this node is the quorum leader. `append(records)` writes the
records as one record batch at once (so offsets follow call order; each record value framed as
KRaft does: frame version, record type, record version, struct) and returns a future that
completes with the batch's last offset once the batch is COMMITTED. Nothing is visible before
that: the image advances, and listeners are called, only as the commit index (the metadata log's
high watermark) passes a batch, batch by batch in offset order, like Kafka's RaftClient and
MetadataLoader.

Commit path. A background flusher fsyncs the log off the event loop; appends made while a flush
runs wait for the next one, which covers all of them (group commit). A flush records how far
this voter's log is on disk (`_on_local_flush`), and the commit index is the end offset a
majority of voters has: with one voter that is our own, so `_advance_commit` follows our fsyncs.
Multi-voter Raft keeps `append` and everything after `_advance_commit`, and replaces the
majority computation: it records each follower's fetched end offset and calls `_advance_commit`
with the offset a majority has reached (a follower calls it with the leader's high watermark and
replays from its log instead of from `_pending`).

At start the whole log is replayed (`load`) and counts as committed; every start begins a new
leader epoch marked by a LeaderChange control record (`become_leader`), like Raft's election.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.commit import CommitWaiters
from odradek.metadata.image import EMPTY_IMAGE, MetadataDelta, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    build_control_record_batch,
    iter_batches,
    iter_records,
)
from odradek.storage.log import Log
from odradek.storage.validator import AppendOrigin

log = logging.getLogger("odradek.quorum")

METADATA_TOPIC = "__cluster_metadata"
READ_CHUNK = 8 * 1024 * 1024

# Makes the log durable up to (excluding) an end offset; awaited by the flusher.
FlushFunction = Callable[[int], Awaitable[None]]
MetadataListener = Callable[[MetadataImage], None]


@dataclass
class _PendingBatch:
    """An appended batch waiting for the commit index to pass it."""

    last_offset: int
    epoch: int
    records: list[Any]  # decoded, replayed at commit; empty for a control batch


class MetadataQuorum:
    def __init__(self, metadata_log: Log, node_id: int, *, clock: Clock = SYSTEM_CLOCK,
                 flush: FlushFunction | None = None) -> None:
        self.log = metadata_log
        self.node_id = node_id
        self.clock = clock
        self.image: MetadataImage = EMPTY_IMAGE  # as of the commit index, never ahead of it
        self.epoch = 0
        self.listeners: list[MetadataListener] = []
        self._flush: FlushFunction = flush if flush is not None else self._flush_log
        self._pending: deque[_PendingBatch] = deque()  # appended, not committed; offset order
        # The commit index is the metadata log's high watermark (as in KRaft); the waiters
        # follow it.
        self._commits = CommitWaiters()  # the appenders' futures (the one commit mechanism)
        self._flushed_end = 0  # this voter's log is on disk below this offset
        self._flusher: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False

    # -- state
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
        return len(self._pending)

    # -- start
    def load(self) -> MetadataImage:
        """Replay the whole metadata log into an image; all of it counts as committed."""
        delta = MetadataDelta(EMPTY_IMAGE)
        count = 0
        offset = self.log.log_start_offset
        end = self.log.log_end_offset
        while offset < end:
            data = self.log.read(offset, READ_CHUNK, max_offset=None, min_one_batch=True)
            buf = data.read_bytes()
            if not buf:
                break
            for pos, header in iter_batches(buf):
                if header.last_offset < offset:
                    continue
                self.epoch = max(self.epoch, header.partition_leader_epoch)
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
        self._flushed_end = self.log.recovery_point
        self.log.update_high_watermark(self.log.log_end_offset)
        self._commits.reset(self.log.log_end_offset)
        log.info("replayed %d metadata records up to offset %d (epoch %d)", count,
                 self.image.offset, self.epoch)
        return self.image

    def become_leader(self) -> asyncio.Future[int]:
        """Start a new epoch, marked in the log by a LeaderChange control record; the future
        completes once that record is committed."""
        self.epoch += 1
        message = m.LeaderChangeMessage(
            version=0, leader_id=self.node_id,
            voters=[m.LeaderChangeMessage.Voter(voter_id=self.node_id)],
            granting_voters=[m.LeaderChangeMessage.Voter(voter_id=self.node_id)],
        )
        batch = build_control_record_batch(ControlRecordType.LEADER_CHANGE, message.encode(0),
                                           self.clock.time_ms(), partition_leader_epoch=self.epoch)
        return self._append_batch(batch, [])

    # -- append
    def append(self, records: Iterable[Any]) -> asyncio.Future[int]:
        """Append records as one batch now; the future completes with the batch's last offset
        once it is committed, after the image includes the records and listeners have seen it.

        Raises KafkaError at once if the quorum is closed or its log failed. An empty append
        completes once everything appended before it is committed."""
        records = list(records)
        self._check_writable()
        if not records:
            return self._barrier()
        now = self.clock.time_ms()
        builder = RecordBatchBuilder(partition_leader_epoch=self.epoch)
        for record in records:
            builder.append(now, None, m.encode_metadata_record(record, type(record).MAX_VERSION))
        return self._append_batch(builder.build(), records)

    def _check_writable(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is shut down")
        if self._failure is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"the metadata log failed: {self._failure}")

    def _append_batch(self, batch: bytes, records: list[Any]) -> asyncio.Future[int]:
        self._check_writable()
        info = self.log.append_as_leader(batch, leader_epoch=self.epoch,
                                         now_ms=self.clock.time_ms(),
                                         origin=AppendOrigin.COORDINATOR)
        self._pending.append(_PendingBatch(info.last_offset, self.epoch, records))
        committed = self._commits.wait(info.last_offset)
        self._schedule_flush()
        return committed

    def _barrier(self) -> asyncio.Future[int]:
        if self._pending:
            return self._commits.wait(self._pending[-1].last_offset)
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiter.set_result(self.committed_offset)
        return waiter

    # -- commit path
    def _schedule_flush(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_pending())

    async def _flush_pending(self) -> None:
        """Flush until every appended batch is on disk; each round covers all the batches
        appended while the previous one ran (group commit)."""
        try:
            while self._pending and self._pending[-1].last_offset >= self._flushed_end:
                end_offset = self.log.log_end_offset
                await self._flush(end_offset)
                self._on_local_flush(end_offset)
        except asyncio.CancelledError:
            self._fail(KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is shut down"))
            raise
        except Exception as exc:
            log.exception("cannot flush the metadata log: pending metadata changes fail")
            self._fail(exc)
        finally:
            self._flusher = None

    async def _flush_log(self, end_offset: int) -> None:
        await asyncio.to_thread(self.log.flush, end_offset)

    def _on_local_flush(self, end_offset: int) -> None:
        """This voter has the log on disk below `end_offset`. The commit index is the end offset
        a majority of the voters has; with one voter, the majority is us."""
        self._flushed_end = max(self._flushed_end, end_offset)
        self._advance_commit(self._flushed_end - 1)

    def _advance_commit(self, offset: int) -> None:
        """Move the commit index to `offset` and publish the batches it passes, in offset
        order: each becomes the next image, then listeners see it, then its waiters complete."""
        if not self.log.maybe_increment_high_watermark(offset + 1):
            return
        failed: dict[int, BaseException] = {}
        while self._pending and self._pending[0].last_offset <= offset:
            batch = self._pending.popleft()
            error = self._publish(batch)
            if error is not None:
                failed[batch.last_offset] = error
        self._commits.advance(offset + 1, failed)

    def _publish(self, batch: _PendingBatch) -> BaseException | None:
        try:
            delta = MetadataDelta(self.image)
            for record in batch.records:
                delta.replay(record)
            delta.offset = batch.last_offset
            delta.epoch = batch.epoch
            image = delta.apply()
        except Exception as exc:  # a record the image cannot take: fail its op, keep going
            log.exception("cannot replay the metadata batch ending at offset %d",
                          batch.last_offset)
            return exc
        self.image = image
        for listener in list(self.listeners):
            try:
                listener(image)
            except Exception:  # one failing listener must not hold back the others
                log.exception("metadata listener %r failed at offset %d", listener,
                              batch.last_offset)
        return None

    def _fail(self, exc: BaseException) -> None:
        """The log can no longer commit: fail what is pending and refuse further appends."""
        if self._failure is None:
            self._failure = exc
        self._pending.clear()
        self._commits.fail_all(exc)

    # -- stop
    async def close(self) -> None:
        """Refuse new appends, let pending ones commit (or fail), then close the log."""
        self._closed = True
        flusher = self._flusher
        if flusher is not None:
            await asyncio.wait([flusher])
        if self._pending:  # only if the flusher died with them
            self._fail(KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata quorum is shut down"))
        self.log.close()
