"""The seed of a test's fault run: ODRADEK_FAULTS_SEED replays one, else a fresh one (printed
by the run, and in the failure message)."""

from __future__ import annotations

import os
import random

SEED_ENV = "ODRADEK_FAULTS_SEED"


def scenario_seed() -> int:
    fixed = os.environ.get(SEED_ENV)
    return int(fixed) if fixed else random.SystemRandom().randrange(2**31)


def events_between(events: list[dict], type_: str, start: float, end: float,
                   **fields: object) -> list[dict]:
    """The history's events of a type (with the given field values) with start <= t <= end."""
    return [e for e in events if e["type"] == type_ and start <= e["t"] <= end
            and all(e.get(k) == v for k, v in fields.items())]


def fault_windows(events: list[dict]) -> list[tuple[dict, float]]:
    """Each fault the nemesis injected and when it was undone (t)."""
    undo = {"kill": "restart", "pause": "resume", "isolate": "heal", "fill-disk": "free-disk"}
    windows, open_faults = [], {}
    for event in events:
        if event["type"] != "nemesis":
            continue
        if event["action"] in undo:
            open_faults[(undo[event["action"]], event["node"])] = event
        elif (event["action"], event.get("node")) in open_faults:
            windows.append((open_faults.pop((event["action"], event["node"])), event["t"]))
    return windows
