"""`odradek server-start`: config building and the auto-format decision.

The broker itself is not started here: `run_broker` is replaced by a recorder (or the broker
module name by a fake module), so these tests check the CLI's own logic only.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from odradek.cli import server_start
from odradek.cli.common import ToolError
from odradek.server.config import KafkaConfig, parse_properties

ODRADEK = Path(sys.executable).with_name("odradek")


@pytest.fixture
def started(monkeypatch):
    """Replaces the broker with a recorder of the configs it was started with."""
    configs: list[KafkaConfig] = []

    def fake_run(config: KafkaConfig) -> int:
        configs.append(config)
        return 0

    monkeypatch.setattr(server_start, "run_broker", fake_run)
    return configs


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


def test_embedded_defaults_are_formatted_on_first_start(tmp_path, started, capsys):
    data = tmp_path / "data"
    assert server_start.main(["--override", f"log.dirs={data}"]) == 0
    out = capsys.readouterr().out
    cluster_id = meta(data)["cluster.id"]
    assert f"Formatting {data} with metadata.version 4.0-IV3." in out
    assert f"Formatted new storage with cluster id {cluster_id}" in out
    assert out.index("Formatting") < out.index(cluster_id)
    assert len(started) == 1
    config = started[0]
    assert config.log_dirs == [str(data)]
    assert config.is_combined and config.node_id == 1
    assert [str(e) for e in config.advertised_listeners] == ["PLAINTEXT://localhost:9092"]

    # The second start keeps the storage and its cluster id.
    before = (data / "meta.properties").read_text()
    assert server_start.main(["--override", f"log.dirs={data}"]) == 0
    assert "Formatting" not in capsys.readouterr().out
    assert (data / "meta.properties").read_text() == before
    assert len(started) == 2


def test_embedded_defaults_use_odradek_data_in_the_working_directory(tmp_path, started,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert server_start.main([]) == 0
    assert meta(tmp_path / "odradek-data")["node.id"] == "1"
    assert started[0].log_dirs == ["./odradek-data"]


def test_single_voter_config_file_is_formatted(tmp_path, started, capsys):
    config = write_config(tmp_path / "s.properties", **{"log.dirs": f"{tmp_path}/d"})
    assert server_start.main([str(config), "--override", "num.partitions=3"]) == 0
    assert meta(tmp_path / "d")["version"] == "1"
    assert started[0].get("num.partitions") == 3


def test_multi_voter_node_is_never_formatted(tmp_path, started, capsys):
    data = tmp_path / "d"
    config = write_config(tmp_path / "s.properties", **{
        "controller.quorum.voters": "1@localhost:9093,2@localhost:9095,3@localhost:9097",
        "log.dirs": str(data)})
    assert server_start.main([str(config)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"No `meta.properties` found in {data} (have you run `odradek storage format` to "
        "format the directory?)")
    assert not data.exists()
    assert started == []


def test_broker_only_node_is_never_formatted(tmp_path, started, capsys):
    config = write_config(tmp_path / "s.properties", **{
        "process.roles": "broker", "node.id": "2", "listeners": "PLAINTEXT://:9092",
        "log.dirs": f"{tmp_path}/d"})
    assert server_start.main([str(config)]) == 1
    assert "have you run `odradek storage format`" in capsys.readouterr().err
    assert started == []


def test_may_auto_format():
    def build(**props: str) -> KafkaConfig:
        base = {"process.roles": "broker,controller", "node.id": "1",
                "controller.quorum.voters": "1@localhost:9093",
                "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
                "controller.listener.names": "CONTROLLER"}
        base.update(props)
        return KafkaConfig(base)

    assert server_start.may_auto_format(build())
    assert not server_start.may_auto_format(build(**{
        "controller.quorum.voters": "1@localhost:9093,2@localhost:9094"}))
    assert not server_start.may_auto_format(build(**{
        "controller.quorum.voters": "", "controller.quorum.bootstrap.servers": "localhost:9093"}))
    assert not server_start.may_auto_format(build(**{
        "process.roles": "controller", "listeners": "CONTROLLER://:9093"}))


def test_formatted_node_gets_new_empty_log_dirs_initialized(tmp_path, started, capsys):
    config = write_config(tmp_path / "s.properties", **{"log.dirs": f"{tmp_path}/a"})
    assert server_start.main([str(config)]) == 0
    first = meta(tmp_path / "a")
    assert server_start.main([str(config), "--override",
                              f"log.dirs={tmp_path}/a,{tmp_path}/b"]) == 0
    second = meta(tmp_path / "b")
    assert second["cluster.id"] == first["cluster.id"]
    assert second["node.id"] == "1"
    assert second["directory.id"] != first["directory.id"]


def test_unformatted_metadata_dir_is_an_error(tmp_path, started, capsys):
    config = write_config(tmp_path / "s.properties", **{"log.dirs": f"{tmp_path}/a"})
    assert server_start.main([str(config)]) == 0
    result = server_start.main([str(config), "--override", f"metadata.log.dir={tmp_path}/m"])
    assert result == 1
    assert f"No `meta.properties` found in {tmp_path}/m" in capsys.readouterr().err
    assert len(started) == 1


def test_node_id_mismatch_is_an_error(tmp_path, started, capsys):
    config = write_config(tmp_path / "s.properties", **{"log.dirs": f"{tmp_path}/a"})
    assert server_start.main([str(config)]) == 0
    moved = write_config(tmp_path / "n2.properties", **{
        "node.id": "2", "controller.quorum.voters": "2@localhost:9093",
        "log.dirs": f"{tmp_path}/a"})
    assert server_start.main([str(moved)]) == 1
    assert "Stored node id 1 doesn't match previous node id 2" in capsys.readouterr().err
    assert len(started) == 1


def test_config_errors(tmp_path, started, capsys):
    assert server_start.main(["--override", "node.id=abc"]) == 1
    assert capsys.readouterr().err.strip() == (
        "Invalid value abc for configuration node.id: Not a number of type INT")
    assert server_start.main(["--override", "novalue"]) == 1
    assert "Invalid override 'novalue'" in capsys.readouterr().err
    assert server_start.main([str(tmp_path / "missing.properties")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert server_start.main(["a.properties", "b.properties"]) == 1
    assert started == []


def test_version(capsys, started):
    assert server_start.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "0.1.0"
    assert started == []


def test_run_broker_imports_the_broker_lazily(monkeypatch, tmp_path):
    calls = []
    fake = types.ModuleType("odradek_fake_broker_for_test")
    fake.run = lambda config: calls.append(config) or 3
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setattr(server_start, "BROKER_MODULE", fake.__name__)
    config = server_start.build_config(None, [f"log.dirs={tmp_path}"])
    assert server_start.run_broker(config) == 3  # the broker's exit code is the tool's
    assert calls == [config]


def test_missing_broker_module_is_reported(monkeypatch):
    monkeypatch.setattr(server_start, "BROKER_MODULE", "odradek.server.no_such_broker")
    with pytest.raises(ToolError, match="is not available in this build"):
        server_start.run_broker(server_start.build_config(None, []))


def test_cli_refuses_unformatted_multi_voter_node(tmp_path):
    data = tmp_path / "d"
    config = write_config(tmp_path / "s.properties", **{
        "controller.quorum.voters": "1@localhost:9093,2@localhost:9095,3@localhost:9097",
        "log.dirs": str(data)})
    result = subprocess.run([str(ODRADEK), "server-start", str(config)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert "No `meta.properties` found in" in result.stderr
    assert not data.exists()
