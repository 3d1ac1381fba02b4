"""Odradek's topic config table against Kafka 4.0's (kafka40_topic_configs.txt): the same
names, types, defaults, valid values and server default properties; a real broker's
DescribeConfigs of a topic returns exactly these names with Kafka's defaults, none read-only;
the configs Kafka 4.0 removed are refused."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError as ClientError
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka40_config_lists import MINIMAL_BROKER_PROPS, kafka40_topic_configs

from odradek.config.topic import TOPIC_CONFIGS, validate_topic_props
from odradek.config.types import ConfigError, ConfigType, format_value
from odradek.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    compress,
    iter_batches,
    records_section,
)
from odradek.server.config import KafkaConfig
from odradek.storage.config import LogConfig

REMOVED_IN_KAFKA40 = ("message.downconversion.enable", "message.timestamp.difference.max.ms",
                      "message.format.version")


def accepts(name: str, value: Any) -> bool:
    try:
        TOPIC_CONFIGS[name].parse(value)
    except ConfigError:
        return False
    return True


def test_the_list_is_kafka_4_0s():
    rows = kafka40_topic_configs()
    assert len(rows) == 33
    assert not set(REMOVED_IN_KAFKA40) & set(rows)


def test_names_types_defaults_and_server_defaults_are_kafka40s():
    rows = kafka40_topic_configs()
    assert sorted(TOPIC_CONFIGS) == sorted(rows)
    ours = {name: {"type": d.type.name.lower(), "default": format_value(d.type, d.default),
                   "server_default": d.broker_synonyms[0] if d.broker_synonyms else "null"}
            for name, d in TOPIC_CONFIGS.items()}
    theirs = {name: {key: row[key] for key in ("type", "default", "server_default")}
              for name, row in rows.items()}
    assert ours == theirs


def test_valid_values_are_kafka40s():
    """Each documented range or set is checked at its bounds."""
    checked = set()
    for name, row in kafka40_topic_configs().items():
        valid = row["valid"]
        number = float if TOPIC_CONFIGS[name].type == ConfigType.DOUBLE else int
        if not valid:
            assert TOPIC_CONFIGS[name].validator is None, name
        elif match := re.fullmatch(r"\[(-?[\d.]+),\.\.\.,(-?[\d.]+)\]( or (-?\d+))?", valid):
            low, high = number(match[1]), number(match[2])
            assert accepts(name, low) and accepts(name, high), name
            assert not accepts(name, low - 1) and not accepts(name, high + 1), name
            if match[4]:
                assert accepts(name, int(match[4])), name
        elif match := re.fullmatch(r"\[(-?\d+),\.\.\.\]", valid):
            assert accepts(name, number(match[1])) and not accepts(name, number(match[1]) - 1)
        elif valid.startswith("[partitionId]"):
            assert accepts(name, "*") and accepts(name, "0:1, 1:2") and accepts(name, "")
            assert not accepts(name, "0") and not accepts(name, "*,0:1")
        else:
            for item in valid.strip("[]").split(", "):
                assert accepts(name, item), (name, item)
            assert not accepts(name, "bogus"), name
        checked.add(name)
    assert len(checked) == 33


def test_error_texts_are_kafkas():
    cases = {
        ("segment.bytes", "13"): "Invalid value 13 for configuration segment.bytes: Value must "
                                 "be at least 14",
        ("compression.gzip.level", "0"): "Invalid value 0 for configuration "
                                         "compression.gzip.level: Value must be between 1 and 9 "
                                         "or equal to -1",
        ("leader.replication.throttled.replicas", "0,x"):
            "Invalid value [0, x] for configuration leader.replication.throttled.replicas: "
            "leader.replication.throttled.replicas must be the literal '*' or a list of "
            "replicas in the following format: [partitionId]:[brokerId],[partitionId]:"
            "[brokerId],...",
    }
    for (name, value), text in cases.items():
        with pytest.raises(ConfigError) as raised:
            validate_topic_props({name: value})
        assert str(raised.value) == text


def test_broker_log_segment_bytes_is_at_least_one_mebibyte():
    """Kafka 4.0 narrowed the broker key (KIP-1030), not the topic config."""
    with pytest.raises(ValueError) as raised:
        KafkaConfig({**MINIMAL_BROKER_PROPS, "log.segment.bytes": "1048575"})
    assert str(raised.value) == ("Invalid value 1048575 for configuration log.segment.bytes: "
                                 "Value must be at least 1048576")
    assert KafkaConfig({**MINIMAL_BROKER_PROPS, "log.segment.bytes": "1048576"}).get("log.segment.bytes") \
        == 1048576
    assert LogConfig.from_props({"segment.bytes": "14"}).segment_bytes == 14


def test_removed_configs_are_refused_and_ignored_when_stored():
    for name in REMOVED_IN_KAFKA40:
        with pytest.raises(ConfigError, match=f"Unknown topic config name: {name}"):
            validate_topic_props({name: "1"})
    # A topic's stored configs from an older version still load (Kafka's LogConfig ignores
    # names it does not define).
    stored = LogConfig.from_props({"message.downconversion.enable": "false",
                                   "retention.ms": "1000"})
    assert stored.retention_ms == 1000 and stored.overrides == frozenset({"retention.ms"})


def test_kafka40_defaults_are_the_broker_defaults():
    config = KafkaConfig(MINIMAL_BROKER_PROPS)
    assert config.get("log.message.timestamp.after.max.ms") == 3600000
    assert config.get("compression.zstd.level") == 3
    defaults = config.log_config()
    assert (defaults.message_timestamp_after_max_ms, defaults.compression_gzip_level,
            defaults.remote_log_copy_disable) == (3600000, -1, False)
    assert LogConfig.from_broker_props({"compression.lz4.level": "12"}).compression_lz4_level \
        == 12


# --- a real broker ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(odradek_broker):
    return AdminClient({"bootstrap.servers": odradek_broker.bootstrap})


def create_topic(admin: AdminClient, configs: dict[str, str] | None = None) -> str:
    name = f"topic-configs-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(name, 1, 1, config=configs or {})],
                                  request_timeout=30)
    futures[name].result(timeout=30)
    return name


def describe_topic(admin: AdminClient, name: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=30)


def test_describe_configs_of_a_topic_is_kafka40s(admin):
    entries = describe_topic(admin, create_topic(admin))
    rows = kafka40_topic_configs()
    assert sorted(entries) == sorted(rows)
    assert {name: e.value for name, e in entries.items()} == \
        {name: row["default"] for name, row in rows.items()}
    assert [name for name, e in entries.items() if e.is_read_only or e.is_sensitive] == []
    assert {e.source for e in entries.values()} == {ConfigSource.DEFAULT_CONFIG.value}


def test_new_configs_are_set_per_topic_and_removed_ones_refused(admin):
    overrides = {"compression.zstd.level": "10", "remote.log.copy.disable": "true",
                 "leader.replication.throttled.replicas": "*"}
    entries = describe_topic(admin, create_topic(admin, overrides))
    assert {name: entries[name].value for name in overrides} == overrides
    assert {entries[name].source for name in overrides} == \
        {ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    for removed in ("message.downconversion.enable", "message.timestamp.difference.max.ms"):
        with pytest.raises(KafkaException) as raised:
            create_topic(admin, {removed: "1"})
        assert raised.value.args[0].code() == ClientError.INVALID_CONFIG


def test_the_topics_codec_and_level_are_applied_to_a_produced_batch(admin, odradek_broker):
    """A librdkafka producer sends uncompressed batches to a topic with compression.type zstd
    at level 19: the broker's log holds them in zstd at that level."""
    topic = create_topic(admin, {"compression.type": "zstd", "compression.zstd.level": "19"})
    with Producer({"bootstrap.servers": odradek_broker.bootstrap, "linger.ms": 50}) as producer:
        for i in range(200):
            producer.produce(topic, b"a fairly repetitive value %d " % (i % 7) * 8, partition=0)
        assert producer.flush(30) == 0
    data = (odradek_broker.data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    batches = list(iter_batches(data))
    assert batches and sum(header.records_count for _, header in batches) == 200
    for position, header in batches:
        assert header.compression == Compression.ZSTD
        raw = records_section(data, position, header)
        assert data[position + BATCH_HEADER_SIZE:position + header.size] == compress(Compression.ZSTD, raw, 19)
