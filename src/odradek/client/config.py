"""Client configuration: Kafka's client config names, types and defaults, given as a dict.

A `ConfigSchema` lists the keys a client knows, as definitions of the shared config model
(`odradek.config.ConfigDef`); ``schema.parse({...})`` checks and converts the values (strings
from a properties file work as well as Python values) and returns a read-only `ClientConfig`.
Each client extends `COMMON_CONFIG` with its own keys and defaults (see `ADMIN_CONFIG`); a key no
schema knows is kept and logged, as Kafka does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from odradek.client.errors import KafkaConfigError
from odradek.config.definition import NO_DEFAULT, ConfigDef
from odradek.config.types import INT_MAX, ConfigType, parse_value
from odradek.config.validators import Validator, at_least, one_of

__all__ = [
    "ADMIN_CONFIG",
    "COMMON_CONFIG",
    "ClientConfig",
    "ConfigKey",
    "ConfigSchema",
    "admin_bootstrap",
    "at_least",
    "one_of",
    "parse_bootstrap_servers",
]

log = logging.getLogger("odradek.client")

INT32_MAX = INT_MAX

# The short type names client key tables use. Integers are LONGs: Python has one int type.
_TYPES = {"int": ConfigType.LONG, "float": ConfigType.DOUBLE, "bool": ConfigType.BOOLEAN,
          "str": ConfigType.STRING, "list": ConfigType.LIST, "password": ConfigType.PASSWORD}


def ConfigKey(name: str, type: str, default: Any, validator: Validator | None = None,
              required: bool = False) -> ConfigDef:
    """A client key's definition; `type` is "int", "bool", "str", "list", "float" or
    "password" (a secret: kept as a `Password`, printed as [hidden]). A required key has no
    default: parse() fails without it."""
    return ConfigDef(name, _TYPES[type], NO_DEFAULT if required else default, validator)


def _from_python(definition: ConfigDef, value: Any) -> Any:
    """Python callers pass Python values where Kafka takes text (``acks=1``, ``linger.ms=0.5``):
    a scalar stands for its text in a STRING key, a float is cut to an int in an integer key,
    and empty list items are dropped, as the client always did."""
    if definition.type == ConfigType.STRING and isinstance(value, (int, float)):
        return str(value)
    if definition.type == ConfigType.LONG and isinstance(value, float):
        return int(value)
    return value


def _convert(definition: ConfigDef, value: Any) -> Any:
    parsed = parse_value(definition.name, definition.type, _from_python(definition, value))
    if definition.type == ConfigType.LIST:
        parsed = [item for item in parsed if item]
    definition.validate(parsed)
    return parsed


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
    def __init__(self, keys: list[ConfigDef]) -> None:
        self.keys: dict[str, ConfigDef] = {key.name: key for key in keys}

    def extend(
        self, keys: list[ConfigDef] | None = None, defaults: Mapping[str, Any] | None = None
    ) -> ConfigSchema:
        """A schema with more keys and/or other defaults for existing ones."""
        merged = dict(self.keys)
        for name, default in (defaults or {}).items():
            merged[name] = dataclasses.replace(merged[name], default=default)
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
                key.validate(value)
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
    ConfigKey("security.protocol", "str", "PLAINTEXT",
              one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    # TLS (Kafka's names; librdkafka's ssl.ca.location & co. below) and SASL: see
    # odradek.client.security
    ConfigKey("ssl.endpoint.identification.algorithm", "str", "https"),
    ConfigKey("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"]),
    ConfigKey("ssl.cipher.suites", "list", []),
    ConfigKey("ssl.truststore.type", "str", "PEM"),
    ConfigKey("ssl.truststore.location", "str", None),
    ConfigKey("ssl.truststore.certificates", "password", None),
    ConfigKey("ssl.keystore.type", "str", "PEM"),
    ConfigKey("ssl.keystore.location", "str", None),
    ConfigKey("ssl.keystore.certificate.chain", "password", None),
    ConfigKey("ssl.keystore.key", "password", None),
    ConfigKey("ssl.key.password", "password", None),
    ConfigKey("ssl.ca.location", "str", None),
    ConfigKey("ssl.certificate.location", "str", None),
    ConfigKey("ssl.key.location", "str", None),
    ConfigKey("sasl.mechanism", "str", "GSSAPI"),
    ConfigKey("sasl.jaas.config", "password", None),
    ConfigKey("sasl.username", "str", None),
    ConfigKey("sasl.password", "password", None),
    ConfigKey("sasl.oauthbearer.config", "str", None),
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

def _check_controllers(name: str, value: Any) -> None:
    if value:
        parse_bootstrap_servers(value)


#: The admin client's keys (Kafka's AdminClientConfig defaults). `bootstrap.controllers`
#: (KIP-919): the controllers' listeners to talk to instead of brokers (`AdminClient` takes it
#: in place of bootstrap.servers).
ADMIN_CONFIG = COMMON_CONFIG.extend(
    keys=[ConfigKey("bootstrap.controllers", "list", [], _check_controllers)],
    defaults={"connections.max.idle.ms": 300_000})


def admin_bootstrap(props: Mapping[str, Any] | None) -> dict[str, Any]:
    """Admin properties with `bootstrap.controllers` also as the addresses to connect to
    (bootstrap.servers), as Kafka's AdminBootstrapAddresses: one of the two, not both."""
    props = dict(props or {})
    controllers = props.get("bootstrap.controllers")
    if controllers:
        if props.get("bootstrap.servers"):
            raise KafkaConfigError("You cannot set both bootstrap.servers and "
                                   "bootstrap.controllers.")
        props["bootstrap.servers"] = controllers
    return props
