"""Interop with kafka-python's independent record code (built offline, no broker).

kafka-python writes v2 batches (DefaultRecordBatchBuilder) and v0/v1 message sets
(LegacyRecordBatchBuilder) with every codec it supports; its codecs come from python-snappy
(xerial framing), lz4 (liblz4 frames), zstandard (libzstd) and gzip. Odradek must decode what it
writes, and its readers must decode what Odradek builds.
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from odradek.protocol.records import (
    BatchHeader,
    Compression,
    LegacyMessageSetBuilder,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
    iter_legacy_records,
    iter_records,
    legacy_to_v2,
    verify_crc,
)

NOW = 1_700_000_000_000


def sample_rows(count: int = 40) -> list[tuple[int, bytes | None, bytes | None, list]]:
    rows = []
    for i in range(count):
        key = None if i % 7 == 3 else b"key-%d" % i
        value = None if i % 11 == 5 else (b"value %d " % i) * (i * 13 % 50)
        headers = [("trace", b"%d" % i), ("empty", None)] if i % 3 == 0 else []
        rows.append((NOW + i * 17, key, value, headers))
    return rows


def kafka_python_batch(codec: Compression, rows: list, **producer: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=bool(producer.get("transactional", 0)),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 24,
    )
    for i, (ts, key, value, headers) in enumerate(rows):
        assert builder.append(i, ts, key, value, headers) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", list(Compression))
def test_odradek_reads_kafka_python_batches(codec: Compression) -> None:
    rows = sample_rows()
    data = kafka_python_batch(
        codec, rows, producer_id=77, producer_epoch=2, base_sequence=1000, transactional=1
    )
    ((pos, header),) = list(iter_batches(data))
    verify_crc(data, pos, header)
    assert header.compression is codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 1000)
    assert header.is_transactional
    assert header.records_count == len(rows)
    assert header.max_timestamp == rows[-1][0]
    decoded = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(data)]
    assert decoded == [(i, *row) for i, row in enumerate(rows)]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_odradek_batches(codec: Compression) -> None:
    rows = sample_rows()
    builder = RecordBatchBuilder(
        base_offset=500,
        compression=codec,
        producer_id=12,
        producer_epoch=1,
        base_sequence=40,
        partition_leader_epoch=6,
    )
    for row in rows:
        builder.append(*row)
    data = builder.build()
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert batch.compression_type == int(codec)
    assert (batch.base_offset, batch.producer_id, batch.base_sequence) == (500, 12, 40)
    assert batch.leader_epoch == 6
    assert batch.last_offset == 500 + len(rows) - 1
    decoded = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert decoded == [(500 + i, *row) for i, row in enumerate(rows)]


def test_kafka_python_reads_several_odradek_batches_and_a_control_batch() -> None:
    buf = b"".join(_one_record_batch(i * 10, Compression(i % 5)) for i in range(5))
    buf += build_control_batch(9, 0, True, 3, NOW, base_offset=50)
    records = MemoryRecords(buf)
    offsets = []
    control = []
    while records.has_next():
        batch = records.next_batch()
        if batch.is_control_batch:
            control.extend((r.commit, r.offset) for r in batch)
        else:
            offsets.extend(r.offset for r in batch)
    assert offsets == [0, 10, 20, 30, 40]
    assert control == [(True, 50)]


def _one_record_batch(base_offset: int, codec: Compression) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset, compression=codec)
    builder.append(NOW, b"k", b"v" * 100)
    return builder.build()


def test_large_batch_across_codecs_both_ways() -> None:
    rows = [(NOW, b"k%d" % i, bytes([i % 251]) * 3000, []) for i in range(400)]  # ~1.2 MB
    for codec in Compression:
        theirs = kafka_python_batch(codec, rows)
        assert sum(1 for _ in iter_records(theirs)) == 400
        ours = RecordBatchBuilder(compression=codec)
        for row in rows:
            ours.append(*row)
        assert sum(1 for _ in DefaultRecordBatch(bytearray(ours.build()))) == 400


LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_odradek_reads_kafka_python_legacy_sets(magic: int, codec: Compression) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    rows = sample_rows(10)
    for i, (ts, key, value, _) in enumerate(rows):
        assert builder.append(i, ts, key, value) is not None
    data = bytes(builder.build())
    messages = list(iter_legacy_records(data))
    # kafka-python (a producer) leaves the wrapper offset at 0, so with relative v1 inner
    # offsets the absolute offsets count back from the wrapper's, exactly as Kafka reads them.
    shift = -(len(rows) - 1) if magic == 1 and codec != Compression.NONE else 0
    assert [m.offset for m in messages] == [i + shift for i in range(len(rows))]
    assert [(m.key, m.value) for m in messages] == [(key, value) for _, key, value, _ in rows]
    if magic == 1:
        assert [m.timestamp for m in messages] == [ts for ts, *_ in rows]
    batch = legacy_to_v2(data, compression=Compression.ZSTD)
    assert [(r.key, r.value) for r in iter_records(batch)] == [(k, v) for _, k, v, _ in rows]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_kafka_python_reads_odradek_legacy_sets(magic: int, codec: Compression) -> None:
    builder = LegacyMessageSetBuilder(magic, codec)
    rows = sample_rows(10)
    for i, (ts, key, value, _) in enumerate(rows):
        builder.append(100 + i, ts, key, value)
    data = builder.build()
    wrappers = MemoryRecords(data)
    records = []
    while wrappers.has_next():
        wrapper = wrappers.next_batch()
        assert isinstance(wrapper, LegacyRecordBatch)
        assert wrapper.validate_crc()
        records.extend(wrapper)
    assert [r.offset for r in records] == [100 + i for i in range(len(rows))]
    assert [(r.key, r.value) for r in records] == [(key, value) for _, key, value, _ in rows]
    if magic == 1:
        assert [r.timestamp for r in records] == [ts for ts, *_ in rows]
    assert all(r.validate_crc() for r in records)


def test_header_parse_matches_kafka_python_fields() -> None:
    data = kafka_python_batch(
        Compression.GZIP, sample_rows(3), producer_id=5, producer_epoch=4, base_sequence=9
    )
    theirs = DefaultRecordBatch(bytearray(data))
    ours = BatchHeader.parse(data)
    assert (ours.base_offset, ours.size, ours.crc, ours.attributes) == (
        theirs.base_offset,
        theirs.size_in_bytes,
        theirs.crc,
        theirs.attributes,
    )
    assert (ours.last_offset_delta, ours.base_timestamp, ours.max_timestamp) == (
        theirs.last_offset_delta,
        theirs.first_timestamp,
        theirs.max_timestamp,
    )
    assert ours.last_sequence == theirs.last_sequence
