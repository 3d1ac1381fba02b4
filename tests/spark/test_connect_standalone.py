"""Kafka's quickstart step 6 with `odradek connect-standalone` (a real process running Spark
queries, a real broker): test.txt -> connect-test -> test.sink.txt, with the shipped configs."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from broker_process import ODRADEK, wait_until
from spark_helpers import consume_all

CONFIG = Path(__file__).resolve().parents[2] / "config"
START_TIMEOUT_S = 180  # a SparkSession and two streaming queries on a shared 2-core machine
LINE_TIMEOUT_S = 60
STOP_TIMEOUT_S = 60


def envelope(line: str) -> str:
    return json.dumps({"schema": {"type": "string", "optional": False}, "payload": line},
                      separators=(",", ":"), ensure_ascii=False)


def worker_properties(work: Path, bootstrap: str) -> Path:
    """The shipped connect-standalone.properties, pointed at the test broker and directory."""
    lines = []
    for line in (CONFIG / "connect-standalone.properties").read_text().splitlines():
        if line.startswith("bootstrap.servers="):
            line = f"bootstrap.servers={bootstrap}"
        elif line.startswith("offset.storage.file.filename="):
            line = f"offset.storage.file.filename={work / 'connect.offsets'}"
        lines.append(line)
    lines.append("plugin.path=/usr/local/share/kafka/plugins")  # ignored, with a note
    path = work / "worker.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


class ConnectProcess:
    def __init__(self, work: Path, worker: Path) -> None:
        self.work = work
        self.log = work / "connect.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*ODRADEK, "connect-standalone", str(worker),
                 str(CONFIG / "connect-file-source.properties"),
                 str(CONFIG / "connect-file-sink.properties")],
                cwd=work, stdout=log, stderr=subprocess.STDOUT)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def running(self) -> bool:
        assert self.proc.poll() is None, f"connect-standalone exited:\n{self.tail()}"
        return True

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"no clean stop within {STOP_TIMEOUT_S}s:\n{self.tail()}")


def sink_lines(work: Path) -> list[str] | None:
    """test.sink.txt's lines once it ends with a whole line."""
    try:
        text = (work / "test.sink.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return text.splitlines() if text.endswith("\n") or not text else None


def append(work: Path, *lines: str, newline: str = "\n") -> None:
    with open(work / "test.txt", "a", encoding="utf-8", newline="") as file:
        file.write("".join(line + newline for line in lines))


def wait_for_sink(connect: ConnectProcess, expected: list[str], timeout: float) -> None:
    def arrived():
        connect.running()
        return sink_lines(connect.work) == expected

    try:
        wait_until(arrived, timeout, interval=0.2, message=f"test.sink.txt == {expected}")
    except TimeoutError:
        raise AssertionError(f"test.sink.txt is {sink_lines(connect.work)}, expected "
                             f"{expected}\n{connect.tail()}") from None


def console_consumer(bootstrap: str, count: int) -> list[str]:
    """The first `count` records as the console consumer prints them: it exits once it has
    them rather than after 5 s of nothing more (the topic's whole content is checked at the
    end of the test)."""
    result = subprocess.run(
        [*ODRADEK, "console-consumer", "--bootstrap-server", bootstrap, "--topic",
         "connect-test", "--from-beginning", "--max-messages", str(count), "--timeout-ms",
         "5000"], check=False, capture_output=True, text=True, timeout=60)
    return result.stdout.splitlines()


def test_quickstart_step6_connect_standalone(odradek_broker, tmp_path):
    bootstrap = odradek_broker.bootstrap
    worker = worker_properties(tmp_path, bootstrap)
    append(tmp_path, "foo", "bar")

    connect = ConnectProcess(tmp_path, worker)
    try:
        wait_for_sink(connect, ["foo", "bar"], START_TIMEOUT_S)
        # lines appended later are picked up (CRLF endings too, a partial line waits)
        append(tmp_path, "hello world", 'a "quoted" line', newline="\r\n")
        append(tmp_path, "partial", newline="")
        wait_for_sink(connect, ["foo", "bar", "hello world", 'a "quoted" line'], LINE_TIMEOUT_S)
        assert console_consumer(bootstrap, 4) == [
            envelope(line) for line in ["foo", "bar", "hello world", 'a "quoted" line']]
    finally:
        code = connect.terminate()
    assert code == 0, connect.tail()
    log = connect.log.read_text(errors="replace")
    assert "plugin.path is ignored" in log

    # appended while stopped: read on restart, once; nothing already written comes again
    append(tmp_path, " line\nafter stop", newline="\n")
    connect = ConnectProcess(tmp_path, worker)
    try:
        expected = ["foo", "bar", "hello world", 'a "quoted" line', "partial line",
                    "after stop"]
        wait_for_sink(connect, expected, START_TIMEOUT_S)
    finally:
        code = connect.terminate()
    assert code == 0, connect.tail()
    assert sink_lines(tmp_path) == expected
    records = consume_all(bootstrap, "connect-test", 1)
    assert [r.value().decode() for r in records] == [envelope(line) for line in expected]
    assert all(r.key() is None for r in records)
