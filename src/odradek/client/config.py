"""Client configuration: Kafka's client config names, types and defaults, given as a dict.

A `ConfigSchema` lists the keys a client knows; ``schema.parse({...})`` checks and converts
the values (strings from a properties file work as well as Python values) and returns a
read-only `ClientConfig`. Each client extends `COMMON_CONFIG` with its own keys and defaults
(see `ADMIN_CONFIG`); a key no schema knows is kept and logged, as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.client.errors import KafkaConfigError

__all__ = [
    "ADMIN_CONFIG",
    "COMMON_CONFIG",
    "ClientConfig",
    "ConfigKey",
    "ConfigSchema",
    "parse_bootstrap_servers",
]

log = logging.getLogger("odradek.client")

Validator = Callable[[str, Any], None]
INT32_MAX = 2**31 - 1


def at_least(minimum: int) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise KafkaConfigError(
                f"Invalid value {value} for configuration {name}: Value must be at least {minimum}"
            )

    return check


def one_of(*allowed: str) -> Validator:
    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise KafkaConfigError(
                f"Invalid value {value} for configuration {name}: String must be one of: "
                + ", ".join(allowed)
            )

    return check


@dataclass(frozen=True)
class ConfigKey:
    name: str
    #: "int", "bool", "str", "list" or "float"
    type: str
    default: Any
    validator: Validator | None = None
    #: A required key has no default; parse() fails without it.
    required: bool = False


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("a bool is not an int")
    return int(value.strip()) if isinstance(value, str) else int(value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"not a boolean: {value!r}")
    return text == "true"


def _to_list(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(item).strip() for item in items if str(item).strip()]


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int": _to_int,
    "float": float,
    "bool": _to_bool,
    "list": _to_list,
    "str": lambda value: str(value).strip(),
}


def _convert(key: ConfigKey, value: Any) -> Any:
    try:
        return _CONVERTERS[key.type](value)
    except (TypeError, ValueError):
        raise KafkaConfigError(
            f"Invalid value {value} for configuration {key.name}: "
            f"Expected value to be a {key.type}"
        ) from None


class ClientConfig(Mapping[str, Any]):
    """Parsed configuration: every known key with its typed value, plus unknown keys as
    given (a client may pass them on, e.g. to a nested client)."""

    def __init__(self, values: dict[str, Any], originals: dict[str, Any]) -> None:
        self._values = values
        self.originals = originals

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"ClientConfig({self._values!r})"


class ConfigSchema:
    def __init__(self, keys: list[ConfigKey]) -> None:
        self.keys: dict[str, ConfigKey] = {key.name: key for key in keys}

    def extend(
        self, keys: list[ConfigKey] | None = None, defaults: Mapping[str, Any] | None = None
    ) -> ConfigSchema:
        """A schema with more keys and/or other defaults for existing ones."""
        merged = dict(self.keys)
        for name, default in (defaults or {}).items():
            old = merged[name]
            merged[name] = ConfigKey(old.name, old.type, default, old.validator, old.required)
        for key in keys or ():
            merged[key.name] = key
        return ConfigSchema(list(merged.values()))

    def parse(self, props: Mapping[str, Any] | None) -> ClientConfig:
        originals = dict(props or {})
        values: dict[str, Any] = {}
        for name, key in self.keys.items():
            if name in originals and originals[name] is not None:
                value = _convert(key, originals[name])
            elif key.required:
                raise KafkaConfigError(
                    f'Missing required configuration "{name}" which has no default value.'
                )
            else:
                value = key.default
            if key.validator is not None and value is not None:
                key.validator(name, value)
            values[name] = value
        unknown = sorted(set(originals) - set(self.keys))
        if unknown:
            log.warning("These configurations '%s' were supplied but are not used.", unknown)
        for name in unknown:
            values[name] = originals[name]
        return ClientConfig(values, originals)


def parse_bootstrap_servers(servers: list[str]) -> list[tuple[str, int]]:
    """``["host:port", "[::1]:9092"]`` -> [(host, port)]; Kafka's error text when invalid."""
    addresses = []
    for entry in servers:
        host, sep, port_text = entry.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise KafkaConfigError(f"Invalid url in bootstrap.servers: {entry}")
        addresses.append((host, int(port_text)))
    if not addresses:
        raise KafkaConfigError("No resolvable bootstrap urls given in bootstrap.servers")
    return addresses


def _check_bootstrap(name: str, value: Any) -> None:
    parse_bootstrap_servers(value)


#: Keys every client shares (Kafka's CommonClientConfigs), with Kafka's defaults.
COMMON_CONFIG = ConfigSchema([
    ConfigKey("bootstrap.servers", "list", None, _check_bootstrap, required=True),
    ConfigKey("client.id", "str", ""),
    ConfigKey("client.dns.lookup", "str", "use_all_dns_ips",
              one_of("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")),
    ConfigKey("security.protocol", "str", "PLAINTEXT", one_of("PLAINTEXT")),
    ConfigKey("request.timeout.ms", "int", 30_000, at_least(0)),
    ConfigKey("default.api.timeout.ms", "int", 60_000, at_least(0)),
    ConfigKey("retries", "int", INT32_MAX, at_least(0)),
    ConfigKey("retry.backoff.ms", "int", 100, at_least(0)),
    ConfigKey("retry.backoff.max.ms", "int", 1_000, at_least(0)),
    ConfigKey("reconnect.backoff.ms", "int", 50, at_least(0)),
    ConfigKey("reconnect.backoff.max.ms", "int", 1_000, at_least(0)),
    ConfigKey("metadata.max.age.ms", "int", 300_000, at_least(0)),
    ConfigKey("connections.max.idle.ms", "int", 540_000),
    ConfigKey("socket.connection.setup.timeout.ms", "int", 10_000, at_least(0)),
    ConfigKey("socket.connection.setup.timeout.max.ms", "int", 30_000, at_least(0)),
    ConfigKey("send.buffer.bytes", "int", 131_072, at_least(-1)),
    ConfigKey("receive.buffer.bytes", "int", 65_536, at_least(-1)),
])

#: The admin client's keys (Kafka's AdminClientConfig defaults).
ADMIN_CONFIG = COMMON_CONFIG.extend(defaults={"connections.max.idle.ms": 300_000})
