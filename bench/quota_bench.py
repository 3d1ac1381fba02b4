"""Client quotas and connection limits (issue 18): a producer limited to 1 MB/s held at it
over 30 s while an unlimited producer shares the broker; a consumer limited to 1 MB/s; a client
opening 10,000 connections against `max.connections.per.ip=100` while another is served.

Run: `python -m bench quota` (writes docs/performance.md) or `python bench/quota_bench.py
[--quick]` (prints the section only).

One Odradek broker runs as a child process on loopback with Kafka's default quota window
(`quota.window.num=11` samples of `quota.window.size.seconds=1`). Clients are confluent-kafka
(librdkafka) running flat out in threads (1 KB records, batch.size 64 KiB); the limited one
gets `producer_byte_rate=1048576` (or `consumer_byte_rate`) on its client id. Rates are bytes
acknowledged (delivered) between two instants after a warm-up of one window span (11 s), in
which Kafka lets a new client burst to what the window allows. The connection flood needs a
file descriptor limit above 10,000 (raised to the hard limit when possible; reported).
"""

from __future__ import annotations

import argparse
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from broker_process import BrokerProcess, closed_by_peer_now, wait_until
from security.quota_load import alter_quota, consume_flat_out, produce_flat_out
from server.raw_client import RawClient, produce_request

from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.records import build_batch

NAME = "quota"
MB = 1024 * 1024


def _measure(loads, warm_up: float, span: float, whole_spans: float = 0) -> list[float]:
    """Each load's rate over `span` seconds after `warm_up` (and, with `whole_spans`, also
    over that longer time: a whole number of quota window spans, see `run`)."""
    start = time.monotonic() + warm_up
    end = start + max(span, whole_spans)
    while time.monotonic() < end + 1:
        time.sleep(0.2)
    rates = [load.rate(start, start + span) for load in loads]
    if whole_spans:
        rates += [load.rate(start, start + whole_spans) for load in loads]
    return rates


def producers(broker: BrokerProcess, warm_up: float, span: float,
              whole_spans: float) -> tuple[float, float, float, int]:
    with RawClient(broker.host, broker.port) as admin:
        alter_quota(admin, [("client-id", "limited")], producer_byte_rate=MB)
    limited = produce_flat_out(broker.bootstrap, "bench-quota-produce", "limited")
    free = produce_flat_out(broker.bootstrap, "bench-quota-produce", "free")
    try:
        limited_rate, free_rate, limited_whole, _ = _measure([limited, free], warm_up, span,
                                                             whole_spans)
    finally:
        limited.finish()
        free.finish()
    return limited_rate, free_rate, limited_whole, limited.throttle_max_ms


def free_alone(broker: BrokerProcess, span: float) -> float:
    free = produce_flat_out(broker.bootstrap, "bench-quota-produce", "free-alone")
    try:
        (rate,) = _measure([free], 2, span)
    finally:
        free.finish()
    return rate


def consumer(broker: BrokerProcess, warm_up: float, span: float,
             whole_spans: float) -> tuple[float, float, int]:
    with RawClient(broker.host, broker.port) as admin:
        admin.create_topic("bench-quota-consume")
        batch = build_batch([(int(time.time() * 1000), None, b"c" * 1000)] * 1000)
        for _ in range(int((warm_up + span) * 1.5) + 20):
            admin.call(0, 9, produce_request("bench-quota-consume", 0, batch))
        alter_quota(admin, [("client-id", "limited-consumer")], consumer_byte_rate=MB)
    load = consume_flat_out(broker.bootstrap, "bench-quota-consume", "limited-consumer")
    try:
        rate, whole = _measure([load], warm_up, span, whole_spans)
    finally:
        load.finish()
    return rate, whole, load.throttle_max_ms


def _served_from(broker: BrokerProcess, source: str) -> float | None:
    """Seconds an ApiVersions round trip from `source` takes, None when refused."""
    started = time.perf_counter()
    try:
        with socket.create_connection((broker.host, broker.port), timeout=10,
                                      source_address=(source, 0)) as s:
            s.sendall(framing.encode_request(18, 3, 1, "probe", m.ApiVersionsRequest(
                client_software_name="probe", client_software_version="1")))
            if len(s.recv(4)) != 4:
                return None
    except OSError:
        return None
    return time.perf_counter() - started


def connection_flood(broker: BrokerProcess, count: int) -> dict[str, float]:
    opened: list[socket.socket] = []
    refused_at_connect = 0
    started = time.perf_counter()
    try:
        for _ in range(count):
            try:
                opened.append(socket.create_connection((broker.host, broker.port), timeout=10))
            except OSError:
                refused_at_connect += 1
        connect_s = time.perf_counter() - started


        wait_until(lambda: sum(closed_by_peer_now(s, 0.001) for s in opened) >= len(opened) - 100, 120,
                   interval=1, message="the connections over the limit to be closed")
        alive = sum(not closed_by_peer_now(s, 0.001) for s in opened)
        served_s = _served_from(broker, "127.0.0.2")
    finally:
        for s in opened:
            s.close()
    return {"opened": len(opened) + refused_at_connect, "alive": alive,
            "connect_s": connect_s, "other_client_s": served_s if served_s is not None else -1}


def _raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        new = hard if hard == resource.RLIM_INFINITY else min(hard, max(wanted, soft))
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _row(client: str, quota: str, rate: float, whole: float, throttle: int) -> str:
    return (f"| {client} | {quota} | {rate / MB:.3f} MiB/s | {(rate - MB) / MB * 100:+.1f}% | "
            f"{whole / MB:.3f} MiB/s | {(whole - MB) / MB * 100:+.1f}% | {throttle} |")


def run(quick: bool = False) -> str:
    span = 10 if quick else 30
    warm_up = 6 if quick else 11
    samples = 5 if quick else 11
    whole_spans = 2 * samples if quick else 3 * samples  # seconds: whole window spans
    flood = 2000 if quick else 10_000
    fd_limit = _raise_fd_limit(flood + 1000)  # the broker inherits it
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), {
            "quota.window.num": str(samples), "quota.window.size.seconds": "1",
            "max.connections.per.ip": "100"}).start()
        try:
            with RawClient(broker.host, broker.port) as admin:
                admin.create_topic("bench-quota-produce")
            alone = free_alone(broker, 8 if quick else 15)
            limited, free, limited_whole, throttle = producers(broker, warm_up, span,
                                                               whole_spans)
            consumed, consumed_whole, consumer_throttle = consumer(broker, warm_up, span,
                                                                   whole_spans)
            flood_result = connection_flood(broker, flood) if fd_limit > flood + 200 else None
        finally:
            broker.stop()
    lines = [
        "## Client quotas and connection limits",
        "",
        "Method: One Odradek broker " + __doc__.split("One Odradek broker")[1].strip(),
        "",
        (f"Measured over {span} s, and over {whole_spans} s ({whole_spans // samples} whole "
         f"spans of the {samples}-sample window), after {warm_up} s of warm-up. A new client "
         "may first burst to what the whole window allows (Kafka's Rate counts at least "
         "`samples - 1` windows); that burst leaves the window one span later and lets the "
         "next one through, so the rate is exact over whole spans and within a burst of it "
         "over other lengths. The machine is shared by other jobs: rates of unlimited "
         "clients vary with its load."),
        "",
        (f"| client | quota | over {span} s | error | over {whole_spans} s | error | "
        "max throttle_time_ms seen |"),
        "|---|---|---|---|---|---|---|",
        _row("producer `limited`", "producer_byte_rate 1 MiB/s", limited, limited_whole,
             throttle),
        f"| producer `free`, alongside | none | {free / MB:.1f} MiB/s | | | | 0 |",
        f"| producer `free-alone`, before | none | {alone / MB:.1f} MiB/s | | | | 0 |",
        _row("consumer `limited-consumer`", "consumer_byte_rate 1 MiB/s", consumed,
             consumed_whole, consumer_throttle),
        "",
    ]
    if flood_result is None:
        lines.append(f"Connection flood skipped: file descriptor limit {fd_limit} is below "
                     f"{flood + 200}.")
    else:
        lines.append(
            f"Connection flood: {flood_result['opened']:.0f} connections from 127.0.0.1 with "
            f"`max.connections.per.ip=100` opened in {flood_result['connect_s']:.1f} s; "
            f"{flood_result['alive']:.0f} left open by the broker (the rest closed); a client "
            f"from 127.0.0.2 was answered in {flood_result['other_client_s'] * 1000:.0f} ms "
            f"(fd limit {fd_limit}).")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(quick=parser.parse_args().quick))
