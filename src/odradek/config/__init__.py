"""Odradek's one config model: definitions, types, validators, sources and synonyms, and the
`.properties` reader, shared by broker, topic, client and tool configs.

- `types`: `ConfigType` (DescribeConfigs' ids), `parse_value` / `format_value` (Kafka's
  ConfigDef.parseType and DescribeConfigs' text), `Password`, `ConfigError`.
- `validators`: `at_least`, `between`, `one_of`, with Kafka's wording.
- `definition`: `ConfigDef` (name, type, default, validator, importance, update mode, doc,
  synonyms), `Importance`, `UpdateMode`, `NO_DEFAULT`.
- `properties`: the `.properties` reader (`parse_properties`, `load_properties`).
- `topic`, `broker`: the topic and broker config tables; `listeners`: listener, security
  protocol, voter and bootstrap-server parsing, and `Endpoint`.
- `describe`: `ConfigSource`, `ConfigSynonym`, `ConfigEntry` and the DescribeConfigs renderers.

Layering: this package imports nothing else of Odradek, so every layer (storage included) may
import it.
"""

from odradek.config.definition import NO_DEFAULT, ConfigDef, Importance, UpdateMode
from odradek.config.describe import ConfigEntry, ConfigSource, ConfigSynonym
from odradek.config.properties import load_properties, parse_override, parse_properties
from odradek.config.types import (
    INT_MAX,
    LONG_MAX,
    SHORT_MAX,
    ConfigError,
    ConfigType,
    Password,
    format_value,
    parse_value,
)
from odradek.config.validators import Validator, at_least, between, one_of

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "NO_DEFAULT",
    "SHORT_MAX",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Importance",
    "Password",
    "UpdateMode",
    "Validator",
    "at_least",
    "between",
    "format_value",
    "load_properties",
    "one_of",
    "parse_override",
    "parse_properties",
    "parse_value",
]
