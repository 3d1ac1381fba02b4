"""Decoding fetched record batches into Arrow (the same rows as the per-record decoder):
position and end bounds, control batches, compression, headers, and the read_committed filter
for aborted transactions (built batches, no broker: Odradek has no transactions yet)."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest

from odradek.client.types import TopicPartition
from odradek.protocol.records import (
    Compression,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_batches,
    iter_records,
)
from odradek.spark.fetch import AbortedTransactions, ArrowColumns, decode_partition
from odradek.spark.schema import arrow_schema, source_schema

TP = TopicPartition("t", 3)
TS = 1_700_000_000_000


def plain(base_offset: int, count: int, **options) -> bytes:
    return build_batch([(TS + base_offset + i, f"k{base_offset + i}".encode(),
                         f"v{base_offset + i}".encode()) for i in range(count)],
                       base_offset=base_offset, **options)


def transactional(base_offset: int, count: int, producer_id: int) -> bytes:
    return plain(base_offset, count, producer_id=producer_id, producer_epoch=0,
                 base_sequence=0, is_transactional=True)


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return build_control_batch(producer_id, 0, commit, coordinator_epoch=0, timestamp=TS,
                               base_offset=offset)


def decode(data: bytes, position: int, until: int, aborted=None, headers=False):
    columns = ArrowColumns(TP, arrow_schema(source_schema(headers)), headers)
    next_offset = decode_partition(data, columns, position, until, aborted, check_crcs=True)
    batch = columns.to_record_batch()
    return next_offset, batch


def test_rows_between_position_and_until():
    data = plain(0, 5) + plain(5, 5, compression=Compression.LZ4)
    next_offset, batch = decode(data, position=3, until=8)
    assert next_offset == 8
    assert batch.schema == arrow_schema(source_schema(False))
    assert batch.column("offset").to_pylist() == [3, 4, 5, 6, 7]
    assert batch.column("key").to_pylist() == [b"k3", b"k4", b"k5", b"k6", b"k7"]
    assert set(batch.column("topic").to_pylist()) == {"t"}
    assert set(batch.column("partition").to_pylist()) == {3}
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [
        (TS + i) * 1000 for i in range(3, 8)]  # microseconds
    assert set(batch.column("timestampType").to_pylist()) == {TimestampType.CREATE_TIME}


def test_fetch_ending_mid_batch_and_log_append_time():
    data = plain(0, 4, timestamp_type=TimestampType.LOG_APPEND_TIME)
    data += plain(4, 4)[:-3]  # a trailing partial batch, as a size-limited fetch returns
    next_offset, batch = decode(data, position=0, until=100)
    assert next_offset == 4
    assert set(batch.column("timestampType").to_pylist()) == {TimestampType.LOG_APPEND_TIME}
    # With LogAppendTime every record carries the batch's max timestamp.
    assert set(batch.column("timestamp").cast(pa.int64()).to_pylist()) == {(TS + 3) * 1000}


def test_batch_past_the_end_finishes_the_range():
    # Offsets 5..9 were compacted away: the next batch starts at 10, past the range end 8.
    next_offset, batch = decode(plain(0, 5) + plain(10, 2), position=5, until=8)
    assert (next_offset, batch.num_rows) == (8, 0)


def test_headers_column_is_null_without_headers():
    data = build_batch([(TS, b"k", b"v", [("a", b"1"), ("b", None)]), (TS, None, None)])
    _, batch = decode(data, position=0, until=2, headers=True)
    assert batch.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None]
    assert batch.column("key").to_pylist() == [b"k", None]
    assert batch.column("value").to_pylist() == [b"v", None]


def test_control_batches_are_skipped():
    data = transactional(0, 3, producer_id=7) + marker(3, 7, commit=True) + plain(4, 1)
    next_offset, batch = decode(data, position=0, until=5)
    assert next_offset == 5
    assert batch.column("offset").to_pylist() == [0, 1, 2, 4]


def test_read_committed_drops_aborted_transactions():
    # Producer 7 aborts (offsets 0-1, marker 4); producer 8 commits (2-3, marker 5); producer 7
    # then writes a committed transaction (6, marker 7); 8 is plain.
    data = (transactional(0, 2, producer_id=7) + transactional(2, 2, producer_id=8)
            + marker(4, 7, commit=False) + marker(5, 8, commit=True)
            + transactional(6, 1, producer_id=7) + marker(7, 7, commit=True) + plain(8, 1))
    aborted = AbortedTransactions([(0, 7)])
    next_offset, batch = decode(data, position=0, until=9, aborted=aborted)
    assert next_offset == 9
    assert batch.column("offset").to_pylist() == [2, 3, 6, 8]
    # read_uncommitted returns every data record
    _, everything = decode(data, position=0, until=9)
    assert everything.column("offset").to_pylist() == [0, 1, 2, 3, 6, 8]


def test_aborted_transaction_starting_before_the_position():
    data = transactional(0, 3, producer_id=7) + transactional(3, 2, producer_id=7) + \
        marker(5, 7, commit=False) + plain(6, 2)
    next_offset, batch = decode(data, position=4, until=8,
                                aborted=AbortedTransactions([(0, 7)]))
    assert next_offset == 8
    assert batch.column("offset").to_pylist() == [6, 7]


def test_corrupt_batch_is_reported():
    data = bytearray(plain(0, 3))
    data[-1] ^= 0xFF
    with pytest.raises(Exception, match="crc"):
        decode(bytes(data), position=0, until=3)


def reference(data: bytes, position: int, until: int, dropped: set[int]) -> list[dict]:
    """Rows of the per-record decoder (`iter_records`), without control batches and the
    offsets in `dropped`, in Spark's row layout."""
    rows = []
    for pos, header in iter_batches(data):
        if header.is_control:
            continue
        for record in iter_records(data, pos, header):
            if position <= record.offset < until and record.offset not in dropped:
                rows.append({
                    "key": record.key, "value": record.value, "topic": TP.topic,
                    "partition": TP.partition, "offset": record.offset,
                    "timestamp": datetime.fromtimestamp(record.timestamp / 1000, timezone.utc),
                    "timestampType": int(header.timestamp_type),
                    "headers": [{"key": k, "value": v} for k, v in record.headers] or None})
    return rows


def rows_with_everything(base: int, count: int) -> list[tuple]:
    return [(TS + i * 1000, None if i % 3 == 0 else f"k{base + i}".encode(),
             None if i % 4 == 1 else b"v" * (i * 61 % 700),
             [("h", None), ("ü", b"x" * i)][: i % 3]) for i in range(count)]


@pytest.mark.parametrize("compression", list(Compression))
def test_decode_equals_the_per_record_decoder(compression):
    # Producer 7 aborts offsets 10-14 (marker 20); producer 8 commits 15-19 (marker 21).
    tx = {"producer_epoch": 0, "base_sequence": 0, "is_transactional": True,
          "compression": compression}
    data = (build_batch(rows_with_everything(0, 10), base_offset=0, compression=compression)
            + build_batch(rows_with_everything(10, 5), base_offset=10, producer_id=7, **tx)
            + build_batch(rows_with_everything(15, 5), base_offset=15, producer_id=8, **tx)
            + marker(20, 7, commit=False) + marker(21, 8, commit=True)
            + build_batch(rows_with_everything(22, 100), base_offset=22,
                          compression=compression))
    for position, until in ((0, 200), (3, 110)):
        next_offset, batch = decode(data, position, until, headers=True)
        assert next_offset == min(until, 122)
        assert batch.to_pylist() == reference(data, position, until, set())
        next_offset, batch = decode(data, position, until, AbortedTransactions([(10, 7)]),
                                    headers=True)
        assert batch.to_pylist() == reference(data, position, until, set(range(10, 15)))
        _, without_headers = decode(data, position, until, headers=False)
        assert without_headers.to_pylist() == [
            {k: v for k, v in row.items() if k != "headers"}
            for row in reference(data, position, until, set())]
