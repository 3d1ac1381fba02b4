"""`odradek console-producer` and `odradek console-consumer` as processes against a real
broker: Kafka's options, line format, output format, exit behaviour."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from odradek.client import Admin, NewTopic, Producer

ODRADEK = [sys.executable, "-m", "odradek.cli.main"]


def odradek(*args: str, stdin: str | None = None, timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ODRADEK, *args], input=stdin, capture_output=True, text=True,
                          check=False, timeout=timeout)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker, name: str, partitions: int = 1) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])


def _consume(broker, topic: str, *extra: str, count: int) -> subprocess.CompletedProcess[str]:
    return odradek("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                   "--from-beginning", "--max-messages", str(count), "--timeout-ms", "10000",
                   *extra)


def test_lines_become_records(odradek_broker):
    topic = _topic("lines")
    _create(odradek_broker, topic)
    produced = odradek("console-producer", "--bootstrap-server", odradek_broker.bootstrap,
                       "--topic", topic, stdin="first line\nsecond line\n\nlast")
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout == ""  # no ">" prompt when stdin is not a terminal
    consumed = _consume(odradek_broker, topic, count=4)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == "first line\nsecond line\n\nlast\n"
    assert "Processed a total of 4 messages" in consumed.stderr


def test_keys_headers_and_null_marker(odradek_broker):
    topic = _topic("keys")
    _create(odradek_broker, topic)
    produced = odradek("console-producer", "--bootstrap-server", odradek_broker.bootstrap,
                       "--topic", topic, "--property", "parse.key=true", "--property",
                       "key.separator=:", "--property", "parse.headers=true", "--property",
                       "null.marker=NULL", "--sync", "--compression-codec",
                       stdin="h1:a,h2:NULL\tk1:v1\nNULL\tk2:NULL\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _consume(odradek_broker, topic, "--property", "print.key=true", "--property",
                        "print.headers=true", "--property", "print.partition=true",
                        "--property", "print.offset=true", "--property", "key.separator= | ",
                        count=2)
    assert consumed.stdout.splitlines() == [
        "Partition:0 | Offset:0 | h1:a,h2:null | k1 | v1",
        "Partition:0 | Offset:1 | NO_HEADERS | k2 | null",
    ]


def test_parse_errors_stop_the_producer(odradek_broker):
    topic = _topic("bad")
    produced = odradek("console-producer", "--bootstrap-server", odradek_broker.bootstrap,
                       "--topic", topic, "--property", "parse.key=true", stdin="no separator\n")
    assert produced.returncode == 1
    assert "No key separator found on line number 1: 'no separator'" in produced.stderr
    ignored = odradek("console-producer", "--bootstrap-server", odradek_broker.bootstrap,
                      "--topic", topic, "--property", "parse.key=true", "--property",
                      "ignore.error=true", stdin="no separator\n")
    assert ignored.returncode == 0, ignored.stderr


def test_timestamps_and_partition_offset_options(odradek_broker):
    topic = _topic("ts")
    _create(odradek_broker, topic, partitions=2)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(5):
            producer.send(topic, b"p1-%d" % i, partition=1, timestamp_ms=1_700_000_000_000 + i)
        producer.flush(20)
    consumed = odradek("console-consumer", "--bootstrap-server", odradek_broker.bootstrap,
                       "--topic", topic, "--partition", "1", "--offset", "3",
                       "--property", "print.timestamp=true", "--timeout-ms", "3000")
    assert consumed.stdout == ("CreateTime:1700000000003\tp1-3\n"
                               "CreateTime:1700000000004\tp1-4\n")
    assert "TimeoutException" in consumed.stderr
    assert "Processed a total of 2 messages" in consumed.stderr
    assert consumed.returncode == 0
    earliest = odradek("console-consumer", "--bootstrap-server", odradek_broker.bootstrap,
                       "--topic", topic, "--partition", "1", "--offset", "earliest",
                       "--max-messages", "1")
    assert earliest.stdout == "p1-0\n"


def test_group_commits_and_the_next_run_resumes(odradek_broker):
    topic = _topic("group")
    _create(odradek_broker, topic, partitions=3)

    def produce(tag: bytes) -> None:
        with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
            for p in range(3):
                producer.send(topic, tag + b"-%d" % p, partition=p)
            producer.flush(20)

    produce(b"first")
    consumed = _consume(odradek_broker, topic, "--group", "my-group", count=3)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == ["first-0", "first-1", "first-2"]
    assert "WARNING" not in consumed.stderr
    # The group committed its positions: the next run starts after them, not at the
    # beginning, although --from-beginning is given (it only applies without commits).
    produce(b"second")
    again = _consume(odradek_broker, topic, "--group", "my-group", count=3)
    assert sorted(again.stdout.splitlines()) == ["second-0", "second-1", "second-2"]
    described = odradek("consumer-groups", "--bootstrap-server", odradek_broker.bootstrap,
                        "--describe", "--group", "my-group")
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("my-group")]
    assert sorted((row[2], row[3], row[5]) for row in rows) == [
        ("0", "2", "0"), ("1", "2", "0"), ("2", "2", "0")]  # PARTITION, CURRENT-OFFSET, LAG


def test_include_regex_reads_matching_topics(odradek_broker):
    prefix = f"inc{uuid.uuid4().hex[:6]}"
    for name in (f"{prefix}-a", f"{prefix}-b", f"other{prefix}"):
        _create(odradek_broker, name)
        with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
            producer.send(name, name.encode()).get(20)
    consumed = odradek("console-consumer", "--bootstrap-server", odradek_broker.bootstrap,
                       "--include", f"{prefix}-.*", "--from-beginning", "--max-messages", "2",
                       "--timeout-ms", "10000")
    assert sorted(consumed.stdout.splitlines()) == [f"{prefix}-a", f"{prefix}-b"]


def test_deserializers_format_values(odradek_broker):
    topic = _topic("deser")
    _create(odradek_broker, topic)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        producer.send(topic, (1234).to_bytes(4, "big"), key=(-7).to_bytes(8, "big",
                                                                           signed=True)).get(20)
    consumed = _consume(odradek_broker, topic, "--property", "print.key=true",
                        "--key-deserializer",
                        "org.apache.kafka.common.serialization.LongDeserializer",
                        "--value-deserializer",
                        "org.apache.kafka.common.serialization.IntegerDeserializer", count=1)
    assert consumed.stdout == "-7\t1234\n"


@pytest.mark.parametrize("args, message", [
    ([], "This tool helps to read data from Kafka topics"),
    (["--topic", "t"], 'Missing required argument "[bootstrap-server]"'),
    (["--bootstrap-server", "x:1"], "Exactly one of whitelist/include/topic is required."),
    (["--bootstrap-server", "x:1", "--topic", "t", "--offset", "3"],
     "The partition is required when offset is specified."),
    (["--bootstrap-server", "x:1", "--topic", "t", "--partition", "0", "--offset", "-3"],
     "The provided offset value '-3' is incorrect."),
    (["--bootstrap-server", "x:1", "--topic", "t", "--partition", "0", "--group", "g"],
     "Options group and partition cannot be specified together."),
    (["--bootstrap-server", "x:1", "--topic", "t", "--nonsense"],
     "nonsense is not a recognized option"),
])
def test_consumer_usage_errors(args, message):
    result = odradek("console-consumer", *args)
    assert result.returncode == 1
    assert message in result.stderr
    assert "--bootstrap-server <String: server to" in result.stderr  # the option table


def test_producer_config_file_and_properties(odradek_broker, tmp_path):
    config = tmp_path / "producer.properties"
    config.write_text("max.request.size=200\nclient.id=from-file\n")
    topic = _topic("config")
    failed = odradek("console-producer", "--bootstrap-server", odradek_broker.bootstrap,
                     "--topic", topic, "--producer.config", str(config), stdin="x" * 300 + "\n")
    assert failed.returncode == 1
    assert ("org.apache.kafka.common.errors.RecordTooLargeException: The message is 382 bytes "
            "when serialized which is larger than 200, which is the value of the "
            "max.request.size configuration.") in failed.stderr
    # --producer-property wins over the file.
    passed = odradek("console-producer", "--bootstrap-server", odradek_broker.bootstrap,
                     "--topic", topic, "--producer.config", str(config), "--producer-property",
                     "max.request.size=100000", stdin="x" * 300 + "\n")
    assert passed.returncode == 0, passed.stderr


def test_producer_usage_errors():
    result = odradek("console-producer", "--bootstrap-server", "x:1")
    assert result.returncode == 1
    assert 'Missing required argument "[topic]"' in result.stderr


def test_ctrl_c_stops_the_consumer_with_its_summary(odradek_broker):
    topic = _topic("sigint")
    _create(odradek_broker, topic)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(3):
            producer.send(topic, b"%d" % i)
        producer.flush(20)
    process = subprocess.Popen([*ODRADEK, "console-consumer", "--bootstrap-server",
                                odradek_broker.bootstrap, "--topic", topic, "--from-beginning"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 30
        while len(lines) < 3 and time.monotonic() < deadline:
            lines.append(process.stdout.readline())
        assert lines == ["0\n", "1\n", "2\n"]
        process.send_signal(signal.SIGINT)
        _stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "Processed a total of 3 messages" in stderr
    assert "Traceback" not in stderr


def test_ctrl_c_stops_the_producer_after_sending_what_it_read(odradek_broker):
    topic = _topic("sigint-prod")
    _create(odradek_broker, topic)
    process = subprocess.Popen([*ODRADEK, "console-producer", "--bootstrap-server",
                                odradek_broker.bootstrap, "--topic", topic],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        process.stdin.write("one\ntwo\n")
        process.stdin.flush()
        time.sleep(2)
        process.send_signal(signal.SIGINT)
        _stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    consumed = _consume(odradek_broker, topic, count=2)
    assert consumed.stdout == "one\ntwo\n"


def test_consumer_started_before_the_topic_exists(odradek_broker):
    from broker_process import wait_until

    topic = _topic("later")
    process = subprocess.Popen([*ODRADEK, "console-consumer", "--bootstrap-server",
                                odradek_broker.bootstrap, "--topic", topic, "--from-beginning",
                                "--max-messages", "1", "--timeout-ms", "30000"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
            # Like Kafka's consumer, it has the broker auto-create the topic.
            wait_until(lambda: topic in admin.list_topics(), timeout=20,
                       message="the consumer to have the topic created")
        with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
            producer.send(topic, b"hello").get(20)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert stdout == "hello\n"
