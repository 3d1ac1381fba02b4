"""`odradek producer-perf-test`: Kafka's kafka-producer-perf-test.sh (ProducerPerformance).

Sends ``--num-records`` records of ``--record-size`` random uppercase letters (or payloads from
``--payload-file``, or increasing numbers with ``--payload-monotonic``) as fast as
``--throughput`` allows (-1: unthrottled), with the producer configured by ``--producer-props``
and ``--producer.config``. Every 5 seconds, and at the end, it prints Kafka's lines::

    500000 records sent, 99990.0 records/sec (9.54 MB/sec), 3.1 ms avg latency, 45.0 ms max latency.
    1000000 records sent, 100009.400884 records/sec (9.54 MB/sec), 3.05 ms avg latency,
    45.00 ms max latency, 2 ms 50th, 8 ms 95th, 17 ms 99th, 40 ms 99.9th.

(the last on one line). Latency is measured from ``send`` to the acknowledgement callback.
Ctrl-C stops the test without a summary, as Kafka's tool (which has no shutdown hook) does.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from odradek.cli.common import ToolArgumentParser, UsageExit, configure_logging
from odradek.cli.tool_options import load_properties_file
from odradek.client import KafkaConfigError, KafkaError, Producer, RecordMetadata

REPORTING_INTERVAL_MS = 5000
_PAYLOAD_POOL = 1 << 20


def arg_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(
        prog="producer-performance",
        description="This tool is used to verify the producer performance.")
    payload = parser.add_mutually_exclusive_group(required=True)
    parser.add_argument("--topic", required=True, metavar="TOPIC",
                        help="produce messages to this topic")
    parser.add_argument("--num-records", required=True, type=int, metavar="NUM-RECORDS",
                        dest="num_records", help="number of messages to produce")
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE", dest="record_size",
                         help="message size in bytes. Note that you must provide exactly one "
                              "of --record-size or --payload-file or --payload-monotonic.")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE", dest="payload_file",
                         help="file to read the message payloads from. This works only for "
                              "UTF-8 encoded text files. Payloads will be read from this file "
                              "and a payload will be randomly selected when sending messages.")
    payload.add_argument("--payload-monotonic", action="store_true", dest="payload_monotonic",
                         help="payload is monotonically increasing integer.")
    parser.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                        dest="payload_delimiter",
                        help="provides delimiter to be used when --payload-file is provided. "
                             "Defaults to new line. (default: \\n)")
    parser.add_argument("--throughput", required=True, type=float, metavar="THROUGHPUT",
                        help="throttle maximum message throughput to *approximately* "
                             "THROUGHPUT messages/sec. Set this to -1 to disable throttling.")
    parser.add_argument("--producer-props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                        dest="producer_props",
                        help="kafka producer related configuration properties like "
                             "bootstrap.servers,client.id etc. These configs take precedence "
                             "over those passed via --producer.config.")
    parser.add_argument("--producer.config", metavar="CONFIG-FILE", dest="producer_config",
                        help="producer config properties file.")
    parser.add_argument("--print-metrics", action="store_true", dest="print_metrics",
                        help="print out metrics at the end of the test.")
    parser.add_argument("--transactional-id", metavar="TRANSACTIONAL-ID",
                        dest="transactional_id", help="The transactionalId to use.")
    parser.add_argument("--transaction-duration-ms", type=int, metavar="TRANSACTION-DURATION",
                        dest="transaction_duration_ms",
                        help="The max age of each transaction.")
    return parser


class Stats:
    """Kafka's ProducerPerformance.Stats: counts, latency samples, 5-second windows."""

    def __init__(self, num_records: int, out: Any = None) -> None:
        self.out = out or sys.stdout
        self.start = time.time()
        self.window_start = self.start
        self.sampling = num_records // min(num_records, 500_000)
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = 0
        self.bytes = 0
        self.max_latency = 0
        self.total_latency = 0
        self.window_count = 0
        self.window_max_latency = 0
        self.window_total_latency = 0
        self.window_bytes = 0

    def record(self, latency: int, size: int, now: float) -> None:
        """Called from the producer's callbacks (one thread)."""
        self.count += 1
        self.bytes += size
        self.total_latency += latency
        self.max_latency = max(self.max_latency, latency)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency
        self.window_max_latency = max(self.window_max_latency, latency)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency)
        if (now - self.window_start) * 1000 >= REPORTING_INTERVAL_MS:
            self.print_window(now)
            self.window_start = now
            self.window_count = 0
            self.window_max_latency = 0
            self.window_total_latency = 0
            self.window_bytes = 0
        self.iteration += 1

    def print_window(self, now: float) -> None:
        elapsed_ms = max(1.0, (now - self.window_start) * 1000)
        records_per_sec = 1000.0 * self.window_count / elapsed_ms
        mb_per_sec = 1000.0 * self.window_bytes / elapsed_ms / (1024.0 * 1024.0)
        print(f"{self.window_count} records sent, {records_per_sec:.1f} records/sec "
              f"({mb_per_sec:.2f} MB/sec), "
              f"{self.window_total_latency / max(1, self.window_count):.1f} ms avg latency, "
              f"{float(self.window_max_latency):.1f} ms max latency.", file=self.out, flush=True)

    def print_total(self) -> None:
        elapsed_ms = max(1.0, (time.time() - self.start) * 1000)
        records_per_sec = 1000.0 * self.count / elapsed_ms
        mb_per_sec = 1000.0 * self.bytes / elapsed_ms / (1024.0 * 1024.0)
        samples = sorted(self.latencies)
        percentiles = [samples[int(p * len(samples))] if samples else 0
                       for p in (0.5, 0.95, 0.99, 0.999)]
        avg = self.total_latency / self.count if self.count else float("nan")
        print(f"{self.count} records sent, {records_per_sec:f} records/sec "
              f"({mb_per_sec:.2f} MB/sec), {avg:.2f} ms avg latency, "
              f"{float(self.max_latency):.2f} ms max latency, {percentiles[0]} ms 50th, "
              f"{percentiles[1]} ms 95th, {percentiles[2]} ms 99th, {percentiles[3]} ms 99.9th.",
              file=self.out, flush=True)


def read_props(producer_props: Sequence[str] | None, config_file: str | None) -> dict[str, str]:
    props: dict[str, str] = {}
    if config_file is not None:
        props.update(load_properties_file(config_file))
    for prop in producer_props or ():
        pieces = prop.split("=")
        if len(pieces) != 2:
            raise ValueError(f"Invalid property: {prop}")
        props[pieces[0]] = pieces[1]
    props.setdefault("client.id", "perf-producer-client")
    return props


class Payloads:
    """The payload of each record: random uppercase letters (seeded like Kafka's, so runs are
    comparable), file payloads, or the record number."""

    def __init__(self, record_size: int | None, payload_file: str | None, delimiter: str,
                 monotonic: bool) -> None:
        self.record_size = record_size
        self.monotonic = monotonic
        self.random = random.Random(0)
        self.file_payloads: list[bytes] = []
        if payload_file is not None:
            self.file_payloads = _read_payload_file(payload_file, delimiter)
        elif record_size is not None:
            # Slices of one random buffer: per-record randomness without a per-byte loop.
            self.pool = bytes(self.random.randrange(26) + 65
                              for _ in range(_PAYLOAD_POOL + record_size))

    def payload(self, index: int) -> bytes:
        if self.file_payloads:
            return self.file_payloads[self.random.randrange(len(self.file_payloads))]
        if self.record_size is not None:
            start = (index * 7919) % _PAYLOAD_POOL
            return self.pool[start:start + self.record_size]
        return str(index).encode()


def _read_payload_file(path: str, delimiter: str) -> list[bytes]:
    from pathlib import Path

    file = Path(path)
    print(f"Reading payloads from: {file.absolute()}")
    if not file.exists() or file.stat().st_size == 0:
        raise ValueError("File does not exist or empty file provided.")
    payloads = [p.encode() for p in file.read_text(encoding="utf-8").split(delimiter) if p]
    print(f"Number of messages read: {len(payloads)}")
    return payloads


class Throttler:
    """Kafka's ThroughputThrottler: sleep when ahead of the target rate."""

    MIN_SLEEP_S = 0.002

    def __init__(self, target_per_sec: float, start: float) -> None:
        self.target = target_per_sec
        self.start = start
        self.deficit = 0.0

    def throttle_if_needed(self, sent: int, now: float) -> None:
        if self.target <= 0:
            return
        elapsed = now - self.start
        if elapsed > 0 and sent / elapsed <= self.target:
            return
        self.deficit += 1.0 / self.target
        if self.deficit >= self.MIN_SLEEP_S:
            time.sleep(self.deficit)
            self.deficit = 0.0


def print_metrics(metrics: dict[str, float], client_id: str, out: Any = None) -> None:
    """Kafka's ToolsUtils.printMetrics layout."""
    out = out or sys.stdout
    names = {f"producer-metrics:{name}:{{client-id={client_id}}}": value
             for name, value in metrics.items()}
    width = max(len(name) for name in names)
    print(f"\n{'Metric Name':<{width}}   Value", file=out)
    for name in sorted(names):
        print(f"{name:<{width}} : {names[name]:.3f}", file=out)


def run_test(args: Any) -> int:
    if args.num_records <= 0:
        raise ValueError("--num-records should be greater than zero")
    if args.record_size is not None and args.record_size <= 0:
        raise ValueError("--record-size should be greater than zero")
    if args.producer_props is None and args.producer_config is None:
        raise ValueError("Either --producer-props or --producer.config must be specified.")
    if args.transactional_id or args.transaction_duration_ms:
        raise ValueError("Transactions are not supported yet by this producer")
    delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
    payloads = Payloads(args.record_size, args.payload_file, delimiter, args.payload_monotonic)
    props = read_props(args.producer_props, args.producer_config)
    producer = Producer(props)
    stats = Stats(args.num_records)
    start = time.time()
    throttler = Throttler(args.throughput, start)
    topic = args.topic

    def on_completion(sent_at: float, size: int, metadata: RecordMetadata | None,
                      error: KafkaError | None) -> None:
        now = time.time()
        if error is None:
            stats.record(int((now - sent_at) * 1000), size, now)
        else:
            print(error, file=sys.stderr)

    send = producer.send
    clock = time.time
    throttle = throttler.throttle_if_needed if args.throughput > 0 else None
    try:
        for index in range(args.num_records):
            payload = payloads.payload(index)
            sent_at = clock()
            send(topic, payload, callback=partial(on_completion, sent_at, len(payload)))
            if throttle is not None:
                throttle(index + 1, sent_at)
        if not args.print_metrics:
            producer.close()
            stats.print_total()
        else:
            producer.flush()
            stats.print_total()
            print_metrics(producer.metrics(), props["client.id"])
            producer.close()
    except BaseException:
        producer.close(timeout=0)
        raise
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    args_list = sys.argv[1:] if argv is None else argv
    parser = arg_parser()
    if not args_list:
        parser.print_help(sys.stdout)
        return 0
    try:
        args = parser.parse_args(args_list)
        return run_test(args)
    except UsageExit as exc:
        return exc.code
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, KafkaConfigError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
