"""Replica placement for new partitions: Kafka's StripedReplicaPlacer.

Goals, in order (as Kafka's placer states them):
1. spread each partition's replicas over distinct racks (a no-op when no broker has
   `broker.rack`);
2. spread replicas, and above all leaders, evenly over the brokers;
3. prefer unfenced brokers: a fenced broker only gets a (follower) replica when the unfenced
   ones are not enough.
Constraints: no broker holds two replicas of a partition, and every leader (first replica) is
unfenced.

Racks are visited round-robin from an offset that advances by one per partition, and within a
rack brokers are visited round-robin too, from an offset that also advances per partition: the
characteristic "striped" pattern (racks A, B, C: partition 0 on A0 B0 C0, partition 1 on
B1 C1 A1...). Start offsets are random (the rng is injected, so tests are deterministic); once
as many partitions as there are unfenced brokers have been placed, racks and brokers are
shuffled so that the next round does not repeat the same replica sets. When partitions are
added to an existing topic, the offsets continue from the topic's last partition, so leaders
keep rotating instead of restarting at a random broker.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


class PlacementError(ValueError):
    """Placement is impossible (INVALID_REPLICATION_FACTOR in Kafka); the message says why."""


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker replicas may be placed on: registered and not in controlled shutdown."""

    broker_id: int
    rack: str | None = None
    fenced: bool = False


@dataclass
class _BrokerRing:
    """Brokers visited round-robin; each broker is returned at most once per epoch."""

    brokers: list[int] = field(default_factory=list)
    index: int = 0  # brokers returned in the current epoch
    offset: int = 0
    epoch: int = 0

    def initialize(self, rng: random.Random, previous_offset: int | None = None) -> None:
        if self.brokers:
            self.brokers.sort()
            if previous_offset is None:
                self.offset = rng.randrange(len(self.brokers))
            else:
                self.offset = (previous_offset + 1) % len(self.brokers)

    def next(self, epoch: int) -> int | None:
        if not self.brokers:
            return None
        if self.epoch != epoch:
            # A new partition: start one broker further than the last one started at.
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return None
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


@dataclass
class _Rack:
    unfenced: _BrokerRing = field(default_factory=_BrokerRing)
    fenced: _BrokerRing = field(default_factory=_BrokerRing)

    def next_unfenced(self, epoch: int) -> int | None:
        return self.unfenced.next(epoch)

    def next(self, epoch: int) -> int | None:
        """The next unfenced broker, else the next fenced one (fenced only as a last resort)."""
        broker = self.unfenced.next(epoch)
        return broker if broker is not None else self.fenced.next(epoch)


def _rack_key(rack: str | None) -> tuple[bool, str]:
    return (rack is not None, rack or "")  # brokers without a rack sort first, as in Kafka


class StripedReplicaPlacer:
    """Places the replicas of new partitions; one instance per placement request."""

    def __init__(self, rng: random.Random, brokers: Iterable[UsableBroker],
                 existing: Sequence[Sequence[int]] = ()) -> None:
        self.rng = rng
        self.racks: dict[str | None, _Rack] = {}
        rack_of: dict[int, str | None] = {}
        for broker in brokers:
            rack_of[broker.broker_id] = broker.rack
            rack = self.racks.setdefault(broker.rack, _Rack())
            (rack.fenced if broker.fenced else rack.unfenced).brokers.append(broker.broker_id)
        self.num_brokers = len(rack_of)
        self.num_unfenced = sum(len(r.unfenced.brokers) for r in self.racks.values())
        for name, rack in self.racks.items():
            rack.fenced.initialize(rng)
            rack.unfenced.initialize(rng, _previous_broker_offset(
                rack_of, existing, name, sorted(rack.unfenced.brokers)))
        self.rack_names = sorted(self.racks, key=_rack_key)
        previous_rack = _previous_rack_offset(rack_of, existing, self.rack_names)
        if previous_rack is not None:
            self.offset = (previous_rack + 1) % len(self.rack_names)
        else:
            self.offset = rng.randrange(len(self.rack_names)) if self.rack_names else 0
        # Kafka resets its iteration epoch to 0 after a shuffle; a ring not visited since
        # would then mistake the new epoch for its old one and resume a stale index. Here the
        # epoch only grows, and a separate count decides when to shuffle.
        self.epoch = 0
        self.placed_since_shuffle = 0

    def check(self, replication_factor: int) -> None:
        """Raises PlacementError, with Kafka's message, when no placement is possible."""
        if replication_factor <= 0:
            raise PlacementError(f"Invalid replication factor {replication_factor}: the "
                                 "replication factor must be positive.")
        if self.num_unfenced == 0:
            raise PlacementError("All brokers are currently fenced.")
        if replication_factor > self.num_brokers:
            raise PlacementError(f"The target replication factor of {replication_factor} "
                                 f"cannot be reached because only {self.num_brokers} "
                                 "broker(s) are registered.")

    def place(self, replication_factor: int) -> list[int]:
        """The replicas of one more partition; the first (the leader) is always unfenced."""
        self.check(replication_factor)
        if self.placed_since_shuffle == self.num_unfenced and self.num_unfenced > 1:
            # Every unfenced broker has led one partition of this round: shuffle so that the
            # next round does not repeat the same replica sets.
            self._shuffle()
            self.placed_since_shuffle = 0
        if self.offset >= len(self.rack_names):
            self.offset = 0
        epoch = self.epoch
        names = self.rack_names
        first_rack = self.offset
        while True:  # the leader: the first unfenced broker from the offset rack on
            leader = self.racks[names[first_rack]].next_unfenced(epoch)
            if leader is not None:
                break
            first_rack = (first_rack + 1) % len(names)
        replicas = [leader]
        rack_index = self.offset
        skip_rack: int | None = first_rack  # the leader's rack gives no follower until wrap
        for _ in range(1, replication_factor):
            while True:
                broker = None
                if rack_index == skip_rack:
                    skip_rack = None
                else:
                    broker = self.racks[names[rack_index]].next(epoch)
                rack_index = (rack_index + 1) % len(names)
                if broker is not None:
                    break
            replicas.append(broker)
        self.epoch += 1
        self.placed_since_shuffle += 1
        self.offset += 1
        return replicas

    def place_all(self, num_partitions: int, replication_factor: int) -> list[list[int]]:
        self.check(replication_factor)
        return [self.place(replication_factor) for _ in range(num_partitions)]

    def _shuffle(self) -> None:
        self.rng.shuffle(self.rack_names)
        for rack in self.racks.values():
            self.rng.shuffle(rack.unfenced.brokers)
            self.rng.shuffle(rack.fenced.brokers)


def _previous_rack_offset(rack_of: dict[int, str | None], existing: Sequence[Sequence[int]],
                          rack_names: list[str | None]) -> int | None:
    """The position of the rack that led the topic's last partition, if known."""
    if not existing or not existing[-1]:
        return None
    last_leader = existing[-1][0]
    if last_leader not in rack_of:
        return None
    return rack_names.index(rack_of[last_leader])


def _previous_broker_offset(rack_of: dict[int, str | None], existing: Sequence[Sequence[int]],
                            rack: str | None, unfenced: list[int]) -> int | None:
    """The position, among this rack's sorted unfenced brokers, of the rack's broker in the
    topic's latest partition placed on the rack, if known."""
    for replicas in reversed(existing):
        for broker in replicas:
            if broker in rack_of and rack_of[broker] == rack:
                return unfenced.index(broker) if broker in unfenced else None
    return None


def place_replicas(rng: random.Random, brokers: Iterable[UsableBroker], num_partitions: int,
                   replication_factor: int,
                   existing: Sequence[Sequence[int]] = ()) -> list[list[int]]:
    """Replicas for `num_partitions` new partitions (raises PlacementError).

    `existing` holds the replicas of the topic's current partitions, in partition order, when
    partitions are added to a topic."""
    return StripedReplicaPlacer(rng, brokers, existing).place_all(num_partitions,
                                                                   replication_factor)
