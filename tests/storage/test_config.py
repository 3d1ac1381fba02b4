from __future__ import annotations

import pytest

from odradek.storage.config import (
    BROKER_SYNONYMS,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigType,
    LogConfig,
    validate_topic_props,
)


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.segment_index_bytes == 10485760
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.flush_messages == LONG_MAX
    assert config.flush_ms == LONG_MAX
    assert config.max_message_bytes == 1048588
    assert config.message_timestamp_type == "CreateTime"
    assert config.file_delete_delay_ms == 60000
    assert config.cleanup_policy == ["delete"]
    assert config.min_insync_replicas == 1
    assert config.min_cleanable_dirty_ratio == 0.5
    assert config.compression_type == "producer"


def test_table_covers_every_field_and_types_match() -> None:
    fields = set(LogConfig.__dataclass_fields__) - {"overrides"}
    assert {c.attribute for c in TOPIC_CONFIGS.values()} == fields
    for config in TOPIC_CONFIGS.values():
        assert getattr(LogConfig(), config.attribute) == config.default
        assert config.doc
        assert isinstance(config.type, ConfigType)


def test_topic_overrides_parse_strings_and_remember_names() -> None:
    config = LogConfig.from_props({"segment.bytes": "1024", "cleanup.policy": "compact,delete",
                                   "preallocate": "true", "min.cleanable.dirty.ratio": "0.2"})
    assert config.segment_bytes == 1024
    assert config.cleanup_policy == ["compact", "delete"]
    assert config.compact and config.delete
    assert config.preallocate is True
    assert config.min_cleanable_dirty_ratio == 0.2
    assert config.overrides == {"segment.bytes", "cleanup.policy", "preallocate",
                                "min.cleanable.dirty.ratio"}
    assert config.override_props()["segment.bytes"] == "1024"
    assert config.to_props()["retention.ms"] == "604800000"
    assert config.to_props()["cleanup.policy"] == "compact,delete"


@pytest.mark.parametrize(("props", "message"), [
    ({"segment.bytes": "10"}, "segment.bytes"),
    ({"segment.bytes": "abc"}, "Not a number"),
    ({"retention.ms": "-2"}, "at least -1"),
    ({"cleanup.policy": "forever"}, "String must be one of"),
    ({"message.timestamp.type": "Now"}, "String must be one of"),
    ({"preallocate": "yes"}, "true or false"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "no more than 1"),
    ({"no.such.config": "1"}, "Unknown topic config"),
    ({"segment.bytes": str(2**31)}, "Not a number of type INT"),
])
def test_invalid_values_raise_clear_errors(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_topic_props(props)


def test_broker_properties_become_topic_defaults() -> None:
    broker = LogConfig.from_broker_props({
        "log.segment.bytes": "2048", "log.retention.hours": "1", "log.retention.bytes": "999",
        "log.index.size.max.bytes": "4096", "log.index.interval.bytes": "100",
        "log.flush.interval.messages": "5", "log.cleanup.policy": "compact",
        "message.max.bytes": "5000", "log.message.timestamp.type": "LogAppendTime",
        "log.segment.delete.delay.ms": "10", "log.roll.hours": "2",
        "broker.id": "1",  # unrelated broker settings are ignored
    })
    assert broker.segment_bytes == 2048
    assert broker.retention_ms == 3_600_000
    assert broker.retention_bytes == 999
    assert broker.segment_index_bytes == 4096
    assert broker.index_interval_bytes == 100
    assert broker.flush_messages == 5
    assert broker.cleanup_policy == ["compact"]
    assert broker.max_message_bytes == 5000
    assert broker.log_append_time
    assert broker.file_delete_delay_ms == 10
    assert broker.segment_ms == 7_200_000
    assert broker.overrides == frozenset()


def test_retention_unit_precedence_ms_over_minutes_over_hours() -> None:
    both = {"log.retention.hours": "1", "log.retention.minutes": "2"}
    assert LogConfig.from_broker_props(both).retention_ms == 120_000
    assert LogConfig.from_broker_props({**both, "log.retention.ms": "5"}).retention_ms == 5
    assert LogConfig.from_broker_props({"log.roll.ms": "7", "log.roll.hours": "1"}).segment_ms == 7
    assert LogConfig.from_broker_props({"log.flush.scheduler.interval.ms": "9"}).flush_ms == 9


def test_topic_overrides_layer_on_broker_defaults() -> None:
    broker = LogConfig.from_broker_props({"log.segment.bytes": "2048", "log.retention.ms": "10"})
    topic = LogConfig.from_props({"retention.ms": "20"}, defaults=broker)
    assert topic.segment_bytes == 2048  # from the broker
    assert topic.retention_ms == 20  # topic wins
    assert topic.overrides == {"retention.ms"}


def test_broker_synonyms_map_back_to_topic_configs() -> None:
    assert BROKER_SYNONYMS["log.segment.bytes"].name == "segment.bytes"
    assert BROKER_SYNONYMS["log.retention.minutes"].name == "retention.ms"
    assert BROKER_SYNONYMS["message.max.bytes"].name == "max.message.bytes"
    assert TOPIC_CONFIGS["retention.ms"].broker_synonyms[0] == "log.retention.ms"
