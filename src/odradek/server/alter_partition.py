"""ISR changes go to the controller (Kafka's DefaultAlterPartitionManager).

A partition leader proposes an ISR change (`IsrChange`: a follower caught up, or fell behind
for `replica.lag.time.max.ms`) and keeps it pending until the controller answers. The manager
sends one AlterPartition (v3: the ISR with each member's broker epoch, KIP-903) at a time to
the active controller; changes proposed meanwhile wait and go together in the next request.
A failed request (no controller, connection lost, NOT_CONTROLLER, STALE_BROKER_EPOCH) is sent
again after a backoff; a per-partition answer goes back to the replica manager, which applies
the new ISR or drops the pending change (the metadata image then rules).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.server.replica_manager import IsrChange, ReplicaManager

log = logging.getLogger("odradek.replica.alter_partition")

ALTER_PARTITION_VERSION = 3
RETRY_BACKOFF_MS = 100
# Answers for which the same change is sent again (the controller was not reachable or not
# ready); any other answer settles the change.
RETRIABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_BROKER_EPOCH,
                       ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_SERVER_ERROR,
                       ErrorCode.OPERATION_NOT_ATTEMPTED})

ControllerSend = Callable[[m.Message, int], Awaitable[m.Message]]


class AlterPartitionManager:
    def __init__(self, broker_id: int, broker_epoch: Callable[[], int], send: ControllerSend,
                 replica_manager: ReplicaManager) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.send = send
        self.replica_manager = replica_manager
        self._queued: dict[tuple[str, int], IsrChange] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    def submit(self, change: IsrChange) -> None:
        """Queue a change (a newer one for the same partition replaces it)."""
        self._queued[change.partition.key] = change
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="alter-partition")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._queued = self._queued, {}
            if not batch:
                continue
            retry = await self._send(batch)
            if retry:
                for key, change in retry.items():
                    self._queued.setdefault(key, change)
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                self._wakeup.set()

    async def _send(self, batch: dict[tuple[str, int], IsrChange]
                    ) -> dict[tuple[str, int], IsrChange]:
        """Sends one request; returns the changes to send again."""
        request, by_id = self._request(batch)
        try:
            response = await self.send(request, ALTER_PARTITION_VERSION)
        except Exception as exc:  # noqa: BLE001 - no controller yet, connection lost, timed out
            log.info("broker %d: AlterPartition failed (%s): retrying", self.broker_id, exc)
            return batch
        top = ErrorCode(response.error_code)
        if top != ErrorCode.NONE:
            if top in RETRIABLE:
                return batch
            for change in batch.values():
                self.replica_manager.on_isr_change_answer(change, top)
            return {}
        retry: dict[tuple[str, int], IsrChange] = {}
        for topic in response.topics:
            name = by_id.get(topic.topic_id)
            for data in topic.partitions:
                key = (name, data.partition_index) if name is not None else None
                change = batch.pop(key, None) if key is not None else None
                if change is None:
                    continue
                error = ErrorCode(data.error_code)
                if error in RETRIABLE:
                    retry[key] = change  # type: ignore[index]
                    continue
                self.replica_manager.on_isr_change_answer(
                    change, error, tuple(data.isr), data.leader_epoch, data.partition_epoch)
        # Changes the controller did not mention: propose again later from the fresh state.
        for change in batch.values():
            self.replica_manager.on_isr_change_answer(change, ErrorCode.UNKNOWN_SERVER_ERROR)
        return retry

    def _request(self, batch: dict[tuple[str, int], IsrChange]
                 ) -> tuple[m.AlterPartitionRequest, dict[uuid.UUID, str]]:
        Req = m.AlterPartitionRequest
        topics: dict[uuid.UUID, list] = {}
        names: dict[uuid.UUID, str] = {}
        for change in batch.values():
            partition = change.partition
            names[partition.topic_id] = partition.topic
            topics.setdefault(partition.topic_id, []).append(Req.PartitionData(
                partition_index=partition.index, leader_epoch=change.leader_epoch,
                new_isr_with_epochs=[Req.BrokerState(broker_id=r,
                                                     broker_epoch=change.broker_epochs.get(r, -1))
                                     for r in change.new_isr],
                leader_recovery_state=change.leader_recovery_state,
                partition_epoch=change.partition_epoch))
        request = Req(broker_id=self.broker_id, broker_epoch=self.broker_epoch(),
                      topics=[Req.TopicData(topic_id=tid, partitions=parts)
                              for tid, parts in topics.items()])
        return request, names
