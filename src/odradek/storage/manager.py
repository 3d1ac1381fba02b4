"""All partition logs of a broker across its `log.dirs` (Kafka's LogManager).

Per log dir: `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks), the `.kafka_cleanshutdown` marker (present
only after a clean close; removed once the logs are loaded) and a `.lock` file held with flock
so two brokers cannot share a dir.

The log cleaner (`cleaner.LogCleaner`, `log.cleaner.*`) compacts `cleanup.policy=compact`
logs on its own threads and keeps `cleaner-offset-checkpoint` per log dir.

Periodic work (retention, time-based flushes, checkpoints, producer-id expiration, delayed
file deletion) runs from
`tick(now_ms)`, which the broker calls from a worker thread: it may fsync.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import resource
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from odradek.protocol.types import TopicPartition
from odradek.storage.checkpoint import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
    atomic_write,
    fsync_dir,
)
from odradek.storage.cleaner import CleanerConfig, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.dir_failure import LogDirFailureChannel
from odradek.storage.log import Log, log_dir_name, parse_topic_partition
from odradek.storage.scheduler import Clock, DeferredDeleter, system_clock_ms

logger = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
LOCK_FILE = ".lock"


@dataclass
class PartitionDirInfo:
    topic: str
    partition: int
    size: int
    offset_lag: int = 0
    is_future: bool = False


@dataclass
class LogDirInfo:
    """One entry of DescribeLogDirs."""

    path: str
    error: str | None
    total_bytes: int
    usable_bytes: int
    partitions: list[PartitionDirInfo] = field(default_factory=list)


def raise_open_file_limit() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard limit (Kafka keeps every segment open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


class LogManager:
    def __init__(self, log_dirs: Iterable[str | os.PathLike[str]],
                 default_config: LogConfig | None = None, *,
                 topic_configs: Callable[[str], LogConfig | None] | None = None,
                 recovery_threads_per_data_dir: int = 1, clock: Clock | None = None,
                 retention_check_interval_ms: int = 300_000,
                 flush_checkpoint_interval_ms: int = 60_000,
                 flush_start_offset_checkpoint_interval_ms: int = 60_000,
                 high_watermark_checkpoint_interval_ms: int = 5_000,
                 producer_id_expiration_ms: int = 86_400_000,
                 producer_id_expiration_check_interval_ms: int = 600_000,
                 inline_flush: bool = True,
                 excluded_topics: Iterable[str] = (),
                 dir_failures: LogDirFailureChannel | None = None,
                 cleaner_config: CleanerConfig | None = None) -> None:
        self.log_dirs = [Path(d).resolve() for d in log_dirs]
        # Where every log reports an I/O error on its directory (a new channel if none given).
        self.dir_failures = dir_failures or LogDirFailureChannel()
        if not self.log_dirs:
            raise ValueError("at least one log dir is required")
        self.default_config = default_config or LogConfig()
        self._topic_configs = topic_configs
        self.recovery_threads_per_data_dir = max(1, recovery_threads_per_data_dir)
        self.clock = clock or system_clock_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_checkpoint_interval_ms = flush_checkpoint_interval_ms
        self.flush_start_offset_checkpoint_interval_ms = flush_start_offset_checkpoint_interval_ms
        self.high_watermark_checkpoint_interval_ms = high_watermark_checkpoint_interval_ms
        # Kafka's ProducerStateManagerConfig: broker-wide, not a topic config.
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.inline_flush = inline_flush
        # Logs owned by someone else in the same dirs (the KRaft metadata log).
        self.excluded_topics = frozenset(excluded_topics)
        self.deleter = DeferredDeleter()
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._dirs_to_sync: set[Path] = set()  # data directories with new log directories
        self._dir_of: dict[TopicPartition, Path] = {}
        self._lock_files: list[int] = []
        self._topic_config_overrides: dict[str, LogConfig] = {}
        self.open_file_limit = raise_open_file_limit()
        now = self.clock()
        self._last_retention_ms = now
        self._last_recovery_checkpoint_ms = now
        self._last_start_offset_checkpoint_ms = now
        self._last_hw_checkpoint_ms = now
        self._last_producer_expiration_ms = now
        self._closed = False
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock_dir(directory)
        self.load_seconds = 0.0
        self._load_logs()
        # The log cleaner (compacted topics) runs on its own threads once the logs are loaded;
        # none without a cleaner config (tests of other parts) or with log.cleaner.enable=false.
        self.cleaner: LogCleaner | None = None
        if cleaner_config is not None and cleaner_config.enable_cleaner \
                and cleaner_config.num_threads > 0:
            self.cleaner = LogCleaner(cleaner_config, self._logs_with_dirs, self.clock)
            for key, log in self._logs.items():
                self._report_truncations(key, log)
            self.cleaner.start()

    # -- startup ---------------------------------------------------------------------------
    def _lock_dir(self, directory: Path) -> None:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise RuntimeError(f"log dir {directory} is in use by another process") from exc
        self._lock_files.append(fd)

    def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CorruptCheckpointError as exc:
            logger.warning("ignoring corrupt checkpoint: %s", exc)
            return {}

    def _load_logs(self) -> None:
        started = self.clock()
        jobs = []
        for directory in self.log_dirs:
            clean = (directory / CLEAN_SHUTDOWN_MARKER).exists()
            recovery_points = self._read_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT)
            high_watermarks = self._read_checkpoint(directory / REPLICATION_OFFSET_CHECKPOINT)
            for child in sorted(directory.iterdir()):
                if not child.is_dir():
                    continue
                name = child.name
                if name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)  # a deletion the crash interrupted
                    continue
                if name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                    continue
                try:
                    key = parse_topic_partition(child)
                except ValueError:
                    continue
                if key[0] in self.excluded_topics:
                    continue
                jobs.append((directory, child, key, clean, recovery_points.get(key, 0),
                             start_offsets.get(key, 0), high_watermarks.get(key)))
        workers = self.recovery_threads_per_data_dir * len(self.log_dirs)

        def load(job: tuple) -> tuple[Path, TopicPartition, Log]:  # type: ignore[type-arg]
            directory, child, key, clean, recovery_point, start_offset, hw = job
            log = Log(child, self.config_for(key[0]), recovery_point=recovery_point,
                      log_start_offset=start_offset, had_clean_shutdown=clean,
                      high_watermark=hw, clock=self.clock, deleter=self.deleter,
                      inline_flush=self.inline_flush, dir_failures=self.dir_failures)
            return directory, key, log

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-recovery") as pool:
            for directory, key, log in pool.map(load, jobs):
                if key in self._logs:
                    log.close()
                    raise RuntimeError(f"duplicate log directories for {key[0]}-{key[1]}: "
                                       f"{self._logs[key].dir} and {log.dir}")
                self._logs[key] = log
                self._dir_of[key] = directory
        for directory in self.log_dirs:
            (directory / CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
        self.load_seconds = (self.clock() - started) / 1000

    def _report_truncations(self, key: TopicPartition, log: Log) -> None:
        if self.cleaner is not None:
            log.on_truncation = functools.partial(self.cleaner.on_truncation, key)

    def _logs_with_dirs(self) -> dict[TopicPartition, tuple[Path, Log]]:
        with self._lock:
            return {key: (self._dir_of[key], log) for key, log in self._logs.items()}

    # -- configs ---------------------------------------------------------------------------
    def config_for(self, topic: str) -> LogConfig:
        if topic in self._topic_config_overrides:
            return self._topic_config_overrides[topic]
        if self._topic_configs is not None:
            config = self._topic_configs(topic)
            if config is not None:
                return config
        return self.default_config

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        with self._lock:
            self._topic_config_overrides[topic] = config
            for (log_topic, _), log in self._logs.items():
                if log_topic == topic:
                    log.update_config(config)
        if self.cleaner is not None and config.compact:
            self.cleaner.wake_up()

    # -- logs ------------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def topic_partitions(self) -> list[TopicPartition]:
        return list(self._logs)

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def _next_log_dir(self) -> Path:
        counts = {directory: 0 for directory in self.log_dirs}
        for directory in self._dir_of.values():
            counts[directory] += 1
        return min(self.log_dirs, key=lambda d: counts[d])  # ties: first in log.dirs order

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          topic_id: uuid.UUID | str | None = None) -> Log:
        key = (topic, partition)
        with self._lock:
            if self._closed:
                raise RuntimeError("log manager is closed")
            log = self._logs.get(key)
            if log is not None:
                if topic_id is not None:
                    log.assign_topic_id(topic_id)
                if config is not None:
                    log.update_config(config)
                return log
            directory = self._next_log_dir()
            log = Log(directory / log_dir_name(topic, partition), config or self.config_for(topic),
                      topic_id=topic_id, clock=self.clock, deleter=self.deleter,
                      inline_flush=self.inline_flush, dir_failures=self.dir_failures)
            # The new directory's entry in the data directory is made durable by the
            # background flush (`flush_dirty`), not here on the caller's (event loop) thread.
            self._dirs_to_sync.add(directory)
            self._logs[key] = log
            self._dir_of[key] = directory
            self._report_truncations(key, log)
            return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Renames the dir to `<topic>-<partition>.<uuid>-delete`; files go after
        `file.delete.delay.ms` (reads already handed out keep working until then)."""
        key = (topic, partition)
        with self._lock:
            log = self._logs.pop(key, None)
            directory = self._dir_of.pop(key, None)
            if log is None or directory is None:
                return False
            log.mark_deleted()
            target = directory / f"{log_dir_name(topic, partition)}.{uuid.uuid4().hex}" \
                f"{DELETE_DIR_SUFFIX}"
            log.rename_dir(target)
            fsync_dir(directory)

            def remove() -> None:
                log.close_handlers()
                shutil.rmtree(target, ignore_errors=True)

            self.deleter.schedule(self.clock() + log.config.file_delete_delay_ms, remove)
            return True

    # -- periodic work ---------------------------------------------------------------------
    def _logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        grouped: dict[Path, dict[TopicPartition, Log]] = {d: {} for d in self.log_dirs}
        with self._lock:
            for key, log in self._logs.items():
                grouped[self._dir_of[key]][key] = log
        return grouped

    def checkpoint_recovery_points(self) -> None:
        for directory, logs in self._logs_by_dir().items():
            OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).write(
                {key: log.recovery_point for key, log in logs.items()})

    def checkpoint_log_start_offsets(self) -> None:
        for directory, logs in self._logs_by_dir().items():
            OffsetCheckpointFile(directory / LOG_START_OFFSET_CHECKPOINT).write(
                {key: log.log_start_offset for key, log in logs.items()})

    def checkpoint_high_watermarks(self) -> None:
        for directory, logs in self._logs_by_dir().items():
            OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).write(
                {key: log.high_watermark for key, log in logs.items()})

    def checkpoint_all(self) -> None:
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()

    def run_retention(self, now_ms: int | None = None) -> int:
        """Deletes segments past retention.ms / retention.bytes / the log start offset."""
        now = self.clock() if now_ms is None else now_ms
        deleted = 0
        for log in self.all_logs():
            try:
                deleted += log.delete_old_segments(now)
            except Exception:  # one broken log must not stop retention for the others
                logger.exception("retention failed for %s", log)
        if deleted:
            self.checkpoint_log_start_offsets()
        self._last_retention_ms = now
        return deleted

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Flushes logs due by flush.ms or flush.messages, and in the background what rolls
        and new logs left to flush (see `Log.flush_rolled`); returns how many were flushed."""
        now = self.clock() if now_ms is None else now_ms
        flushed = 0
        with self._lock:
            directories, self._dirs_to_sync = self._dirs_to_sync, set()
        for directory in directories:
            fsync_dir(directory)
        for log in self.all_logs():
            try:
                if log.needs_time_flush(now) or (
                        log.unflushed_messages > 0
                        and log.unflushed_messages >= log.config.flush_messages):
                    log.flush()
                    flushed += 1
                elif log.background_flush_due():
                    log.flush_rolled()
                    flushed += 1
            except Exception:
                logger.exception("flush failed for %s", log)
        return flushed

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forgets, in every log, the producers idle for producer.id.expiration.ms (never one
        with an open transaction). Returns how many went."""
        now = self.clock() if now_ms is None else now_ms
        removed = 0
        for log in self.all_logs():
            try:
                removed += log.remove_expired_producers(now, self.producer_id_expiration_ms)
            except Exception:
                logger.exception("producer expiration failed for %s", log)
        self._last_producer_expiration_ms = now
        return removed

    def tick(self, now_ms: int | None = None) -> None:
        """The broker's periodic entry point (call every ~second from a worker thread)."""
        now = self.clock() if now_ms is None else now_ms
        if now - self._last_retention_ms >= self.retention_check_interval_ms:
            self.run_retention(now)
        self.flush_dirty(now)
        if now - self._last_recovery_checkpoint_ms >= self.flush_checkpoint_interval_ms:
            self.checkpoint_recovery_points()
            self._last_recovery_checkpoint_ms = now
        if now - self._last_start_offset_checkpoint_ms >= \
                self.flush_start_offset_checkpoint_interval_ms:
            self.checkpoint_log_start_offsets()
            self._last_start_offset_checkpoint_ms = now
        if now - self._last_hw_checkpoint_ms >= self.high_watermark_checkpoint_interval_ms:
            self.checkpoint_high_watermarks()
            self._last_hw_checkpoint_ms = now
        if now - self._last_producer_expiration_ms >= \
                self.producer_id_expiration_check_interval_ms:
            self.remove_expired_producers(now)
        self.deleter.run_due(now)

    # -- reporting -------------------------------------------------------------------------
    def describe_log_dirs(self) -> list[LogDirInfo]:
        result = []
        for directory, logs in self._logs_by_dir().items():
            try:
                stats = os.statvfs(directory)
                total, usable = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
                error = None
            except OSError as exc:
                total = usable = -1
                error = str(exc)
            partitions = [PartitionDirInfo(topic, partition, log.size_in_bytes)
                          for (topic, partition), log in sorted(logs.items())]
            result.append(LogDirInfo(str(directory), error, total, usable, partitions))
        return result

    # -- shutdown --------------------------------------------------------------------------
    def close(self) -> None:
        """Flushes and closes every log, writes checkpoints and the clean-shutdown markers."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs = list(self._logs.values())
        if self.cleaner is not None:
            self.cleaner.shutdown()  # a cleaning in progress finishes or aborts first
        workers = self.recovery_threads_per_data_dir * len(self.log_dirs)
        with ThreadPoolExecutor(max_workers=max(workers, 4),
                                thread_name_prefix="log-close") as pool:
            list(pool.map(Log.flush, logs))  # fsyncs overlap across threads (GIL released)
            self.checkpoint_all()
            list(pool.map(Log.close, logs))
        self.deleter.run_all()
        for directory in self.log_dirs:
            atomic_write(directory / CLEAN_SHUTDOWN_MARKER, "")
        for fd in self._lock_files:
            os.close(fd)
        self._lock_files = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
