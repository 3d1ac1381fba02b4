"""`odradek storage format` for dynamic controller quorums (KIP-853, Kafka 4.0's flags
`--standalone`, `--initial-controllers`, `--no-initial-controllers`): the real console script
in a tmp dir, the bootstrap checkpoint read back with `read_snapshot`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from odradek.cli import storage as storage_tool
from odradek.config import parse_properties
from odradek.protocol.ids import kafka_str_to_uuid, uuid_to_kafka_str
from odradek.raft.snapshot import SnapshotContent, read_snapshot
from odradek.raft.voters import KRAFT_VERSION_DYNAMIC, Voter, VoterSet

ODRADEK = Path(sys.executable).with_name("odradek")
CHECKPOINT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"
DIR_IDS = ["JEXY6aqzQY-32P5TStzaFg", "MvDxzVmcRsaTz33bUuRU6A", "07R5amHmR32VDA6jHkGbTA"]
INITIAL = ",".join(f"{i + 1}@localhost:{9093 + i}:{d}" for i, d in enumerate(DIR_IDS))


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ODRADEK), *args], capture_output=True, text=True, timeout=60)


def write_config(path: Path, **props: str) -> Path:
    """A dynamic-quorum combined node: no controller.quorum.voters, bootstrap servers instead."""
    base = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": "localhost:9093",
        "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(path.parent / "data"),
    }
    base.update(props)
    path.write_text("".join(f"{key}={value}\n" for key, value in base.items()))
    return path


def controller_config(tmp_path: Path, node_id: int) -> Path:
    return write_config(tmp_path / f"c{node_id}.properties", **{
        "process.roles": "controller", "node.id": str(node_id),
        "listeners": f"CONTROLLER://localhost:{9092 + node_id}",
        "log.dirs": str(tmp_path / f"c{node_id}")})


def fmt(config: Path, *flags: str, cluster_id: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return odradek("storage", "format", "-t", cluster_id or storage_tool.random_uuid(),
                   "-c", str(config), *flags)


def directory_id(directory: Path) -> str:
    return parse_properties((directory / "meta.properties").read_text())["directory.id"]


def checkpoint(directory: Path) -> SnapshotContent:
    return read_snapshot((directory / CHECKPOINT).read_bytes())


class TestStandalone:
    def test_controller_is_the_only_voter(self, tmp_path):
        config = controller_config(tmp_path, 1)
        result = fmt(config, "--standalone")
        assert result.returncode == 0, result.stderr
        assert result.stdout == (f"Formatting dynamic metadata voter directory {tmp_path}/c1 "
                                 f"with metadata.version {storage_tool.LATEST_METADATA_VERSION}."
                                 "\n")
        snapshot = checkpoint(tmp_path / "c1")
        dir_id = kafka_str_to_uuid(directory_id(tmp_path / "c1"))
        assert snapshot.kraft_version == KRAFT_VERSION_DYNAMIC
        assert snapshot.voters == VoterSet([Voter(1, dir_id, {"CONTROLLER": ("localhost", 9093)})])
        assert snapshot.voters.voter(1).kraft_versions == (0, 1)
        assert snapshot.values == []  # control records only

    @pytest.mark.parametrize(("listeners", "expected_host"), [
        ("PLAINTEXT://:9092,CONTROLLER://:9093", "localhost"),  # no host: Kafka's localhost
        ("PLAINTEXT://:9092,CONTROLLER://0.0.0.0:9093", "localhost"),
        ("PLAINTEXT://:9092,CONTROLLER://10.1.2.3:9093", "10.1.2.3"),
        ("PLAINTEXT://:9092,CONTROLLER://[::1]:9093", "::1"),
    ])
    def test_endpoint_host(self, tmp_path, listeners, expected_host):
        config = write_config(tmp_path / "s.properties", listeners=listeners)
        assert fmt(config, "-s").returncode == 0
        assert checkpoint(tmp_path / "data").voters.voter(1).endpoints == {
            "CONTROLLER": (expected_host, 9093)}

    def test_first_controller_listener_only(self, tmp_path):
        config = write_config(tmp_path / "s.properties", **{
            "listeners": "PLAINTEXT://:9092,C1://h1:9093,C2://h2:9094",
            "controller.listener.names": "C1,C2",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,C1:PLAINTEXT,C2:PLAINTEXT"})
        assert fmt(config, "-s").returncode == 0
        assert checkpoint(tmp_path / "data").voters.voter(1).endpoints == {"C1": ("h1", 9093)}

    def test_on_a_broker(self, tmp_path):
        config = write_config(tmp_path / "b.properties", **{
            "process.roles": "broker", "listeners": "PLAINTEXT://:9092"})
        result = fmt(config, "--standalone")
        assert (result.returncode, result.stderr) == (
            1, "You can only use --standalone on a controller.\n")
        assert not (tmp_path / "data").exists()

    def test_ignore_formatted_keeps_the_checkpoint(self, tmp_path):
        config = write_config(tmp_path / "s.properties")
        cluster_id = storage_tool.random_uuid()
        assert fmt(config, "-s", cluster_id=cluster_id).returncode == 0
        before = (tmp_path / "data" / CHECKPOINT).read_bytes()
        dir_id = directory_id(tmp_path / "data")
        result = fmt(config, "-s", cluster_id=cluster_id)
        assert result.returncode == 1 and "is already formatted" in result.stderr
        result = fmt(config, "-s", "--ignore-formatted", cluster_id=cluster_id)
        assert (result.returncode, result.stdout) == (
            0, "All of the log directories are already formatted.\n")
        assert (tmp_path / "data" / CHECKPOINT).read_bytes() == before
        assert directory_id(tmp_path / "data") == dir_id


class TestInitialControllers:
    def test_three_controllers_share_the_voter_set(self, tmp_path):
        cluster_id = storage_tool.random_uuid()
        expected = VoterSet([
            Voter(i + 1, kafka_str_to_uuid(d), {"CONTROLLER": ("localhost", 9093 + i)})
            for i, d in enumerate(DIR_IDS)])
        for node_id in (1, 2, 3):
            result = fmt(controller_config(tmp_path, node_id), "--initial-controllers", INITIAL,
                         cluster_id=cluster_id)
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith("Formatting dynamic metadata voter directory ")
            # The node's metadata directory takes the directory id its voter entry names.
            assert directory_id(tmp_path / f"c{node_id}") == DIR_IDS[node_id - 1]
            snapshot = checkpoint(tmp_path / f"c{node_id}")
            assert (snapshot.kraft_version, snapshot.voters) == (KRAFT_VERSION_DYNAMIC, expected)

    def test_data_and_metadata_directories(self, tmp_path):
        config = write_config(tmp_path / "s.properties", **{
            "log.dirs": f"{tmp_path}/d1,{tmp_path}/d2", "metadata.log.dir": f"{tmp_path}/meta"})
        result = fmt(config, "-I", INITIAL)
        assert result.returncode == 0, result.stderr
        version = storage_tool.LATEST_METADATA_VERSION
        assert result.stdout.splitlines() == [
            f"Formatting data directory {tmp_path}/d1 with metadata.version {version}.",
            f"Formatting data directory {tmp_path}/d2 with metadata.version {version}.",
            (f"Formatting dynamic metadata voter directory {tmp_path}/meta with metadata.version "
             f"{version}.")]
        assert directory_id(tmp_path / "meta") == DIR_IDS[0]
        assert not (tmp_path / "d1" / "__cluster_metadata-0").exists()
        ids = {directory_id(tmp_path / d) for d in ("d1", "d2", "meta")}
        assert len(ids) == 3 and checkpoint(tmp_path / "meta").voters.ids == [1, 2, 3]

    def test_a_node_outside_the_initial_set(self, tmp_path):
        # A controller to be added later, or a broker: Kafka's "dynamic metadata directory",
        # the initial voters' snapshot with a fresh directory id of its own.
        config = controller_config(tmp_path, 4)
        result = fmt(config, "-I", INITIAL)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Formatting dynamic metadata directory {tmp_path}/c4 ")
        assert directory_id(tmp_path / "c4") not in DIR_IDS
        assert checkpoint(tmp_path / "c4").voters.ids == [1, 2, 3]

    def test_ipv6_host(self, tmp_path):
        config = write_config(tmp_path / "s.properties")
        assert fmt(config, "-I", f"1@[::1]:9093:{DIR_IDS[0]}").returncode == 0
        assert checkpoint(tmp_path / "data").voters.voter(1).endpoints == {
            "CONTROLLER": ("::1", 9093)}

    def test_unparseable(self, tmp_path):
        config = write_config(tmp_path / "s.properties")
        result = fmt(config, "-I", "1@localhost:9093")
        assert (result.returncode, result.stderr) == (
            1, ('Exception in thread "main" java.lang.IllegalArgumentException: No colon '
                "following port could be found.\n"))
        assert not (tmp_path / "data").exists()


class TestNoInitialControllers:
    def test_no_snapshot(self, tmp_path):
        config = controller_config(tmp_path, 4)
        result = fmt(config, "--no-initial-controllers")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Formatting metadata directory {tmp_path}/c4 ")
        assert not (tmp_path / "c4" / "__cluster_metadata-0").exists()
        kafka_str_to_uuid(directory_id(tmp_path / "c4"))  # a random, valid directory id

    def test_broker_without_a_flag(self, tmp_path):
        # Only a controller must choose; a broker just follows the bootstrap servers.
        config = write_config(tmp_path / "b.properties", **{
            "process.roles": "broker", "listeners": "PLAINTEXT://:9092"})
        result = fmt(config)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Formatting {tmp_path}/data with metadata.version")


class TestRefusals:
    def test_dynamic_controller_must_choose(self, tmp_path):
        result = fmt(controller_config(tmp_path, 1))
        assert (result.returncode, result.stderr) == (
            1, ("Because controller.quorum.voters is not set on this controller, you must "
                "specify one of the following: --standalone, --initial-controllers, or "
                "--no-initial-controllers.\n"))

    def test_static_voters_with_initial_controllers(self, tmp_path):
        config = write_config(tmp_path / "s.properties", **{
            "controller.quorum.voters": "1@localhost:9093"})
        result = fmt(config, "-I", INITIAL)
        assert result.returncode == 1
        assert result.stderr.startswith("You cannot specify controller.quorum.voters and format "
                                        "the node with --initial-controllers or --standalone.")
        # --no-initial-controllers is harmless there (Kafka accepts it): a static format.
        result = fmt(config, "-N")
        assert result.returncode == 0, result.stderr
        assert not (tmp_path / "data" / "__cluster_metadata-0").exists()

    @pytest.mark.parametrize("flags", [("-s", "-N"), ("-s", "-I", INITIAL),
                                       ("-N", "--initial-controllers", INITIAL)])
    def test_mutually_exclusive(self, tmp_path, flags):
        result = fmt(write_config(tmp_path / "s.properties"), *flags)
        assert result.returncode == 1 and "not allowed with argument" in result.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("localhost:8020:K90IZ-0DRNazJ49kCZ1EMQ", "No @ found in dynamic voter string."),
    ("@localhost:8020:K90IZ-0DRNazJ49kCZ1EMQ", "Invalid @ at beginning of dynamic voter string."),
    ("-1@localhost:8020:K90IZ-0DRNazJ49kCZ1EMQ",
     "Invalid negative node id -1 in dynamic voter string."),
    ("x@localhost:8020:K90IZ-0DRNazJ49kCZ1EMQ", "Failed to parse node id in dynamic voter string."),
    ("1@", "No hostname found after node id."),
    ("1@[::1:8020:K90IZ-0DRNazJ49kCZ1EMQ",
     "Hostname began with left bracket, but no right bracket was found."),
    ("1@localhost", "No colon following hostname could be found."),
    ("1@[::1]8020:K90IZ-0DRNazJ49kCZ1EMQ", "Port section must start with a colon."),
    ("1@localhost:8020", "No colon following port could be found."),
    ("1@localhost:x:K90IZ-0DRNazJ49kCZ1EMQ", "Failed to parse port in dynamic voter string."),
    ("1@localhost:65536:K90IZ-0DRNazJ49kCZ1EMQ", "Invalid port 65536 in dynamic voter string."),
    ("1@localhost:8020:nope", "Failed to parse directory ID in dynamic voter string."),
    (" , ", "No voters given."),
    ("1@a:1:K90IZ-0DRNazJ49kCZ1EMQ,1@b:2:__0IZ-0DRNazJ49kCZ1EMQ",
     "Node id 1 was specified more than once."),
])
def test_parse_errors_are_kafkas(text, message):
    with pytest.raises(ValueError) as caught:
        storage_tool.parse_dynamic_voters(text)
    assert str(caught.value) == message


def test_parse_dynamic_voters():
    voters = storage_tool.parse_dynamic_voters(
        " 5@[2001:4860:4860::8888]:8020:__0IZ-0DRNazJ49kCZ1EMQ,,2@localhost:8020:"
        "K90IZ-0DRNazJ49kCZ1EMQ ")
    assert list(voters) == [2, 5]
    assert voters[5] == storage_tool.DynamicVoter(
        5, "2001:4860:4860::8888", 8020, kafka_str_to_uuid("__0IZ-0DRNazJ49kCZ1EMQ"))
    assert uuid_to_kafka_str(voters[2].directory_id) == "K90IZ-0DRNazJ49kCZ1EMQ"
