"""The records of `__consumer_offsets`: what the group coordinator writes and how it reads
them back.

Keys and values are Kafka's (int16 version prefix, then the body): offsets as OffsetCommitKey v1
-> OffsetCommitValue v3 (v1 when the commit carries an expire timestamp), groups as
GroupMetadataKey v2 -> GroupMetadataValue v3, the versions Kafka 3.8 writes; KIP-848 consumer
groups as their ConsumerGroup* records (`consumer_group`). A null value is a tombstone. Replaying a partition keeps the last value per key, so the log can be compacted.

Transactional offset commits (TxnOffsetCommit) are offset records in a transactional batch of
the producer: replayed, they stay pending under that producer id until its COMMIT marker (a
control batch) makes them committed - where they are newer records than the committed offset
of their partition - or its ABORT marker drops them (Kafka's replay and
replayEndTransactionMarker). Offsets of a transaction whose marker is not in the log yet stay
pending after the load: the marker comes later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.consumer_group import CONSUMER_GROUP_RECORD_TYPES, ConsumerGroup
from odradek.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    Member,
    OffsetAndMetadata,
    TopicPartition,
)
from odradek.coordinator.runtime import Record
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError
from odradek.protocol.records import (
    NO_PRODUCER_ID,
    ControlRecordType,
    decode_control_key,
    iter_batches,
    iter_records,
)

log = logging.getLogger("odradek.coordinator.records")

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3



def offset_key(group_id: str, tp: TopicPartition) -> bytes:
    return m.encode_versioned(
        m.OffsetCommitKey(group=group_id, topic=tp.topic, partition=tp.partition),
        OFFSET_COMMIT_KEY_VERSION)


def group_key(group_id: str) -> bytes:
    return m.encode_versioned(m.GroupMetadataKey(group=group_id), GROUP_METADATA_KEY_VERSION)


def offset_value(offset: OffsetAndMetadata) -> bytes:
    value = m.OffsetCommitValue(offset=offset.offset, metadata=offset.metadata,
                                commit_timestamp=offset.commit_timestamp)
    if offset.expire_timestamp >= 0:
        value.expire_timestamp = offset.expire_timestamp
        return m.encode_versioned(value, OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY)
    value.leader_epoch = offset.leader_epoch
    return m.encode_versioned(value, OFFSET_COMMIT_VALUE_VERSION)


def offset_record(group_id: str, tp: TopicPartition, offset: OffsetAndMetadata) -> Record:
    return offset_key(group_id, tp), offset_value(offset)


def group_record(group: Group, assignment: dict[str, bytes]) -> Record:
    """The group's metadata with `assignment` (member id -> assignment bytes)."""
    value = m.GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=group.state_timestamp_ms,
        members=[
            m.GroupMetadataValue.MemberMetadata(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout=member.rebalance_timeout_ms,
                session_timeout=member.session_timeout_ms,
                subscription=member.metadata(group.protocol_name),
                assignment=assignment.get(member.member_id, b""),
            )
            for member in group.members.values()
        ],
    )
    return group_key(group.group_id), m.encode_versioned(value, GROUP_METADATA_VALUE_VERSION)


# ------------------------------------------------------------------------------------------
# replay


def _decode_value(data: bytes, key_version: int) -> Any:
    decoded = m.decode_consumer_offsets_value(data, key_version)
    assert decoded is not None  # only tombstones decode to None
    return decoded[0]


@dataclass
class LoadedPartition:
    """What replaying one `__consumer_offsets` partition found: the last value per key."""

    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    groups: dict[str, Any] = field(default_factory=dict)  # group id -> GroupMetadataValue
    #: producer id -> group id -> the offsets of that producer's open transaction
    pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = field(
        default_factory=dict)
    #: KIP-848 consumer groups: group id -> its replayed state
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0

    def apply(self, key_bytes: bytes | None, value_bytes: bytes | None,
              producer_id: int = NO_PRODUCER_ID, record_offset: int = -1) -> None:
        """Replays one record; `producer_id` is its batch's if the batch is transactional."""
        self.records += 1
        if key_bytes is None:
            self.skipped += 1
            return
        try:
            key, key_version = m.decode_consumer_offsets_key(key_bytes)
            if isinstance(key, m.OffsetCommitKey):
                tp = TopicPartition(key.topic, key.partition)
                if value_bytes is None:
                    self.offsets.setdefault(key.group, {}).pop(tp, None)
                    # A tombstone removes the open transactions' offsets of the partition too.
                    for by_group in self.pending_txn_offsets.values():
                        by_group.get(key.group, {}).pop(tp, None)
                    return
                value = _decode_value(value_bytes, key_version)
                offset = OffsetAndMetadata(
                    offset=value.offset, leader_epoch=value.leader_epoch,
                    metadata=value.metadata, commit_timestamp=value.commit_timestamp,
                    expire_timestamp=value.expire_timestamp, record_offset=record_offset)
                if producer_id == NO_PRODUCER_ID:
                    self.offsets.setdefault(key.group, {})[tp] = offset
                else:
                    self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(
                        key.group, {})[tp] = offset
            elif isinstance(key, m.GroupMetadataKey):
                if value_bytes is None:
                    self.groups.pop(key.group, None)
                else:
                    self.groups[key.group] = _decode_value(value_bytes, key_version)
            elif key_version in CONSUMER_GROUP_RECORD_TYPES:
                # KIP-848 consumer groups: replayed in log order into the group's state.
                group_id = key.group_id
                group = self.consumer_groups.get(group_id)
                if group is None:
                    if value_bytes is None:
                        return
                    group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
                value = None if value_bytes is None else _decode_value(value_bytes, key_version)
                group.replay(key, value)
                if value is None and isinstance(key, m.ConsumerGroupMetadataKey):
                    del self.consumer_groups[group_id]  # the group was deleted
            else:
                self.skipped += 1
        except DecodeError as exc:
            log.warning("skipping an undecodable __consumer_offsets record: %s", exc)
            self.skipped += 1

    def apply_batches(self, data: bytes | memoryview) -> int:
        """Applies every complete batch in `data`; returns the offset after the last one
        (-1 when `data` holds no complete batch)."""
        next_offset = -1
        for position, header in iter_batches(data):
            next_offset = header.last_offset + 1
            if header.is_control:
                if header.is_transactional:
                    self._apply_marker(data, position, header)
                continue
            producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
            for record in iter_records(data, position, header):
                # Kafka compares the batches' record offsets; all records of one commit are
                # in one batch, under its base offset.
                self.apply(record.key, record.value, producer_id, header.base_offset)
        return next_offset

    def _apply_marker(self, data: bytes | memoryview, position: int, header: Any) -> None:
        for record in iter_records(data, position, header):
            try:
                marker = decode_control_key(record.key)
            except DecodeError as exc:
                log.warning("skipping an undecodable control record: %s", exc)
                self.skipped += 1
                return
            if marker == ControlRecordType.COMMIT:
                self.complete_transaction(header.producer_id, commit=True)
            elif marker == ControlRecordType.ABORT:
                self.complete_transaction(header.producer_id, commit=False)
            return  # a control batch holds one record

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended: its offsets are committed (where their records
        are newer than the committed ones) or dropped."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if pending is None or not commit:
            return
        for group_id, offsets in pending.items():
            committed = self.offsets.setdefault(group_id, {})
            for tp, offset in offsets.items():
                current = committed.get(tp)
                if current is None or current.record_offset < offset.record_offset:
                    committed[tp] = offset

    def group_ids(self) -> set[str]:
        """The groups the partition holds: with metadata, offsets or open transactions'
        offsets (a transaction's commit creates a simple group, as Kafka's replay does)."""
        return set(self.groups) | set(self.consumer_groups) \
            | {group_id for group_id, offsets in self.offsets.items() if offsets} \
            | {group_id for by_group in self.pending_txn_offsets.values()
               for group_id, offsets in by_group.items() if offsets}

    def build_group(self, group_id: str, now_ms: int) -> Group:
        """The group as the log describes it: Stable with its members, or Empty."""
        value = self.groups.get(group_id)
        group = Group(group_id, state_timestamp_ms=now_ms)
        if value is not None:
            group.state = GroupState.STABLE if value.members else GroupState.EMPTY
            group.generation_id = value.generation
            group.protocol_type = value.protocol_type or None
            group.protocol_name = value.protocol
            group.leader_id = value.leader
            if value.current_state_timestamp >= 0:
                group.state_timestamp_ms = value.current_state_timestamp
            stored: Any
            for stored in value.members:
                member = Member(
                    member_id=stored.member_id,
                    group_instance_id=stored.group_instance_id,
                    client_id=stored.client_id,
                    client_host=stored.client_host,
                    rebalance_timeout_ms=stored.rebalance_timeout if stored.rebalance_timeout >= 0
                    else stored.session_timeout,
                    session_timeout_ms=stored.session_timeout,
                    protocol_type=group.protocol_type or "",
                    protocols=[(group.protocol_name or "", stored.subscription)],
                    assignment=stored.assignment,
                )
                group.members[member.member_id] = member
                if member.group_instance_id is not None:
                    group.static_members[member.group_instance_id] = member.member_id
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None:
            group.consumer = consumer
            group.protocol_type = CONSUMER_PROTOCOL_TYPE
            group.state = GroupState.EMPTY if consumer.is_empty else GroupState.STABLE
        group.offsets = dict(self.offsets.get(group_id, {}))
        for producer_id, by_group in self.pending_txn_offsets.items():
            if by_group.get(group_id):
                group.pending_txn_offsets[producer_id] = dict(by_group[group_id])
        return group
