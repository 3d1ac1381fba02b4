"""Control batches: transaction markers and KRaft control record keys."""

from __future__ import annotations

import struct

import pytest

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import (
    BatchHeader,
    ControlRecordType,
    EndTxnMarker,
    Record,
    build_control_batch,
    build_control_record_batch,
    decode_control_key,
    decode_end_txn_marker,
    encode_control_key,
    iter_records,
    verify_crc,
)


@pytest.mark.parametrize("commit", [True, False])
def test_transaction_marker_batch(commit: bool) -> None:
    data = build_control_batch(
        producer_id=4000,
        producer_epoch=7,
        commit=commit,
        coordinator_epoch=11,
        timestamp=1_700_000_000_000,
        base_offset=55,
        partition_leader_epoch=3,
    )
    header = BatchHeader.parse(data)
    verify_crc(data, 0, header)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4000, 7, -1)
    assert (header.base_offset, header.partition_leader_epoch, header.records_count) == (55, 3, 1)
    (record,) = list(iter_records(data, 0, header))
    assert record.offset == 55
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 11)
    assert decode_control_key(record.key) is (
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    )
    assert decode_end_txn_marker(record) == EndTxnMarker(commit, 11)


@pytest.mark.parametrize(
    ("type_id", "expected"),
    [
        (0, ControlRecordType.ABORT),
        (1, ControlRecordType.COMMIT),
        (2, ControlRecordType.LEADER_CHANGE),
        (3, ControlRecordType.SNAPSHOT_HEADER),
        (4, ControlRecordType.SNAPSHOT_FOOTER),
        (5, ControlRecordType.KRAFT_VERSION),
        (6, ControlRecordType.KRAFT_VOTERS),
        (7, ControlRecordType.UNKNOWN),
        (-5, ControlRecordType.UNKNOWN),
    ],
)
def test_control_key_types(type_id: int, expected: ControlRecordType) -> None:
    assert decode_control_key(struct.pack(">hh", 0, type_id)) is expected
    # newer key versions keep the (version, type) prefix and are still read
    assert decode_control_key(struct.pack(">hhi", 1, type_id, 99)) is expected


def test_bad_control_keys_and_markers() -> None:
    for key in (None, b"", b"\x00\x00\x00"):
        with pytest.raises(CorruptRecordError):
            decode_control_key(key)
    with pytest.raises(CorruptRecordError):
        decode_control_key(struct.pack(">hh", -1, 0))
    commit_key = encode_control_key(ControlRecordType.COMMIT)
    for value in (None, b"\x00\x00\x00\x00\x01"):
        with pytest.raises(CorruptRecordError):
            decode_end_txn_marker(Record(0, 0, commit_key, value))
    leader_change = Record(0, 0, encode_control_key(ControlRecordType.LEADER_CHANGE), b"")
    with pytest.raises(CorruptRecordError, match="not a txn marker"):
        decode_end_txn_marker(leader_change)


def test_kraft_control_record_batch() -> None:
    data = build_control_record_batch(
        ControlRecordType.LEADER_CHANGE, b"\x00\x01payload", 123, base_offset=8
    )
    header = BatchHeader.parse(data)
    assert header.is_control and not header.is_transactional
    (record,) = list(iter_records(data))
    assert decode_control_key(record.key) is ControlRecordType.LEADER_CHANGE
    assert (record.offset, record.timestamp, record.value) == (8, 123, b"\x00\x01payload")
