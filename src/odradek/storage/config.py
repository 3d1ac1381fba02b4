"""Topic-level log configuration, layered on broker-level defaults like Kafka's LogConfig.

One table (`TOPIC_CONFIGS`) holds every topic config: Kafka's name, type, default, validator,
broker-level synonym and doc. `LogConfig` is the typed view the storage engine reads; the broker's
DescribeConfigs / IncrementalAlterConfigs handlers can reuse the table for types, synonyms and
documentation.

Precedence (lowest to highest): Kafka's default < broker property (e.g. `log.segment.bytes`)
< topic override (e.g. `segment.bytes`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigType(enum.IntEnum):
    """Config value types, numbered like DescribeConfigs' `ConfigType` field (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


Validator = Callable[[str, Any], None]


def at_least(minimum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise ValueError(f"Invalid value {value} for configuration {name}: "
                             f"Value must be at least {minimum}")
    return check


def between(low: float, high: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"Invalid value {value} for configuration {name}: "
                             f"Value must be between {low} and {high}")
    return check


def one_of(*allowed: str) -> Validator:
    def check(name: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item not in allowed:
                raise ValueError(f"Invalid value {item} for configuration {name}: "
                                 f"String must be one of: {', '.join(allowed)}")
    return check


def _no_check(name: str, value: Any) -> None:
    return None


@dataclass(frozen=True)
class ConfigDef:
    """One topic-level config: everything DescribeConfigs needs to describe it."""

    name: str
    type: ConfigType
    default: Any
    validator: Validator
    broker_synonyms: tuple[str, ...]  # broker-level names, highest precedence first
    doc: str
    attribute: str  # field name on LogConfig

    def parse(self, value: Any) -> Any:
        """Converts a string (or an already typed value) to this config's type and validates."""
        parsed = parse_value(self.name, self.type, value)
        self.validator(self.name, parsed)
        return parsed


def parse_value(name: str, config_type: ConfigType, value: Any) -> Any:
    try:
        if config_type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            if isinstance(value, bool):
                raise TypeError
            parsed = int(value.strip()) if isinstance(value, str) else int(value)
            limit = INT_MAX if config_type == ConfigType.INT else LONG_MAX
            if not -limit - 1 <= parsed <= limit:
                raise ValueError(f"Invalid value {value} for configuration {name}: "
                                 f"Not a number of type {config_type.name}")
            return parsed
        if config_type == ConfigType.DOUBLE:
            return float(value.strip()) if isinstance(value, str) else float(value)
        if config_type == ConfigType.BOOLEAN:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(f"Invalid value {value} for configuration {name}: "
                                 "Expected value to be either true or false")
            return text == "true"
        if config_type == ConfigType.LIST:
            if isinstance(value, (list, tuple)):
                return [str(item).strip() for item in value]
            text = str(value).strip()
            return [item.strip() for item in text.split(",")] if text else []
        return str(value).strip()
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"Invalid value {value!r} for configuration {name}: "
                         f"Expected a value of type {config_type.name}") from exc
    except ValueError as exc:
        if str(exc).startswith("Invalid value"):
            raise
        raise ValueError(f"Invalid value {value!r} for configuration {name}: "
                         f"Not a number of type {config_type.name}") from exc


def format_value(config_type: ConfigType, value: Any) -> str:
    """Formats a typed value the way Kafka shows it in DescribeConfigs."""
    if config_type == ConfigType.BOOLEAN:
        return "true" if value else "false"
    if config_type == ConfigType.LIST:
        return ",".join(value)
    return str(value)


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_I, _L, _D, _B, _S, _LST = (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE,
                            ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST)

# (name, type, default, validator, broker synonyms (highest precedence first), doc)
_TABLE: list[tuple[str, ConfigType, Any, Validator, tuple[str, ...], str]] = [
    ("cleanup.policy", _LST, ["delete"], one_of("compact", "delete"), ("log.cleanup.policy",),
     "Retention policy for old segments: 'delete' and/or 'compact'."),
    ("compression.type", _S, "producer", one_of(*COMPRESSION_TYPES), ("compression.type",),
     "Final compression type for the topic; 'producer' keeps the producer's codec."),
    ("delete.retention.ms", _L, 86400000, at_least(0), ("log.cleaner.delete.retention.ms",),
     "How long delete tombstones are retained for compacted topics."),
    ("file.delete.delay.ms", _L, 60000, at_least(0), ("log.segment.delete.delay.ms",),
     "Time to wait before deleting a file from the filesystem."),
    ("flush.messages", _L, LONG_MAX, at_least(1), ("log.flush.interval.messages",),
     "Number of messages appended before the log is fsynced."),
    ("flush.ms", _L, LONG_MAX, at_least(0),
     ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
     "Maximum time in ms before the log is fsynced."),
    ("follower.replication.throttled.replicas", _LST, [], _no_check,
     ("follower.replication.throttled.replicas",),
     "Replicas whose log replication should be throttled on the follower side."),
    ("index.interval.bytes", _I, 4096, at_least(0), ("log.index.interval.bytes",),
     "How frequently (in log bytes) an entry is added to the offset index."),
    ("leader.replication.throttled.replicas", _LST, [], _no_check,
     ("leader.replication.throttled.replicas",),
     "Replicas whose log replication should be throttled on the leader side."),
    ("local.retention.bytes", _L, -2, at_least(-2), ("log.local.retention.bytes",),
     "Local log size to retain before deleting (tiered storage; -2 = retention.bytes)."),
    ("local.retention.ms", _L, -2, at_least(-2), ("log.local.retention.ms",),
     "Local log age to retain before deleting (tiered storage; -2 = retention.ms)."),
    ("max.compaction.lag.ms", _L, LONG_MAX, at_least(1), ("log.cleaner.max.compaction.lag.ms",),
     "Maximum time a message remains ineligible for compaction."),
    ("max.message.bytes", _I, 1048588, at_least(0), ("message.max.bytes",),
     "Largest record batch size allowed (after compression)."),
    ("message.downconversion.enable", _B, True, _no_check,
     ("log.message.downconversion.enable",),
     "Whether down-conversion of message formats is enabled for consumers."),
    ("message.timestamp.after.max.ms", _L, LONG_MAX, at_least(0),
     ("log.message.timestamp.after.max.ms",),
     "Maximum allowed amount a CreateTime timestamp may be ahead of the broker's time."),
    ("message.timestamp.before.max.ms", _L, LONG_MAX, at_least(0),
     ("log.message.timestamp.before.max.ms",),
     "Maximum allowed amount a CreateTime timestamp may be behind the broker's time."),
    ("message.timestamp.difference.max.ms", _L, LONG_MAX, at_least(0),
     ("log.message.timestamp.difference.max.ms",),
     "Deprecated: maximum difference between a CreateTime timestamp and the broker's time."),
    ("message.timestamp.type", _S, "CreateTime", one_of("CreateTime", "LogAppendTime"),
     ("log.message.timestamp.type",),
     "Whether record timestamps are the producer's (CreateTime) or the broker's."),
    ("min.cleanable.dirty.ratio", _D, 0.5, between(0, 1), ("log.cleaner.min.cleanable.ratio",),
     "Minimum ratio of dirty log to total log for a log to be eligible for compaction."),
    ("min.compaction.lag.ms", _L, 0, at_least(0), ("log.cleaner.min.compaction.lag.ms",),
     "Minimum time a message remains uncompacted."),
    ("min.insync.replicas", _I, 1, at_least(1), ("min.insync.replicas",),
     "Minimum number of in-sync replicas for an acks=all write to succeed."),
    ("preallocate", _B, False, _no_check, ("log.preallocate",),
     "Preallocate the segment file when creating a new segment."),
    ("remote.storage.enable", _B, False, _no_check, (),
     "Enable tiered storage for the topic (not supported by Odradek; always local)."),
    ("retention.bytes", _L, -1, _no_check, ("log.retention.bytes",),
     "Maximum size a partition can grow to before old segments are deleted (-1: no limit)."),
    ("retention.ms", _L, 604800000, at_least(-1),
     ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
     "Maximum time a segment is retained before it is deleted (-1: no limit)."),
    ("segment.bytes", _I, 1073741824, at_least(14), ("log.segment.bytes",),
     "Segment file size of the log."),
    ("segment.index.bytes", _I, 10485760, at_least(4), ("log.index.size.max.bytes",),
     "Size of the index mapping offsets to file positions."),
    ("segment.jitter.ms", _L, 0, at_least(0), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
     "Maximum random jitter subtracted from segment.ms to avoid thundering herds of rolls."),
    ("segment.ms", _L, 604800000, at_least(1), ("log.roll.ms", "log.roll.hours"),
     "Time after which Kafka will force the log to roll even if the segment file isn't full."),
    ("unclean.leader.election.enable", _B, False, _no_check,
     ("unclean.leader.election.enable",),
     "Whether replicas not in the ISR may be elected leader as a last resort."),
]

# Broker properties given in coarser units, converted to the topic config's unit (ms).
BROKER_UNIT_SCALE: dict[str, int] = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}

# Broker defaults that differ from the topic default when the broker property is absent.
BROKER_DEFAULTS: dict[str, Any] = {
    "log.retention.hours": 168,
    "log.roll.hours": 168,
    "log.roll.jitter.hours": 0,
}

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    name: ConfigDef(name, ctype, default, validator, synonyms, doc, name.replace(".", "_"))
    for name, ctype, default, validator, synonyms, doc in _TABLE
}

# broker-level name -> topic-level ConfigDef
BROKER_SYNONYMS: dict[str, ConfigDef] = {
    synonym: config for config in TOPIC_CONFIGS.values() for synonym in config.broker_synonyms
}


@dataclass(frozen=True)
class LogConfig:
    """Typed topic configuration. Build with `LogConfig.from_props` / `from_broker_props`."""

    cleanup_policy: list[str] = dataclasses.field(default_factory=lambda: ["delete"])
    compression_type: str = "producer"
    delete_retention_ms: int = 86400000
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: list[str] = dataclasses.field(default_factory=list)
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: list[str] = dataclasses.field(default_factory=list)
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_downconversion_enable: bool = True
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_storage_enable: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604800000
    segment_bytes: int = 1073741824
    segment_index_bytes: int = 10485760
    segment_jitter_ms: int = 0
    segment_ms: int = 604800000
    unclean_leader_election_enable: bool = False
    # Names set explicitly at topic level (DescribeConfigs source DYNAMIC_TOPIC_CONFIG).
    overrides: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for config in TOPIC_CONFIGS.values():
            config.validator(config.name, getattr(self, config.attribute))

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None,
                   defaults: LogConfig | None = None) -> LogConfig:
        """Topic overrides (Kafka topic-level names) layered on `defaults` (broker defaults)."""
        props = props or {}
        unknown = sorted(set(props) - set(TOPIC_CONFIGS))
        if unknown:
            raise ValueError(f"Unknown topic config name: {', '.join(unknown)}")
        base = defaults if defaults is not None else cls()
        values = {TOPIC_CONFIGS[name].attribute: TOPIC_CONFIGS[name].parse(value)
                  for name, value in props.items()}
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


def validate_topic_props(props: Mapping[str, Any]) -> None:
    """Raises ValueError with Kafka-like text for an unknown name or invalid value."""
    LogConfig.from_props(props)
