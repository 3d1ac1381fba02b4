"""`odradek storage` end to end through the installed console script, in a tmp dir."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from odradek.cli import storage as storage_tool
from odradek.cli.common import ToolError
from odradek.config import parse_properties

ODRADEK = Path(sys.executable).with_name("odradek")
UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")


def odradek(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ODRADEK), *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def write_config(path: Path, **props: str) -> Path:
    base = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@localhost:9093",
        "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "controller.listener.names": "CONTROLLER",
    }
    base.update(props)
    path.write_text("".join(f"{key}={value}\n" for key, value in base.items()))
    return path


def meta(directory: Path) -> dict[str, str]:
    return parse_properties((directory / "meta.properties").read_text())


def decode_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


class TestRandomUuid:
    def test_cli_prints_one_kafka_uuid(self):
        result = odradek("storage", "random-uuid")
        assert result.returncode == 0
        text = result.stdout.strip()
        assert UUID_TEXT.fullmatch(text)
        assert decode_uuid(text).version == 4

    def test_kafka_rules(self):
        ids = {storage_tool.random_uuid() for _ in range(2000)}
        assert len(ids) == 2000
        for text in ids:
            assert UUID_TEXT.fullmatch(text) and not text.startswith("-")
            value = decode_uuid(text)
            assert value.version == 4 and value.int > 1  # never ZERO or ONE (reserved)

    def test_directory_ids_avoid_reserved_dash_and_taken(self):
        taken = {storage_tool.random_directory_id(set()) for _ in range(200)}
        fresh = storage_tool.random_directory_id(taken)
        assert fresh not in taken and not fresh.startswith("-")
        assert int.from_bytes(base64.urlsafe_b64decode(fresh + "=="), "big") >= 100


class TestUsage:
    def test_no_arguments(self):
        result = odradek("storage")
        assert result.returncode == 1
        assert "random-uuid" in result.stderr and "format" in result.stderr

    def test_format_requires_cluster_id_and_config(self, tmp_path):
        result = odradek("storage", "format", "-c", str(write_config(tmp_path / "s.properties")))
        assert result.returncode == 1
        assert "--cluster-id/-t" in result.stderr
        result = odradek("storage", "info")
        assert result.returncode == 1
        assert "--config/-c" in result.stderr


class TestFormat:
    def test_format_writes_meta_properties_everywhere(self, tmp_path):
        config = write_config(tmp_path / "s.properties",
                              **{"log.dirs": f"{tmp_path}/d2,{tmp_path}/d1",
                                 "metadata.log.dir": f"{tmp_path}/meta"})
        cluster_id = odradek("storage", "random-uuid").stdout.strip()
        result = odradek("storage", "format", "-t", cluster_id, "-c", str(config))
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            f"Formatting {tmp_path}/d1 with metadata.version 4.0-IV3.",
            f"Formatting {tmp_path}/d2 with metadata.version 4.0-IV3.",
            f"Formatting {tmp_path}/meta with metadata.version 4.0-IV3.",
        ]
        directory_ids = set()
        for name in ("d1", "d2", "meta"):
            props = meta(tmp_path / name)
            assert {key: props[key] for key in ("version", "cluster.id", "node.id")} == {
                "version": "1", "cluster.id": cluster_id, "node.id": "1"}
            assert UUID_TEXT.fullmatch(props["directory.id"])
            directory_ids.add(props["directory.id"])
            text = (tmp_path / name / "meta.properties").read_text()
            assert text.startswith("#\n#")  # Java Properties.store header: comment, then date
        assert len(directory_ids) == 3

    def test_format_twice_and_ignore_formatted(self, tmp_path):
        data = tmp_path / "data"
        config = write_config(tmp_path / "s.properties", **{"log.dirs": str(data)})
        cluster_id = storage_tool.random_uuid()
        assert odradek("storage", "format", "-t", cluster_id, "-c", str(config)).returncode == 0
        before = (data / "meta.properties").read_text()

        again = odradek("storage", "format", "-t", cluster_id, "-c", str(config))
        assert again.returncode == 1
        assert again.stderr.strip() == (
            f"Log directory {data} is already formatted. Use --ignore-formatted to ignore this "
            "directory and format the others.")

        ignored = odradek("storage", "format", "-t", cluster_id, "-c", str(config),
                          "--ignore-formatted")
        assert ignored.returncode == 0
        assert ignored.stdout.strip() == "All of the log directories are already formatted."
        assert (data / "meta.properties").read_text() == before

    def test_ignore_formatted_formats_only_new_directories(self, tmp_path):
        config = write_config(tmp_path / "s.properties", **{"log.dirs": f"{tmp_path}/a"})
        cluster_id = storage_tool.random_uuid()
        assert odradek("storage", "format", "-t", cluster_id, "-c", str(config)).returncode == 0
        first = meta(tmp_path / "a")
        write_config(config, **{"log.dirs": f"{tmp_path}/a,{tmp_path}/b"})
        result = odradek("storage", "format", "-t", cluster_id, "-c", str(config), "-g")
        assert result.returncode == 0
        assert result.stdout.strip() == f"Formatting {tmp_path}/b with metadata.version 4.0-IV3."
        assert meta(tmp_path / "a") == first
        assert meta(tmp_path / "b")["cluster.id"] == cluster_id
        assert meta(tmp_path / "b")["directory.id"] != first["directory.id"]

    def test_other_cluster_id_is_refused(self, tmp_path):
        data = tmp_path / "data"
        config = write_config(tmp_path / "s.properties", **{"log.dirs": str(data)})
        first, second = storage_tool.random_uuid(), storage_tool.random_uuid()
        assert odradek("storage", "format", "-t", first, "-c", str(config)).returncode == 0
        result = odradek("storage", "format", "-t", second, "-c", str(config), "-g")
        assert result.returncode == 1
        assert result.stderr.strip() == (f"Invalid cluster.id in: {data}/meta.properties. "
                                         f"Expected {second}, but read {first}")

    def test_invalid_cluster_id(self, tmp_path):
        config = write_config(tmp_path / "s.properties", **{"log.dirs": f"{tmp_path}/d"})
        result = odradek("storage", "format", "-t", "not-a-uuid", "-c", str(config))
        assert result.returncode == 1
        assert "Cluster ID string not-a-uuid does not appear to be a valid UUID" in result.stderr
        assert not (tmp_path / "d").exists()

    def test_release_version(self, tmp_path):
        config = write_config(tmp_path / "s.properties", **{"log.dirs": f"{tmp_path}/d"})
        result = odradek("storage", "format", "-t", storage_tool.random_uuid(), "-c",
                         str(config), "--release-version", "3.7")
        assert result.returncode == 0
        assert result.stdout.strip() == f"Formatting {tmp_path}/d with metadata.version 3.7-IV4."
        result = odradek("storage", "format", "-t", storage_tool.random_uuid(), "-c",
                         str(config), "-r", "2.8")
        assert result.returncode == 1
        assert "Must specify a valid KRaft metadata.version of at least 3.0-IV0." in result.stderr

    def test_parse_release_version(self):
        assert storage_tool.parse_release_version("3.8") == "3.8-IV0"
        assert storage_tool.parse_release_version("3.8.0") == "3.8-IV0"
        assert storage_tool.parse_release_version("3.5-IV1") == "3.5-IV1"
        assert storage_tool.parse_release_version("3.0") == "3.0-IV1"
        assert storage_tool.metadata_version_level("3.8-IV0") == 20
        for bad in ("3.0-IV0", "2.8", "0.10.2"):
            with pytest.raises(ToolError, match="at least 3.0-IV0"):
                storage_tool.parse_release_version(bad)
        with pytest.raises(ToolError, match="Version 9.9 is not a valid version"):
            storage_tool.parse_release_version("9.9")

    def test_standalone_refused_with_static_voters(self, tmp_path):
        # Kafka 4.0: --standalone is for dynamic quorums only (more in
        # test_cli_storage_dynamic_quorum.py); both roles get the same refusal.
        controller = write_config(tmp_path / "c.properties", **{"log.dirs": f"{tmp_path}/c"})
        broker = write_config(tmp_path / "b.properties", **{
            "process.roles": "broker", "node.id": "2", "listeners": "PLAINTEXT://:9092",
            "log.dirs": f"{tmp_path}/b"})
        for config in (controller, broker):
            result = odradek("storage", "format", "-t", storage_tool.random_uuid(), "-c",
                             str(config), "--standalone")
            assert result.returncode == 1
            assert result.stderr.strip() == (
                "You cannot specify controller.quorum.voters and format the node with "
                "--initial-controllers or --standalone. If you want to use dynamic quorum, "
                "please remove controller.quorum.voters and specify "
                "controller.quorum.bootstrap.servers instead.")
        assert not (tmp_path / "c").exists() and not (tmp_path / "b").exists()

    def test_bad_config_is_reported(self, tmp_path):
        config = write_config(tmp_path / "s.properties", **{"node.id": "abc"})
        result = odradek("storage", "format", "-t", storage_tool.random_uuid(), "-c", str(config))
        assert result.returncode == 1
        assert result.stderr.strip().endswith(
            "Invalid value abc for configuration node.id: Not a number of type INT")
        missing = odradek("storage", "info", "-c", str(tmp_path / "none.properties"))
        assert missing.returncode == 1
        assert "does not exist" in missing.stderr


class TestInfo:
    def test_formatted(self, tmp_path):
        data = tmp_path / "data"
        config = write_config(tmp_path / "s.properties", **{"log.dirs": str(data)})
        cluster_id = storage_tool.random_uuid()
        assert odradek("storage", "format", "-t", cluster_id, "-c", str(config)).returncode == 0
        directory_id = meta(data)["directory.id"]
        result = odradek("storage", "info", "-c", str(config))
        assert result.returncode == 0
        assert result.stdout == (
            f"Found log directory:\n  {data}\n\n"
            f"Found metadata: {{cluster.id={cluster_id}, directory.id={directory_id}, "
            f"node.id=1, version=1}}\n\n")

    def test_problems(self, tmp_path):
        config = write_config(tmp_path / "s.properties",
                              **{"log.dirs": f"{tmp_path}/missing,{tmp_path}/empty"})
        (tmp_path / "empty").mkdir()
        result = odradek("storage", "info", "-c", str(config))
        assert result.returncode == 1
        assert result.stdout == (
            f"Found log directory:\n  {tmp_path}/empty\n\n"
            f"Found problems:\n  {tmp_path}/empty is not formatted.\n"
            f"  {tmp_path}/missing does not exist\n\n")

    def test_mismatched_cluster_ids(self, tmp_path):
        config = write_config(tmp_path / "s.properties",
                              **{"log.dirs": f"{tmp_path}/a,{tmp_path}/b"})
        for name in ("a", "b"):
            single = write_config(tmp_path / f"{name}.properties",
                                  **{"log.dirs": f"{tmp_path}/{name}"})
            assert odradek("storage", "format", "-t", storage_tool.random_uuid(), "-c",
                           str(single)).returncode == 0
        result = odradek("storage", "info", "-c", str(config))
        assert result.returncode == 1
        assert "Found problem:\n  Mismatched cluster IDs between storage directories.\n" in \
            result.stdout
