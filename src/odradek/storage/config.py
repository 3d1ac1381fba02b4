"""Topic-level log configuration, layered on broker-level defaults like Kafka's LogConfig.

The definitions (name, type, default, validator, broker synonyms, doc) are the shared topic
table `odradek.config.topic.TOPIC_CONFIGS`; `LogConfig` is the typed view the storage engine
reads, with its defaults taken from that table.

Precedence (lowest to highest): Kafka's default < broker property (e.g. `log.segment.bytes`)
< topic override (e.g. `segment.bytes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.config.definition import ConfigDef
from odradek.config.topic import (
    BROKER_DEFAULTS,
    BROKER_SYNONYMS,
    BROKER_UNIT_SCALE,
    COMPRESSION_TYPES,
    LIST_TOPIC_CONFIGS,
    TOPIC_CONFIGS,
    parse_topic_props,
    validate_topic_props,
)
from odradek.config.types import INT_MAX, LONG_MAX, ConfigType, format_value, parse_value

__all__ = [
    "BROKER_DEFAULTS",
    "BROKER_SYNONYMS",
    "BROKER_UNIT_SCALE",
    "COMPRESSION_TYPES",
    "INT_MAX",
    "LIST_TOPIC_CONFIGS",
    "LONG_MAX",
    "TOPIC_CONFIGS",
    "ConfigDef",
    "ConfigType",
    "LogConfig",
    "format_value",
    "validate_topic_props",
]


def _default(name: str) -> Any:
    """The dataclass default of a LogConfig field: the topic table's default of `name`."""
    default = TOPIC_CONFIGS[name].default
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default))
    return default


@dataclass(frozen=True)
class LogConfig:
    """Typed topic configuration. Build with `LogConfig.from_props` / `from_broker_props`."""

    cleanup_policy: list[str] = _default("cleanup.policy")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_type: str = _default("compression.type")
    compression_zstd_level: int = _default("compression.zstd.level")
    delete_retention_ms: int = _default("delete.retention.ms")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    follower_replication_throttled_replicas: list[str] = _default(
        "follower.replication.throttled.replicas")
    index_interval_bytes: int = _default("index.interval.bytes")
    leader_replication_throttled_replicas: list[str] = _default(
        "leader.replication.throttled.replicas")
    local_retention_bytes: int = _default("local.retention.bytes")
    local_retention_ms: int = _default("local.retention.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    max_message_bytes: int = _default("max.message.bytes")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    min_insync_replicas: int = _default("min.insync.replicas")
    preallocate: bool = _default("preallocate")
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")
    remote_storage_enable: bool = _default("remote.storage.enable")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    segment_bytes: int = _default("segment.bytes")
    segment_index_bytes: int = _default("segment.index.bytes")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_ms: int = _default("segment.ms")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    # Names set explicitly at topic level (DescribeConfigs source DYNAMIC_TOPIC_CONFIG).
    overrides: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for config in TOPIC_CONFIGS.values():
            config.validate(getattr(self, config.attribute))

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None,
                   defaults: LogConfig | None = None) -> LogConfig:
        """Topic overrides (Kafka topic-level names) layered on `defaults` (broker defaults).

        Names that are not topic configs are ignored, as Kafka's LogConfig ignores them: a
        topic's stored configs may hold keys an older version had (e.g.
        `message.downconversion.enable`, gone in Kafka 4.0). New configs are checked by
        `validate_topic_props` before they are stored."""
        props = {name: value for name, value in (props or {}).items() if name in TOPIC_CONFIGS}
        base = defaults if defaults is not None else cls()
        values = {TOPIC_CONFIGS[name].attribute: value
                  for name, value in parse_topic_props(props).items()}
        return dataclasses.replace(base, overrides=base.overrides | frozenset(props), **values)

    @classmethod
    def from_broker_props(cls, broker_props: Mapping[str, Any]) -> LogConfig:
        """Topic defaults from broker-level properties (e.g. server.properties).

        Honours Kafka's precedence for unit variants: `log.retention.ms` over
        `log.retention.minutes` over `log.retention.hours`, `log.roll.ms` over `log.roll.hours`.
        Unknown names are ignored (a broker config holds much more than log settings).
        """
        values: dict[str, Any] = {}
        for config in TOPIC_CONFIGS.values():
            for synonym in config.broker_synonyms:
                if synonym in broker_props and broker_props[synonym] is not None:
                    raw = broker_props[synonym]
                    if synonym in BROKER_UNIT_SCALE:
                        scale = BROKER_UNIT_SCALE[synonym]
                        raw = parse_value(synonym, ConfigType.LONG, raw) * scale
                    values[config.attribute] = config.parse(raw)
                    break
        return cls(**values)

    def get(self, name: str) -> Any:
        return getattr(self, TOPIC_CONFIGS[name].attribute)

    def to_props(self) -> dict[str, str]:
        """All topic configs as Kafka-formatted strings."""
        return {name: format_value(config.type, getattr(self, config.attribute))
                for name, config in TOPIC_CONFIGS.items()}

    def override_props(self) -> dict[str, str]:
        """Only the topic-level overrides, as strings (what a topic's config record stores)."""
        return {name: value for name, value in self.to_props().items() if name in self.overrides}

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def max_index_entries(self, entry_size: int) -> int:
        return self.segment_index_bytes // entry_size
