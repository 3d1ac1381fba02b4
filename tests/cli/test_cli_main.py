"""`odradek` dispatcher: usage, version, tool registry, lazy dispatch."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from odradek import __version__
from odradek.cli import main as cli_main

ODRADEK = Path(sys.executable).with_name("odradek")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ODRADEK), *args], capture_output=True, text=True, timeout=60)


def test_console_script_is_installed():
    assert ODRADEK.exists(), "the package must be installed (pip install -e .)"


def test_no_arguments_prints_usage_and_fails():
    result = run()
    assert result.returncode == 1
    assert result.stdout == ""
    assert "usage: odradek <tool>" in result.stderr
    assert "server-start" in result.stderr and "storage" in result.stderr


def test_help_and_version():
    result = run("--help")
    assert result.returncode == 0
    assert "server-start" in result.stdout and "kafka-storage.sh" in result.stdout
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"odradek {__version__} (Kafka 3.8 protocol)"


def test_unknown_tool():
    result = run("no-such-tool")
    assert result.returncode == 1
    assert "unknown tool 'no-such-tool'" in result.stderr


def test_registry_names_every_planned_tool():
    expected = {"server-start", "storage", "topics", "console-producer", "console-consumer",
                "consumer-groups", "configs", "get-offsets", "delete-records", "dump-log",
                "producer-perf-test", "consumer-perf-test", "connect-standalone"}
    assert expected <= set(cli_main.TOOLS)
    modules = [tool.module for tool in cli_main.TOOLS.values()]
    assert len(set(modules)) == len(modules)
    assert all(module.startswith("odradek.cli.") for module in modules)
    assert {"server-start", "storage"} <= set(cli_main.available_tools())


def test_registered_tool_without_module(monkeypatch, capsys):
    monkeypatch.setitem(cli_main.TOOLS, "future-tool",
                        cli_main.Tool("odradek.cli.no_such_module_yet", "Not written yet."))
    assert "future-tool" not in cli_main.available_tools()
    assert cli_main.main(["future-tool", "--x"]) == 1
    assert "the 'future-tool' tool is not available in this build yet." in capsys.readouterr().err


def test_dispatch_imports_lazily_and_passes_arguments(monkeypatch):
    calls = []
    fake = types.ModuleType("odradek.cli.fake_tool_for_test")
    fake.main = lambda argv: calls.append(argv) or 7
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setitem(cli_main.TOOLS, "fake-tool", cli_main.Tool(fake.__name__, "Fake."))
    assert cli_main.main(["fake-tool", "--a", "b"]) == 7
    assert calls == [["--a", "b"]]


def test_missing_dependency_of_a_tool_is_not_reported_as_a_missing_tool(tmp_path, monkeypatch):
    (tmp_path / "tool_with_missing_dependency.py").write_text(
        "import odradek_no_such_dependency\n\ndef main(argv):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli_main.TOOLS, "broken",
                        cli_main.Tool("tool_with_missing_dependency", "Broken."))
    with pytest.raises(ModuleNotFoundError) as info:
        cli_main.main(["broken"])
    assert info.value.name == "odradek_no_such_dependency"
