"""`decode_keys` (the records' offsets and keys only) agrees with `decode_records`: the same
offsets and keys, and CorruptRecordError for exactly the same damaged batches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    RecordBatchBuilder,
    decode_keys,
    decode_records,
)

RECORDS = [(b"k" * 200, b"v" * 300, [("h", b"x"), ("n", None)]), (None, b"keyless", []),
           (b"dead", None, []), (b"", b"", [])]


def batch(codec: Compression = Compression.NONE) -> bytes:
    builder = RecordBatchBuilder(base_offset=1000, compression=codec)
    for number, (key, value, headers) in enumerate(RECORDS):
        # Long varints: timestamp deltas of 10^9 ms, offset deltas of 70.
        builder.append(1_700_000_000_000 + number * 10**9, key, value, headers,
                       offset=1000 + number * 70)
    return builder.build()


def test_offsets_keys_and_flags_as_decode_records() -> None:
    for codec in (Compression.NONE, Compression.ZSTD, Compression.LZ4):
        data = batch(codec)
        found = decode_keys(data)
        full = decode_records(data)
        assert found.offsets == [record[0] for record in full] == [1000, 1070, 1140, 1210]
        assert found.keys == [record[2] for record in full]
        assert found.key_bytes == 204 and found.null_keys and found.null_values
    plain = RecordBatchBuilder()
    plain.append(0, b"a", b"b")
    found = decode_keys(plain.build())
    assert found.keys == [b"a"] and not found.null_keys and not found.null_values


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                max_size=3))
def test_damage_is_found_by_both_or_neither(changes: list[tuple[int, int]]) -> None:
    data = bytearray(batch())
    section = len(data) - BATCH_HEADER_SIZE
    for position, value in changes:
        data[BATCH_HEADER_SIZE + position % section] = value
    header = BatchHeader.parse(data)
    try:
        full = decode_records(data, 0, header)
    except CorruptRecordError:
        full = None
    try:
        found = decode_keys(data, 0, header)
    except CorruptRecordError:
        found = None
    assert (full is None) == (found is None)
    if full is not None and found is not None:
        assert found.offsets == [record[0] for record in full]
        assert found.keys == [record[2] for record in full]
        assert found.null_values == any(record[3] is None for record in full)
