"""The log cleaner's work in a child process, off the broker's interpreter (GIL).

Cleaning is CPU work in Python (decoding records, the offset map, rewriting batches); in a
cleaner thread it competes with the network and request threads for the broker's one
interpreter. `ProcessCleaner` has the same `clean(log, ...)` as `Cleaner` but runs it in a
child process (`python -m odradek.storage.cleaner_process`, one per cleaner thread, started on
first use and reused): the child gets a snapshot of the log (its inactive segments' files up to
the first uncleanable offset, the log config, the aborted transactions and the last batches of
active producers), builds the offset map and writes each group's `.cleaned` files, exactly as
`Cleaner` does in process. The swap stays in the broker: for each group the child asks the
parent, which opens the `.cleaned` segment and calls `Log.replace_segments` under the log's
lock, so the `.cleaned` -> `.swap` protocol and its crash safety are unchanged. The child
reports each step and waits: the parent runs the step hook (`ODRADEK_CLEANER_STEP_PAUSE_MS`)
and answers whether to go on (not once the log was truncated below its active segment: see
`LogCleaner.on_truncation`).

Lifetime: the child exits when its connection to the broker closes (EOF between cleanings)
and a watchdog thread ends it within `PARENT_POLL_S` once its parent process is gone (a kill
-9 of the broker), so no orphan outlives the broker; its unfinished `.cleaned` files are
deleted by the next cleaning of that group or the next load. `close()` (broker shutdown,
fewer cleaner threads) kills the child; a cleaning in progress aborts with nothing swapped.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, fields
from multiprocessing.connection import Connection
from pathlib import Path

from odradek.storage.cleaner import (
    Cleaner,
    CleanerConfig,
    CleanerStats,
    CleaningAbortedError,
    Throttler,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.segment import CLEANED_SUFFIX, LogSegment
from odradek.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

PARENT_POLL_S = 0.2


def _as_batch_work() -> None:
    """SCHED_BATCH (Linux): the scheduler treats the child as CPU-bound background work, so
    it does not preempt the broker's threads when they wake up, at the same CPU share (a
    lower priority, tried with nice +10, starved cleaning on a busy machine)."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:  # not permitted: the default policy
            pass


@dataclass(frozen=True)
class CleaningJob:
    """What the child needs to clean a log: a snapshot taken by the broker."""

    name: str
    directory: str
    segment_bases: tuple[int, ...]  # the inactive segments below the first uncleanable offset
    segment_sizes: tuple[int, ...]
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    clock_ms: int
    config: LogConfig
    aborted: tuple[AbortedTxn, ...]
    last_records: dict[int, tuple[int | None, int]]
    cleaner_config: CleanerConfig
    max_io_bytes_per_second: float


class ProcessCleaner:
    """`Cleaner.clean` in a child process, the swaps in this one."""

    def __init__(self, config: CleanerConfig, *, throttler: Throttler | None = None,
                 on_step: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.on_step = on_step
        # The child throttles its own I/O; threads share the rate, as Kafka's one throttler.
        self._throttler = throttler
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> None:
        """Starts the child now rather than at the first cleaning (about 0.3 s of imports)."""
        self._connection()

    def _connection(self) -> Connection:
        with self._lock:
            if self._closed:
                raise CleaningAbortedError("the cleaner is shut down")
            if self._process is not None and self._process.poll() is None \
                    and self._conn is not None:
                return self._conn
            self._stop_child()
            parent_end, child_end = socket.socketpair()
            try:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(child_end.fileno()), str(os.getpid())],
                    pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL)
            finally:
                child_end.close()
            self._conn = Connection(parent_end.detach())
            return self._conn

    def clean(self, log: Log, first_dirty_offset: int, first_uncleanable_offset: int,
              now_ms: int, stats: CleanerStats | None = None, *,
              truncation_epoch: int | None = None) -> int:
        """As `Cleaner.clean`; CleaningAbortedError when the child died or was closed."""
        stats = stats or CleanerStats()
        epoch = log.truncation_epoch if truncation_epoch is None else truncation_epoch
        active = log.active_segment
        segments = [s for s in log.log_segments()
                    if s.base_offset < first_uncleanable_offset and s is not active]
        if not segments:
            return first_dirty_offset
        rate = self.config.max_io_bytes_per_second
        if self._throttler is not None:
            rate = self._throttler.rate
        job = CleaningJob(
            name=str(log), directory=str(log.dir),
            segment_bases=tuple(s.base_offset for s in segments),
            segment_sizes=tuple(s.size for s in segments),
            first_dirty_offset=first_dirty_offset,
            first_uncleanable_offset=first_uncleanable_offset, now_ms=now_ms,
            clock_ms=log.clock(), config=log.config,
            aborted=tuple(log.collect_aborted_transactions(segments[0].base_offset,
                                                           first_uncleanable_offset)),
            last_records=log.last_records_of_active_producers(),
            cleaner_config=self.config,
            max_io_bytes_per_second=rate / max(self.config.num_threads, 1))
        by_base = {s.base_offset: s for s in segments}
        conn = self._connection()
        try:
            conn.send(job)
            while True:
                message = conn.recv()
                kind = message[0]
                if kind == "step":
                    if self.on_step is not None:
                        self.on_step(message[1])
                    # Whether to go on: not after a truncation below the active segment.
                    conn.send(log.truncation_epoch == epoch)
                elif kind == "swap":
                    conn.send(self._swap(log, [by_base[base] for base in message[1]], epoch))
                else:
                    break
        except (EOFError, OSError) as error:
            with self._lock:
                self._stop_child()
            raise CleaningAbortedError(f"the cleaner process ended: {error!r}") from None
        except BaseException:
            # The child waits for an answer it will not get: a fresh one for the next job.
            with self._lock:
                self._stop_child()
            raise
        if kind == "aborted":
            raise CleaningAbortedError(message[1])
        if kind != "done":
            raise RuntimeError(f"the cleaner process failed:\n{message[1]}")
        child_stats: CleanerStats = message[2]
        for item in fields(CleanerStats):
            setattr(stats, item.name, getattr(child_stats, item.name))
        return message[1]

    def _swap(self, log: Log, group: list[LogSegment], truncation_epoch: int) -> bool:
        config = log.config
        cleaned = LogSegment(log.dir, group[0].base_offset,
                             index_interval_bytes=config.index_interval_bytes,
                             max_index_size=config.segment_index_bytes,
                             created_ms=log.clock(), suffix=CLEANED_SUFFIX, must_exist=True)
        return log.replace_segments(cleaned, group, self.on_step,
                                    truncation_epoch=truncation_epoch)

    def _stop_child(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait(10)

    def close(self) -> None:
        """Kills the child (a cleaning in progress aborts)."""
        with self._lock:
            self._closed = True
            self._stop_child()


# -- the child ---------------------------------------------------------------------------------
class _Boundary:
    """Where the snapshot ends: stands for the segment after the cleanable ones."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset


class SnapshotLog:
    """The part of `Log` the cleaner uses, over the snapshot's segment files; the swap is
    asked of the broker."""

    # The broker checks truncations (at each step and swap); the snapshot never changes.
    truncation_epoch = 0

    def __init__(self, job: CleaningJob, conn: Connection) -> None:
        self.dir = Path(job.directory)
        self.config = job.config
        self._job = job
        self._conn = conn
        self._segments: list[LogSegment] = []
        try:
            for base, size in zip(job.segment_bases, job.segment_sizes):
                segment = LogSegment(self.dir, base,
                                     index_interval_bytes=job.config.index_interval_bytes,
                                     max_index_size=job.config.segment_index_bytes,
                                     must_exist=True)
                self._segments.append(segment)
                segment.set_size(size)
                segment.file  # noqa: B018 (opened now: a later retention rename is harmless)
        except FileNotFoundError as error:
            self.close()
            raise CleaningAbortedError(f"{job.name} changed: {error}") from None
        self.active_segment = _Boundary(job.first_uncleanable_offset)

    def __str__(self) -> str:
        return self._job.name

    def log_segments(self) -> list[LogSegment | _Boundary]:
        return [*self._segments, self.active_segment]

    def clock(self) -> int:
        return self._job.clock_ms

    def collect_aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        return [txn for txn in self._job.aborted
                if txn.last_offset >= start and txn.first_offset < upper]

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        return self._job.last_records

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment],
                         on_step: Callable[[str], None] | None = None, *,
                         truncation_epoch: int | None = None) -> bool:
        cleaned.close_handlers()  # the broker opens the files itself
        self._conn.send(("swap", [segment.base_offset for segment in old]))
        return bool(self._conn.recv())

    def close(self) -> None:
        for segment in self._segments:
            segment.close_handlers()


def _report_step(conn: Connection, name: str, step: str) -> None:
    """Tells the broker a step is reached (it runs its step hook meanwhile) and stops when
    the broker says the log was truncated since the snapshot (Kafka's checkDone)."""
    conn.send(("step", step))
    if not conn.recv():
        raise CleaningAbortedError(f"{name} was truncated while it was cleaned")


def _exit_with_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(PARENT_POLL_S)


def serve(conn: Connection) -> None:
    """Cleans the jobs received until the connection closes."""
    cleaner: Cleaner | None = None
    while True:
        try:
            job: CleaningJob = conn.recv()
        except (EOFError, OSError):
            return
        if cleaner is None or cleaner.config != job.cleaner_config:
            cleaner = Cleaner(job.cleaner_config,
                              throttler=Throttler(job.max_io_bytes_per_second, yield_gil=False))
        cleaner.throttler.rate = job.max_io_bytes_per_second
        cleaner.on_step = functools.partial(_report_step, conn, job.name)
        log: SnapshotLog | None = None
        try:
            log = SnapshotLog(job, conn)
            stats = CleanerStats()
            end = cleaner.clean(log, job.first_dirty_offset,  # type: ignore[arg-type]
                                job.first_uncleanable_offset, job.now_ms, stats)
            conn.send(("done", end, stats))
        except CleaningAbortedError as error:
            conn.send(("aborted", str(error)))
        except FileNotFoundError as error:  # retention or truncation removed a segment
            conn.send(("aborted", f"{job.name} changed: {error}"))
        except Exception:  # noqa: BLE001 (reported to the broker, which marks the log)
            conn.send(("error", traceback.format_exc()))
        finally:
            if log is not None:
                log.close()


def main() -> None:
    fd, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    _as_batch_work()
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    serve(Connection(fd))


if __name__ == "__main__":
    main()
