"""Compression codecs: round trips, formats other implementations write and read, bombs."""

from __future__ import annotations

import gzip
import os
import random
import struct

import lz4.frame
import pytest
import snappy
import xxhash
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import Compression, compress, decompress
from odradek.protocol.records.compression import (
    XERIAL_HEADER,
    compress_lz4,
    xxh32,
    zstd_output_bound,
)

CODECS = list(Compression)
COMPRESSING = [codec for codec in Compression if codec != Compression.NONE]


def _payload(size: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    words = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 12))) for _ in range(64)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words)
    return bytes(out[:size])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, 65536, 65537, 300_000])
def test_round_trip(codec: Compression, size: int) -> None:
    data = _payload(size)
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


@pytest.mark.parametrize(
    ("codec", "level"),
    [(Compression.GZIP, 1), (Compression.GZIP, 9), (Compression.LZ4, 9), (Compression.ZSTD, 19)],
)
def test_levels(codec: Compression, level: int) -> None:
    data = _payload(200_000)
    assert decompress(codec, compress(codec, data, level)) == data


@given(st.binary(max_size=5000), st.sampled_from(CODECS))
@settings(max_examples=150, deadline=None)
def test_round_trip_any_bytes(data: bytes, codec: Compression) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_writes_xerial_framing_with_32k_blocks() -> None:
    data = _payload(100_000)
    packed = compress(Compression.SNAPPY, data)
    assert packed.startswith(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    pos, blocks = len(XERIAL_HEADER), []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(snappy.uncompress(packed[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    assert [len(block) for block in blocks] == [32768, 32768, 32768, 1696]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_and_xerial_from_python_snappy() -> None:
    data = _payload(150_000)
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data
    # xerial stream with little-endian version fields (seen from some producers)
    block = snappy.compress(data)
    odd_header = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1)
    framed = odd_header + struct.pack(">i", len(block)) + block
    assert decompress(Compression.SNAPPY, framed) == data


def test_lz4_frame_layout_matches_kafka_java() -> None:
    packed = compress(Compression.LZ4, _payload(200_000))
    assert packed[:4] == b"\x04\x22\x4d\x18"
    assert packed[4] == 0x60  # version 01, independent blocks, no checksums, no content size
    assert packed[5] == 0x40  # 64 KiB blocks
    assert packed[6] == (xxhash.xxh32(packed[4:6]).intdigest() >> 8) & 0xFF
    assert packed.endswith(b"\x00\x00\x00\x00")
    assert lz4.frame.decompress(packed) == _payload(200_000)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"block_linked": False},
        {"block_linked": False, "content_checksum": True, "block_checksum": True},
        {"store_size": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
        {"block_size": lz4.frame.BLOCKSIZE_MAX1MB, "block_linked": False},
        {"compression_level": 12},
    ],
)
def test_lz4_reads_frames_from_liblz4(options: dict) -> None:
    data = _payload(700_000) + os.urandom(100_000)
    assert decompress(Compression.LZ4, lz4.frame.compress(data, **options)) == data


def test_lz4_broken_header_checksum_of_magic_v0() -> None:
    data = _payload(10_000)
    broken = compress_lz4(data, broken_header_checksum=True)
    # Old Kafka hashed the frame magic too.
    assert broken[6] == (xxhash.xxh32(broken[0:6]).intdigest() >> 8) & 0xFF
    assert broken[6] != compress_lz4(data)[6]
    assert decompress(Compression.LZ4, broken) == data
    bad = bytearray(broken)
    bad[6] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decompress(Compression.LZ4, bytes(bad))


@given(st.binary(max_size=100), st.integers(min_value=0, max_value=2**32 - 1))
def test_xxh32_matches_reference(data: bytes, seed: int) -> None:
    assert xxh32(data, seed) == xxhash.xxh32(data, seed=seed).intdigest()


def test_zstd_reads_frames_without_content_size_and_multiple_frames() -> None:
    data = _payload(500_000)
    streamer = zstandard.ZstdCompressor(write_content_size=False, write_checksum=True)
    compressor = streamer.compressobj()
    frame = compressor.compress(data) + compressor.flush()
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Compression.ZSTD, frame) == data
    two = frame + zstandard.ZstdCompressor().compress(b"tail")
    assert decompress(Compression.ZSTD, two) == data + b"tail"
    assert zstandard.ZstdDecompressor().decompress(compress(Compression.ZSTD, data)) == data


def test_zstd_bound_is_an_upper_bound() -> None:
    data = _payload(1_000_000)
    compressor = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = compressor.compress(data) + compressor.flush()
    bound, exact = zstd_output_bound(frame)
    assert not exact and bound >= len(data)
    assert zstd_output_bound(compress(Compression.ZSTD, data)) == (len(data), True)
    # A loose bound above the limit still decompresses when the real size fits.
    assert decompress(Compression.ZSTD, frame, max_size=len(data)) == data
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Compression.ZSTD, frame, max_size=len(data) - 1)


def test_gzip_reads_concatenated_members() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


BOMB = bytes(64 * 1024 * 1024)


@pytest.mark.parametrize("codec", COMPRESSING)
def test_decompression_bomb_is_refused(codec: Compression) -> None:
    packed = compress(codec, BOMB)
    assert len(packed) < len(BOMB) // 20
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(codec, packed, max_size=8 * 1024 * 1024)
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(codec, packed, max_size=len(BOMB) - 1)
    assert len(decompress(codec, packed, max_size=len(BOMB))) == len(BOMB)


def test_bombs_from_other_writers_are_refused() -> None:
    limit = 4 * 1024 * 1024
    zstd_stream = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    no_size = zstd_stream.compress(BOMB) + zstd_stream.flush()
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Compression.ZSTD, no_size, max_size=limit)
    linked = lz4.frame.compress(BOMB[: 16 * 1024 * 1024], block_linked=True)
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Compression.LZ4, linked, max_size=limit)
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Compression.SNAPPY, snappy.compress(BOMB[: 8 * 1024 * 1024]), max_size=limit)


@pytest.mark.parametrize("codec", COMPRESSING)
def test_truncated_and_garbage_input_raise_corrupt_record_error(codec: Compression) -> None:
    data = _payload(100_000)
    packed = compress(codec, data)
    # (a xerial header alone is a valid empty stream, so 16 is not among the cuts)
    for cut in sorted({1, 2, 5, 7, 10, 17, 20, len(packed) // 2, len(packed) - 1}):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut])
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"")
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"this is not compressed data at all" * 3)


@given(st.binary(min_size=0, max_size=300), st.sampled_from(COMPRESSING))
@settings(max_examples=300, deadline=None)
def test_arbitrary_input_only_raises_corrupt_record_error(data: bytes, codec: Compression) -> None:
    try:
        decompress(codec, data, max_size=1024 * 1024)
    except CorruptRecordError:
        pass


@pytest.mark.parametrize("codec", COMPRESSING)
def test_bit_flips_only_raise_corrupt_record_error(codec: Compression) -> None:
    packed = compress(codec, _payload(5000))
    rng = random.Random(11)
    for _ in range(300):
        flipped = bytearray(packed)
        position = rng.randrange(len(flipped))
        flipped[position] ^= 1 << rng.randrange(8)
        try:
            decompress(codec, bytes(flipped), max_size=1024 * 1024)
        except CorruptRecordError:
            pass
