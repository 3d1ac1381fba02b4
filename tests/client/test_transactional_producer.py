"""The transactional producer against a real broker: committed records are read by
read_committed consumers and aborted ones are not, an open transaction holds back the last
stable offset, a new producer with the same transactional.id fences the old one, and
consume-transform-produce commits the consumer's offsets with the transaction."""

from __future__ import annotations

import time
import uuid

import kafka
import pytest

from odradek.client import (
    Admin,
    Consumer,
    KafkaError,
    NewTopic,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from odradek.protocol.errors import ErrorCode


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker, name: str, partitions: int = 1) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])


def _producer(broker, transactional_id: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                     "max.block.ms": 30_000, **extra})


def _read(broker, tps: list[TopicPartition], isolation: str, *, until_count: int | None = None,
          timeout: float = 10.0) -> list:
    """Records from the start of `tps`: until `until_count` arrive, or until the end offsets
    (the last stable offsets under read_committed) are reached."""
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
                   "isolation.level": isolation}) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        records: list = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until_count is not None and len(records) >= until_count:
                break
            if until_count is None and all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
            records.extend(consumer.poll(200))
        return records


def test_committed_records_are_read_and_aborted_ones_are_not(odradek_broker):
    topic = _name("txn")
    _create(odradek_broker, topic, partitions=2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with _producer(odradek_broker, _name("tid")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, f"c{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = [producer.send(topic, f"a{i}".encode(), partition=i % 2) for i in range(6)]
        producer.flush(20)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"last", partition=0)
        producer.commit_transaction()
    assert all(future.get(1).offset >= 0 for future in aborted)  # written, then aborted
    committed = _read(odradek_broker, tps, "read_committed", until_count=11)
    assert sorted(r.value for r in committed) == sorted(
        [f"c{i}".encode() for i in range(10)] + [b"last"])
    uncommitted = _read(odradek_broker, tps, "read_uncommitted", until_count=17)
    assert len(uncommitted) == 17  # control records are never returned
    # Two markers per partition and transaction: 5 + 1 + 3 + 1 + 1 (+1 for last) offsets.
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap}) as consumer:
        assert consumer.end_offsets(tps) == {tps[0]: 5 + 1 + 3 + 1 + 1 + 1, tps[1]: 5 + 1 + 3 + 1}


def test_an_open_transaction_holds_back_read_committed_consumers(odradek_broker):
    topic = _name("lso")
    _create(odradek_broker, topic)
    tp = TopicPartition(topic, 0)
    with _producer(odradek_broker, _name("tid")) as producer, \
            Consumer({"bootstrap.servers": odradek_broker.bootstrap,
                      "isolation.level": "read_committed"}) as committed_reader, \
            Consumer({"bootstrap.servers": odradek_broker.bootstrap}) as uncommitted_reader:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open", partition=0).get(20)
        assert committed_reader.end_offsets([tp]) == {tp: 0}  # the last stable offset
        assert uncommitted_reader.end_offsets([tp]) == {tp: 1}  # the high watermark
        producer.commit_transaction()
        assert committed_reader.end_offsets([tp]) == {tp: 2}  # past the COMMIT marker
    assert [r.value for r in _read(odradek_broker, [tp], "read_committed", until_count=1)] == \
        [b"open"]


def test_a_new_producer_with_the_same_id_fences_the_old_one(odradek_broker):
    topic = _name("fence")
    _create(odradek_broker, topic)
    transactional_id = _name("tid")
    with _producer(odradek_broker, transactional_id) as old:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie", partition=0).get(20)
        with _producer(odradek_broker, transactional_id) as new:
            # The new producer's init aborts the old one's open transaction.
            new.init_transactions()
            new.begin_transaction()
            new.send(topic, b"fresh", partition=0)
            new.commit_transaction()
        with pytest.raises(KafkaError) as fenced:
            old.commit_transaction()
        assert fenced.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        with pytest.raises(KafkaError):
            old.send(topic, b"more", partition=0)
    values = [r.value for r in _read(odradek_broker, [TopicPartition(topic, 0)],
                                     "read_committed", until_count=1)]
    assert values == [b"fresh"]


@pytest.mark.parametrize("commit", [True, False])
def test_consume_transform_produce_commits_offsets_with_the_transaction(odradek_broker, commit):
    source, sink, group = _name("in"), _name("out"), _name("group")
    _create(odradek_broker, source)
    _create(odradek_broker, sink)
    with Producer({"bootstrap.servers": odradek_broker.bootstrap}) as plain:
        for i in range(5):
            plain.send(source, f"m{i}".encode(), partition=0)
        plain.flush(20)
    source_tp = TopicPartition(source, 0)
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group,
                   "auto.offset.reset": "earliest", "enable.auto.commit": False,
                   "isolation.level": "read_committed"}) as consumer, \
            _producer(odradek_broker, _name("tid")) as producer:
        consumer.subscribe([source])
        records: list = []
        deadline = time.monotonic() + 20
        while len(records) < 5 and time.monotonic() < deadline:
            records.extend(consumer.poll(200))
        assert len(records) == 5
        producer.init_transactions()
        producer.begin_transaction()
        for record in records:
            producer.send(sink, record.value.upper(), partition=0)
        metadata = consumer.group_metadata()
        assert metadata.group_id == group and metadata.generation_id >= 1
        producer.send_offsets_to_transaction(
            {source_tp: OffsetAndMetadata(records[-1].offset + 1)}, metadata)
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        deadline = time.monotonic() + 10
        while True:
            offsets = admin.list_consumer_group_offsets(group)
            done = offsets.get(source_tp) is not None
            if done == commit or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    if commit:
        assert offsets[source_tp].offset == 5
    else:
        assert offsets.get(source_tp) is None
    outputs = _read(odradek_broker, [TopicPartition(sink, 0)], "read_committed",
                    until_count=5 if commit else None, timeout=5 if not commit else 10)
    assert [r.value for r in outputs] == ([f"M{i}".encode() for i in range(5)] if commit
                                          else [])


def test_kafka_python_reads_our_transactions_read_committed(odradek_broker):
    topic = _name("interop")
    _create(odradek_broker, topic)
    with _producer(odradek_broker, _name("tid")) as producer:
        producer.init_transactions()
        for keep in (True, False, True):
            producer.begin_transaction()
            producer.send(topic, b"kept" if keep else b"dropped", partition=0)
            if keep:
                producer.commit_transaction()
            else:
                producer.flush(20)
                producer.abort_transaction()
    consumer = kafka.KafkaConsumer(bootstrap_servers=odradek_broker.bootstrap,
                                   isolation_level="read_committed",
                                   auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        values = [message.value for message in consumer]
    finally:
        consumer.close()
    assert values == [b"kept", b"kept"]


def test_a_prepared_transaction_is_ended_by_another_client(odradek_broker):
    """prepare_transaction hands the open transaction over: closing the producer leaves it
    open (it holds back the last stable offset), and an Admin elsewhere commits it with the
    producer's id and epoch; committing again is a no-op. A new producer with the same id
    aborts a prepared transaction, after which ending it is refused as fenced."""
    topic = _name("prepared")
    _create(odradek_broker, topic)
    tp = TopicPartition(topic, 0)
    transactional_id = _name("tid")
    with _producer(odradek_broker, transactional_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, f"p{i}".encode(), partition=0)
        prepared = producer.prepare_transaction()
        with pytest.raises(Exception, match="PREPARED_TRANSACTION"):
            producer.send(topic, b"late", partition=0)
    assert (prepared.transactional_id, prepared.started) == (transactional_id, True)
    with Consumer({"bootstrap.servers": odradek_broker.bootstrap,
                   "isolation.level": "read_committed"}) as consumer:
        assert consumer.end_offsets([tp])[tp] == 0  # the open transaction holds the LSO
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert (described.state, described.producer_id) == ("Ongoing", prepared.producer_id)
        admin.end_transaction(prepared, commit=True)
        admin.end_transaction(prepared, commit=True)  # a retry after a lost answer
    committed = _read(odradek_broker, [tp], "read_committed", until_count=5)
    assert [r.value for r in committed] == [f"p{i}".encode() for i in range(5)]

    with _producer(odradek_broker, transactional_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"zombie", partition=0)
        stale = producer.prepare_transaction()
    with _producer(odradek_broker, transactional_id) as successor:
        successor.init_transactions()  # aborts the prepared transaction
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        with pytest.raises(KafkaError) as raised:
            admin.end_transaction(stale, commit=True)
        assert raised.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
    after = _read(odradek_broker, [tp], "read_committed")
    assert b"zombie" not in [r.value for r in after]
