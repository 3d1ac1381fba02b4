"""Leader epoch -> start offset cache, persisted in `leader-epoch-checkpoint` (Kafka's
LeaderEpochFileCache). Answers OffsetsForLeaderEpoch and drives follower truncation."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from odradek.storage.checkpoint import LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Entries are strictly increasing in both epoch and start offset."""

    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None) -> None:
        self._checkpoint = checkpoint
        # Set by the owning log: checkpoint writes skip their fsync and name the file to it.
        self.defer_sync: Callable[[Path], None] | None = None
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        if checkpoint is not None:
            for epoch, start_offset in checkpoint.read():
                self._assign(EpochEntry(epoch, start_offset))

    # -- queries ---------------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        entries = self._entries
        return entries[-1].epoch if entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[0] if entries else None

    def previous_epoch(self) -> int | None:
        entries = self._entries
        return entries[-2].epoch if len(entries) >= 2 else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            index = self._index_of_epoch(epoch)
            return self._entries[index] if index is not None else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in which `offset` was written (floor by start offset)."""
        with self._lock:
            starts = [entry.start_offset for entry in self._entries]
            index = bisect.bisect_right(starts, offset) - 1
            return self._entries[index].epoch if index >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= requested, end offset of that epoch).

        The end offset of an epoch is the start offset of the next higher epoch, or the log end
        offset for the latest epoch. Unknown epochs give (-1, -1); an epoch older than every
        entry gives (requested, start offset of the first entry).
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._entries[-1].epoch == requested_epoch:
                return requested_epoch, log_end_offset
            epochs = [entry.epoch for entry in self._entries]
            higher = bisect.bisect_right(epochs, requested_epoch)
            if higher == len(epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._entries[0].start_offset
            return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    # -- updates ---------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Records that `epoch` starts at `start_offset`; persists if anything changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False  # fast path: the common case on every append
        with self._lock:
            if not self._assign(EpochEntry(epoch, start_offset)):
                return False
            self._flush()
            return True

    def _assign(self, entry: EpochEntry) -> bool:
        latest = self._entries[-1] if self._entries else None
        if latest is not None and not (entry.epoch != latest.epoch
                                       or entry.start_offset < latest.start_offset):
            return False
        # Drop entries that would break monotonicity with the new one.
        while self._entries and (self._entries[-1].epoch >= entry.epoch
                                 or self._entries[-1].start_offset >= entry.start_offset):
            self._entries.pop()
        self._entries.append(entry)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Removes entries starting at or after `end_offset` (log truncated to end_offset)."""
        with self._lock:
            if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
                return
            self._entries = [entry for entry in self._entries if entry.start_offset < end_offset]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drops entries wholly before `start_offset`; the epoch covering it now starts there."""
        with self._lock:
            removed = [entry for entry in self._entries if entry.start_offset <= start_offset]
            if not removed:
                return
            kept = [entry for entry in self._entries if entry.start_offset > start_offset]
            entries = [EpochEntry(removed[-1].epoch, start_offset), *kept]
            if entries != self._entries:
                self._entries = entries
                self._flush()

    def clear_and_flush(self) -> None:
        with self._lock:
            self._entries = []
            self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def move_checkpoint(self, path: Path) -> None:
        """The log directory was renamed (the file moved with it)."""
        if self._checkpoint is not None:
            self._checkpoint.path = path

    def _flush(self) -> None:
        if self._checkpoint is None:
            return
        if self.defer_sync is None:
            self._checkpoint.write(self._entries)
            return
        # Written now (a killed process loses nothing: the page cache keeps it), made durable
        # by the owner's background flush (see `Log.flush_rolled`).
        self._checkpoint.write(self._entries, sync=False)
        self.defer_sync(self._checkpoint.path)

    def _index_of_epoch(self, epoch: int) -> int | None:
        epochs = [entry.epoch for entry in self._entries]
        index = bisect.bisect_left(epochs, epoch)
        return index if index < len(epochs) and epochs[index] == epoch else None
