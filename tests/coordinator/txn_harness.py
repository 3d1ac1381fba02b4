"""An in-process transaction coordinator over real `__transaction_state` storage logs, on a
manual clock, with a marker writer the test controls (it records each request and answers
each partition with the error the test set, NONE by default)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from group_harness import LoopClock, settle

from odradek.coordinator.transaction_coordinator import (
    MarkerRequest,
    TransactionConfig,
    TransactionCoordinator,
)
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.types import TopicPartition
from odradek.storage import AppendOrigin, Log, LogConfig

TEST_CONFIG = TransactionConfig(transactional_id_expiration_ms=3_600_000,
                                transaction_max_timeout_ms=900_000,
                                abort_timed_out_interval_ms=10_000,
                                remove_expired_interval_ms=60_000)


class TxnHarness:
    def __init__(self, directory: Path, partitions: int = 1,
                 config: TransactionConfig = TEST_CONFIG) -> None:
        self.directory = directory
        self.partitions = partitions
        self.config = config
        self.clock = LoopClock()
        self.logs = {index: self._open(index) for index in range(partitions)}
        self.append_error: ErrorCode | None = None
        self.next_producer_id = 1000
        #: every marker request written, in order
        self.markers: list[MarkerRequest] = []
        #: partition -> the error its marker gets (NONE when absent)
        self.marker_errors: dict[TopicPartition, ErrorCode] = {}
        self.coordinator = self._coordinator()

    def _open(self, index: int) -> Log:
        return Log(self.directory / f"__transaction_state-{index}", LogConfig())

    def _coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(self.config, self._append,
                                      num_partitions=lambda: self.partitions,
                                      generate_producer_id=self._generate_producer_id,
                                      write_markers=self._write_markers, clock=self.clock)

    async def _generate_producer_id(self) -> int:
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        return producer_id

    async def _append(self, partition: int, records: bytes) -> None:
        if self.append_error is not None:
            raise KafkaError(self.append_error)
        log = self.logs[partition]
        log.append_as_leader(records, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
        log.maybe_increment_high_watermark(log.log_end_offset)

    async def _write_markers(self, request: MarkerRequest) -> dict[TopicPartition, ErrorCode]:
        self.markers.append(request)
        return {tp: self.marker_errors.get(tp, ErrorCode.NONE) for tp in request.partitions}

    async def start(self, coordinator_epoch: int = 0) -> TxnHarness:
        self.coordinator.start()
        await asyncio.gather(*(self.coordinator.elect(index, self.logs[index],
                                                      coordinator_epoch)
                               for index in range(self.partitions)))
        return self

    async def restart(self, coordinator_epoch: int = 1) -> None:
        """A new coordinator (as after a leader change) loads the same logs."""
        await self.coordinator.close()
        self.coordinator = self._coordinator()
        await self.start(coordinator_epoch)

    async def advance(self, ms: float) -> None:
        self.clock.advance(ms)
        await settle()

    async def close(self) -> None:
        await self.coordinator.close()
        for log in self.logs.values():
            log.close()
