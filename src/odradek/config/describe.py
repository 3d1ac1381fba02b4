"""DescribeConfigs: config sources, synonyms and entries, and their rendering for broker and
topic resources.

`ConfigEntry` is Kafka's admin ConfigEntry: the broker renders its configs into it (the
DescribeConfigs and CreateTopics handlers copy it onto the wire) and the admin client decodes
responses into it. The renderers are functions of the broker config, the default topic config
and the metadata image's dynamic overrides, so they hold no broker state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.config import client_metrics
from odradek.config import group as group_config
from odradek.config.broker import BROKER_CONFIGS
from odradek.config.definition import ConfigDef
from odradek.config.topic import TOPIC_CONFIGS
from odradek.config.types import ConfigType, WireEnum, format_value


class ConfigSource(WireEnum):
    """Where a config value comes from (DescribeConfigs' ConfigSource; Kafka's admin names)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


@dataclass(frozen=True)
class ConfigSynonym:
    """One place a config's value may come from, highest precedence first in an entry."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One described config (Kafka's admin ConfigEntry)."""

    name: str
    #: None for sensitive or unset values
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        """True when the value is the built-in default (not set anywhere)."""
        return self.source == ConfigSource.DEFAULT_CONFIG


class BrokerConfigView(Protocol):
    """What the renderers read of a broker config (`KafkaConfig`)."""

    @property
    def originals(self) -> Mapping[str, Any]: ...

    def values(self) -> Mapping[str, Any]: ...


class TopicDefaults(Protocol):
    """What the renderers read of the broker's default topic config (`LogConfig`)."""

    def get(self, name: str) -> Any: ...


def _shown(definition: ConfigDef, value: Any) -> str | None:
    if value is None or definition.sensitive:
        return None
    return format_value(definition.type, value)


def _static_broker_synonyms(name: str, originals: Mapping[str, Any],
                            values: Mapping[str, Any]) -> tuple[ConfigSynonym, ...]:
    """The broker keys that set `name` (itself, then its coarser variants) as the static
    config has them, then the default of the last one."""
    definition = BROKER_CONFIGS[name]
    chain = (name, *definition.broker_synonyms)
    synonyms = [ConfigSynonym(member, _shown(BROKER_CONFIGS[member], values[member]),
                              ConfigSource.STATIC_BROKER_CONFIG)
                for member in chain if member in originals]
    last = BROKER_CONFIGS[chain[-1]]
    if last.default is not None:
        synonyms.append(ConfigSynonym(last.name, _shown(last, last.default),
                                      ConfigSource.DEFAULT_CONFIG))
    return tuple(synonyms)


def describe_static_broker_configs(originals: Mapping[str, Any], values: Mapping[str, Any],
                                   names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """Broker configs as the static config (server.properties + overrides) sets them: value,
    source (static broker config vs default), synonyms. Unknown names are skipped."""
    selected = BROKER_CONFIGS.keys() if names is None else names
    entries = []
    for name in selected:
        definition = BROKER_CONFIGS.get(name)
        if definition is None:
            continue
        source = (ConfigSource.STATIC_BROKER_CONFIG if name in originals
                  else ConfigSource.DEFAULT_CONFIG)
        entries.append(ConfigEntry(
            name=name,
            value=_shown(definition, values[name]),
            source=source,
            is_read_only=definition.read_only,
            is_sensitive=definition.sensitive,
            synonyms=_static_broker_synonyms(name, originals, values),
            config_type=definition.type,
            documentation=definition.doc,
        ))
    return entries


def broker_config_entries(broker_config: BrokerConfigView, cluster_default: Mapping[str, str],
                          broker_own: Mapping[str, str] | None) -> list[ConfigEntry]:
    """DescribeConfigs of a broker resource as Kafka's ConfigHelper: the static view with the
    image's dynamic values. `broker_own` is the broker's own dynamic configs (None when the
    resource is the cluster default, the empty name). Synonyms in precedence order: the
    broker's own dynamic value, the cluster-wide dynamic default, the static config, the
    default; for the cluster-default resource only the dynamic default counts (Kafka filters
    the others out), so its source is DEFAULT_CONFIG unless the default is set dynamically."""
    per_broker = broker_own is not None
    own = broker_own or {}
    entries = []
    for entry in describe_static_broker_configs(broker_config.originals, broker_config.values()):
        dynamic: list[ConfigSynonym] = []
        if entry.name in own:
            dynamic.append(ConfigSynonym(entry.name, None if entry.is_sensitive
                                         else own[entry.name],
                                         ConfigSource.DYNAMIC_BROKER_CONFIG))
        if entry.name in cluster_default:
            dynamic.append(ConfigSynonym(entry.name, None if entry.is_sensitive
                                         else cluster_default[entry.name],
                                         ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        synonyms = (*dynamic, *entry.synonyms) if per_broker else tuple(dynamic)
        value = dynamic[0].value if dynamic else entry.value
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(entry.name, value, source, entry.is_read_only,
                                   entry.is_sensitive, synonyms, entry.config_type,
                                   entry.documentation))
    # Listener-prefixed dynamic settings (`listener.name.<listener>.ssl.keystore.location`):
    # described as Kafka does, secrets hidden.
    for level, source in ((own, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (cluster_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
        for name in sorted(level):
            if not name.startswith("listener.name.") or (
                    level is cluster_default and name in own):
                continue
            setting = name[len("listener.name."):].partition(".")[2]
            definition = BROKER_CONFIGS.get(setting)
            sensitive = definition is not None and definition.sensitive
            shown = None if sensitive else level[name]
            entries.append(ConfigEntry(
                name, shown, source, False, sensitive, (ConfigSynonym(name, shown, source),),
                definition.type if definition is not None else ConfigType.UNKNOWN,
                definition.doc if definition is not None else None))
    return entries


def topic_config_entries(broker_config: BrokerConfigView, default_log_config: TopicDefaults,
                         overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """DescribeConfigs of a topic: every topic config, its effective value (the topic override,
    else the broker default) and its synonyms (topic override, static broker key, default)."""
    static = broker_config.originals
    entries = []
    for name, definition in TOPIC_CONFIGS.items():
        synonyms = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
            value = definition.parse(overrides[name])
        else:
            value = default_log_config.get(name)
        broker_key = next((key for key in definition.broker_synonyms if key in static), None)
        if broker_key is not None:
            synonyms.append(ConfigSynonym(broker_key, str(static[broker_key]),
                                          ConfigSource.STATIC_BROKER_CONFIG))
        # The default synonym is the broker config's default in its own unit (Kafka:
        # log.retention.hours=168, not the topic's 604800000 ms). A config without a broker
        # synonym (remote.storage.enable, ...) has no synonyms at all, as in Kafka's
        # ConfigHelper: its source is DEFAULT_CONFIG.
        if definition.broker_synonyms:
            default_definition = BROKER_CONFIGS[definition.broker_synonyms[-1]]
            default = None if default_definition.default is None else format_value(
                default_definition.type, default_definition.default)
            synonyms.append(ConfigSynonym(default_definition.name, default,
                                          ConfigSource.DEFAULT_CONFIG))
        entries.append(ConfigEntry(
            name=name, value=format_value(definition.type, value),
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            synonyms=tuple(synonyms), config_type=definition.type,
            documentation=definition.doc))
    return entries


def group_config_entries(broker: group_config.BrokerLookup,
                         overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """DescribeConfigs of a group (Kafka 4.0's ConfigHelper for GROUP resources): every group
    config with the group's value (GROUP_CONFIG, its one synonym) or else the broker's
    `group.<name>` value (DEFAULT_CONFIG, no synonyms); none is read-only."""
    defaults = group_config.broker_defaults(broker)
    entries = []
    for name, definition in group_config.GROUP_CONFIGS.items():
        if name in overrides:
            value = format_value(definition.type, definition.parse(overrides[name]))
            synonyms: tuple[ConfigSynonym, ...] = (
                ConfigSynonym(name, value, ConfigSource.GROUP_CONFIG),)
        else:
            value = format_value(definition.type, definition.parse(defaults[name]))
            synonyms = ()
        entries.append(ConfigEntry(
            name=name, value=value,
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            synonyms=synonyms, config_type=definition.type, documentation=definition.doc))
    return entries


def client_metrics_config_entries(overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """DescribeConfigs of a client metrics subscription (Kafka 4.0's ConfigHelper for
    CLIENT_METRICS resources): each config with the subscription's value (CLIENT_METRICS_CONFIG,
    its one synonym) or its default (DEFAULT_CONFIG, no synonyms)."""
    entries = []
    for name, definition in client_metrics.CLIENT_METRICS_CONFIGS.items():
        value = format_value(definition.type, definition.parse(
            overrides.get(name, definition.default)))
        synonyms: tuple[ConfigSynonym, ...] = (
            (ConfigSynonym(name, value, ConfigSource.CLIENT_METRICS_CONFIG),)
            if name in overrides else ())
        entries.append(ConfigEntry(
            name=name, value=value,
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            synonyms=synonyms, config_type=definition.type, documentation=definition.doc))
    return entries
