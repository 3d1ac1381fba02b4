"""Kafka's compression codecs, on top of cramjam (Rust) and zlib.

Formats, as Kafka's clients write them:

* gzip: a gzip stream (several concatenated members are accepted when reading).
* snappy: Java clients write snappy-java's "xerial" framing (``\\x82SNAPPY\\x00``, int32 version,
  int32 compatible version, then blocks of int32 big-endian length + raw snappy block);
  librdkafka writes raw snappy for produce but reads both. We read both (the header decides) and
  write xerial framing, which every client reads. The version fields are not checked: some
  producers are known to write them little-endian.
* lz4: the standard LZ4 frame format (KIP-57). We write what Kafka's Java client writes:
  independent 64 KiB blocks, no checksums. Magic v0 message sets used a broken frame header
  checksum (computed over the magic number too, KAFKA-3160); readers accept both variants and
  `compress_lz4(..., broken_header_checksum=True)` writes the old one for v0 down-conversion.
  Block and content checksums are not verified: the batch CRC already covers these bytes.
* zstd: standard zstd frames; frames without a content size (streaming writers) are fine.

Decompression is bounded (`max_size`): the output size is known or bounded *before* any large
allocation (gzip: streaming with a cap; snappy: the length varint of each block; lz4 and zstd:
the frame and block headers; zstd frames without a content size: a capped lazily-committed
buffer), and CorruptRecordError is raised when it would exceed the cap.
"""

from __future__ import annotations

import mmap
import struct
import zlib

import cramjam

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records.batch import Buffer, Compression

DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

GZIP_DEFAULT_LEVEL = 6  # zlib's default, which is what Kafka's gzip level -1 means
ZSTD_DEFAULT_LEVEL = 3  # Kafka's compression.zstd.level default

_U32_BE = struct.Struct(">I")
_I32_BE = struct.Struct(">i")
_U32_LE = struct.Struct("<I")
_U64_LE = struct.Struct("<Q")
_U16_LE = struct.Struct("<H")


def kafka_level(codec: Compression | int, gzip_level: int, lz4_level: int,
                zstd_level: int) -> int | None:
    """Kafka's `compression.<codec>.level` settings (KIP-390) as `compress`'s level for
    `codec`: None for the codec's own default (gzip -1; lz4 9, Kafka's default, which
    `compress_lz4` serves with LZ4's fast mode) and for codecs without levels."""
    codec = Compression(codec)
    if codec == Compression.GZIP:
        return None if gzip_level == -1 else gzip_level
    if codec == Compression.LZ4:
        return None if lz4_level == 9 else lz4_level
    if codec == Compression.ZSTD:
        return zstd_level
    return None


def compress(codec: Compression | int, data: Buffer, level: int | None = None) -> bytes:
    """Compress `data` the way Kafka's clients do for `codec`."""
    codec = Compression(codec)
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(
            cramjam.gzip.compress(data, level=GZIP_DEFAULT_LEVEL if level is None else level)
        )
    if codec == Compression.SNAPPY:
        return compress_snappy_xerial(data)
    if codec == Compression.LZ4:
        return compress_lz4(data, level)
    return bytes(cramjam.zstd.compress(data, level=ZSTD_DEFAULT_LEVEL if level is None else level))


def decompress(
    codec: Compression | int, data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress `data`; CorruptRecordError if it is invalid or inflates beyond `max_size`."""
    codec = Compression(codec)
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return _decompress_gzip(data, max_size)
    if codec == Compression.SNAPPY:
        return _decompress_snappy(data, max_size)
    if codec == Compression.LZ4:
        return _decompress_lz4(data, max_size)
    return _decompress_zstd(data, max_size)


def _too_large(max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"decompressed data exceeds the limit of {max_size} bytes")


# --- gzip ------------------------------------------------------------------------------------


def _decompress_gzip(data: Buffer, max_size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    pending = bytes(data)
    try:
        while True:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while True:
                # Ask for at most one byte more than allowed, so an excess is detected without
                # ever inflating more than the cap.
                chunk = inflater.decompress(pending, max_size - total + 1)
                total += len(chunk)
                if total > max_size:
                    raise _too_large(max_size)
                parts.append(chunk)
                pending = inflater.unconsumed_tail
                if inflater.eof:
                    break
                if not chunk and not pending:
                    raise CorruptRecordError("gzip stream is truncated")
            pending = inflater.unused_data
            if not pending:
                return b"".join(parts)
    except zlib.error as exc:
        raise CorruptRecordError(f"invalid gzip data: {exc}") from None


# --- snappy ----------------------------------------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default, as Kafka's Java producer uses


def compress_snappy_xerial(data: Buffer, block_size: int = XERIAL_BLOCK_SIZE) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), block_size):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + block_size]))
        parts.append(_I32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_block(block: Buffer, budget: int, max_size: int) -> bytes:
    try:
        length = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"invalid snappy block: {exc}") from None
    if length > budget:
        raise _too_large(max_size)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"invalid snappy block: {exc}") from None


def _decompress_snappy(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    if len(view) < len(XERIAL_HEADER) or bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_block(view, max_size, max_size)
    parts: list[bytes] = []
    total = 0
    pos = len(XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("xerial snappy block length is truncated")
        length = _I32_BE.unpack_from(view, pos)[0]
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(f"xerial snappy block length {length} is out of range")
        block = _snappy_block(view[pos : pos + length], max_size - total, max_size)
        total += len(block)
        parts.append(block)
        pos += length
    return b"".join(parts)


# --- lz4 -------------------------------------------------------------------------------------

LZ4_FRAME_MAGIC = 0x184D2204
_LZ4_MAGIC_BYTES = _U32_LE.pack(LZ4_FRAME_MAGIC)
_LZ4_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_LZ4_BLOCK_SIZE_ID = 4  # 64 KiB, like Kafka's KafkaLZ4BlockOutputStream
_LZ4_FLG_VERSION = 0x40
_LZ4_FLG_INDEPENDENT = 0x20
_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_CONTENT_CHECKSUM = 0x04
_LZ4_FLG_DICT_ID = 0x01
_LZ4_UNCOMPRESSED_BIT = 0x80000000


def _lz4_header_checksum(descriptor: bytes, broken: bool) -> int:
    # The checksum is the second byte of xxh32 over the descriptor; old Kafka hashed the
    # frame magic number too.
    hashed = _LZ4_MAGIC_BYTES + descriptor if broken else descriptor
    return (xxh32(hashed) >> 8) & 0xFF


def compress_lz4(
    data: Buffer, level: int | None = None, broken_header_checksum: bool = False
) -> bytes:
    """An LZ4 frame with independent 64 KiB blocks and no checksums (Kafka's Java layout).

    `level` None uses LZ4's fast mode, otherwise LZ4 HC at that level.
    """
    descriptor = bytes((_LZ4_FLG_VERSION | _LZ4_FLG_INDEPENDENT, _LZ4_BLOCK_SIZE_ID << 4))
    parts = [
        _LZ4_MAGIC_BYTES,
        descriptor,
        bytes((_lz4_header_checksum(descriptor, broken_header_checksum),)),
    ]
    view = memoryview(data)
    block_size = _LZ4_BLOCK_SIZES[_LZ4_BLOCK_SIZE_ID]
    for start in range(0, len(view), block_size):
        chunk = view[start : start + block_size]
        if level is None:
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        else:
            block = bytes(
                cramjam.lz4.compress_block(
                    chunk, mode="high_compression", compression=level, store_size=False
                )
            )
        if len(block) >= len(chunk):
            parts.append(_U32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT))
            parts.append(bytes(chunk))
        else:
            parts.append(_U32_LE.pack(len(block)))
            parts.append(block)
    parts.append(b"\x00\x00\x00\x00")  # end mark
    return b"".join(parts)


def _decompress_lz4(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    parts: list[bytes] = []
    total = 0
    pos = 0
    end = len(view)
    if end == 0:
        raise CorruptRecordError("empty lz4 data")
    try:
        while pos < end:
            frame, pos = _decompress_lz4_frame(view, pos, max_size - total, max_size)
            total += len(frame)
            parts.append(frame)
    except struct.error:
        raise CorruptRecordError("lz4 frame is truncated") from None
    return b"".join(parts)


def _decompress_lz4_frame(
    view: memoryview, pos: int, budget: int, max_size: int
) -> tuple[bytes, int]:
    start = pos
    magic = _U32_LE.unpack_from(view, pos)[0]
    if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
        size = _U32_LE.unpack_from(view, pos + 4)[0]
        if pos + 8 + size > len(view):
            raise CorruptRecordError("lz4 skippable frame is truncated")
        return b"", pos + 8 + size
    if magic != LZ4_FRAME_MAGIC:
        raise CorruptRecordError(f"bad lz4 frame magic {magic:#x}")
    if len(view) - pos < 7:
        raise CorruptRecordError("lz4 frame header is truncated")
    flg = view[pos + 4]
    bd = view[pos + 5]
    if flg & 0xC0 != _LZ4_FLG_VERSION or flg & 0x02 or bd & 0x8F:
        raise CorruptRecordError(f"unsupported lz4 frame descriptor flg={flg:#x} bd={bd:#x}")
    block_max = _LZ4_BLOCK_SIZES.get(bd >> 4)
    if block_max is None:
        raise CorruptRecordError(f"bad lz4 block size id {bd >> 4}")
    descriptor_end = pos + 6
    content_size = None
    if flg & _LZ4_FLG_CONTENT_SIZE:
        content_size = _U64_LE.unpack_from(view, descriptor_end)[0]
        descriptor_end += 8
    if flg & _LZ4_FLG_DICT_ID:
        raise CorruptRecordError("lz4 frames with a dictionary id are not supported")
    if descriptor_end >= len(view):
        raise CorruptRecordError("lz4 frame header is truncated")
    descriptor = bytes(view[pos + 4 : descriptor_end])
    stored_hc = view[descriptor_end]
    if stored_hc not in (
        _lz4_header_checksum(descriptor, False),
        _lz4_header_checksum(descriptor, True),
    ):
        raise CorruptRecordError("bad lz4 frame header checksum")
    pos = descriptor_end + 1
    block_checksum = 4 if flg & _LZ4_FLG_BLOCK_CHECKSUM else 0

    # Walk the block headers first: this bounds the output before anything is inflated.
    blocks: list[tuple[int, int, bool]] = []
    bound = 0
    while True:
        word = _U32_LE.unpack_from(view, pos)[0]
        pos += 4
        if word == 0:
            break
        size = word & ~_LZ4_UNCOMPRESSED_BIT
        stored = bool(word & _LZ4_UNCOMPRESSED_BIT)
        if size > block_max or pos + size + block_checksum > len(view):
            raise CorruptRecordError("lz4 block size is out of range")
        blocks.append((pos, size, stored))
        bound += size if stored else block_max
        pos += size + block_checksum
    if flg & _LZ4_FLG_CONTENT_CHECKSUM:
        pos += 4
        if pos > len(view):
            raise CorruptRecordError("lz4 content checksum is truncated")
    if content_size is not None:
        if content_size > budget:
            raise _too_large(max_size)
        bound = min(bound, content_size)

    if not flg & _LZ4_FLG_INDEPENDENT:
        # Linked blocks need the previous 64 KiB as dictionary, which block-level decoding
        # cannot provide; decode the whole frame, bounded only after the fact. Kafka's clients
        # never write linked blocks.
        frame = _lz4_frame_with_valid_checksum(view[start:pos], descriptor)
        try:
            out = bytes(cramjam.lz4.decompress(frame))
        except cramjam.DecompressionError as exc:
            raise CorruptRecordError(f"invalid lz4 frame: {exc}") from None
        if len(out) > budget:
            raise _too_large(max_size)
        return out, pos

    if bound > budget:
        # `bound` is exact for stored blocks and counts compressed blocks as full; writers fill
        # every block but the last, so only data within one block of the cap is misjudged.
        raise _too_large(max_size)
    buffer = bytearray(bound)
    target = memoryview(buffer)
    written = 0
    for block_pos, size, stored in blocks:
        if stored:
            if written + size > bound:
                raise CorruptRecordError("lz4 frame content size does not match its data")
            target[written : written + size] = view[block_pos : block_pos + size]
            written += size
            continue
        try:
            written += cramjam.lz4.decompress_block_into(
                view[block_pos : block_pos + size], target[written : written + block_max]
            )
        except cramjam.DecompressionError as exc:
            raise CorruptRecordError(f"invalid lz4 block: {exc}") from None
    if content_size is not None and written != content_size:
        raise CorruptRecordError("lz4 frame content size does not match its data")
    return bytes(target[:written]), pos


def _lz4_frame_with_valid_checksum(frame: memoryview, descriptor: bytes) -> bytes:
    fixed = bytearray(frame)
    fixed[4 + len(descriptor)] = _lz4_header_checksum(descriptor, False)
    return bytes(fixed)


_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (used only for the few bytes of an LZ4 frame header; pure Python)."""
    length = len(data)
    pos = 0
    if length >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= length:
            a, b, c, d = struct.unpack_from("<IIII", data, pos)
            v1 = (_rotl32((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl32((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl32((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl32((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        acc = (_rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + length) & _M32
    while pos + 4 <= length:
        lane = _U32_LE.unpack_from(data, pos)[0]
        acc = (_rotl32((acc + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < length:
        acc = (_rotl32((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


# --- zstd ------------------------------------------------------------------------------------

ZSTD_FRAME_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024


def zstd_output_bound(data: Buffer) -> tuple[int, bool]:
    """An upper bound of the decompressed size from frame and block headers alone, and whether
    it is exact (every frame declares its content size).

    Frames without a content size count each block's exact size (raw and RLE blocks) or the
    block maximum (compressed blocks).
    """
    view = memoryview(data)
    end = len(view)
    pos = 0
    total = 0
    exact = True
    if end == 0:
        raise CorruptRecordError("empty zstd data")
    try:
        while pos < end:
            magic = _U32_LE.unpack_from(view, pos)[0]
            if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
                pos += 8 + _U32_LE.unpack_from(view, pos + 4)[0]
                continue
            if magic != ZSTD_FRAME_MAGIC:
                raise CorruptRecordError(f"bad zstd frame magic {magic:#x}")
            descriptor = view[pos + 4]
            pos += 5
            if descriptor & 0x08:
                raise CorruptRecordError("zstd frame descriptor has the reserved bit set")
            size_flag = descriptor >> 6
            single_segment = bool(descriptor & 0x20)
            window_size = 0
            if not single_segment:
                window_descriptor = view[pos]
                pos += 1
                window_base = 1 << (10 + (window_descriptor >> 3))
                window_size = window_base + (window_base >> 3) * (window_descriptor & 0x07)
            pos += (0, 1, 2, 4)[descriptor & 0x03]  # dictionary id
            size_bytes = (1 if single_segment else 0, 2, 4, 8)[size_flag]
            content_size = None
            if size_bytes:
                content_size = int.from_bytes(view[pos : pos + size_bytes], "little")
                if len(view[pos : pos + size_bytes]) != size_bytes:
                    raise CorruptRecordError("zstd frame header is truncated")
                if size_bytes == 2:
                    content_size += 256
                pos += size_bytes
            if single_segment:
                window_size = content_size or 0
            block_max = min(window_size, _ZSTD_BLOCK_MAX)
            frame_bound = 0
            while True:
                if end - pos < 3:
                    raise CorruptRecordError("zstd block header is truncated")
                block_header = view[pos] | (view[pos + 1] << 8) | (view[pos + 2] << 16)
                pos += 3
                last = block_header & 1
                block_type = (block_header >> 1) & 3
                block_size = block_header >> 3
                if block_type == 0:  # raw
                    frame_bound += block_size
                    pos += block_size
                elif block_type == 1:  # RLE: one byte repeated block_size times
                    frame_bound += block_size
                    pos += 1
                elif block_type == 2:  # compressed
                    if block_size > max(block_max, 1):
                        raise CorruptRecordError("zstd compressed block exceeds the block maximum")
                    frame_bound += block_max
                    pos += block_size
                else:
                    raise CorruptRecordError("zstd block has the reserved type")
                if pos > end:
                    raise CorruptRecordError("zstd block is truncated")
                if last:
                    break
            if descriptor & 0x04:
                pos += 4  # content checksum
            if pos > end:
                raise CorruptRecordError("zstd frame is truncated")
            if content_size is None:
                total += frame_bound
                exact = False
            else:
                total += content_size
    except (IndexError, struct.error):
        raise CorruptRecordError("zstd frame is truncated") from None
    return total, exact


def _decompress_zstd(data: Buffer, max_size: int) -> bytes:
    bound, exact = zstd_output_bound(data)
    if bound <= max_size:
        try:
            out = bytes(cramjam.zstd.decompress(data))
        except cramjam.DecompressionError as exc:
            raise CorruptRecordError(f"invalid zstd data: {exc}") from None
        if len(out) > max_size:  # only if a frame lied about its content size
            raise _too_large(max_size)
        return out
    if exact:
        raise _too_large(max_size)
    # The block walk over-estimates frames without a content size (writers emit partial
    # blocks), so inflate for real into an anonymous mapping capped one byte over the limit:
    # its pages are only committed as they are written, so a bomb never costs more than the cap.
    with mmap.mmap(-1, max_size + 1) as target:
        try:
            written = cramjam.zstd.decompress_into(data, target)
        except cramjam.DecompressionError as exc:
            if "whole buffer" in str(exc):
                raise _too_large(max_size) from None
            raise CorruptRecordError(f"invalid zstd data: {exc}") from None
        if written > max_size:
            raise _too_large(max_size)
        return target[:written]
