"""Replica placement for new partitions: Kafka's StripedReplicaPlacer.

Goals, in order (as Kafka's placer states them):
1. spread each partition's replicas over distinct racks (a no-op when no broker has
   `broker.rack`);
2. spread replicas, and above all leaders, evenly over the brokers;
3. prefer unfenced brokers: within a rack, a fenced broker only gets a (follower) replica
   once the rack's unfenced brokers are all taken by the partition (as in Kafka, spreading
   over racks comes first).
Constraints: no broker holds two replicas of a partition, and every leader (first replica) is
unfenced.

Racks are visited round-robin from an offset that advances by one per partition (the leader
comes from the first rack, from that offset on, with an unfenced broker; followers from the
next racks): the characteristic "striped" pattern (racks A, B, C: partition 0 on A0 B0 C0,
partition 1 on B1 C1 A1...). Within a rack brokers are handed out round-robin too; unlike
Kafka, a rack keeps separate offsets for the leaders and the followers it gives, so leaders
rotate over all of a rack's brokers whatever the number of racks (see `_Rack`). Start offsets
are random (the rng is injected, so tests are deterministic); once as many partitions as there
are unfenced brokers have been placed, racks and brokers are shuffled so that the next round
does not repeat the same replica sets. When partitions are added to an existing topic, the
offsets continue after the topic's latest partitions, so leaders keep rotating instead of
restarting at a random broker.
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
class _Rack:
    """A rack's brokers, handed out round-robin, each at most once per partition (epoch).

    Kafka keeps one offset per broker list, advanced once per partition that visits the rack,
    so the broker a rack offers as leader depends on how many partitions visited it in
    between: with 2 racks of 2 brokers, rack A leads every other partition and offers the same
    broker each time, and half the brokers never lead. Here the leader offset advances only
    when the rack gives a leader and the follower offset only when it gives followers, so both
    rotate over all of the rack's brokers.
    """

    unfenced: list[int] = field(default_factory=list)
    fenced: list[int] = field(default_factory=list)
    leader_offset: int = 0
    follower_offset: int = 0
    fenced_offset: int = 0
    # the partition being placed, and what it has drawn from this rack so far
    epoch: int = -1
    start: int = 0
    drawn_unfenced: int = 0
    drawn_fenced: int = 0

    def _begin(self, epoch: int, start: int) -> None:
        self.epoch = epoch
        self.start = start
        self.drawn_unfenced = 0
        self.drawn_fenced = 0

    def next_leader(self, epoch: int) -> int | None:
        """The leader of a new partition: the first draw of the epoch, unfenced."""
        if not self.unfenced:
            return None
        self._begin(epoch, self.leader_offset)
        self.leader_offset = (self.leader_offset + 1) % len(self.unfenced)
        return self.next(epoch)

    def next(self, epoch: int) -> int | None:
        """The next broker of this rack for the partition: unfenced ones first, fenced ones
        only once those are all taken; None when the rack has nothing left."""
        if self.epoch != epoch:
            self._begin(epoch, self.follower_offset)
            if self.unfenced:
                self.follower_offset = (self.follower_offset + 1) % len(self.unfenced)
        if self.drawn_unfenced < len(self.unfenced):
            broker = self.unfenced[(self.start + self.drawn_unfenced) % len(self.unfenced)]
            self.drawn_unfenced += 1
            return broker
        if self.drawn_fenced < len(self.fenced):
            if self.drawn_fenced == 0:
                self.fenced_offset = (self.fenced_offset + 1) % len(self.fenced)
            broker = self.fenced[(self.fenced_offset + self.drawn_fenced) % len(self.fenced)]
            self.drawn_fenced += 1
            return broker
        return None


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
            (rack.fenced if broker.fenced else rack.unfenced).append(broker.broker_id)
        self.num_brokers = len(rack_of)
        self.num_unfenced = sum(len(r.unfenced) for r in self.racks.values())
        for name, rack in self.racks.items():
            rack.unfenced.sort()
            rack.fenced.sort()
            _initialize_offsets(rng, rack, name, rack_of, existing)
        self.rack_names = sorted(self.racks, key=_rack_key)
        previous_rack = _previous_rack_offset(rack_of, existing, self.rack_names)
        if previous_rack is not None:
            self.offset = (previous_rack + 1) % len(self.rack_names)
        else:
            self.offset = rng.randrange(len(self.rack_names)) if self.rack_names else 0
        # Kafka resets its iteration epoch to 0 after a shuffle, so a rack not visited since
        # could mistake the new epoch for its old one and resume a stale draw. Here the epoch
        # only grows, and a separate count decides when to shuffle.
        self.epoch = 0
        # Rounds (one partition led by each unfenced broker) count the topic's existing
        # partitions too, so added partitions complete the current round before a shuffle.
        self.placed_since_shuffle = len(existing) % self.num_unfenced if self.num_unfenced else 0

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
            leader = self.racks[names[first_rack]].next_leader(epoch)
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
            self.rng.shuffle(rack.unfenced)
            self.rng.shuffle(rack.fenced)


def _previous_rack_offset(rack_of: dict[int, str | None], existing: Sequence[Sequence[int]],
                          rack_names: list[str | None]) -> int | None:
    """The position of the rack that led the topic's last partition, if known."""
    if not existing or not existing[-1]:
        return None
    last_leader = existing[-1][0]
    if last_leader not in rack_of:
        return None
    return rack_names.index(rack_of[last_leader])


def _initialize_offsets(rng: random.Random, rack: _Rack, name: str | None,
                        rack_of: dict[int, str | None],
                        existing: Sequence[Sequence[int]]) -> None:
    """Random start offsets; for a topic that has partitions, the rack's leader and follower
    offsets continue after the brokers it gave the topic's latest partitions (as Kafka's
    placer continues after the rack's latest broker)."""
    if rack.unfenced:
        rack.leader_offset = rng.randrange(len(rack.unfenced))
        rack.follower_offset = rng.randrange(len(rack.unfenced))
    if rack.fenced:
        rack.fenced_offset = rng.randrange(len(rack.fenced))
    leader_found = follower_found = False
    for replicas in reversed(existing):
        for position, broker in enumerate(replicas):
            if rack_of.get(broker, _NO_RACK) != name or broker not in rack.unfenced:
                continue
            following = rack.unfenced.index(broker) + 1
            if position == 0 and not leader_found:
                rack.leader_offset = following % len(rack.unfenced)
                leader_found = True
            elif position > 0 and not follower_found:
                rack.follower_offset = following % len(rack.unfenced)
                follower_found = True
        if leader_found and follower_found:
            return


_NO_RACK = object()  # a broker missing from rack_of matches no rack, not even None


def place_replicas(rng: random.Random, brokers: Iterable[UsableBroker], num_partitions: int,
                   replication_factor: int,
                   existing: Sequence[Sequence[int]] = ()) -> list[list[int]]:
    """Replicas for `num_partitions` new partitions (raises PlacementError).

    `existing` holds the replicas of the topic's current partitions, in partition order, when
    partitions are added to a topic."""
    return StripedReplicaPlacer(rng, brokers, existing).place_all(num_partitions,
                                                                   replication_factor)
