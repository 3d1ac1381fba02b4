"""Latency at fixed rates: produce-acknowledge and end-to-end percentiles, single node.

A confluent-kafka (librdkafka) producer sends records at a fixed rate (one `produce()` every
1/rate s, librdkafka's defaults otherwise: linger.ms=5, as Kafka 4.0's Java producer) to a
1-partition topic; a confluent-kafka consumer in another process reads the same partition from
offset 0 (the topic is fresh) as it grows (fetch.wait.max.ms=500, fetch.min.bytes=1: the broker's long poll must wake
on new data). Each record's value starts with the CLOCK_MONOTONIC nanoseconds of its send,
which both processes read, so:
- produce-ack latency = the delivery callback's time - the send time (what
  kafka-producer-perf-test.sh reports),
- end-to-end latency = the consumer's receive time - the send time.
Cases: rates x acks (1, all) x record sizes (100 B, 1 KiB), each for `seconds` on a fresh topic
of one broker started once for the run.

Compare mode (`python -m bench latency --compare REV --rounds 1`) runs every case on a broker
of REV's `src/` and then of this tree's, in one run (see broker_bench.Tree); `--quick` keeps it
to the 5k msg/s rows at 10 s each.
"""

from __future__ import annotations

import multiprocessing
import struct
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_process import BrokerProcess

from bench.broker_bench import ROOT, Tree, _export_src, _git

NAME = "latency"
RATES = (1000, 5000, 20000)
ACKS = ("1", "all")
SIZES = (100, 1024)
SECONDS = 60
QUICK_SECONDS = 10
COMPARE_RATE = 5000
STAMP = struct.Struct(">q")
GROUP = "latency-bench"


@dataclass(frozen=True)
class Case:
    rate: int
    acks: str
    size: int

    @property
    def topic(self) -> str:
        return f"latency-{self.rate}-acks-{self.acks}-{self.size}b"


@dataclass
class Result:
    case: Case
    sent: int
    produce_ack_ms: list[float]
    end_to_end_ms: list[float]
    achieved_rate: float


def _percentile(sorted_ms: list[float], fraction: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * fraction))]


def _consume(bootstrap: str, topic: str, expected: int, deadline_s: float,
             out_path: str, ready) -> None:
    """Runs in its own process: records each record's end-to-end latency (ns) into out_path."""
    from confluent_kafka import Consumer, TopicPartition

    # librdkafka looks up the group's coordinator even for a manual assignment; _measure
    # has had __consumer_offsets created before any case, so that costs nothing here.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 500,
                         "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(topic, 0, 0)])  # a fresh topic: its start is its end
    latencies = array("q")
    end = time.monotonic() + deadline_s
    signalled = False
    while len(latencies) < expected and time.monotonic() < end:
        # One message per poll: consume(n, timeout) would hold records until n arrived.
        message = consumer.poll(0.1)
        if not signalled:
            # Connected and fetching: the producer may start (so its first records' latency
            # does not include the consumer's start-up).
            ready.set()
            signalled = True
        if message is not None and message.error() is None:
            latencies.append(time.monotonic_ns() - STAMP.unpack_from(message.value())[0])
    consumer.close()
    with open(out_path, "wb") as f:
        latencies.tofile(f)


def _run_case(bootstrap: str, case: Case, seconds: float, workdir: Path) -> Result:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(case.topic, 1, 1)])[case.topic].result(30)
    expected = int(case.rate * seconds)
    out_path = workdir / f"{case.topic}.e2e"
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    reader = context.Process(target=_consume, args=(bootstrap, case.topic, expected,
                                                     seconds + 60, str(out_path), ready))
    reader.start()
    if not ready.wait(60):
        reader.kill()
        raise RuntimeError("the consumer did not start")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": case.acks})
    acked: list[float] = []
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((time.monotonic_ns() - STAMP.unpack_from(msg.value())[0]) / 1e6)

    padding = b"x" * (case.size - STAMP.size)
    interval_ns = 1_000_000_000 // case.rate
    start = time.monotonic_ns()
    next_send = start
    sent = 0
    while sent < expected:
        now = time.monotonic_ns()
        if now < next_send:
            producer.poll((next_send - now) / 1e9)
            continue
        producer.produce(case.topic, STAMP.pack(time.monotonic_ns()) + padding,
                         on_delivery=delivered)
        sent += 1
        next_send += interval_ns
    producer.flush(60)
    elapsed_s = (time.monotonic_ns() - start) / 1e9
    reader.join(120)
    if reader.exitcode != 0:
        raise RuntimeError(f"{case}: the consumer exited with {reader.exitcode}")
    end_to_end = array("q")
    with open(out_path, "rb") as f:
        end_to_end.frombytes(f.read())
    if errors or len(acked) != sent:
        raise RuntimeError(f"{case}: {len(errors)} failed deliveries ({errors[:3]}), "
                           f"{len(acked)} of {sent} acknowledged")
    if len(end_to_end) != sent:
        raise RuntimeError(f"{case}: the consumer read {len(end_to_end)} of {sent}")
    return Result(case, sent, sorted(acked), sorted(x / 1e6 for x in end_to_end),
                  sent / elapsed_s)


def _cases(rates: tuple[int, ...]) -> list[Case]:
    return [Case(rate, acks, size) for rate in rates for size in SIZES for acks in ACKS]


def _create_offsets_topic(bootstrap: str) -> None:
    """A group's first FindCoordinator creates __consumer_offsets (50 partitions): done once
    before measuring, as on any broker that has served a group."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.describe_consumer_groups([GROUP])[GROUP].result(60)


def _measure(tree: Tree, cases: list[Case], seconds: float) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="odradek-latency-") as tmp:
        workdir = Path(tmp)
        (workdir / "broker").mkdir()
        broker = BrokerProcess(workdir / "broker", {}, env=tree.env())
        broker.start()
        try:
            _create_offsets_topic(broker.bootstrap)
            results = []
            for case in cases:
                print(f"{tree.label}: {case} ...", file=sys.stderr, flush=True)
                results.append(_run_case(broker.bootstrap, case, seconds, workdir))
            return results
        finally:
            broker.stop()


def _row(result: Result, label: str = "") -> str:
    c = result.case
    cells = [f"{_percentile(values, q):.1f}" for values in (result.produce_ack_ms,
                                                             result.end_to_end_ms)
             for q in (0.5, 0.99, 0.999)]
    cells.insert(3, f"{result.produce_ack_ms[-1]:.1f}")
    cells.append(f"{result.end_to_end_ms[-1]:.1f}")
    lead = f"{label} | " if label else ""
    return (f"| {lead}{c.rate:,} | {c.acks} | {c.size} | {result.achieved_rate:,.0f} | "
            + " | ".join(cells) + " |")


HEADER = ("| rate (msg/s) | acks | size (B) | achieved (msg/s) | ack p50 | ack p99 | ack p99.9 "
          "| ack max | e2e p50 | e2e p99 | e2e p99.9 | e2e max |")


def _method(seconds: float, how: str) -> str:
    return (f"Method: `{how}`. One broker (`BrokerProcess`, embedded defaults) started for the "
            "run; for each case a fresh 1-partition topic, a confluent-kafka consumer in its "
            "own process reading it as it grows, and a confluent-kafka producer sending one "
            f"record every 1/rate s for {seconds:g} s (librdkafka defaults: linger.ms=5). "
            "Latencies in ms: `ack` is send to delivery callback (what "
            "kafka-producer-perf-test.sh reports), `e2e` is send to the consumer's receipt "
            "(both stamps from CLOCK_MONOTONIC). The machine has 2 cores, shared by the "
            "producer, the consumer and the broker.")


def run(quick: bool = False) -> str:
    seconds = QUICK_SECONDS if quick else SECONDS
    results = _measure(Tree("current"), _cases(RATES), seconds)
    lines = ["## Latency at fixed rates (single node)", "",
             _method(seconds, f"python -m bench latency{' --quick' if quick else ''}"), "",
             HEADER, "|" + "---|" * 12, *(_row(r) for r in results)]
    return "\n".join(lines) + "\n"


def run_compare(rev: str, quick: bool = False, records: int | None = None,
                rounds: int = 1) -> str:
    del records  # the cases fix their own record counts (rate x seconds)
    seconds = QUICK_SECONDS if quick else SECONDS
    rev_sha = _git("rev-parse", "--short", "--verify", f"{rev}^{{commit}}")
    head_sha = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", "src"))
    cases = _cases((COMPARE_RATE,) if quick else RATES)
    rows = []
    with tempfile.TemporaryDirectory(prefix="odradek-latency-compare-") as tmp:
        (Path(tmp) / "rev").mkdir()
        before = Tree(f"{rev} ({rev_sha})", _export_src(rev, Path(tmp) / "rev"))
        current = Tree(f"current ({head_sha}{' + uncommitted src/' if dirty else ''})",
                       ROOT / "src")
        for round_no in range(max(1, rounds)):
            order = (before, current) if round_no % 2 == 0 else (current, before)
            for tree in order:
                rows += [_row(r, tree.label) for r in _measure(tree, cases, seconds)]
    how = f"python -m bench latency --compare {rev}{' --quick' if quick else ''}"
    lines = ["## Latency before/after comparison (single node)", "",
             _method(seconds, how) + " Both sides in one run, one after the other.", "",
             "| side " + HEADER, "|" + "---|" * 13, *rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - a quick look without the bench runner
    print(run(quick="--quick" in sys.argv))
