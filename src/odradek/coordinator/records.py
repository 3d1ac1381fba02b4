"""The records of `__consumer_offsets`: what the group coordinator writes and how it reads
them back.

Keys and values are Kafka's (int16 version prefix, then the body): offsets as OffsetCommitKey v1
-> OffsetCommitValue v3 (v1 when the commit carries an expire timestamp), groups as
GroupMetadataKey v2 -> GroupMetadataValue v3, the versions Kafka 3.8 writes. A null value is a
tombstone. Replaying a partition keeps the last value per key, so the log can be compacted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.group import (
    Group,
    GroupState,
    Member,
    OffsetAndMetadata,
    TopicPartition,
)
# build_batch lives in the runtime; imported here too for the writers of offsets records.
from odradek.coordinator.runtime import Record, build_batch  # noqa: F401
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError
from odradek.protocol.records import iter_batches, iter_records

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
    records: int = 0
    skipped: int = 0

    def apply(self, key_bytes: bytes | None, value_bytes: bytes | None) -> None:
        self.records += 1
        if key_bytes is None:
            self.skipped += 1
            return
        try:
            key, key_version = m.decode_consumer_offsets_key(key_bytes)
            if isinstance(key, m.OffsetCommitKey):
                tp = TopicPartition(key.topic, key.partition)
                offsets = self.offsets.setdefault(key.group, {})
                if value_bytes is None:
                    offsets.pop(tp, None)
                else:
                    value = _decode_value(value_bytes, key_version)
                    offsets[tp] = OffsetAndMetadata(
                        offset=value.offset, leader_epoch=value.leader_epoch,
                        metadata=value.metadata, commit_timestamp=value.commit_timestamp,
                        expire_timestamp=value.expire_timestamp)
            elif isinstance(key, m.GroupMetadataKey):
                if value_bytes is None:
                    self.groups.pop(key.group, None)
                else:
                    self.groups[key.group] = _decode_value(value_bytes, key_version)
            else:
                # Records of the new consumer group protocol (KIP-848): not ours to replay.
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
                continue  # transaction markers: no transactional offset commits yet
            for record in iter_records(data, position, header):
                self.apply(record.key, record.value)
        return next_offset

    def group_ids(self) -> set[str]:
        return set(self.groups) | {group_id for group_id, offsets in self.offsets.items()
                                   if offsets}

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
        group.offsets = dict(self.offsets.get(group_id, {}))
        return group
