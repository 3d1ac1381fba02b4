"""Starting and stopping a node as operators do: `odradek server-start` without a config file
(what `make run` runs: storage formatted on the first start, the cluster id printed), and SIGTERM
(in-flight requests finished or cut after a grace period, logs flushed, checkpoints and
clean-shutdown markers written)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from broker_process import api_versions_ok, free_port, wait_until
from raw_client import FETCH_VERSION, RawClient, batch_offsets, fetch_request, fetched

from odradek.config import parse_properties
from odradek.protocol.errors import ErrorCode

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
ODRADEK = [sys.executable, "-m", "odradek.cli.main"]


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines[2:])}


def test_sigterm_flushes_and_marks_a_clean_shutdown(fresh_broker):
    broker = fresh_broker.start()
    with RawClient(broker.host, broker.port) as client:
        client.create_topic("flushed")
        for i in range(10):
            client.produce("flushed", 0, [f"{i}-{j}".encode() for j in range(100)])
    poller = RawClient(broker.host, broker.port)
    poller.send(1, FETCH_VERSION, fetch_request({("flushed", 0): 1000}, max_wait_ms=60000))
    time.sleep(0.2)  # the long poll is waiting in the broker

    started = time.monotonic()
    assert broker.stop(timeout=30) == 0
    assert time.monotonic() - started < 3  # the long poll does not hold the shutdown up...
    _corr, response = poller.receive(1, FETCH_VERSION)  # ...it is answered, then closed
    # The controlled shutdown took the partition's leadership away first (a lone replica
    # leaves it leaderless, as Kafka's controller does). A consumer's fetch (v11+: any replica
    # may serve it, KIP-392) is answered with nothing new.
    [partition] = response.responses[0].partitions
    assert partition.error_code == ErrorCode.NONE
    assert bytes(partition.records or b"") == b"" and partition.high_watermark == 1000
    assert poller.closed_by_peer(timeout=5)
    poller.close()
    assert "Odradek broker 1 shut down" in broker.log_tail()
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    # Everything appended is flushed: the recovery point is the log end.
    assert _read_checkpoint(broker.data_dir / "recovery-point-offset-checkpoint")[
        ("flushed", 0)] == 1000
    assert _read_checkpoint(broker.data_dir / "replication-offset-checkpoint")[
        ("flushed", 0)] == 1000

    broker.start()
    assert not (broker.data_dir / ".kafka_cleanshutdown").exists()  # consumed at start
    with RawClient(broker.host, broker.port) as client:
        records = fetched(client.call(1, FETCH_VERSION, fetch_request({("flushed", 0): 0})))
        assert batch_offsets(records[("flushed", 0)]) == [
            (i * 100, i * 100 + 99) for i in range(10)]


def test_server_start_without_a_config_formats_once_and_serves(tmp_path):
    """`make run` is `odradek server-start` with no config: the embedded single node, data in
    ./odradek-data, formatted on the first start with the cluster id printed. Only the ports are
    overridden here (tests use free ports; the defaults are 9092 and 9093)."""
    port, controller_port = free_port(), free_port()
    command = [*ODRADEK, "server-start",
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{port},"
                             f"CONTROLLER://127.0.0.1:{controller_port}",
               "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
               "--override", f"controller.quorum.voters=1@127.0.0.1:{controller_port}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    def run_once(log_name: str) -> str:
        log_path = tmp_path / log_name
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(command, cwd=tmp_path, stdout=log_file,
                                    stderr=subprocess.STDOUT, env=env)
        try:
            def ready() -> bool:
                assert proc.poll() is None, log_path.read_text()
                return api_versions_ok("127.0.0.1", port)

            wait_until(ready, 60, interval=0.05, message="server-start to answer")
            listing = subprocess.run([KCAT, "-L", "-b", f"127.0.0.1:{port}"],
                                     capture_output=True, text=True, timeout=30)
            assert listing.returncode == 0, listing.stderr
            assert f"broker 1 at 127.0.0.1:{port} (controller)" in listing.stdout
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        return log_path.read_text()

    first = run_once("first.log")
    data = tmp_path / "odradek-data"
    cluster_id = parse_properties((data / "meta.properties").read_text())["cluster.id"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    assert "Formatting ./odradek-data with metadata.version 4.0-IV3." in first
    assert f"Formatted new storage with cluster id {cluster_id}" in first
    assert f"started (cluster {cluster_id})" in first
    assert (data / ".kafka_cleanshutdown").exists()

    second = run_once("second.log")
    assert "Formatting" not in second
    assert f"started (cluster {cluster_id})" in second
