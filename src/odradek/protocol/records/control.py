"""Control records: transaction markers (COMMIT/ABORT) and the KRaft control record types.

A control record's key is (int16 version, int16 type). Transaction markers carry the
EndTxnMarker value (int16 version, int32 coordinatorEpoch). KRaft's control records
(LeaderChange, snapshot header/footer, KRaftVersion, Voters) carry message-spec values that the
metadata layer decodes; this module only identifies them.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records.batch import NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE
from odradek.protocol.records.builder import RecordBatchBuilder
from odradek.protocol.records.record import Record

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class EndTxnMarker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def encode_control_key(record_type: ControlRecordType | int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, int(record_type))


def decode_control_key(key: bytes | None) -> ControlRecordType:
    """The type in a control record key; types this code does not know map to UNKNOWN.

    Like Kafka, newer key versions are read too (the version and type prefix is stable).
    """
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError("control record key is shorter than 4 bytes")
    version, record_type = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(record_type)
    except ValueError:
        return ControlRecordType.UNKNOWN


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return _END_TXN_MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_end_txn_marker(record: Record) -> EndTxnMarker:
    """The marker in a COMMIT/ABORT control record."""
    record_type = decode_control_key(record.key)
    if record_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise CorruptRecordError(f"control record of type {record_type.name} is not a txn marker")
    value = record.value
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise CorruptRecordError("end transaction marker value is shorter than 6 bytes")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"invalid end transaction marker version {version}")
    return EndTxnMarker(record_type == ControlRecordType.COMMIT, coordinator_epoch)


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transactional control batch holding one COMMIT or ABORT marker (as WriteTxnMarkers)."""
    record_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_control_record_batch(
        record_type,
        encode_end_txn_marker_value(coordinator_epoch),
        timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
    )


def build_control_record_batch(
    record_type: ControlRecordType,
    value: bytes,
    timestamp: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = -1,
    producer_epoch: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """A control batch with one record of `record_type` (e.g. KRaft's LeaderChange)."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=is_transactional,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(timestamp, encode_control_key(record_type), value)
    return builder.build()
