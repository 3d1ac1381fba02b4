"""The RF=3 fault scenarios (marker `faults_rf3`) need partition replication on the broker.
Until the Makefile's CI switches them on they are skipped with a reason that says how to run
them: set ODRADEK_FAULTS_RF3=1, or select them with `-m faults_rf3`."""

from __future__ import annotations

import os

import pytest

RF3_SWITCH = "ODRADEK_FAULTS_RF3"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults_rf3: RF=3 fault-injection scenarios (issue 15); run with "
        f"{RF3_SWITCH}=1 or -m faults_rf3")


def rf3_enabled(config: pytest.Config) -> bool:
    return os.environ.get(RF3_SWITCH) == "1" or "faults_rf3" in (config.option.markexpr or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if rf3_enabled(config):
        return
    skip = pytest.mark.skip(reason=f"RF=3 fault scenarios are off until replication is on "
                                   f"main: run them with {RF3_SWITCH}=1 or -m faults_rf3")
    for item in items:
        if "faults_rf3" in item.keywords:
            item.add_marker(skip)
