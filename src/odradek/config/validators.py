"""Validators of typed config values, with Kafka's ConfigDef error wording.

A validator is `check(name, value)`: it returns nothing for a valid value and raises
`ConfigError` naming the key, the value and the expectation otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.config.types import ConfigError

Validator = Callable[[str, Any], None]


def at_least(minimum: float) -> Validator:
    """Kafka's ConfigDef.Range.atLeast."""
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise ConfigError(f"Invalid value {value} for configuration {name}: "
                              f"Value must be at least {minimum}")
    return check


def between(low: float, high: float) -> Validator:
    """Kafka's ConfigDef.Range.between (its wording names the bound that is crossed)."""
    def check(name: str, value: Any) -> None:
        if value < low:
            raise ConfigError(f"Invalid value {value} for configuration {name}: "
                              f"Value must be at least {low}")
        if value > high:
            raise ConfigError(f"Invalid value {value} for configuration {name}: "
                              f"Value must be no more than {high}")
    return check


def one_of(*allowed: str) -> Validator:
    """Kafka's ValidString / ValidList: the value (or each list item) is one of `allowed`."""
    def check(name: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item not in allowed:
                raise ConfigError(f"Invalid value {item} for configuration {name}: "
                                  f"String must be one of: {', '.join(allowed)}")
    return check
