"""A topic's compression.type other than `producer` recompresses batches in another codec, at
the topic's compression.<codec>.level (Kafka's LogValidator, KIP-390); a batch already in the
topic's codec, and control batches, are written as they came."""

from __future__ import annotations

import os

import pytest

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    build_batch,
    build_control_batch,
    compress,
    decode_records,
    iter_batches,
    records_section,
    verify_crc,
)
from odradek.storage.config import LogConfig
from odradek.storage.validator import AppendOrigin, assign_offsets, validate_as_leader

NOW = 1_700_000_000_000
VALUES = [b"value %d " % i * 40 for i in range(50)]  # compressible


def batch(compression: Compression = Compression.NONE, **options: object) -> bytes:
    return build_batch([(NOW + i, b"k%d" % i, value, [("h", b"x")])
                        for i, value in enumerate(VALUES)],
                       compression=compression, **options)  # type: ignore[arg-type]


def stored(records: bytes, **props: str) -> bytes:
    """The bytes the log would write: validated as leader, offsets from 100 assigned."""
    config = LogConfig.from_props(props)
    validated = assign_offsets(validate_as_leader(records, config, NOW), 100, 7, config, NOW)
    return b"".join(bytes(chunk) for chunk in validated.buffers())


def only_batch(data: bytes) -> BatchHeader:
    ((position, header),) = list(iter_batches(data))
    verify_crc(data, position, header)
    return header


@pytest.mark.parametrize(("topic_codec", "codec"), [
    ("gzip", Compression.GZIP), ("snappy", Compression.SNAPPY), ("lz4", Compression.LZ4),
    ("zstd", Compression.ZSTD), ("uncompressed", Compression.NONE)])
def test_batches_are_written_in_the_topics_codec(topic_codec, codec):
    source = batch(Compression.LZ4 if codec != Compression.LZ4 else Compression.GZIP,
                   producer_id=5, producer_epoch=1, base_sequence=10, is_transactional=True)
    data = stored(source, **{"compression.type": topic_codec})
    header, original = only_batch(data), BatchHeader.parse(source)
    assert header.compression == codec
    assert (header.base_offset, header.partition_leader_epoch, header.producer_id,
            header.producer_epoch, header.base_sequence, header.is_transactional,
            header.records_count, header.base_timestamp, header.max_timestamp) == (
        100, 7, 5, 1, 10, True, len(VALUES), original.base_timestamp, original.max_timestamp)
    records = decode_records(data, 0, header)
    assert [tuple(r[:5]) for r in records] == [
        (100 + i, NOW + i, b"k%d" % i, value, [("h", b"x")]) for i, value in enumerate(VALUES)]


@pytest.mark.parametrize(("codec", "props", "level"), [
    (Compression.ZSTD, {"compression.zstd.level": "19"}, 19),
    (Compression.ZSTD, {}, 3),
    (Compression.GZIP, {"compression.gzip.level": "1"}, 1),
    (Compression.GZIP, {}, None),
    (Compression.LZ4, {"compression.lz4.level": "17"}, 17),
    (Compression.LZ4, {}, None),
])
def test_the_topics_level_is_used(codec, props, level):
    raw = records_section(batch(), 0, BatchHeader.parse(batch()))
    data = stored(batch(), **{"compression.type": codec.name.lower(), **props})
    assert data[BATCH_HEADER_SIZE:] == compress(codec, raw, level)


def test_levels_differ_in_size():
    sizes = {level: len(stored(batch(), **{"compression.type": "zstd",
                                           "compression.zstd.level": level}))
             for level in ("-5", "19")}
    assert sizes["19"] < sizes["-5"]


def test_a_batch_in_the_topics_codec_is_kept_as_it_came():
    source = batch(Compression.GZIP, compression_level=9)
    data = stored(source, **{"compression.type": "gzip", "compression.gzip.level": "1"})
    assert data[BATCH_HEADER_SIZE:] == source[BATCH_HEADER_SIZE:]
    assert stored(source)[BATCH_HEADER_SIZE:] == source[BATCH_HEADER_SIZE:]  # producer


def test_control_batches_are_not_recompressed():
    marker = build_control_batch(producer_id=5, producer_epoch=1, commit=True,
                                 coordinator_epoch=0, timestamp=NOW)
    config = LogConfig.from_props({"compression.type": "zstd"})
    validated = validate_as_leader(marker, config, NOW, AppendOrigin.COORDINATOR)
    assert bytes(validated.records) == marker


def test_a_batch_grown_beyond_max_message_bytes_is_refused():
    incompressible = build_batch([(NOW, None, os.urandom(2000))])
    config = LogConfig.from_props({"compression.type": "gzip",
                                   "max.message.bytes": str(len(incompressible))})
    with pytest.raises(KafkaError) as raised:
        validate_as_leader(incompressible, config, NOW)
    assert raised.value.code == ErrorCode.MESSAGE_TOO_LARGE
