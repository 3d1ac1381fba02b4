"""The records of `__transaction_state` (Kafka's TransactionLog) and their replay.

Key: int16 version 0 + TransactionLogKey (the transactional id). Value: int16 version 0 +
TransactionLogValue (producer id and epoch, timeout, state id, partitions, timestamps), as
Kafka writes it for transactions v0/v1; a None value (tombstone) removes an expired id. Replay
keeps the last value of each key.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from odradek.coordinator.runtime import Record
from odradek.coordinator.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    TxnTransit,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError
from odradek.protocol.records import iter_batches, iter_records
from odradek.protocol.types import TopicPartition

log = logging.getLogger("odradek.coordinator.transaction_log")

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0


def transaction_key(transactional_id: str) -> bytes:
    return m.encode_versioned(m.TransactionLogKey(transactional_id=transactional_id),
                              KEY_VERSION)


def transaction_value(transit: TxnTransit) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(transit.topic_partitions):
        by_topic[tp.topic].append(tp.partition)
    value = m.TransactionLogValue(
        producer_id=transit.producer_id, producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=transit.state.id,
        transaction_partitions=[
            m.TransactionLogValue.PartitionsSchema(topic=topic, partition_ids=partitions)
            for topic, partitions in by_topic.items()],
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp)
    return m.encode_versioned(value, VALUE_VERSION)


def transaction_record(transactional_id: str, transit: TxnTransit) -> Record:
    """The record of a transition; Dead is written as the id's tombstone."""
    if transit.state == TransactionState.DEAD:
        return transaction_key(transactional_id), None
    return transaction_key(transactional_id), transaction_value(transit)


def metadata_from_value(transactional_id: str,
                        value: m.TransactionLogValue) -> TransactionMetadata:
    state = TransactionState.from_id(value.transaction_status)
    partitions = {TopicPartition(p.topic, index) for p in value.transaction_partitions
                  for index in p.partition_ids}
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=value.producer_id,
        last_producer_id=(value.previous_producer_id if value.previous_producer_id >= 0
                          else NO_PRODUCER_ID),
        producer_epoch=value.producer_epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=value.transaction_timeout_ms, state=state,
        topic_partitions=partitions,
        txn_start_timestamp=value.transaction_start_timestamp_ms,
        txn_last_update_timestamp=value.transaction_last_update_timestamp_ms)


@dataclass
class LoadedTransactions:
    """What replaying a `__transaction_state` partition found: id -> its last value."""

    values: dict[str, m.TransactionLogValue] = field(default_factory=dict)
    records: int = 0

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        self.records += 1
        try:
            decoded_key, _version = m.decode_versioned(m.TransactionLogKey, key)
            transactional_id = decoded_key.transactional_id
            if value is None:
                self.values.pop(transactional_id, None)
                return
            self.values[transactional_id], _ = m.decode_versioned(m.TransactionLogValue,
                                                                  value)
        except (DecodeError, ValueError) as exc:
            log.warning("skipping an undecodable %s record: %s", TRANSACTION_STATE_TOPIC, exc)

    def apply_batches(self, data: bytes | memoryview) -> int:
        """Applies every complete batch in `data`; returns the offset after the last one
        (-1 when `data` holds no complete batch)."""
        next_offset = -1
        for position, header in iter_batches(data):
            next_offset = header.last_offset + 1
            if header.is_control:
                continue
            for record in iter_records(data, position, header):
                self.apply(record.key, record.value)
        return next_offset

    def metadata(self) -> list[TransactionMetadata]:
        return [metadata_from_value(transactional_id, value)
                for transactional_id, value in self.values.items()]
