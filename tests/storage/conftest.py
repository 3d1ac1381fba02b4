"""Fixtures of the storage tests (helpers live in storage_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from storage_helpers import FakeClock

from odradek.storage import Log, LogConfig


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_log(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Log]]:
    opened: list[Log] = []

    def factory(props: dict[str, object] | None = None, name: str = "topic-0",
                **kwargs: object) -> Log:
        config = LogConfig.from_props(props or {})
        log = Log(tmp_path / name, config, clock=clock, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close()
