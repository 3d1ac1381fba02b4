"""Metrics: produce and consume throughput of a broker whose metrics endpoint is scraped every
second against one without the endpoint, in one run (issue 20: goal >= 0.97x).

Run: `python -m bench metrics` (writes docs/performance.md) or `python bench/metrics_bench.py
[--quick]` (prints the section only).

Two Odradek brokers run side by side as child processes on loopback: "off" without
`metrics.prometheus.listener`, "on" with it, scraped once a second by a thread of this process
(as Prometheus would, `scrape_interval: 1s`) for as long as the run lasts. Per round the same N x
1 KiB records go to a topic of each broker (6 partitions, acks=1, linger.ms=5, confluent-kafka),
then a consumer reads them back (the clients and timing of `bench/tls_bench.py`). The two
brokers take turns first per round, and ratios are taken within a round. Both brokers count
BrokerTopicMetrics (they are counted with the endpoint off too: a dict lookup and four integer
adds per partition of a produce or fetch), so what the ratio measures is the endpoint and its
scrapes; their own cost is reported as the scrape's latency and the broker's CPU per scrape.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # BrokerProcess: a broker on random local ports
sys.path.insert(0, str(ROOT))

from broker_process import BrokerProcess, free_port, wait_until

from bench.tls_bench import RECORD_SIZE, _create, consume, cpu_seconds, produce

NAME = "metrics"
SCRAPE_INTERVAL_S = 1.0


class Scraper:
    """Scrapes a metrics URL every second until stopped; keeps each scrape's latency."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latencies_ms: list[float] = []
        self.size = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as response:
                self.size = len(response.read())
            self.latencies_ms.append((time.perf_counter() - started) * 1000)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def _scrape_cost(broker: BrokerProcess, url: str, scrapes: int = 50) -> float:
    """The broker's CPU milliseconds per scrape, scraped back to back while idle."""
    before = cpu_seconds(broker.proc.pid)
    for _ in range(scrapes):
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
    return (cpu_seconds(broker.proc.pid) - before) * 1000 / scrapes


def _load_avg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(quick: bool = False, records: int | None = None) -> str:
    n = records or (30_000 if quick else 300_000)
    rounds = 2 if quick else 4
    rows: list[dict[str, float]] = []
    load_before = _load_avg()
    with tempfile.TemporaryDirectory(prefix="odradek-bench-metrics-") as tmp:
        metrics_port = free_port()
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        (Path(tmp) / "off").mkdir()
        (Path(tmp) / "on").mkdir()
        brokers = {
            "off": BrokerProcess(Path(tmp) / "off"),
            "on": BrokerProcess(Path(tmp) / "on",
                                {"metrics.prometheus.listener": f"http://127.0.0.1:{metrics_port}"}),
        }
        for broker in brokers.values():
            broker.start()
        scraper = Scraper(url)
        try:
            wait_until(lambda: urllib.request.urlopen(url, timeout=5).status == 200, 30,
                       message="the metrics endpoint")
            scraper.start()
            for round_ in range(rounds):
                order = ["off", "on"] if round_ % 2 == 0 else ["on", "off"]
                row: dict[str, float] = {}
                megabytes = n * RECORD_SIZE / 1e6
                for phase in ("produce", "consume"):
                    for side in order:
                        broker = brokers[side]
                        settings = {"bootstrap.servers": broker.bootstrap}
                        topic = f"bench-{round_}"
                        cpu_before = cpu_seconds(broker.proc.pid)
                        if phase == "produce":
                            _create(broker.bootstrap, topic)
                            elapsed = produce(settings, topic, n)
                        else:
                            elapsed = consume(settings, topic, n)
                        row[f"{side}_{phase}"] = megabytes / elapsed
                        row[f"{side}_{phase}_cpu"] = (
                            cpu_seconds(broker.proc.pid) - cpu_before) * 1000 / megabytes
                rows.append(row)
                print(f"round {round_}: " + ", ".join(
                    f"{k} {v:,.2f} {'ms CPU/MB' if k.endswith('_cpu') else 'MB/s'}"
                    for k, v in row.items()), flush=True)
            scraper.stop()
            scrape_cpu_ms = _scrape_cost(brokers["on"], url)
        finally:
            scraper.stop()
            for broker in brokers.values():
                broker.stop()
    load_after = _load_avg()

    def per_round(key: str) -> str:
        return ", ".join(f"{r[key]:,.1f}" for r in rows)

    def cpu(key: str) -> str:
        return f"{statistics.median(r[f'{key}_cpu'] for r in rows):.2f}"

    def ratios(kind: str) -> list[float]:
        return [r[f"on_{kind}"] / r[f"off_{kind}"] for r in rows]

    lines = [
        "## Metrics endpoint",
        "",
        (f"`python -m bench metrics`{' --quick' if quick else ''}: {n:,} records of "
         f"{RECORD_SIZE} B per broker and round, {rounds} rounds, 6 partitions; two brokers "
         "side by side, one without `metrics.prometheus.listener` (off), one with it, scraped "
         f"every {SCRAPE_INTERVAL_S:.0f} s all along (on); confluent-kafka producing (acks=1, "
         "linger.ms=5) and consuming; ratios within a round (method in "
         f"`bench/metrics_bench.py`). Load average before/after: {load_before} / "
         f"{load_after} (2 cores shared with other agents' work)."),
        "",
        ("| path | MB/s per round | on / off per round | median | broker ms CPU per MB "
         "(median) | goal |"),
        "|---|---|---|---|---|---|",
    ]
    for kind in ("produce", "consume"):
        rs = ratios(kind)
        lines += [
            f"| {kind}, metrics off | {per_round(f'off_{kind}')} | | | {cpu(f'off_{kind}')} | |",
            (f"| {kind}, scraped every second | {per_round(f'on_{kind}')} | "
             f"{', '.join(f'{x:.2f}' for x in rs)} | {statistics.median(rs):.2f} | "
             f"{cpu(f'on_{kind}')} | >= 0.97 |"),
        ]
    latencies = scraper.latencies_ms
    lines += [
        "",
        (f"{len(latencies)} scrapes during the load: median {statistics.median(latencies):.1f} "
         f"ms, max {max(latencies):.1f} ms, {scraper.size:,} bytes each; an idle scrape costs "
         f"the broker {scrape_cpu_ms:.2f} ms of CPU (its event loop copies the state in one "
         "callback; the text is formatted on the HTTP server's thread)."),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    args = parser.parse_args()
    print(run(args.quick, args.records))


if __name__ == "__main__":
    main()
