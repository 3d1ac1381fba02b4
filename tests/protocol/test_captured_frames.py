"""Request frames captured from real Kafka clients (tests/vectors), and the reverse direction.

The vectors were recorded by tools/capture_frames.py (see tests/vectors/README.md) from
confluent-kafka (librdkafka), kafka-python, aiokafka and kcat. For each frame: Odradek decodes
it, and re-encoding the decoded request gives back the client's exact bytes. Produce frames
also carry the records the capture produced, in batches of the configured codec.

The reverse direction runs live: a real Odradek broker stores batches built by Odradek's
RecordBatchBuilder (every codec) and the real clients consume and decode them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError, UnsupportedVersionError
from odradek.protocol.framing import (
    FrameBuffer,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
)
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    iter_batches,
    iter_records,
    verify_crc,
)
from odradek.protocol.records.compression import XERIAL_HEADER
from odradek.storage.config import LogConfig
from odradek.storage.validator import validate_as_leader, validate_produce_request_records

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors"
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PRODUCE, FETCH, OFFSET_COMMIT, JOIN_GROUP, SYNC_GROUP, API_VERSIONS = 0, 1, 8, 11, 14, 18


def _load_capture_tool():
    spec = importlib.util.spec_from_file_location(
        "capture_frames", ROOT / "tools" / "capture_frames.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building classes
    spec.loader.exec_module(module)
    return module


capture = _load_capture_tool()

# aiokafka 0.14 writes baseSequence 0, not -1, in batches without a producer id (its
# message_accumulator builds every batch with base_sequence=0). Kafka ignores the sequence when
# producerId is -1, and so must Odradek: the validation test below covers it.
SEQUENCE_WITHOUT_PRODUCER_ID = {"aiokafka": 0}

KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588

# What the capture granted an idempotent producer is in its scenario's `producer` ([id, epoch]);
# vectors recorded before the capture ran against a real broker lack the key: their stand-in
# peer granted every producer id 1000, epoch 0.
STAND_IN_PEER_PRODUCER = [1000, 0]

# kafka-python loads its schemas with deprecated importlib.resources calls
pytestmark = pytest.mark.filterwarnings("ignore:.*Use files\\(\\) instead:DeprecationWarning")


# ------------------------------------------------------------------------------------------------
# loading the vectors


@cache
def manifest(client: str) -> dict[str, Any]:
    return json.loads((VECTORS / client / "manifest.json").read_text(encoding="utf-8"))


def frame_entries() -> list[tuple[str, dict[str, Any]]]:
    return [(client, entry) for client in CLIENTS for entry in manifest(client)["frames"]]


def read_frame(client: str, entry: dict[str, Any]) -> bytes:
    return (VECTORS / client / entry["file"]).read_bytes()


def scenario_of(client: str, entry: dict[str, Any]) -> dict[str, Any]:
    return manifest(client)["scenarios"][entry["scenario"]]


def produce_scenarios() -> list[tuple[str, str]]:
    return [
        (client, name)
        for client in CLIENTS
        for name, scenario in manifest(client)["scenarios"].items()
        if scenario["kind"] == "produce"
    ]


ALL_FRAMES = frame_entries()
# Every captured frame is at a version Kafka 4.0 defines (kafka-python 3.0's ApiVersions v4
# included); a test below holds the vectors to that.
SUPPORTED_FRAMES = ALL_FRAMES
PRODUCE_FRAMES = [(c, e) for c, e in ALL_FRAMES if e["api_key"] == PRODUCE]


def ids(entries: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [f"{client}/{entry['file']}" for client, entry in entries]


def reencode(header: m.RequestHeader, body: m.Message, version: int) -> bytes:
    """The frame (no size prefix) from the decoded header and body, every field as decoded."""
    out = bytearray()
    header.write_to(out, [], m.request_header_version(header.request_api_key, version))
    return bytes(out) + body.encode(version)


# ------------------------------------------------------------------------------------------------
# what was captured


def test_every_client_and_codec_was_captured() -> None:
    for client in CLIENTS:
        scenarios = manifest(client)["scenarios"]
        produced = {s["compression"] for s in scenarios.values() if s["kind"] == "produce"}
        assert produced == set(CODECS), client
        assert any(s["kind"] == "consume" for s in scenarios.values()), client
        kinds = {e["api_key"] for e in manifest(client)["frames"]}
        assert {API_VERSIONS, 3, PRODUCE, FETCH} <= kinds, client
        if client != "kcat":  # kcat has no group consumer or admin calls
            assert {"group-consume", "admin"} <= set(scenarios), client
            assert {JOIN_GROUP, SYNC_GROUP, OFFSET_COMMIT, 19, 20} <= kinds, client
        for entry in manifest(client)["frames"]:
            assert (VECTORS / client / entry["file"]).is_file()
    assert any(s["kind"] == "metadata" for s in manifest("kcat")["scenarios"].values())
    for flag in ("idempotent", "transactional"):
        clients = {c for c in CLIENTS for s in manifest(c)["scenarios"].values() if s[flag]}
        assert {"confluent-kafka", "kafka-python", "aiokafka"} <= clients, flag


# ------------------------------------------------------------------------------------------------
# decoding and byte-exact re-encoding


@pytest.mark.parametrize(("client", "entry"), SUPPORTED_FRAMES, ids=ids(SUPPORTED_FRAMES))
def test_frame_decodes(client: str, entry: dict[str, Any]) -> None:
    header, body = decode_request(read_frame(client, entry))
    assert header.request_api_key == entry["api_key"]
    assert header.request_api_version == entry["api_version"]
    assert header.correlation_id == entry["correlation_id"]
    assert header.client_id == entry["client_id"] == scenario_of(client, entry)["client_id"]
    assert type(body) is m.API_BY_KEY[entry["api_key"]].request
    # The committed set was recorded against a peer on the Kafka 3.8 specs, which refused
    # kafka-python's ApiVersions v4 (added in 3.9); the frame is the client's all the same.
    if (entry["api_key"], entry["api_version"]) != (API_VERSIONS, 4):
        assert entry["peer_decode_error"] is None


@pytest.mark.parametrize(("client", "entry"), SUPPORTED_FRAMES, ids=ids(SUPPORTED_FRAMES))
def test_frame_reencodes_byte_exact(client: str, entry: dict[str, Any]) -> None:
    frame = read_frame(client, entry)
    header, body = decode_request(frame)
    assert reencode(header, body, entry["api_version"]) == frame
    # and through the public request encoder (no client sent header tagged fields)
    assert not header.unknown_tagged_fields
    full = encode_request(
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        body,
    )
    assert full[4:] == frame
    assert int.from_bytes(full[:4], "big") == len(frame)


def test_every_captured_frame_is_at_a_version_kafka_4_0_accepts() -> None:
    for client, entry in ALL_FRAMES:
        spec = m.API_BY_KEY[entry["api_key"]]
        assert spec.supports(entry["api_version"]), (client, entry["file"])


@pytest.mark.parametrize("client", CLIENTS)
def test_frame_buffer_splits_a_client_stream(client: str) -> None:
    """A client's frames, size-prefixed back to back and fed in odd-sized pieces, come out of
    `FrameBuffer` unchanged."""
    frames = [read_frame(client, entry) for entry in manifest(client)["frames"]]
    stream = b"".join(len(frame).to_bytes(4, "big") + frame for frame in frames)
    buffer = FrameBuffer(max_frame_size=1 << 20)
    out: list[bytes] = []
    for start in range(0, len(stream), 7):
        buffer.feed(stream[start : start + 7])
        out += buffer.frames()
    assert out == frames
    assert buffer.buffered == 0


@pytest.mark.parametrize(("client", "entry"), SUPPORTED_FRAMES, ids=ids(SUPPORTED_FRAMES))
def test_truncated_frame_raises_decode_error(client: str, entry: dict[str, Any]) -> None:
    """Every cut of a real frame (about 40 evenly spread lengths) is a clean DecodeError."""
    frame = read_frame(client, entry)
    step = max(1, len(frame) // 40)
    for length in range(0, len(frame), step):
        with pytest.raises(DecodeError):
            decode_request(frame[:length])


def test_api_versions_v3_names_the_client_software() -> None:
    for client in ("confluent-kafka", "kafka-python", "kcat"):
        entry = next(
            e for e in manifest(client)["frames"] if (e["api_key"], e["api_version"]) == (18, 3)
        )
        _, body = decode_request(read_frame(client, entry))
        assert body.client_software_name and body.client_software_version, client


# ------------------------------------------------------------------------------------------------
# Produce frames: records


@pytest.mark.parametrize(("client", "entry"), PRODUCE_FRAMES, ids=ids(PRODUCE_FRAMES))
def test_produce_frame_batches(client: str, entry: dict[str, Any]) -> None:
    frame = read_frame(client, entry)
    scenario = scenario_of(client, entry)
    _, request = decode_request(frame)
    (topic,) = request.topic_data
    assert topic.name == scenario["topic"]
    (partition,) = topic.partition_data
    assert partition.index == 0
    records = partition.records
    assert type(records) is memoryview
    assert records.obj is frame  # zero-copy: a window on the received frame
    batches = list(iter_batches(records))
    assert batches
    assert sum(header.size for _, header in batches) == len(records)  # nothing left over
    for pos, header in batches:
        verify_crc(records, pos, header)
        assert header.magic == 2
        assert header.compression is Compression[scenario["compression"].upper()]
        assert header.is_transactional == scenario["transactional"]
        assert not header.is_control
        if scenario["idempotent"]:
            granted = scenario.get("producer", STAND_IN_PEER_PRODUCER)
            assert [header.producer_id, header.producer_epoch] == granted
            assert header.base_sequence >= 0
        else:
            assert (header.producer_id, header.producer_epoch) == (-1, -1)
            assert header.base_sequence == SEQUENCE_WITHOUT_PRODUCER_ID.get(client, -1)


def test_captured_snappy_batches_use_both_framings() -> None:
    """Snappy from real clients comes in both framings: xerial blocks (what Java clients write;
    kafka-python and aiokafka do the same) and raw snappy (librdkafka). Both decode."""
    xerial_magic = XERIAL_HEADER[:8]  # b"\x82SNAPPY\x00"; the version fields vary by writer
    framings: dict[str, set[str]] = {}
    for client, entry in PRODUCE_FRAMES:
        if scenario_of(client, entry)["compression"] != "snappy":
            continue
        _, request = decode_request(read_frame(client, entry))
        records = request.topic_data[0].partition_data[0].records
        for pos, header in iter_batches(records):
            assert header.compression is Compression.SNAPPY
            payload = bytes(records[pos + BATCH_HEADER_SIZE : pos + header.size])
            framing = "xerial" if payload.startswith(xerial_magic) else "raw"
            framings.setdefault(client, set()).add(framing)
            assert sum(1 for _ in iter_records(records, pos, header)) == header.records_count
    assert framings == {
        "confluent-kafka": {"raw"},
        "kcat": {"raw"},
        "kafka-python": {"xerial"},
        "aiokafka": {"xerial"},
    }


@pytest.mark.parametrize(("client", "entry"), PRODUCE_FRAMES, ids=ids(PRODUCE_FRAMES))
def test_produce_frame_passes_broker_validation(client: str, entry: dict[str, Any]) -> None:
    _, request = decode_request(read_frame(client, entry))
    records = request.topic_data[0].partition_data[0].records
    validate_produce_request_records(records, entry["api_version"])
    # every captured record has a key, so a compacted topic takes them too
    config = LogConfig.from_props({"cleanup.policy": "compact",
                                   "max.message.bytes": KAFKA_DEFAULT_MAX_MESSAGE_BYTES})
    # Kafka's default timestamp window is unbounded, so the broker's clock does not matter.
    validated = validate_as_leader(records, config, now_ms=int(time.time() * 1000))
    for pos, header in validated.batches:
        timestamps = [record.timestamp for record in iter_records(records, pos, header)]
        assert len(timestamps) == header.records_count
        assert max(timestamps) == header.max_timestamp  # the client's own bookkeeping


@pytest.mark.parametrize(("client", "name"), produce_scenarios(), ids=lambda v: v)
def test_produced_records_match_what_the_client_was_given(client: str, name: str) -> None:
    scenario = manifest(client)["scenarios"][name]
    frames = [e for e in manifest(client)["frames"] if e["scenario"] == name]
    decoded = []
    sequences = []
    for entry in frames:
        if entry["api_key"] != PRODUCE:
            continue
        _, request = decode_request(read_frame(client, entry))
        records = request.topic_data[0].partition_data[0].records
        for pos, header in iter_batches(records):
            sequences.append((header.base_sequence, header.records_count))
            decoded += list(iter_records(records, pos, header))
    expected = scenario["records"]
    assert len(decoded) == len(expected)
    start, end = scenario["capture_window_ms"]
    for record, want in zip(decoded, expected, strict=True):
        assert record.key == capture.utf8(want["key"])
        assert record.value == capture.utf8(want["value"])
        assert record.headers == capture.record_headers(want)
        if want["timestamp"] is None:  # kcat: the producer's clock
            assert start - 1000 <= record.timestamp <= end + 1000
        else:
            assert record.timestamp == want["timestamp"]
    if scenario["idempotent"]:  # sequences run on across batches, from 0
        expected_start = 0
        for base_sequence, count in sequences:
            assert base_sequence == expected_start
            expected_start += count


# ------------------------------------------------------------------------------------------------
# consumer groups: the embedded consumer protocol payloads round-trip too

GROUP_FRAMES = [(c, e) for c, e in ALL_FRAMES if e["api_key"] in (JOIN_GROUP, SYNC_GROUP)]


@pytest.mark.parametrize(("client", "entry"), GROUP_FRAMES, ids=ids(GROUP_FRAMES))
def test_group_frame_consumer_protocol_payloads(client: str, entry: dict[str, Any]) -> None:
    scenario = scenario_of(client, entry)
    _, request = decode_request(read_frame(client, entry))
    assert request.group_id == scenario["client_id"]
    if entry["api_key"] == JOIN_GROUP:
        assert request.protocol_type == "consumer"
        assert request.protocols
        payloads = [(m.ConsumerProtocolSubscription, p.metadata) for p in request.protocols]
    else:
        (assignment,) = request.assignments  # the only member leads and assigns
        assert assignment.member_id == request.member_id
        payloads = [(m.ConsumerProtocolAssignment, assignment.assignment)]
    for cls, payload in payloads:
        decoded, version = m.decode_versioned(cls, payload)
        assert m.encode_versioned(decoded, version) == bytes(payload)
        if cls is m.ConsumerProtocolSubscription:
            assert decoded.topics == [scenario["topic"]]
        else:  # kafka-python's first join may come before it has the topic's metadata: empty
            assert [(tp.topic, tp.partitions) for tp in decoded.assigned_partitions] in (
                [],
                [(scenario["topic"], [0])],
            )


def test_group_scenarios_assign_then_commit_what_they_consumed() -> None:
    for client in ("confluent-kafka", "kafka-python", "aiokafka"):
        entries = [e for e in manifest(client)["frames"] if e["scenario"] == "group-consume"]
        topic_name = manifest(client)["scenarios"]["group-consume"]["topic"]
        last_sync = [e for e in entries if e["api_key"] == SYNC_GROUP][-1]
        _, request = decode_request(read_frame(client, last_sync))
        assignment, _ = m.decode_versioned(
            m.ConsumerProtocolAssignment, request.assignments[0].assignment
        )
        assert [(tp.topic, tp.partitions) for tp in assignment.assigned_partitions] == [
            (topic_name, [0])
        ]
        commits = [e for e in entries if e["api_key"] == OFFSET_COMMIT]
        assert commits, client
        _, request = decode_request(read_frame(client, commits[-1]))
        (topic,) = request.topics
        assert [(p.partition_index, p.committed_offset) for p in topic.partitions] == [(0, 3)]


# ------------------------------------------------------------------------------------------------
# Fetch frames (consume scenarios) ask for the served partition


@pytest.mark.parametrize(
    ("client", "entry"),
    [(c, e) for c, e in ALL_FRAMES if e["api_key"] == FETCH],
    ids=lambda value: value["file"] if isinstance(value, dict) else value,
)
def test_fetch_frame_targets_the_served_partition(client: str, entry: dict[str, Any]) -> None:
    scenario = scenario_of(client, entry)
    _, request = decode_request(read_frame(client, entry))
    (topic,) = request.topics
    if entry["api_version"] < 13:
        assert topic.topic == scenario["topic"]
    else:
        assert topic.topic_id != m.ZERO_UUID
    (partition,) = topic.partitions
    assert partition.partition == 0
    assert partition.fetch_offset in (0, len(scenario["records"]))
    if entry["api_version"] < 15:
        assert request.replica_id == -1  # a consumer, not a follower
    else:
        assert request.replica_state.replica_id == -1


# ------------------------------------------------------------------------------------------------
# live: a real broker, the recording proxy in front of it, real clients

REVERSE_TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def broker():
    """The capture's own broker: a throwaway Odradek node (tests use distinct topic names)."""
    with capture.CaptureBroker() as node:
        yield node


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_consumes_odradek_built_batches(broker, client: str, codec: str) -> None:
    # kcat prints records as text; it gets the same records (they are UTF-8)
    first = capture.sample_records(f"reverse-{client}-{codec}", null_header_value=True)
    second = capture.sample_records(f"reverse2-{client}-{codec}")[:2]
    topic = f"reverse-{client}-{codec}"
    broker.create_topic(topic)
    # two batches, so the client also moves from one batch to the next offset
    assert broker.append(topic, 0, capture.odradek_batch(first, codec)) == 0
    assert broker.append(topic, 0, capture.odradek_batch(second, codec)) == len(first)
    with capture.RecordingProxy(broker.upstream) as proxy:
        consume = capture.CONSUMERS[client]
        got = consume(
            proxy.address, topic, len(first) + len(second), f"reverse-{client}", REVERSE_TIMEOUT_S
        )
        fetches = [f for f in proxy.frames() if f.api_key == FETCH]
    assert not proxy.errors
    assert got == capture.expected_consumed(first + second)
    assert fetches, "the client fetched"


def test_recording_proxy_records_requests_and_responses(broker, tmp_path: Path) -> None:
    topic = "proxied"
    records = capture.sample_records("proxied")
    scenario = capture.Scenario(
        "confluent-kafka",
        "proxied",
        "produce",
        {"compression.type": "lz4", "linger.ms": 20, "enable.idempotence": True},
        topic,
        capture.run_confluent_produce,
        compression="lz4",
        records=records,
        idempotent=True,
    )
    broker.create_topic(topic)
    with capture.RecordingProxy(broker.upstream) as proxy:
        scenario.run(proxy.address, scenario)
        exchanges = proxy.exchanges()
        frames = proxy.frames()
    assert not proxy.errors
    # every request the client sent was answered, in order
    assert [e.request.frame for e in exchanges] == [f.frame for f in frames]
    assert {e.request.api_key for e in exchanges} >= {API_VERSIONS, 3, 22, PRODUCE}
    for exchange in exchanges:
        request = exchange.request
        assert exchange.response is not None, request.api_name
        correlation_id, response = decode_response(
            exchange.response, request.api_key, request.api_version
        )
        assert correlation_id == request.correlation_id
        if request.api_key == 3:  # recorded as the upstream sent it, before the rewrite
            assert [b.port for b in response.brokers] == [broker.upstream[1]]
        if request.api_key == PRODUCE:
            (topic_response,) = response.responses
            assert topic_response.partition_responses[0].error_code == 0
    # the produce went through unchanged: the broker hands the records back as they were given
    got = capture.confluent_consume(
        broker.address, topic, len(records), "proxied-check", REVERSE_TIMEOUT_S
    )
    assert got == capture.expected_consumed(records)

    capture.write_exchanges(tmp_path, exchanges, broker.address)
    written = json.loads((tmp_path / "manifest.json").read_text())
    assert len(written["exchanges"]) == len(exchanges)
    for entry, exchange in zip(written["exchanges"], exchanges, strict=True):
        assert (tmp_path / entry["request_file"]).read_bytes() == exchange.request.frame
        assert (tmp_path / entry["response_file"]).read_bytes() == exchange.response


def test_capture_writes_vectors_in_the_committed_layout(broker, tmp_path: Path) -> None:
    """One idempotent produce and one consume scenario captured end to end (real client, proxy,
    real broker): the directory has the manifest keys these tests read and the frames hold."""
    runs = [
        scenario
        for scenario in capture.scenarios()["kafka-python"][1]
        if scenario.name in ("produce-lz4", "consume")
    ]
    for scenario in runs:  # topics of their own, apart from the other tests' on this broker
        scenario.topic += "-layout"
    versions = capture.kafka_python_versions()
    count = capture.capture_client(broker, tmp_path, "kafka-python", versions, runs)
    written = json.loads((tmp_path / "kafka-python" / "manifest.json").read_text())
    committed = manifest("kafka-python")
    assert set(written) == set(committed)
    assert len(written["frames"]) == count
    produce = written["scenarios"]["produce-lz4"]
    assert set(produce) >= set(committed["scenarios"]["produce-lz4"])
    producer_id, epoch = produce["producer"]
    assert producer_id >= 0 and epoch >= 0
    for entry in written["frames"]:
        assert set(entry) == set(committed["frames"][0])
        frame = (tmp_path / "kafka-python" / entry["file"]).read_bytes()
        assert entry["peer_decode_error"] is None
        header, body = decode_request(frame)
        assert header.client_id == entry["client_id"]
        if entry["api_key"] == PRODUCE:
            records = body.topic_data[0].partition_data[0].records
            for _, batch in iter_batches(records):
                assert batch.compression is Compression.LZ4
                assert [batch.producer_id, batch.producer_epoch] == [producer_id, epoch]
    kinds = {(e["scenario"], e["api_key"]) for e in written["frames"]}
    assert {("produce-lz4", PRODUCE), ("produce-lz4", 22), ("consume", FETCH)} <= kinds
