"""A single-voter KRaft quorum: the `__cluster_metadata` log and the image replayed from it.

In combined mode with one voter, this node is the quorum leader: it appends metadata records as
record batches (each record value framed as KRaft does: frame version, record type, record
version, struct), fsyncs them (a record is committed once the majority - here, us - has it on
disk) and replays them into the next image. At start the whole log is replayed; every start
begins a new leader epoch marked by a LeaderChange control record, like Raft's election.
Multi-voter replication plugs in behind `append`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from odradek.metadata.image import EMPTY_IMAGE, MetadataDelta, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    build_control_record_batch,
    iter_batches,
    iter_records,
)
from odradek.storage.validator import AppendOrigin

log = logging.getLogger("odradek.quorum")

METADATA_TOPIC = "__cluster_metadata"
READ_CHUNK = 8 * 1024 * 1024


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MetadataQuorum:
    def __init__(self, metadata_log: Any, node_id: int) -> None:
        self.log = metadata_log
        self.node_id = node_id
        self.image: MetadataImage = EMPTY_IMAGE
        self.epoch = 0
        self.listeners: list[Callable[[MetadataImage], None]] = []

    def load(self) -> MetadataImage:
        """Replay the whole metadata log into an image."""
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
        log.info("replayed %d metadata records up to offset %d (epoch %d)", count,
                 self.image.offset, self.epoch)
        return self.image

    def become_leader(self) -> None:
        """Start a new epoch, marked in the log by a LeaderChange control record."""
        self.epoch += 1
        message = m.LeaderChangeMessage(
            version=0, leader_id=self.node_id,
            voters=[m.LeaderChangeMessage.Voter(voter_id=self.node_id)],
            granting_voters=[m.LeaderChangeMessage.Voter(voter_id=self.node_id)],
        )
        batch = build_control_record_batch(ControlRecordType.LEADER_CHANGE, message.encode(0),
                                           _now_ms(), partition_leader_epoch=self.epoch)
        self.log.append_as_leader(batch, leader_epoch=self.epoch, now_ms=_now_ms(),
                                  origin=AppendOrigin.COORDINATOR)
        self.log.flush()

    def append(self, records: Iterable[Any]) -> MetadataImage:
        """Commit records to the metadata log and return the image that includes them."""
        records = list(records)
        if not records:
            return self.image
        now = _now_ms()
        builder = RecordBatchBuilder(partition_leader_epoch=self.epoch)
        for record in records:
            builder.append(now, None, m.encode_metadata_record(record, type(record).MAX_VERSION))
        info = self.log.append_as_leader(builder.build(), leader_epoch=self.epoch, now_ms=now,
                                         origin=AppendOrigin.COORDINATOR)
        self.log.flush()
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        delta.offset = info.last_offset
        delta.epoch = self.epoch
        self.image = delta.apply()
        for listener in self.listeners:
            listener(self.image)
        return self.image
