#!/usr/bin/env python3
"""Capture byte-exact request frames from real Kafka clients talking to a real Odradek broker.

Each capture starts a throwaway Odradek node (a child process, data in a temporary directory,
random ports on 127.0.0.1, started as the broker tests start theirs) and puts a recording proxy
in front of it. Every scenario runs a real client against a fresh proxy; the proxy records each
request frame as the client sent it (without the size prefix) and forwards it to the broker.

Modes::

    capture_frames.py --out tests/vectors          run every client scenario, write vectors
    capture_frames.py --serve [--port N] [--out DIR]
                                                   a real broker behind the proxy until Ctrl-C
    capture_frames.py --upstream HOST:PORT --out DIR [--port N] [--duration S]
                                                   recording proxy in front of a running broker

The recording proxy forwards each connection to the upstream broker and records request and
response frames. It rewrites the broker addresses in Metadata and FindCoordinator responses to
its own, so clients stay behind it; this is right for single-broker upstreams only (every node
id maps to the one proxy address). Recorded responses are the upstream's bytes, unrewritten.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

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
from odradek.protocol.records import Compression, RecordBatchBuilder

MAX_FRAME_SIZE = 100 * 1024 * 1024
POLL_INTERVAL = 0.1  # seconds between checks of the stop flag in blocking socket calls
LOOPBACK = "127.0.0.1"

API_VERSIONS = 18
INIT_PRODUCER_ID = 22
TRANSACTION_APIS = {24, 26}  # AddPartitionsToTxn, EndTxn

# ------------------------------------------------------------------------------------------------
# recorded frames


@dataclass
class CapturedFrame:
    """One request frame as the client sent it, without the 4-byte size prefix."""

    sequence: int  # arrival order across all connections of one proxy
    connection: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    frame: bytes
    error: str | None = None  # Odradek's decode failure, if any (a finding, not a capture bug)

    @property
    def api_name(self) -> str:
        spec = m.API_BY_KEY.get(self.api_key)
        return spec.name if spec else f"ApiKey{self.api_key}"


@dataclass
class Exchange:
    """A request and its response as they crossed the recording proxy."""

    request: CapturedFrame
    response: bytes | None = None  # upstream's response frame without size prefix


def _decode_error(frame: bytes) -> str | None:
    """Why Odradek's codec cannot decode a request frame (None: it can)."""
    try:
        decode_request(frame)
    except UnsupportedVersionError as exc:
        return f"unsupported: {exc}"
    except DecodeError as exc:
        return f"decode: {exc}"
    return None


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

    def record(self, connection: int, frame: bytes) -> CapturedFrame:
        key, version, correlation, client_id, header_error = _header_fields(frame)
        error = header_error or _decode_error(frame)
        with self._lock:
            captured = CapturedFrame(
                len(self._frames),
                connection,
                key,
                version,
                correlation,
                client_id,
                frame,
                error,
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
        self._port = 0
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections = 0
        self.errors: list[str] = []

    @property
    def port(self) -> int:
        assert self._port, "server not started"
        return self._port

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def stopping(self) -> threading.Event:
        return self._stopping

    def start(self) -> _LoopbackServer:
        self._listener = socket.create_server((LOOPBACK, self._requested_port))
        self._port = self._listener.getsockname()[1]
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
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away mid-answer (a closing consumer's long poll)
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
# the real broker behind the proxy

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"
BROKER_START_TIMEOUT_S = 60.0
SETUP_TIMEOUT_S = 30.0  # per direct request that prepares a scenario


def _test_harness() -> tuple[type, type, Callable[..., m.ProduceRequest]]:
    """(BrokerProcess, RawClient, produce_request) from the tests' harness: a throwaway node is
    started here exactly as the broker tests start theirs, not by a copy of that code."""
    for directory in (TESTS_DIR, TESTS_DIR / "server"):
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
    from broker_process import BrokerProcess
    from raw_client import RawClient, produce_request

    return BrokerProcess, RawClient, produce_request


class CaptureBroker:
    """A real Odradek node in a child process, its data in a temporary directory, random ports
    on 127.0.0.1. Scenarios are prepared with direct requests (not through the proxy, so they
    are not recorded): topics created, records appended for consumers."""

    def __init__(self) -> None:
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: Any = None

    def __enter__(self) -> Self:
        broker_process, _, _ = _test_harness()
        self._workdir = tempfile.TemporaryDirectory(prefix="odradek-capture-")
        self._process = broker_process(Path(self._workdir.name))
        try:
            self._process.start(BROKER_START_TIMEOUT_S)
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        try:
            if self._process is not None:
                self._process.stop()
        finally:
            if self._workdir is not None:
                self._workdir.cleanup()

    @property
    def upstream(self) -> tuple[str, int]:
        return (self._process.host, self._process.port)

    @property
    def address(self) -> str:
        return self._process.bootstrap

    def log_tail(self) -> str:
        return self._process.log_tail()

    def api_keys(self) -> set[int]:
        """The API keys the broker advertises in ApiVersions."""
        _, raw_client, _ = _test_harness()
        with raw_client(*self.upstream, timeout=SETUP_TIMEOUT_S) as client:
            response = client.call(
                API_VERSIONS,
                3,
                m.ApiVersionsRequest(
                    client_software_name="capture_frames", client_software_version="1"
                ),
            )
        return {api.api_key for api in response.api_keys}

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        _, raw_client, _ = _test_harness()
        with raw_client(*self.upstream, timeout=SETUP_TIMEOUT_S) as client:
            client.create_topic(topic, partitions)

    def append(self, topic: str, partition: int, records: bytes) -> int:
        """Produce `records` (v2 batches, as built) with acks=all; the base offset they got."""
        _, raw_client, produce_request = _test_harness()
        with raw_client(*self.upstream, timeout=SETUP_TIMEOUT_S) as client:
            response = client.call(0, 9, produce_request(topic, partition, records))
        answer = response.responses[0].partition_responses[0]
        if answer.error_code != 0:
            raise RuntimeError(f"produce to {topic}-{partition}: {ErrorCode(answer.error_code)!r}")
        return answer.base_offset


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

    def frames(self) -> list[CapturedFrame]:
        """Every request frame, in arrival order (also those without a response)."""
        return self._recorder.snapshot()

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
        elif version < 4:  # one coordinator, top-level fields
            body.host, body.port = LOOPBACK, self.port
        else:  # KIP-699: a list of coordinators, one per key
            for coordinator in body.coordinators:
                coordinator.host, coordinator.port = LOOPBACK, self.port
        return encode_response(key, version, correlation_id, body)


# ------------------------------------------------------------------------------------------------
# client scenarios

BASE_TIMESTAMP_MS = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENT_TIMEOUT_S = 20.0
MAX_FRAMES_PER_API_VERSION = 3  # per scenario; Produce frames are always all kept

Headers = list[tuple[str, bytes | None]]
#: A record as a client hands it back: (offset, key, value, headers, timestamp).
Consumed = tuple[int, bytes | None, bytes | None, Headers, int]


def sample_records(tag: str, null_header_value: bool = False) -> list[dict[str, Any]]:
    """Short, compressible records with keys, headers and explicit timestamps.

    Values repeat a phrase so every codec actually shrinks them (librdkafka sends a batch
    uncompressed when compression does not help). Text is UTF-8, stored as such in the manifest.
    """
    last_headers: list[list[str | None]] = [["empty", ""]]
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


def utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def record_headers(record: dict[str, Any]) -> Headers:
    return [(name, utf8(value)) for name, value in record["headers"]]


def expected_consumed(records: list[dict[str, Any]]) -> list[Consumed]:
    """What a consumer should hand back for `records` served from offset 0."""
    return [
        (offset, utf8(r["key"]), utf8(r["value"]), record_headers(r), r["timestamp"])
        for offset, r in enumerate(records)
    ]


def odradek_batch(records: list[dict[str, Any]], codec: str, base_offset: int = 0) -> bytes:
    """One batch holding `records`, built by Odradek's RecordBatchBuilder with `codec`."""
    builder = RecordBatchBuilder(base_offset=base_offset, compression=Compression[codec.upper()])
    for r in records:
        builder.append(r["timestamp"], utf8(r["key"]), utf8(r["value"]), record_headers(r))
    return builder.build()


@dataclass
class Scenario:
    client: str  # output directory name
    name: str
    kind: str  # "produce", "consume" (records appended beforehand), "admin" or "metadata"
    settings: dict[str, Any]  # what was passed to the client (client.id/bootstrap aside)
    topic: str
    run: Callable[[str, Scenario], None]  # (bootstrap address, scenario)
    compression: str | None = None  # codec of produced batches
    records: list[dict[str, Any]] | None = None  # produced, or served for consuming
    idempotent: bool = False
    transactional: bool = False
    # Filled while running.
    started_ms: int = 0
    finished_ms: int = 0
    producer: list[int] | None = None  # [id, epoch] the broker granted (InitProducerId)

    @property
    def client_id(self) -> str:
        return f"vectors-{self.client}-{self.name}"


def _check_consumed(scenario: Scenario, got: list[Consumed]) -> None:
    expected = expected_consumed(scenario.records or [])
    if got != expected:
        raise AssertionError(f"{scenario.client_id} consumed {got!r}, expected {expected!r}")


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------


def confluent_versions() -> dict[str, str]:
    import confluent_kafka

    return {
        "client": "confluent-kafka",
        "client_version": importlib.metadata.version("confluent-kafka"),
        "library": f"librdkafka {confluent_kafka.libversion()[0]}",
    }


def run_confluent_produce(address: str, scenario: Scenario) -> None:
    import confluent_kafka

    config = {"bootstrap.servers": address, "client.id": scenario.client_id}
    config.update(scenario.settings)
    producer = confluent_kafka.Producer(config)
    metadata = producer.list_topics(scenario.topic, timeout=CLIENT_TIMEOUT_S)
    assert scenario.topic in metadata.topics
    if scenario.transactional:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
    errors: list[Any] = []
    for record in scenario.records or []:
        producer.produce(
            scenario.topic,
            key=utf8(record["key"]),
            value=utf8(record["value"]),
            headers=record_headers(record),
            timestamp=record["timestamp"],
            partition=0,
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
    if scenario.transactional:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    if remaining or errors:
        raise RuntimeError(f"confluent produce: {remaining} undelivered, errors {errors}")


def confluent_consume(
    address: str, topic: str, count: int, client_id: str, timeout: float
) -> list[Consumed]:
    """Assign partition 0 at offset 0 and poll up to `count` messages within `timeout`."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": address,
            "client.id": client_id,
            "group.id": client_id,  # required by librdkafka, unused with assign()
            "enable.auto.commit": False,
        }
    )
    got: list[Consumed] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(f"confluent consume: {message.error()}")
            headers = [(name, value) for name, value in message.headers() or []]
            got.append(
                (message.offset(), message.key(), message.value(), headers, message.timestamp()[1])
            )
    finally:
        consumer.close()
    return got


def confluent_group_consume(
    address: str, topic: str, count: int, client_id: str, timeout: float
) -> list[Consumed]:
    """Subscribe in group `client_id` from the earliest offset, poll, commit, leave."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": address,
            "client.id": client_id,
            "group.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[Consumed] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(f"confluent consume: {message.error()}")
            headers = [(name, value) for name, value in message.headers() or []]
            got.append(
                (message.offset(), message.key(), message.value(), headers, message.timestamp()[1])
            )
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


# --- kafka-python -------------------------------------------------------------------------------


def kafka_python_versions() -> dict[str, str]:
    version = importlib.metadata.version("kafka-python")
    return {"client": "kafka-python", "client_version": version, "library": "pure Python"}


def run_kafka_python_produce(address: str, scenario: Scenario) -> None:
    import kafka

    producer = kafka.KafkaProducer(
        bootstrap_servers=address, client_id=scenario.client_id, **scenario.settings
    )
    try:
        assert producer.partitions_for(scenario.topic) == {0}
        if scenario.transactional:
            producer.init_transactions()
            producer.begin_transaction()
        futures = [
            producer.send(
                scenario.topic,
                key=utf8(record["key"]),
                value=utf8(record["value"]),
                headers=record_headers(record),
                timestamp_ms=record["timestamp"],
                partition=0,
            )
            for record in scenario.records or []
        ]
        if scenario.transactional:
            producer.commit_transaction()
        producer.flush(CLIENT_TIMEOUT_S)
        for future in futures:
            future.get(CLIENT_TIMEOUT_S)
    finally:
        producer.close(CLIENT_TIMEOUT_S)


def kafka_python_consume(
    address: str, topic: str, count: int, client_id: str, timeout: float
) -> list[Consumed]:
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=address, client_id=client_id, group_id=None, enable_auto_commit=False
    )
    partition = kafka.TopicPartition(topic, 0)
    got: list[Consumed] = []
    try:
        consumer.assign([partition])
        consumer.seek(partition, 0)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.poll(timeout_ms=200).get(partition, []):
                headers = [(name, value) for name, value in message.headers]
                got.append((message.offset, message.key, message.value, headers, message.timestamp))
    finally:
        consumer.close()
    return got


def kafka_python_group_consume(
    address: str, topic: str, count: int, client_id: str, timeout: float
) -> list[Consumed]:
    import kafka

    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=address,
        client_id=client_id,
        group_id=client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    got: list[Consumed] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                for message in messages:
                    headers = [(name, value) for name, value in message.headers]
                    got.append(
                        (message.offset, message.key, message.value, headers, message.timestamp)
                    )
        consumer.commit()
    finally:
        consumer.close()
    return got


# --- aiokafka -------------------------------------------------------------------------------------


def aiokafka_versions() -> dict[str, str]:
    version = importlib.metadata.version("aiokafka")
    return {"client": "aiokafka", "client_version": version, "library": "asyncio"}


def run_aiokafka_produce(address: str, scenario: Scenario) -> None:
    import aiokafka

    async def produce() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=address, client_id=scenario.client_id, **scenario.settings
        )
        await producer.start()
        try:
            assert await producer.partitions_for(scenario.topic) == {0}
            if scenario.transactional:
                await producer.begin_transaction()
            batch = producer.create_batch()
            for record in scenario.records or []:
                appended = batch.append(
                    key=utf8(record["key"]),
                    value=utf8(record["value"]),
                    timestamp=record["timestamp"],
                    headers=record_headers(record),
                )
                assert appended is not None
            batch.close()
            delivered = await producer.send_batch(batch, scenario.topic, partition=0)
            await delivered
            if scenario.transactional:
                await producer.commit_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(produce(), CLIENT_TIMEOUT_S))


def aiokafka_consume(
    address: str, topic: str, count: int, client_id: str, timeout: float
) -> list[Consumed]:
    import aiokafka

    async def consume() -> list[Consumed]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=address, client_id=client_id, enable_auto_commit=False
        )
        await consumer.start()
        partition = aiokafka.TopicPartition(topic, 0)
        got: list[Consumed] = []
        try:
            consumer.assign([partition])
            consumer.seek(partition, 0)
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(partition, timeout_ms=200)
                for message in batches.get(partition, []):
                    headers = [(name, value) for name, value in message.headers]
                    got.append(
                        (message.offset, message.key, message.value, headers, message.timestamp)
                    )
        finally:
            await consumer.stop()
        return got

    return asyncio.run(asyncio.wait_for(consume(), timeout + CLIENT_TIMEOUT_S))


def aiokafka_group_consume(
    address: str, topic: str, count: int, client_id: str, timeout: float
) -> list[Consumed]:
    import aiokafka

    async def consume() -> list[Consumed]:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=address,
            client_id=client_id,
            group_id=client_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        got: list[Consumed] = []
        try:
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    for message in messages:
                        headers = [(name, value) for name, value in message.headers]
                        got.append(
                            (message.offset, message.key, message.value, headers, message.timestamp)
                        )
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(asyncio.wait_for(consume(), timeout + CLIENT_TIMEOUT_S))


# --- kcat ---------------------------------------------------------------------------------------

KCAT = "/usr/bin/kcat"
KCAT_HEADERS = [["trace-id", "kcat"], ["source", "capture_frames"]]


def kcat_versions() -> dict[str, str]:
    banner = subprocess.run(
        [KCAT, "-V"], check=True, capture_output=True, text=True, timeout=10
    ).stdout
    version = re.search(r"Version (\S+)", banner)
    library = re.search(r"librdkafka (\S+)", banner)
    return {
        "client": "kcat",
        "client_version": version.group(1) if version else "unknown",
        "library": f"librdkafka {library.group(1)}" if library else "librdkafka",
    }


def kcat_records(tag: str) -> list[dict[str, Any]]:
    """kcat sets no timestamps (the producer's clock: checked against the capture window), and
    its -H headers go on every message."""
    values = ["kcat capture " * 8 + "#0", "kcat capture " * 8 + "#1", "grüße von kcat " * 6 + "#2"]
    return [
        {"key": f"key-{tag}-{i}", "value": value, "headers": KCAT_HEADERS, "timestamp": None}
        for i, value in enumerate(values)
    ]


def _kcat(address: str, client_id: str, args: list[str], stdin: str = "", timeout: float = 20):
    command = [KCAT, "-b", address, "-X", f"client.id={client_id}", *args]
    result = subprocess.run(
        command, check=False, input=stdin, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr}")
    return result.stdout


def run_kcat_produce(address: str, scenario: Scenario) -> None:
    headers = [arg for name, value in KCAT_HEADERS for arg in ("-H", f"{name}={value}")]
    lines = "".join(f"{r['key']}:{r['value']}\n" for r in scenario.records or [])
    args = ["-P", "-t", scenario.topic, "-p", "0", "-K", ":", "-z", scenario.settings["-z"]]
    _kcat(address, scenario.client_id, args + headers, lines)


def run_kcat_metadata(address: str, scenario: Scenario) -> None:
    listing = _kcat(address, scenario.client_id, ["-L"])
    if scenario.topic not in listing:
        raise AssertionError(f"kcat -L did not list {scenario.topic}: {listing}")


def kcat_consume(
    address: str, topic: str, count: int, client_id: str, timeout: float
) -> list[Consumed]:
    """`kcat -C -J` from the beginning to the end of partition 0 (kcat prints text: the
    records must be UTF-8)."""
    args = ["-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-c", str(count), "-J"]
    output = _kcat(address, client_id, args, timeout=timeout)
    got: list[Consumed] = []
    for line in output.splitlines():
        message = json.loads(line)
        flat = message.get("headers") or []
        headers = [(flat[i], utf8(flat[i + 1])) for i in range(0, len(flat), 2)]
        key, value = utf8(message["key"]), utf8(message["payload"])
        got.append((message["offset"], key, value, headers, message["ts"]))
    return got


# --- admin clients --------------------------------------------------------------------------------

ADMIN_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "60000"}


def run_confluent_admin(address: str, scenario: Scenario) -> None:
    from confluent_kafka import admin

    client = admin.AdminClient({"bootstrap.servers": address, "client.id": scenario.client_id})
    topic, timeout = scenario.topic, CLIENT_TIMEOUT_S
    new_topic = admin.NewTopic(topic, num_partitions=3, replication_factor=1, config=ADMIN_CONFIGS)
    for future in client.create_topics([new_topic]).values():
        future.result(timeout)
    for future in client.create_partitions([admin.NewPartitions(topic, 4)]).values():
        future.result(timeout)
    resource = admin.ConfigResource(admin.ResourceType.TOPIC, topic)
    for future in client.describe_configs([resource]).values():
        configs = future.result(timeout)
        assert configs["cleanup.policy"].value == ADMIN_CONFIGS["cleanup.policy"], configs
    client.list_consumer_groups().result(timeout)
    cluster = client.describe_cluster().result(timeout)
    assert cluster.controller.id in {node.id for node in cluster.nodes}, cluster
    for future in client.delete_topics([topic]).values():
        future.result(timeout)


def run_kafka_python_admin(address: str, scenario: Scenario) -> None:
    from kafka import admin

    client = admin.KafkaAdminClient(bootstrap_servers=address, client_id=scenario.client_id)
    topic = scenario.topic
    try:
        client.create_topics([admin.NewTopic(topic, 3, 1, topic_configs=ADMIN_CONFIGS)])
        client.create_partitions({topic: admin.NewPartitions(4)})
        client.describe_configs([admin.ConfigResource(admin.ConfigResourceType.TOPIC, topic)])
        client.list_groups()
        cluster = client.describe_cluster()
        assert cluster["controller_id"] in {b["broker_id"] for b in cluster["brokers"]}, cluster
        client.delete_topics([topic])
    finally:
        client.close()


def run_aiokafka_admin(address: str, scenario: Scenario) -> None:
    from aiokafka import admin
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def administer() -> None:
        client = admin.AIOKafkaAdminClient(bootstrap_servers=address, client_id=scenario.client_id)
        await client.start()
        topic = scenario.topic
        try:
            await client.create_topics([admin.NewTopic(topic, 3, 1, topic_configs=ADMIN_CONFIGS)])
            await client.create_partitions({topic: admin.NewPartitions(4)})
            resource = ConfigResource(ConfigResourceType.TOPIC, topic)
            await client.describe_configs([resource])
            await client.list_consumer_groups()
            cluster = await client.describe_cluster()
            assert cluster["controller_id"] in {b["node_id"] for b in cluster["brokers"]}, cluster
            await client.delete_topics([topic])
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(administer(), CLIENT_TIMEOUT_S))


ADMINS: dict[str, Callable[[str, Scenario], None]] = {
    "confluent-kafka": run_confluent_admin,
    "kafka-python": run_kafka_python_admin,
    "aiokafka": run_aiokafka_admin,
}


def _admin_scenario(client: str) -> Scenario:
    operations = [
        "create_topics(3 partitions, rf 1, configs)",
        "create_partitions(4)",
        "describe_configs(topic)",
        "list_consumer_groups",
        "describe_cluster",
        "delete_topics",
    ]
    settings = {"operations": operations, "configs": ADMIN_CONFIGS}
    return Scenario(client, "admin", "admin", settings, f"vectors-{client}-admin", ADMINS[client])


# --- the scenario list ----------------------------------------------------------------------------

#: client -> f(address, topic, count, client_id, timeout): consume partition 0 from offset 0
CONSUMERS: dict[str, Callable[[str, str, int, str, float], list[Consumed]]] = {
    "confluent-kafka": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
    "kcat": kcat_consume,
}


#: the same, subscribed in a consumer group named after the client id (classic protocol)
GROUP_CONSUMERS: dict[str, Callable[[str, str, int, str, float], list[Consumed]]] = {
    "confluent-kafka": confluent_group_consume,
    "kafka-python": kafka_python_group_consume,
    "aiokafka": aiokafka_group_consume,
}


def run_consume(address: str, scenario: Scenario) -> None:
    consumers = GROUP_CONSUMERS if scenario.settings.get("group") else CONSUMERS
    consume = consumers[scenario.client]
    count = len(scenario.records or [])
    got = consume(address, scenario.topic, count, scenario.client_id, CLIENT_TIMEOUT_S)
    _check_consumed(scenario, got)


def _consume_scenarios(client: str, settings: dict[str, Any]) -> list[Scenario]:
    """Assigned partition 0 from offset 0; and, where the client has one here, the group
    consumer (subscribe, earliest, commit, leave)."""
    runs = [
        Scenario(
            client,
            "consume",
            "consume",
            settings,
            f"vectors-{client}-consume",
            run_consume,
            records=sample_records(f"{client}-consume"),
        )
    ]
    if client in GROUP_CONSUMERS:
        runs.append(
            Scenario(
                client,
                "group-consume",
                "consume",
                {
                    "group": "<client id>",
                    "subscribe": True,
                    "offset_reset": "earliest",
                    "auto_commit": False,
                    "commit": "sync after polling",
                },
                f"vectors-{client}-group-consume",
                run_consume,
                records=sample_records(f"{client}-group"),
            )
        )
    return runs


def _confluent_scenarios() -> list[Scenario]:
    def produce(name: str, codec: str, extra: dict[str, Any], idempotent: bool) -> Scenario:
        return Scenario(
            "confluent-kafka",
            name,
            "produce",
            {"compression.type": codec, "linger.ms": 50, **extra},
            f"vectors-confluent-{name}",
            run_confluent_produce,
            compression=codec,
            records=sample_records(f"confluent-{name}", null_header_value=True),
            idempotent=idempotent,
        )

    runs = [produce(f"produce-{c}", c, {"enable.idempotence": False}, False) for c in CODECS]
    runs.append(produce("produce-idempotent", "none", {"enable.idempotence": True}, True))
    transactional = produce(
        "produce-transactional", "gzip", {"transactional.id": "vectors-confluent-txn"}, True
    )
    transactional.transactional = True
    runs.append(transactional)
    runs += _consume_scenarios("confluent-kafka", {"group.id": "<client id>", "assign": "0@0"})
    runs.append(_admin_scenario("confluent-kafka"))
    return runs


def _python_scenarios(client: str, run: Callable[[str, Scenario], None], default_idempotent: bool):
    """kafka-python and aiokafka: each codec with the client's default idempotence (kafka-python
    3: on, aiokafka: off), once with the other setting, then a consumer."""

    def produce(name: str, codec: str, idempotent: bool, **extra: Any) -> Scenario:
        settings = {
            "compression_type": None if codec == "none" else codec,
            "linger_ms": 50,
            "enable_idempotence": idempotent,
            **extra,
        }
        return Scenario(
            client,
            name,
            "produce",
            settings,
            f"vectors-{client}-{name}",
            run,
            compression=codec,
            records=sample_records(f"{client}-{name}"),
            idempotent=idempotent,
            transactional="transactional_id" in extra,
        )

    runs = [produce(f"produce-{codec}", codec, default_idempotent) for codec in CODECS]
    other = "produce-idempotent" if not default_idempotent else "produce-not-idempotent"
    runs.append(produce(other, "none", not default_idempotent))
    runs.append(
        produce("produce-transactional", "gzip", True, transactional_id=f"vectors-{client}-txn")
    )
    runs += _consume_scenarios(client, {"group_id": None, "assign": "p0", "seek": 0})
    runs.append(_admin_scenario(client))
    return runs


def _kcat_scenarios() -> list[Scenario]:
    runs = [
        Scenario(
            "kcat",
            f"produce-{codec}",
            "produce",
            {"-z": codec, "-K": ":", "-H": KCAT_HEADERS},
            f"vectors-kcat-{codec}",
            run_kcat_produce,
            compression=codec,
            records=kcat_records(f"kcat-{codec}"),
        )
        for codec in CODECS
    ]
    runs.append(
        Scenario(
            "kcat", "metadata", "metadata", {"-L": True}, "vectors-kcat-meta", run_kcat_metadata
        )
    )
    runs += _consume_scenarios("kcat", {"-C": True, "-o": "beginning", "-e": True, "-J": True})
    return runs


def scenarios() -> dict[str, tuple[Callable[[], dict[str, str]], list[Scenario]]]:
    """client -> (version probe, scenarios)."""
    return {
        "confluent-kafka": (confluent_versions, _confluent_scenarios()),
        "kafka-python": (
            kafka_python_versions,
            _python_scenarios("kafka-python", run_kafka_python_produce, default_idempotent=True),
        ),
        "aiokafka": (
            aiokafka_versions,
            _python_scenarios("aiokafka", run_aiokafka_produce, default_idempotent=False),
        ),
        "kcat": (kcat_versions, _kcat_scenarios()),
    }


def run_scenario(broker: CaptureBroker, scenario: Scenario) -> list[CapturedFrame]:
    """Run one scenario through a fresh recording proxy in front of `broker`; the frames the
    client sent, in arrival order. The scenario's topic exists beforehand (the admin scenario
    creates its own), and a consumer finds its records at offset 0."""
    if scenario.kind != "admin":
        broker.create_topic(scenario.topic)
    if scenario.kind == "consume":
        batch = odradek_batch(scenario.records or [], "none")
        if broker.append(scenario.topic, 0, batch) != 0:
            raise RuntimeError(f"{scenario.topic}: the served records did not land at offset 0")
    with RecordingProxy(broker.upstream) as proxy:
        scenario.started_ms = int(time.time() * 1000)
        try:
            scenario.run(proxy.address, scenario)
        except Exception as exc:
            raise RuntimeError(
                f"{scenario.client_id} failed; proxy errors {proxy.errors[:5]}; broker log:\n"
                f"{broker.log_tail()}"
            ) from exc
        scenario.finished_ms = int(time.time() * 1000)
    if proxy.errors:
        raise RuntimeError(f"{scenario.client_id}: proxy errors {proxy.errors[:5]}")
    scenario.producer = _granted_producer(proxy.exchanges())
    return proxy.frames()


def _granted_producer(exchanges: list[Exchange]) -> list[int] | None:
    """[producer id, epoch] of the last successful InitProducerId answer, if any."""
    granted = None
    for exchange in exchanges:
        request = exchange.request
        if request.api_key != INIT_PRODUCER_ID or exchange.response is None:
            continue
        _, response = decode_response(exchange.response, request.api_key, request.api_version)
        if response.error_code == 0:
            granted = [response.producer_id, response.producer_epoch]
    return granted


def select_frames(frames: list[CapturedFrame]) -> list[CapturedFrame]:
    """Drop repeats: identical bodies of one api/version (polls, the same request on each
    connection), and more than a few of each api/version; Produce frames are all kept."""
    kept: list[CapturedFrame] = []
    seen_bodies: set[tuple[int, int, bytes]] = set()
    per_api: dict[tuple[int, int], int] = {}
    for frame in frames:
        body_key = (frame.api_key, frame.api_version, frame.frame[8:])  # after correlation id
        api = (frame.api_key, frame.api_version)
        repeated = body_key in seen_bodies or per_api.get(api, 0) >= MAX_FRAMES_PER_API_VERSION
        if frame.api_key != 0 and repeated:
            continue
        seen_bodies.add(body_key)
        per_api[api] = per_api.get(api, 0) + 1
        kept.append(frame)
    return kept


def _scenario_manifest(scenario: Scenario) -> dict[str, Any]:
    return {
        "kind": scenario.kind,
        "settings": scenario.settings,
        "client_id": scenario.client_id,
        "topic": scenario.topic,
        "compression": scenario.compression,
        "idempotent": scenario.idempotent,
        "transactional": scenario.transactional,
        "records": scenario.records,
        "capture_window_ms": [scenario.started_ms, scenario.finished_ms],
        "producer": scenario.producer,
    }


def capture_client(
    broker: CaptureBroker, out: Path, client: str, versions: dict[str, str], runs: list[Scenario]
) -> int:
    """Run a client's scenarios and write its directory; returns the number of frames."""
    directory = out / client
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    manifest: dict[str, Any] = {**versions, "scenarios": {}, "frames": []}
    number = 0
    transactions = TRANSACTION_APIS <= broker.api_keys()
    for scenario in runs:
        if scenario.transactional and not transactions:
            # The broker has no transaction coordinator yet: nothing real to capture.
            print(f"  {client} {scenario.name}: skipped (no transactions)", file=sys.stderr)
            continue
        frames = select_frames(run_scenario(broker, scenario))
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
    with CaptureBroker() as broker:
        for client, (versions, runs) in scenarios().items():
            if clients and client not in clients:
                continue
            count = capture_client(broker, out, client, versions(), runs)
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
    parser.add_argument(
        "--serve", action="store_true", help="run a real broker behind the recording proxy"
    )
    parser.add_argument("--upstream", help="HOST:PORT of a broker: run the recording proxy")
    parser.add_argument("--port", type=int, default=0, help="listen port (default: random)")
    parser.add_argument("--duration", type=float, help="stop the proxy after N seconds")
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
        with CaptureBroker() as broker, RecordingProxy(broker.upstream, args.port) as proxy:
            print(f"recording proxy on {proxy.address} -> broker {broker.address}", flush=True)
            _wait_for_interrupt(args.duration)
        for frame in proxy.frames():
            print(f"{frame.api_name} v{frame.api_version} {frame.client_id} {len(frame.frame)}B")
        if args.out is not None:
            write_exchanges(args.out, proxy.exchanges(), broker.address)
        return 0
    if args.out is None:
        parser.error("--out is required")
    capture_all(args.out, args.clients.split(",") if args.clients else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
