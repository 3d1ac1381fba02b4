"""librdkafka's (confluent-kafka's) transactional producer against a real Odradek broker:
commit, abort after flushing, read_committed against read_uncommitted, a zombie fenced by a new
producer with the same transactional.id, a transaction left open past its timeout aborted by
the coordinator."""

from __future__ import annotations

import time
import uuid

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ABORT_CHECK_INTERVAL_MS = 500


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("txn-broker"), overrides={
        "transaction.state.log.num.partitions": "4",
        "offsets.topic.num.partitions": "4",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms":
            str(ABORT_CHECK_INTERVAL_MS),
    }).start()
    yield broker
    broker.stop()


def _topic(prefix: str, broker, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)])
    futures[name].result(timeout=30)
    return name


def _producer(broker, transactional_id: str, **conf) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": transactional_id, **conf})
    producer.init_transactions(30)
    return producer


def _values(broker, topic: str, isolation: str, until_value: bytes,
            partitions: int = 2, timeout: float = 30) -> list[bytes]:
    """Every value of `topic` in `isolation`, read until `until_value` (written last to every
    partition, committed) has been seen in every partition."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    ended: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"{until_value!r} not read; read {out}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg.value())
            if msg.value() == until_value:
                ended.add(msg.partition())
    finally:
        consumer.close()
    return out


def _commit_sentinel(broker, topic: str, value: bytes) -> None:
    """A committed transaction writing `value` to both partitions: what readers wait for."""
    producer = _producer(broker, f"sentinel-{uuid.uuid4().hex[:6]}")
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic, value=value, partition=partition)
    producer.commit_transaction(30)


def test_commit_to_two_partitions(txn_broker):
    topic = _topic("txn-commit", txn_broker)
    producer = _producer(txn_broker, f"commit-{uuid.uuid4().hex[:6]}")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"c%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    # A second transaction on the same producer.
    producer.begin_transaction()
    producer.produce(topic, value=b"last", partition=0)
    producer.produce(topic, value=b"last", partition=1)
    producer.commit_transaction(30)
    expected = {b"c%d" % i for i in range(10)} | {b"last"}
    for isolation in ("read_uncommitted", "read_committed"):
        assert set(_values(txn_broker, topic, isolation, b"last")) == expected


def test_abort_after_flush_is_invisible_to_read_committed(txn_broker):
    topic = _topic("txn-abort", txn_broker)
    producer = _producer(txn_broker, f"abort-{uuid.uuid4().hex[:6]}")
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"a%d" % i, partition=i % 2)
    assert producer.flush(30) == 0  # in the log before the abort
    producer.abort_transaction(30)
    _commit_sentinel(txn_broker, topic, b"end")
    uncommitted = _values(txn_broker, topic, "read_uncommitted", b"end")
    assert {b"a%d" % i for i in range(6)} <= set(uncommitted)
    committed = _values(txn_broker, topic, "read_committed", b"end")
    assert set(committed) == {b"end"}


def test_a_new_producer_with_the_same_id_fences_the_old_one(txn_broker):
    topic = _topic("txn-fence", txn_broker)
    transactional_id = f"fence-{uuid.uuid4().hex[:6]}"
    zombie = _producer(txn_broker, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    assert zombie.flush(30) == 0
    # The new instance's init_transactions aborts the zombie's open transaction.
    successor = _producer(txn_broker, transactional_id)
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-2", partition=1)
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal()
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                            KafkaError.INVALID_PRODUCER_EPOCH)
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.produce(topic, value=b"successor", partition=1)
    successor.commit_transaction(30)
    committed = _values(txn_broker, topic, "read_committed", b"successor")
    assert b"zombie" not in committed and b"zombie-2" not in committed


def test_a_transaction_open_past_its_timeout_is_aborted(txn_broker):
    topic = _topic("txn-timeout", txn_broker)
    producer = _producer(txn_broker, f"timeout-{uuid.uuid4().hex[:6]}",
                         **{"transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, value=b"stale", partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": txn_broker.bootstrap})
    deadline = time.monotonic() + 30
    # The coordinator aborts it (with an epoch bump) once the timeout has passed.
    _commit_sentinel(txn_broker, topic, b"after")
    while True:
        committed = _values(txn_broker, topic, "read_committed", b"after")
        if b"stale" not in committed:
            break
        assert time.monotonic() < deadline
    del admin
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)


@pytest.mark.parametrize("commit", [True, False])
def test_send_offsets_to_transaction(txn_broker, commit):
    """Consume-transform-produce: the group's offsets are committed with the transaction, or
    not at all when it aborts."""
    source = _topic("txn-src", txn_broker, partitions=1)
    sink = _topic("txn-sink", txn_broker, partitions=2)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    seed = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(5):
        seed.produce(source, value=b"in%d" % i, partition=0)
    assert seed.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(source, 0, 0)])
    producer = _producer(txn_broker, f"ctp-{uuid.uuid4().hex[:6]}")
    try:
        read = []
        deadline = time.monotonic() + 30
        while len(read) < 5:
            assert time.monotonic() < deadline, f"read only {read}"
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                read.append(msg)
        producer.begin_transaction()
        for msg in read:
            producer.produce(sink, value=msg.value().upper(), partition=0)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 5)],
                                             consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        # The group's committed offset is visible once the marker completed the commit.
        expected = 5 if commit else -1001  # OFFSET_INVALID: nothing committed
        deadline = time.monotonic() + 30
        while True:
            (committed,) = consumer.committed([TopicPartition(source, 0)], timeout=10)
            if committed.offset == expected:
                break
            assert time.monotonic() < deadline, f"committed {committed.offset}"
            time.sleep(0.1)
    finally:
        consumer.close()
