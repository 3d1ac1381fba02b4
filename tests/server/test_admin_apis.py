"""AdminApis called directly: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
IncrementalAlterConfigs, DeleteRecords, DescribeLogDirs against a real quorum, controller,
metadata cache, log manager and replica manager (no network)."""

from __future__ import annotations

import os
import uuid

import pytest
from handler_services import NODE_ID, HandlerNode, run_with_node

from odradek.config.describe import ConfigSource
from odradek.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.storage.validator import AppendOrigin

CT = m.CreateTopicsRequest
DT = m.DeleteTopicsRequest
CP = m.CreatePartitionsRequest
DC = m.DescribeConfigsRequest
IAC = m.IncrementalAlterConfigsRequest
DR = m.DeleteRecordsRequest
DLD = m.DescribeLogDirsRequest

OP_SET, OP_DELETE = 0, 1
COMMIT_TIMEOUT_MS = 10_000


def creatable(name: str, partitions: int = -1, replication_factor: int = -1,
              **configs: str) -> m.CreateTopicsRequest.CreatableTopic:
    return CT.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication_factor,
        configs=[CT.CreatableTopicConfig(name=k.replace("_", "."), value=v)
                 for k, v in configs.items()])


def create_request(*topics: m.CreateTopicsRequest.CreatableTopic,
                   validate_only: bool = False) -> m.CreateTopicsRequest:
    return CT(topics=list(topics), timeout_ms=30_000, validate_only=validate_only)


async def create(node: HandlerNode, name: str, partitions: int = 1, **configs: str) -> uuid.UUID:
    resp = await node.call(node.admin_apis.create_topics,
                           create_request(creatable(name, partitions, 1, **configs)), 7)
    (result,) = resp.topics
    assert result.error_code == ErrorCode.NONE, result.error_message
    return result.topic_id


def describe_request(resource_type: int, name: str, keys: list[str] | None = None,
                     include_synonyms: bool = False) -> m.DescribeConfigsRequest:
    return DC(resources=[DC.DescribeConfigsResource(resource_type=resource_type,
                                                    resource_name=name,
                                                    configuration_keys=keys)],
              include_synonyms=include_synonyms)


async def describe_one(node: HandlerNode, resource_type: int, name: str, key: str,
                       version: int = 4) -> m.DescribeConfigsResponse.DescribeConfigsResourceResult:
    resp = await node.call(node.admin_apis.describe_configs,
                           describe_request(resource_type, name, [key]), version)
    (result,) = resp.results
    assert result.error_code == ErrorCode.NONE, result.error_message
    (entry,) = result.configs
    return entry


def alter_request(resource_type: int, name: str, *ops: tuple[str, int, str | None],
                  validate_only: bool = False) -> m.IncrementalAlterConfigsRequest:
    return IAC(resources=[IAC.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=[IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])],
        validate_only=validate_only)


async def produce(node: HandlerNode, topic: str, partition: int, count: int) -> None:
    batch = build_batch([(0, b"k%d" % i, b"v%d" % i) for i in range(count)])
    await node.replica_manager.append_and_wait(topic, partition, batch, COMMIT_TIMEOUT_MS,
                                               AppendOrigin.CLIENT)


# -- CreateTopics


@pytest.mark.parametrize("version", [2, 4, 5, 7])
def test_create_topics(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        partitions = 3 if version < 4 else -1  # -1 (the broker's num.partitions) from v4
        resp = await node.call(node.admin_apis.create_topics,
                               create_request(creatable("orders", partitions, 1)), version)
        (result,) = resp.topics
        assert (result.name, result.error_code) == ("orders", ErrorCode.NONE)
        topic = node.cache.image.topics_by_name["orders"]
        assert sorted(topic.partitions) == [0, 1, 2]
        assert all(list(p.replicas) == [NODE_ID] for p in topic.partitions.values())
        if version >= 5:
            assert (result.num_partitions, result.replication_factor) == (3, 1)
        if version >= 7:
            assert result.topic_id == topic.topic_id

    run_with_node(tmp_path, scenario, overrides={"num.partitions": "3"})


def test_create_topics_duplicate_names_in_one_request_are_invalid(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.admin_apis.create_topics, create_request(
            creatable("twice", 1, 1), creatable("once", 1, 1), creatable("twice", 2, 1)), 5)
        errors = {t.name: t.error_code for t in resp.topics}
        assert errors == {"twice": ErrorCode.INVALID_REQUEST, "once": ErrorCode.NONE}
        assert len(resp.topics) == 2  # one result for the duplicated name
        assert set(node.cache.image.topics_by_name) == {"once"}

    run_with_node(tmp_path, scenario)


def test_create_topics_validate_only_creates_nothing(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        offset_before = node.quorum.high_watermark
        resp = await node.call(node.admin_apis.create_topics, create_request(
            creatable("orders", 4, 1), validate_only=True), 5)
        (result,) = resp.topics
        assert result.error_code == ErrorCode.NONE
        assert (result.num_partitions, result.replication_factor) == (4, 1)
        assert "orders" not in node.cache.image.topics_by_name
        assert node.quorum.high_watermark == offset_before  # nothing was written
        assert node.replica_manager.partitions_of(["orders"]) == []

    run_with_node(tmp_path, scenario)


def test_create_topics_v5_returns_the_topic_configs(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.admin_apis.create_topics, create_request(
            creatable("orders", 1, 1, retention_ms="3600000")), 5)
        (result,) = resp.topics
        configs = {c.name: c for c in result.configs}
        assert configs["retention.ms"].value == "3600000"
        assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert configs["cleanup.policy"].value == "delete"
        assert configs["cleanup.policy"].config_source == ConfigSource.DEFAULT_CONFIG
        # v4 has no configs in its response.
        older = await node.call(node.admin_apis.create_topics,
                                create_request(creatable("older", 1, 1)), 4)
        assert older.topics[0].configs == []

    run_with_node(tmp_path, scenario)


def test_create_topics_errors(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders")
        resp = await node.call(node.admin_apis.create_topics, create_request(
            creatable("orders", 1, 1),
            creatable("too-replicated", 1, 2),
            creatable("no partitions", 1, 1),
            creatable("bad-config", 1, 1, retention_ms="soon")), 5)
        errors = {t.name: t.error_code for t in resp.topics}
        assert errors == {
            "orders": ErrorCode.TOPIC_ALREADY_EXISTS,
            "too-replicated": ErrorCode.INVALID_REPLICATION_FACTOR,
            "no partitions": ErrorCode.INVALID_TOPIC_EXCEPTION,
            "bad-config": ErrorCode.INVALID_CONFIG,
        }
        assert all(t.error_message for t in resp.topics)
        assert set(node.cache.image.topics_by_name) == {"orders"}

    run_with_node(tmp_path, scenario)


# -- DeleteTopics


@pytest.mark.parametrize("version", [1, 3, 5])
def test_delete_topics_by_name(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", partitions=2)
        assert len(node.replica_manager.partitions_of(["orders"])) == 2
        resp = await node.call(node.admin_apis.delete_topics,
                               DT(topic_names=["orders", "absent"], timeout_ms=30_000), version)
        errors = {r.name: r.error_code for r in resp.responses}
        assert errors == {"orders": ErrorCode.NONE,
                          "absent": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert "orders" not in node.cache.image.topics_by_name
        assert node.replica_manager.partitions_of(["orders"]) == []

    run_with_node(tmp_path, scenario)


def test_delete_topics_v6_by_id_and_by_name(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        by_id = await create(node, "by-id")
        by_name = await create(node, "by-name")
        unknown = uuid.uuid4()
        resp = await node.call(node.admin_apis.delete_topics, DT(topics=[
            DT.DeleteTopicState(name=None, topic_id=by_id),
            DT.DeleteTopicState(name="by-name"),
            DT.DeleteTopicState(name=None, topic_id=unknown)], timeout_ms=30_000), 6)
        results = {r.topic_id: (r.name, r.error_code) for r in resp.responses}
        assert results == {by_id: ("by-id", ErrorCode.NONE),
                           by_name: ("by-name", ErrorCode.NONE),
                           unknown: (None, ErrorCode.UNKNOWN_TOPIC_ID)}
        assert node.cache.image.topics_by_name == {}

    run_with_node(tmp_path, scenario)


@pytest.mark.parametrize("version", [3, 6])
def test_delete_topics_disabled_by_config(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        topic_id = await create(node, "orders")
        request = (DT(topic_names=["orders"]) if version < 6
                   else DT(topics=[DT.DeleteTopicState(name="orders")]))
        resp = await node.call(node.admin_apis.delete_topics, request, version)
        assert [(r.name, r.error_code) for r in resp.responses] == [
            ("orders", ErrorCode.TOPIC_DELETION_DISABLED)]
        assert node.cache.image.topics_by_name["orders"].topic_id == topic_id

    run_with_node(tmp_path, scenario, overrides={"delete.topic.enable": "false"})


def test_delete_topics_disabled_before_v3_is_an_invalid_request(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders")
        resp = await node.call(node.admin_apis.delete_topics, DT(topic_names=["orders"]), 2)
        assert [(r.name, r.error_code) for r in resp.responses] == [
            ("orders", ErrorCode.INVALID_REQUEST)]

    run_with_node(tmp_path, scenario, overrides={"delete.topic.enable": "false"})


# -- CreatePartitions


def grow(name: str, count: int) -> m.CreatePartitionsRequest.CreatePartitionsTopic:
    return CP.CreatePartitionsTopic(name=name, count=count, assignments=None)


def test_create_partitions(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", partitions=1)
        resp = await node.call(node.admin_apis.create_partitions, CP(
            topics=[grow("orders", 3), grow("absent", 2)], timeout_ms=30_000), 3)
        errors = {r.name: r.error_code for r in resp.results}
        assert errors == {"orders": ErrorCode.NONE,
                          "absent": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert sorted(node.cache.image.topics_by_name["orders"].partitions) == [0, 1, 2]
        assert sorted(p.index for p in node.replica_manager.partitions_of(["orders"])) == \
            [0, 1, 2]
        # A topic never shrinks, nor "grows" to its current count.
        for count in (2, 3):
            (result,) = (await node.call(node.admin_apis.create_partitions, CP(
                topics=[grow("orders", count)], timeout_ms=30_000), 3)).results
            assert result.error_code == ErrorCode.INVALID_PARTITIONS
            assert result.error_message

    run_with_node(tmp_path, scenario)


def test_create_partitions_validate_only_changes_nothing(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", partitions=1)
        resp = await node.call(node.admin_apis.create_partitions, CP(
            topics=[grow("orders", 4)], timeout_ms=30_000, validate_only=True), 1)
        assert [r.error_code for r in resp.results] == [ErrorCode.NONE]
        assert sorted(node.cache.image.topics_by_name["orders"].partitions) == [0]

    run_with_node(tmp_path, scenario)


def test_create_partitions_duplicate_topic_is_invalid(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", partitions=1)
        resp = await node.call(node.admin_apis.create_partitions, CP(
            topics=[grow("orders", 2), grow("orders", 3)], timeout_ms=30_000), 3)
        assert [(r.name, r.error_code) for r in resp.results] == [
            ("orders", ErrorCode.INVALID_REQUEST)]
        assert sorted(node.cache.image.topics_by_name["orders"].partitions) == [0]

    run_with_node(tmp_path, scenario)


# -- DescribeConfigs


def test_describe_configs_resource_errors(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.admin_apis.describe_configs, DC(resources=[
            DC.DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name="absent"),
            DC.DescribeConfigsResource(resource_type=RESOURCE_BROKER,
                                       resource_name=str(NODE_ID + 1)),
            DC.DescribeConfigsResource(resource_type=RESOURCE_BROKER,
                                       resource_name=str(NODE_ID),
                                       configuration_keys=["num.partitions"]),
        ]), 4)
        by_name = {r.resource_name: r for r in resp.results}
        assert by_name["absent"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert by_name["absent"].configs == []
        other_broker = by_name[str(NODE_ID + 1)]
        assert other_broker.error_code == ErrorCode.INVALID_REQUEST
        assert f"expected {NODE_ID}" in other_broker.error_message
        # One bad resource does not spoil the others.
        assert by_name[str(NODE_ID)].error_code == ErrorCode.NONE
        assert [c.name for c in by_name[str(NODE_ID)].configs] == ["num.partitions"]

    run_with_node(tmp_path, scenario)


@pytest.mark.parametrize("version", [1, 4])
def test_describe_configs_of_a_topic(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", retention_ms="3600000")
        keys = ["retention.ms", "cleanup.policy"]
        resp = await node.call(node.admin_apis.describe_configs,
                               describe_request(RESOURCE_TOPIC, "orders", keys), version)
        (result,) = resp.results
        configs = {c.name: c for c in result.configs}
        assert set(configs) == set(keys)  # configuration_keys filters
        assert configs["retention.ms"].value == "3600000"
        assert configs["cleanup.policy"].value == "delete"
        if version == 0:
            assert not configs["retention.ms"].is_default
            assert configs["cleanup.policy"].is_default
        else:
            assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
            assert configs["cleanup.policy"].config_source == ConfigSource.DEFAULT_CONFIG
        # No keys (null): every topic config.
        everything = await node.call(node.admin_apis.describe_configs,
                                     describe_request(RESOURCE_TOPIC, "orders"), version)
        names = {c.name for c in everything.results[0].configs}
        assert {"retention.ms", "cleanup.policy", "segment.bytes",
                "min.insync.replicas"} <= names

    run_with_node(tmp_path, scenario)


def test_describe_configs_synonyms(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", retention_ms="3600000")
        plain = await node.call(node.admin_apis.describe_configs,
                                describe_request(RESOURCE_TOPIC, "orders", ["retention.ms"]), 1)
        assert plain.results[0].configs[0].synonyms == []
        resp = await node.call(node.admin_apis.describe_configs, describe_request(
            RESOURCE_TOPIC, "orders", ["retention.ms"], include_synonyms=True), 1)
        (entry,) = resp.results[0].configs
        # The synonyms start with the value in effect: here the topic's own override.
        first = entry.synonyms[0]
        assert (first.name, first.value, first.source) == \
            ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        # A broker config from server.properties: the static value, then the default.
        broker = await node.call(node.admin_apis.describe_configs, describe_request(
            RESOURCE_BROKER, str(NODE_ID), ["num.partitions"], include_synonyms=True), 1)
        (num_partitions,) = broker.results[0].configs
        assert [(s.name, s.value, s.source) for s in num_partitions.synonyms] == [
            ("num.partitions", "1", ConfigSource.STATIC_BROKER_CONFIG),
            ("num.partitions", "1", ConfigSource.DEFAULT_CONFIG)]

    run_with_node(tmp_path, scenario)


def test_describe_configs_synonym_values_are_the_broker_configs_values(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders")
        resp = await node.call(node.admin_apis.describe_configs, describe_request(
            RESOURCE_TOPIC, "orders", ["retention.ms"], include_synonyms=True), 1)
        (entry,) = resp.results[0].configs
        hours = [s for s in entry.synonyms if s.name == "log.retention.hours"]
        assert all(s.value == "168" for s in hours), hours

    run_with_node(tmp_path, scenario)


# -- IncrementalAlterConfigs


def test_incremental_alter_configs_set_and_delete_a_topic_config(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders")
        resp = await node.call(node.admin_apis.incremental_alter_configs, alter_request(
            RESOURCE_TOPIC, "orders", ("retention.ms", OP_SET, "7200000")), 1)
        assert [r.error_code for r in resp.responses] == [ErrorCode.NONE]
        entry = await describe_one(node, RESOURCE_TOPIC, "orders", "retention.ms")
        assert (entry.value, entry.config_source) == \
            ("7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert node.cache.image.topic_config("orders") == {"retention.ms": "7200000"}

        resp = await node.call(node.admin_apis.incremental_alter_configs, alter_request(
            RESOURCE_TOPIC, "orders", ("retention.ms", OP_DELETE, None)), 0)
        assert [r.error_code for r in resp.responses] == [ErrorCode.NONE]
        entry = await describe_one(node, RESOURCE_TOPIC, "orders", "retention.ms")
        assert (entry.value, entry.config_source) == ("604800000", ConfigSource.DEFAULT_CONFIG)

    run_with_node(tmp_path, scenario)


def test_incremental_alter_configs_validate_only_and_errors(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders")
        alter = node.admin_apis.incremental_alter_configs
        checked = await node.call(alter, alter_request(
            RESOURCE_TOPIC, "orders", ("retention.ms", OP_SET, "1000"), validate_only=True), 1)
        assert checked.responses[0].error_code == ErrorCode.NONE
        assert node.cache.image.topic_config("orders") == {}
        bad_value = await node.call(alter, alter_request(
            RESOURCE_TOPIC, "orders", ("retention.ms", OP_SET, "soon")), 1)
        assert bad_value.responses[0].error_code == ErrorCode.INVALID_CONFIG
        absent = await node.call(alter, alter_request(
            RESOURCE_TOPIC, "absent", ("retention.ms", OP_SET, "1000")), 1)
        assert absent.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert node.cache.image.topic_config("orders") == {}

    run_with_node(tmp_path, scenario)


def test_incremental_alter_configs_of_a_broker(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        alter = node.admin_apis.incremental_alter_configs
        # A config Kafka cannot change at runtime: refused for the whole resource.
        refused = await node.call(alter, alter_request(
            RESOURCE_BROKER, str(NODE_ID), ("log.dirs", OP_SET, "/elsewhere"),
            ("log.retention.ms", OP_SET, "1000")), 1)
        (result,) = refused.responses
        assert result.error_code == ErrorCode.INVALID_REQUEST
        assert "log.dirs" in result.error_message
        entry = await describe_one(node, RESOURCE_BROKER, str(NODE_ID), "log.retention.ms")
        assert entry.config_source == ConfigSource.DEFAULT_CONFIG
        # A dynamic one is applied, and DescribeConfigs shows where it comes from now.
        accepted = await node.call(alter, alter_request(
            RESOURCE_BROKER, str(NODE_ID), ("log.retention.ms", OP_SET, "1000")), 1)
        assert accepted.responses[0].error_code == ErrorCode.NONE
        entry = await describe_one(node, RESOURCE_BROKER, str(NODE_ID), "log.retention.ms")
        assert (entry.value, entry.config_source) == \
            ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG)

    run_with_node(tmp_path, scenario)


# -- DeleteRecords


@pytest.mark.parametrize("version", [0, 2])
def test_delete_records_moves_the_low_watermark(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", partitions=2)
        await produce(node, "orders", 0, 5)
        await produce(node, "orders", 1, 4)

        def request(*offsets: tuple[str, int, int]) -> m.DeleteRecordsRequest:
            by_topic: dict[str, list] = {}
            for topic, partition, offset in offsets:
                by_topic.setdefault(topic, []).append(
                    DR.DeleteRecordsPartition(partition_index=partition, offset=offset))
            return DR(topics=[DR.DeleteRecordsTopic(name=t, partitions=ps)
                              for t, ps in by_topic.items()], timeout_ms=30_000)

        resp = await node.call(node.admin_apis.delete_records, request(
            ("orders", 0, 3), ("orders", 1, -1), ("orders", 7, 0), ("absent", 0, 0)), version)
        results = {(t.name, p.partition_index): (p.error_code, p.low_watermark)
                   for t in resp.topics for p in t.partitions}
        assert results == {
            ("orders", 0): (ErrorCode.NONE, 3),
            ("orders", 1): (ErrorCode.NONE, 4),  # -1: up to the high watermark
            ("orders", 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("absent", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        }
        (partition,) = [p for p in node.replica_manager.partitions_of(["orders"])
                        if p.index == 0]
        assert partition.log.log_start_offset == 3
        # Past the high watermark: out of range, nothing moves.
        beyond = await node.call(node.admin_apis.delete_records,
                                 request(("orders", 0, 6)), version)
        assert beyond.topics[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert partition.log.log_start_offset == 3

    run_with_node(tmp_path, scenario)


# -- DescribeLogDirs


@pytest.mark.parametrize("version", [1, 4])
def test_describe_log_dirs(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        await create(node, "orders", partitions=2)
        await create(node, "other")
        await produce(node, "orders", 0, 10)
        (log_dir,) = [os.path.abspath(d) for d in node.config.log_dirs]

        everything = await node.call(node.admin_apis.describe_log_dirs, DLD(topics=None),
                                     version)
        (result,) = everything.results
        assert (result.log_dir, result.error_code) == (log_dir, ErrorCode.NONE)
        sizes = {(t.name, p.partition_index): p.partition_size
                 for t in result.topics for p in t.partitions}
        # The metadata log is not a partition of this log dir.
        assert set(sizes) == {("orders", 0), ("orders", 1), ("other", 0)}
        assert sizes[("orders", 0)] > 0 == sizes[("orders", 1)]
        if version >= 4:
            assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes

        some = await node.call(node.admin_apis.describe_log_dirs, DLD(topics=[
            DLD.DescribableLogDirTopic(topic="orders", partitions=[1])]), version)
        assert [(t.name, [p.partition_index for p in t.partitions])
                for t in some.results[0].topics] == [("orders", [1])]

    run_with_node(tmp_path, scenario)
