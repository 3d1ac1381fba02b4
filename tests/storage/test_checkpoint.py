from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.storage.checkpoint import (
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    read_meta_properties,
    topic_id_from_str,
    topic_id_to_str,
    write_meta_properties,
)


def test_offset_checkpoint_format_is_kafkas(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("orders", 1): 42, ("my-topic", 0): 7})
    assert path.read_text() == "0\n2\nmy-topic 0 7\norders 1 42\n"
    assert OffsetCheckpointFile(path).read() == {("orders", 1): 42, ("my-topic", 0): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_offset_checkpoint_missing_is_empty_and_corrupt_raises(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert OffsetCheckpointFile(path).read() == {}
    for text in ["0\n2\na 0 1\n", "1\n0\n", "0\n1\na b c\n", "garbage", "0\n1\na 1\n"]:
        path.write_text(text)
        with pytest.raises(CorruptCheckpointError):
            OffsetCheckpointFile(path).read()


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([(0, 0), (3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (3, 120)]


def test_partition_metadata_uses_kafkas_base64_topic_id(tmp_path: Path) -> None:
    topic_id = uuid.UUID("8f4e1b6c-2a3d-4e5f-9a0b-1c2d3e4f5a6b")
    path = tmp_path / "partition.metadata"
    PartitionMetadataFile(path).write(topic_id)
    encoded = topic_id_to_str(topic_id)
    assert path.read_text() == f"version: 0\ntopic_id: {encoded}\n"
    assert len(encoded) == 22 and "=" not in encoded
    assert PartitionMetadataFile(path).read() == topic_id
    assert topic_id_from_str(encoded) == topic_id
    assert topic_id_to_str(encoded) == encoded


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None
    written = write_meta_properties(tmp_path, "MkU3OEVBNTcwNTJENDM2Qg", 3)
    text = (tmp_path / "meta.properties").read_text()
    assert "cluster.id=MkU3OEVBNTcwNTJENDM2Qg\n" in text
    assert "node.id=3\n" in text and "version=1\n" in text and "directory.id=" in text
    assert text.startswith("#")
    props = read_meta_properties(tmp_path)
    assert props == written
