"""Kafka's small text files: offset checkpoints, leader-epoch checkpoints, partition.metadata,
meta.properties. Every write goes to `<file>.tmp`, is fsynced and renamed over the old file, so
a crash leaves either the old or the new content, never a torn one.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from odradek.config.properties import load_properties

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"

CHECKPOINT_VERSION = 0


class CorruptCheckpointError(ValueError):
    """A checkpoint file exists but does not parse; the message names the file and line."""


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Makes a rename or unlink inside `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """fsyncs a file written earlier without it; a file deleted meanwhile needs none."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], text: str, sync: bool = True) -> None:
    """Writes `text` to `path` via `path.tmp` + fsync + rename (+ fsync of the directory)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def _read_versioned_lines(path: Path) -> list[list[str]] | None:
    """Parses `version\\ncount\\nline...`; returns the split entry lines, None if missing."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: expected version and count lines")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: malformed header: {exc}") from exc
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognized version {version}")
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries but found {len(entries)}")
    return entries


class OffsetCheckpointFile:
    """`version\\ncount\\n<topic> <partition> <offset>` lines (Kafka's OffsetCheckpointFile)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines += [f"{topic} {partition} {offset}"
                  for (topic, partition), offset in sorted(offsets.items())]
        atomic_write(self.path, "\n".join(lines) + "\n")

    def read(self) -> dict[tuple[str, int], int]:
        """Missing file -> {}; malformed -> CorruptCheckpointError."""
        entries = _read_versioned_lines(self.path)
        if entries is None:
            return {}
        result: dict[tuple[str, int], int] = {}
        for fields in entries:
            if len(fields) != 3:
                raise CorruptCheckpointError(f"{self.path}: malformed line {' '.join(fields)!r}")
            try:
                result[(fields[0], int(fields[1]))] = int(fields[2])
            except ValueError as exc:
                raise CorruptCheckpointError(f"{self.path}: malformed line {fields!r}") from exc
        return result


class LeaderEpochCheckpointFile:
    """`version\\ncount\\n<epoch> <start offset>` lines (Kafka's LeaderEpochCheckpointFile)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, entries: Iterable[tuple[int, int]], sync: bool = True) -> None:
        entries = list(entries)
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        lines += [f"{epoch} {start_offset}" for epoch, start_offset in entries]
        atomic_write(self.path, "\n".join(lines) + "\n", sync)

    def read(self) -> list[tuple[int, int]]:
        entries = _read_versioned_lines(self.path)
        if entries is None:
            return []
        result = []
        for fields in entries:
            if len(fields) != 2:
                raise CorruptCheckpointError(f"{self.path}: malformed line {' '.join(fields)!r}")
            try:
                result.append((int(fields[0]), int(fields[1])))
            except ValueError as exc:
                raise CorruptCheckpointError(f"{self.path}: malformed line {fields!r}") from exc
        return result


def topic_id_to_str(topic_id: uuid.UUID | bytes | str) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    if isinstance(topic_id, str):
        try:
            parsed = uuid.UUID(topic_id)
        except ValueError:
            parsed = topic_id_from_str(topic_id)  # already Kafka's form
        topic_id = parsed
    raw = topic_id.bytes if isinstance(topic_id, uuid.UUID) else bytes(topic_id)
    if len(raw) != 16:
        raise ValueError(f"a topic id has 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise ValueError(f"invalid topic id {text!r}") from exc
    if len(raw) != 16:
        raise ValueError(f"invalid topic id {text!r}: {len(raw)} bytes")
    return uuid.UUID(bytes=raw)


class PartitionMetadataFile:
    """`version: 0\\ntopic_id: <base64 uuid>` (Kafka's PartitionMetadataFile)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, topic_id: uuid.UUID | bytes | str, sync: bool = True) -> None:
        atomic_write(self.path, f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n", sync)

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> uuid.UUID | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        fields = {key.strip(): value.strip() for key, value in fields.items()}
        if fields.get("version") != "0" or "topic_id" not in fields:
            raise CorruptCheckpointError(f"{self.path}: malformed partition metadata")
        try:
            return topic_id_from_str(fields["topic_id"])
        except ValueError as exc:
            raise CorruptCheckpointError(f"{self.path}: {exc}") from exc


def write_meta_properties(log_dir: str | os.PathLike[str], cluster_id: str, node_id: int,
                          directory_id: uuid.UUID | str | None = None) -> dict[str, str]:
    """Writes KRaft `meta.properties` v1 (cluster.id, node.id, directory.id, version=1)."""
    directory = topic_id_to_str(directory_id if directory_id is not None else uuid.uuid4())
    props = {"cluster.id": cluster_id, "directory.id": directory, "node.id": str(node_id),
             "version": "1"}
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y")
    body = "#\n#" + stamp + "\n" + "".join(f"{key}={value}\n" for key, value in props.items())
    atomic_write(Path(log_dir) / META_PROPERTIES, body)
    return props


def read_meta_properties(log_dir: str | os.PathLike[str]) -> dict[str, str] | None:
    """The parsed meta.properties of a log dir, None when the dir is not formatted."""
    path = Path(log_dir) / META_PROPERTIES
    if not path.exists():
        return None
    props = load_properties(path)
    if props.get("version") not in ("0", "1"):
        raise CorruptCheckpointError(f"{path}: unsupported meta.properties version "
                                     f"{props.get('version')!r}")
    return props
