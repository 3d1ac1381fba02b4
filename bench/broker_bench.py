"""The broker end to end, against the same machine's Redis Streams as a yardstick.

- kcat produces N x 100 B records (one per line, read from a file) into a 6-partition topic;
  redis-benchmark runs pipelined XADD of 100 B values into one stream, same N, same machine,
  same run: the ratio is Odradek's records/s over Redis's.
- kcat consumes the topic from the beginning to the end (records/s).
- Broker RSS after the load, cold start to listening, and produce latency (p50/p99) from a
  confluent-kafka producer at a fixed moderate rate (acks=1).
Needs Debian's kcat, redis-server and redis-tools (`apt-get install kcat redis-server redis-tools`).
"""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from broker_process import BrokerProcess, free_port, wait_until

NAME = "broker"
RECORD_SIZE = 100
PARTITIONS = 6


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _kcat_produce(broker: BrokerProcess, topic: str, data_file: Path) -> float:
    start = time.perf_counter()
    with open(data_file, "rb") as stdin:
        subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-X", "linger.ms=20",
                        "-X", "batch.num.messages=10000", "-X", "queue.buffering.max.kbytes=1048576"],
                       stdin=stdin, check=True, timeout=900)
    return time.perf_counter() - start


def _kcat_consume(broker: BrokerProcess, topic: str) -> tuple[float, int]:
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-q",
                          "-o", "beginning", "-f", "x"],
                         capture_output=True, check=True, timeout=900)
    return time.perf_counter() - start, len(out.stdout)


def _redis_xadd(n: int) -> float:
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def up() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return True
            except OSError:
                return False
        wait_until(up, 10)
        value = "v" * RECORD_SIZE
        start = time.perf_counter()
        subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(n),
                        "-P", "64", "-c", "4", "-q", "XADD", "bench", "*", "f", value],
                       check=True, capture_output=True, timeout=900)
        return time.perf_counter() - start
    finally:
        server.terminate()
        server.wait(10)


def _latency(broker: BrokerProcess, topic: str, rate: int, seconds: float) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 0})
    latencies: list[float] = []

    def delivered(err, _msg, sent=None):
        if err is None:
            latencies.append(time.perf_counter() - sent)

    interval = 1 / rate
    next_send = time.perf_counter()
    end = next_send + seconds
    while next_send < end:
        now = time.perf_counter()
        if now < next_send:
            producer.poll(next_send - now)
            continue
        sent = time.perf_counter()
        producer.produce(topic, value=b"x" * RECORD_SIZE,
                         on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
        next_send += interval
    producer.flush(30)
    return latencies


def run(quick: bool = False) -> str:
    if not (shutil.which("kcat") and shutil.which("redis-benchmark")):
        raise SystemExit("needs kcat, redis-server and redis-tools (apt-get install ...)")
    n = 200_000 if quick else 2_000_000
    with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
        workdir = Path(tmp)
        data_file = workdir / "records.txt"
        line = b"r" * RECORD_SIZE + b"\n"  # kcat sends each line (without \n) as a record
        with open(data_file, "wb") as f:
            f.write(line * n)
        (workdir / "broker").mkdir()
        broker = BrokerProcess(workdir / "broker", {"num.partitions": str(PARTITIONS)})
        started = time.perf_counter()
        broker.start()
        cold_start = time.perf_counter() - started
        try:
            subprocess.run([sys.executable, "-m", "odradek.cli.main", "topics", "--create",
                            "--topic", "bench", "--partitions", str(PARTITIONS),
                            "--bootstrap-server", broker.bootstrap],
                           check=True, capture_output=True, timeout=60)
            produce_s = _kcat_produce(broker, "bench", data_file)
            rss = _rss_mib(broker.proc.pid)
            consume_s, consumed = _kcat_consume(broker, "bench")
            redis_s = _redis_xadd(n)
            subprocess.run([sys.executable, "-m", "odradek.cli.main", "topics", "--create",
                            "--topic", "latency", "--partitions", "1",
                            "--bootstrap-server", broker.bootstrap],
                           check=True, capture_output=True, timeout=60)
            rate, seconds = 1000, (3 if quick else 10)
            latencies = sorted(_latency(broker, "latency", rate, seconds))
            broker.stop()
            # Cold start: a formatted node with the data above, process start to ApiVersions.
            started = time.perf_counter()
            broker.start()
            restart = time.perf_counter() - started
        finally:
            broker.stop()
    assert consumed == n, f"consumed {consumed} of {n} records"
    odradek_rate = n / produce_s
    redis_rate = n / redis_s
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    rows = [
        ("kcat produce, 6 partitions", f"{odradek_rate:,.0f} records/s "
         f"({odradek_rate * RECORD_SIZE / 2**20:.1f} MiB/s)", f"{n:,} x {RECORD_SIZE} B"),
        ("redis-benchmark XADD, pipelined (-P 64, 4 clients)", f"{redis_rate:,.0f} records/s",
         "same records, one stream"),
        ("Odradek / Redis", f"{odradek_rate / redis_rate:.2f}x", "goal >= 1.0"),
        ("kcat consume from the beginning", f"{n / consume_s:,.0f} records/s", ""),
        ("broker RSS after the produce", f"{rss:.0f} MiB", ""),
        ("cold start to answering ApiVersions (fresh storage, incl. format)",
         f"{cold_start * 1000:.0f} ms", "goal < 1 s"),
        ("restart to answering ApiVersions (with the data above)", f"{restart * 1000:.0f} ms",
         "goal < 1 s"),
        (f"produce latency at {rate} records/s, acks=1, linger 0", f"p50 {p50:.2f} ms, "
         f"p99 {p99:.2f} ms", f"{len(latencies)} records"),
    ]
    lines = [
        "## Broker end to end (single node)",
        "",
        "Method: `python -m bench broker` (needs kcat, redis-server, redis-tools from Debian). "
        "One broker process with default settings on 127.0.0.1; kcat reads one record per line "
        "from a file (linger.ms=20); Redis 7 from Debian without persistence, driven by "
        "redis-benchmark in the same run. Cold start is measured from process spawn "
        "(includes the Python interpreter start and storage formatting).",
        "",
        "| measurement | result | notes |",
        "|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"
