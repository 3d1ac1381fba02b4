"""librdkafka (confluent-kafka) against a real Odradek broker: admin, produce, consume."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(broker, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = _admin(broker)  # must outlive the future
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])
    futures[name].result(timeout=30)


def _consume(broker, tps: list[TopicPartition], expected: int, timeout: float = 30,
             **conf) -> list:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, **conf})
    consumer.assign(tps)
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            out.append(msg)
    finally:
        consumer.close()
    return out


def test_admin_create_describe_delete(odradek_broker):
    admin = _admin(odradek_broker)
    name = _topic("admin")
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1,
                                  config={"retention.ms": "3600000"})])[name].result(30)
    md = admin.list_topics(timeout=10)
    assert name in md.topics
    assert len(md.topics[name].partitions) == 3
    assert all(p.leader == 1 for p in md.topics[name].partitions.values())
    described = admin.describe_topics(TopicCollection([name]))[name].result(30)
    assert described.name == name and not described.is_internal
    assert [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
            for p in described.partitions] == [(i, 1, [1], [1]) for i in range(3)]
    cluster = admin.describe_cluster().result(30)
    assert [(n.id, n.port) for n in cluster.nodes] == [(1, odradek_broker.port)]
    assert cluster.controller.id == 1

    # Creating it again fails with TOPIC_ALREADY_EXISTS.
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    assert err.value.args[0].name() == "TOPIC_ALREADY_EXISTS"

    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG

    admin.create_partitions([NewPartitions(name, 5)])[name].result(30)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 5

    admin.delete_topics([name])[name].result(30)
    assert name not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_acks_and_consume(odradek_broker, acks):
    name = _topic(f"acks{acks}")
    _create(odradek_broker, name)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap, "acks": acks,
                         "linger.ms": 5})
    delivered = []
    for i in range(100):
        producer.produce(name, key=f"k{i}".encode(), value=f"v{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    assert len(delivered) == 100 and all(err is None for err, _ in delivered)
    if acks != "0":
        assert [m.offset() for _, m in delivered] == list(range(100))
    msgs = _consume(odradek_broker, [TopicPartition(name, 0, OFFSET_BEGINNING)], 100)
    assert [(m.key(), m.value()) for m in msgs] == [
        (f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    assert [m.offset() for m in msgs] == list(range(100))


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_with_headers_and_timestamps(odradek_broker, codec):
    name = _topic(f"codec-{codec}")
    _create(odradek_broker, name)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap,
                         "compression.type": codec, "linger.ms": 20})
    base_ts = 1_700_000_000_000
    for i in range(200):
        producer.produce(name, key=None if i % 7 == 0 else f"key-{i}".encode(),
                         value=(f"value-{i}-" * 10).encode(),
                         headers=[("h", f"{i}".encode()), ("empty", None)],
                         timestamp=base_ts + i)
    assert producer.flush(30) == 0
    msgs = _consume(odradek_broker, [TopicPartition(name, 0, 0)], 200)
    assert len(msgs) == 200
    for i, msg in enumerate(msgs):
        assert msg.offset() == i
        assert msg.key() == (None if i % 7 == 0 else f"key-{i}".encode())
        assert msg.value() == (f"value-{i}-" * 10).encode()
        assert msg.headers() == [("h", f"{i}".encode()), ("empty", None)]
        assert msg.timestamp() == (1, base_ts + i)  # (CREATE_TIME, ts)


def test_consume_from_latest_offset_and_timestamp(odradek_broker):
    name = _topic("positions")
    _create(odradek_broker, name)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap})
    for i in range(10):
        producer.produce(name, value=f"{i}".encode(), timestamp=1_000_000 + i * 1000)
    producer.flush(30)

    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": "wm",
                         "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
    assert (low, high) == (0, 10)
    found = consumer.offsets_for_times([TopicPartition(name, 0, 1_000_000 + 4500)], timeout=10)
    assert found[0].offset == 5
    consumer.close()

    from_offset = _consume(odradek_broker, [TopicPartition(name, 0, 7)], 3)
    assert [m.value() for m in from_offset] == [b"7", b"8", b"9"]

    # From latest: nothing old, then a new record arrives.
    consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": "latest",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(name, 0, OFFSET_END)])
    deadline = time.monotonic() + 20
    eof = None
    while eof is None and time.monotonic() < deadline:
        event = consumer.poll(0.2)
        if event is not None and event.error() and event.error().code() == KafkaError._PARTITION_EOF:
            eof = event.offset()
    assert eof == 10  # the consumer sits at the end before anything new is produced
    producer.produce(name, value=b"new")
    producer.flush(30)
    msg = None
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            break
    consumer.close()
    assert msg is not None and msg.value() == b"new" and msg.offset() == 10


def test_data_survives_restart(fresh_broker):
    broker = fresh_broker.start()
    name = _topic("restart")
    _create(broker, name, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(500):
        producer.produce(name, partition=i % 2, value=f"{i}".encode())
    assert producer.flush(30) == 0
    broker.restart(clean=True)
    got = _consume(broker, [TopicPartition(name, 0, 0), TopicPartition(name, 1, 0)], 500)
    assert sorted(int(m.value()) for m in got) == list(range(500))
    broker.restart(clean=False)  # SIGKILL: acknowledged data is in the page cache
    got = _consume(broker, [TopicPartition(name, 0, 0), TopicPartition(name, 1, 0)], 500)
    assert sorted(int(m.value()) for m in got) == list(range(500))


def test_idempotent_producer(odradek_broker):
    name = _topic("idempotent")
    _create(odradek_broker, name, partitions=3)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap,
                         "enable.idempotence": True, "linger.ms": 2,
                         "max.in.flight.requests.per.connection": 5})
    errors = []
    for i in range(3000):
        producer.produce(name, key=f"{i % 17}".encode(), value=f"{i}".encode(),
                         on_delivery=lambda err, msg: err and errors.append(err))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    tps = [TopicPartition(name, p, 0) for p in range(3)]
    msgs = _consume(odradek_broker, tps, 3000)
    assert sorted(int(m.value()) for m in msgs) == list(range(3000))
    # Per key, order is preserved.
    by_key: dict[bytes, list[int]] = {}
    for m in msgs:
        by_key.setdefault(m.key(), []).append(int(m.value()))
    assert all(v == sorted(v) for v in by_key.values())


def test_sigkill_while_producing_keeps_every_acknowledged_record(fresh_broker):
    """acks=1 producer running when the broker is SIGKILLed: after restart every record whose
    delivery was reported is readable, offsets are dense and nothing appears twice."""
    import threading

    broker = fresh_broker.start()
    name = _topic("crash")
    _create(broker, name, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1",
                         "enable.idempotence": False, "linger.ms": 1,
                         "message.timeout.ms": 5000, "retries": 0})
    acked: dict[int, bytes] = {}

    def on_delivery(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()

    stop = threading.Event()

    def produce_forever():
        i = 0
        while not stop.is_set() and i < 2_000_000:
            try:
                producer.produce(name, value=f"record-{i}".encode(), on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0)

    worker = threading.Thread(target=produce_forever)
    worker.start()
    deadline = time.monotonic() + 30
    while len(acked) < 20000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    stop.set()
    worker.join(30)
    producer.flush(10)  # remaining records fail with timeouts; nothing more is acknowledged
    assert len(acked) >= 20000
    broker.start()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crash",
                         "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
    consumer.close()
    assert low == 0 and high >= max(acked) + 1
    msgs = _consume(broker, [TopicPartition(name, 0, 0)], high, timeout=60)
    offsets = [m.offset() for m in msgs]
    assert offsets == list(range(high))  # dense, nothing twice
    values = [m.value() for m in msgs]
    assert len(set(values)) == len(values)
    for offset, value in acked.items():
        assert values[offset] == value
