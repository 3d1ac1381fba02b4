"""librdkafka's (confluent-kafka's) transactional producer against a real Odradek broker:
commit, abort after flushing, read_committed against read_uncommitted, a zombie fenced by a new
producer with the same transactional.id, a transaction left open past its timeout aborted by
the coordinator."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from broker_process import SHORT_BROKER_SESSION, BrokerProcess
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


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_broker_restart_in_the_middle_of_a_transaction(tmp_path, commit):
    """The broker is killed (SIGKILL) while a transaction is open, with records of it in the
    log; after the restart the producer goes on in the same transaction and ends it. The
    coordinator reloads the transaction from __transaction_state, the partitions' producer
    state restores it from the log, and read_committed sees all of it or nothing."""
    broker = BrokerProcess(tmp_path, overrides={
        "transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4",
        **SHORT_BROKER_SESSION}).start()
    try:
        topic = _topic("txn-restart", broker)
        producer = _producer(broker, f"restart-{uuid.uuid4().hex[:6]}",
                             **{"transaction.timeout.ms": 120_000})
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=b"before-%d" % i, partition=i % 2)
        assert producer.flush(30) == 0  # acknowledged: in the log before the crash
        broker.restart(clean=False)
        for i in range(10):
            producer.produce(topic, value=b"after-%d" % i, partition=i % 2)
        assert producer.flush(60) == 0  # written to the restarted broker (an abort drops
        # what is still queued)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
        _commit_sentinel(broker, topic, b"end")
        ours = {b"before-%d" % i for i in range(10)} | {b"after-%d" % i for i in range(10)}
        committed = _values(broker, topic, "read_committed", b"end")
        assert sorted(v for v in committed if v != b"end") == (sorted(ours) if commit else [])
        uncommitted = _values(broker, topic, "read_uncommitted", b"end")
        assert ours <= set(uncommitted)
    finally:
        broker.stop()


def test_consume_transform_produce_across_a_group(txn_broker):
    """Two members of one group (subscribe, so partitions are assigned by the group) each run
    consume-transform-produce with their own transactional producer and commit the offsets of
    what they processed in each transaction: every input record is in the output exactly once
    for read_committed readers, and the group's offsets end at the input's ends."""
    source = _topic("ctp-group-in", txn_broker, partitions=4)
    sink = _topic("ctp-group-out", txn_broker, partitions=2)
    group = f"ctp-group-{uuid.uuid4().hex[:6]}"
    seed = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(200):
        seed.produce(source, value=b"in-%d" % i, partition=i % 4)
    assert seed.flush(30) == 0

    processed: list[bytes] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def member(index: int) -> None:
        consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        producer = _producer(txn_broker, f"{group}-{index}")
        consumer.subscribe([source])
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with lock:
                    if len(processed) >= 200:
                        return
                batch = [msg for msg in consumer.consume(50, 0.5) if not msg.error()]
                if not batch:
                    continue
                producer.begin_transaction()
                for msg in batch:
                    producer.produce(sink, value=msg.value().replace(b"in-", b"out-"))
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()),
                    consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
                with lock:
                    processed.extend(msg.value() for msg in batch)
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not errors, errors
    assert sorted(processed) == sorted(b"in-%d" % i for i in range(200))

    _commit_sentinel(txn_broker, sink, b"end")
    outputs = [v for v in _values(txn_broker, sink, "read_committed", b"end") if v != b"end"]
    assert sorted(outputs) == sorted(b"out-%d" % i for i in range(200))
    checker = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
    try:
        deadline = time.monotonic() + 30
        while True:
            offsets = checker.committed([TopicPartition(source, p) for p in range(4)], 10)
            if [tp.offset for tp in offsets] == [50] * 4:
                break
            assert time.monotonic() < deadline, offsets
            time.sleep(0.1)
    finally:
        checker.close()
