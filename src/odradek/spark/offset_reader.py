"""Driver side: the partitions a subscription covers and their offsets (Spark's
KafkaOffsetReaderAdmin), through Odradek's blocking admin client.

An `OffsetReader` is part of a reader object that Spark pickles; its admin client is opened on
first use and never pickled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from odradek.client.admin import Admin
from odradek.client.admin_types import IsolationLevel, OffsetSpec, TopicDescription
from odradek.client.config import ADMIN_CONFIG
from odradek.client.types import TopicPartition
from odradek.spark.offsets import EARLIEST, LATEST, PartitionOffsets
from odradek.spark.options import (
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    OffsetLimit,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
    client_config,
)


class OffsetReader:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Admin | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_admin": None}

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(client_config(ADMIN_CONFIG, self.options.client))
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # ------------------------------------------------------------------------------ partitions

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (topics that do not exist have none)."""
        subscription = self.options.subscription
        if subscription.partitions:
            return sorted(set(subscription.partitions))
        if subscription.pattern is not None:
            topics = [name for name in self.admin.list_topics() if subscription.matches(name)]
        else:
            topics = list(subscription.topics)
        if not topics:
            return []
        described = self.admin.describe_topics(topics, raise_errors=False)
        return sorted(
            TopicPartition(name, info.partition)
            for name, description in described.items()
            if isinstance(description, TopicDescription)
            for info in description.partitions
        )

    # ------------------------------------------------------------------------------ offsets

    def earliest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list({tp: OffsetSpec.EARLIEST_TIMESTAMP for tp in partitions})

    def latest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        """End offsets: the high watermark, or the last stable offset under read_committed."""
        return self._list({tp: OffsetSpec.LATEST_TIMESTAMP for tp in partitions})

    def _list(self, specs: dict[TopicPartition, int]) -> PartitionOffsets:
        if not specs:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED if self.options.read_committed
                     else IsolationLevel.READ_UNCOMMITTED)
        results = self.admin.list_offsets(specs, isolation_level=isolation)
        return {tp: info.offset for tp, info in results.items()}  # type: ignore[union-attr]

    def resolve(self, limit: OffsetLimit, partitions: list[TopicPartition]) -> PartitionOffsets:
        """Concrete offsets of `partitions` for a starting or ending `limit`."""
        match limit:
            case EarliestOffsets():
                return self.earliest(partitions)
            case LatestOffsets():
                return self.latest(partitions)
            case SpecificOffsets(offsets):
                _check_all_given(offsets, partitions, "offsets")
                earliest = self.earliest(tp for tp, o in offsets.items() if o == EARLIEST)
                latest = self.latest(tp for tp, o in offsets.items() if o == LATEST)
                return {tp: earliest.get(tp, latest.get(tp, offset))
                        for tp, offset in offsets.items()}
            case SpecificTimestamps(timestamps):
                _check_all_given(timestamps, partitions, "timestamps")
                return self._for_timestamps(timestamps)
            case GlobalTimestamp(timestamp):
                return self._for_timestamps({tp: timestamp for tp in partitions})
        raise TypeError(f"not an offset limit: {limit!r}")

    def _for_timestamps(self, timestamps: PartitionOffsets) -> PartitionOffsets:
        found = self._list(dict(timestamps))
        missing = [tp for tp, offset in found.items() if offset < 0]
        if missing and self.options.timestamp_strategy == "error":
            tp = missing[0]
            raise ValueError(f"No offset matched from request of topic-partition {tp} and "
                             f"timestamp {timestamps[tp]}.")
        found.update(self.latest(missing))
        return found


def _check_all_given(given: PartitionOffsets, partitions: list[TopicPartition],
                     what: str) -> None:
    if set(given) != set(partitions):
        raise ValueError(
            f"If startingOffsets contains specific {what}, you must specify all "
            "TopicPartitions.\nUse -1 for latest, -2 for earliest.\n"
            f"Specified: {sorted(map(str, given))} Assigned: {sorted(map(str, partitions))}")
