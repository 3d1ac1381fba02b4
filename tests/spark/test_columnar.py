"""Record batches to and from Arrow columns (`odradek.spark.columnar`): the column
decoder gives what `iter_records` gives, the encoder builds the bytes `RecordBatchBuilder`
builds, on every codec, with headers, null keys and values, control batches, offset gaps,
LogAppendTime, multi-byte varints and corrupt input."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    RecordBatchBuilder,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_batches,
    iter_records,
    verify_crc,
    write_crc,
)
from odradek.spark.columnar import (
    HEADERS_TYPE,
    ColumnarDecoder,
    encode_headers,
    encode_record_batches,
)

NOW = 1_700_000_000_000
Header = tuple[str, bytes | None]


def reference_rows(data: bytes, include_headers: bool, start: int = -1,
                   until: int = 1 << 62) -> list[dict]:
    """What the per-record decoder gives, as rows of the columnar decoder's schema."""
    rows = []
    for pos, header in iter_batches(data):
        for record in iter_records(data, pos, header):
            if not start <= record.offset < until:
                continue
            row = {"offset": record.offset, "timestamp": record.timestamp,
                   "timestampType": int(header.timestamp_type), "key": record.key,
                   "value": record.value}
            if include_headers:
                row["headers"] = [{"key": k, "value": v} for k, v in record.headers] or None
            rows.append(row)
    return rows


def columnar_rows(data: bytes, include_headers: bool, start: int | None = None,
                  until: int | None = None) -> list[dict]:
    decoder = ColumnarDecoder(include_headers)
    for pos, header in iter_batches(data):
        decoder.add_batch(data, pos, header, start, until)
    batch = decoder.finish()
    assert batch.schema == decoder.schema
    assert len(decoder) == 0  # finish starts over
    return batch.to_pylist()


def varied_records(count: int) -> list[tuple[int, bytes | None, bytes | None, list[Header]]]:
    """Null and empty keys and values, lengths with 1-, 2- and 3-byte varints, timestamps
    before and far after the first, headers with null and empty values."""
    records = []
    for i in range(count):
        key = None if i % 3 == 0 else (b"" if i % 7 == 0 else f"key-{i}".encode())
        value = None if i % 5 == 0 else bytes([i % 256]) * (i * 37 % 9000)
        timestamp = NOW + (i * 1_000_003 if i % 4 else -i)
        headers = [(f"h{j}-ü", None if j == 1 else b"x" * (j * 40)) for j in range(i % 4)]
        records.append((timestamp, key, value, headers))
    return records


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("include_headers", [False, True])
def test_decode_equals_iter_records(compression: Compression, include_headers: bool) -> None:
    data = build_batch(varied_records(300), base_offset=1000, compression=compression)
    data += build_batch(varied_records(70)[::-1], base_offset=1300, compression=compression)
    expected = reference_rows(data, include_headers)
    assert len(expected) == 370
    assert columnar_rows(data, include_headers) == expected


def test_decode_headers_column_type_and_nulls() -> None:
    data = build_batch([(NOW, b"k", b"v", [("a", b"1"), ("b", None), ("", b"")]),
                        (NOW, None, None, [])])
    decoder = ColumnarDecoder(include_headers=True)
    for pos, header in iter_batches(data):
        decoder.add_batch(data, pos, header)
    batch = decoder.finish()
    assert batch.schema.field("headers").type == HEADERS_TYPE
    assert batch.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}, {"key": "", "value": b""}],
        None]
    assert batch.column("key").to_pylist() == [b"k", None]
    assert batch.column("value").to_pylist() == [b"v", None]


def test_decode_headers_into_a_given_list_type() -> None:
    spark_type = pa.list_(pa.field("element", HEADERS_TYPE.value_type))
    data = build_batch([(NOW, b"k", b"v", [("a", b"1")])])
    decoder = ColumnarDecoder(include_headers=True, headers_type=spark_type)
    (pos, header), = iter_batches(data)
    decoder.add_batch(data, pos, header)
    batch = decoder.finish()
    assert batch.schema.field("headers").type == spark_type
    assert batch.column("headers").to_pylist() == [[{"key": "a", "value": b"1"}]]


def test_decode_without_headers_column_skips_them() -> None:
    data = build_batch([(NOW, b"k", b"v", [("a", b"1")]), (NOW, b"k2", b"v2", [])])
    assert columnar_rows(data, include_headers=False) == reference_rows(data, False)


def test_offset_gaps_and_bounds() -> None:
    builder = RecordBatchBuilder(base_offset=100)
    for offset in (100, 103, 104, 190):  # a compacted batch keeps its offsets
        builder.append(NOW + offset, b"k%d" % offset, b"v", offset=offset)
    data = builder.build() + build_batch([(NOW, None, b"x")] * 5, base_offset=191,
                                         compression=Compression.ZSTD)
    assert columnar_rows(data, False) == reference_rows(data, False)
    rows = columnar_rows(data, False, start=103, until=193)
    assert [row["offset"] for row in rows] == [103, 104, 190, 191, 192]
    assert rows == reference_rows(data, False, start=103, until=193)


def test_batches_outside_the_bounds_are_not_decoded() -> None:
    good = build_batch([(NOW, b"k", b"v")] * 3, base_offset=10)
    broken = bytearray(build_batch([(NOW, b"k", b"v")] * 3, base_offset=0))
    broken[BATCH_HEADER_SIZE] = 0x7F  # the first record's length: far too long
    decoder = ColumnarDecoder()
    data = bytes(broken) + good
    for pos, header in iter_batches(data):
        decoder.add_batch(data, pos, header, start=10, until=12)
    assert [row["offset"] for row in decoder.finish().to_pylist()] == [10, 11]


def test_log_append_time_gives_the_batch_max_timestamp() -> None:
    data = build_batch([(NOW + i, b"k", b"v") for i in range(4)],
                       timestamp_type=TimestampType.LOG_APPEND_TIME)
    data += build_batch([(NOW - 5, b"k", b"v")], base_offset=4)
    rows = columnar_rows(data, False)
    assert rows == reference_rows(data, False)
    assert [row["timestamp"] for row in rows] == [NOW + 3] * 4 + [NOW - 5]
    assert [row["timestampType"] for row in rows] == [1] * 4 + [0]


def test_control_batch_records_decode_like_iter_records() -> None:
    data = build_batch([(NOW, b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    data += build_control_batch(7, 0, commit=False, coordinator_epoch=3, timestamp=NOW,
                                base_offset=1)
    data += build_control_batch(7, 0, commit=True, coordinator_epoch=3, timestamp=NOW,
                                base_offset=2)
    rows = columnar_rows(data, True)
    assert rows == reference_rows(data, True)
    assert rows[1]["key"] == struct.pack(">hh", 0, 0)  # ABORT
    assert rows[2]["key"] == struct.pack(">hh", 0, 1)  # COMMIT


def test_nothing_added_gives_an_empty_batch() -> None:
    decoder = ColumnarDecoder(include_headers=True)
    batch = decoder.finish()
    assert batch.num_rows == 0
    assert batch.schema == decoder.schema


def test_header_key_that_is_not_utf8_is_replaced() -> None:
    builder = RecordBatchBuilder()
    builder.append(NOW, b"k", b"v", [("\udcff-raw", b"1")])  # surrogateescape: byte 0xff
    data = builder.build()
    rows = columnar_rows(data, True)
    assert rows[0]["headers"] == [{"key": "\ufffd-raw", "value": b"1"}]


def _corrupt(records_bytes_edit, count_delta: int = 0) -> bytes:
    data = bytearray(build_batch([(NOW, b"key", b"value", [("h", b"1")])] * 3))
    records_bytes_edit(data)
    struct.pack_into(">i", data, 57, 3 + count_delta)
    write_crc(data, 0, len(data))
    return bytes(data)


def _record_at(data: bytearray, index: int) -> int:
    pos = BATCH_HEADER_SIZE
    for _ in range(index):
        pos += 1 + (data[pos] >> 1)  # one-byte lengths in these records
    return pos


@pytest.mark.parametrize("corrupt", [
    pytest.param(lambda d: d.__setitem__(_record_at(d, 1) + 4, 0x40), id="key-too-long"),
    pytest.param(lambda d: d.__setitem__(_record_at(d, 1) + 4, 0x05), id="key-length-minus-3"),
    pytest.param(lambda d: d.__setitem__(_record_at(d, 2) + 8, 0x7F), id="value-too-long"),
    pytest.param(lambda d: d.__setitem__(_record_at(d, 0) + 14, 0x09), id="header-count"),
    pytest.param(lambda d: d.__setitem__(_record_at(d, 2), 0x03), id="negative-length"),
    pytest.param(lambda d: d.__setitem__(_record_at(d, 2), 0x7E), id="length-past-end"),
    pytest.param(lambda d: d.__setitem__(_record_at(d, 1) + 17, 0x00), id="header-too-short"),
    pytest.param(lambda d: d.__setitem__(_record_at(d, 1) + 15, 0x01), id="header-key-null"),
])
@pytest.mark.parametrize("include_headers", [False, True])
def test_corrupt_records_raise_what_iter_records_raises(corrupt, include_headers) -> None:
    data = _corrupt(corrupt)
    (pos, header), = iter_batches(data)
    with pytest.raises(CorruptRecordError) as expected:
        list(iter_records(data, pos, header))
    decoder = ColumnarDecoder(include_headers)
    with pytest.raises(CorruptRecordError) as raised:
        decoder.add_batch(data, pos, header)
        decoder.finish()
    assert str(raised.value) == str(expected.value)
    assert len(decoder) == 0 or decoder.finish().num_rows == 0  # usable again


@pytest.mark.parametrize("count_delta", [-1, 1])
def test_record_count_mismatch_is_corrupt(count_delta: int) -> None:
    data = _corrupt(lambda d: None, count_delta)
    (pos, header), = iter_batches(data)
    with pytest.raises(CorruptRecordError) as expected:
        list(iter_records(data, pos, header))
    with pytest.raises(CorruptRecordError) as raised:
        ColumnarDecoder().add_batch(data, pos, header)
    assert str(raised.value) == str(expected.value)


record_strategy = st.tuples(
    st.integers(NOW - 2**40, NOW + 2**40),
    st.none() | st.binary(max_size=200),
    st.none() | st.binary(max_size=20_000),
    st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=100)),
             max_size=3),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(record_strategy, min_size=1, max_size=40), min_size=1, max_size=4),
       st.sampled_from(list(Compression)))
def test_decode_equals_iter_records_on_random_batches(batches, compression) -> None:
    data = b""
    offset = 0
    for records in batches:
        data += build_batch(records, base_offset=offset, compression=compression)
        offset += len(records)
    assert columnar_rows(data, True) == reference_rows(data, True)
    assert columnar_rows(data, False) == reference_rows(data, False)


# ------------------------------------------------------------------------------ encoding

def builder_batches(rows: list[tuple], cuts: list[int], timestamp: int, **options) -> list:
    """The batches RecordBatchBuilder makes of `rows` cut after the given counts."""
    out, first = [], 0
    for count in cuts:
        builder = RecordBatchBuilder(**options)
        for key, value, headers in rows[first:first + count]:
            builder.append(timestamp, key, value, headers)
        out.append(builder.build())
        first += count
    return out


def _columns(rows: list[tuple]) -> tuple[pa.Array, pa.Array, pa.Array]:
    keys = pa.array([row[0] for row in rows], pa.binary())
    values = pa.array([row[1] for row in rows], pa.binary())
    headers = pa.array([[{"key": k, "value": v} for k, v in row[2]] or None for row in rows],
                       HEADERS_TYPE)
    return keys, values, headers


@pytest.mark.parametrize("compression", list(Compression))
def test_encode_equals_record_batch_builder(compression: Compression) -> None:
    rows = [(key, value, headers) for _, key, value, headers in varied_records(400)]
    keys, values, headers = _columns(rows)
    extra = [("odradek.query.id", b"q"), ("odradek.task", None)]
    batches = encode_record_batches(values, keys, headers, extra_headers=extra, timestamp=NOW,
                                    max_batch_bytes=64 * 1024, compression=compression)
    counts = [batch.record_count for batch in batches]
    assert sum(counts) == len(rows) and len(counts) > 3
    with_extra = [(key, value, headers + extra) for key, value, headers in rows]
    expected = builder_batches(with_extra, counts, NOW, compression=compression)
    assert [bytes(batch.payload) for batch in batches] == expected
    for batch in batches:
        (pos, header), = iter_batches(batch.payload)
        verify_crc(batch.payload, pos, header)
        if compression == Compression.NONE:
            # the bound, or a single record bigger than it
            assert len(batch.payload) <= 64 * 1024 or batch.record_count == 1


def test_encode_without_keys_or_headers_and_string_columns() -> None:
    values = pa.array(["a", None, "ccc"], pa.string())
    (batch,) = encode_record_batches(values, timestamp=NOW, max_batch_bytes=16384)
    expected = builder_batches([(None, b"a", []), (None, None, []), (None, b"ccc", [])], [3],
                               NOW)
    assert [bytes(batch.payload)] == expected
    keys = pa.array(["k", "", None], pa.large_string())
    (batch,) = encode_record_batches(values, keys, timestamp=NOW, max_batch_bytes=16384)
    assert bytes(batch.payload) == builder_batches(
        [(b"k", b"a", []), (b"", None, []), (None, b"ccc", [])], [3], NOW)[0]


def test_encode_splits_into_batches_in_order() -> None:
    values = pa.array([b"v" * 1000] * 50 + [b"big" * 20_000] + [b""] * 20_000)
    batches = encode_record_batches(values, timestamp=NOW, max_batch_bytes=16_384)
    counts = [batch.record_count for batch in batches]
    assert sum(counts) == len(values)
    # 1 KB records: at most 16 per 16 KiB batch; the 60 KB record alone; empty records: at
    # most 16384 per batch (offset deltas stay below the varint table's size)
    assert max(counts[:4]) <= 16 and 1 in counts and max(counts) <= 16384
    decoded = []
    for batch in batches:
        (pos, header), = iter_batches(batch.payload)
        decoded += [record.value for record in iter_records(batch.payload, pos, header)]
    assert decoded == values.to_pylist()


def test_encode_then_decode_round_trip() -> None:
    rows = [(key, value, headers) for _, key, value, headers in varied_records(200)]
    keys, values, headers = _columns(rows)
    batches = encode_record_batches(values, keys, headers, timestamp=NOW, max_batch_bytes=50_000,
                                    compression=Compression.LZ4)
    data = b"".join(bytes(batch.payload) for batch in batches)
    decoded = ColumnarDecoder(include_headers=True)
    for pos, header in iter_batches(data):
        decoded.add_batch(data, pos, header)
    table = decoded.finish()
    assert table.column("key").to_pylist() == keys.to_pylist()
    assert table.column("value").to_pylist() == values.to_pylist()
    assert table.column("headers").to_pylist() == headers.to_pylist()
    assert set(table.column("timestamp").to_pylist()) == {NOW}


def test_encode_headers_is_the_wire_form() -> None:
    builder = RecordBatchBuilder()
    builder.append(NOW, None, None, [("a", b"xy"), ("é", None)])
    built = builder.build()
    assert built.endswith(b"\x04" + encode_headers([("a", b"xy"), ("é", None)]))


def test_null_header_key_is_refused() -> None:
    headers = pa.array([[{"key": None, "value": b"v"}]], HEADERS_TYPE)
    with pytest.raises(ValueError, match="header key is null"):
        encode_record_batches(pa.array([b"v"]), None, headers, timestamp=NOW,
                              max_batch_bytes=16384)


@settings(max_examples=40, deadline=None)
@given(st.lists(record_strategy, min_size=1, max_size=60), st.integers(100, 40_000))
def test_encode_equals_builder_on_random_rows(records, max_batch_bytes) -> None:
    rows = [(key, value, headers) for _, key, value, headers in records]
    keys, values, headers = _columns(rows)
    batches = encode_record_batches(values, keys, headers, timestamp=NOW,
                                    max_batch_bytes=max_batch_bytes)
    counts = [batch.record_count for batch in batches]
    assert [bytes(batch.payload) for batch in batches] == builder_batches(rows, counts, NOW)
