"""Opening a log directory and recovering it after a crash (Kafka's LogLoader).

1. Leftovers of interrupted operations go: `.deleted`, `.cleaned` and `.tmp` files are removed;
   a `.swap` segment (a finished cleaner/compaction output) replaces the segments it covers.
2. Index files without a segment are removed; a segment whose index is missing or fails its
   sanity check (size, order, positions inside the log) gets its indexes rebuilt.
3. After an unclean shutdown every segment from the one holding the recovery point onwards is
   scanned: structure, CRC and increasing offsets. The first bad or torn batch truncates the
   log there; later segments are deleted. A zero-filled (preallocated) tail is a bad batch.
4. The log start offset, recovery point and leader-epoch cache are reconciled with the data.
5. `recovered_from` tells the log where the first recovered segment starts: the log then replays
   its producer state from a snapshot at or below it, which rewrites the `.txnindex` files of
   the recovered segments (an aborted transaction's entry needs the producer state, which a
   segment scan alone does not have).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.protocol.errors import CorruptRecordError, DecodeError
from odradek.storage.index import CorruptIndexError
from odradek.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)

if TYPE_CHECKING:
    from odradek.storage.log import Log

logger = logging.getLogger(__name__)

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    next_offset: int
    log_start_offset: int
    recovery_point: int
    truncated_bytes: int
    recovered_from: int | None = None  # base offset of the first recovered segment


def _base_offset(path: Path) -> int | None:
    stem = path.name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


class LogLoader:
    def __init__(self, log: Log, recovery_point: int, log_start_offset: int,
                 had_clean_shutdown: bool) -> None:
        self.log = log
        self.dir = log.dir
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.had_clean_shutdown = had_clean_shutdown
        self.truncated_bytes = 0
        self.recovered_from: int | None = None

    def _open_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        config = self.log.config
        return LogSegment(self.dir, base_offset, index_interval_bytes=config.index_interval_bytes,
                          max_index_size=config.segment_index_bytes,
                          created_ms=self.log.clock(), suffix=suffix)

    def load(self) -> LoadedLog:
        self._remove_temp_files_and_complete_swaps()
        segments = self._load_segments()
        epoch_cache = self.log.leader_epoch_cache
        if not self.had_clean_shutdown:
            segments = self._recover(segments)
        if not segments:
            segments = [self.log._new_segment(max(self.log_start_offset, 0))]
        active = segments[-1]
        next_offset = active.read_next_offset()
        active.make_active()
        log_start = max(self.log_start_offset, segments[0].base_offset)
        if self.had_clean_shutdown:
            recovery_point = next_offset
        else:
            recovery_point = min(self.recovery_point, next_offset)
        if log_start > next_offset:
            # Data the checkpointed start offset promised is gone: restart empty at it.
            for segment in segments:
                segment.delete()
            segments = [self.log._new_segment(log_start)]
            next_offset = recovery_point = log_start
            epoch_cache.clear_and_flush()
        epoch_cache.truncate_from_end(next_offset)
        epoch_cache.truncate_from_start(log_start)
        return LoadedLog(segments, next_offset, log_start, recovery_point, self.truncated_bytes,
                         self.recovered_from)

    # -- step 1 ----------------------------------------------------------------------------
    def _remove_temp_files_and_complete_swaps(self) -> None:
        swaps = []
        for path in sorted(self.dir.iterdir()):
            name = path.name
            if not path.is_file():
                continue
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                path.unlink(missing_ok=True)
            elif name.endswith(SWAP_SUFFIX):
                if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                    swaps.append(path)
                elif not name.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX):
                    path.unlink(missing_ok=True)  # swapped offset/time indexes are rebuilt
        for swap in swaps:
            base = _base_offset(swap)
            if base is None:
                swap.unlink()
                continue
            segment = self._open_segment(base, SWAP_SUFFIX)
            next_offset = segment.read_next_offset()
            segment.close_handlers()
            # The swap segment replaces every segment within its offset range.
            for path in self.dir.glob("*" + LOG_SUFFIX):
                other = _base_offset(path)
                if other is not None and base <= other < next_offset:
                    for suffix in _SEGMENT_SUFFIXES:
                        (self.dir / f"{other:020d}{suffix}").unlink(missing_ok=True)
            segment.offset_index.delete()  # indexes are rebuilt when the segment loads
            segment.time_index.delete()
            # The cleaned txn index (aborted transactions whose markers the cleaner kept)
            # cannot be rebuilt from the segment alone: it moves with the segment.
            txn_swap = self.dir / f"{base:020d}{TXN_INDEX_SUFFIX}{SWAP_SUFFIX}"
            if txn_swap.exists():
                os.replace(txn_swap, self.dir / f"{base:020d}{TXN_INDEX_SUFFIX}")
            os.replace(swap, self.dir / f"{base:020d}{LOG_SUFFIX}")
        for path in self.dir.glob("*" + TXN_INDEX_SUFFIX + SWAP_SUFFIX):
            path.unlink(missing_ok=True)  # a txn index whose segment swap never happened

    # -- step 2 ----------------------------------------------------------------------------
    def _load_segments(self) -> list[LogSegment]:
        log_bases = set()
        for path in self.dir.iterdir():
            base = _base_offset(path)
            if base is None:
                continue
            if path.name.endswith(LOG_SUFFIX):
                log_bases.add(base)
        for path in self.dir.iterdir():  # orphaned index files
            base = _base_offset(path)
            if base is not None and base not in log_bases and path.name.endswith(
                    (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                path.unlink(missing_ok=True)
        segments: list[LogSegment] = []
        bases = sorted(log_bases)
        for position, base in enumerate(bases):
            segment = self._open_segment(base)
            try:
                segment.sanity_check()
            except CorruptIndexError as exc:
                logger.warning("rebuilding indexes of %s: %s", segment.log_path, exc)
                if self._recover_segment(segment, None) > 0:
                    # The rebuild found a torn or corrupt batch and cut the segment there: the
                    # log ends at the tear, so every later segment goes (as in step 3, which
                    # would otherwise see this segment intact and keep them, leaving a gap).
                    segments.append(segment)
                    self._delete_segments_after(segment, bases[position + 1:])
                    return segments
            segments.append(segment)
        return segments

    def _delete_segments_after(self, torn: LogSegment, later_bases: list[int]) -> None:
        for base in later_bases:
            later = self._open_segment(base)
            self.truncated_bytes += later.size
            later.delete()
        logger.warning("recovered %s: truncated at offset %d; deleted %d later segment(s)",
                       torn.log_path, torn.read_next_offset(), len(later_bases))

    def _recover_segment(self, segment: LogSegment, min_offset: int | None) -> int:
        # An index rebuild passes no epoch cache: epochs come from the recovery pass or exist.
        segment.offset_index.delete()
        segment.time_index.delete()
        truncated = segment.recover(None, min_offset)
        self.truncated_bytes += truncated
        self._note_recovered(segment)
        return truncated

    def _note_recovered(self, segment: LogSegment) -> None:
        if self.recovered_from is None or segment.base_offset < self.recovered_from:
            self.recovered_from = segment.base_offset

    # -- step 3 ----------------------------------------------------------------------------
    def _recover(self, segments: list[LogSegment]) -> list[LogSegment]:
        if not segments:
            return segments
        bases = [segment.base_offset for segment in segments]
        first = 0
        for index, base in enumerate(bases):
            if base <= self.recovery_point:
                first = index
        expected: int | None = None
        if first > 0:
            try:
                expected = segments[first - 1].read_next_offset()
            except (CorruptRecordError, DecodeError):
                expected = None
        epoch_cache = self.log.leader_epoch_cache
        kept = segments[:first]
        for index in range(first, len(segments)):
            segment = segments[index]
            truncated = segment.recover(epoch_cache, expected)
            self.truncated_bytes += truncated
            self._note_recovered(segment)
            kept.append(segment)
            if truncated > 0:
                for later in segments[index + 1:]:
                    self.truncated_bytes += later.size
                    later.delete()
                logger.warning("recovered %s: truncated %d bytes at offset %d",
                               segment.log_path, truncated, segment.read_next_offset())
                break
            expected = segment.read_next_offset() if segment.size else expected
        # An empty segment other than the last holds nothing: drop it. Not the first one: its
        # base offset is the log start offset (the cleaner leaves an empty first segment when
        # every record of it was superseded; dropping it would move the start, and a consumer
        # at an offset below would get OFFSET_OUT_OF_RANGE where Kafka serves the next batch).
        result = []
        for index, segment in enumerate(kept):
            if segment.size == 0 and 0 < index < len(kept) - 1:
                segment.delete()
            else:
                result.append(segment)
        return result
