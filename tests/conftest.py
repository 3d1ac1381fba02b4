"""Shared fixtures: a real broker process on random loopback ports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import SHORT_BROKER_SESSION, BrokerProcess


@pytest.fixture(scope="module")
def odradek_broker(tmp_path_factory):
    """One broker per test module (tests use distinct topic names)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield broker
    broker.stop()


@pytest.fixture
def fresh_broker(tmp_path):
    """A broker of the test's own, for restart/crash scenarios."""
    broker = BrokerProcess(tmp_path, SHORT_BROKER_SESSION)
    yield broker
    broker.kill()
