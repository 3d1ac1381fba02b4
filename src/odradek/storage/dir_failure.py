"""Kafka's LogDirFailureChannel: where an I/O error on a log directory is reported.

A write, flush, roll, truncation or deletion that fails with an OSError (a full disk, a
failing device, a directory gone) leaves the log's files in a state the process can no longer
vouch for. The log refuses every further write (KAFKA_STORAGE_ERROR) and reports its directory
here once; whoever owns the storage decides what an offline directory means (the broker halts
when it has no directory left, as Kafka does, and restart recovery truncates what the failed
write left behind)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("odradek.storage.dir_failure")

# Called once per failed directory with the directory and the error.
DirFailureHandler = Callable[[Path, OSError], None]


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: dict[Path, OSError] = {}
        self._handlers: list[DirFailureHandler] = []

    def subscribe(self, handler: DirFailureHandler) -> None:
        self._handlers.append(handler)

    @property
    def failed_dirs(self) -> list[Path]:
        return list(self._failed)

    def report(self, directory: Path, error: OSError) -> None:
        with self._lock:
            if directory in self._failed:
                return
            self._failed[directory] = error
        log.error("Error while writing to log directory %s: %s; it goes offline", directory,
                  error)
        for handler in self._handlers:
            handler(directory, error)
