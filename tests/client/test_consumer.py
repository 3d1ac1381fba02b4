"""The consumer against a real broker: assignment, positions, seeking, pausing, offset
lookups, segment boundaries, log start moves and retention, fetch sessions, pipelining."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from broker_process import BrokerProcess, wait_until

from odradek.client import (
    Admin,
    AlterConfigOp,
    AsyncConsumer,
    ConfigResource,
    Consumer,
    KafkaError,
    NewTopic,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    Producer,
    TopicPartition,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import TimestampType


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, configs=configs or {})])


def _produce(broker, topic: str, values: list[bytes], partition: int | None = 0,
             **config) -> None:
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **config}) as p:
        for value in values:
            p.send(topic, value, partition=partition, timestamp_ms=config.get("ts"))
        p.flush(30)


def _consumer(broker, **config) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
                     **config})


def _poll_until(consumer: Consumer, count: int, timeout: float = 20) -> list:
    records: list = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        records.extend(consumer.poll(200))
    return records


def test_poll_returns_records_with_every_field(odradek_broker):
    topic = _topic("fields")
    _create(odradek_broker, topic, partitions=2)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        producer.send(topic, b"v0", key=b"k0", partition=1, timestamp_ms=1_700_000_000_000,
                      headers=[("h", b"x")]).get(20)
    with _consumer(odradek_broker) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        (record,) = _poll_until(consumer, 1)
        assert record.topic == topic and record.partition == 1 and record.offset == 0
        assert record.timestamp == 1_700_000_000_000
        assert record.timestamp_type == TimestampType.CREATE_TIME
        assert (record.key, record.value, record.headers) == (b"k0", b"v0", [("h", b"x")])
        assert record.leader_epoch == 0
        assert (record.serialized_key_size, record.serialized_value_size) == (2, 2)
        assert consumer.position(TopicPartition(topic, 1)) == 1
        assert consumer.highwater(TopicPartition(topic, 1)) == 1


def test_deserializers_and_max_poll_records(odradek_broker):
    topic = _topic("deser")
    _create(odradek_broker, topic)
    _produce(odradek_broker, topic, [b"%d" % i for i in range(30)])
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap,
                   "auto.offset.reset": "earliest", "max.poll.records": 7},
                  value_deserializer=lambda v: int(v)) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        sizes, values = [], []
        while len(values) < 30:
            batch = consumer.poll(5000)
            assert batch
            sizes.append(len(batch))
            values.extend(r.value for r in batch)
        assert values == list(range(30))
        assert max(sizes) == 7
        assert len(consumer.poll(100, max_records=3)) == 0


def test_auto_offset_reset_latest_reads_only_new_records(odradek_broker):
    topic = _topic("latest")
    _create(odradek_broker, topic)
    _produce(odradek_broker, topic, [b"old"] * 5)
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap}) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        assert consumer.position(tp) == 5
        _produce(odradek_broker, topic, [b"new"])
        records = _poll_until(consumer, 1)
        assert [r.value for r in records] == [b"new"]


def test_auto_offset_reset_none_raises(odradek_broker):
    topic = _topic("none")
    _create(odradek_broker, topic)
    with _consumer(odradek_broker, **{"auto.offset.reset": "none"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(NoOffsetForPartitionError, match=f"{topic}-0"):
            consumer.poll(1000)
        consumer.seek(TopicPartition(topic, 0), 0)
        assert consumer.poll(200) == []


def test_seek_seek_to_beginning_and_end(odradek_broker):
    topic = _topic("seek")
    _create(odradek_broker, topic)
    _produce(odradek_broker, topic, [b"%d" % i for i in range(20)])
    tp = TopicPartition(topic, 0)
    with _consumer(odradek_broker) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 12)
        assert consumer.position(tp) == 12
        assert _poll_until(consumer, 1)[0].offset == 12
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        records = _poll_until(consumer, 20)
        assert [r.offset for r in records] == list(range(20))
        consumer.seek_to_end([tp])
        assert consumer.position(tp) == 20
        consumer.seek(tp, 3)
        assert _poll_until(consumer, 1)[0].offset == 3  # buffered data was dropped
        with pytest.raises(ValueError):
            consumer.seek(tp, -1)
        with pytest.raises(KafkaError):
            consumer.seek(TopicPartition(topic, 9), 0)


def test_skips_records_below_the_position_inside_a_compressed_batch(odradek_broker):
    topic = _topic("midbatch")
    _create(odradek_broker, topic)
    _produce(odradek_broker, topic, [b"%d" % i for i in range(10)],
             **{"compression.type": "lz4", "linger.ms": 200})
    tp = TopicPartition(topic, 0)
    with _consumer(odradek_broker) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 6)
        records = _poll_until(consumer, 4)
        assert [r.offset for r in records] == [6, 7, 8, 9]
        assert [r.value for r in records] == [b"6", b"7", b"8", b"9"]


def test_pause_and_resume(odradek_broker):
    topic = _topic("pause")
    _create(odradek_broker, topic, partitions=2)
    _produce(odradek_broker, topic, [b"a"] * 5, partition=0)
    _produce(odradek_broker, topic, [b"b"] * 5, partition=1)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with _consumer(odradek_broker) as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause([tp1])
        assert consumer.paused() == {tp1}
        records = _poll_until(consumer, 5)
        time.sleep(0.3)
        records += consumer.poll(300)
        assert {r.partition for r in records} == {0} and len(records) == 5
        consumer.resume([tp1])
        assert consumer.paused() == set()
        records = _poll_until(consumer, 5)
        assert {r.partition for r in records} == {1} and len(records) == 5


def test_offset_lookups(odradek_broker):
    topic = _topic("lookups")
    _create(odradek_broker, topic, partitions=2)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as producer:
        for i in range(10):
            producer.send(topic, b"v", partition=0, timestamp_ms=1_000_000 + i * 1000)
        producer.flush(20)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with _consumer(odradek_broker) as consumer:
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 10, tp1: 0}
        found = consumer.offsets_for_times({tp0: 1_004_500, tp1: 1_000_000})
        assert found[tp0].offset == 5 and found[tp0].timestamp == 1_005_000
        assert found[tp1] is None
        assert consumer.offsets_for_times({tp0: 9_999_999})[tp0] is None
        with pytest.raises(ValueError):
            consumer.offsets_for_times({tp0: -5})
        assert consumer.partitions_for(topic) == [0, 1]
        assert topic in consumer.list_topics()


def test_reads_across_segment_boundaries(odradek_broker):
    topic = _topic("segments")
    _create(odradek_broker, topic, configs={"segment.bytes": "2048"})
    values = [b"%04d" % i + b"x" * 90 for i in range(400)]
    _produce(odradek_broker, topic, values, **{"batch.size": 600})
    segment_files = list((odradek_broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segment_files) > 10
    with _consumer(odradek_broker, **{"max.partition.fetch.bytes": 3000}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        records = _poll_until(consumer, 400)
    assert [r.offset for r in records] == list(range(400))
    assert [r.value for r in records] == values


@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_log_start_moving_past_the_position(odradek_broker, reset):
    topic = _topic(f"deleted-{reset}")
    _create(odradek_broker, topic)
    _produce(odradek_broker, topic, [b"%d" % i for i in range(10)])
    tp = TopicPartition(topic, 0)
    with _consumer(odradek_broker, **{"auto.offset.reset": reset}) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert [r.offset for r in _poll_until(consumer, 3)][:3] == [0, 1, 2]
        consumer.seek(tp, 2)
        with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
            admin.delete_records({tp: 7})
        assert consumer.beginning_offsets([tp]) == {tp: 7}
        if reset == "none":
            with pytest.raises(OffsetOutOfRangeError) as error:
                _poll_until(consumer, 1, timeout=5)
            assert error.value.offsets == {tp: 2}
            return
        records = []
        deadline = time.monotonic() + 10
        while consumer.position(tp) < 7 and time.monotonic() < deadline:
            records += consumer.poll(200)  # the fetch at 2 is out of range: reset
        assert consumer.position(tp) == (10 if reset == "latest" else 7) + len(records)
        _produce(odradek_broker, topic, [b"10"])
        records += _poll_until(consumer, 1 if reset == "latest" else 4 - len(records))
        expected = [10] if reset == "latest" else [7, 8, 9, 10]
        assert [r.offset for r in records] == expected


def test_retention_deletes_segments_under_the_consumer(tmp_path):
    broker = BrokerProcess(tmp_path, {"log.retention.check.interval.ms": "200"}).start()
    try:
        topic = _topic("retention")
        _create(broker, topic, configs={"segment.bytes": "1024", "retention.ms": "1000"})
        _produce(broker, topic, [b"x" * 100 for _ in range(50)], **{"batch.size": 300})
        tp = TopicPartition(topic, 0)
        with _consumer(broker) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert _poll_until(consumer, 1)[0].offset == 0
            consumer.seek(tp, 1)
            # Retention removes every segment but the active one: offset 1 goes away.
            wait_until(lambda: consumer.beginning_offsets([tp])[tp] > 1, timeout=20,
                       message="retention to delete old segments")
            with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
                # Keep what comes next: the check below must not race the retention.
                admin.incremental_alter_configs({ConfigResource.topic(topic): [
                    AlterConfigOp("retention.ms", "3600000")]})
            _produce(broker, topic, [b"new"] * 5)
            start = consumer.beginning_offsets([tp])[tp]
            records = _poll_until(consumer, 55 - start)
            # OFFSET_OUT_OF_RANGE at 1, reset to the earliest offset left.
            assert [r.offset for r in records] == list(range(start, 55))
    finally:
        broker.stop()


def test_committed_offsets_need_a_group_id(odradek_broker):
    tp = TopicPartition(_topic("groups"), 0)
    with _consumer(odradek_broker) as consumer:
        with pytest.raises(KafkaError) as error:
            consumer.committed([tp])
        assert error.value.code == ErrorCode.INVALID_GROUP_ID
        with pytest.raises(KafkaError, match="group.id"):
            consumer.commit({tp: 1})
        with pytest.raises(KafkaError) as error:
            consumer.subscribe([tp.topic])
        assert error.value.code == ErrorCode.INVALID_GROUP_ID
    # With a group.id and assign(), commits go to the group as a simple consumer
    # (generation -1) and become the start position of a later consumer.
    _create(odradek_broker, tp.topic)
    _produce(odradek_broker, tp.topic, [b"x"] * 3)
    group = _topic("g")
    manual = {"group.id": group, "enable.auto.commit": False}
    with _consumer(odradek_broker, **manual) as consumer:
        assert consumer.committed([tp]) == {tp: None}
        consumer.assign([tp])
        assert consumer.position(tp) == 0  # from auto.offset.reset
        consumer.commit({tp: 2})
        assert consumer.committed([tp])[tp].offset == 2
    with _consumer(odradek_broker, **manual) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 2


def test_poll_without_assignment_fails(odradek_broker):
    with _consumer(odradek_broker) as consumer, \
            pytest.raises(RuntimeError, match="not subscribed to any topics"):
        consumer.poll(0)


def test_incremental_fetch_sessions_send_only_changed_partitions(odradek_broker):
    topic = _topic("sessions")
    _create(odradek_broker, topic, partitions=4)
    _produce(odradek_broker, topic, [b"x"] * 3, partition=2)

    async def body():
        consumer = AsyncConsumer({"bootstrap.servers": odradek_broker.bootstrap,
                                  "auto.offset.reset": "earliest", "fetch.max.wait.ms": 50})
        sent: list[tuple[int, int, int, int]] = []
        build = consumer.fetcher._request

        def recording(data, version):
            sent.append((data.session_id, data.epoch, len(data.to_send), len(data.to_forget)))
            return build(data, version)

        consumer.fetcher._request = recording
        consumer.assign([TopicPartition(topic, p) for p in range(4)])
        records = []
        deadline = time.monotonic() + 10
        while len(records) < 3 and time.monotonic() < deadline:
            records += await consumer.poll(200)
        for _ in range(5):
            await consumer.poll(100)
        await consumer.close()
        return records, sent

    records, sent = asyncio.run(body())
    assert [r.value for r in records] == [b"x"] * 3
    first, *later = sent
    assert first[:3] == (0, 0, 4)  # a full fetch opens the session
    assert all(session_id != 0 for session_id, _, _, _ in later)
    epochs = [epoch for _, epoch, _, _ in later]
    assert epochs == list(range(1, len(epochs) + 1))  # incremental: epochs 1, 2, 3...
    # After the records arrived, requests name only what changed (nothing, when idle).
    assert min(count for _, _, count, _ in later) == 0


def test_next_fetch_is_in_flight_when_poll_returns(odradek_broker):
    topic = _topic("pipelined")
    _create(odradek_broker, topic)
    _produce(odradek_broker, topic, [b"x"] * 10)

    async def body():
        consumer = AsyncConsumer({"bootstrap.servers": odradek_broker.bootstrap,
                                  "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(topic, 0)])
        records = []
        while not records:
            records = await consumer.poll(5000)
        in_flight = [node.in_flight for node in consumer.fetcher._nodes.values()]
        await consumer.close()
        return records, in_flight

    records, in_flight = asyncio.run(body())
    assert records and in_flight == [True]


def test_a_long_poll_at_the_log_end_does_not_hold_back_other_partitions(odradek_broker):
    # Partition 0 is at its log end after the first poll, so a fetch naming only it
    # long-polls for fetch.max.wait.ms (30 s here) while partition 1 still has buffered
    # records and more in the log. One fetch is in flight per broker: if partition 0 were
    # fetched alone, every refill of partition 1 would wait out that long poll (minutes).
    topic = _topic("prefetch")
    _create(odradek_broker, topic, partitions=2)
    _produce(odradek_broker, topic, [b"a"] * 10, partition=0)
    value = b"v" * 1000
    _produce(odradek_broker, topic, [value] * 4000, partition=1, **{"batch.size": 65536})
    with _consumer(odradek_broker, **{"fetch.max.wait.ms": 30000, "max.poll.records": 50,
                                      "max.partition.fetch.bytes": 262144}) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        records = _poll_until(consumer, 4010, timeout=20)
    by_partition = {0: [], 1: []}
    for record in records:
        by_partition[record.partition].append(record.offset)
    assert by_partition[0] == list(range(10))
    assert by_partition[1] == list(range(4000))  # every record once, in order


def test_consumer_follows_a_broker_restart(fresh_broker):
    fresh_broker.start()
    topic = _topic("restart")
    _create(fresh_broker, topic)
    _produce(fresh_broker, topic, [b"before"] * 3)
    tp = TopicPartition(topic, 0)
    with _consumer(fresh_broker, **{"reconnect.backoff.max.ms": 200}) as consumer:
        consumer.assign([tp])
        assert len(_poll_until(consumer, 3)) == 3
        fresh_broker.restart()
        _produce(fresh_broker, topic, [b"after"] * 2)
        records = _poll_until(consumer, 2, timeout=30)
        assert [(r.offset, r.value) for r in records] == [(3, b"after"), (4, b"after")]
