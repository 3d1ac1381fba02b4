"""`odradek get-offsets` and `odradek delete-records` against a real broker, run in-process;
outputs in Kafka's formats."""

from __future__ import annotations

import json
import uuid

import pytest

from odradek.cli import delete_records, get_offsets
from odradek.client import Admin, NewTopic, Producer


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def topic(odradek_broker) -> str:
    """Partition 0: 10 records (timestamps 1000..10000); partition 1: 3; partition 2: none."""
    name = _topic("offsets")
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, 3, 1)])
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(10):
            producer.send(name, b"v", partition=0, timestamp_ms=1000 * (i + 1))
        for i in range(3):
            producer.send(name, b"v", partition=1, timestamp_ms=50_000 + i)
        producer.flush(20)
    return name


def run_tool(module, capsys, *args: str) -> tuple[int, str, str]:
    code = module.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_latest_offsets(odradek_broker, topic, capsys):
    code, out, _ = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                            "--topic", topic)
    assert code == 0
    assert out.splitlines() == [f"{topic}:0:10", f"{topic}:1:3", f"{topic}:2:0"]


@pytest.mark.parametrize("time_arg, expected", [
    ("-2", [0, 0, 0]), ("earliest", [0, 0, 0]), ("-1", [10, 3, 0]),
    ("5500", [5, 0, None]), ("60000", [None, None, None]), ("max-timestamp", [9, 2, None]), ("-3", [9, 2, None]),
])
def test_offsets_at_a_time(odradek_broker, topic, capsys, time_arg, expected):
    code, out, _ = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                            "--topic", topic, "--time", time_arg)
    assert code == 0
    assert out.splitlines() == [f"{topic}:{p}:{offset}" for p, offset in enumerate(expected)
                                if offset is not None]


def test_partition_filters(odradek_broker, topic, capsys):
    _, out, _ = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                         "--topic", topic, "--partitions", "0,2")
    assert out.splitlines() == [f"{topic}:0:10", f"{topic}:2:0"]
    _, out, _ = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                         "--topic-partitions", f"{topic}:1-,{topic}:0")
    assert out.splitlines() == [f"{topic}:0:10", f"{topic}:1:3", f"{topic}:2:0"]
    _, out, _ = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                         "--topic-partitions", f"{topic}:-1")
    assert out.splitlines() == [f"{topic}:0:10"]


def test_sorted_as_text_like_kafka(odradek_broker, capsys):
    name = _topic("many")
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, 12, 1)])
    _, out, _ = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                         "--topic", name)
    partitions = [int(line.split(":")[1]) for line in out.splitlines()]
    assert partitions == [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("args, message", [
    (["--topic", "nope-does-not-exist-x"],
     "Error occurred: Could not match any topic-partitions with the specified filters"),
    (["--time", "yesterday"], "Error occurred: Malformed time argument yesterday."),
    (["--topic", "t", "--topic-partitions", "t:0"],
     "Error occurred: --topic-partitions cannot be used with --topic or --partitions"),
    (["--partitions", "a,b"], "--partitions expects a comma separated list of numeric"),
])
def test_get_offsets_errors(odradek_broker, capsys, args, message):
    code, _, err = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                            *args)
    assert code == 1
    assert message in err


def test_get_offsets_usage(capsys):
    code, _, err = run_tool(get_offsets, capsys)
    assert code == 1
    assert "An interactive shell for getting topic-partition offsets." in err
    assert "--topic-partitions" in err


def test_delete_records(odradek_broker, topic, capsys, tmp_path):
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [
        {"topic": topic, "partition": 1, "offset": 2},
        {"topic": topic, "partition": 0, "offset": 4},
        {"topic": topic, "partition": 2, "offset": 5},
    ], "version": 1}))
    code, out, err = run_tool(delete_records, capsys, "--bootstrap-server",
                              odradek_broker.bootstrap, "--offset-json-file", str(plan))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["Executing records delete operation",
                         "Records delete operation completed:"]
    assert lines[2] == f"partition: {topic}-0\tlow_watermark: 4"
    assert lines[3] == f"partition: {topic}-1\tlow_watermark: 2"
    assert lines[4].startswith(f"partition: {topic}-2\terror: "
                               "org.apache.kafka.common.errors.OffsetOutOfRangeException: ")
    _, out, _ = run_tool(get_offsets, capsys, "--bootstrap-server", odradek_broker.bootstrap,
                         "--topic", topic, "--time", "-2")
    assert out.splitlines() == [f"{topic}:0:4", f"{topic}:1:2", f"{topic}:2:0"]


@pytest.mark.parametrize("content, message", [
    ("not json", "The input string is not a valid JSON"),
    ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
    ('{"version": 1}', "Missing partitions field"),
    (('{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
      ' {"topic": "a", "partition": 0, "offset": 2}]}'),
     "Offset json file contains duplicate topic partitions: a-0"),
])
def test_delete_records_bad_files(odradek_broker, capsys, tmp_path, content, message):
    plan = tmp_path / "offsets.json"
    plan.write_text(content)
    code, _, err = run_tool(delete_records, capsys, "--bootstrap-server",
                            odradek_broker.bootstrap, "--offset-json-file", str(plan))
    assert code == 1
    assert message in err


def test_delete_records_requires_its_options(capsys):
    code, _, err = run_tool(delete_records, capsys, "--bootstrap-server", "x:1")
    assert code == 1
    assert 'Missing required argument "[offset-json-file]"' in err
