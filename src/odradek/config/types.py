"""Config value types: Kafka's ConfigDef.Type, parsing from text (or typed values) and formatting.

The numbering of `ConfigType` is DescribeConfigs' `ConfigType` field (KIP-569), so a type is
its own wire id. `parse_value` is Kafka's ConfigDef.parseType with Kafka's error wording;
`format_value` is how DescribeConfigs shows a typed value.
"""

from __future__ import annotations

import enum
import re
from typing import Any

SHORT_MAX = 2**15 - 1
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An invalid configuration (Kafka's ConfigException); the message names the key, the
    value and the expectation."""


class WireEnum(enum.IntEnum):
    """An enum of wire ids whose member 0 is UNKNOWN, standing in for ids this version does not
    know (a newer peer may send them)."""

    @classmethod
    def from_code(cls, code: int) -> Any:
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ConfigType(WireEnum):
    """Config value types, numbered like DescribeConfigs' `ConfigType` field (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


INTEGER_LIMITS = {ConfigType.SHORT: SHORT_MAX, ConfigType.INT: INT_MAX, ConfigType.LONG: LONG_MAX}


class Password:
    """A secret config value; prints as `[hidden]` (Kafka's Password) so logs never show it."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


def java_trim(text: str) -> str:
    """Java's String.trim(): drops every char <= U+0020 at both ends, not just whitespace."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
LIST_SEPARATOR = re.compile(r"\s*,\s*")


def csv_list(value: str | None) -> list[str]:
    """Kafka's parseCsvList: split on commas, trim, drop empty entries."""
    if not value:
        return []
    return [item for item in LIST_SEPARATOR.split(java_trim(value)) if item]


def parse_value(name: str, config_type: ConfigType, value: Any) -> Any:
    """Kafka's ConfigDef.parseType: trims strings, then converts; Kafka's error wording.

    Typed values of the right kind (an int for INT, a list for LIST, ...) pass unchanged but
    for range checks, so already parsed values can be parsed again.
    """
    if value is None:
        return None

    def invalid(reason: str) -> ConfigError:
        shown = value.value if isinstance(value, Password) else value
        return ConfigError(f"Invalid value {shown} for configuration {name}: {reason}")

    text = java_trim(value) if isinstance(value, str) else None
    if config_type == ConfigType.BOOLEAN:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise invalid("Expected value to be either true or false")
    if config_type in INTEGER_LIMITS:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif text is not None and INTEGER_TEXT.fullmatch(text):
            number = int(text)
        else:
            raise invalid(f"Not a number of type {config_type.name}")
        limit = INTEGER_LIMITS[config_type]
        if not -limit - 1 <= number <= limit:
            raise invalid(f"Not a number of type {config_type.name}")
        return number
    if config_type == ConfigType.DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if text is not None and "_" not in text:
            try:
                return float(text)
            except ValueError:
                pass
        raise invalid("Not a number of type DOUBLE")
    if config_type == ConfigType.LIST:
        if isinstance(value, (list, tuple)):
            return [java_trim(str(item)) for item in value]
        if text is None:
            raise invalid("Expected a comma separated list.")
        return LIST_SEPARATOR.split(text) if text else []
    if config_type == ConfigType.PASSWORD:
        if isinstance(value, Password):
            return value
        if text is None:
            raise invalid("Expected value to be a string, but it was a " + type(value).__name__)
        return Password(text)
    # STRING and CLASS (a class name: Odradek has no JVM classes to load).
    if text is None:
        raise invalid("Expected value to be a string, but it was a " + type(value).__name__)
    return text


def format_value(config_type: ConfigType, value: Any) -> str:
    """Formats a typed value the way Kafka shows it in DescribeConfigs."""
    if config_type == ConfigType.BOOLEAN:
        return "true" if value else "false"
    if config_type == ConfigType.LIST:
        return ",".join(value)
    return str(value)
