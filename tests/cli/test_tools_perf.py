"""`odradek producer-perf-test` and `odradek consumer-perf-test`: their output parses with
Kafka's formats (regexes of the summary lines), against a real broker."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from odradek.cli.producer_perf_test import Stats

ODRADEK = [sys.executable, "-m", "odradek.cli.main"]

PRODUCER_SUMMARY = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rate>\d+\.\d{6}) records/sec "
    r"\((?P<mb>\d+\.\d{2}) MB/sec\), (?P<avg>\d+\.\d{2}) ms avg latency, "
    r"(?P<max>\d+\.\d{2}) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$")
PRODUCER_WINDOW = re.compile(
    r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d{2} MB/sec\), \d+\.\d ms avg latency, "
    r"\d+\.\d ms max latency\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}:\d{3}"
CONSUMER_LINE = re.compile(
    rf"^(?P<start>{DATE}), (?P<end>{DATE}), (?P<mb>\d+\.\d{{4}}), (?P<mbsec>\d+\.\d{{4}}), "
    r"(?P<messages>\d+), (?P<msgsec>\d+\.\d{4}), (?P<rebalance>\d+), (?P<fetch>\d+), "
    r"(?P<fetchmb>\d+\.\d{4}), (?P<fetchmsg>\d+\.\d{4})$")


def odradek(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ODRADEK, *args], capture_output=True, text=True, check=False,
                          timeout=timeout)


@pytest.fixture(scope="module")
def perf_topic(odradek_broker) -> str:
    """A topic filled by one producer-perf-test run (20,000 records of 100 bytes)."""
    topic = f"perf-{uuid.uuid4().hex[:8]}"
    result = odradek("producer-perf-test", "--topic", topic, "--num-records", "20000",
                     "--record-size", "100", "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={odradek_broker.bootstrap}", "linger.ms=5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    summary = PRODUCER_SUMMARY.match(lines[-1])
    assert summary, lines
    assert summary["records"] == "20000"
    assert float(summary["rate"]) > 0
    assert int(summary["p50"]) <= int(summary["p95"]) <= int(summary["p99"]) <= \
        int(summary["p999"]) <= float(summary["max"])
    assert all(PRODUCER_WINDOW.match(line) for line in lines[:-1])
    return topic


def test_producer_perf_test_summary(perf_topic):
    assert perf_topic  # the fixture ran the tool and checked its output


def test_producer_perf_test_throttles_and_prints_metrics(odradek_broker):
    started = time.monotonic()
    result = odradek("producer-perf-test", "--topic", f"perf-{uuid.uuid4().hex[:8]}",
                     "--num-records", "300", "--payload-monotonic", "--throughput", "200",
                     "--print-metrics", "--producer-props",
                     f"bootstrap.servers={odradek_broker.bootstrap}")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed > 1.2  # 300 records at 200/s
    lines = result.stdout.splitlines()
    summary = next(PRODUCER_SUMMARY.match(line) for line in lines if "records sent," in line)
    assert summary["records"] == "300"
    assert float(summary["rate"]) < 260
    assert re.match(r"^Metric Name\s+Value$", lines[lines.index("") + 1])
    metric = re.compile(r"^producer-metrics:record-send-total:\{client-id=perf-producer-client\}"
                        r"\s+: 300\.000$")
    assert any(metric.match(line) for line in lines)


def test_stats_print_a_window_every_five_seconds():
    out = io.StringIO()
    stats = Stats(10, out)
    start = stats.start
    for i in range(10):
        stats.record(latency=i, size=100, now=start + i)  # one record per second
    window_lines = out.getvalue().splitlines()
    assert len(window_lines) == 1 and PRODUCER_WINDOW.match(window_lines[0])
    assert window_lines[0].startswith("6 records sent, 1.2 records/sec")


def test_producer_perf_test_usage_errors():
    result = odradek("producer-perf-test", "--topic", "t", "--num-records", "5",
                     "--throughput", "-1", "--record-size", "10")
    assert result.returncode == 1
    assert "Either --producer-props or --producer.config must be specified." in result.stderr
    result = odradek("producer-perf-test", "--topic", "t")
    assert result.returncode == 1
    assert "required" in result.stderr and "producer-performance" in result.stderr


def test_consumer_perf_test(odradek_broker, perf_topic):
    result = odradek("consumer-perf-test", "--bootstrap-server", odradek_broker.bootstrap,
                     "--topic", perf_topic, "--messages", "20000")
    assert result.returncode == 0, result.stderr
    header, line = result.stdout.splitlines()
    assert header == CONSUMER_HEADER
    match = CONSUMER_LINE.match(line)
    assert match, line
    assert match["messages"] == "20000"
    assert match["mb"] == f"{20000 * 100 / 1024 / 1024:.4f}"
    assert match["start"] <= match["end"]


def test_consumer_perf_test_timeout_warning_and_detailed_stats(odradek_broker, perf_topic):
    result = odradek("consumer-perf-test", "--bootstrap-server", odradek_broker.bootstrap,
                     "--topic", perf_topic, "--messages", "25000", "--timeout", "1000",
                     "--show-detailed-stats", "--reporting-interval", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("time, threadId, data.consumed.in.MB, MB.sec, "
                               "data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms")
    assert lines[-1] == ("WARNING: Exiting before consuming the expected number of messages: "
                         "timeout (1000 ms) exceeded. You can use the --timeout option to "
                         "increase the timeout.")
    detail = re.compile(rf"^{DATE}, 0, \d+\.\d{{4}}, \d+\.\d{{4}}, \d+, \d+\.\d{{4}}, \d+, \d+, "
                        r"\d+\.\d{4}, \d+\.\d{4}$")
    assert all(detail.match(line) for line in lines[1:-1])


def test_consumer_perf_test_usage():
    result = odradek("consumer-perf-test", "--bootstrap-server", "x:1", "--topic", "t")
    assert result.returncode == 1
    assert 'Missing required argument "[messages]"' in result.stderr


def test_ctrl_c_stops_the_producer_perf_test_cleanly(odradek_broker):
    process = subprocess.Popen([*ODRADEK, "producer-perf-test", "--topic",
                                f"perf-{uuid.uuid4().hex[:8]}", "--num-records", "100000000",
                                "--record-size", "100", "--throughput", "2000",
                                "--producer-props",
                                f"bootstrap.servers={odradek_broker.bootstrap}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        process.send_signal(signal.SIGINT)
        _stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "Traceback" not in stderr
