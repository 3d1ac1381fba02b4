"""`odradek consumer-perf-test`: Kafka's kafka-consumer-perf-test.sh (ConsumerPerformance).

Consumes ``--messages`` records of ``--topic`` (every partition, from the earliest offset, or
the latest with ``--from-latest``) and prints Kafka's CSV::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \\
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2024-05-01 10:00:00:000, 2024-05-01 10:00:05:000, 95.3674, 19.0735, 1000000, 200000.0000, \\
12, 4988, 19.1194, 200481.1548

Without consumer groups the partitions are assigned directly; ``rebalance.time.ms`` is the time
spent finding the partitions and their leaders (what a group join covers in Kafka), and
``--group`` only names the run. ``--show-detailed-stats`` prints a line per
``--reporting-interval``. Ctrl-C stops without the final line, as Kafka's tool does.
"""

from __future__ import annotations

import random
import re
import sys
import time
from datetime import datetime
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    load_properties_file,
    run,
)
from odradek.client import Consumer, KafkaConfigError, KafkaError, TopicPartition

HEADER_FIELDS = ("rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")

OPTIONS = [
    Option("bootstrap-server", "REQUIRED unless --broker-list(deprecated) is specified. The "
           "server(s) to connect to.", "server to connect to"),
    Option("broker-list", "DEPRECATED, use --bootstrap-server instead; ignored if "
           "--bootstrap-server is specified. The broker list string in the form "
           "HOST1:PORT1,HOST2:PORT2.", "broker-list"),
    Option("consumer.config", "Consumer config properties file.", "config file"),
    Option("date-format", "The date format to use for formatting the time field. See "
           "java.text.SimpleDateFormat for options.", "date format",
           default="yyyy-MM-dd HH:mm:ss:SSS"),
    Option("fetch-size", "The amount of data to fetch in a single request.", "size", int,
           1024 * 1024),
    Option("from-latest", "If the consumer does not already have an established offset to "
           "consume from, start with the latest message present in the log rather than the "
           "earliest message."),
    Option("group", "The group id to consume on.", "gid",
           default=f"perf-consumer-{random.randrange(100_000)}"),
    Option("hide-header", "If set, skips printing the header for the stats"),
    Option("include", "Regular expression specifying list of topics to include for "
           "consumption.", "Java regex (String)"),
    Option("messages", "REQUIRED: The number of messages to send or consume", "count", int,
           type_name="Long"),
    Option("print-metrics", "Print out the metrics."),
    Option("reporting-interval", "Interval in milliseconds at which to print progress info.",
           "interval_ms", int, 5000, type_name="Long"),
    Option("show-detailed-stats", "If set, stats are reported for each reporting interval as "
           "configured by reporting-interval"),
    Option("socket-buffer-size", "The size of the tcp RECV size.", "size", int,
           2 * 1024 * 1024),
    Option("timeout", "The maximum allowed time in milliseconds between returned records.",
           "milliseconds", int, 10_000, optional_argument=True, type_name="Long"),
    Option("topic", "REQUIRED: The topic to consume from.", "topic"),
]
PARSER = OptionParser(OPTIONS, "This tool is used to verify the consumer performance.")

_JAVA_DATE = [("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"),
              ("ss", "%S")]


def format_date(pattern: str, epoch_ms: float) -> str:
    """A java.text.SimpleDateFormat pattern (the common letters) for local time."""
    moment = datetime.fromtimestamp(epoch_ms / 1000)
    text = pattern
    for java, python in _JAVA_DATE:
        text = text.replace(java, python)
    text = text.replace("SSS", f"{moment.microsecond // 1000:03d}")
    return moment.strftime(text)


def print_header(detailed: bool, out: Any) -> None:
    if detailed:
        print("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
              + HEADER_FIELDS, file=out)
    else:
        print("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
              "nMsg.sec, " + HEADER_FIELDS, file=out)


def consumer_props(options: ParsedOptions, bootstrap: str) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if options.has("consumer.config"):
        props.update(load_properties_file(options.value("consumer.config")))
    props["bootstrap.servers"] = bootstrap
    props["receive.buffer.bytes"] = str(options.value("socket-buffer-size"))
    props["max.partition.fetch.bytes"] = str(options.value("fetch-size"))
    props["auto.offset.reset"] = "latest" if options.has("from-latest") else "earliest"
    props["check.crcs"] = "false"
    props.setdefault("client.id", "perf-consumer-client")
    props.pop("group.id", None)  # partitions are assigned: no group (see the module doc)
    return props


def assign(consumer: Consumer, options: ParsedOptions) -> None:
    if options.has("topic"):
        topic = options.value("topic")
        partitions = consumer.partitions_for(topic)
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        return
    pattern = re.compile(options.value("include"))
    consumer.assign([TopicPartition(name, p)
                     for name, parts in sorted(consumer.list_topics().items())
                     if pattern.fullmatch(name) for p in parts])


class Progress:
    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0


def consume(consumer: Consumer, options: ParsedOptions, progress: Progress,
            join_ms: int, out: Any) -> None:
    """Kafka's ConsumerPerformance.consume loop."""
    num_messages = options.value("messages")
    timeout_ms = options.value("timeout")
    if timeout_ms is None:
        timeout_ms = 10_000
    interval_ms = options.value("reporting-interval")
    detailed = options.has("show-detailed-stats")
    date_format = options.value("date-format")
    now = time.time() * 1000
    last_report = now
    last_consumed = now
    last_bytes = last_messages = 0
    while progress.messages < num_messages and now - last_consumed <= timeout_ms:
        if consumer.assignment():
            records = consumer.poll(100)
        else:  # no partitions (yet): look again
            time.sleep(0.1)
            assign(consumer, options)
            records = []
        now = time.time() * 1000
        if records:
            last_consumed = now
        for record in records:
            progress.messages += 1
            if record.key is not None:
                progress.bytes += len(record.key)
            if record.value is not None:
                progress.bytes += len(record.value)
            if now - last_report >= interval_ms:
                if detailed:
                    print_progress(progress, last_bytes, last_messages, last_report, now,
                                   date_format, join_ms, out)
                    join_ms = 0
                last_report = now
                last_messages = progress.messages
                last_bytes = progress.bytes
    if progress.messages < num_messages:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
              f"({timeout_ms} ms) exceeded. You can use the --timeout option to increase the "
              "timeout.", file=out)


def print_progress(progress: Progress, last_bytes: int, last_messages: int, start_ms: float,
                   end_ms: float, date_format: str, join_ms: int, out: Any) -> None:
    elapsed = max(1.0, end_ms - start_ms)
    total_mb = progress.bytes / (1024 * 1024)
    interval_mb = (progress.bytes - last_bytes) / (1024 * 1024)
    fetch_ms = end_ms - start_ms - join_ms
    fetch_mb_sec = 0.0 if fetch_ms <= 0 else 1000.0 * interval_mb / fetch_ms
    fetch_msg_sec = 0.0 if fetch_ms <= 0 else \
        1000.0 * (progress.messages - last_messages) / fetch_ms
    print(f"{format_date(date_format, end_ms)}, 0, {total_mb:.4f}, "
          f"{1000.0 * interval_mb / elapsed:.4f}, {progress.messages}, "
          f"{(progress.messages - last_messages) / elapsed * 1000.0:.4f}, {join_ms}, "
          f"{int(fetch_ms)}, {fetch_mb_sec:.4f}, {fetch_msg_sec:.4f}", file=out, flush=True)


def execute(options: ParsedOptions) -> int:
    PARSER.require(options, "messages")
    if options.has("topic") == options.has("include"):
        PARSER.fail("Exactly one of the following arguments is required: [topic], [include]")
    bootstrap = options.value("bootstrap-server") or options.value("broker-list")
    if bootstrap is None:
        PARSER.fail('Missing required argument "[bootstrap-server]"')
    if options.value("reporting-interval") <= 0:
        print("Reporting interval must be greater than 0.", file=sys.stderr)
        return 1
    out = sys.stdout
    if not options.has("hide-header"):
        print_header(options.has("show-detailed-stats"), out)
    progress = Progress()
    try:
        consumer = Consumer(consumer_props(options, bootstrap))
    except (KafkaConfigError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        start_ms = time.time() * 1000
        assign(consumer, options)
        join_ms = int(time.time() * 1000 - start_ms)
        consume(consumer, options, progress, join_ms, out)
        end_ms = time.time() * 1000
    except KeyboardInterrupt:
        consumer.close()
        return 130
    except KafkaError as exc:
        consumer.close()
        print(exc, file=sys.stderr)
        return 1
    consumer.close()
    if not options.has("show-detailed-stats"):
        elapsed_sec = max(1e-3, (end_ms - start_ms) / 1000)
        fetch_ms = end_ms - start_ms - join_ms
        total_mb = progress.bytes / (1024 * 1024)
        fetch_sec = max(1e-3, fetch_ms / 1000)
        date_format = options.value("date-format")
        print(f"{format_date(date_format, start_ms)}, {format_date(date_format, end_ms)}, "
              f"{total_mb:.4f}, {total_mb / elapsed_sec:.4f}, {progress.messages}, "
              f"{progress.messages / elapsed_sec:.4f}, {join_ms}, {int(fetch_ms)}, "
              f"{total_mb / fetch_sec:.4f}, {progress.messages / fetch_sec:.4f}", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    try:
        return run(PARSER, execute, sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
