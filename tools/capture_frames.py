#!/usr/bin/env python3
"""Capture byte-exact request frames from real Kafka clients.

A throwaway Kafka peer on 127.0.0.1 (random port), built only with Odradek's codec: every byte
it sends comes from `odradek.protocol` encoders. It records each request frame as received
(without the size prefix) and answers just enough for clients to go on: ApiVersions, Metadata
(one broker, itself; every topic one partition led by node 0), Produce, InitProducerId,
ListOffsets, Fetch (records given with `serve_records`, or produced ones), FindCoordinator and
OffsetForLeaderEpoch.

Modes::

    capture_frames.py --out tests/vectors          run every client scenario, write vectors
    capture_frames.py --serve [--port N]           run the capture peer alone until Ctrl-C
    capture_frames.py --upstream HOST:PORT --out DIR [--port N] [--duration S]
                                                   recording proxy in front of a real broker

The recording proxy forwards each connection to the upstream broker and records request and
response frames. It rewrites the broker addresses in Metadata and FindCoordinator responses to
its own, so clients stay behind it; this is right for single-broker upstreams only (every node
id maps to the one proxy address). Recorded responses are the upstream's bytes, unrewritten.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError, ErrorCode, UnsupportedVersionError
from odradek.protocol.framing import (
    FrameBuffer,
    decode_request,
    decode_request_header,
    decode_response,
    encode_response,
    peek_correlation_id,
)
from odradek.protocol.records import Compression, build_batch, iter_batches, patch_base_offset

MAX_FRAME_SIZE = 100 * 1024 * 1024
POLL_INTERVAL = 0.1  # seconds between checks of the stop flag in blocking socket calls
LONG_POLL_CAP_MS = 500  # an empty Fetch waits min(max_wait_ms, this), like a broker's long poll
LOOPBACK = "127.0.0.1"

API_VERSIONS = 18
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

# ------------------------------------------------------------------------------------------------
# recorded frames


@dataclass
class CapturedFrame:
    """One request frame as the client sent it, without the 4-byte size prefix."""

    sequence: int  # arrival order across all connections of one peer
    connection: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    frame: bytes
    error: str | None = None  # decode failure, if any (a finding, not a peer bug)

    @property
    def api_name(self) -> str:
        spec = m.API_BY_KEY.get(self.api_key)
        return spec.name if spec else f"ApiKey{self.api_key}"


@dataclass
class Exchange:
    """A request and its response as they crossed the recording proxy."""

    request: CapturedFrame
    response: bytes | None = None  # upstream's response frame without size prefix


def _header_fields(frame: bytes) -> tuple[int, int, int, str | None, str | None]:
    """(api key, version, correlation id, client id, error) of a request frame, best effort."""
    try:
        header, _ = decode_request_header(frame)
    except Exception as exc:  # noqa: BLE001 - a malformed header is recorded, not fatal
        key, version = (int.from_bytes(frame[i : i + 2], "big", signed=True) for i in (0, 2))
        correlation = int.from_bytes(frame[4:8], "big", signed=True) if len(frame) >= 8 else -1
        return key, version, correlation, None, f"{type(exc).__name__}: {exc}"
    return (
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        None,
    )


class _Recorder:
    """Thread-safe list of captured frames, numbered in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frames: list[CapturedFrame] = []

    def record(self, connection: int, frame: bytes, error: str | None = None) -> CapturedFrame:
        key, version, correlation, client_id, header_error = _header_fields(frame)
        with self._lock:
            captured = CapturedFrame(
                len(self._frames),
                connection,
                key,
                version,
                correlation,
                client_id,
                frame,
                error or header_error,
            )
            self._frames.append(captured)
        return captured

    def snapshot(self) -> list[CapturedFrame]:
        with self._lock:
            return list(self._frames)


# ------------------------------------------------------------------------------------------------
# a small threaded TCP server on loopback


class _LoopbackServer:
    """Accepts connections on 127.0.0.1 and runs `serve(sock, connection_id)` per connection in
    a thread. Blocking calls time out every POLL_INTERVAL so `stop()` is prompt."""

    def __init__(self, port: int = 0) -> None:
        self._requested_port = port
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections = 0
        self.errors: list[str] = []

    @property
    def port(self) -> int:
        assert self._listener is not None, "server not started"
        return self._listener.getsockname()[1]

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def stopping(self) -> threading.Event:
        return self._stopping

    def start(self) -> _LoopbackServer:
        self._listener = socket.create_server((LOOPBACK, self._requested_port))
        self._listener.settimeout(POLL_INTERVAL)
        self._spawn(self._accept_loop)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(POLL_INTERVAL)
            self._connections += 1
            self._spawn(self._guarded, sock, self._connections)

    def _guarded(self, sock: socket.socket, connection: int) -> None:
        with sock:
            try:
                self.serve(sock, connection)
            except Exception as exc:  # noqa: BLE001 - reported through .errors, then closed
                self.errors.append(f"connection {connection}: {type(exc).__name__}: {exc}")

    def serve(self, sock: socket.socket, connection: int) -> None:
        raise NotImplementedError

    def read_frames(self, sock: socket.socket) -> Iterable[bytes]:
        """Frames from `sock` until EOF or stop."""
        buffer = FrameBuffer(MAX_FRAME_SIZE)
        while not self._stopping.is_set():
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            buffer.feed(data)
            yield from buffer.frames()


# ------------------------------------------------------------------------------------------------
# the capture peer


class PartitionLog:
    """Batches of one partition, for Fetch; produced batches get offsets assigned in place."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (base offset, next offset, bytes)
        self.next_offset = 0

    def append(self, records: bytes | memoryview) -> int:
        """Append v2 batches, assigning offsets; returns the first one's base offset."""
        data = bytearray(records)
        base = self.next_offset
        for pos, header in iter_batches(data):
            patch_base_offset(data, pos, self.next_offset)
            first = self.next_offset
            self.next_offset += header.last_offset_delta + 1
            self.batches.append((first, self.next_offset, bytes(data[pos : pos + header.size])))
        return base

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches holding `offset` and after, at least one, then up to `max_bytes`."""
        out = bytearray()
        for _, next_offset, batch in self.batches:
            if next_offset <= offset:
                continue
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
        return bytes(out)


class CapturePeer(_LoopbackServer):
    """The fake broker (node 0). Records every request frame in `frames()`."""

    PRODUCER_ID = 1000
    PRODUCER_EPOCH = 0
    LEADER_EPOCH = 0
    CLUSTER_ID = "odradek-capture-peer"

    def __init__(self, topics: Iterable[str] = (), port: int = 0) -> None:
        super().__init__(port)
        self._recorder = _Recorder()
        self._lock = threading.Lock()
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        for topic in topics:
            self._topic_id(topic)
        self._handlers: dict[int, Callable[[m.RequestHeader, Any], Any]] = {
            0: self._produce,
            1: self._fetch,
            2: self._list_offsets,
            3: self._metadata,
            10: self._find_coordinator,
            18: self._api_versions,
            22: self._init_producer_id,
            23: self._offset_for_leader_epoch,
        }

    # ---------------------------------------------------------------------------- public

    def frames(self) -> list[CapturedFrame]:
        return self._recorder.snapshot()

    def serve_records(self, topic: str, partition: int, records: bytes) -> int:
        """Make `records` (v2 batches) fetchable; returns the base offset they got."""
        with self._lock:
            return self._log(topic, partition).append(records)

    def high_watermark(self, topic: str, partition: int) -> int:
        with self._lock:
            return self._log(topic, partition).next_offset

    # ---------------------------------------------------------------------------- plumbing

    def _topic_id(self, name: str) -> uuid.UUID:
        if name not in self._topic_ids:
            self._topic_ids[name] = uuid.uuid4()
        return self._topic_ids[name]

    def _log(self, topic: str, partition: int) -> PartitionLog:
        self._topic_id(topic)
        return self._logs.setdefault((topic, partition), PartitionLog())

    def serve(self, sock: socket.socket, connection: int) -> None:
        for frame in self.read_frames(sock):
            response = self._answer(connection, frame)
            if response is not None:
                sock.sendall(response)

    def _answer(self, connection: int, frame: bytes) -> bytes | None:
        try:
            header, request = decode_request(frame)
        except UnsupportedVersionError as exc:
            self._recorder.record(connection, frame, f"unsupported: {exc}")
            header = exc.header
            if header is not None and header.request_api_key == API_VERSIONS:
                # KIP-511: answer a too-new ApiVersions at v0 with our ranges
                body = self._api_versions_body(ErrorCode.UNSUPPORTED_VERSION)
                return encode_response(API_VERSIONS, 0, header.correlation_id, body)
            raise
        except DecodeError as exc:
            self._recorder.record(connection, frame, f"decode: {exc}")
            raise
        self._recorder.record(connection, frame)
        handler = self._handlers.get(header.request_api_key)
        if handler is None:
            raise RuntimeError(f"no answer for api key {header.request_api_key}")
        with self._lock:
            body = handler(header, request)
        if body is None:  # acks=0 produce
            return None
        if header.request_api_key == 1:
            body = self._long_poll(header, request, body)
        return encode_response(
            header.request_api_key, header.request_api_version, header.correlation_id, body
        )

    def _long_poll(self, header: m.RequestHeader, request: Any, body: Any) -> Any:
        """An empty Fetch waits like a broker would, so consumers don't spin."""
        if any(p.records for t in body.responses for p in t.partitions):
            return body
        self.stopping.wait(min(request.max_wait_ms, LONG_POLL_CAP_MS) / 1000)
        with self._lock:
            return self._fetch(header, request)

    # ---------------------------------------------------------------------------- answers

    def _api_versions_body(self, error: ErrorCode = ErrorCode.NONE) -> m.ApiVersionsResponse:
        versions = []
        for key in sorted(self._handlers):
            spec = m.API_BY_KEY[key]
            versions.append(
                m.ApiVersionsResponse.ApiVersion(
                    api_key=key, min_version=spec.min_version, max_version=spec.max_version
                )
            )
        return m.ApiVersionsResponse(error_code=int(error), api_keys=versions)

    def _api_versions(self, header: m.RequestHeader, request: Any) -> Any:
        return self._api_versions_body()

    def _metadata(self, header: m.RequestHeader, request: m.MetadataRequest) -> Any:
        version = header.request_api_version
        if request.topics is None or (version == 0 and not request.topics):
            names = list(self._topic_ids)
        else:
            by_id = {topic_id: name for name, topic_id in self._topic_ids.items()}
            names = [t.name if t.name is not None else by_id[t.topic_id] for t in request.topics]
        response_cls = m.MetadataResponse
        topics = []
        for name in names:
            partition = response_cls.MetadataResponsePartition(
                partition_index=0,
                leader_id=0,
                leader_epoch=self.LEADER_EPOCH,
                replica_nodes=[0],
                isr_nodes=[0],
            )
            topics.append(
                response_cls.MetadataResponseTopic(
                    name=name, topic_id=self._topic_id(name), partitions=[partition]
                )
            )
        broker = response_cls.MetadataResponseBroker(node_id=0, host=LOOPBACK, port=self.port)
        return response_cls(
            brokers=[broker], cluster_id=self.CLUSTER_ID, controller_id=0, topics=topics
        )

    def _produce(self, header: m.RequestHeader, request: m.ProduceRequest) -> Any:
        response_cls = m.ProduceResponse
        topics = []
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                base = self._log(topic.name, data.index).append(data.records or b"")
                partitions.append(
                    response_cls.PartitionProduceResponse(
                        index=data.index, base_offset=base, log_start_offset=0
                    )
                )
            topics.append(
                response_cls.TopicProduceResponse(name=topic.name, partition_responses=partitions)
            )
        if request.acks == 0:
            return None
        return response_cls(responses=topics)

    def _init_producer_id(self, header: m.RequestHeader, request: Any) -> Any:
        return m.InitProducerIdResponse(
            producer_id=self.PRODUCER_ID, producer_epoch=self.PRODUCER_EPOCH
        )

    def _list_offsets(self, header: m.RequestHeader, request: m.ListOffsetsRequest) -> Any:
        response_cls = m.ListOffsetsResponse
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                log = self._log(topic.name, p.partition_index)
                offset = log.next_offset if p.timestamp == LATEST_TIMESTAMP else 0
                partitions.append(
                    response_cls.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        old_style_offsets=[offset] if header.request_api_version == 0 else [],
                        offset=offset,
                        leader_epoch=self.LEADER_EPOCH,
                    )
                )
            topics.append(response_cls.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
        return response_cls(topics=topics)

    def _fetch(self, header: m.RequestHeader, request: m.FetchRequest) -> Any:
        response_cls = m.FetchResponse
        by_id = {topic_id: name for name, topic_id in self._topic_ids.items()}
        uses_ids = header.request_api_version >= 13
        topics = []
        for topic in request.topics:
            name = by_id.get(topic.topic_id) if uses_ids else topic.topic
            partitions = []
            for p in topic.partitions:
                if name is None:
                    partitions.append(
                        response_cls.PartitionData(
                            partition_index=p.partition, error_code=ErrorCode.UNKNOWN_TOPIC_ID
                        )
                    )
                    continue
                log = self._log(name, p.partition)
                partitions.append(
                    response_cls.PartitionData(
                        partition_index=p.partition,
                        high_watermark=log.next_offset,
                        last_stable_offset=log.next_offset,
                        log_start_offset=0,
                        records=log.read(p.fetch_offset, p.partition_max_bytes),
                    )
                )
            topics.append(
                response_cls.FetchableTopicResponse(
                    topic=name or "", topic_id=topic.topic_id, partitions=partitions
                )
            )
        return response_cls(session_id=0, responses=topics)

    def _find_coordinator(self, header: m.RequestHeader, request: m.FindCoordinatorRequest) -> Any:
        response_cls = m.FindCoordinatorResponse
        if header.request_api_version < 4:
            return response_cls(error_message=None, node_id=0, host=LOOPBACK, port=self.port)
        coordinators = [
            response_cls.Coordinator(
                key=key, node_id=0, host=LOOPBACK, port=self.port, error_message=None
            )
            for key in request.coordinator_keys
        ]
        return response_cls(coordinators=coordinators)

    def _offset_for_leader_epoch(self, header: m.RequestHeader, request: Any) -> Any:
        response_cls = m.OffsetForLeaderEpochResponse
        topics = []
        for topic in request.topics:
            partitions = [
                response_cls.EpochEndOffset(
                    partition=p.partition,
                    leader_epoch=self.LEADER_EPOCH,
                    end_offset=self._log(topic.topic, p.partition).next_offset,
                )
                for p in topic.partitions
            ]
            topics.append(
                response_cls.OffsetForLeaderTopicResult(topic=topic.topic, partitions=partitions)
            )
        return response_cls(topics=topics)


# ------------------------------------------------------------------------------------------------
# the recording proxy


class RecordingProxy(_LoopbackServer):
    """Forwards each connection to `upstream` and records request and response frames."""

    def __init__(self, upstream: tuple[str, int], port: int = 0) -> None:
        super().__init__(port)
        self.upstream = upstream
        self._lock = threading.Lock()
        self._recorder = _Recorder()
        self._exchanges: dict[tuple[int, int], Exchange] = {}  # (connection, correlation id)

    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return sorted(self._exchanges.values(), key=lambda e: e.request.sequence)

    def serve(self, client: socket.socket, connection: int) -> None:
        upstream = socket.create_connection(self.upstream, timeout=10)
        upstream.settimeout(POLL_INTERVAL)
        with upstream:
            responses = threading.Thread(
                target=self._pump_responses, args=(upstream, client, connection), daemon=True
            )
            responses.start()
            try:
                for frame in self.read_frames(client):
                    captured = self._recorder.record(connection, frame)
                    with self._lock:
                        self._exchanges[(connection, captured.correlation_id)] = Exchange(captured)
                    upstream.sendall(len(frame).to_bytes(4, "big") + frame)
            finally:
                upstream.shutdown(socket.SHUT_WR)
                responses.join(5)

    def _pump_responses(self, upstream: socket.socket, client: socket.socket, connection: int):
        try:
            for frame in self.read_frames(upstream):
                with self._lock:
                    exchange = self._exchanges.get((connection, peek_correlation_id(frame)))
                    if exchange is not None:
                        exchange.response = frame
                if exchange is None:
                    raise RuntimeError("response to an unknown correlation id")
                client.sendall(self._rewrite(exchange.request, frame))
        except Exception as exc:  # noqa: BLE001 - reported, then the connection closes
            self.errors.append(f"connection {connection} responses: {type(exc).__name__}: {exc}")
            client.close()

    def _rewrite(self, request: CapturedFrame, frame: bytes) -> bytes:
        """The response to forward, size-prefixed: broker addresses point at the proxy."""
        key, version = request.api_key, request.api_version
        if key not in (3, 10):
            return len(frame).to_bytes(4, "big") + frame
        correlation_id, body = decode_response(frame, key, version)
        if key == 3:
            for broker in body.brokers:
                broker.host, broker.port = LOOPBACK, self.port
        else:
            body.host, body.port = LOOPBACK, self.port
            for coordinator in body.coordinators:
                coordinator.host, coordinator.port = LOOPBACK, self.port
        return encode_response(key, version, correlation_id, body)


# ------------------------------------------------------------------------------------------------
# client scenarios

BASE_TIMESTAMP_MS = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENT_TIMEOUT_S = 20.0
MAX_FRAMES_PER_API_VERSION = 3  # per scenario; Produce frames are always all kept


def sample_records(tag: str, null_header_value: bool = False) -> list[dict[str, Any]]:
    """Short, compressible records with keys, headers and explicit timestamps.

    Values repeat a phrase so every codec actually shrinks them (librdkafka sends a batch
    uncompressed when compression does not help). Text is UTF-8, stored as such in the manifest.
    """
    last_headers = [["empty", ""]]
    if null_header_value:
        last_headers.append(["null-value", None])
    return [
        {
            "key": f"key-{tag}-0",
            "value": "odradek capture " * 6 + "#0",
            "headers": [["trace-id", f"{tag}-0"], ["source", "capture_frames"]],
            "timestamp": BASE_TIMESTAMP_MS,
        },
        {
            "key": f"key-{tag}-1",
            "value": "odradek capture " * 6 + "#1",
            "headers": [],
            "timestamp": BASE_TIMESTAMP_MS + 1_000,
        },
        {
            "key": f"key-{tag}-2",
            "value": "grüße aus odradek " * 5 + "#2",
            "headers": last_headers,
            "timestamp": BASE_TIMESTAMP_MS + 2_500,
        },
    ]


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _headers(record: dict[str, Any]) -> list[tuple[str, bytes | None]]:
    return [(name, _utf8(value)) for name, value in record["headers"]]


def odradek_batch(records: list[dict[str, Any]], codec: str) -> bytes:
    """A batch built by Odradek's RecordBatchBuilder holding `records`."""
    rows = [(r["timestamp"], _utf8(r["key"]), _utf8(r["value"]), _headers(r)) for r in records]
    return build_batch(rows, compression=Compression[codec.upper()])


@dataclass
class Scenario:
    client: str  # output directory name
    name: str
    settings: dict[str, Any]
    topic: str
    run: Callable[[CapturePeer, Scenario], None]
    compression: str | None = None  # codec of produced batches
    records: list[dict[str, Any]] | None = None  # what is produced, or served for consuming
    idempotent: bool = False
    # Filled while running.
    started_ms: int = 0
    finished_ms: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def client_id(self) -> str:
        return f"vectors-{self.client}-{self.name}"


def _check_consumed(scenario: Scenario, got: list[tuple[Any, ...]]) -> None:
    """Raise unless `got` (key, value, headers, timestamp) equals the served records."""
    expected = [
        (_utf8(r["key"]), _utf8(r["value"]), _headers(r), r["timestamp"])
        for r in scenario.records or []
    ]
    if got != expected:
        raise AssertionError(f"{scenario.client_id} consumed {got!r}, expected {expected!r}")


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------


def confluent_versions() -> dict[str, str]:
    import confluent_kafka

    return {
        "client": "confluent-kafka",
        "client_version": confluent_kafka.version()[0],
        "library": f"librdkafka {confluent_kafka.libversion()[0]}",
    }


def run_confluent_produce(peer: CapturePeer, scenario: Scenario) -> None:
    import confluent_kafka

    config = {"bootstrap.servers": peer.address, "client.id": scenario.client_id}
    config.update(scenario.settings)
    producer = confluent_kafka.Producer(config)
    metadata = producer.list_topics(scenario.topic, timeout=CLIENT_TIMEOUT_S)
    assert scenario.topic in metadata.topics
    errors: list[Any] = []
    for record in scenario.records or []:
        producer.produce(
            scenario.topic,
            key=_utf8(record["key"]),
            value=_utf8(record["value"]),
            headers=_headers(record),
            timestamp=record["timestamp"],
            partition=0,
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    if remaining or errors:
        raise RuntimeError(f"confluent produce: {remaining} undelivered, errors {errors}")


def confluent_consume(address: str, topic: str, count: int, client_id: str, timeout: float):
    """Assign partition 0 at offset 0 and poll `count` messages; (key, value, headers, ts)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": address,
            "client.id": client_id,
            "group.id": client_id,
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    got = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(f"confluent consume: {message.error()}")
            got.append(
                (message.key(), message.value(), message.headers() or [], message.timestamp()[1])
            )
    finally:
        consumer.close()
    return got


def run_confluent_consume(peer: CapturePeer, scenario: Scenario) -> None:
    got = confluent_consume(
        peer.address, scenario.topic, len(scenario.records or []), scenario.client_id, 20
    )
    _check_consumed(scenario, got)


# --- kafka-python -------------------------------------------------------------------------------


def kafka_python_versions() -> dict[str, str]:
    import kafka

    return {"client": "kafka-python", "client_version": kafka.__version__, "library": "pure Python"}


def run_kafka_python_produce(peer: CapturePeer, scenario: Scenario) -> None:
    import kafka

    producer = kafka.KafkaProducer(
        bootstrap_servers=peer.address, client_id=scenario.client_id, **scenario.settings
    )
    try:
        assert producer.partitions_for(scenario.topic) == {0}
        futures = [
            producer.send(
                scenario.topic,
                key=_utf8(record["key"]),
                value=_utf8(record["value"]),
                headers=_headers(record),
                timestamp_ms=record["timestamp"],
                partition=0,
            )
            for record in scenario.records or []
        ]
        producer.flush(CLIENT_TIMEOUT_S)
        for future in futures:
            future.get(CLIENT_TIMEOUT_S)
    finally:
        producer.close(CLIENT_TIMEOUT_S)


def kafka_python_consume(address: str, topic: str, count: int, client_id: str, timeout: float):
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=address, client_id=client_id, group_id=None, enable_auto_commit=False
    )
    partition = kafka.TopicPartition(topic, 0)
    got = []
    try:
        consumer.assign([partition])
        consumer.seek(partition, 0)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.poll(timeout_ms=200).get(partition, []):
                got.append((message.key, message.value, list(message.headers), message.timestamp))
    finally:
        consumer.close()
    return got


def run_kafka_python_consume(peer: CapturePeer, scenario: Scenario) -> None:
    got = kafka_python_consume(
        peer.address, scenario.topic, len(scenario.records or []), scenario.client_id, 20
    )
    _check_consumed(scenario, got)


# --- aiokafka -------------------------------------------------------------------------------------


def aiokafka_versions() -> dict[str, str]:
    import aiokafka

    return {"client": "aiokafka", "client_version": aiokafka.__version__, "library": "asyncio"}


def run_aiokafka_produce(peer: CapturePeer, scenario: Scenario) -> None:
    import aiokafka

    async def produce() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=peer.address, client_id=scenario.client_id, **scenario.settings
        )
        await producer.start()
        try:
            assert await producer.partitions_for(scenario.topic) == {0}
            batch = producer.create_batch()
            for record in scenario.records or []:
                appended = batch.append(
                    key=_utf8(record["key"]),
                    value=_utf8(record["value"]),
                    timestamp=record["timestamp"],
                    headers=_headers(record),
                )
                assert appended is not None
            batch.close()
            future = await producer.send_batch(batch, scenario.topic, partition=0)
            await asyncio.wait_for(future, CLIENT_TIMEOUT_S)
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(produce(), CLIENT_TIMEOUT_S * 2))


def run_aiokafka_consume(peer: CapturePeer, scenario: Scenario) -> None:
    import aiokafka

    count = len(scenario.records or [])

    async def consume() -> list[tuple[Any, ...]]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=peer.address, client_id=scenario.client_id, enable_auto_commit=False
        )
        await consumer.start()
        partition = aiokafka.TopicPartition(scenario.topic, 0)
        got = []
        try:
            consumer.assign([partition])
            consumer.seek(partition, 0)
            while len(got) < count:
                batches = await consumer.getmany(partition, timeout_ms=200)
                for message in batches.get(partition, []):
                    headers = [(name, value) for name, value in message.headers]
                    got.append((message.key, message.value, headers, message.timestamp))
        finally:
            await consumer.stop()
        return got

    _check_consumed(scenario, asyncio.run(asyncio.wait_for(consume(), CLIENT_TIMEOUT_S)))


# --- kcat ---------------------------------------------------------------------------------------

KCAT = "/usr/bin/kcat"
KCAT_HEADERS = [["trace-id", "kcat"], ["source", "capture_frames"]]


def kcat_versions() -> dict[str, str]:
    banner = subprocess.run([KCAT, "-V"], capture_output=True, text=True, timeout=10).stdout
    version = re.search(r"Version (\S+)", banner)
    library = re.search(r"librdkafka (\S+)", banner)
    return {
        "client": "kcat",
        "client_version": version.group(1) if version else "unknown",
        "library": f"librdkafka {library.group(1)}" if library else "librdkafka",
    }


def kcat_records(tag: str) -> list[dict[str, Any]]:
    """kcat sets no timestamps (the producer's clock: checked against the capture window), and
    its -H headers apply to every message."""
    return [
        {"key": f"key-{tag}-{i}", "value": value, "headers": KCAT_HEADERS, "timestamp": None}
        for i, value in enumerate(
            ["kcat capture " * 8 + "#0", "kcat capture " * 8 + "#1", "grüße von kcat " * 6 + "#2"]
        )
    ]


def _kcat(peer: CapturePeer, scenario: Scenario, args: list[str], stdin: str = "") -> str:
    command = [KCAT, "-b", peer.address, "-X", f"client.id={scenario.client_id}", *args]
    result = subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr}")
    return result.stdout


def run_kcat_produce(peer: CapturePeer, scenario: Scenario) -> None:
    headers = [arg for name, value in KCAT_HEADERS for arg in ("-H", f"{name}={value}")]
    lines = "".join(f"{r['key']}:{r['value']}\n" for r in scenario.records or [])
    _kcat(
        peer,
        scenario,
        ["-P", "-t", scenario.topic, "-p", "0", "-K", ":", "-z", scenario.settings["-z"], *headers],
        lines,
    )


def run_kcat_metadata(peer: CapturePeer, scenario: Scenario) -> None:
    listing = _kcat(peer, scenario, ["-L"])
    if scenario.topic not in listing:
        raise AssertionError(f"kcat -L did not list {scenario.topic}: {listing}")


def run_kcat_consume(peer: CapturePeer, scenario: Scenario) -> None:
    count = len(scenario.records or [])
    output = _kcat(
        peer, scenario, ["-C", "-t", scenario.topic, "-p", "0", "-o", "beginning", "-e", "-J"]
    )
    messages = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    got = [(m_["key"], m_["payload"], m_.get("headers", []), m_["ts"]) for m_ in messages]
    expected = [
        (r["key"], r["value"], [x for h in r["headers"] for x in h], r["timestamp"])
        for r in scenario.records or []
    ]
    if len(got) != count or got != expected:
        raise AssertionError(f"kcat consumed {got!r}, expected {expected!r}")


# --- the scenario list ----------------------------------------------------------------------------


def scenarios() -> dict[str, tuple[Callable[[], dict[str, str]], list[Scenario]]]:
    """client -> (version probe, scenarios)."""
    confluent = [
        Scenario(
            "confluent-kafka",
            f"produce-{codec}",
            {"compression.type": codec, "linger.ms": 50, "acks": "all"},
            f"vectors-confluent-{codec}",
            run_confluent_produce,
            compression=codec,
            records=sample_records(f"confluent-{codec}", null_header_value=True),
        )
        for codec in CODECS
    ]
    confluent.append(
        Scenario(
            "confluent-kafka",
            "produce-idempotent",
            {"compression.type": "none", "linger.ms": 50, "enable.idempotence": True},
            "vectors-confluent-idempotent",
            run_confluent_produce,
            compression="none",
            records=sample_records("confluent-idempotent", null_header_value=True),
            idempotent=True,
        )
    )
    confluent.append(
        Scenario(
            "confluent-kafka",
            "consume",
            {"group.id": "<client id>", "enable.auto.commit": False, "assign": "p0@0"},
            "vectors-confluent-consume",
            run_confluent_consume,
            records=sample_records("confluent-consume"),
        )
    )

    def python_producers(client: str, run: Callable, idempotence_key: str) -> list[Scenario]:
        produced = [
            Scenario(
                client,
                f"produce-{codec}",
                {"compression_type": None if codec == "none" else codec, "linger_ms": 50},
                f"vectors-{client}-{codec}",
                run,
                compression=codec,
                records=sample_records(f"{client}-{codec}"),
            )
            for codec in CODECS
        ]
        produced.append(
            Scenario(
                client,
                "produce-idempotent",
                {"compression_type": None, "linger_ms": 50, idempotence_key: True},
                f"vectors-{client}-idempotent",
                run,
                compression="none",
                records=sample_records(f"{client}-idempotent"),
                idempotent=True,
            )
        )
        return produced

    kafka_python = python_producers("kafka-python", run_kafka_python_produce, "enable_idempotence")
    kafka_python.append(
        Scenario(
            "kafka-python",
            "consume",
            {"group_id": None, "assign": "p0", "seek": 0},
            "vectors-kafka-python-consume",
            run_kafka_python_consume,
            records=sample_records("kafka-python-consume"),
        )
    )
    aio = python_producers("aiokafka", run_aiokafka_produce, "enable_idempotence")
    aio.append(
        Scenario(
            "aiokafka",
            "consume",
            {"group_id": None, "assign": "p0", "seek": 0},
            "vectors-aiokafka-consume",
            run_aiokafka_consume,
            records=sample_records("aiokafka-consume"),
        )
    )
    kcat = [
        Scenario(
            "kcat",
            f"produce-{codec}",
            {"-z": codec, "-K": ":", "-H": KCAT_HEADERS},
            f"vectors-kcat-{codec}",
            run_kcat_produce,
            compression=codec,
            records=kcat_records(f"kcat-{codec}"),
        )
        for codec in CODECS
    ]
    kcat.append(Scenario("kcat", "metadata", {"-L": True}, "vectors-kcat-metadata", run_kcat_metadata))
    kcat.append(
        Scenario(
            "kcat",
            "consume",
            {"-C": True, "-o": "beginning", "-e": True, "-J": True},
            "vectors-kcat-consume",
            run_kcat_consume,
            records=sample_records("kcat-consume"),
        )
    )
    return {
        "confluent-kafka": (confluent_versions, confluent),
        "kafka-python": (kafka_python_versions, kafka_python),
        "aiokafka": (aiokafka_versions, aio),
        "kcat": (kcat_versions, kcat),
    }


def run_scenario(scenario: Scenario) -> list[CapturedFrame]:
    """Run one scenario against a fresh peer; the frames it sent, in arrival order."""
    with CapturePeer([scenario.topic]) as peer:
        if scenario.run in (
            run_confluent_consume,
            run_kafka_python_consume,
            run_aiokafka_consume,
            run_kcat_consume,
        ):
            peer.serve_records(scenario.topic, 0, odradek_batch(scenario.records or [], "none"))
        scenario.started_ms = int(time.time() * 1000)
        try:
            scenario.run(peer, scenario)
        except Exception as exc:
            raise RuntimeError(f"{scenario.client_id} failed; peer errors {peer.errors}") from exc
        scenario.finished_ms = int(time.time() * 1000)
        frames = peer.frames()
    if peer.errors:
        raise RuntimeError(f"{scenario.client_id}: peer errors {peer.errors}")
    return frames


def select_frames(frames: list[CapturedFrame]) -> list[CapturedFrame]:
    """Drop repeats: identical bodies of one api/version (polls), and more than a few of each
    api/version; Produce frames are all kept (they carry the records)."""
    kept: list[CapturedFrame] = []
    seen_bodies: set[tuple[int, int, bytes]] = set()
    per_api: dict[tuple[int, int], int] = {}
    for frame in frames:
        body_key = (frame.api_key, frame.api_version, frame.frame[8:])  # after correlation id
        api = (frame.api_key, frame.api_version)
        if frame.api_key != 0:
            if body_key in seen_bodies or per_api.get(api, 0) >= MAX_FRAMES_PER_API_VERSION:
                continue
        seen_bodies.add(body_key)
        per_api[api] = per_api.get(api, 0) + 1
        kept.append(frame)
    return kept


def _scenario_manifest(scenario: Scenario) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "settings": scenario.settings,
        "client_id": scenario.client_id,
        "topic": scenario.topic,
        "compression": scenario.compression,
        "idempotent": scenario.idempotent,
        "records": scenario.records,
        "capture_window_ms": [scenario.started_ms, scenario.finished_ms],
    }
    if scenario.compression is not None:
        entry["kind"] = "produce"
    else:  # consume: the records were served by the peer, built by Odradek
        entry["kind"] = "consume" if scenario.records else "metadata"
    return entry


def capture_client(out: Path, client: str, versions: dict[str, str], runs: list[Scenario]) -> int:
    """Run a client's scenarios and write its directory; returns the number of frames."""
    directory = out / client
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    manifest: dict[str, Any] = {**versions, "scenarios": {}, "frames": []}
    number = 0
    for scenario in runs:
        frames = select_frames(run_scenario(scenario))
        manifest["scenarios"][scenario.name] = _scenario_manifest(scenario)
        for frame in frames:
            name = f"{number:02d}_{frame.api_name}_v{frame.api_version}.bin"
            (directory / name).write_bytes(frame.frame)
            manifest["frames"].append(
                {
                    "file": name,
                    "client": versions["client"],
                    "client_version": versions["client_version"],
                    "scenario": scenario.name,
                    "api_key": frame.api_key,
                    "api_name": frame.api_name,
                    "api_version": frame.api_version,
                    "correlation_id": frame.correlation_id,
                    "client_id": frame.client_id,
                    "connection": frame.connection,
                    "peer_decode_error": frame.error,
                }
            )
            number += 1
        print(f"  {client} {scenario.name}: {len(frames)} frames", file=sys.stderr)
    (directory / "manifest.json").write_text(
        json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return number


def capture_all(out: Path, clients: list[str] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for client, (versions, runs) in scenarios().items():
        if clients and client not in clients:
            continue
        count = capture_client(out, client, versions(), runs)
        print(f"{client}: {count} frames", file=sys.stderr)


# ------------------------------------------------------------------------------------------------
# proxy recording output


def write_exchanges(out: Path, exchanges: list[Exchange], upstream: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for number, exchange in enumerate(exchanges):
        request = exchange.request
        stem = f"{number:02d}_{request.api_name}_v{request.api_version}"
        (out / f"{stem}_request.bin").write_bytes(request.frame)
        entry = {
            "request_file": f"{stem}_request.bin",
            "response_file": None,
            "api_key": request.api_key,
            "api_name": request.api_name,
            "api_version": request.api_version,
            "correlation_id": request.correlation_id,
            "client_id": request.client_id,
            "connection": request.connection,
        }
        if exchange.response is not None:
            (out / f"{stem}_response.bin").write_bytes(exchange.response)
            entry["response_file"] = f"{stem}_response.bin"
        entries.append(entry)
    manifest = {"upstream": upstream, "exchanges": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def _wait_for_interrupt(duration: float | None) -> None:
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="output directory")
    parser.add_argument("--clients", help="comma-separated subset of clients to capture")
    parser.add_argument("--serve", action="store_true", help="run the capture peer alone")
    parser.add_argument("--upstream", help="HOST:PORT of a broker: run the recording proxy")
    parser.add_argument("--port", type=int, default=0, help="listen port (default: random)")
    parser.add_argument("--duration", type=float, help="stop the peer/proxy after N seconds")
    args = parser.parse_args(argv)

    if args.upstream:
        if args.out is None:
            parser.error("--upstream needs --out")
        host, _, port = args.upstream.rpartition(":")
        with RecordingProxy((host, int(port)), args.port) as proxy:
            print(f"recording proxy on {proxy.address} -> {args.upstream}", flush=True)
            _wait_for_interrupt(args.duration)
        write_exchanges(args.out, proxy.exchanges(), args.upstream)
        return 0
    if args.serve:
        with CapturePeer(port=args.port) as peer:
            print(f"capture peer on {peer.address}", flush=True)
            _wait_for_interrupt(args.duration)
        for frame in peer.frames():
            print(f"{frame.api_name} v{frame.api_version} {frame.client_id} {len(frame.frame)}B")
        return 0
    if args.out is None:
        parser.error("--out is required")
    capture_all(args.out, args.clients.split(",") if args.clients else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
