"""AdminClient / Admin against a real Odradek broker (the `odradek_broker` fixture), and
cross-checked with confluent-kafka's AdminClient in both directions."""

from __future__ import annotations

import time
import uuid

import pytest
from fake_broker import run

from odradek.client import (
    Admin,
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigSource,
    KafkaError,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    TopicDescription,
    TopicPartition,
)
from odradek.protocol.errors import ErrorCode

BROKER_ID = 1  # node.id of the fixture's broker


def admin_config(broker, **overrides):
    return {"bootstrap.servers": broker.bootstrap, "default.api.timeout.ms": 15_000,
            **overrides}


def confluent_admin(broker):
    from confluent_kafka.admin import AdminClient as ConfluentAdmin

    return ConfluentAdmin({"bootstrap.servers": broker.bootstrap})


def produce(broker, topic: str, count: int, partition: int = 0, base_ts: int = 1_700_000_000_000):
    """Write `count` records with timestamps base_ts + i*1000 (confluent-kafka producer)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    errors = []
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=partition,
                         timestamp=base_ts + i * 1000,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(15) == 0
    assert not errors


def wait_for(condition, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(interval)


def test_create_describe_list_delete(odradek_broker):
    async def scenario():
        async with AdminClient(admin_config(odradek_broker)) as admin:
            created = await admin.create_topics([
                NewTopic("adm-events", num_partitions=3, replication_factor=1,
                         configs={"retention.ms": "3600000", "cleanup.policy": "compact"}),
            ])
            info = created["adm-events"]
            assert info.topic_id.int != 0
            assert info.num_partitions == 3 and info.replication_factor == 1

            described = await admin.describe_topics(["adm-events"], include_configs=True)
            topic = described["adm-events"]
            assert isinstance(topic, TopicDescription)
            assert topic.topic_id == info.topic_id and not topic.is_internal
            assert [p.partition for p in topic.partitions] == [0, 1, 2]
            for partition in topic.partitions:
                assert partition.leader == BROKER_ID
                assert partition.replicas == (BROKER_ID,) and partition.isr == (BROKER_ID,)
                assert partition.elr == () and partition.last_known_elr == ()
            assert topic.configs["retention.ms"].value == "3600000"
            assert topic.configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
            assert topic.configs["cleanup.policy"].value == "compact"
            assert topic.configs["segment.ms"].is_default

            listing = await admin.list_topics()
            assert listing["adm-events"].topic_id == info.topic_id
            assert all(not t.is_internal for t in listing.values())

            assert await admin.delete_topics(["adm-events"]) == {"adm-events": None}
            assert "adm-events" not in await admin.list_topics()
            with pytest.raises(KafkaError) as raised:
                await admin.describe_topics(["adm-events"])
            assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(scenario(), timeout=60)


def test_errors_carry_the_kafka_name_and_broker_message(odradek_broker):
    async def scenario():
        async with AdminClient(admin_config(odradek_broker)) as admin:
            await admin.create_topics([NewTopic("adm-dup", 1)])
            with pytest.raises(KafkaError) as raised:
                await admin.create_topics([NewTopic("adm-dup", 1)])
            assert raised.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
            assert str(raised.value) == "TOPIC_ALREADY_EXISTS: Topic 'adm-dup' already exists."

            results = await admin.create_topics(
                [NewTopic("adm-dup", 1), NewTopic("adm-fresh", 2)], raise_errors=False)
            assert isinstance(results["adm-dup"], KafkaError)
            assert results["adm-fresh"].num_partitions == 2

            bad = await admin.create_topics(
                [NewTopic("adm-bad", 1, configs={"retention.ms": "soon"})], raise_errors=False)
            assert bad["adm-bad"].code == ErrorCode.INVALID_CONFIG

            with pytest.raises(KafkaError) as raised:
                await admin.delete_topics(["adm-never-created"])
            assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(scenario(), timeout=60)


def test_validate_only_and_replica_assignment(odradek_broker):
    async def scenario():
        async with AdminClient(admin_config(odradek_broker)) as admin:
            checked = await admin.create_topics([NewTopic("adm-dry", 4)], validate_only=True)
            assert "adm-dry" in checked
            assert "adm-dry" not in await admin.list_topics()

            await admin.create_topics([NewTopic(
                "adm-assigned", replica_assignment={0: [BROKER_ID], 1: [BROKER_ID]})])
            topic = (await admin.describe_topics(["adm-assigned"]))["adm-assigned"]
            assert [p.replicas for p in topic.partitions] == [(BROKER_ID,), (BROKER_ID,)]

    run(scenario(), timeout=60)


def test_create_partitions(odradek_broker):
    async def scenario():
        async with AdminClient(admin_config(odradek_broker)) as admin:
            await admin.create_topics([NewTopic("adm-grow", 1)])
            assert await admin.create_partitions({"adm-grow": 3}) == {"adm-grow": None}
            await admin.create_partitions(
                {"adm-grow": NewPartitions(4, assignments=[[BROKER_ID]])})
            topic = (await admin.describe_topics(["adm-grow"]))["adm-grow"]
            assert len(topic.partitions) == 4
            with pytest.raises(KafkaError) as raised:
                await admin.create_partitions({"adm-grow": 2})
            assert raised.value.code == ErrorCode.INVALID_PARTITIONS

    run(scenario(), timeout=60)


def test_configs_describe_alter_incremental(odradek_broker):
    async def scenario():
        async with AdminClient(admin_config(odradek_broker)) as admin:
            await admin.create_topics([NewTopic("adm-conf", 1)])
            topic = ConfigResource.topic("adm-conf")
            broker = ConfigResource.broker(BROKER_ID)
            configs = await admin.describe_configs([topic, broker], include_synonyms=True)
            assert configs[topic]["retention.ms"].is_default
            assert "log.dirs" in configs[broker]
            assert configs[broker]["log.dirs"].is_read_only

            await admin.incremental_alter_configs({topic: [
                AlterConfigOp("retention.ms", "1000"),
                AlterConfigOp("cleanup.policy", "compact", AlterConfigOpType.SET),
            ]})
            configs = (await admin.describe_configs([topic]))[topic]
            assert configs["retention.ms"].value == "1000"
            assert configs["cleanup.policy"].value == "compact"

            await admin.incremental_alter_configs(
                {topic: [AlterConfigOp("retention.ms", op=AlterConfigOpType.DELETE)]})
            configs = (await admin.describe_configs([topic]))[topic]
            assert configs["retention.ms"].is_default
            assert configs["cleanup.policy"].value == "compact"

            # The legacy API replaces the whole set: cleanup.policy returns to its default.
            await admin.alter_configs({topic: {"segment.ms": "60000"}})
            configs = (await admin.describe_configs([topic]))[topic]
            assert configs["segment.ms"].value == "60000"
            assert configs["cleanup.policy"].is_default

            results = await admin.incremental_alter_configs(
                {topic: [AlterConfigOp("retention.ms", "soon")]}, raise_errors=False)
            assert results[topic].code == ErrorCode.INVALID_CONFIG
            missing = ConfigResource.topic("adm-conf-missing")
            results = await admin.describe_configs([missing], raise_errors=False)
            assert results[missing].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(scenario(), timeout=60)


def test_describe_cluster_and_log_dirs(odradek_broker):
    async def scenario():
        async with AdminClient(admin_config(odradek_broker)) as admin:
            cluster = await admin.describe_cluster()
            assert cluster.cluster_id
            assert [node.id for node in cluster.nodes] == [BROKER_ID]
            assert cluster.nodes[0].port == odradek_broker.port
            assert cluster.controller is not None

            await admin.create_topics([NewTopic("adm-dirs", 2)])
            dirs = await admin.describe_log_dirs()
            assert list(dirs) == [BROKER_ID]
            replicas = {tp for d in dirs[BROKER_ID].values() for tp in d.replicas}
            assert {TopicPartition("adm-dirs", 0), TopicPartition("adm-dirs", 1)} <= replicas
            assert all(d.error is None for d in dirs[BROKER_ID].values())

    run(scenario(), timeout=60)


def test_list_offsets_and_delete_records(odradek_broker):
    async def scenario():
        async with AdminClient(admin_config(odradek_broker)) as admin:
            await admin.create_topics([NewTopic("adm-offsets", 1)])
            produce(odradek_broker, "adm-offsets", 10)
            tp = TopicPartition("adm-offsets", 0)
            base = 1_700_000_000_000

            offsets = await admin.list_offsets({tp: OffsetSpec.earliest()})
            assert offsets[tp].offset == 0
            assert (await admin.list_offsets({tp: OffsetSpec.latest()}))[tp].offset == 10
            by_time = await admin.list_offsets({tp: OffsetSpec.for_timestamp(base + 3500)})
            assert by_time[tp].offset == 4 and by_time[tp].timestamp == base + 4000
            newest = await admin.list_offsets({tp: OffsetSpec.max_timestamp()})
            assert newest[tp].offset == 9 and newest[tp].timestamp == base + 9000
            after = await admin.list_offsets({tp: OffsetSpec.for_timestamp(base + 60_000)})
            assert after[tp].offset == -1

            deleted = await admin.delete_records({tp: 4})
            assert deleted[tp].low_watermark == 4
            assert (await admin.list_offsets({tp: OffsetSpec.earliest()}))[tp].offset == 4

            missing = TopicPartition("adm-offsets-missing", 0)
            results = await admin.list_offsets({missing: -1, tp: -1}, raise_errors=False)
            assert results[missing].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert results[tp].offset == 10
            beyond = TopicPartition("adm-offsets", 5)
            with pytest.raises(KafkaError) as raised:
                await admin.delete_records({beyond: 1})
            assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    run(scenario(), timeout=60)


def test_blocking_admin(odradek_broker):
    with Admin(admin_config(odradek_broker)) as admin:
        admin.create_topics([NewTopic("adm-sync", 2)])
        assert "adm-sync" in admin.list_topics()
        topic = admin.describe_topics(["adm-sync"])["adm-sync"]
        assert len(topic.partitions) == 2
        assert admin.describe_cluster().nodes[0].id == BROKER_ID
        admin.delete_topics(["adm-sync"])
        assert "adm-sync" not in admin.list_topics()
    with pytest.raises(RuntimeError, match="closed"):
        admin.list_topics()


def test_unreachable_broker_times_out(odradek_broker):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with Admin({"bootstrap.servers": f"127.0.0.1:{port}"}) as admin, \
            pytest.raises(KafkaError, match="Timed out waiting for a node assignment"):
        admin.list_topics(timeout_ms=500)
    assert time.monotonic() - started < 5


def test_odradek_admin_changes_are_visible_to_confluent_kafka(odradek_broker):
    from confluent_kafka.admin import ConfigResource as CResource

    with Admin(admin_config(odradek_broker)) as admin:
        created = admin.create_topics([NewTopic("x-ours", 3, configs={"retention.ms": "120000"})])
        topic_id = created["x-ours"].topic_id
    other = confluent_admin(odradek_broker)
    metadata = other.list_topics(timeout=10)
    assert "x-ours" in metadata.topics
    assert sorted(metadata.topics["x-ours"].partitions) == [0, 1, 2]
    assert metadata.topics["x-ours"].partitions[0].leader == BROKER_ID
    resource = CResource("topic", "x-ours")
    configs = other.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "120000"
    described = other.describe_topics(
        __import__("confluent_kafka").TopicCollection(["x-ours"]))["x-ours"].result(10)
    mask = (1 << 64) - 1
    their_id = uuid.UUID(int=((described.topic_id.get_most_significant_bits() & mask) << 64)
                         | (described.topic_id.get_least_significant_bits() & mask))
    assert their_id == topic_id

    with Admin(admin_config(odradek_broker)) as admin:
        admin.delete_topics(["x-ours"])
    wait_for(lambda: "x-ours" not in other.list_topics(timeout=10).topics)


def test_confluent_kafka_changes_are_visible_to_odradek_admin(odradek_broker):
    from confluent_kafka.admin import AlterConfigOpType as COpType
    from confluent_kafka.admin import ConfigEntry as CEntry
    from confluent_kafka.admin import ConfigResource as CResource
    from confluent_kafka.admin import NewPartitions as CNewPartitions
    from confluent_kafka.admin import NewTopic as CNewTopic

    other = confluent_admin(odradek_broker)
    futures = other.create_topics([CNewTopic("x-theirs", num_partitions=2, replication_factor=1,
                                             config={"cleanup.policy": "compact"})])
    futures["x-theirs"].result(15)
    with Admin(admin_config(odradek_broker)) as admin:
        topic = admin.describe_topics(["x-theirs"], include_configs=True)["x-theirs"]
        assert len(topic.partitions) == 2
        assert topic.configs["cleanup.policy"].value == "compact"

        other.create_partitions([CNewPartitions("x-theirs", 5)])["x-theirs"].result(15)
        assert len(admin.describe_topics(["x-theirs"])["x-theirs"].partitions) == 5

        resource = CResource("topic", "x-theirs", incremental_configs=[
            CEntry("retention.ms", "5000", incremental_operation=COpType.SET)])
        other.incremental_alter_configs([resource])[resource].result(15)
        configs = admin.describe_configs([ConfigResource.topic("x-theirs")])
        assert configs[ConfigResource.topic("x-theirs")]["retention.ms"].value == "5000"

        other.delete_topics(["x-theirs"])["x-theirs"].result(15)
        assert "x-theirs" not in admin.list_topics()

        # Deleting by topic id (DeleteTopics v6).
        created = admin.create_topics([NewTopic("x-by-id", 1)])["x-by-id"]
        assert isinstance(created.topic_id, uuid.UUID)
        assert admin.delete_topics([created.topic_id]) == {created.topic_id: None}
    wait_for(lambda: "x-by-id" not in other.list_topics(timeout=10).topics)
