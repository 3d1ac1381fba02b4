"""`odradek dump-log` on segments a real broker wrote: Kafka's batch, record, index and time
index lines."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from odradek.cli import dump_log
from odradek.client import Admin, NewTopic, Producer

BATCH_LINE = re.compile(
    r"baseOffset: (?P<base>\d+) lastOffset: (?P<last>\d+) count: (?P<count>\d+) "
    r"baseSequence: (?P<seq>-?\d+) lastSequence: (?P<lastseq>-?\d+) "
    r"producerId: (?P<pid>-?\d+) producerEpoch: (?P<epoch>-?\d+) "
    r"partitionLeaderEpoch: (?P<leader_epoch>-?\d+) isTransactional: (?P<txn>true|false) "
    r"isControl: (?P<control>true|false) deleteHorizonMs: OptionalLong\.empty "
    r"position: (?P<position>\d+) CreateTime: (?P<ts>\d+) size: (?P<size>\d+) magic: 2 "
    r"compresscodec: (?P<codec>\w+) crc: (?P<crc>\d+) isvalid: true$")


def run_tool(capsys, *args: str) -> tuple[int, str, str]:
    code = dump_log.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def segment(odradek_broker):
    """A partition with two batches: 3 keyed records with headers, then 2 gzip records."""
    topic = f"dump-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1, configs={"index.interval.bytes": "1"})])
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 50}) as producer:
        for i in range(3):
            producer.send(topic, b"value-%d" % i, key=b"key-%d" % i,
                          headers=[("h1", b"x"), ("h2", None)], timestamp_ms=1_700_000_000_000)
        producer.flush(20)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 50,
                   "compression.type": "gzip"}) as producer:
        for i in range(2):
            producer.send(topic, b"zipped-%d" % i, timestamp_ms=1_700_000_000_100 + i)
        producer.flush(20)
    return odradek_broker.data_dir / f"{topic}-0"


def test_batches(segment, capsys):
    log = segment / "00000000000000000000.log"
    code, out, _ = run_tool(capsys, "--files", str(log))
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    first, second = (BATCH_LINE.match(line) for line in lines[2:4])
    assert first and second, lines
    assert (first["base"], first["last"], first["count"], first["seq"], first["lastseq"]) == \
        ("0", "2", "3", "0", "2")
    assert int(first["pid"]) >= 0 and first["epoch"] == "0" and first["codec"] == "none"
    assert (first["txn"], first["control"], first["position"]) == ("false", "false", "0")
    assert first["ts"] == "1700000000000"
    assert (second["base"], second["count"], second["codec"]) == ("3", "2", "gzip")
    assert second["position"] == first["size"]
    assert second["ts"] == "1700000000101"  # the batch's max timestamp
    assert second["pid"] != first["pid"]  # another producer
    assert len(lines) == 4


def test_records_with_data(segment, capsys):
    log = segment / "00000000000000000000.log"
    code, out, _ = run_tool(capsys, "--files", str(log), "--print-data-log")
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert records == [
        ("| offset: 0 CreateTime: 1700000000000 keySize: 5 valueSize: 7 sequence: 0 "
         "headerKeys: [h1,h2] key: key-0 payload: value-0"),
        ("| offset: 1 CreateTime: 1700000000000 keySize: 5 valueSize: 7 sequence: 1 "
         "headerKeys: [h1,h2] key: key-1 payload: value-1"),
        ("| offset: 2 CreateTime: 1700000000000 keySize: 5 valueSize: 7 sequence: 2 "
         "headerKeys: [h1,h2] key: key-2 payload: value-2"),
        ("| offset: 3 CreateTime: 1700000000100 keySize: -1 valueSize: 8 sequence: 0 "
         "headerKeys: [] payload: zipped-0"),
        ("| offset: 4 CreateTime: 1700000000101 keySize: -1 valueSize: 8 sequence: 1 "
         "headerKeys: [] payload: zipped-1"),
    ]


def test_deep_iteration_without_data_and_skipped_metadata(segment, capsys):
    log = segment / "00000000000000000000.log"
    _, out, _ = run_tool(capsys, "--files", str(log), "--deep-iteration")
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert records[0] == ("| offset: 0 CreateTime: 1700000000000 keySize: 5 valueSize: 7 "
                          "sequence: 0 headerKeys: [h1,h2]")
    _, out, _ = run_tool(capsys, "--files", str(log), "--print-data-log",
                         "--skip-record-metadata")
    records = [line for line in out.splitlines()[2:] if not line.startswith("baseOffset")]
    # Kafka prints the payload without the "|" indent when there is no metadata and no key.
    assert records == ["| key: key-0 payload: value-0", "| key: key-1 payload: value-1",
                       "| key: key-2 payload: value-2", " payload: zipped-0",
                       " payload: zipped-1"]


def test_index_and_time_index(segment, capsys):
    log = segment / "00000000000000000000.log"
    _, out, _ = run_tool(capsys, "--files", str(log))
    batches = [BATCH_LINE.match(line) for line in out.splitlines()[2:]]
    by_offset = {int(b["last"]): (int(b["position"]), int(b["ts"])) for b in batches}
    index = segment / "00000000000000000000.index"
    time_index = segment / "00000000000000000000.timeindex"
    code, out, err = run_tool(capsys, "--files", f"{index},{time_index}")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Dumping {index}" and f"Dumping {time_index}" in lines
    entries = [re.fullmatch(r"offset: (\d+) position: (\d+)", line) for line in lines]
    entries = [(int(e[1]), int(e[2])) for e in entries if e]
    times = [re.fullmatch(r"timestamp: (\d+) offset: (\d+)", line) for line in lines]
    times = [(int(t[1]), int(t[2])) for t in times if t]
    # index.interval.bytes=1: the second batch is indexed (Kafka indexes a batch once more
    # than that many bytes were appended since the last entry).
    assert entries and all(by_offset[offset][0] == position for offset, position in entries)
    assert times and all(by_offset[offset][1] == ts for ts, offset in times)
    assert err == ""  # no mismatch between the indexes and the log


def test_trailing_garbage_and_unknown_files(segment, capsys, tmp_path):
    copy = tmp_path / "00000000000000000000.log"
    copy.write_bytes((segment / "00000000000000000000.log").read_bytes() + b"\x00" * 7)
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    code, out, err = run_tool(capsys, "--files", f"{copy},{other}")
    assert code == 0
    assert "Found 7 invalid bytes at the end of 00000000000000000000.log" in out
    assert f"Ignoring unknown file {other}" in err


def test_cluster_metadata_decoder(odradek_broker, capsys):
    log = odradek_broker.data_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    code, out, _ = run_tool(capsys, "--files", str(log), "--cluster-metadata-decoder")
    assert code == 0
    # Kafka prints a KRaft control record's message as JSON (DumpLogSegments' LeaderChange).
    assert re.search(r'headerKeys: \[\] LeaderChange: \{"version":0,"leaderId":1,'
                     r'"voters":\[\{"voterId":1\}\],"grantingVoters":\[\{"voterId":1\}\]\}',
                     out)
    assert 'payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":' in out


def test_files_is_required(capsys):
    code, _, err = run_tool(capsys, "--print-data-log")
    assert code == 1
    assert 'Missing required argument "[files]"' in err


def test_offsets_decoder(tmp_path, capsys):
    from odradek.protocol import messages as m
    from odradek.protocol.records import build_batch

    key = m.encode_versioned(m.OffsetCommitKey(group="g1", topic="events", partition=3), 1)
    value = m.encode_versioned(m.OffsetCommitValue(offset=42, leader_epoch=-1, metadata="",
                                                   commit_timestamp=1_700_000_000_000), 3)
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(build_batch([(1_700_000_000_000, key, value), (1_700_000_000_001, key, None)]))
    code, out, _ = run_tool(capsys, "--files", str(log), "--offsets-decoder")
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| ")]
    key_json, _, value_json = records[0].partition(" key: ")[2].partition(" payload: ")
    assert json.loads(key_json) == {"type": "1", "data": {"group": "g1", "topic": "events",
                                                          "partition": 3}}
    value = json.loads(value_json)
    assert value["version"] == "3"
    assert value["data"]["offset"] == 42 and value["data"]["commitTimestamp"] == 1_700_000_000_000
    assert records[1].endswith(" payload: <DELETE>")


def test_transaction_markers_and_txn_index(tmp_path, capsys):
    """Transactional batches, COMMIT/ABORT markers and the `.txnindex` of the aborted
    transaction, in kafka-dump-log.sh's format."""
    from odradek.protocol.records import build_batch, build_control_batch
    from odradek.storage import Log
    from odradek.storage.validator import AppendOrigin

    now = 1_700_000_000_000
    log = Log(tmp_path / "txn-0", clock=lambda: now)
    for producer_id in (11, 12):
        log.append_as_leader(build_batch([(now, None, b"a"), (now, None, b"b")],
                                         producer_id=producer_id, producer_epoch=2,
                                         base_sequence=0, is_transactional=True), 0)
    log.append_as_leader(build_control_batch(11, 2, True, 5, now), 0,
                         origin=AppendOrigin.COORDINATOR)
    log.append_as_leader(build_control_batch(12, 2, False, 5, now), 0,
                         origin=AppendOrigin.COORDINATOR)
    log.close()
    segment = tmp_path / "txn-0" / "00000000000000000000.log"
    code, out, _ = run_tool(capsys, "--files", str(segment), "--print-data-log")
    assert code == 0
    batches = [match for match in map(BATCH_LINE.match, out.splitlines()) if match]
    assert [(b["pid"], b["epoch"], b["txn"], b["control"]) for b in batches] == [
        ("11", "2", "true", "false"), ("12", "2", "true", "false"),
        ("11", "2", "true", "true"), ("12", "2", "true", "true")]
    markers = [line for line in out.splitlines() if "endTxnMarker" in line]
    assert [line.split("endTxnMarker: ")[1] for line in markers] == [
        "COMMIT coordinatorEpoch: 5", "ABORT coordinatorEpoch: 5"]
    index = tmp_path / "txn-0" / "00000000000000000000.txnindex"
    code, out, _ = run_tool(capsys, "--files", str(index))
    assert code == 0
    assert out.splitlines() == [
        f"Dumping {index}",
        "version: 0 producerId: 12 firstOffset: 2 lastOffset: 5 lastStableOffset: 6"]
