"""What a consumer reads and where it starts: the assignment and the offset store.

The two seams consumer groups plug into:

* `SubscriptionState` holds the assigned partitions and, per partition, the fetch position,
  pause flag, pending offset reset and the last high watermark / log start / last stable
  offset seen. Partitions come from `assign()` (`assign_from_user`) or from the group
  protocol after each rebalance (`assign_from_group`, see `group`).
* `OffsetStore` says where a newly assigned partition starts (`initial_offsets`: the committed
  offsets) and serves `committed()` / `commit()`. Without a ``group.id`` there are no committed
  offsets (`NoGroupOffsetStore`, Kafka's InvalidGroupIdException for commit calls); with one,
  `group.GroupOffsetStore` asks the group's coordinator (OffsetFetch / OffsetCommit).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from odradek.client.types import TopicPartition
from odradek.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "NoGroupOffsetStore",
    "OffsetAndMetadata",
    "OffsetResetStrategy",
    "OffsetStore",
    "PartitionState",
    "SubscriptionState",
]


@dataclass(frozen=True)
class SubscriptionPattern:
    """A regular expression the group coordinator resolves (Kafka 4.0's SubscriptionPattern,
    re2j syntax, matched against whole topic names): sent as ConsumerGroupHeartbeat's
    SubscribedTopicRegex, so new matching topics join the subscription without the client
    listing topics. Only for `group.protocol=consumer`."""

    pattern: str


class OffsetResetStrategy(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"

    @property
    def timestamp(self) -> int:
        """The ListOffsets timestamp that looks the offset up."""
        if self is OffsetResetStrategy.EARLIEST:
            return -2
        if self is OffsetResetStrategy.LATEST:
            return -1
        raise ValueError("no offset lookup for reset strategy 'none'")


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class OffsetStore(Protocol):
    async def initial_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Where newly assigned partitions start: their committed offsets, when known."""
        ...

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]: ...

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None: ...


class NoGroupOffsetStore:
    """A consumer without ``group.id``: no committed offsets, commit calls are errors."""

    MESSAGE = ("To use the group management or offset commit APIs, you must provide a valid "
               "group.id in the consumer configuration.")

    async def initial_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return {}

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, self.MESSAGE)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, self.MESSAGE)


class PartitionState:
    """One assigned partition's fetch state (Kafka's TopicPartitionState)."""

    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "paused",
                 "position", "position_epoch", "reset_strategy")

    def __init__(self) -> None:
        #: next offset to fetch; None until known (committed offset or reset)
        self.position: int | None = None
        #: leader epoch of the last consumed record (-1 when unknown)
        self.position_epoch = -1
        #: set while the position must be looked up (seek_to_*, OFFSET_OUT_OF_RANGE)
        self.reset_strategy: OffsetResetStrategy | None = None
        self.paused = False
        self.high_watermark = -1
        self.log_start_offset = -1
        self.last_stable_offset = -1

    @property
    def has_valid_position(self) -> bool:
        return self.position is not None and self.reset_strategy is None

    def seek(self, offset: int, epoch: int = -1) -> None:
        self.position = offset
        self.position_epoch = epoch
        self.reset_strategy = None

    def request_reset(self, strategy: OffsetResetStrategy) -> None:
        self.reset_strategy = strategy
        self.position = None


class SubscriptionState:
    """The consumer's assigned partitions and their positions."""

    def __init__(self, default_reset: OffsetResetStrategy) -> None:
        self.default_reset = default_reset
        self._assignment: dict[TopicPartition, PartitionState] = {}

    # -- the assignment source (the user, or the group after a rebalance)
    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Replace the assignment; keeps the state of partitions that stay. Returns the
        partitions no longer assigned."""
        wanted = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        removed = set(self._assignment) - set(wanted)
        self._assignment = {tp: self._assignment.get(tp) or PartitionState() for tp in wanted}
        return removed

    # The group protocol installs its assignment through the same path.
    assign_from_group = assign_from_user

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def state(self, tp: TopicPartition) -> PartitionState | None:
        return self._assignment.get(tp)

    def require(self, tp: TopicPartition) -> PartitionState:
        state = self._assignment.get(TopicPartition(*tp))
        if state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"No current assignment for partition {TopicPartition(*tp)}")
        return state

    def items(self) -> list[tuple[TopicPartition, PartitionState]]:
        return list(self._assignment.items())

    # -- positions
    def missing_positions(self) -> list[TopicPartition]:
        """Partitions with neither a position nor a pending reset (just assigned)."""
        return [tp for tp, s in self._assignment.items()
                if s.position is None and s.reset_strategy is None]

    def awaiting_reset(self) -> dict[TopicPartition, OffsetResetStrategy]:
        return {tp: s.reset_strategy for tp, s in self._assignment.items()
                if s.reset_strategy is not None}

    def fetchable(self) -> list[TopicPartition]:
        return [tp for tp, s in self._assignment.items()
                if s.has_valid_position and not s.paused]

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}
