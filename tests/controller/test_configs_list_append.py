"""IncrementalAlterConfigs APPEND and SUBTRACT on every list config Kafka defines for topics and
brokers: they start from the resource's value, else the config's default, as Kafka's
ConfigurationControlManager does (getParts of the current value or the schema default)."""

from __future__ import annotations

import pytest
from test_controller_state import cluster, controller, create

from odradek.config import ConfigType, format_value
from odradek.config.broker import BROKER_CONFIGS
from odradek.config.topic import TOPIC_CONFIGS
from odradek.controller.controller import OP_APPEND, OP_SUBTRACT, TopicSpec, replay_all
from odradek.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC, MetadataImage
from odradek.protocol.errors import ErrorCode

TOPIC_LISTS = sorted(n for n, d in TOPIC_CONFIGS.items() if d.type == ConfigType.LIST)
BROKER_LISTS = sorted(n for n, d in BROKER_CONFIGS.items() if d.type == ConfigType.LIST)
# A value each list config accepts besides its default (validators restrict some).
NEW_ITEM = {"cleanup.policy": "compact", "log.cleanup.policy": "compact",
            "process.roles": "controller", "group.coordinator.rebalance.protocols": "consumer",
            "ssl.enabled.protocols": "TLSv1.1", "sasl.enabled.mechanisms": "PLAIN"}


def _image() -> MetadataImage:
    image, _ = create(cluster(1), TopicSpec("t"))
    return image


def _default(definition) -> list[str]:
    return [] if definition.default is None else definition.parsed_default()


def _alter(image, resource_type, name, key, op, value):
    result, records = controller().alter_configs(image, resource_type, name, [(key, op, value)],
                                             incremental=True)
    assert result.error == ErrorCode.NONE, result.message
    return replay_all(image, records).configs.get((resource_type, name), {}).get(key)


def test_list_configs_exist():
    assert "cleanup.policy" in TOPIC_LISTS
    assert {"log.cleanup.policy", "ssl.enabled.protocols", "sasl.enabled.mechanisms",
            "metric.reporters"} <= set(BROKER_LISTS)


@pytest.mark.parametrize("key", TOPIC_LISTS)
def test_topic_list_config_append_and_subtract_start_from_the_default(key):
    image = _image()
    definition = TOPIC_CONFIGS[key]
    default = _default(definition)
    item = NEW_ITEM.get(key, "0:1")
    appended = _alter(image, RESOURCE_TOPIC, "t", key, OP_APPEND, item)
    assert appended == format_value(ConfigType.LIST, [*default, item])
    if default:
        subtracted = _alter(image, RESOURCE_TOPIC, "t", key, OP_SUBTRACT, default[0])
        assert subtracted == format_value(ConfigType.LIST, default[1:])


@pytest.mark.parametrize("key", BROKER_LISTS)
def test_broker_list_config_append_and_subtract_start_from_the_default(key):
    image = _image()
    definition = BROKER_CONFIGS[key]
    default = _default(definition)
    item = NEW_ITEM.get(key, "x.y.Z")
    for resource_name in ("", "1"):  # cluster default and one broker
        appended = _alter(image, RESOURCE_BROKER, resource_name, key, OP_APPEND, item)
        expected = default if item in default else [*default, item]
        assert appended == format_value(ConfigType.LIST, expected)
        if default:
            subtracted = _alter(image, RESOURCE_BROKER, resource_name, key, OP_SUBTRACT,
                                default[0])
            assert subtracted == format_value(ConfigType.LIST, default[1:])


CLIENT_METRICS_LISTS = {"metrics": ("org.apache.kafka.producer.", "org.apache.kafka.consumer."),
                        "match": ("client_id=perf-.*", "client_software_name=confluent.*")}


def test_every_list_config_of_other_resources_is_covered():
    """Groups have no list configs; client metrics subscriptions have two (Kafka 4.0)."""
    from odradek.config.client_metrics import CLIENT_METRICS_CONFIGS
    from odradek.config.group import GROUP_CONFIGS
    assert [n for n, d in GROUP_CONFIGS.items() if d.type == ConfigType.LIST] == []
    assert sorted(n for n, d in CLIENT_METRICS_CONFIGS.items()
                  if d.type == ConfigType.LIST) == sorted(CLIENT_METRICS_LISTS)


@pytest.mark.parametrize("key", sorted(CLIENT_METRICS_LISTS))
def test_client_metrics_list_config_append_and_subtract(key):
    """Client metrics subscriptions (resource type 16): the default is the empty list."""
    first, second = CLIENT_METRICS_LISTS[key]
    image = _image()
    result, records = controller().alter_configs(image, 16, "sub", [(key, OP_APPEND, first)],
                                                 incremental=True)
    assert result.error == ErrorCode.NONE, result.message
    image = replay_all(image, records)
    assert image.configs[(16, "sub")][key] == first
    assert _alter(image, 16, "sub", key, OP_APPEND, second) == f"{first},{second}"
    assert _alter(image, 16, "sub", key, OP_SUBTRACT, first) == ""
