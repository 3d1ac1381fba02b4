"""Connect's two error kinds, with Kafka's wording in their messages."""

from __future__ import annotations


class ConnectConfigError(ValueError):
    """A bad worker, connector or transform setting (Kafka's ConfigException)."""


class ConnectDataError(ValueError):
    """Data a converter or transform cannot handle (Kafka's DataException)."""


def invalid_value(name: str, value: object, message: str) -> ConnectConfigError:
    """ConfigException(name, value, message)'s text."""
    return ConnectConfigError(f"Invalid value {value} for configuration {name}: {message}")


def missing(name: str, doc: str = "") -> ConnectConfigError:
    suffix = f" {doc}" if doc else ""
    return ConnectConfigError(
        f'Missing required configuration "{name}" which has no default value.{suffix}')
