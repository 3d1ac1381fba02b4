"""The consumer's record handling with Fetch responses scripted by a fake broker: transactions
(read_committed / read_uncommitted, aborted transactions, control batches), CRC checks, a
truncated trailing batch, and fetch session errors."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from fake_broker import FakeBroker, metadata_response, run

from odradek.client import AsyncConsumer, KafkaError, TopicPartition
from odradek.client.fetcher import FetchSessionHandler, PartitionFetch
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, build_control_batch

TOPIC = "txn"
FETCH, METADATA = 1, 3


def _log() -> bytes:
    """Offsets 0-1: aborted transaction of producer 5; 2-3: committed transaction of producer
    6; 4: ABORT marker (5); 5: COMMIT marker (6); 6: a plain record."""
    return b"".join([
        build_batch([(1000, None, b"a0"), (1000, None, b"a1")], base_offset=0, producer_id=5,
                    producer_epoch=0, base_sequence=0, is_transactional=True),
        build_batch([(1000, None, b"b0"), (1000, None, b"b1")], base_offset=2, producer_id=6,
                    producer_epoch=0, base_sequence=0, is_transactional=True),
        build_control_batch(5, 0, commit=False, coordinator_epoch=0, timestamp=1001,
                            base_offset=4),
        build_control_batch(6, 0, commit=True, coordinator_epoch=0, timestamp=1001,
                            base_offset=5),
        build_batch([(1002, b"k", b"n0")], base_offset=6),
    ])


class ScriptedLog:
    """Answers Metadata and Fetch for one partition from a byte log; records requests."""

    def __init__(self, data: bytes, aborted: list[tuple[int, int]] | None = None) -> None:
        self.data = data
        self.aborted = aborted or []
        self.broker: FakeBroker | None = None
        self.fetches: list[Any] = []
        #: fetch number (from 0) -> top-level error to answer it with
        self.errors_at: dict[int, int] = {}

    def __call__(self, header: Any, request: Any) -> Any:
        assert self.broker is not None
        if header.request_api_key == METADATA:
            return metadata_response([(1, self.broker.host, self.broker.port)], {TOPIC: {0: 1}})
        if header.request_api_key == FETCH:
            self.fetches.append(request)
            error = self.errors_at.get(len(self.fetches) - 1)
            if error is not None:
                return m.FetchResponse(error_code=error, session_id=0)
            partitions = [p for t in request.topics for p in t.partitions]
            offset = partitions[0].fetch_offset if partitions else 99
            records = self.data if offset == 0 else b""
            R = m.FetchResponse
            return R(session_id=77, responses=[R.FetchableTopicResponse(topic=TOPIC, partitions=[
                R.PartitionData(
                    partition_index=0, high_watermark=7, last_stable_offset=7,
                    log_start_offset=0, records=records,
                    aborted_transactions=[R.AbortedTransaction(producer_id=pid, first_offset=o)
                                          for pid, o in self.aborted])])])
        raise AssertionError(f"unexpected request {header.request_api_key}")


async def _consume(script: ScriptedLog, expected: int, fetches: int = 0,
                   **config: Any) -> tuple[list, int]:
    async with FakeBroker(script) as broker:
        script.broker = broker
        consumer = AsyncConsumer({"bootstrap.servers": broker.address,
                                  "fetch.max.wait.ms": 10, **config})
        try:
            consumer.assign([TopicPartition(TOPIC, 0)])
            consumer.seek(TopicPartition(TOPIC, 0), 0)
            records: list = []
            for _ in range(50):
                records += await consumer.poll(50)
                if len(records) >= expected and len(script.fetches) >= fetches:
                    break
            position = await consumer.position(TopicPartition(TOPIC, 0))
            return records, position
        finally:
            await consumer.close()


def test_read_uncommitted_returns_every_data_record_but_no_control_record():
    records, position = run(_consume(ScriptedLog(_log(), [(5, 0)]), 5))
    assert [(r.offset, r.value) for r in records] == [
        (0, b"a0"), (1, b"a1"), (2, b"b0"), (3, b"b1"), (6, b"n0")]
    assert position == 7


def test_read_committed_drops_aborted_transactions():
    records, position = run(_consume(ScriptedLog(_log(), [(5, 0)]), 3,
                                     **{"isolation.level": "read_committed"}))
    assert [(r.offset, r.value) for r in records] == [(2, b"b0"), (3, b"b1"), (6, b"n0")]
    assert position == 7


def test_read_committed_sends_isolation_level_one():
    script = ScriptedLog(_log(), [(5, 0)])
    run(_consume(script, 3, **{"isolation.level": "read_committed"}))
    assert script.fetches[0].isolation_level == 1


def test_corrupt_batches_fail_with_crc_checks_and_pass_without():
    data = bytearray(build_batch([(1000, None, b"hello")], base_offset=0))
    data[-3] ^= 0x01  # a byte of the value: still decodable, but the CRC no longer matches
    with pytest.raises(KafkaError) as error:
        run(_consume(ScriptedLog(bytes(data)), 1))
    assert error.value.code == ErrorCode.CORRUPT_MESSAGE
    records, _ = run(_consume(ScriptedLog(bytes(data)), 1, **{"check.crcs": "false"}))
    assert len(records) == 1 and records[0].value != b"hello"


def test_truncated_trailing_batch_is_left_for_the_next_fetch():
    whole = build_batch([(1000, None, b"one"), (1000, None, b"two")], base_offset=0)
    tail = build_batch([(1000, None, b"three")], base_offset=2)
    records, position = run(_consume(ScriptedLog(whole + tail[:20]), 2))
    assert [r.value for r in records] == [b"one", b"two"]
    assert position == 2


def test_fetch_session_errors_fall_back_to_a_full_fetch():
    script = ScriptedLog(_log())
    script.errors_at = {1: ErrorCode.FETCH_SESSION_ID_NOT_FOUND}
    records, _ = run(_consume(script, 5, fetches=4))
    assert len(records) == 5
    sessions = [(f.session_id, f.session_epoch) for f in script.fetches[:4]]
    # full fetch, incremental (answered "session not found"), full again, incremental
    assert sessions == [(0, 0), (77, 1), (0, 0), (77, 1)]


def test_session_handler_builds_full_then_incremental_requests():
    handler = FetchSessionHandler(1)
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    topic_id = uuid.uuid4()

    def fetch(offset: int) -> PartitionFetch:
        return PartitionFetch(topic_id, offset, 0, -1, 1000)

    full = handler.build({a: fetch(0), b: fetch(0)})
    assert full.full and set(full.to_send) == {a, b}
    assert handler.handle_response(m.FetchResponse(session_id=9), full)
    assert (handler.session_id, handler.epoch) == (9, 1)
    incremental = handler.build({a: fetch(5), b: fetch(0)})
    assert not incremental.full and list(incremental.to_send) == [a]
    assert (incremental.session_id, incremental.epoch) == (9, 1)
    handler.handle_response(m.FetchResponse(session_id=9), incremental)
    forgetting = handler.build({a: fetch(5)})
    assert forgetting.to_send == {} and forgetting.to_forget == {b: topic_id}
    assert forgetting.epoch == 2
    handler.handle_error()
    closing = handler.build({a: fetch(5)})
    assert closing.full and (closing.session_id, closing.epoch) == (9, 0)
    assert not handler.handle_response(
        m.FetchResponse(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH), closing)


def test_poll_timeout_is_honoured_when_nothing_arrives():
    script = ScriptedLog(b"")

    async def body():
        async with FakeBroker(script) as broker:
            script.broker = broker
            consumer = AsyncConsumer({"bootstrap.servers": broker.address,
                                      "fetch.max.wait.ms": 10})
            consumer.assign([TopicPartition(TOPIC, 0)])
            consumer.seek(TopicPartition(TOPIC, 0), 3)
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await consumer.poll(300) == []
            elapsed = loop.time() - started
            await consumer.close()
            return elapsed

    elapsed = run(body())
    assert 0.25 < elapsed < 3
