"""A real Odradek broker in a child process, for tests: random free ports on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from odradek.protocol import framing
from odradek.protocol import messages as m

ODRADEK = [sys.executable, "-m", "odradek.cli.main"]

#: Overrides for a broker a test restarts: a restarted node registers again only once its
#: previous incarnation's session has run out (DUPLICATE_BROKER_REGISTRATION until then), which
#: is broker.session.timeout.ms (Kafka's 9 s) after its controller became active; 3 s with
#: heartbeats every 300 ms, as the cluster tests use.
SHORT_BROKER_SESSION = {"broker.session.timeout.ms": "3000",
                        "broker.heartbeat.interval.ms": "300"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout: float, interval: float = 0.05, message: str = "condition"):
    """Poll `condition` until it returns a truthy value or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def api_versions_ok(host: str, port: int) -> bool:
    """True when the broker answers an ApiVersions request."""
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            s.sendall(framing.encode_request(18, 3, 1, "probe", m.ApiVersionsRequest(
                client_software_name="probe", client_software_version="1")))
            size = struct.unpack(">i", _recv_exact(s, 4))[0]
            corr, resp = framing.decode_response(_recv_exact(s, size), 18, 3)
            return corr == 1 and resp.error_code == 0
    except (OSError, ValueError):
        return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


class BrokerProcess:
    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        # Extra environment for the broker process (e.g. PYTHONPATH to run another tree's src).
        self.env = dict(env or {})
        self.port = free_port()
        self.controller_port = free_port()
        self.host = "127.0.0.1"
        self.data_dir = workdir / "data"
        self.config_path = workdir / "server.properties"
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen | None = None
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(overrides or {})
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60) -> BrokerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [*ODRADEK, "server-start", str(self.config_path)],
                stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
            )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            return api_versions_ok(self.host, self.port)

        wait_until(ready, timeout, interval=0.1, message="broker to answer ApiVersions")
        return self

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> int:
        """Graceful stop (SIGTERM), like kafka-server-stop.sh."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def kill(self) -> None:
        """SIGKILL: an unclean crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, clean: bool = True) -> BrokerProcess:
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()


def closed_by_peer_now(sock: socket.socket, wait_s: float = 0.01) -> bool:
    """Whether the other end has closed `sock` (end of stream or reset), looking for at most
    `wait_s`: a probe for many connections at once (a connection flood's test)."""
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except ConnectionResetError:
        return True


def log_bytes(directory: Path) -> int:
    """Bytes of a partition directory's segment files, read while a broker may be swapping
    them (its log cleaner renames segments under the reader)."""
    total = 0
    for path in directory.glob("*.log"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:  # swapped by the cleaner meanwhile
            pass
    return total


def commit_repeatedly(broker: BrokerProcess, commits: int, segment_bytes: int
                      ) -> dict[str, int]:
    """Commits offsets 0..commits-1 of one partition for one group; returns the sizes of
    `__consumer_offsets-0` (of `offsets.topic.segment.bytes=segment_bytes`): the largest
    seen while committing, at the end (once the cleaner has settled), and what the commits wrote (records times the bytes a record takes in the
    active segment, which is never cleaned)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer",
                         "enable.auto.commit": False})
    directory = broker.data_dir / "__consumer_offsets-0"
    largest = 0
    try:
        consumer.commit(offsets=[TopicPartition("t", 0, 0)], asynchronous=False)
        for number in range(1, commits):
            consumer.commit(offsets=[TopicPartition("t", 0, number)], asynchronous=True)
            if number % 100 == 0:
                # Serves the async commits' results: unserved, librdkafka's queue grows and
                # each commit costs more (the client, not the broker, became the bottleneck).
                consumer.poll(0)
            if number % 500 == 0:
                # Commits are one request each; a sync one now and then bounds the backlog.
                consumer.commit(offsets=[TopicPartition("t", 0, number)], asynchronous=False)
                largest = max(largest, log_bytes(directory))
        consumer.commit(offsets=[TopicPartition("t", 0, commits)], asynchronous=False)
        committed = consumer.committed([TopicPartition("t", 0)], timeout=30)[0].offset
        assert committed == commits
        _low, records = consumer.get_watermark_offsets(
            TopicPartition("__consumer_offsets", 0), timeout=30)
    finally:
        consumer.close()
    active = max(directory.glob("*.log"))
    active_records = records - int(active.name.split(".")[0])
    per_record = active.stat().st_size / max(active_records, 1)
    before = log_bytes(directory)

    def inactive_bytes() -> int:
        segments = sorted(directory.glob("*.log"))
        return sum(segment.stat().st_size for segment in segments[:-1])

    # Settled: the inactive segments compacted to the group's few live keys.
    wait_until(lambda: inactive_bytes() <= 2 * segment_bytes, 120,
               message="the cleaner to compact __consumer_offsets")
    return {"commits": commits, "records": records,
            "written_bytes": int(records * per_record),
            "largest_bytes": max(largest, before), "final_bytes": log_bytes(directory)}


def scrape_metrics(url: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels as a frozenset of pairs): value} of one scrape of a broker's
    metrics endpoint (`metrics.prometheus.listener`)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def metrics_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


def wait_for_metrics(url: str, timeout: float = 30) -> None:
    def up() -> bool:
        try:
            return bool(scrape_metrics(url))
        except OSError:
            return False

    wait_until(up, timeout, message=f"the metrics endpoint {url}")


@contextlib.contextmanager
def broker_with_metrics(workdir: Path, overrides: dict[str, str] | None = None
                        ) -> Iterator[BrokerProcess]:
    """A started broker serving its metrics on a free port, at `broker.metrics_url`; stopped
    after, and its exit checked (the metrics server's thread must not hold it up)."""
    port = free_port()
    broker = BrokerProcess(workdir, {"metrics.prometheus.listener": f"http://127.0.0.1:{port}",
                                     **(overrides or {})})
    broker.start()
    broker.metrics_url = metrics_url(port)  # type: ignore[attr-defined]
    try:
        wait_for_metrics(broker.metrics_url)  # type: ignore[attr-defined]
        yield broker
    finally:
        assert broker.stop() == 0
