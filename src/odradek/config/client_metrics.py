"""Client metrics subscriptions (KIP-714): the configs of a CLIENT_METRICS config resource
(DescribeConfigs resource type 16), as Kafka 4.0's ClientMetricsConfigs: `metrics` (metric name
prefixes), `interval.ms` (push interval, 100 ms to 1 hour) and `match` (client selectors,
`client_id=<regex>` ...).

Odradek keeps and describes subscriptions but receives no metrics: like a Kafka broker without
a telemetry receiver (no metrics reporter implementing ClientTelemetry), it does not advertise
GetTelemetrySubscriptions and PushTelemetry, so clients do not push.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from odradek.config.definition import ConfigDef, UpdateMode, table
from odradek.config.types import ConfigError, ConfigType

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
MATCH_PARAMS = frozenset({"client_instance_id", "client_id", "client_software_name",
                          "client_software_version", "client_source_address",
                          "client_source_port"})

CLIENT_METRICS_CONFIGS: dict[str, ConfigDef] = table([
    ConfigDef(METRICS, ConfigType.LIST, [], update_mode=UpdateMode.PER_GROUP,
              doc="Telemetry metric name prefix list"),
    ConfigDef(INTERVAL_MS, ConfigType.INT, 300_000, update_mode=UpdateMode.PER_GROUP,
              doc="Metrics push interval in milliseconds"),
    ConfigDef(MATCH, ConfigType.LIST, [], update_mode=UpdateMode.PER_GROUP,
              doc="Client match criteria"),
])


class InvalidRequestConfigError(ConfigError):
    """A refusal Kafka gives as INVALID_REQUEST rather than INVALID_CONFIG (its
    InvalidRequestException)."""

    invalid_request = True


def validate(name: str, props: Mapping[str, str]) -> None:
    """Kafka's ClientMetricsConfigs.validate."""
    if not name:
        raise InvalidRequestConfigError("Subscription name can't be empty")
    for key in props:
        if key not in CLIENT_METRICS_CONFIGS:
            raise InvalidRequestConfigError(f"Unknown client metrics configuration: {key}")
    parsed = {key: CLIENT_METRICS_CONFIGS[key].parse(value) for key, value in props.items()}
    interval = parsed.get(INTERVAL_MS)
    if interval is not None and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise InvalidRequestConfigError(
            f"Invalid value {interval} for {INTERVAL_MS}, interval must be between 100 and "
            f"3600000 (1 hour)")
    for pattern in parsed.get(MATCH) or ():
        parts = pattern.split("=")
        while parts and not parts[-1]:  # Java's split drops trailing empty strings
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in MATCH_PARAMS:
            raise ConfigError(f"Illegal client matching pattern: {pattern}")
        try:
            re.compile(parts[1].strip())
        except re.error:
            raise ConfigError(f"Illegal client matching pattern: {pattern}") from None
