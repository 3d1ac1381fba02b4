"""Producer retries under injected faults: a fault-injecting TCP proxy sits between the
producer and the real broker (it rewrites Metadata so the client keeps talking through it) and
loses responses, answers with errors or delays. With idempotence no record is duplicated or
reordered; without it, lost responses do produce duplicates (which shows the proxy bites)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.client import Admin, AsyncProducer, Consumer, NewTopic, TopicPartition
from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

PRODUCE, METADATA = 0, 3

# What the proxy does with a request (decided by the test's rule).
FORWARD = "forward"
LOSE_RESPONSE = "lose-response"  # the broker handles it; the client never hears back
CLOSE = "close"  # closed before the broker sees it


@dataclass
class Reply:
    """Answer the request with this error code without forwarding it."""

    error: ErrorCode


@dataclass
class Delay:
    """Forward the request; hold the broker's response for `seconds`."""

    seconds: float


Rule = Callable[[int, Any], Any]  # (produce request number from 1, request) -> action


class FaultProxy:
    def __init__(self, broker_host: str, broker_port: int, rule: Rule) -> None:
        self.broker = (broker_host, broker_port)
        self.rule = rule
        self.produce_requests = 0
        self.faults = 0
        self.server: asyncio.Server | None = None
        self.port = 0
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> FaultProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_reader, client_writer) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*self.broker)
        except OSError:
            client_writer.close()
            return
        # Responses go back in request order: one future per request, written in turn.
        replies: collections.deque = collections.deque()
        from_broker: collections.deque = collections.deque()
        wake = asyncio.Event()

        async def requests() -> None:
            while True:
                frame = await _read_frame(client_reader)
                header, _ = framing.decode_request_header(frame)
                action: Any = FORWARD
                if header.request_api_key == PRODUCE:
                    self.produce_requests += 1
                    _, request = framing.decode_request(frame)
                    action = self.rule(self.produce_requests, request)
                    if action != FORWARD:
                        self.faults += 1
                    if action == CLOSE:
                        raise ConnectionResetError
                    if isinstance(action, Reply):
                        reply = asyncio.get_running_loop().create_future()
                        reply.set_result(_error_response(request, header, action.error))
                        replies.append((reply, None))
                        wake.set()
                        continue
                reply = asyncio.get_running_loop().create_future()
                replies.append((reply, (header, action)))
                from_broker.append(reply)
                broker_writer.write(struct.pack(">i", len(frame)) + frame)

        async def responses() -> None:
            while True:
                frame = await _read_frame(broker_reader)
                reply = from_broker.popleft()
                reply.set_result(frame)
                wake.set()

        async def writer() -> None:
            while True:
                await wake.wait()
                wake.clear()
                while replies and replies[0][0].done():
                    reply, meta = replies.popleft()
                    frame = reply.result()
                    if meta is not None:
                        header, action = meta
                        if header.request_api_key == METADATA:
                            frame = self._rewrite_metadata(frame, header)
                        if action == LOSE_RESPONSE:
                            raise ConnectionResetError
                        if isinstance(action, Delay):
                            await asyncio.sleep(action.seconds)
                    client_writer.write(struct.pack(">i", len(frame)) + frame)

        pumps = [asyncio.ensure_future(p()) for p in (requests, responses, writer)]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*pumps, return_exceptions=True)
            for writer_ in (client_writer, broker_writer):
                writer_.close()
            self._tasks.discard(task)

    def _rewrite_metadata(self, frame: bytes, header: Any) -> bytes:
        correlation_id, response = framing.decode_response(frame, METADATA,
                                                           header.request_api_version)
        for broker in response.brokers:
            broker.host, broker.port = "127.0.0.1", self.port
        return framing.encode_response(METADATA, header.request_api_version, correlation_id,
                                       response)[4:]


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def _error_response(request: m.ProduceRequest, header: Any, error: ErrorCode) -> bytes:
    response = m.ProduceResponse(responses=[
        m.ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=[
            m.ProduceResponse.PartitionProduceResponse(index=p.index, error_code=error,
                                                       base_offset=-1)
            for p in topic.partition_data])
        for topic in request.topic_data])
    return framing.encode_response(PRODUCE, header.request_api_version, header.correlation_id,
                                   response)[4:]


# ------------------------------------------------------------------------------------------


def _create(broker, topic: str, partitions: int) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])


def _values_by_partition(broker, topic: str, partitions: int, expected: int,
                         timeout: float = 30) -> dict[int, list[bytes]]:
    import time

    found: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    total = 0
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = c.poll(300)
            for record in records:
                found[record.partition].append(record.value)
            total += len(records)
            if total >= expected and not records:
                break
    return found


def _produce_through(broker, rule: Rule, topic: str, count: int, partitions: int,
                     **config: Any) -> tuple[FaultProxy, list, int | None]:
    """Send `count` records (value = per-partition sequence) through a proxy with `rule`."""

    async def body():
        proxy = await FaultProxy(broker.host, broker.port, rule).start()
        settings = {"bootstrap.servers": proxy.bootstrap, "linger.ms": 2, "batch.size": 2000,
                    "retry.backoff.ms": 20, "retry.backoff.max.ms": 200, **config}
        producer = AsyncProducer(settings)
        futures = []
        try:
            for i in range(count):
                partition = i % partitions
                futures.append(await producer.send(
                    topic, b"%d" % (i // partitions), partition=partition))
                if i % 50 == 0:
                    await asyncio.sleep(0.002)  # spread records over many requests
            await producer.flush(60_000)
            results = [await f for f in futures]
            epoch = producer._idempotence.epoch if producer._idempotence else None
        finally:
            await producer.close()
            await proxy.stop()
        return proxy, results, epoch

    proxy, results, epoch = asyncio.run(body())
    return proxy, results, epoch


def _assert_exactly_once_in_order(values: dict[int, list[bytes]], per_partition: int) -> None:
    for partition, found in values.items():
        assert found == [b"%d" % i for i in range(per_partition)], \
            f"partition {partition}: {len(found)} records, first problems at " \
            f"{[i for i, v in enumerate(found) if v != b'%d' % i][:5]}"


def test_lost_responses_do_not_duplicate_with_idempotence(odradek_broker):
    topic = f"lost-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic, 3)

    def rule(number: int, request: Any) -> Any:
        return LOSE_RESPONSE if number in (3, 8, 9, 15, 22) else FORWARD

    proxy, results, _ = _produce_through(odradek_broker, rule, topic, 3000, 3)
    assert proxy.faults == 5
    assert all(r.offset >= 0 for r in results)
    # Offsets the producer got back are the records' real, distinct offsets.
    assert len({(r.partition, r.offset) for r in results}) == 3000
    _assert_exactly_once_in_order(_values_by_partition(odradek_broker, topic, 3, 3000), 1000)


def test_lost_responses_duplicate_without_idempotence(odradek_broker):
    topic = f"dupes-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic, 1)

    def rule(number: int, request: Any) -> Any:
        return LOSE_RESPONSE if number in (3, 6) else FORWARD

    _produce_through(odradek_broker, rule, topic, 600, 1, **{
        "enable.idempotence": "false", "max.in.flight.requests.per.connection": 1})
    values = _values_by_partition(odradek_broker, topic, 1, 600)[0]
    assert len(values) > 600  # resent batches were written twice
    assert set(values) == {b"%d" % i for i in range(600)}


def test_error_responses_are_retried_in_order(odradek_broker):
    topic = f"errors-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic, 2)
    errors = {2: ErrorCode.NOT_LEADER_OR_FOLLOWER, 5: ErrorCode.REQUEST_TIMED_OUT,
              6: ErrorCode.NOT_ENOUGH_REPLICAS, 12: ErrorCode.NETWORK_EXCEPTION}

    def rule(number: int, request: Any) -> Any:
        if number in errors:
            return Reply(errors[number])
        return CLOSE if number == 9 else FORWARD

    proxy, _results, epoch = _produce_through(odradek_broker, rule, topic, 2000, 2)
    assert proxy.faults == 5 and epoch == 0
    _assert_exactly_once_in_order(_values_by_partition(odradek_broker, topic, 2, 2000), 1000)


def test_slow_response_times_out_and_the_retry_is_deduplicated(odradek_broker):
    topic = f"slow-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic, 1)

    def rule(number: int, request: Any) -> Any:
        return Delay(1.5) if number == 4 else FORWARD

    proxy, _results, _ = _produce_through(odradek_broker, rule, topic, 800, 1,
                                         **{"request.timeout.ms": 700})
    assert proxy.faults == 1
    _assert_exactly_once_in_order(_values_by_partition(odradek_broker, topic, 1, 800), 800)


def test_lost_producer_state_bumps_the_epoch(odradek_broker):
    """OUT_OF_ORDER_SEQUENCE_NUMBER for the first unacknowledged batch means the broker lost
    the producer's state: the producer bumps its epoch (InitProducerId with its id and epoch)
    and resends with sequences from 0."""
    topic = f"epoch-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic, 1)

    def rule(number: int, request: Any) -> Any:
        return Reply(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) if number == 1 else FORWARD

    proxy, results, epoch = _produce_through(odradek_broker, rule, topic, 300, 1,
                                             **{"max.in.flight.requests.per.connection": 1})
    assert proxy.faults == 1
    assert epoch == 1
    assert [r.offset for r in results] == list(range(300))
    _assert_exactly_once_in_order(_values_by_partition(odradek_broker, topic, 1, 300), 300)


def test_retries_give_up_after_the_configured_count(odradek_broker):
    topic = f"giveup-{uuid.uuid4().hex[:8]}"
    _create(odradek_broker, topic, 1)

    def rule(number: int, request: Any) -> Any:
        return Reply(ErrorCode.NOT_ENOUGH_REPLICAS)

    async def body():
        proxy = await FaultProxy(odradek_broker.host, odradek_broker.port, rule).start()
        producer = AsyncProducer({"bootstrap.servers": proxy.bootstrap, "retries": 2,
                                  "retry.backoff.ms": 10, "enable.idempotence": "false"})
        try:
            future = await producer.send(topic, b"v")
            try:
                await asyncio.wait_for(future, 20)
            except Exception as exc:  # noqa: BLE001 (the error is what we check)
                return proxy.produce_requests, exc
        finally:
            await producer.close()
            await proxy.stop()

    attempts, error = asyncio.run(body())
    assert attempts == 3  # the first try and two retries
    assert error.code == ErrorCode.NOT_ENOUGH_REPLICAS


def test_producer_carries_on_across_a_broker_restart(fresh_broker):
    from odradek.client import Producer

    fresh_broker.start()
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    _create(fresh_broker, topic, 1)
    config = {"bootstrap.servers": fresh_broker.bootstrap, "reconnect.backoff.max.ms": 200,
              "retry.backoff.max.ms": 200, "linger.ms": 2}
    with Producer(config) as producer:
        first = [producer.send(topic, b"%d" % i) for i in range(300)]
        producer.flush(30)
        fresh_broker.restart()
        second = [producer.send(topic, b"%d" % i) for i in range(300, 600)]
        producer.flush(60)
        offsets = [f.get(0).offset for f in first + second]
    assert offsets == list(range(600))
    _assert_exactly_once_in_order(_values_by_partition(fresh_broker, topic, 1, 600), 600)
