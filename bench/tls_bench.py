"""TLS: produce and consume throughput over an SSL listener against a PLAINTEXT one of the same
broker, with librdkafka (confluent-kafka) as the client (issue 18: Kafka loses 20-40% with TLS;
the goal is to lose less).

Run: `python -m bench tls` (writes docs/performance.md) or `python bench/tls_bench.py [--quick]`
(prints the section only). Needs the `cryptography` package (test extra) for the throwaway CA.

One Odradek broker runs as a child process on loopback with a PLAINTEXT and an SSL listener
(EC P-256 certificate, TLS 1.3, no client certificate). Per round, the same N x 1 KiB keyless
records go to a topic of their own through each listener (6 partitions, acks=1, linger.ms=5),
timed from the first send until `flush()` returns; then a consumer reads each topic by
assignment of every partition from the beginning, timed from its first records until it has
N. The two listeners run in alternating order per round and ratios are taken within a round.
Plaintext fetches are sent with sendfile; TLS ones are read and written in 1 MiB chunks.

On a shared machine the clients' wall-clock rates swing by 2x from run to run, so the broker's
own cost is measured too: its process CPU time (user + system, all threads, from
/proc/PID/stat) over each produce and consume, per MB moved -- what TLS adds on the broker,
independent of how busy the machine is. The client's CPU time per MB (this process: the Python
loop and librdkafka's threads, which encrypt and decrypt on their side) is measured the same
way: client and broker share the machine's cores, so the throughput ratio depends on both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # BrokerProcess: a broker on random local ports
sys.path.insert(0, str(ROOT))  # tools.secure_example: the throwaway CA

import confluent_kafka
from broker_process import BrokerProcess, free_port
from confluent_kafka.admin import AdminClient, NewTopic

from tools.secure_example import CertificateAuthority

NAME = "tls"
PARTITIONS = 6
RECORD_SIZE = 1024
PRODUCER = {"acks": "1", "linger.ms": 5}


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)


def produce(settings: dict, topic: str, n: int) -> float:
    producer = confluent_kafka.Producer({**settings, **PRODUCER})
    failures: list = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    value = b"x" * RECORD_SIZE
    started = time.perf_counter()
    sent = 0
    while sent < n:
        try:
            producer.produce(topic, value, on_delivery=delivered)
            sent += 1
        except BufferError:  # local queue full: serve delivery reports, as apps do
            producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert remaining == 0 and not failures, f"{remaining} left, {failures[:3]}"
    return elapsed


def consume(settings: dict, topic: str, n: int) -> float:
    consumer = confluent_kafka.Consumer({
        **settings, "group.id": "bench-unused", "enable.auto.commit": False,
        "enable.partition.eof": False, "fetch.queue.backoff.ms": 0})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    count, started = 0, None
    deadline = time.monotonic() + 120
    while count < n and time.monotonic() < deadline:
        messages = consumer.consume(num_messages=10_000, timeout=1.0)
        if started is None and messages:
            started = time.perf_counter()
        count += sum(1 for message in messages if message.error() is None)
    elapsed = time.perf_counter() - started if started is not None else float("inf")
    consumer.close()
    assert count == n, f"consumed {count} of {n}"
    return elapsed


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user + system, every thread)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """This process's CPU time so far (the client: Python and librdkafka's threads)."""
    times = os.times()
    return times.user + times.system


class BusiestThread:
    """The share of one core used by this process's busiest thread (librdkafka's broker thread,
    or the Python loop) over a timed window: per-thread CPU time from /proc/self/task, sampled
    every 50 ms (librdkafka's threads end with their client, so they are read while they run).
    A share near 1.0 means the client, not the broker, sets the pace."""

    def __init__(self) -> None:
        self._samples: list[tuple[float, dict[int, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _sample() -> dict[int, float]:
        ticks = os.sysconf("SC_CLK_TCK")
        seen = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            seen[int(tid)] = (int(fields[11]) + int(fields[12])) / ticks
        return seen

    def _run(self) -> None:
        while True:
            self._samples.append((time.perf_counter(), self._sample()))
            if self._stop.wait(0.05):
                return

    def share(self, window_start: float, window_end: float) -> float:
        """The busiest thread's CPU between two perf_counter instants, per second. A thread's
        baseline is its CPU in the last sample before the window (0 if it was born inside);
        its end, the last sample of it inside the window (it may have ended before)."""
        self._stop.set()
        self._thread.join()
        before: dict[int, float] = {}
        inside: dict[int, float] = {}
        for at, cpu in self._samples:
            if at < window_start:
                before.update(cpu)
            elif at <= window_end:
                inside.update(cpu)
        busiest = max((cpu - before.get(tid, 0.0) for tid, cpu in inside.items()
                       if tid != self._thread.native_id), default=0.0)
        return busiest / (window_end - window_start)


def _unit(key: str) -> str:
    return ("ms CPU/MB" if key.endswith("_cpu") else "of a core" if key.endswith("_busiest")
            else "MB/s")


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(quick: bool = False, records: int | None = None) -> str:
    n = records or (50_000 if quick else 200_000)
    rounds = 2 if quick else 3
    load_before = load_average()
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="odradek-bench-tls-") as tmp:
        ca = CertificateAuthority(Path(tmp) / "ca")
        cert = ca.issue("localhost", server=True)
        plain, ssl_port, controller = free_port(), free_port(), free_port()
        broker = BrokerProcess(Path(tmp), {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},"
                         f"CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port}",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.combined_path),
        })
        broker.port, broker.controller_port = plain, controller
        broker.start()
        sides = {
            "plaintext": {"bootstrap.servers": f"127.0.0.1:{plain}"},
            "tls": {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                    "ssl.ca.location": str(ca.cert_path)},
        }
        try:
            for round_ in range(rounds):
                order = ["plaintext", "tls"] if round_ % 2 == 0 else ["tls", "plaintext"]
                row: dict[str, float] = {}
                megabytes = n * RECORD_SIZE / 1e6
                for phase in ("produce", "consume"):
                    for side in order:
                        topic = f"{side}-{round_}"
                        cpu_before = cpu_seconds(broker.proc.pid)
                        client_before = own_cpu_seconds()
                        busiest = BusiestThread()
                        if phase == "produce":
                            _create(broker.bootstrap, topic)
                            elapsed = produce(sides[side], topic, n)
                        else:
                            elapsed = consume(sides[side], topic, n)
                        timed_end = time.perf_counter()
                        cpu_ms = (cpu_seconds(broker.proc.pid) - cpu_before) * 1000
                        client_ms = (own_cpu_seconds() - client_before) * 1000
                        row[f"{side}_{phase}_busiest"] = busiest.share(timed_end - elapsed,
                                                                       timed_end)
                        row[f"{side}_{phase}"] = megabytes / elapsed
                        row[f"{side}_{phase}_cpu"] = cpu_ms / megabytes
                        row[f"{side}_{phase}_client_cpu"] = client_ms / megabytes
                rows.append(row)
                print(f"round {round_}: " + ", ".join(
                    f"{k} {v:,.2f} {_unit(k)}"
                    for k, v in row.items()), flush=True)
        finally:
            broker.stop()
    load_after = load_average()

    def per_round(key: str) -> str:
        return ", ".join(f"{r[key]:,.1f}" for r in rows)

    def cpu(key: str) -> str:
        return (f"{statistics.median(r[f'{key}_cpu'] for r in rows):.2f} | "
                f"{statistics.median(r[f'{key}_client_cpu'] for r in rows):.2f} | "
                f"{statistics.median(r[f'{key}_busiest'] for r in rows):.2f}")

    def ratios(kind: str) -> list[float]:
        return [r[f"tls_{kind}"] / r[f"plaintext_{kind}"] for r in rows]

    produce_ratios, consume_ratios = ratios("produce"), ratios("consume")
    return "\n".join([
        "## TLS",
        "",
        (f"`python -m bench tls`{' --quick' if quick else ''}: {n:,} records of {RECORD_SIZE} B "
        f"per listener and round, {PARTITIONS} partitions, one broker with a PLAINTEXT and an "
        "SSL listener (TLS 1.3, EC P-256), confluent-kafka (librdkafka) producing (acks=1, "
        "linger.ms=5) and consuming. MB/s per round; ratios within a round (method in "
        f"`bench/tls_bench.py`). Load average before/after: {load_before} / {load_after} "
        "(2 cores shared with other agents' work)."),
        "",
        ("| path | MB/s per round | TLS / plaintext per round | median | broker ms CPU per MB "
         "(median) | client ms CPU per MB (median) | client's busiest thread, share of a core "
         "(median) | goal |"),
        "|---|---|---|---|---|---|---|---|",
        (f"| produce, plaintext | {per_round('plaintext_produce')} | | | "
         f"{cpu('plaintext_produce')} | |"),
        (f"| produce, TLS | {per_round('tls_produce')} | "
         f"{', '.join(f'{x:.2f}' for x in produce_ratios)} | "
         f"{statistics.median(produce_ratios):.2f} | {cpu('tls_produce')} | "
         "> 0.8 (Kafka: 0.6-0.8) |"),
        (f"| consume, plaintext (sendfile) | {per_round('plaintext_consume')} | | | "
         f"{cpu('plaintext_consume')} | |"),
        (f"| consume, TLS (1 MiB reads) | {per_round('tls_consume')} | "
         f"{', '.join(f'{x:.2f}' for x in consume_ratios)} | "
         f"{statistics.median(consume_ratios):.2f} | {cpu('tls_consume')} | "
         "> 0.8 (Kafka: 0.6-0.8) |"),
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    args = parser.parse_args()
    print(run(args.quick, args.records))


if __name__ == "__main__":
    main()
