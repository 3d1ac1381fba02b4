"""Spark test fixtures: one local SparkSession (local[2], loopback only) for all Spark tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def spark():
    from odradek.spark import local_session

    session = local_session("odradek-tests")
    yield session
    session.stop()
