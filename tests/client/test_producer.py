"""The producer against a real broker: sending, batching, callbacks, compression, limits,
configuration rules, flush and close."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid

import pytest

from odradek.client import (
    Admin,
    AsyncProducer,
    Consumer,
    KafkaConfigError,
    KafkaError,
    KafkaTimeoutError,
    NewTopic,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from odradek.client.partitioner import partition_for_key
from odradek.client.producer import parse_producer_config
from odradek.protocol.errors import ErrorCode

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, configs=configs or {})])


def _read_all(broker, tps: list[TopicPartition], expected: int, timeout: float = 20) -> list:
    records = []
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign(tps)
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(c.poll(500))
    return records


def test_send_returns_metadata_with_offsets_in_order(odradek_broker):
    topic = _topic("basic")
    _create(odradek_broker, topic)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        futures = [producer.send(topic, f"v{i}".encode(), key=b"k") for i in range(50)]
        results = [future.get(20) for future in futures]
    assert [r.offset for r in results] == list(range(50))
    assert all(isinstance(r, RecordMetadata) and r.topic == topic for r in results)
    assert results[0].serialized_key_size == 1 and results[0].serialized_value_size == 2
    records = _read_all(odradek_broker, [TopicPartition(topic, 0)], 50)
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(50)]


def test_callbacks_run_in_send_order_with_metadata(odradek_broker):
    topic = _topic("callbacks")
    _create(odradek_broker, topic, partitions=2)
    seen: list[tuple[int, int]] = []
    threads = set()

    def callback(metadata, error):
        assert error is None
        threads.add(threading.current_thread().name)
        seen.append((metadata.partition, metadata.offset))

    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 5}) as producer:
        for i in range(200):
            producer.send(topic, b"x", partition=i % 2, callback=callback)
        producer.flush(20)
        assert len(seen) == 200
    for partition in (0, 1):
        offsets = [offset for p, offset in seen if p == partition]
        assert offsets == list(range(100))
    assert threads == {"odradek-producer"}  # callbacks run on the client's I/O thread


def test_headers_timestamps_and_null_values_round_trip(odradek_broker):
    topic = _topic("fields")
    _create(odradek_broker, topic)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        producer.send(topic, None, key=b"tombstone", timestamp_ms=1_600_000_000_000,
                      headers=[("h1", b"v1"), ("h2", None), ("h1", "again")]).get(20)
        metadata = producer.send(topic, "text value", key="text key").get(20)
    assert metadata.serialized_key_size == len("text key")
    records = _read_all(odradek_broker, [TopicPartition(topic, 0)], 2)
    first, second = records
    assert first.key == b"tombstone" and first.value is None
    assert first.timestamp == 1_600_000_000_000
    assert first.headers == [("h1", b"v1"), ("h2", None), ("h1", b"again")]
    assert second.key == b"text key" and second.value == b"text value"
    assert abs(second.timestamp - time.time() * 1000) < 60_000


def test_keys_go_to_their_murmur2_partition_and_keyless_records_stick(odradek_broker):
    topic = _topic("partitioning")
    _create(odradek_broker, topic, partitions=6)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 50,
                   "batch.size": 100_000}) as producer:
        keyed = {f"key-{i}".encode(): producer.send(topic, b"v", key=f"key-{i}".encode())
                 for i in range(300)}
        keyless = [producer.send(topic, b"v") for _ in range(50)]
        producer.flush(20)
        for key, future in keyed.items():
            assert future.get().partition == partition_for_key(key, 6)
        # KIP-480/794: keyless records fill one partition's batch before switching.
        assert len({future.get().partition for future in keyless}) == 1


def test_sticky_partitioner_switches_after_a_batch_worth(odradek_broker):
    topic = _topic("sticky")
    _create(odradek_broker, topic, partitions=4)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "batch.size": 1000,
                   "linger.ms": 20}) as producer:
        futures = [producer.send(topic, b"x" * 100) for _ in range(200)]
        partitions = [future.get(20).partition for future in futures]
    assert len(set(partitions)) > 1
    # Runs of one partition are about batch.size bytes long (~8 records of ~121 bytes).
    runs, current = [], 1
    for previous, partition in itertools.pairwise(partitions):
        if partition == previous:
            current += 1
        else:
            runs.append(current)
            current = 1
    assert max(runs) <= 12


@pytest.mark.parametrize("codec", CODECS)
def test_compression_codecs_produce_readable_compressed_batches(odradek_broker, codec):
    topic = _topic(f"codec-{codec}")
    _create(odradek_broker, topic)
    values = [f"record {i} ".encode() * 20 for i in range(300)]
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "compression.type": codec,
                   "linger.ms": 20}) as producer:
        for value in values:
            producer.send(topic, value)
        producer.flush(20)
        metrics = producer.metrics()
    if codec != "none":
        assert metrics["compression-rate-avg"] < 0.5
    records = _read_all(odradek_broker, [TopicPartition(topic, 0)], 300)
    assert [r.value for r in records] == values


def test_batches_hold_many_records(odradek_broker):
    topic = _topic("batching")
    _create(odradek_broker, topic)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 100}) as producer:
        for i in range(1000):
            producer.send(topic, b"%d" % i)
        producer.flush(20)
        metrics = producer.metrics()
    assert metrics["record-send-total"] == 1000
    assert metrics["request-total"] < 50  # not one request per record


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(odradek_broker, acks):
    topic = _topic(f"acks{acks}")
    _create(odradek_broker, topic)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "acks": acks}) as producer:
        metadata = producer.send(topic, b"v").get(20)
    assert metadata.offset == (-1 if acks == "0" else 0)
    assert len(_read_all(odradek_broker, [TopicPartition(topic, 0)], 1)) == 1


def test_record_larger_than_max_request_size_fails_at_send(odradek_broker):
    with Producer({"bootstrap.servers": odradek_broker.bootstrap,
                   "max.request.size": 1000}) as producer, pytest.raises(KafkaError) as error:
        producer.send(_topic("big"), b"x" * 2000)
    assert error.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert "max.request.size" in str(error.value)


def test_record_too_large_for_the_broker_fails_its_future(odradek_broker):
    topic = _topic("brokerlimit")
    _create(odradek_broker, topic, configs={"max.message.bytes": "2000"})
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        future = producer.send(topic, b"x" * 5000)
        with pytest.raises(KafkaError) as error:
            future.get(20)
        assert error.value.code == ErrorCode.MESSAGE_TOO_LARGE
        # The producer keeps working (a new epoch resets the partition's sequences).
        assert producer.send(topic, b"small").get(20).offset == 0


def test_partition_out_of_range_is_rejected(odradek_broker):
    topic = _topic("range")
    _create(odradek_broker, topic, partitions=2)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap,
                   "max.block.ms": 300}) as producer:
        with pytest.raises(KafkaError, match=r"not in the range \[0\.\.\.2\)"):
            producer.send(topic, b"v", partition=-1)
        # A partition beyond the count may be new: the metadata is looked up until
        # max.block.ms (Kafka's waitOnMetadata).
        with pytest.raises(KafkaTimeoutError, match="Partition 5 of topic .* with partition "
                                                    "count 2 is not present in metadata after "
                                                    "300 ms"):
            producer.send(topic, b"v", partition=5)
        assert producer.partitions_for(topic) == [0, 1]
        with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
            admin.create_partitions({topic: 6})
        assert producer.send(topic, b"v", partition=5).get(20).partition == 5


def test_send_blocks_on_full_buffer_then_times_out(tmp_path):
    # A broker that accepts connections but never answers: batches stay in the buffer.
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        config = {"bootstrap.servers": f"127.0.0.1:{port}", "max.block.ms": 300,
                  "request.timeout.ms": 1000, "socket.connection.setup.timeout.ms": 200}
        with Producer(config) as producer:
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match="not present in metadata after 300 ms"):
                producer.send("t", b"v")
            assert 0.25 < time.monotonic() - started < 5
            producer.close(timeout=0)
    finally:
        listener.close()


def test_full_buffer_sends_lingering_batches_at_once(odradek_broker):
    topic = _topic("memory")
    _create(odradek_broker, topic)
    config = {"bootstrap.servers": odradek_broker.bootstrap, "buffer.memory": 4000,
              "max.block.ms": 10_000, "linger.ms": 60_000, "batch.size": 100_000}
    with Producer(config) as producer:
        producer.send(topic, b"x")
        producer.flush(20)
        # linger.ms would keep these queued for a minute; a full buffer sends them (Kafka's
        # "exhausted" rule), so send() only blocks briefly.
        started = time.monotonic()
        futures = [producer.send(topic, b"y" * 100) for _ in range(200)]
        assert time.monotonic() - started < 8
        assert producer._async.accumulator.used_bytes <= 4000
        producer.flush(20)
        assert futures[-1].get(0).offset == 200


def _unreachable_metadata(producer: AsyncProducer, port: int) -> None:
    """Pretend the metadata names a broker at `port` leading partition 0 of topic "t"."""
    from odradek.protocol import messages as m

    producer.cluster.metadata.update(m.MetadataResponse(
        brokers=[m.MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1",
                                                           port=port)],
        topics=[m.MetadataResponse.MetadataResponseTopic(
            name="t", topic_id=uuid.uuid4(),
            partitions=[m.MetadataResponse.MetadataResponsePartition(
                partition_index=0, leader_id=1)])]), all_topics=True)


def _refused_port() -> int:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens: connections are refused
    return port


def test_send_times_out_when_the_buffer_stays_full():
    config = {"bootstrap.servers": f"127.0.0.1:{_refused_port()}", "buffer.memory": 1000,
              "max.block.ms": 200}

    async def body():
        producer = AsyncProducer(config)
        _unreachable_metadata(producer, _refused_port())
        with pytest.raises(KafkaTimeoutError, match="Failed to allocate"):
            for _ in range(100):
                await producer.send("t", b"y" * 100)
        await producer.close(timeout_ms=0)

    asyncio.run(body())


def test_delivery_timeout_expires_undeliverable_batches():
    config = {"bootstrap.servers": f"127.0.0.1:{_refused_port()}", "delivery.timeout.ms": 300,
              "request.timeout.ms": 200, "linger.ms": 0}

    async def body():
        async with AsyncProducer(config) as producer:
            _unreachable_metadata(producer, _refused_port())
            future = await producer.send("t", b"v")
            with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
                await asyncio.wait_for(future, 10)

    asyncio.run(body())


def test_async_producer_send_and_wait(odradek_broker):
    topic = _topic("async")
    _create(odradek_broker, topic)

    async def body():
        async with AsyncProducer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
            first = await producer.send_and_wait(topic, b"a")
            futures = [await producer.send(topic, b"%d" % i) for i in range(10)]
            await producer.flush()
            assert all(f.done() for f in futures)
            return first, [await f for f in futures]

    first, rest = asyncio.run(body())
    assert first.offset == 0 and [m.offset for m in rest] == list(range(1, 11))


def test_close_sends_what_is_queued_and_refuses_new_sends(odradek_broker):
    topic = _topic("close")
    _create(odradek_broker, topic)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 60_000})
    producer.send(topic, b"first")
    producer.flush(20)
    futures = [producer.send(topic, b"%d" % i) for i in range(20)]
    assert not futures[-1].done()  # lingering
    producer.close()
    assert [f.get(0).offset for f in futures] == list(range(1, 21))
    with pytest.raises(RuntimeError):
        producer.send(topic, b"late")


def test_close_with_zero_timeout_fails_queued_records(odradek_broker):
    topic = _topic("abort")
    _create(odradek_broker, topic)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 60_000})
    producer.send(topic, b"first")
    producer.flush(20)
    future = producer.send(topic, b"queued")
    producer.close(timeout=0)
    with pytest.raises(KafkaError, match="closed forcefully"):
        future.get(5)


def test_idempotence_is_on_by_default_and_numbers_batches(odradek_broker, tmp_path):
    topic = _topic("idem")
    _create(odradek_broker, topic)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(5):
            producer.send(topic, b"%d" % i).get(20)
        state = producer._async._idempotence
        assert state is not None and state.producer_id >= 0 and state.epoch == 0
        assert state.next_seq[TopicPartition(topic, 0)] == 5


def test_idempotence_config_rules():
    base = {"bootstrap.servers": "127.0.0.1:9092"}
    # Not asked for explicitly: turned off quietly when other settings conflict.
    assert parse_producer_config({**base, "acks": "1"})["enable.idempotence"] is False
    assert parse_producer_config({**base, "max.in.flight.requests.per.connection": 6}
                                 )["enable.idempotence"] is False
    assert parse_producer_config(base)["enable.idempotence"] is True
    # Asked for explicitly: Kafka's errors.
    with pytest.raises(KafkaConfigError, match="Must set acks to all"):
        parse_producer_config({**base, "acks": "0", "enable.idempotence": "true"})
    with pytest.raises(KafkaConfigError, match="at most 5"):
        parse_producer_config({**base, "max.in.flight.requests.per.connection": "10",
                               "enable.idempotence": True})
    with pytest.raises(KafkaConfigError, match="retries to non-zero"):
        parse_producer_config({**base, "retries": 0, "enable.idempotence": True})
    with pytest.raises(KafkaConfigError, match="linger.ms \\+ request.timeout.ms"):
        parse_producer_config({**base, "delivery.timeout.ms": 1000, "linger.ms": 500})
    adjusted = parse_producer_config({**base, "linger.ms": 200_000})
    assert adjusted["delivery.timeout.ms"] == 230_000
    with pytest.raises(KafkaConfigError, match="compression.type"):
        parse_producer_config({**base, "compression.type": "brotli"})
    # A transactional producer is idempotent: conflicts are errors even when not asked for.
    assert parse_producer_config({**base, "transactional.id": "tx"})["enable.idempotence"]
    with pytest.raises(KafkaConfigError, match="without also enabling idempotence"):
        parse_producer_config({**base, "transactional.id": "tx", "enable.idempotence": False})
    with pytest.raises(KafkaConfigError, match="Must set acks to all"):
        parse_producer_config({**base, "transactional.id": "tx", "acks": "1"})
    defaults = parse_producer_config(base)
    assert (defaults["acks"], defaults["batch.size"], defaults["linger.ms"],
            defaults["buffer.memory"], defaults["max.in.flight.requests.per.connection"],
            defaults["delivery.timeout.ms"], defaults["max.request.size"]) == \
        ("all", 16384, 0, 33554432, 5, 120000, 1048576)


def test_blocking_producer_is_usable_from_many_threads(odradek_broker):
    topic = _topic("threads")
    _create(odradek_broker, topic, partitions=3)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        futures: list = []
        lock = threading.Lock()

        def work(worker: int) -> None:
            mine = [producer.send(topic, b"%d-%d" % (worker, i), key=b"%d" % worker)
                    for i in range(200)]
            with lock:
                futures.extend(mine)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        producer.flush(20)
        offsets = {(f.get().partition, f.get().offset) for f in futures}
    assert len(offsets) == 800  # every record has its own offset
