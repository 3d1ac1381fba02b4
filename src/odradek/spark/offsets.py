"""Offsets as Spark's Kafka connector writes them, and the arithmetic on offset ranges.

* The offset JSON ``{"topic": {"0": 23, "1": -2}}`` (Spark's JsonUtils): the streaming source's
  checkpointed offset, ``startingOffsets`` / ``endingOffsets``; -2 means earliest and -1 latest.
  Topics and partitions are written in sorted order, so equal offsets give equal JSON (the engine
  compares offsets by their JSON).
* `OffsetRange`: ``[from_offset, until_offset)`` of one partition, the unit a task reads.
* `split_ranges`: Spark's KafkaOffsetRangeCalculator (``minPartitions``,
  ``maxRecordsPerPartition``).
* `rate_limit`: Spark's KafkaMicroBatchStream.rateLimit, which shares ``maxOffsetsPerTrigger``
  among partitions in proportion to their backlog.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.client.types import TopicPartition

EARLIEST = -2
LATEST = -1

PartitionOffsets = dict[TopicPartition, int]
#: an offset as the Python Data Source API carries it: a dict of primitive values
OffsetDict = dict[str, dict[str, int]]

_INT64_MAX = 2**63 - 1


def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> OffsetDict:
    """``{tp: offset}`` -> ``{"topic": {"partition": offset}}``, sorted."""
    result: OffsetDict = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def offsets_from_dict(data: Mapping[str, Any]) -> PartitionOffsets:
    """The inverse of `offsets_to_dict`; ValueError on anything else."""
    try:
        offsets = {TopicPartition(topic, int(partition)): offset
                   for topic, partitions in data.items()
                   for partition, offset in partitions.items()}
    except (AttributeError, TypeError, ValueError):
        raise ValueError(
            f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}}}}, got {data!r}") from None
    invalid = [(tp, offset) for tp, offset in offsets.items() if type(offset) is not int]
    if invalid:
        tp, offset = invalid[0]
        raise ValueError(f"offset of {tp} is not an integer: {offset!r}")
    return offsets


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


def offsets_from_json(text: str) -> PartitionOffsets:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}},\"topicB\":{{\"0\":-2}}}}, "
            f"got {text}") from None
    return offsets_from_dict(data)


def assignment_from_json(text: str) -> list[TopicPartition]:
    """The ``assign`` option: ``{"topicA":[0,1],"topicB":[2,4]}``."""
    try:
        data = json.loads(text)
        partitions = [TopicPartition(topic, int(p)) for topic, ps in data.items() for p in ps]
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise ValueError(
            f"Expected e.g. {{\"topicA\":[0,1],\"topicB\":[0,1]}}, got {text}") from None
    return partitions


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one topic partition."""

    tp: TopicPartition
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Non-empty ranges, cut so that there are about `min_partitions` of them (large ranges are
    cut in proportion to their size) and none holds more than `max_records_per_partition`."""
    non_empty = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        non_empty = [piece for r in non_empty
                     for piece in _split(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions is None or len(non_empty) >= min_partitions:
        return non_empty
    ideal_size = sum(r.size for r in non_empty) / min_partitions
    # Scala's math.round: half up.
    return [piece for r in non_empty
            for piece in _split(r, max(math.floor(r.size / ideal_size + 0.5), 1))]


def _split(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    start, size = offset_range.from_offset, offset_range.size
    if parts <= 1:
        return [offset_range]
    bounds = [start + int(size * (i / parts)) for i in range(parts)] + [offset_range.until_offset]
    return [OffsetRange(offset_range.tp, low, high)
            for low, high in itertools.pairwise(bounds) if high > low]


def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               end: Mapping[TopicPartition, int]) -> PartitionOffsets:
    """End offsets moved back so that about `limit` records are read from `start`, each
    partition getting a share proportional to its backlog (at least one record, so small
    partitions are not starved). Partitions missing from `start` are left at `end`."""
    sizes = {tp: until - start[tp] for tp, until in end.items()
             if tp in start and until - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    limited: PartitionOffsets = {}
    for tp, until in end.items():
        size = sizes.get(tp)
        if size is None:
            limited[tp] = until
            continue
        share = limit * (size / total)
        share_records = math.ceil(share) if share < 1 else math.floor(share)
        begin = start[tp]
        offset = _INT64_MAX if share_records > _INT64_MAX - begin else begin + share_records
        limited[tp] = min(until, offset)
    return limited
