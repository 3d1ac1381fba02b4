"""The history of one run: JSON lines, one event each, with `t` in seconds since the run began
(monotonic clock). The workload, the consumers and the nemesis write it; the checker reads it.

Event types (the fields besides `t` and `type`):
  meta         seed, scenario and the run's parameters (first line)
  invoke       process, value, partition: the producer handed a record to its client
  ack          process, value, partition, offset: the broker acknowledged it (acks=all)
  fail         process, value, partition, error: the client gave up on it (indeterminate: it
               may be stored)
  client-error process or session, error, fatal: an error the client reported outside a record
  session      session, final, start: a consumer session begins (assigned every partition
               from offset `start`); `final` sessions are the full reads the loss check uses
  poll         session, partition, offset, value: one record a consumer session returned
  session-end  session, complete, positions: how far it got (complete: reached its targets)
  nemesis      action (kill, restart, pause, resume, isolate, heal), node, and details
  phase        name: a marker (faults-start, faults-end, produce-end, ...)
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Self, TextIO

Event = dict[str, Any]


class History:
    """Thread-safe recorder: every event is written (and flushed) as it happens, so a history
    survives the run crashing, and kept in memory for the checker."""

    def __init__(self, path: Path, clock=time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self.events: list[Event] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = open(path, "w")  # noqa: SIM115 - open for the run

    def now(self) -> float:
        return self._clock() - self._start

    def record(self, type: str, **fields: Any) -> Event:
        event = {"t": round(self.now(), 6), "type": type, **fields}
        line = json.dumps(event, separators=(",", ":"))
        with self._lock:
            self.events.append(event)
            if self._file is not None:
                self._file.write(line + "\n")
                self._file.flush()
        return event

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(path: Path) -> list[Event]:
    """The events of a history file (a torn last line, from a killed run, is ignored)."""
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events
