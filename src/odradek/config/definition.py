"""One config definition (Kafka's ConfigDef.ConfigKey): what parsing, validation, the docs and
DescribeConfigs need to know about a key. Broker, topic and client configs are all tables of
`ConfigDef`s."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from odradek.config.types import ConfigType, parse_value
from odradek.config.validators import Validator


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class UpdateMode(enum.Enum):
    """Whether a config can change without a restart, as Kafka's docs list it."""

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"
    PER_TOPIC = "per-topic"  # a topic config: altered at runtime for one topic
    PER_GROUP = "per-group"  # a group config: altered at runtime for one group


class _NoDefault:
    """The default of a required key (Kafka's ConfigDef.NO_DEFAULT_VALUE)."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class ConfigDef:
    """One config key.

    `default` None means "unset unless supplied"; `NO_DEFAULT` means the key is required.
    `broker_synonyms` are the broker keys that supply this config's value when it is not set
    here, highest precedence first (Kafka's DescribeConfigs synonyms): for topic config
    `retention.ms` they are `log.retention.ms`, `log.retention.minutes`, `log.retention.hours`;
    for broker key `log.retention.ms`, the two coarser ones. `topic_config` names the topic
    config a broker key is the default of.
    """

    name: str
    type: ConfigType
    default: Any
    validator: Validator | None = None
    importance: Importance = Importance.MEDIUM
    update_mode: UpdateMode = UpdateMode.READ_ONLY
    doc: str = ""
    broker_synonyms: tuple[str, ...] = ()
    topic_config: str | None = None

    @property
    def sensitive(self) -> bool:
        return self.type == ConfigType.PASSWORD

    @property
    def read_only(self) -> bool:
        return self.update_mode == UpdateMode.READ_ONLY

    @property
    def dynamic(self) -> bool:
        """Whether Kafka lets this key change at runtime (per broker, cluster-wide, per topic)."""
        return not self.read_only

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    @property
    def attribute(self) -> str:
        """The key as a Python identifier (`segment.bytes` -> `segment_bytes`)."""
        return self.name.replace(".", "_")

    def parse(self, value: Any) -> Any:
        """Converts a string (or an already typed value) to this config's type and validates it."""
        parsed = parse_value(self.name, self.type, value)
        self.validate(parsed)
        return parsed

    def validate(self, value: Any) -> None:
        if value is not None and self.validator is not None:
            self.validator(self.name, value)

    def parsed_default(self) -> Any:
        """The default as a typed value (None for none or a required key)."""
        return None if self.required else parse_value(self.name, self.type, self.default)


def table(defs: list[ConfigDef]) -> dict[str, ConfigDef]:
    """Definitions by name; a name defined twice is a programming error."""
    by_name: dict[str, ConfigDef] = {}
    for definition in defs:
        if definition.name in by_name:
            raise RuntimeError(f"config {definition.name} is defined twice")
        by_name[definition.name] = definition
    return by_name
