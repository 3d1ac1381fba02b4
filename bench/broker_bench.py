"""The broker end to end, against the same machine's Redis Streams as a yardstick.

- kcat produces N x 100 B records (one per line, read from a file) into a 6-partition topic;
  redis-benchmark runs pipelined XADD of 100 B values into one stream, same N, same machine,
  same run: the ratio is Odradek's records/s over Redis's.
- kcat consumes the topic from the beginning to the end (records/s).
- Broker RSS after the load, cold start to listening, and produce latency (p50/p99) from a
  confluent-kafka producer at a fixed moderate rate (acks=1 and acks=all).
Needs Debian's kcat, redis-server and redis-tools (`apt-get install kcat redis-server redis-tools`).

Compare mode (`python -m bench broker --compare REV`) measures a broker run from REV's `src/`
(a `git archive` export, put on that broker's PYTHONPATH) against one run from this tree's
`src/`, in interleaved rounds of one run, and prints both sides with the ratio current / REV.
It needs kcat only (no Redis yardstick, no cold start).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from broker_process import BrokerProcess, free_port, wait_until

NAME = "broker"
ROOT = Path(__file__).resolve().parent.parent
RECORD_SIZE = 100
PARTITIONS = 6
DEFAULT_RECORDS = 2_000_000
QUICK_RECORDS = 200_000
LATENCY_RATE = 1000  # records/s: a moderate fixed rate, so latency is not queueing behind a flood
ACKS_SETTINGS = ("1", "all")


@dataclass(frozen=True)
class Tree:
    """Which Odradek a broker runs: `src` goes alone on its PYTHONPATH; None inherits ours."""

    label: str
    src: Path | None = None

    def env(self) -> dict[str, str]:
        # PYTHONPATH replaces, not extends, so nothing of another tree can leak in; it comes
        # before the venv's editable .pth entry, so this `odradek` package wins.
        return {} if self.src is None else {"PYTHONPATH": str(self.src)}


@dataclass
class SideRun:
    """One side's measurements in one round (a fresh broker on fresh storage)."""

    produce_rate: float
    consume_rate: float
    rss_mib: float
    latencies: dict[str, list[float]] = field(default_factory=dict)  # acks -> seconds, sorted


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cli(tree: Tree, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "odradek.cli.main", *args], env=dict(os.environ,
                   **tree.env()), check=True, capture_output=True, timeout=60)


def _create_topic(broker: BrokerProcess, tree: Tree, topic: str, partitions: int) -> None:
    _cli(tree, "topics", "--create", "--topic", topic, "--partitions", str(partitions),
         "--bootstrap-server", broker.bootstrap)


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


def _latency(broker: BrokerProcess, topic: str, rate: int, seconds: float,
             acks: str = "1") -> list[float]:
    """Send one record every 1/rate s for `seconds`; return the sorted send-to-ack times."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": 0})
    latencies: list[float] = []
    errors: list[str] = []

    def delivered(err, _msg, sent: float) -> None:
        if err is None:
            latencies.append(time.perf_counter() - sent)
        else:
            errors.append(str(err))

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
    if errors or not latencies:
        raise RuntimeError(f"acks={acks}: {len(errors)} failed deliveries "
                           f"({errors[:3]}), {len(latencies)} delivered")
    return sorted(latencies)


def _p50_ms(sorted_seconds: list[float]) -> float:
    return statistics.median(sorted_seconds) * 1000


def _p99_ms(sorted_seconds: list[float]) -> float:
    return sorted_seconds[int(len(sorted_seconds) * 0.99) - 1] * 1000


def _write_records(data_file: Path, n: int) -> None:
    line = b"r" * RECORD_SIZE + b"\n"  # kcat sends each line (without \n) as a record
    with open(data_file, "wb") as f:
        f.write(line * n)


def _records(quick: bool, records: int | None) -> int:
    return records if records is not None else (QUICK_RECORDS if quick else DEFAULT_RECORDS)


def run(quick: bool = False, records: int | None = None) -> str:
    if not (shutil.which("kcat") and shutil.which("redis-benchmark")):
        raise SystemExit("needs kcat, redis-server and redis-tools (apt-get install ...)")
    n = _records(quick, records)
    tree = Tree("this tree")  # inherits our environment, as the bench always did
    with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
        workdir = Path(tmp)
        data_file = workdir / "records.txt"
        _write_records(data_file, n)
        (workdir / "broker").mkdir()
        broker = BrokerProcess(workdir / "broker", {"num.partitions": str(PARTITIONS)})
        started = time.perf_counter()
        broker.start()
        cold_start = time.perf_counter() - started
        try:
            _create_topic(broker, tree, "bench", PARTITIONS)
            produce_s = _kcat_produce(broker, "bench", data_file)
            rss = _rss_mib(broker.proc.pid)
            consume_s, consumed = _kcat_consume(broker, "bench")
            redis_s = _redis_xadd(n)
            seconds = 3 if quick else 10
            latencies: dict[str, list[float]] = {}
            for acks in ACKS_SETTINGS:
                topic = f"latency-acks-{acks}"
                _create_topic(broker, tree, topic, 1)
                latencies[acks] = _latency(broker, topic, LATENCY_RATE, seconds, acks)
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
    rows = [
        ("kcat produce, 6 partitions", (f"{odradek_rate:,.0f} records/s "
         f"({odradek_rate * RECORD_SIZE / 2**20:.1f} MiB/s)"), f"{n:,} x {RECORD_SIZE} B"),
        ("redis-benchmark XADD, pipelined (-P 64, 4 clients)", f"{redis_rate:,.0f} records/s",
         "same records, one stream"),
        ("Odradek / Redis", f"{odradek_rate / redis_rate:.2f}x", "goal >= 1.0"),
        ("kcat consume from the beginning", f"{n / consume_s:,.0f} records/s", ""),
        ("broker RSS after the produce", f"{rss:.0f} MiB", ""),
        ("cold start to answering ApiVersions (fresh storage, incl. format)",
         f"{cold_start * 1000:.0f} ms", "goal < 1 s"),
        ("restart to answering ApiVersions (with the data above)", f"{restart * 1000:.0f} ms",
         "goal < 1 s"),
    ]
    rows += [(f"produce latency at {LATENCY_RATE} records/s, acks={acks}, linger 0",
              f"p50 {_p50_ms(lat):.2f} ms, p99 {_p99_ms(lat):.2f} ms", f"{len(lat)} records")
             for acks, lat in latencies.items()]
    lines = [
        "## Broker end to end (single node)",
        "",
        ("Method: `python -m bench broker` (needs kcat, redis-server, redis-tools from Debian). "
        "One broker process with default settings on 127.0.0.1; kcat reads one record per line "
        "from a file (linger.ms=20); Redis 7 from Debian without persistence, driven by "
        "redis-benchmark in the same run. Cold start is measured from process spawn "
        "(includes the Python interpreter start and storage formatting)."),
        "",
        "| measurement | result | notes |",
        "|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


# --- compare mode ---------------------------------------------------------------------------

def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _export_src(rev: str, into: Path) -> Path:
    """`git archive` REV's src/ into `into` (no worktree registered in the shared repo)."""
    tar_path = into / "src.tar"
    _git("archive", "--format=tar", "-o", str(tar_path), rev, "src")
    subprocess.run(["tar", "-x", "-f", str(tar_path), "-C", str(into)], check=True)
    tar_path.unlink()
    return into / "src"


def _measure_side(tree: Tree, workdir: Path, data_file: Path, n: int,
                  latency_seconds: float) -> SideRun:
    broker_dir = Path(tempfile.mkdtemp(prefix="broker-", dir=workdir))
    broker = BrokerProcess(broker_dir, {"num.partitions": str(PARTITIONS)}, env=tree.env())
    broker.start()
    try:
        _create_topic(broker, tree, "bench", PARTITIONS)
        produce_s = _kcat_produce(broker, "bench", data_file)
        rss = _rss_mib(broker.proc.pid)
        consume_s, consumed = _kcat_consume(broker, "bench")
        if consumed != n:
            raise RuntimeError(f"{tree.label}: consumed {consumed} of {n} records")
        run_ = SideRun(produce_rate=n / produce_s, consume_rate=n / consume_s, rss_mib=rss)
        for acks in ACKS_SETTINGS:
            topic = f"latency-acks-{acks}"
            _create_topic(broker, tree, topic, 1)
            run_.latencies[acks] = _latency(broker, topic, LATENCY_RATE, latency_seconds, acks)
    finally:
        broker.stop()
    shutil.rmtree(broker_dir)  # a 2M-record log is ~250 MB; the next round needs the space
    return run_


@dataclass(frozen=True)
class _Metric:
    name: str
    unit: str
    higher_is_better: bool
    per_round: Callable[[SideRun], float]


def _metrics() -> list[_Metric]:
    def latency_metric(acks: str, label: str, pct: Callable[[list[float]], float]) -> _Metric:
        return _Metric(f"produce latency {label} at {LATENCY_RATE} records/s, acks={acks}", "ms",
                       False, lambda r: pct(r.latencies[acks]))

    return [
        _Metric(f"kcat produce, {PARTITIONS} partitions", "records/s", True,
                attrgetter("produce_rate")),
        _Metric("kcat consume from the beginning", "records/s", True, attrgetter("consume_rate")),
        *(latency_metric(acks, label, pct) for acks in ACKS_SETTINGS
          for label, pct in (("p50", _p50_ms), ("p99", _p99_ms))),
        _Metric("broker RSS after the produce", "MiB", False, attrgetter("rss_mib")),
    ]


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.0f}" if unit == "records/s" else (
        f"{value:.2f}" if unit == "ms" else f"{value:.0f}")


def run_compare(rev: str, quick: bool = False, records: int | None = None,
                rounds: int = 3) -> str:
    if not shutil.which("kcat"):
        raise SystemExit("needs kcat (apt-get install kcat)")
    if rounds < 2:
        raise SystemExit("--rounds must be at least 2, so drift hits both sides alike")
    n = _records(quick, records)
    latency_seconds = 3 if quick else 10
    rev_sha = _git("rev-parse", "--short", "--verify", f"{rev}^{{commit}}")
    head_sha = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", "src"))
    with tempfile.TemporaryDirectory(prefix="odradek-bench-compare-") as tmp:
        workdir = Path(tmp)
        (workdir / "rev").mkdir()
        before = Tree(f"{rev} ({rev_sha})", _export_src(rev, workdir / "rev"))
        current = Tree(f"current ({head_sha}{' + uncommitted src/' if dirty else ''})",
                       ROOT / "src")
        data_file = workdir / "records.txt"
        _write_records(data_file, n)
        results: dict[Tree, list[SideRun]] = {before: [], current: []}
        # Rounds alternate which side goes first (REV, current, current, REV, ...), so a
        # steady drift of the shared machine's load hits both sides alike.
        for round_no in range(rounds):
            order = (before, current) if round_no % 2 == 0 else (current, before)
            for tree in order:
                print(f"round {round_no + 1}/{rounds}: {tree.label} ...", file=sys.stderr,
                      flush=True)
                results[tree].append(_measure_side(tree, workdir, data_file, n,
                                                   latency_seconds))
    rows = []
    for metric in _metrics():
        # A side's figure is the median of its rounds: with 3+ rounds one round disturbed by
        # the shared machine's other load does not decide it (a pooled p99 would be the worst
        # round's tail).
        sides = [[metric.per_round(r) for r in results[t]] for t in (before, current)]
        medians = [statistics.median(rounds_) for rounds_ in sides]
        ratio = medians[1] / medians[0] if medians[0] else float("nan")
        better = "ratio >= 1" if metric.higher_is_better else "ratio <= 1"
        cells = [f"{_fmt(median, metric.unit)} "
                 f"({' / '.join(_fmt(x, metric.unit) for x in rounds_)})"
                 for median, rounds_ in zip(medians, sides, strict=True)]
        rows.append(f"| {metric.name} ({metric.unit}) | {cells[0]} | {cells[1]} | "
                    f"{ratio:.2f} | {better} |")
    lines = [
        "## Broker before/after comparison (single node)",
        "",
        (f"Method: `python -m bench broker --compare {rev} --records {n}"
        f"{' --quick' if quick else ''} --rounds {rounds}` (needs kcat). The REV side's broker "
        "runs REV's `src/` (exported with `git archive`, alone on that broker's PYTHONPATH), the "
        "current side's runs this tree's `src/`; same interpreter, packages and client tools. "
        f"{rounds} interleaved rounds in one run, the side going first alternating "
        "(REV, current, current, REV, ...); each side-round is a fresh broker on fresh storage: "
        f"kcat produces {n:,} x {RECORD_SIZE} B records into {PARTITIONS} partitions "
        "(linger.ms=20), then the broker's RSS is read, kcat consumes from the beginning, then "
        f"a confluent-kafka producer sends {LATENCY_RATE} records/s for {latency_seconds} s "
        "with acks=1 and then acks=all (linger 0), each to its own 1-partition topic. Each "
        "figure is the median of the side's rounds, each round's own in parentheses; the "
        "machine (2 cores) may be shared, so compare the rounds' spread with the ratio."),
        "",
        f"| measurement | {before.label} | {current.label} | current / REV | better when |",
        "|---|---|---|---|---|",
        *rows,
    ]
    return "\n".join(lines) + "\n"
