"""Metadata snapshots (KIP-630): the file format, the snapshot stores and the retention rules.

A snapshot is the state machine as of a committed offset, named by its `OffsetAndEpoch` id:
the end offset (the offset after the last record it includes) and the epoch of that last
record, as Kafka's snapshot ids. On disk it lives in the metadata log's directory as
`{end_offset:020d}-{epoch:010d}.checkpoint`; it is written to a `.checkpoint.part` file,
fsynced and atomically renamed, so a crash leaves either a whole snapshot or a `.part` that the
next start deletes.

Its content is Kafka's: RecordBatch v2 batches with offsets from 0 and the snapshot's epoch as
partition leader epoch; first a control batch holding a SnapshotHeaderRecord (with the
timestamp of the last record the snapshot includes), then batches of state records, last a
control batch holding a SnapshotFooterRecord. A snapshot of a dynamic quorum (kraft.version 1)
has, right after the header, a control batch with a KRaftVersionRecord and a VotersRecord: the
voter set as of the snapshot. The bootstrap snapshot `storage format` writes for a dynamic
quorum (id 0-0, `bootstrap_snapshot`) is just that: header, those two records, footer. `read_snapshot` (and `freeze`, for a snapshot
downloaded in chunks) checks every CRC, the header, the footer and that nothing follows it: a
corrupt or partial snapshot is never used.

Stores (`SnapshotStore`): `FileSnapshotStore` over the directory, `MemorySnapshotStore` for the
simulation (a frozen snapshot survives a simulated crash, a `.part` does not). Writers
(`RawSnapshotWriter`) take unaligned bytes (a FetchSnapshot download) and may run on a worker
thread; the store's index is guarded by a lock. `SnapshotWriter` builds a snapshot from record
values.

Retention (`clean_snapshots`, Kafka's KafkaMetadataLog.maybeClean): with two snapshots or more,
the oldest is deleted while the log plus the snapshots exceed `retention_bytes`, or while it is
older than `retention_ms`; the log start then moves to the next snapshot's end offset and the
log's segments wholly below it go. The newest snapshot always stays, and the log start never
passes a snapshot's end.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError
from odradek.protocol.records import RecordBatchBuilder, iter_batches, iter_records, verify_crc
from odradek.protocol.records.control import (
    ControlRecordType,
    build_control_record_batch,
    decode_control_key,
    encode_control_key,
)
from odradek.raft.voters import (
    KRAFT_VERSION_STATIC,
    VoterSet,
    kraft_version_record,
    voter_set_from_record,
    voters_record,
)

log = logging.getLogger("odradek.raft.snapshot")


class OffsetAndEpoch(NamedTuple):
    """A log position as Raft compares them; as a snapshot id: (end offset, epoch of the last
    record included)."""

    offset: int
    epoch: int


SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = SNAPSHOT_SUFFIX + ".part"
DELETED_SUFFIX = SNAPSHOT_SUFFIX + ".deleted"
# Record values per data batch (and a byte bound): batches stay well under a fetch's max bytes.
MAX_BATCH_RECORDS = 4096
MAX_BATCH_BYTES = 1 << 20


class CorruptSnapshotError(ValueError):
    """The bytes are not a whole, valid snapshot."""


def snapshot_file_name(snapshot_id: OffsetAndEpoch, suffix: str = SNAPSHOT_SUFFIX) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{suffix}"


def parse_snapshot_file_name(name: str) -> tuple[OffsetAndEpoch, str] | None:
    """(id, suffix) of a snapshot file name (suffix: .checkpoint, .checkpoint.part or
    .checkpoint.deleted); None for any other file."""
    for suffix in (PARTIAL_SUFFIX, DELETED_SUFFIX, SNAPSHOT_SUFFIX):
        if name.endswith(suffix):
            stem = name[:-len(suffix)]
            offset, dash, epoch = stem.partition("-")
            if (dash and len(offset) == 20 and len(epoch) == 10 and offset.isdigit()
                    and epoch.isdigit()):
                return OffsetAndEpoch(int(offset), int(epoch)), suffix
            return None
    return None


# ------------------------------------------------------------------------------------------------
# the format


def header_batch(epoch: int, last_contained_timestamp: int) -> bytes:
    header = m.SnapshotHeaderRecord(version=0,
                                    last_contained_log_timestamp=last_contained_timestamp)
    return build_control_record_batch(ControlRecordType.SNAPSHOT_HEADER, header.encode(0),
                                      last_contained_timestamp, base_offset=0,
                                      partition_leader_epoch=epoch)


def footer_batch(base_offset: int, epoch: int, timestamp: int) -> bytes:
    footer = m.SnapshotFooterRecord(version=0)
    return build_control_record_batch(ControlRecordType.SNAPSHOT_FOOTER, footer.encode(0),
                                      timestamp, base_offset=base_offset,
                                      partition_leader_epoch=epoch)


def kraft_control_batch(base_offset: int, epoch: int, timestamp: int, kraft_version: int,
                        voters: VoterSet) -> bytes:
    """One control batch of a KRaftVersionRecord and a VotersRecord (Kafka writes both in one
    batch, in the snapshot after the header and in the log when the voters change)."""
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch,
                                 is_control=True)
    builder.append(timestamp, encode_control_key(ControlRecordType.KRAFT_VERSION),
                   kraft_version_record(kraft_version).encode(0))
    builder.append(timestamp, encode_control_key(ControlRecordType.KRAFT_VOTERS),
                   voters_record(voters).encode(0))
    return builder.build()


def bootstrap_snapshot(voters: VoterSet, kraft_version: int, timestamp: int) -> bytes:
    """The 0-0 snapshot `storage format --standalone` / `--initial-controllers` writes: the
    initial voters of a dynamic quorum."""
    return b"".join([header_batch(0, timestamp),
                     kraft_control_batch(1, 0, timestamp, kraft_version, voters),
                     footer_batch(3, 0, timestamp)])


def data_batch(base_offset: int, epoch: int, timestamp: int, values: Iterable[bytes]) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for value in values:
        builder.append(timestamp, None, value)
    return builder.build()


def encode_snapshot(epoch: int, last_contained_timestamp: int,
                    values: Iterable[bytes]) -> bytes:
    """A whole snapshot's bytes (header, the values in batches, footer)."""
    writer = _Builder(epoch, last_contained_timestamp)
    chunks = [writer.header()]
    chunks.extend(writer.batches(values))
    chunks.append(writer.footer())
    return b"".join(chunks)


class _Builder:
    """Offsets and epochs of a snapshot's batches as they are built."""

    def __init__(self, epoch: int, last_contained_timestamp: int) -> None:
        self.epoch = epoch
        self.timestamp = last_contained_timestamp
        self.next_offset = 0

    def header(self) -> bytes:
        self.next_offset = 1
        return header_batch(self.epoch, self.timestamp)

    def batches(self, values: Iterable[bytes]) -> Iterator[bytes]:
        pending: list[bytes] = []
        size = 0
        for value in values:
            pending.append(value)
            size += len(value)
            if len(pending) >= MAX_BATCH_RECORDS or size >= MAX_BATCH_BYTES:
                yield self._batch(pending)
                pending, size = [], 0
        if pending:
            yield self._batch(pending)

    def _batch(self, values: list[bytes]) -> bytes:
        batch = data_batch(self.next_offset, self.epoch, self.timestamp, values)
        self.next_offset += len(values)
        return batch

    def footer(self) -> bytes:
        return footer_batch(self.next_offset, self.epoch, self.timestamp)


@dataclass(frozen=True)
class SnapshotContent:
    last_contained_timestamp: int
    epoch: int  # the batches' partition leader epoch
    values: list[bytes]  # the state records, in order
    kraft_version: int = KRAFT_VERSION_STATIC
    voters: VoterSet | None = None  # the voter set as of the snapshot (dynamic quorums)


def _control_records(data: bytes | memoryview, pos: int,
                     header) -> list[tuple[ControlRecordType, bytes]]:
    return [(decode_control_key(record.key), bytes(record.value or b""))
            for record in iter_records(data, pos, header)]


def check_snapshot(data: bytes | memoryview, *, decode_values: bool = True) -> SnapshotContent:
    """Validates a whole snapshot (CRCs, contiguous offsets from 0, one epoch, the header
    first, the footer last and nothing after it); its content. Raises CorruptSnapshotError."""
    try:
        return _check_snapshot(data, decode_values)
    except CorruptSnapshotError:
        raise
    except (DecodeError, ValueError, KeyError, IndexError) as exc:
        raise CorruptSnapshotError(f"undecodable snapshot: {exc}") from exc


def _check_snapshot(data: bytes | memoryview, decode_values: bool) -> SnapshotContent:
    batches = list(iter_batches(data))
    end = batches[-1][0] + batches[-1][1].size if batches else 0
    if end != len(data):
        raise CorruptSnapshotError(f"{len(data) - end} trailing bytes (a partial batch)")
    if len(batches) < 2:
        raise CorruptSnapshotError("a snapshot needs a header and a footer batch")
    expected = 0
    epoch = batches[0][1].partition_leader_epoch
    values: list[bytes] = []
    timestamp = -1
    kraft_version = KRAFT_VERSION_STATIC
    voters: VoterSet | None = None
    for index, (pos, header) in enumerate(batches):
        verify_crc(data, pos, header)
        if header.base_offset != expected:
            raise CorruptSnapshotError(f"batch at offset {header.base_offset}, expected "
                                       f"{expected}")
        if header.partition_leader_epoch != epoch:
            raise CorruptSnapshotError("batches of different epochs")
        expected = header.next_offset
        first, last = index == 0, index == len(batches) - 1
        if header.is_control:
            records = _control_records(data, pos, header)
            kinds = [kind for kind, _ in records]
            if (first or last) and len(records) != 1:
                raise CorruptSnapshotError(f"a snapshot's header or footer batch holds "
                                           f"{len(records)} records")
            if first and kinds[0] == ControlRecordType.SNAPSHOT_HEADER:
                decoded = m.SnapshotHeaderRecord.decode(records[0][1], 0)
                timestamp = decoded.last_contained_log_timestamp
            elif last and kinds[0] == ControlRecordType.SNAPSHOT_FOOTER:
                m.SnapshotFooterRecord.decode(records[0][1], 0)
            elif not (first or last) and set(kinds) <= {ControlRecordType.KRAFT_VERSION,
                                                        ControlRecordType.KRAFT_VOTERS}:
                for kind, value in records:
                    if kind == ControlRecordType.KRAFT_VERSION:
                        kraft_version = m.KRaftVersionRecord.decode(value, 0).kraft_version
                    else:
                        voters = voter_set_from_record(m.VotersRecord.decode(value, 0))
            else:
                raise CorruptSnapshotError(f"control records {[k.name for k in kinds]} at "
                                           f"batch {index}")
        elif first or last:
            raise CorruptSnapshotError("a snapshot must start with its header and end with "
                                       "its footer")
        elif decode_values:
            values.extend(bytes(record.value or b"") for record in iter_records(data, pos,
                                                                                 header))
    return SnapshotContent(timestamp, epoch, values, kraft_version, voters)


def read_snapshot(data: bytes | memoryview) -> SnapshotContent:
    return check_snapshot(data, decode_values=True)


# ------------------------------------------------------------------------------------------------
# writers


class RawSnapshotWriter(Protocol):
    """Bytes of one snapshot as they arrive; nothing is visible before `freeze`."""

    snapshot_id: OffsetAndEpoch

    @property
    def size(self) -> int: ...

    def append(self, chunk: bytes | memoryview) -> None: ...

    def freeze(self) -> int:
        """Validates the whole content, makes it durable and visible; its size. Raises
        CorruptSnapshotError (the partial snapshot is then discarded)."""

    def abort(self) -> None:
        """Discards the partial snapshot."""


class SnapshotWriter:
    """Builds a snapshot from record values over a raw writer (Kafka's RecordsSnapshotWriter):
    the header at once, `append(values)` as batches, the footer at `freeze`."""

    def __init__(self, raw: RawSnapshotWriter, last_contained_timestamp: int,
                 kraft_version: int = KRAFT_VERSION_STATIC,
                 voters: VoterSet | None = None) -> None:
        """`voters` (a dynamic quorum's set as of the snapshot) go right after the header."""
        self.raw = raw
        self.snapshot_id = raw.snapshot_id
        self._builder = _Builder(raw.snapshot_id.epoch, last_contained_timestamp)
        raw.append(self._builder.header())
        if voters is not None:
            raw.append(kraft_control_batch(self._builder.next_offset, self._builder.epoch,
                                           last_contained_timestamp, kraft_version, voters))
            self._builder.next_offset += 2

    def append(self, values: Iterable[bytes]) -> None:
        for batch in self._builder.batches(values):
            self.raw.append(batch)

    def freeze(self) -> int:
        self.raw.append(self._builder.footer())
        return self.raw.freeze()

    def abort(self) -> None:
        self.raw.abort()


# ------------------------------------------------------------------------------------------------
# stores


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: OffsetAndEpoch
    size: int
    last_contained_timestamp: int


class SnapshotStore(Protocol):
    def ids(self) -> list[OffsetAndEpoch]:
        """Every frozen, valid snapshot, oldest first."""

    def latest_id(self) -> OffsetAndEpoch | None: ...

    def earliest_id(self) -> OffsetAndEpoch | None: ...

    def info(self, snapshot_id: OffsetAndEpoch) -> SnapshotInfo | None: ...

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` from `position` (unaligned: FetchSnapshot's chunks)."""

    def read_all(self, snapshot_id: OffsetAndEpoch) -> bytes: ...

    def new_writer(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter: ...

    def delete(self, snapshot_id: OffsetAndEpoch) -> None: ...


class _Index:
    """The frozen snapshots of a store, guarded by a lock (writers freeze on worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._infos: dict[OffsetAndEpoch, SnapshotInfo] = {}

    def ids(self) -> list[OffsetAndEpoch]:
        with self._lock:
            return sorted(self._infos)

    def latest_id(self) -> OffsetAndEpoch | None:
        with self._lock:
            return max(self._infos) if self._infos else None

    def earliest_id(self) -> OffsetAndEpoch | None:
        with self._lock:
            return min(self._infos) if self._infos else None

    def info(self, snapshot_id: OffsetAndEpoch) -> SnapshotInfo | None:
        with self._lock:
            return self._infos.get(snapshot_id)

    def _add(self, info: SnapshotInfo) -> None:
        with self._lock:
            self._infos[info.snapshot_id] = info

    def _remove(self, snapshot_id: OffsetAndEpoch) -> bool:
        with self._lock:
            return self._infos.pop(snapshot_id, None) is not None


class MemorySnapshotStore(_Index):
    """Snapshots in memory; a frozen one is durable (it survives the simulation's crashes)."""

    def __init__(self) -> None:
        super().__init__()
        self._data: dict[OffsetAndEpoch, bytes] = {}

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self._data[snapshot_id][position:position + max_bytes]

    def read_all(self, snapshot_id: OffsetAndEpoch) -> bytes:
        return self._data[snapshot_id]

    def new_writer(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter:
        return _MemoryWriter(self, snapshot_id)

    def delete(self, snapshot_id: OffsetAndEpoch) -> None:
        if self._remove(snapshot_id):
            del self._data[snapshot_id]

    def _freeze(self, snapshot_id: OffsetAndEpoch, data: bytes) -> int:
        content = check_snapshot(data, decode_values=False)
        self._data[snapshot_id] = data
        self._add(SnapshotInfo(snapshot_id, len(data), content.last_contained_timestamp))
        return len(data)


class _MemoryWriter:
    def __init__(self, store: MemorySnapshotStore, snapshot_id: OffsetAndEpoch) -> None:
        self.store = store
        self.snapshot_id = snapshot_id
        self._chunks = bytearray()
        self._done = False

    @property
    def size(self) -> int:
        return len(self._chunks)

    def append(self, chunk: bytes | memoryview) -> None:
        if self._done:
            raise ValueError("the snapshot writer is closed")
        self._chunks += chunk

    def freeze(self) -> int:
        if self._done:
            raise ValueError("the snapshot writer is closed")
        self._done = True
        return self.store._freeze(self.snapshot_id, bytes(self._chunks))

    def abort(self) -> None:
        self._done = True
        self._chunks = bytearray()


class FileSnapshotStore(_Index):
    """Snapshot files in the metadata log's directory. Opening deletes `.part` and `.deleted`
    leftovers and validates every snapshot file: a corrupt one is ignored (logged, kept on disk
    for inspection, never served nor loaded)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.corrupt: list[Path] = []
        for path in sorted(self.dir.iterdir()):
            parsed = parse_snapshot_file_name(path.name)
            if parsed is None:
                continue
            snapshot_id, suffix = parsed
            if suffix != SNAPSHOT_SUFFIX:
                path.unlink(missing_ok=True)
                continue
            try:
                content = check_snapshot(path.read_bytes(), decode_values=False)
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("ignoring the corrupt metadata snapshot %s: %s", path, exc)
                self.corrupt.append(path)
                continue
            self._add(SnapshotInfo(snapshot_id, path.stat().st_size,
                                   content.last_contained_timestamp))

    def path(self, snapshot_id: OffsetAndEpoch, suffix: str = SNAPSHOT_SUFFIX) -> Path:
        return self.dir / snapshot_file_name(snapshot_id, suffix)

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        with open(self.path(snapshot_id), "rb") as file:
            return os.pread(file.fileno(), max_bytes, position)

    def read_all(self, snapshot_id: OffsetAndEpoch) -> bytes:
        return self.path(snapshot_id).read_bytes()

    def new_writer(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter:
        return _FileWriter(self, snapshot_id)

    def delete(self, snapshot_id: OffsetAndEpoch) -> None:
        # Renamed first, as Kafka does: a crash midway leaves a `.deleted` the next open removes.
        self._remove(snapshot_id)
        path = self.path(snapshot_id)
        doomed = self.path(snapshot_id, DELETED_SUFFIX)
        try:
            os.replace(path, doomed)
        except FileNotFoundError:
            return
        doomed.unlink(missing_ok=True)

    def _freeze(self, writer: _FileWriter) -> int:
        snapshot_id = writer.snapshot_id
        part = self.path(snapshot_id, PARTIAL_SUFFIX)
        content = check_snapshot(part.read_bytes(), decode_values=False)
        final = self.path(snapshot_id)
        os.replace(part, final)
        _fsync_dir(self.dir)
        size = final.stat().st_size
        self._add(SnapshotInfo(snapshot_id, size, content.last_contained_timestamp))
        # A corrupt file of the same id was just replaced.
        self.corrupt = [p for p in self.corrupt if p != final]
        return size


class _FileWriter:
    def __init__(self, store: FileSnapshotStore, snapshot_id: OffsetAndEpoch) -> None:
        self.store = store
        self.snapshot_id = snapshot_id
        self._path = store.path(snapshot_id, PARTIAL_SUFFIX)
        self._file = open(self._path, "wb")  # noqa: SIM115 (closed by freeze/abort)
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    def append(self, chunk: bytes | memoryview) -> None:
        if self._file is None:
            raise ValueError("the snapshot writer is closed")
        self._file.write(chunk)
        self._size += len(chunk)

    def freeze(self) -> int:
        if self._file is None:
            raise ValueError("the snapshot writer is closed")
        file, self._file = self._file, None
        try:
            file.flush()
            os.fsync(file.fileno())
        finally:
            file.close()
        try:
            return self.store._freeze(self)
        except BaseException:
            self._path.unlink(missing_ok=True)
            raise

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._path.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
# retention


class CleanableLog(Protocol):
    """What retention needs of a RaftLog (see odradek.raft.log)."""

    snapshots: SnapshotStore

    @property
    def start_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    def delete_before(self, offset: int) -> bool: ...


def clean_snapshots(raft_log: CleanableLog, retention_bytes: int, retention_ms: int,
                    now_ms: int) -> bool:
    """Kafka's maybeClean: size first, then time; whether anything was deleted."""
    cleaned = False
    if retention_bytes >= 0:
        cleaned |= _clean_by_size(raft_log, retention_bytes)
    if retention_ms >= 0:
        cleaned |= _clean(raft_log, lambda info: now_ms - info.last_contained_timestamp
                          > retention_ms)
    cleaned |= forget_snapshots_before_start(raft_log)
    return cleaned


def _clean_by_size(raft_log: CleanableLog, retention_bytes: int) -> bool:
    store = raft_log.snapshots
    total = sum(info.size for info in (store.info(i) for i in store.ids()) if info)

    def breached(info: SnapshotInfo) -> bool:
        nonlocal total
        if raft_log.size_in_bytes + total > retention_bytes:
            total -= info.size
            return True
        return False

    return _clean(raft_log, breached)


def _clean(raft_log: CleanableLog, should_delete) -> bool:
    """Deletes the oldest snapshots matching `should_delete`, always keeping the newest: each
    one deleted moves the log start to the next one's end offset."""
    store = raft_log.snapshots
    cleaned = False
    ids = store.ids()
    for snapshot_id, next_id in itertools.pairwise(ids):
        info = store.info(snapshot_id)
        if info is None or not should_delete(info):
            break
        if not delete_before_snapshot(raft_log, next_id):
            break
        cleaned = True
    return cleaned


def delete_before_snapshot(raft_log: CleanableLog, snapshot_id: OffsetAndEpoch) -> bool:
    """Moves the log start to `snapshot_id`'s end offset (never past it, never back), deletes
    what lies wholly below and the snapshots older than it."""
    store = raft_log.snapshots
    latest = store.latest_id()
    if (store.info(snapshot_id) is None or latest is None or snapshot_id > latest
            or snapshot_id.offset <= raft_log.start_offset):
        return False
    if not raft_log.delete_before(snapshot_id.offset):
        return False
    forget_snapshots_before_start(raft_log)
    return True


def forget_snapshots_before_start(raft_log: CleanableLog) -> bool:
    """Snapshots that end below the log start are of no use (one at or after it covers more):
    deleted, the newest always kept."""
    store = raft_log.snapshots
    ids = store.ids()
    doomed = [i for i in ids[:-1] if i.offset < raft_log.start_offset]
    for snapshot_id in doomed:
        store.delete(snapshot_id)
    return bool(doomed)
