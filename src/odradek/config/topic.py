"""Topic config definitions (Kafka's LogConfig table): name, type, default, validator, broker
synonyms and doc. The storage engine's `LogConfig` is the typed view built from this table; the
broker-level defaults (`log.segment.bytes`, ...) are derived from it in `odradek.config.broker`.

Precedence (lowest to highest): Kafka's default < broker property (e.g. `log.segment.bytes`)
< topic override (e.g. `segment.bytes`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from odradek.config.definition import ConfigDef, UpdateMode, table
from odradek.config.types import LONG_MAX, ConfigError, ConfigType
from odradek.config.validators import Validator, at_least, between, one_of

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_I, _L, _D, _B, _S, _LST = (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE,
                            ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST)


def _gzip_level(name: str, value: Any) -> None:
    """Kafka's gzip level validator: a deflate level, or -1 for the library's default."""
    if value != -1 and not 1 <= value <= 9:
        raise ConfigError(f"Invalid value {value} for configuration {name}: "
                          "Value must be between 1 and 9 or equal to -1")


def _throttled_replicas(name: str, value: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: `*`, or `partition:broker` entries."""
    if value == ["*"] or all(_REPLICA_ENTRY.fullmatch(entry) for entry in value):
        return
    raise ConfigError(f"Invalid value [{', '.join(value)}] for configuration {name}: {name} "
                      "must be the literal '*' or a list of replicas in the following format: "
                      "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


_REPLICA_ENTRY = re.compile(r"([0-9]+:[0-9]+)?")

# Kafka 4.0's topic configs (LogConfig; the list of its documentation, section 3.2), with
# Kafka's defaults and validators. Those without a broker synonym have none in Kafka either
# ("Server Default Property: null").
# (name, type, default, validator, broker synonyms (highest precedence first), doc)
_TABLE: list[tuple[str, ConfigType, Any, Validator | None, tuple[str, ...], str]] = [
    ("cleanup.policy", _LST, ["delete"], one_of("compact", "delete"), ("log.cleanup.policy",),
     "Retention policy for old segments: 'delete' and/or 'compact'."),
    ("compression.gzip.level", _I, -1, _gzip_level, ("compression.gzip.level",),
     "Level of the gzip compression the broker applies when compression.type is gzip."),
    ("compression.lz4.level", _I, 9, between(1, 17), ("compression.lz4.level",),
     "Level of the lz4 compression the broker applies when compression.type is lz4."),
    ("compression.type", _S, "producer", one_of(*COMPRESSION_TYPES), ("compression.type",),
     "Final compression type for the topic; 'producer' keeps the producer's codec."),
    ("compression.zstd.level", _I, 3, between(-131072, 22), ("compression.zstd.level",),
     "Level of the zstd compression the broker applies when compression.type is zstd."),
    ("delete.retention.ms", _L, 86400000, at_least(0), ("log.cleaner.delete.retention.ms",),
     "How long delete tombstones are retained for compacted topics."),
    ("file.delete.delay.ms", _L, 60000, at_least(0), ("log.segment.delete.delay.ms",),
     "Time to wait before deleting a file from the filesystem."),
    ("flush.messages", _L, LONG_MAX, at_least(1), ("log.flush.interval.messages",),
     "Number of messages appended before the log is fsynced."),
    ("flush.ms", _L, LONG_MAX, at_least(0),
     ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
     "Maximum time in ms before the log is fsynced."),
    ("follower.replication.throttled.replicas", _LST, [], _throttled_replicas, (),
     "Replicas whose log replication should be throttled on the follower side."),
    ("index.interval.bytes", _I, 4096, at_least(0), ("log.index.interval.bytes",),
     "How frequently (in log bytes) an entry is added to the offset index."),
    ("leader.replication.throttled.replicas", _LST, [], _throttled_replicas, (),
     "Replicas whose log replication should be throttled on the leader side."),
    ("local.retention.bytes", _L, -2, at_least(-2), ("log.local.retention.bytes",),
     "Local log size to retain before deleting (tiered storage; -2 = retention.bytes)."),
    ("local.retention.ms", _L, -2, at_least(-2), ("log.local.retention.ms",),
     "Local log age to retain before deleting (tiered storage; -2 = retention.ms)."),
    ("max.compaction.lag.ms", _L, LONG_MAX, at_least(1), ("log.cleaner.max.compaction.lag.ms",),
     "Maximum time a message remains ineligible for compaction."),
    ("max.message.bytes", _I, 1048588, at_least(0), ("message.max.bytes",),
     "Largest record batch size allowed (after compression)."),
    ("message.timestamp.after.max.ms", _L, 3600000, at_least(0),
     ("log.message.timestamp.after.max.ms",),
     "Maximum allowed amount a CreateTime timestamp may be ahead of the broker's time."),
    ("message.timestamp.before.max.ms", _L, LONG_MAX, at_least(0),
     ("log.message.timestamp.before.max.ms",),
     "Maximum allowed amount a CreateTime timestamp may be behind the broker's time."),
    ("message.timestamp.type", _S, "CreateTime", one_of("CreateTime", "LogAppendTime"),
     ("log.message.timestamp.type",),
     "Whether record timestamps are the producer's (CreateTime) or the broker's."),
    ("min.cleanable.dirty.ratio", _D, 0.5, between(0, 1), ("log.cleaner.min.cleanable.ratio",),
     "Minimum ratio of dirty log to total log for a log to be eligible for compaction."),
    ("min.compaction.lag.ms", _L, 0, at_least(0), ("log.cleaner.min.compaction.lag.ms",),
     "Minimum time a message remains uncompacted."),
    ("min.insync.replicas", _I, 1, at_least(1), ("min.insync.replicas",),
     "Minimum number of in-sync replicas for an acks=all write to succeed."),
    ("preallocate", _B, False, None, ("log.preallocate",),
     "Preallocate the segment file when creating a new segment."),
    ("remote.log.copy.disable", _B, False, None, (),
     "Stop copying the topic's segments to tiered storage (no effect: Odradek has none)."),
    ("remote.log.delete.on.disable", _B, False, None, (),
     "Delete the topic's tiered data when tiered storage is disabled (no effect in Odradek)."),
    ("remote.storage.enable", _B, False, None, (),
     "Enable tiered storage for the topic (not supported by Odradek; always local)."),
    ("retention.bytes", _L, -1, None, ("log.retention.bytes",),
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
    ("unclean.leader.election.enable", _B, False, None,
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

TOPIC_CONFIGS: dict[str, ConfigDef] = table([
    ConfigDef(name, ctype, default, validator, update_mode=UpdateMode.PER_TOPIC, doc=doc,
              broker_synonyms=synonyms)
    for name, ctype, default, validator, synonyms, doc in _TABLE
])

# broker-level name -> topic-level ConfigDef
BROKER_SYNONYMS: dict[str, ConfigDef] = {
    synonym: config for config in TOPIC_CONFIGS.values() for synonym in config.broker_synonyms
}

# Topic configs holding lists (IncrementalAlterConfigs' APPEND and SUBTRACT apply to them).
LIST_TOPIC_CONFIGS = frozenset(
    name for name, config in TOPIC_CONFIGS.items() if config.type == ConfigType.LIST)


def parse_topic_props(props: Mapping[str, Any]) -> dict[str, Any]:
    """Typed values of topic-level overrides; `ConfigError` (Kafka's wording) for an unknown
    name or an invalid value."""
    unknown = sorted(set(props) - set(TOPIC_CONFIGS))
    if unknown:
        raise ConfigError(f"Unknown topic config name: {', '.join(unknown)}")
    return {name: TOPIC_CONFIGS[name].parse(value) for name, value in props.items()}


def validate_topic_props(props: Mapping[str, Any]) -> None:
    """Raises `ConfigError` (a ValueError) for an unknown name or invalid value."""
    parse_topic_props(props)
