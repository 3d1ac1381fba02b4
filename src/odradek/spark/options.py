"""The options of Spark's Kafka connector, parsed and checked as Spark's KafkaSourceProvider does.

Option names are case-insensitive (Spark lowercases them). ``kafka.<name>`` options are client
settings passed on without the prefix (``kafka.bootstrap.servers``, ``kafka.isolation.level``,
``kafka.request.timeout.ms``, ...). Errors are ValueErrors with Spark's messages.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.client.config import ClientConfig, ConfigSchema
from odradek.client.types import TopicPartition
from odradek.spark.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    assignment_from_json,
    offsets_from_json,
)

log = logging.getLogger("odradek.spark")

KAFKA_PREFIX = "kafka."
STRATEGY_OPTIONS = ("assign", "subscribe", "subscribepattern")
_STRATEGY_NAMES = "assign, subscribe, subscribePattern"
DEFAULT_POLL_TIMEOUT_MS = 120_000
DELIVERY_GUARANTEES = ("at-least-once", "exactly-once")

#: client settings the source refuses, with Spark's reasons
_UNSUPPORTED_SOURCE_PARAMS = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the "
                         "source option 'startingOffsets' to 'earliest' or 'latest' to specify "
                         "where to start.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported, keys are always "
                        "deserialized as byte arrays with ByteArrayDeserializer. Use DataFrame "
                        "operations to explicitly deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported, values are "
                          "always deserialized as byte arrays with ByteArrayDeserializer. Use "
                          "DataFrame operations to explicitly deserialize the values.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported, the source does "
                          "not commit any offsets.",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported.",
}
_UNSUPPORTED_SINK_PARAMS = {
    "transactional.id": "Kafka option 'transactional.id' is not supported: with "
                        "deliveryGuarantee=exactly-once the sink names its transactions itself "
                        "(option transactionalIdPrefix).",
    "key.serializer": "Kafka option 'key.serializer' is not supported as keys are serialized "
                      "with ByteArraySerializer.",
    "value.serializer": "Kafka option 'value.serializer' is not supported as value are "
                        "serialized with ByteArraySerializer.",
}


# ------------------------------------------------------------------------------ offset limits

@dataclass(frozen=True, slots=True)
class EarliestOffsets:
    """Start (or end) at each partition's log start offset."""


@dataclass(frozen=True, slots=True)
class LatestOffsets:
    """Start (or end) at each partition's end (the last stable offset under read_committed)."""


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Given offsets per partition; -2 earliest, -1 latest."""

    offsets: PartitionOffsets


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    """Per partition, the first offset whose timestamp is >= the given one (ms)."""

    timestamps: PartitionOffsets


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """For every partition, the first offset whose timestamp is >= `timestamp` (ms)."""

    timestamp: int


OffsetLimit = EarliestOffsets | LatestOffsets | SpecificOffsets | SpecificTimestamps | \
    GlobalTimestamp


# ------------------------------------------------------------------------------ subscriptions

@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: named topics, topics matching a pattern, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        # Java's Pattern.matcher(topic).matches(): the whole name must match.
        return self.pattern is not None and re.fullmatch(self.pattern, topic) is not None


# ------------------------------------------------------------------------------ parsed options

@dataclass(frozen=True)
class SourceOptions:
    client: dict[str, str]
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit | None
    #: what to do when no offset matches a starting timestamp: "error" or "latest"
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    @property
    def read_committed(self) -> bool:
        return self.client.get("isolation.level", "read_uncommitted") == "read_committed"


@dataclass(frozen=True)
class SinkOptions:
    client: dict[str, str]
    #: the topic for every row (overrides a ``topic`` column)
    topic: str | None = None
    #: add the odradek.* headers naming the query and micro-batch to every record
    batch_marker: bool = True
    #: "at-least-once" or "exactly-once" (one transaction per task and micro-batch, ended by
    #: the driver; see docs/spark.md)
    delivery_guarantee: str = "at-least-once"
    #: exactly-once: transactional ids are <prefix>-<query id>-<batch id>-<task partition>
    transactional_id_prefix: str = "odradek-spark"


def lowercase_keys(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items()}


def client_params(options: Mapping[str, str], unsupported: Mapping[str, str],
                  role: str) -> dict[str, str]:
    """The ``kafka.*`` options without the prefix; ValueError for refused ones or a missing
    ``kafka.bootstrap.servers``."""
    params = {key[len(KAFKA_PREFIX):]: value for key, value in options.items()
              if key.startswith(KAFKA_PREFIX)}
    for name, reason in unsupported.items():
        if name in params:
            raise ValueError(reason)
    if not params.get("bootstrap.servers", "").strip():
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring "
                         f"Kafka {role}")
    return params


def client_config(schema: ConfigSchema, params: Mapping[str, str],
                  **overrides: str) -> ClientConfig:
    """`params` parsed with `schema`, keeping only keys it knows (the others belong to another
    client: the source passes one set of settings to its admin and fetch clients)."""
    known = {key: value for key, value in params.items() if key in schema.keys}
    known.update(overrides)
    return schema.parse(known)


def _parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [key for key in STRATEGY_OPTIONS if key in options]
    if not given:
        raise ValueError("One of the following options must be specified for Kafka source: "
                         f"{_STRATEGY_NAMES}. See the docs for more details.")
    if len(given) > 1:
        raise ValueError("Only one of the following options can be specified for Kafka source: "
                         f"{_STRATEGY_NAMES}. See the docs for more details.")
    value = options[given[0]]
    if given[0] == "assign":
        if not value.strip().startswith("{"):
            raise ValueError("No topicpartitions to assign as specified value for option "
                             f"'assign' is '{value}'")
        return Subscription(partitions=tuple(assignment_from_json(value)))
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError("No topics to subscribe to as specified value for option "
                             f"'subscribe' is '{value}'")
        return Subscription(topics=topics)
    pattern = value.strip()
    if not pattern:
        raise ValueError("Pattern to subscribe is empty as specified value for option "
                         f"'subscribePattern' is '{value}'")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"Invalid subscribePattern '{pattern}': {exc}") from None
    return Subscription(pattern=pattern)


def _offset_limit(options: Mapping[str, str], prefix: str,
                  default: OffsetLimit | None) -> OffsetLimit | None:
    """Spark's getKafkaOffsetRangeLimit: ``<prefix>Timestamp`` beats
    ``<prefix>OffsetsByTimestamp`` beats ``<prefix>Offsets``."""
    timestamp = options.get(f"{prefix}timestamp")
    if timestamp is not None:
        return GlobalTimestamp(_int_option(f"{prefix}Timestamp", timestamp))
    by_timestamp = options.get(f"{prefix}offsetsbytimestamp")
    if by_timestamp is not None:
        return SpecificTimestamps(offsets_from_json(by_timestamp.strip()))
    offsets = options.get(f"{prefix}offsets")
    if offsets is None:
        return default
    text = offsets.strip()
    if text.lower() == "latest":
        return LatestOffsets()
    if text.lower() == "earliest":
        return EarliestOffsets()
    return SpecificOffsets(offsets_from_json(text))


def _int_option(name: str, value: str, *, positive: bool = False) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"Invalid value '{value}' for option '{name}', must be an integer"
                         ) from None
    if positive and number <= 0:
        raise ValueError(f"Invalid value '{value}' for option '{name}', must be a positive "
                         "integer")
    return number


def _bool_option(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"Invalid value '{value}' for option '{name}', must be true or false")
    return lowered == "true"


def parse_source_options(raw: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
    options = lowercase_keys(raw)
    client = client_params(options, _UNSUPPORTED_SOURCE_PARAMS, "consumer")
    if "group.id" in client:
        log.warning("Kafka option 'kafka.group.id' has been set on this query: the source does "
                    "not use consumer groups, so it only names the client.")
    subscription = _parse_subscription(options)
    ending: OffsetLimit | None
    if streaming:
        starting = _offset_limit(options, "starting", LatestOffsets())
        if any(key in options for key in ("endingoffsets", "endingoffsetsbytimestamp",
                                          "endingtimestamp")):
            raise ValueError("ending offset not valid in streaming queries")
        ending = None
    else:
        starting = _offset_limit(options, "starting", EarliestOffsets())
        ending = _offset_limit(options, "ending", LatestOffsets())
        _check_batch_limits(starting, ending)
    assert starting is not None
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"Invalid value '{strategy}' for option "
                         "'startingOffsetsByTimestampStrategy', must be error or latest")

    def optional_int(name: str) -> int | None:
        value = options.get(name.lower())
        return None if value is None else _int_option(name, value, positive=True)

    min_partitions = options.get("minpartitions")
    if min_partitions is not None and _int_option("minPartitions", min_partitions) <= 0:
        raise ValueError("minPartitions option must be a positive integer")
    return SourceOptions(
        client=client,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=optional_int("maxOffsetsPerTrigger"),
        min_partitions=optional_int("minPartitions"),
        max_records_per_partition=optional_int("maxRecordsPerPartition"),
        fail_on_data_loss=_bool_option("failOnDataLoss", options.get("failondataloss"), True),
        include_headers=_bool_option("includeHeaders", options.get("includeheaders"), False),
        poll_timeout_ms=optional_int("kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
    )


def _check_batch_limits(starting: OffsetLimit | None, ending: OffsetLimit | None) -> None:
    match starting:
        case LatestOffsets():
            raise ValueError("starting offset can't be latest for batch queries on Kafka")
        case SpecificOffsets(offsets):
            for tp, offset in offsets.items():
                if offset == LATEST:
                    raise ValueError(f"startingOffsets for {tp} can't be latest for batch "
                                     "queries on Kafka")
    match ending:
        case EarliestOffsets():
            raise ValueError("ending offset can't be earliest for batch queries on Kafka")
        case SpecificOffsets(offsets):
            for tp, offset in offsets.items():
                if offset == EARLIEST:
                    raise ValueError(f"endingOffsets for {tp} can't be earliest for batch "
                                     "queries on Kafka")


def parse_sink_options(raw: Mapping[str, Any]) -> SinkOptions:
    options = lowercase_keys(raw)
    client = client_params(options, _UNSUPPORTED_SINK_PARAMS, "producer")
    topic = options.get("topic")
    guarantee = options.get("deliveryguarantee", "at-least-once").strip().lower()
    if guarantee not in DELIVERY_GUARANTEES:
        raise ValueError(f"Invalid value '{guarantee}' for option 'deliveryGuarantee', must be "
                         f"one of {', '.join(DELIVERY_GUARANTEES)}")
    return SinkOptions(
        client=client,
        topic=topic.strip() if topic is not None else None,
        batch_marker=_bool_option("batchMarker", options.get("batchmarker"), True),
        delivery_guarantee=guarantee,
        transactional_id_prefix=options.get("transactionalidprefix", "odradek-spark").strip()
        or "odradek-spark",
    )
