"""ControllerState: admin operations validated against an image, turned into metadata records
(or errors, with no records)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from odradek.controller.controller import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    PRODUCER_ID_BLOCK_SIZE,
    ControllerState,
    TopicSpec,
    replay_all,
    validate_topic_name,
)
from odradek.metadata.image import EMPTY_IMAGE, RESOURCE_BROKER, RESOURCE_TOPIC, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.storage.config import validate_topic_props

ENDPOINTS = [("PLAINTEXT", "localhost", 9092, 0)]
FEATURES = {"metadata.version": (1, 20)}


def controller(num_partitions: int = 1, replication_factor: int = 1) -> ControllerState:
    return ControllerState(num_partitions=num_partitions,
                           default_replication_factor=replication_factor,
                           config_validator=validate_topic_props, rng=random.Random(7))


def cluster(*broker_ids: int, fenced: tuple[int, ...] = ()) -> MetadataImage:
    """An image with live brokers (and fenced ones, which get no replicas)."""
    state = controller()
    records: list[Any] = []
    for broker_id in broker_ids:
        registration = state.register_broker(EMPTY_IMAGE, broker_id, uuid.uuid4(), 5,
                                             ENDPOINTS, None, FEATURES)
        records += registration if broker_id not in fenced else registration[:1]
    return replay_all(EMPTY_IMAGE, records)


def create(image: MetadataImage, *specs: TopicSpec, state: ControllerState | None = None
           ) -> tuple[MetadataImage, list[Any]]:
    results, records = (state or controller()).create_topics(image, specs)
    assert all(r.error == ErrorCode.NONE for r in results), results
    return replay_all(image, records), results


def error_of(results: list[Any]) -> list[ErrorCode]:
    return [r.error for r in results]


# -- create topics
def test_create_topic_records_topic_configs_and_partitions():
    image = cluster(1, 2, 3)
    results, records = controller().create_topics(image, [TopicSpec(
        "orders", num_partitions=3, replication_factor=2,
        configs={"retention.ms": "1000", "cleanup.policy": "compact", "segment.ms": None})])
    (result,) = results
    assert result.error == ErrorCode.NONE
    topic_id = result.data["topic_id"]
    assert result.data == {"topic_id": topic_id, "num_partitions": 3, "replication_factor": 2,
                           "configs": {"retention.ms": "1000", "cleanup.policy": "compact"}}
    assert [type(r).__name__ for r in records] == [
        "TopicRecord", "ConfigRecord", "ConfigRecord",
        "PartitionRecord", "PartitionRecord", "PartitionRecord"]
    assert records[0] == m.TopicRecord(name="orders", topic_id=topic_id)
    assert [(r.name, r.value) for r in records[1:3]] == [  # sorted; None values dropped
        ("cleanup.policy", "compact"), ("retention.ms", "1000")]
    assert all(r.resource_type == RESOURCE_TOPIC and r.resource_name == "orders"
               for r in records[1:3])
    partitions = records[3:]
    assert [p.partition_id for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert p.topic_id == topic_id and len(set(p.replicas)) == 2
        assert set(p.replicas) <= {1, 2, 3} and p.isr == p.replicas
        assert p.leader == p.replicas[0] and (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert len({p.leader for p in partitions}) == 3  # leaders rotate over the brokers
    image = replay_all(image, records)
    assert sorted(image.topics_by_name["orders"].partitions) == [0, 1, 2]
    assert image.topic_config("orders") == {"retention.ms": "1000", "cleanup.policy": "compact"}


def test_create_topic_uses_the_broker_defaults():
    image, results = create(cluster(1, 2), TopicSpec("t"),
                            state=controller(num_partitions=4, replication_factor=2))
    assert (results[0].data["num_partitions"], results[0].data["replication_factor"]) == (4, 2)
    assert all(len(p.replicas) == 2 for p in image.topics_by_name["t"].partitions.values())


def test_create_topic_with_a_manual_assignment():
    image, _ = create(cluster(1, 2, 3), TopicSpec("t", assignments={0: [3, 1], 1: [2, 3]}))
    parts = image.topics_by_name["t"].partitions
    assert (parts[0].replicas, parts[0].leader) == ((3, 1), 3)
    assert (parts[1].replicas, parts[1].leader) == ((2, 3), 2)


def test_fenced_brokers_get_no_replicas():
    image = cluster(1, 2, fenced=(2,))
    results, _ = controller().create_topics(image, [TopicSpec("t", replication_factor=2)])
    assert error_of(results) == [ErrorCode.INVALID_REPLICATION_FACTOR]
    image, _ = create(image, TopicSpec("u", num_partitions=3))
    assert {p.leader for p in image.topics_by_name["u"].partitions.values()} == {1}


@pytest.mark.parametrize("spec, error", [
    (TopicSpec(""), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (TopicSpec("bad name!"), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (TopicSpec("x" * 250), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (TopicSpec("existing"), ErrorCode.TOPIC_ALREADY_EXISTS),
    (TopicSpec("my_topic"), ErrorCode.INVALID_TOPIC_EXCEPTION),  # collides with my.topic
    (TopicSpec("t", num_partitions=0), ErrorCode.INVALID_PARTITIONS),
    (TopicSpec("t", replication_factor=0), ErrorCode.INVALID_REPLICATION_FACTOR),
    (TopicSpec("t", replication_factor=3), ErrorCode.INVALID_REPLICATION_FACTOR),
    (TopicSpec("t", num_partitions=2, assignments={0: [1]}), ErrorCode.INVALID_REQUEST),
    (TopicSpec("t", assignments={0: [1], 2: [2]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (TopicSpec("t", assignments={0: [1, 1]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (TopicSpec("t", assignments={0: [1, 9]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (TopicSpec("t", configs={"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
    (TopicSpec("t", configs={"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
])
def test_create_topic_errors_produce_no_records(spec: TopicSpec, error: ErrorCode):
    image, _ = create(cluster(1, 2), TopicSpec("existing"), TopicSpec("my.topic"))
    results, records = controller().create_topics(image, [spec])
    assert error_of(results) == [error] and results[0].message
    assert records == []


def test_topics_created_earlier_in_the_same_request_count_as_existing():
    results, records = controller().create_topics(cluster(1), [
        TopicSpec("a.b"), TopicSpec("a.b"), TopicSpec("a_b"), TopicSpec("c")])
    assert error_of(results) == [ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS,
                                 ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.NONE]
    assert [r.name for r in records if isinstance(r, m.TopicRecord)] == ["a.b", "c"]


def test_validate_topic_name():
    assert validate_topic_name("ok-topic_1.x") is None
    for bad in ("", ".", "..", "a" * 250, "sp ace"):
        assert validate_topic_name(bad)


# -- delete topics
def test_delete_topics_by_name_and_id():
    image, _ = create(cluster(1), TopicSpec("a"), TopicSpec("b"), TopicSpec("c"))
    b_id = image.topics_by_name["b"].topic_id
    unknown_id = uuid.uuid4()
    results, records = controller().delete_topics(image, ["a", "missing", "a"],
                                                  [b_id, unknown_id])
    assert error_of(results) == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 ErrorCode.NONE, ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_ID]
    assert results[0].data == {"topic_id": image.topics_by_name["a"].topic_id, "name": "a"}
    assert results[3].data == {"topic_id": b_id, "name": "b"}
    # "a" named twice: one removal.
    assert records == [m.RemoveTopicRecord(topic_id=image.topics_by_name["a"].topic_id),
                       m.RemoveTopicRecord(topic_id=b_id)]
    assert set(replay_all(image, records).topics_by_name) == {"c"}


def test_delete_a_topic_named_and_given_by_id_removes_it_once():
    image, _ = create(cluster(1), TopicSpec("a"))
    a_id = image.topics_by_name["a"].topic_id
    results, records = controller().delete_topics(image, ["a"], [a_id])
    assert error_of(results) == [ErrorCode.NONE, ErrorCode.NONE]
    assert records == [m.RemoveTopicRecord(topic_id=a_id)]


# -- create partitions
def test_create_partitions_adds_partition_records():
    image, _ = create(cluster(1, 2), TopicSpec("t", num_partitions=2, replication_factor=2))
    topic_id = image.topics_by_name["t"].topic_id
    result, records = controller().create_partitions(image, "t", 5, None)
    assert result.error == ErrorCode.NONE
    assert [(r.partition_id, r.topic_id, len(r.replicas)) for r in records] == [
        (2, topic_id, 2), (3, topic_id, 2), (4, topic_id, 2)]
    result, records = controller().create_partitions(image, "t", 4, [[2, 1], [1, 2]])
    assert [(r.partition_id, r.replicas, r.leader) for r in records] == [
        (2, [2, 1], 2), (3, [1, 2], 1)]
    assert sorted(replay_all(image, records).topics_by_name["t"].partitions) == [0, 1, 2, 3]


@pytest.mark.parametrize("name, count, assignments, error", [
    ("missing", 3, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ("t", 1, None, ErrorCode.INVALID_PARTITIONS),
    ("t", 2, None, ErrorCode.INVALID_PARTITIONS),
    ("t", 4, [[1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ("wide", 3, None, ErrorCode.INVALID_REPLICATION_FACTOR),  # broker 2 fenced since
])
def test_create_partitions_errors(name: str, count: int, assignments: list[list[int]] | None,
                                  error: ErrorCode):
    image, _ = create(cluster(1, 2), TopicSpec("t", num_partitions=2),
                      TopicSpec("wide", num_partitions=2, replication_factor=2))
    image = replay_all(image, [m.FenceBrokerRecord(id=2, epoch=5)])
    result, records = controller().create_partitions(image, name, count, assignments)
    assert result.error == error and result.message and records == []


# -- configs
def topic_with_configs(configs: Mapping[str, str]) -> MetadataImage:
    image, _ = create(cluster(1), TopicSpec("t", configs=dict(configs)))
    return image


def alter(image: MetadataImage, ops: list[tuple[str, int, str | None]], *, incremental: bool,
          resource_type: int = RESOURCE_TOPIC, name: str = "t"):
    return controller().alter_configs(image, resource_type, name, ops, incremental=incremental)


def test_legacy_alter_configs_replaces_the_whole_set():
    image = topic_with_configs({"retention.ms": "1000", "segment.ms": "600000"})
    result, records = alter(image, [("retention.ms", OP_SET, "2000"),
                                    ("max.message.bytes", OP_SET, "1000")], incremental=False)
    assert result.error == ErrorCode.NONE
    assert [(r.name, r.value) for r in records] == [
        ("max.message.bytes", "1000"), ("retention.ms", "2000"), ("segment.ms", None)]
    assert replay_all(image, records).topic_config("t") == {"retention.ms": "2000",
                                                            "max.message.bytes": "1000"}


def test_incremental_alter_configs_set_delete_append_subtract():
    image = topic_with_configs({"retention.ms": "1000", "cleanup.policy": "delete"})
    result, records = alter(image, [("retention.ms", OP_DELETE, None),
                                    ("segment.ms", OP_SET, "60000"),
                                    ("cleanup.policy", OP_APPEND, "compact,delete")],
                            incremental=True)
    assert result.error == ErrorCode.NONE
    image = replay_all(image, records)
    assert image.topic_config("t") == {"segment.ms": "60000", "cleanup.policy": "delete,compact"}
    result, records = alter(image, [("cleanup.policy", OP_SUBTRACT, "delete")], incremental=True)
    assert replay_all(image, records).topic_config("t")["cleanup.policy"] == "compact"


def test_append_to_a_default_cleanup_policy_gives_delete_compact():
    """Kafka starts APPEND from the default when the topic does not set the key."""
    image = topic_with_configs({})
    result, records = alter(image, [("cleanup.policy", OP_APPEND, "compact")], incremental=True)
    assert result.error == ErrorCode.NONE
    assert replay_all(image, records).topic_config("t") == {"cleanup.policy": "delete,compact"}
    result, records = alter(image, [("cleanup.policy", OP_SUBTRACT, "delete")], incremental=True)
    assert replay_all(image, records).topic_config("t") == {"cleanup.policy": ""}


def test_append_to_a_non_list_config_is_refused_with_kafkas_message():
    result, records = alter(topic_with_configs({}), [("retention.ms", OP_SUBTRACT, "1")],
                            incremental=True)
    assert (result.error, result.message, records) == (
        ErrorCode.INVALID_CONFIG,
        "Can't SUBTRACT to key retention.ms because its type is not LIST.", [])


def test_alter_configs_that_change_nothing_produce_no_records():
    image = topic_with_configs({"retention.ms": "1000"})
    result, records = alter(image, [("retention.ms", OP_SET, "1000"),
                                    ("segment.ms", OP_DELETE, None)], incremental=True)
    assert result.error == ErrorCode.NONE and records == []


def test_broker_configs_are_not_validated_as_topic_configs():
    result, records = alter(cluster(1), [("log.retention.ms", OP_SET, "5")], incremental=True,
                            resource_type=RESOURCE_BROKER, name="")
    assert result.error == ErrorCode.NONE
    assert records == [m.ConfigRecord(resource_type=RESOURCE_BROKER, resource_name="",
                                      name="log.retention.ms", value="5")]


@pytest.mark.parametrize("resource_type, name, ops, error", [
    (RESOURCE_TOPIC, "missing", [("retention.ms", OP_SET, "1")],
     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (99, "x", [("a", OP_SET, "1")], ErrorCode.INVALID_REQUEST),
    (RESOURCE_TOPIC, "t", [("retention.ms", OP_APPEND, "1")], ErrorCode.INVALID_CONFIG),
    (RESOURCE_TOPIC, "t", [("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST),
    (RESOURCE_TOPIC, "t", [("retention.ms", OP_SET, "soon")], ErrorCode.INVALID_CONFIG),
])
def test_alter_configs_errors(resource_type: int, name: str,
                              ops: list[tuple[str, int, str | None]], error: ErrorCode):
    image = topic_with_configs({})
    result, records = alter(image, ops, incremental=True, resource_type=resource_type,
                            name=name)
    assert result.error == error and result.message and records == []


# -- brokers and producer ids
def test_register_broker_registers_fenced_then_unfences():
    incarnation = uuid.uuid4()
    records = controller().register_broker(EMPTY_IMAGE, 3, incarnation, 17, ENDPOINTS, "rack-a",
                                           FEATURES)
    register, unfence = records
    assert isinstance(register, m.RegisterBrokerRecord) and register.fenced
    assert (register.broker_id, register.incarnation_id, register.broker_epoch,
            register.rack) == (3, incarnation, 17, "rack-a")
    assert [(e.name, e.host, e.port, e.security_protocol) for e in register.end_points] == [
        ("PLAINTEXT", "localhost", 9092, 0)]
    assert [(f.name, f.min_supported_version, f.max_supported_version)
            for f in register.features] == [("metadata.version", 1, 20)]
    assert unfence == m.UnfenceBrokerRecord(id=3, epoch=17)
    broker = replay_all(EMPTY_IMAGE, records).brokers[3]
    assert not broker.fenced and broker.epoch == 17 and broker.rack == "rack-a"


def test_producer_id_blocks_follow_each_other():
    state = controller()
    image = cluster(1)
    (first, count), records = state.allocate_producer_ids(image, 1, 5)
    assert (first, count) == (0, PRODUCER_ID_BLOCK_SIZE)
    assert records == [m.ProducerIdsRecord(broker_id=1, broker_epoch=5,
                                           next_producer_id=PRODUCER_ID_BLOCK_SIZE)]
    image = replay_all(image, records)
    (second, _), _ = state.allocate_producer_ids(image, 1, 5)
    assert second == PRODUCER_ID_BLOCK_SIZE


def test_replay_all_sets_the_offset():
    image = replay_all(EMPTY_IMAGE, [m.TopicRecord(name="t", topic_id=uuid.uuid4())], offset=9)
    assert image.offset == 9 and "t" in image.topics_by_name
