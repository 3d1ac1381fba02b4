"""Group config definitions (Kafka 4.0's GroupConfig): the configs a GROUP config resource
(DescribeConfigs resource type 32) may set for one group, overriding the broker's `group.*`
key of the same name (`consumer.session.timeout.ms` overrides
`group.consumer.session.timeout.ms`).

A group's value is checked against the broker's bounds (`group.consumer.min.session.timeout.ms`
...), as Kafka's controller does before it writes the ConfigRecord.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from odradek.config.definition import ConfigDef, UpdateMode, table
from odradek.config.types import ConfigError, ConfigType
from odradek.config.validators import at_least, one_of

#: the prefix that turns a group config's name into the broker key it overrides
BROKER_PREFIX = "group."

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"

_I, _S = ConfigType.INT, ConfigType.STRING

GROUP_CONFIGS: dict[str, ConfigDef] = table([
    ConfigDef(CONSUMER_SESSION_TIMEOUT_MS, _I, 45000, at_least(1), update_mode=UpdateMode.PER_GROUP,
              doc="How long the coordinator waits for a heartbeat of a consumer-protocol member "
                  "of this group before it removes the member."),
    ConfigDef(CONSUMER_HEARTBEAT_INTERVAL_MS, _I, 5000, at_least(1),
              update_mode=UpdateMode.PER_GROUP,
              doc="The heartbeat interval the coordinator gives the consumer-protocol members "
                  "of this group."),
    ConfigDef(SHARE_SESSION_TIMEOUT_MS, _I, 45000, at_least(1), update_mode=UpdateMode.PER_GROUP,
              doc="Session timeout of the members of this share group."),
    ConfigDef(SHARE_HEARTBEAT_INTERVAL_MS, _I, 5000, at_least(1),
              update_mode=UpdateMode.PER_GROUP,
              doc="Heartbeat interval given to the members of this share group."),
    ConfigDef(SHARE_RECORD_LOCK_DURATION_MS, _I, 30000, at_least(1000),
              update_mode=UpdateMode.PER_GROUP,
              doc="How long a member of this share group holds an acquired record."),
    ConfigDef(SHARE_AUTO_OFFSET_RESET, _S, "latest", one_of("latest", "earliest"),
              update_mode=UpdateMode.PER_GROUP,
              doc="Where a share-partition starts when it has no start offset yet."),
])

# Broker keys bounding each group config, with their Kafka 4.0 defaults (used when the broker
# lookup does not know the key).
_BOUNDS: dict[str, tuple[str, int, str, int]] = {
    CONSUMER_HEARTBEAT_INTERVAL_MS: ("group.consumer.min.heartbeat.interval.ms", 5000,
                                     "group.consumer.max.heartbeat.interval.ms", 15000),
    CONSUMER_SESSION_TIMEOUT_MS: ("group.consumer.min.session.timeout.ms", 45000,
                                  "group.consumer.max.session.timeout.ms", 60000),
    SHARE_HEARTBEAT_INTERVAL_MS: ("group.share.min.heartbeat.interval.ms", 5000,
                                  "group.share.max.heartbeat.interval.ms", 15000),
    SHARE_SESSION_TIMEOUT_MS: ("group.share.min.session.timeout.ms", 45000,
                               "group.share.max.session.timeout.ms", 60000),
    SHARE_RECORD_LOCK_DURATION_MS: ("group.share.min.record.lock.duration.ms", 15000,
                                    "group.share.max.record.lock.duration.ms", 60000),
}

#: broker key -> its value, KeyError for a key the broker does not define
BrokerLookup = Callable[[str], Any]


def _broker_value(broker: BrokerLookup, key: str, default: Any) -> Any:
    try:
        value = broker(key)
    except KeyError:
        return default
    return default if value is None else value


def broker_defaults(broker: BrokerLookup) -> dict[str, str]:
    """Each group config's value for a group that does not set it: the broker's `group.<name>`
    key (Kafka's extractGroupConfigMap), else GroupConfig's own default."""
    out = {}
    for name, definition in GROUP_CONFIGS.items():
        value = _broker_value(broker, BROKER_PREFIX + name, definition.default)
        out[name] = str(value)
    return out


def validate(props: Mapping[str, str], broker: BrokerLookup) -> None:
    """Kafka's GroupConfig.validate: known names, parsable values, within the broker's bounds,
    session timeouts above heartbeat intervals. Raises ConfigError (INVALID_CONFIG)."""
    for name in props:
        if name not in GROUP_CONFIGS:
            raise ConfigError(f"Unknown group config name: {name}")
    # Unset keys take GroupConfig's defaults here, as Kafka's ConfigDef.parse does.
    values: dict[str, Any] = {name: definition.parse(props.get(name, definition.default))
                              for name, definition in GROUP_CONFIGS.items()}
    for name, (min_key, min_default, max_key, max_default) in _BOUNDS.items():
        if values[name] < int(_broker_value(broker, min_key, min_default)):
            raise ConfigError(f"{name} must be greater than or equal to {min_key}")
        if values[name] > int(_broker_value(broker, max_key, max_default)):
            raise ConfigError(f"{name} must be less than or equal to {max_key}")
    for session, heartbeat in ((CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
                               (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS)):
        if values[session] <= values[heartbeat]:
            raise ConfigError(f"{session} must be greater than {heartbeat}")


def effective_int(overrides: Mapping[str, str], name: str, broker_default: int) -> int:
    """A group's value of an INT group config: its override, else the broker's."""
    value = overrides.get(name)
    return broker_default if value is None else int(value)
