"""RecordBatch v2 header: parsing, CRC, walking a buffer of batches, in-place patching.

Layout (big-endian; offsets from the start of the batch)::

     0 baseOffset int64          35 maxTimestamp int64
     8 batchLength int32         43 producerId int64
    12 partitionLeaderEpoch int32  51 producerEpoch int16
    16 magic int8                53 baseSequence int32
    17 crc uint32                57 recordsCount int32
    21 attributes int16          61 records...
    23 lastOffsetDelta int32
    27 baseTimestamp int64

``batchLength`` counts from partitionLeaderEpoch to the end of the batch; the CRC32C covers
attributes to the end, so baseOffset and partitionLeaderEpoch can be rewritten without touching
the CRC (that is why the broker can assign offsets and epochs in place).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator

from crc32c import crc32c

from odradek.protocol.errors import CorruptRecordError, DecodeError

Buffer = bytes | bytearray | memoryview

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32
MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2
# Smallest legal batchLength: a header with no records.
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# Field positions inside a batch.
BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57

# Attribute bits.
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == BATCH_HEADER_SIZE
_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

_INT32_MAX = 0x7FFFFFFF


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader:
    """The 61-byte header of a v2 record batch, decoded without touching the records."""

    # Wire order, used by repr and equality.
    FIELDS = (
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    )
    __slots__ = tuple(sorted(FIELDS))

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    def __init__(
        self,
        base_offset: int,
        batch_length: int,
        partition_leader_epoch: int,
        magic: int,
        crc: int,
        attributes: int,
        last_offset_delta: int,
        base_timestamp: int,
        max_timestamp: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        records_count: int,
    ) -> None:
        self.base_offset = base_offset
        self.batch_length = batch_length
        self.partition_leader_epoch = partition_leader_epoch
        self.magic = magic
        self.crc = crc
        self.attributes = attributes
        self.last_offset_delta = last_offset_delta
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.records_count = records_count

    @classmethod
    def parse(cls, buf: Buffer, pos: int = 0) -> BatchHeader:
        """Decode the header at `pos`.

        DecodeError if fewer than 61 bytes are available; CorruptRecordError if the magic is
        not 2 or batchLength is too small to hold a header.
        """
        if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
            raise DecodeError(
                f"record batch header needs {BATCH_HEADER_SIZE} bytes, "
                f"{max(0, len(buf) - pos)} available at position {pos}"
            )
        header = cls(*HEADER_STRUCT.unpack_from(buf, pos))
        if header.magic != MAGIC_V2:
            raise CorruptRecordError(f"record batch magic is {header.magic}, expected 2")
        if header.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch length {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}"
            )
        return header

    def pack_into(self, buf: bytearray | memoryview, pos: int = 0) -> None:
        """Write the 61 header bytes as they are (the CRC is not recomputed)."""
        HEADER_STRUCT.pack_into(
            buf,
            pos,
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    @property
    def size(self) -> int:
        """Total bytes of the batch, log overhead included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        codec = self.attributes & COMPRESSION_CODEC_MASK
        try:
            return Compression(codec)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec id {codec}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """KIP-534: baseTimestamp holds the delete horizon set by the log cleaner."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from INT32_MAX to 0 like Kafka's."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    def _fields(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchHeader):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.FIELDS)
        return f"BatchHeader({fields})"


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment` with Kafka's wrap-around at INT32_MAX."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def read_magic(buf: Buffer, pos: int = 0) -> int:
    """The magic byte (byte 16) of the batch or legacy message at `pos`; same place in v0/v1/v2."""
    if pos < 0 or len(buf) - pos <= MAGIC_OFFSET:
        raise DecodeError(f"no magic byte: fewer than {MAGIC_OFFSET + 1} bytes at {pos}")
    return int(_INT8.unpack_from(buf, pos + MAGIC_OFFSET)[0])


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC32C of a batch's checksummed range (attributes to the end)."""
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]
    if len(view) != size - ATTRIBUTES_OFFSET:
        raise DecodeError(f"record batch of {size} bytes is truncated at position {pos}")
    return int(crc32c(view))


def verify_crc(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """Raise CorruptRecordError unless the stored CRC matches the batch bytes."""
    try:
        actual = compute_crc(buf, pos, header.size)
    except DecodeError as exc:
        raise CorruptRecordError(str(exc)) from None
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at offset {header.base_offset} is corrupt: "
            f"stored crc {header.crc:#010x}, computed {actual:#010x}"
        )


def write_crc(buf: bytearray | memoryview, pos: int, size: int) -> int:
    """Recompute and store the CRC of the batch at `pos` of `size` bytes; return it."""
    crc = compute_crc(buf, pos, size)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)
    return crc


def iter_batches(
    buf: Buffer, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete v2 batch in buf[pos:end].

    Stops silently at an incomplete trailing batch (a fetch response may end mid-batch);
    raises CorruptRecordError on an impossible batch length or a magic other than 2.
    """
    if end is None:
        end = len(buf)
    elif end > len(buf):
        raise DecodeError(f"end {end} is beyond the buffer ({len(buf)} bytes)")
    length_at = _INT32.unpack_from
    parse = BatchHeader.parse
    while end - pos >= LOG_OVERHEAD:
        batch_length = length_at(buf, pos + BATCH_LENGTH_OFFSET)[0]
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at position {pos} has impossible length {batch_length}"
            )
        size = batch_length + LOG_OVERHEAD
        if end - pos < size:
            return
        yield pos, parse(buf, pos)
        pos += size


def _require_batch(buf: Buffer, pos: int, need: int) -> None:
    if pos < 0 or len(buf) - pos < need:
        raise DecodeError(f"record batch at position {pos} is truncated")


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (outside the CRC range, so the CRC stays valid)."""
    _require_batch(buf, pos, LOG_OVERHEAD)
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (outside the CRC range)."""
    _require_batch(buf, pos, PARTITION_LEADER_EPOCH_OFFSET + 4)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def patch_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Stamp the batch with LogAppendTime like Kafka's broker does (setMaxTimestamp).

    Sets the timestamp-type attribute bit and maxTimestamp, then recomputes the CRC. Record
    timestamp deltas are left alone: readers take every record's timestamp from maxTimestamp
    when the type is LOG_APPEND_TIME.
    """
    _require_batch(buf, pos, BATCH_HEADER_SIZE)
    header = BatchHeader.parse(buf, pos)
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME and (
        header.max_timestamp == timestamp_ms
    ):
        return
    _require_batch(buf, pos, header.size)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    write_crc(buf, pos, header.size)
