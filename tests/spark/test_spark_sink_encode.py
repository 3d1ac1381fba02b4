"""The sink's column-wise encoding (`RecordBatchEncoder`): partitions chosen as Kafka's
producer does, row order kept per partition, markers and headers, topics from a column; and
`publish_task` through the producer's prebuilt-batch path to a real broker, read back with
confluent-kafka (no Spark)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from spark_helpers import consume_all, create_topics

from odradek.client.partitioner import partition_for_key
from odradek.protocol.records import Compression, iter_batches, iter_records
from odradek.spark.options import parse_sink_options
from odradek.spark.sink import (
    QUERY_ID_HEADER,
    SINK_BATCH_SIZE,
    TASK_HEADER,
    AtLeastOnce,
    BatchMarker,
    RecordBatchEncoder,
)

MARKER = BatchMarker("query-1", "4", "run-1", "0.0")
HEADERS = pa.list_(pa.field("element", pa.struct([("key", pa.string()),
                                                  ("value", pa.binary())])))


def encoder(partitions: int = 4, **options: str) -> RecordBatchEncoder:
    return RecordBatchEncoder(parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:9",
                                                  **options}), MARKER,
                              lambda topic: partitions)


def decoded(encoded) -> list[tuple[str, int, bytes | None, bytes | None, list]]:
    """(topic, partition, key, value, headers) of every record, in the order encoded."""
    rows = []
    for tp, payload, count in encoded:
        (pos, header), = iter_batches(payload)
        assert header.records_count == count and header.base_offset == 0
        rows += [(tp.topic, tp.partition, r.key, r.value, r.headers)
                 for r in iter_records(payload, pos, header)]
    return rows


def test_keyless_rows_fill_sticky_batches_in_order() -> None:
    values = [b"%06d" % i + b"v" * 200 for i in range(3000)]
    batch = pa.RecordBatch.from_pydict({"value": values})
    sink = encoder(topic="out", **{"kafka.batch.size": "16384"})
    encoded = list(sink.encode(batch)) + list(sink.encode(batch))
    rows = decoded(encoded)
    assert [value for *_, value, _ in rows] == values * 2
    partitions = [tp.partition for tp, _, _ in encoded]
    assert len(set(partitions)) == 4
    # each batch at most batch.size; the partition moves on once a batch's worth went to it
    assert all(len(payload) <= 16384 for _, payload, _ in encoded)
    assert all(b == (a + 1) % 4 for a, b in zip(partitions, partitions[1:]) if a != b)
    assert max(len(list(run)) for run in _runs(partitions)) <= 2


def _runs(items):
    run = [items[0]]
    for item in items[1:]:
        if item != run[-1]:
            yield run
            run = []
        run.append(item)
    yield run


def test_sink_batch_size_default_and_option() -> None:
    assert encoder(topic="out").batch_size == SINK_BATCH_SIZE
    assert encoder(topic="out", **{"kafka.batch.size": "1000"}).batch_size == 1000


def test_keys_and_partition_column_choose_partitions() -> None:
    keys = [None if i % 3 == 0 else f"key-{i}".encode() for i in range(300)]
    partitions = [2 if i % 5 == 0 else None for i in range(300)]
    values = [f"v{i}".encode() for i in range(300)]
    batch = pa.RecordBatch.from_pydict({
        "key": pa.array(keys, pa.binary()), "value": values,
        "partition": pa.array(partitions, pa.int32())})
    rows = decoded(encoder(partitions=7, topic="out").encode(batch))
    assert sorted(value for *_, value, _ in rows) == sorted(values)
    chosen = {value: partition for _, partition, _, value, _ in rows}
    for key, partition, value in zip(keys, partitions, values):
        if partition is not None:
            assert chosen[value] == partition
        elif key is not None:
            assert chosen[value] == partition_for_key(key, 7)
    # within a partition, rows keep their order
    for partition in range(7):
        got = [value for _, p, _, value, _ in rows if p == partition]
        assert got == [value for value in values if chosen[value] == partition]


def test_ignore_keys_makes_keyed_rows_sticky() -> None:
    batch = pa.RecordBatch.from_pydict({"key": [b"a", b"b", b"c"], "value": [b"1", b"2", b"3"]})
    encoded = list(encoder(partitions=3, topic="out",
                           **{"kafka.partitioner.ignore.keys": "true"}).encode(batch))
    assert len(encoded) == 1 and encoded[0][2] == 3


def test_markers_follow_the_row_headers() -> None:
    batch = pa.RecordBatch.from_arrays([
        pa.array(["a", "b"], pa.string()), pa.array([b"x", None]),
        pa.array([[{"key": "h", "value": b"1"}, {"key": "n", "value": None}], None], HEADERS)],
        names=["value", "key", "headers"])
    rows = sorted(decoded(encoder(topic="out").encode(batch)), key=lambda row: row[3])
    markers = [(name, value) for name, value in MARKER.headers()]
    assert [name for name, _ in markers] == [QUERY_ID_HEADER, "odradek.batch.id",
                                             "odradek.run.id", TASK_HEADER]
    assert [(key, value, headers) for _, _, key, value, headers in rows] == [
        (b"x", b"a", [("h", b"1"), ("n", None)] + markers), (None, b"b", markers)]
    plain = sorted(decoded(encoder(topic="out", batchMarker="false").encode(batch)),
                   key=lambda row: row[3])
    assert [headers for *_, headers in plain] == [[("h", b"1"), ("n", None)], []]


def test_topic_column_groups_rows_and_null_topic_is_refused() -> None:
    batch = pa.RecordBatch.from_pydict({"topic": ["a", "b", "a"], "value": [b"1", b"2", b"3"]})
    rows = decoded(encoder().encode(batch))
    assert sorted((topic, value) for topic, _, _, value, _ in rows) == [
        ("a", b"1"), ("a", b"3"), ("b", b"2")]
    assert [value for topic, _, _, value, _ in rows if topic == "a"] == [b"1", b"3"]
    # the topic option wins over the column
    assert {topic for topic, *_ in decoded(encoder(topic="c").encode(batch))} == {"c"}
    with pytest.raises(ValueError, match="null topic present in the data"):
        list(encoder().encode(pa.RecordBatch.from_pydict({"topic": ["a", None],
                                                          "value": [b"1", b"2"]})))


def test_compression_type_is_used() -> None:
    batch = pa.RecordBatch.from_pydict({"value": [b"v" * 100] * 50})
    (tp, payload, count), = encoder(topic="out", **{"kafka.compression.type": "zstd"}
                                    ).encode(batch)
    (pos, header), = iter_batches(payload)
    assert header.compression == Compression.ZSTD and count == 50
    assert len(payload) < 50 * 100


def test_publish_task_writes_prebuilt_batches_to_the_broker(odradek_broker) -> None:
    bootstrap = odradek_broker.bootstrap
    topic = f"sink-encode-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 3})
    keys = [None if i % 4 == 0 else f"k{i % 17}".encode() for i in range(5000)]
    values = [f"value-{i}".encode() * 5 for i in range(5000)]
    batches = [pa.RecordBatch.from_pydict({"key": pa.array(keys[i:i + 1000], pa.binary()),
                                           "value": values[i:i + 1000]})
               for i in range(0, 5000, 1000)]
    options = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                  "kafka.batch.size": "8192"})
    published = AtLeastOnce(options).publish_task(iter(batches), MARKER)
    assert published.records == 5000

    messages = consume_all(bootstrap, topic, 3)
    assert sorted(m.value() for m in messages) == sorted(values)
    by_value = {m.value(): m for m in messages}
    for key, value in zip(keys, values):
        message = by_value[value]
        assert message.key() == key
        if key is not None:
            assert message.partition() == partition_for_key(key, 3)
        assert [(k, v) for k, v in message.headers()] == MARKER.headers()
    for partition in range(3):
        offsets = [m.offset() for m in messages if m.partition() == partition]
        assert published.offsets[(topic, partition)] == (min(offsets), max(offsets))
        # send order is kept within each partition
        in_partition = [m.value() for m in messages if m.partition() == partition]
        assert in_partition == [v for v in values if by_value[v].partition() == partition]


def test_keyless_rows_among_keyed_ones_move_sticky_partition_by_size() -> None:
    keys = [b"k" if i % 2 else None for i in range(400)]
    values = [b"%04d" % i + b"v" * 300 for i in range(400)]
    batch = pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.binary()), "value": values})
    rows = decoded(encoder(partitions=5, topic="out", batchMarker="false",
                           **{"kafka.batch.size": "4096"}).encode(batch))
    keyed = {value for key, value in zip(keys, values) if key is not None}
    assert {p for _, p, _, value, _ in rows if value in keyed} == {partition_for_key(b"k", 5)}
    keyless = [p for _, p, _, value, _ in rows if value not in keyed]
    # ~12 keyless rows of ~330 bytes fill 4 KiB: then the next partition takes over
    assert len(set(keyless)) == 5
    in_value_order = [p for value, p in sorted((value, p) for _, p, _, value, _ in rows
                                               if value not in keyed)]
    runs = [len(run) for run in _runs(in_value_order)]
    assert all(10 <= run <= 14 for run in runs[1:-1]), runs
    for partition in range(5):
        got = [value for _, p, _, value, _ in rows if p == partition]
        assert got == sorted(got)  # row order kept within the partition
