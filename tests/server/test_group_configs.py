"""GROUP config resources (ConfigResource type 32) on a real broker, as Kafka 4.0: every
GroupConfig key described (the broker's `group.*` value until the group sets its own), altered
with IncrementalAlterConfigs and AlterConfigs, validated against the broker's
`group.consumer.min/max.*` bounds (INVALID_CONFIG, nothing written), and used by the consumer
group coordinator for that group's heartbeat interval."""

from __future__ import annotations

import time
import uuid

import pytest
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

GROUP = 32
GROUP_CONFIG_SOURCE, DEFAULT_CONFIG_SOURCE = 8, 5
KAFKA40_GROUP_CONFIGS = {
    "consumer.session.timeout.ms": "45000",
    "consumer.heartbeat.interval.ms": "5000",
    "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000",
    "share.auto.offset.reset": "latest",
}


def describe(broker, group: str):
    R = m.DescribeConfigsRequest
    with RawClient(broker.host, broker.port) as client:
        response = client.call(32, 4, R(resources=[R.DescribeConfigsResource(
            resource_type=GROUP, resource_name=group, configuration_keys=None)],
            include_synonyms=True, include_documentation=True))
    (result,) = response.results
    return result


def incremental(broker, group: str, *ops: tuple[str, int, str | None],
                validate_only: bool = False):
    R = m.IncrementalAlterConfigsRequest
    with RawClient(broker.host, broker.port) as client:
        response = client.call(44, 1, R(resources=[R.AlterConfigsResource(
            resource_type=GROUP, resource_name=group,
            configs=[R.AlterableConfig(name=k, config_operation=op, value=v)
                     for k, op, v in ops])], validate_only=validate_only))
    (result,) = response.responses
    return result


def legacy_alter(broker, group: str, configs: dict[str, str]):
    R = m.AlterConfigsRequest
    with RawClient(broker.host, broker.port) as client:
        response = client.call(33, 2, R(resources=[R.AlterConfigsResource(
            resource_type=GROUP, resource_name=group,
            configs=[R.AlterableConfig(name=k, value=v) for k, v in configs.items()])]))
    (result,) = response.responses
    return result


def values(result) -> dict[str, tuple[str, int]]:
    return {c.name: (c.value, c.config_source) for c in result.configs}


def wait_for(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_describe_any_group_gives_kafka40_group_configs(odradek_broker):
    result = describe(odradek_broker, f"no-such-group-{uuid.uuid4().hex[:6]}")
    assert result.error_code == ErrorCode.NONE
    assert {c.name: c.value for c in result.configs} == KAFKA40_GROUP_CONFIGS
    for config in result.configs:
        assert config.config_source == DEFAULT_CONFIG_SOURCE and config.synonyms == []
        assert not config.read_only and not config.is_sensitive and config.documentation
    assert {c.name: c.config_type for c in result.configs}["share.auto.offset.reset"] == 2
    assert {c.name: c.config_type for c in result.configs}["consumer.session.timeout.ms"] == 3


def test_empty_group_name_is_an_invalid_request(odradek_broker):
    assert describe(odradek_broker, "").error_code == ErrorCode.INVALID_REQUEST
    assert incremental(odradek_broker, "", ("consumer.session.timeout.ms", 0, "50000")
                       ).error_code == ErrorCode.INVALID_REQUEST


def test_incremental_set_describe_and_delete(odradek_broker):
    group = f"cfg-{uuid.uuid4().hex[:6]}"
    result = incremental(odradek_broker, group, ("consumer.session.timeout.ms", 0, "50000"),
                         ("consumer.heartbeat.interval.ms", 0, "6000"))
    assert result.error_code == ErrorCode.NONE, result.error_message
    def described_with_override():
        described = describe(odradek_broker, group)
        return described if values(described)["consumer.session.timeout.ms"][0] == "50000" \
            else None

    described = wait_for(described_with_override)
    assert described, "the ConfigRecord never reached the broker's image"
    by_name = {c.name: c for c in described.configs}
    session = by_name["consumer.session.timeout.ms"]
    assert session.config_source == GROUP_CONFIG_SOURCE
    assert [(s.name, s.value, s.source) for s in session.synonyms] == [
        ("consumer.session.timeout.ms", "50000", GROUP_CONFIG_SOURCE)]
    assert values(described)["consumer.heartbeat.interval.ms"] == ("6000", GROUP_CONFIG_SOURCE)
    assert values(described)["share.session.timeout.ms"] == ("45000", DEFAULT_CONFIG_SOURCE)
    # DELETE goes back to the broker's value.
    assert incremental(odradek_broker, group, ("consumer.session.timeout.ms", 1, None)
                       ).error_code == ErrorCode.NONE
    assert wait_for(lambda: values(describe(odradek_broker, group))[
        "consumer.session.timeout.ms"] == ("45000", DEFAULT_CONFIG_SOURCE))


@pytest.mark.parametrize("ops, message", [
    ([("consumer.session.timeout.ms", 0, "30000")],
     ("consumer.session.timeout.ms must be greater than or equal to "
     "group.consumer.min.session.timeout.ms")),
    ([("consumer.session.timeout.ms", 0, "70000")],
     ("consumer.session.timeout.ms must be less than or equal to "
     "group.consumer.max.session.timeout.ms")),
    ([("consumer.heartbeat.interval.ms", 0, "4000")],
     ("consumer.heartbeat.interval.ms must be greater than or equal to "
     "group.consumer.min.heartbeat.interval.ms")),
    ([("consumer.heartbeat.interval.ms", 0, "16000")],
     ("consumer.heartbeat.interval.ms must be less than or equal to "
     "group.consumer.max.heartbeat.interval.ms")),
    ([("share.record.lock.duration.ms", 0, "10000")],
     ("share.record.lock.duration.ms must be greater than or equal to "
     "group.share.min.record.lock.duration.ms")),
    ([("share.auto.offset.reset", 0, "none")],
     ("Invalid value none for configuration share.auto.offset.reset: String must be one of: "
     "latest, earliest")),
    ([("no.such.config", 0, "1")], "Unknown group config name: no.such.config"),
    ([("consumer.session.timeout.ms", 0, "abc")], None),
    ([("consumer.session.timeout.ms", 2, "1")],
     "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."),
])
def test_invalid_group_configs_are_refused_and_nothing_changes(odradek_broker, ops, message):
    group = f"bad-{uuid.uuid4().hex[:6]}"
    result = incremental(odradek_broker, group, *ops)
    assert result.error_code == ErrorCode.INVALID_CONFIG
    if message is not None:
        assert result.error_message == message
    assert {c.name: c.value for c in describe(odradek_broker, group).configs} == \
        KAFKA40_GROUP_CONFIGS


def test_validate_only_and_legacy_alter_configs(odradek_broker):
    group = f"legacy-{uuid.uuid4().hex[:6]}"
    checked = incremental(odradek_broker, group, ("consumer.session.timeout.ms", 0, "55000"),
                          validate_only=True)
    assert checked.error_code == ErrorCode.NONE
    assert values(describe(odradek_broker, group))["consumer.session.timeout.ms"] == (
        "45000", DEFAULT_CONFIG_SOURCE)
    # AlterConfigs replaces the group's whole set.
    assert legacy_alter(odradek_broker, group, {"consumer.session.timeout.ms": "55000",
                                                "share.auto.offset.reset": "earliest"}
                        ).error_code == ErrorCode.NONE
    assert wait_for(lambda: values(describe(odradek_broker, group))[
        "share.auto.offset.reset"] == ("earliest", GROUP_CONFIG_SOURCE))
    assert legacy_alter(odradek_broker, group, {"consumer.heartbeat.interval.ms": "7000"}
                        ).error_code == ErrorCode.NONE
    assert wait_for(lambda: values(describe(odradek_broker, group))[
        "consumer.heartbeat.interval.ms"] == ("7000", GROUP_CONFIG_SOURCE))
    now = values(describe(odradek_broker, group))
    assert now["consumer.session.timeout.ms"] == ("45000", DEFAULT_CONFIG_SOURCE)
    assert now["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG_SOURCE)


def test_consumer_group_heartbeat_gets_the_groups_interval(odradek_broker):
    group = f"hb-{uuid.uuid4().hex[:6]}"
    assert incremental(odradek_broker, group, ("consumer.heartbeat.interval.ms", 0, "7000")
                       ).error_code == ErrorCode.NONE
    wait_for(lambda: values(describe(odradek_broker, group))[
        "consumer.heartbeat.interval.ms"][0] == "7000")

    def join():
        with RawClient(odradek_broker.host, odradek_broker.port) as client:
            found = client.call(10, 4, m.FindCoordinatorRequest(key_type=0,
                                                                coordinator_keys=[group]))
            if found.coordinators[0].error_code != ErrorCode.NONE:
                return None
            answer = client.call(68, 0, m.ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=uuid.uuid4().hex, member_epoch=0,
                rebalance_timeout_ms=30000, subscribed_topic_names=["t"],
                topic_partitions=[]))
            return answer if answer.error_code == ErrorCode.NONE else None

    joined = wait_for(join, timeout=20)
    assert joined is not None, "the coordinator never answered"
    assert joined.heartbeat_interval_ms == 7000
