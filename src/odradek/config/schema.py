"""What the controller needs to know of a config key of any resource type (Kafka's
KafkaConfigSchema): whether it holds a list (IncrementalAlterConfigs' APPEND and SUBTRACT apply
only to lists) and its default, from which APPEND and SUBTRACT start when the resource does not
set the key.

Resource types are DescribeConfigs' ids (2 topic, 4 broker, 16 client metrics, 32 group); they are repeated here because this
package imports nothing else of Odradek.
"""

from __future__ import annotations

from odradek.config.broker import BROKER_CONFIGS
from odradek.config.client_metrics import CLIENT_METRICS_CONFIGS
from odradek.config.definition import ConfigDef
from odradek.config.group import GROUP_CONFIGS
from odradek.config.topic import TOPIC_CONFIGS
from odradek.config.types import ConfigType, format_value

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
CLIENT_METRICS_RESOURCE = 16
GROUP_RESOURCE = 32

_TABLES: dict[int, dict[str, ConfigDef]] = {
    TOPIC_RESOURCE: TOPIC_CONFIGS,
    BROKER_RESOURCE: BROKER_CONFIGS,
    CLIENT_METRICS_RESOURCE: CLIENT_METRICS_CONFIGS,
    GROUP_RESOURCE: GROUP_CONFIGS,
}


def _definition(resource_type: int, name: str) -> ConfigDef | None:
    table = _TABLES.get(resource_type)
    if table is None:
        return None
    if resource_type == BROKER_RESOURCE and name.startswith("listener.name."):
        # `listener.name.<listener>.<config>` (or `.<mechanism>.<config>`): the base config's
        # type, as Kafka's schema resolves listener-prefixed keys.
        rest = name[len("listener.name."):].partition(".")[2]
        while rest and rest not in table:
            rest = rest.partition(".")[2]
        return table.get(rest)
    return table.get(name)


def is_list(resource_type: int, name: str) -> bool:
    """Kafka's isSplittable: whether APPEND and SUBTRACT apply to this key."""
    definition = _definition(resource_type, name)
    return definition is not None and definition.type == ConfigType.LIST


def default_text(resource_type: int, name: str) -> str | None:
    """The key's default as a config string (None when it has none), what Kafka's
    getDefault gives APPEND and SUBTRACT to start from. A listener-prefixed key has none."""
    if resource_type == BROKER_RESOURCE and name.startswith("listener.name."):
        return None
    definition = _definition(resource_type, name)
    if definition is None or definition.required or definition.default is None:
        return None
    return format_value(definition.type, definition.parsed_default())
