"""DescribeConfigs rendering: sources, synonyms, dynamic overrides, sensitive values."""

from __future__ import annotations

from kafka40_config_lists import MINIMAL_BROKER_PROPS

from odradek.config.describe import (
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    broker_config_entries,
    describe_static_broker_configs,
    topic_config_entries,
)
from odradek.config.types import ConfigType
from odradek.server.config import KafkaConfig
from odradek.storage.config import LogConfig


def broker(**props: str) -> KafkaConfig:
    return KafkaConfig({**MINIMAL_BROKER_PROPS, **props})


def by_name(entries: list[ConfigEntry]) -> dict[str, ConfigEntry]:
    return {entry.name: entry for entry in entries}


def test_topic_entry_sources_and_synonyms():
    config = broker(**{"log.retention.hours": "24"})
    entries = by_name(topic_config_entries(config, config.log_config(),
                                           {"segment.bytes": "2048"}))
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source) == ("2048", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert segment.synonyms == (
        ConfigSynonym("segment.bytes", "2048", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG))
    retention = entries["retention.ms"]
    assert (retention.value, retention.source) == ("86400000", ConfigSource.STATIC_BROKER_CONFIG)
    assert retention.synonyms == (
        ConfigSynonym("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG))
    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source, policy.config_type) == (
        "delete", ConfigSource.DEFAULT_CONFIG, ConfigType.LIST)
    assert policy.is_default and not policy.is_read_only and not policy.is_sensitive
    assert policy.documentation


def test_topic_config_without_broker_synonym_has_no_synonyms():
    """Kafka's ConfigHelper: no server default property, no synonyms; the source is
    DEFAULT_CONFIG unless the topic sets it."""
    config = broker()
    entries = by_name(topic_config_entries(config, config.log_config(),
                                           {"leader.replication.throttled.replicas": "0:1"}))
    remote = entries["remote.storage.enable"]
    assert (remote.value, remote.source, remote.synonyms) == (
        "false", ConfigSource.DEFAULT_CONFIG, ())
    throttled = entries["leader.replication.throttled.replicas"]
    assert (throttled.value, throttled.source, throttled.synonyms) == (
        "0:1", ConfigSource.DYNAMIC_TOPIC_CONFIG,
        (ConfigSynonym("leader.replication.throttled.replicas", "0:1",
                       ConfigSource.DYNAMIC_TOPIC_CONFIG),))


def test_static_broker_entries():
    config = broker(**{"log.retention.minutes": "30", "ssl.key.password": "secret"})
    entries = by_name(describe_static_broker_configs(config.originals, config.values()))
    minutes = entries["log.retention.minutes"]
    assert (minutes.value, minutes.source, minutes.is_read_only) == (
        "30", ConfigSource.STATIC_BROKER_CONFIG, True)
    assert minutes.synonyms == (
        ConfigSynonym("log.retention.minutes", "30", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG))
    password = entries["ssl.key.password"]
    assert password.is_sensitive and password.value is None
    assert password.synonyms == (
        ConfigSynonym("ssl.key.password", None, ConfigSource.STATIC_BROKER_CONFIG),)
    threads = entries["num.io.threads"]
    assert (threads.value, threads.source, threads.is_read_only) == (
        "8", ConfigSource.DEFAULT_CONFIG, False)


def test_dynamic_broker_values_win():
    config = broker()
    per_broker = by_name(broker_config_entries(config, {}, {"num.io.threads": "4"}))
    assert (per_broker["num.io.threads"].value, per_broker["num.io.threads"].source) == (
        "4", ConfigSource.DYNAMIC_BROKER_CONFIG)
    cluster = by_name(broker_config_entries(config, {"num.io.threads": "4"}, None))
    assert cluster["num.io.threads"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert cluster["num.network.threads"].source == ConfigSource.DEFAULT_CONFIG


def test_a_broker_inherits_the_cluster_wide_default_with_its_source_and_synonyms():
    """Kafka: per broker, the source is the highest synonym (own dynamic > cluster-wide
    dynamic default > static > default)."""
    config = broker()
    inherited = by_name(broker_config_entries(config, {"num.io.threads": "4"}, {}))
    threads = inherited["num.io.threads"]
    assert (threads.value, threads.source) == ("4", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert threads.synonyms == (
        ConfigSynonym("num.io.threads", "4", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ConfigSynonym("num.io.threads", "8", ConfigSource.DEFAULT_CONFIG))
    both = by_name(broker_config_entries(config, {"num.io.threads": "4"},
                                         {"num.io.threads": "6"}))["num.io.threads"]
    assert (both.value, both.source) == ("6", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [s.source for s in both.synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG]


def test_sources_carry_kafkas_admin_names_and_ids():
    assert ConfigSource.DYNAMIC_TOPIC_CONFIG == 1
    assert ConfigSource.DEFAULT_CONFIG == 5
    assert ConfigSource.from_code(42) == ConfigSource.UNKNOWN


def test_log_config_defaults_come_from_the_topic_table():
    assert LogConfig().get("segment.bytes") == 1073741824
    assert LogConfig().cleanup_policy == ["delete"]
    assert LogConfig().cleanup_policy is not LogConfig().cleanup_policy  # no shared list
