"""Replication: what RF=3 with acks=all costs against RF=1 with acks=1, on one cluster.

A 3-node cluster of combined broker+controller processes on loopback (the test suite's
`QuorumCluster`). Two 6-partition topics: `rf1` (replication factor 1) and `rf3` (replication
factor 3, min.insync.replicas=2).

- **throughput**: kcat produces N x 100 B records (one per line of a file) into `rf1` with
  acks=1 and into `rf3` with acks=all, alternating rounds on the same running cluster; the
  ratio is RF=3 acks=all records/s over RF=1 acks=1 records/s of the same round pair.
- **latency**: a confluent-kafka producer sends one record every 1/rate s for a fixed time
  (`linger.ms=0`), into `rf1` with acks=1 and into `rf3` with acks=all; send-to-ack p50/p99.
- **catch-up**: one follower of a 1-partition RF=3 topic (min.insync.replicas=1) is paused
  (SIGSTOP) while kcat writes M MiB into it with acks=1 and until it has left the ISR (fenced
  when its session lapses); then it is resumed and timed until the leader reports it back in
  the ISR (it re-registers, fetches the M MiB and is added back).
Needs Debian's kcat.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))

from broker_process import wait_until
from quorum_cluster import HOST, QuorumCluster

from bench.broker_bench import _latency, _p50_ms, _p99_ms, _write_records

NAME = "replication"
PARTITIONS = 6
RECORD_SIZE = 100
DEFAULT_RECORDS = 1_000_000
QUICK_RECORDS = 100_000
ROUNDS = 3
# Non-batched acks=all requests (linger 0, one record each) saturate the 3-process cluster on
# 2 cores near 1000/s (measured: p50 1.3 s at 1000/s, 1.4 ms at 500/s): latency is measured
# below that knee.
LATENCY_RATE = 500
LATENCY_SECONDS = 20
CATCH_UP_MIB = 1024
QUICK_CATCH_UP_MIB = 100


class _Bootstrap:
    """What `broker_bench._latency` needs of a broker: its bootstrap address."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


def _kcat_produce(bootstrap: str, topic: str, data_file: Path, acks: str) -> float:
    start = time.perf_counter()
    with open(data_file, "rb") as stdin:
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", f"acks={acks}",
                        "-X", "linger.ms=20", "-X", "batch.num.messages=10000",
                        "-X", "queue.buffering.max.kbytes=1048576"],
                       stdin=stdin, check=True, timeout=1800)
    return time.perf_counter() - start


def _isr(cluster: QuorumCluster, topic: str, asked: int | None = None) -> list[int]:
    """The ISR of partition 0 as node `asked` (default: the first that answers) reports it."""
    for node in cluster.nodes.values():
        if node.running and asked in (None, node.node_id):
            response = node.metadata(topics=[topic])
            if response is not None and response.topics[0].error_code == 0:
                return sorted(response.topics[0].partitions[0].isr_nodes)
    return []


def _leader(cluster: QuorumCluster, topic: str) -> int:
    response = cluster.nodes[1].metadata(topics=[topic])
    return response.topics[0].partitions[0].leader_id


def _create(cluster: QuorumCluster, topic: str, partitions: int, rf: int, min_isr: int) -> None:
    def created() -> bool:
        error = cluster.nodes[1].create_topic(
            topic, partitions=partitions, replication_factor=rf,
            configs={"min.insync.replicas": str(min_isr)})
        return error in (0, 36)  # NONE, TOPIC_ALREADY_EXISTS
    wait_until(created, 60, interval=0.5, message=f"topic {topic}")
    wait_until(lambda: len(_isr(cluster, topic)) == rf, 60, interval=0.2,
               message=f"{topic} fully in sync")


def run(quick: bool = False, records: int | None = None) -> str:
    n = records or (QUICK_RECORDS if quick else DEFAULT_RECORDS)
    catch_up_mib = QUICK_CATCH_UP_MIB if quick else CATCH_UP_MIB
    with tempfile.TemporaryDirectory(prefix="odradek-replication-bench-") as tmp:
        root = Path(tmp)
        data_file = root / "records.txt"
        _write_records(data_file, n)
        cluster = QuorumCluster(root / "cluster", size=3)
        cluster.format()
        cluster.start()
        try:
            cluster.wait_for_leader(60)
            bootstrap = ",".join(f"{HOST}:{node.port}" for node in cluster.nodes.values())
            _create(cluster, "rf1", PARTITIONS, 1, 1)
            _create(cluster, "rf3", PARTITIONS, 3, 2)
            pairs = []
            for _ in range(ROUNDS):
                rf1 = n / _kcat_produce(bootstrap, "rf1", data_file, "1")
                rf3 = n / _kcat_produce(bootstrap, "rf3", data_file, "all")
                pairs.append((rf1, rf3))
            latency_rf1 = _latency(_Bootstrap(bootstrap), "rf1", LATENCY_RATE,
                                   LATENCY_SECONDS, acks="1")
            latency_rf3 = _latency(_Bootstrap(bootstrap), "rf3", LATENCY_RATE,
                                   LATENCY_SECONDS, acks="all")
            catch_up_s, catch_up_bytes = _catch_up(cluster, bootstrap, root, catch_up_mib)
        finally:
            cluster.stop()
            cluster.kill_all()
    ratios = [rf3 / rf1 for rf1, rf3 in pairs]
    rows = [
        "| metric | result | notes |",
        "|---|---|---|",
        f"| RF=1 acks=1 produce (kcat) | median {statistics.median(p[0] for p in pairs):,.0f} "
        f"records/s (rounds {', '.join(f'{p[0]:,.0f}' for p in pairs)}) | {n:,} x 100 B, "
        f"{PARTITIONS} partitions |",
        f"| RF=3 acks=all produce (kcat) | median {statistics.median(p[1] for p in pairs):,.0f} "
        f"records/s (rounds {', '.join(f'{p[1]:,.0f}' for p in pairs)}) | "
        f"min.insync.replicas=2 |",
        f"| RF=3 acks=all / RF=1 acks=1 | median {statistics.median(ratios):.2f}x "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)}) | goal >= 0.5x |",
        f"| produce latency RF=1 acks=1 at {LATENCY_RATE}/s | p50 {_p50_ms(latency_rf1):.1f} ms, "
        f"p99 {_p99_ms(latency_rf1):.1f} ms | {LATENCY_SECONDS} s, confluent-kafka, linger 0 |",
        f"| produce latency RF=3 acks=all at {LATENCY_RATE}/s | p50 {_p50_ms(latency_rf3):.1f} "
        f"ms, p99 {_p99_ms(latency_rf3):.1f} ms | same |",
        f"| paused follower catching up {catch_up_bytes / 2**20:,.0f} MiB | {catch_up_s:.1f} s "
        f"({catch_up_bytes / 2**20 / catch_up_s:,.0f} MiB/s) until back in the ISR | "
        f"replica.fetch.max.bytes default (1 MiB) |",
    ]
    header = (f"## Replication\n\nMeasured by `python -m bench replication` on this project's "
              f"machine (2 cores, loopback, 3 combined broker+controller processes), "
              f"{time.strftime('%Y-%m-%d')}. Method: see `bench/replication_bench.py`; "
              f"RF=1 and RF=3 rounds alternate on the same cluster, so each ratio compares "
              f"runs minutes apart on the same processes.\n\n")
    return header + "\n".join(rows) + "\n"


def _catch_up(cluster: QuorumCluster, bootstrap: str, root: Path,
              mib: int) -> tuple[float, int]:
    _create(cluster, "catch-up", 1, 3, 1)
    leader = _leader(cluster, "catch-up")
    controller, _epoch = cluster.wait_for_leader(60)
    # A follower that is not the active controller: pausing that would stall the metadata.
    follower = next(node for node_id, node in cluster.nodes.items()
                    if node_id not in (leader, controller))
    payload = root / "catch-up.txt"
    line = b"c" * 1023 + b"\n"
    with open(payload, "wb") as out:
        for _ in range(mib * 1024):
            out.write(line)
    follower.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        _kcat_produce(bootstrap, "catch-up", payload, "1")
        # Out of the ISR first (fenced once its session lapses), so "back in the ISR" is the
        # moment it has caught up.
        wait_until(lambda: follower.node_id not in _isr(cluster, "catch-up", leader), 120,
                   interval=0.2, message="the paused follower out of the ISR")
    finally:
        follower.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    start = time.perf_counter()
    # Asked of the leader: the resumed follower's own image still shows it in the ISR.
    wait_until(lambda: follower.node_id in _isr(cluster, "catch-up", leader), 1800,
               interval=0.2,
               message="the paused follower back in the ISR")
    return time.perf_counter() - start, mib * 1024 * 1024
