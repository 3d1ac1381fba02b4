"""Partition assignors of the classic consumer group protocol, with Kafka's protocol names.

The group leader runs one (the protocol the coordinator chose) over every member's
subscription and the partition counts of the subscribed topics:

    assignor = RangeAssignor()
    assignment = assignor.assign({"t": 3}, {"m1": Subscription(["t"]), "m2": Subscription(["t"])})
    # {"m1": [t-0, t-1], "m2": [t-2]}

* ``range`` (`RangeAssignor`): per topic, the subscribed members in order get contiguous
  ranges; the first ``partitions % members`` get one more.
* ``roundrobin`` (`RoundRobinAssignor`): every subscribed partition (topics sorted, then
  partition) goes to the next member in order subscribed to its topic.

* ``sticky`` (`StickyAssignor`, eager) and ``cooperative-sticky``
  (`CooperativeStickyAssignor`): balanced, keeping each member's previous partitions where
  balance allows (from Kafka's StickyAssignor user data, or the owned partitions); the
  cooperative one holds back partitions that change owner for a follow-up rebalance
  (KIP-429).

Members are ordered as Kafka orders them: static members (``group.instance.id``) first by
instance id, then dynamic ones by member id. All but ``cooperative-sticky`` are eager: every
member gives up all its partitions before a rebalance.
"""

from __future__ import annotations

from collections import defaultdict
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from odradek.client.errors import KafkaConfigError
from odradek.client.types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "PartitionAssignor",
    "RangeAssignor",
    "CooperativeStickyAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "assignors_from_config",
    "decode_sticky_user_data",
]


@dataclass(frozen=True)
class Subscription:
    """One member's subscription as the leader sees it (ConsumerProtocolSubscription)."""

    topics: Sequence[str]
    user_data: bytes | None = None
    owned_partitions: Sequence[TopicPartition] = ()
    group_instance_id: str | None = None
    generation_id: int = -1
    rack_id: str | None = None
    member_id: str = field(default="", compare=False)


class PartitionAssignor(Protocol):
    #: the protocol name members offer in JoinGroup
    name: str
    #: whether it supports the incremental cooperative protocol (KIP-429)
    cooperative: bool

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        """member id -> its partitions; every member gets an entry (maybe empty). Topics
        missing from `partitions_per_topic` (unknown to the leader) are not assigned."""
        ...


def _member_order(subscriptions: Mapping[str, Subscription], member_ids: list[str]
                  ) -> list[str]:
    """Kafka's MemberInfo order: static members by instance id, then dynamic ones by id."""
    def key(member_id: str) -> tuple[int, str, str]:
        instance_id = subscriptions[member_id].group_instance_id
        return (0, instance_id, member_id) if instance_id is not None else (1, member_id, "")

    return sorted(member_ids, key=key)


class RangeAssignor:
    name = "range"
    cooperative = False

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        members_per_topic: dict[str, list[str]] = defaultdict(list)
        for member_id, subscription in subscriptions.items():
            for topic in dict.fromkeys(subscription.topics):
                members_per_topic[topic].append(member_id)
        assignment: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        for topic in sorted(members_per_topic):
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            members = _member_order(subscriptions, members_per_topic[topic])
            per_member, extra = divmod(count, len(members))
            for index, member in enumerate(members):
                start = per_member * index + min(index, extra)
                length = per_member + (1 if index < extra else 0)
                assignment[member].extend(
                    TopicPartition(topic, p) for p in range(start, start + length))
        return assignment


class RoundRobinAssignor:
    name = "roundrobin"
    cooperative = False

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        assignment: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        members = _member_order(subscriptions, list(subscriptions))
        if not members:
            return assignment
        topics = sorted({topic for s in subscriptions.values() for topic in s.topics
                         if topic in partitions_per_topic})
        subscribed = {member: set(subscriptions[member].topics) for member in members}
        cursor = 0
        for topic in topics:
            for partition in range(partitions_per_topic[topic]):
                # Some member subscribes to `topic`, so this ends within one lap.
                while topic not in subscribed[members[cursor]]:
                    cursor = (cursor + 1) % len(members)
                assignment[members[cursor]].append(TopicPartition(topic, partition))
                cursor = (cursor + 1) % len(members)
        return assignment


def _claimed_owners(members: list[str], eligible: dict[str, set[str]],
                    partitions_per_topic: Mapping[str, int],
                    claims_of: Mapping[str, tuple[Sequence[TopicPartition], int]]
                    ) -> dict[TopicPartition, str]:
    """The previous owner of each partition from the members' claims (partitions, generation):
    the newest generation wins; a tie owns nothing; partitions a member no longer subscribes
    to, or that no longer exist, are not claimed."""
    claims: dict[TopicPartition, tuple[int, str | None]] = {}
    for member in members:
        partitions, generation = claims_of[member]
        for tp in partitions:
            if tp.topic not in eligible[member] or \
                    not 0 <= tp.partition < partitions_per_topic[tp.topic]:
                continue
            previous = claims.get(tp)
            if previous is None or generation > previous[0]:
                claims[tp] = (generation, member)
            elif generation == previous[0]:
                claims[tp] = (generation, None)
    return {tp: owner for tp, (_, owner) in claims.items() if owner is not None}


def _sticky_assign(partitions_per_topic: Mapping[str, int],
                   subscriptions: Mapping[str, Subscription],
                   claims_of: Mapping[str, tuple[Sequence[TopicPartition], int]]
                   ) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """A balanced assignment keeping claimed partitions where balance allows, and the previous
    owners. Balanced: no partition could move to a member of its topic holding two fewer."""
    members = _member_order(subscriptions, list(subscriptions))
    eligible = {member: {t for t in subscriptions[member].topics if t in partitions_per_topic}
                for member in members}
    owners = _claimed_owners(members, eligible, partitions_per_topic, claims_of)
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in members}
    for tp in sorted(owners):
        assignment[owners[tp]].append(tp)
    order = {member: index for index, member in enumerate(members)}
    every = sorted(TopicPartition(topic, p)
                   for topic in {t for ts in eligible.values() for t in ts}
                   for p in range(partitions_per_topic[topic]))
    for tp in every:
        if tp not in owners:
            candidates = [m for m in members if tp.topic in eligible[m]]
            target = min(candidates, key=lambda m: (len(assignment[m]), order[m]))
            assignment[target].append(tp)
    # Move partitions from the most to the least loaded eligible member until balanced; each
    # move shrinks the spread, so this ends well within the bound.
    for _ in range(len(every) * max(1, len(members))):
        move = _best_move(assignment, eligible, order, owners)
        if move is None:
            break
        tp, source, target = move
        assignment[source].remove(tp)
        assignment[target].append(tp)
    return {member: sorted(partitions) for member, partitions in assignment.items()}, owners


def _best_move(assignment: dict[str, list[TopicPartition]], eligible: dict[str, set[str]],
               order: dict[str, int], owners: dict[TopicPartition, str]
               ) -> tuple[TopicPartition, str, str] | None:
    for source in sorted(assignment, key=lambda m: (-len(assignment[m]), order[m])):
        # Give up partitions the member did not own before first (stickiness), the highest
        # first within each kind (a stable sort).
        for tp in sorted(sorted(assignment[source], reverse=True),
                         key=lambda tp: owners.get(tp) == source):
            targets = [m for m in eligible if tp.topic in eligible[m]
                       and len(assignment[m]) < len(assignment[source]) - 1]
            if targets:
                return tp, source, min(targets, key=lambda m: (len(assignment[m]), order[m]))
    return None


class CooperativeStickyAssignor:
    """``cooperative-sticky`` (KIP-429): the sticky assignment over the members' owned
    partitions (ConsumerProtocolSubscription v1+, generation v2+); a partition that changes
    owner is left out of this round, so its old owner revokes it first and the follow-up
    rebalance hands it over. The exact choice may differ from Kafka's."""

    name = "cooperative-sticky"
    cooperative = True

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        claims = {member: (s.owned_partitions, s.generation_id)
                  for member, s in subscriptions.items()}
        assignment, owners = _sticky_assign(partitions_per_topic, subscriptions, claims)
        return {member: [tp for tp in partitions if owners.get(tp, member) == member]
                for member, partitions in assignment.items()}


class StickyAssignor:
    """``sticky`` (eager, KIP-54): the sticky assignment over each member's previous assignment
    and generation, carried in the subscription's user data in Kafka's StickyAssignor format
    (array of (topic, partitions), then int32 generation). The exact choice may differ from
    Kafka's."""

    name = "sticky"
    cooperative = False

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        claims = {}
        for member, subscription in subscriptions.items():
            partitions, generation = decode_sticky_user_data(subscription.user_data)
            if not partitions and subscription.owned_partitions:
                partitions, generation = (list(subscription.owned_partitions),
                                          subscription.generation_id)
            claims[member] = (partitions, generation)
        return _sticky_assign(partitions_per_topic, subscriptions, claims)[0]

    @staticmethod
    def user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in sorted(set(partitions)):
            by_topic[tp.topic].append(tp.partition)
        out = bytearray(struct.pack(">i", len(by_topic)))
        for topic, indexes in by_topic.items():
            name = topic.encode()
            out += struct.pack(">h", len(name)) + name
            out += struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
        out += struct.pack(">i", generation)
        return bytes(out)


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation) from StickyAssignor user data (v0 has no
    generation: -1); ([], -1) when absent or unreadable."""
    if not data:
        return [], -1
    try:
        (count,), offset = struct.unpack_from(">i", data, 0), 4
        partitions = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", data, offset)
            topic = bytes(data[offset + 2:offset + 2 + length]).decode()
            offset += 2 + length
            (n,) = struct.unpack_from(">i", data, offset)
            indexes = struct.unpack_from(f">{n}i", data, offset + 4)
            offset += 4 + 4 * n
            partitions.extend(TopicPartition(topic, p) for p in indexes)
        generation = struct.unpack_from(">i", data, offset)[0] \
            if len(data) >= offset + 4 else -1
        return partitions, generation
    except (struct.error, UnicodeDecodeError):
        return [], -1


#: protocol name -> assignor class
ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}

#: Kafka's class names in ``partition.assignment.strategy`` -> protocol names
_CLASS_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
def assignors_from_config(strategy: Sequence[str]) -> list[PartitionAssignor]:
    """The assignors of ``partition.assignment.strategy`` (protocol or Kafka class names), in
    preference order; an unknown name, or none at all, is an error."""
    assignors: list[PartitionAssignor] = []
    for entry in strategy:
        name = _CLASS_NAMES.get(entry, entry)
        if name not in ASSIGNORS:
            raise KafkaConfigError(
                f"Invalid value {entry} for configuration partition.assignment.strategy: "
                f"unknown assignor (known: {', '.join(ASSIGNORS)})")
        if all(a.name != name for a in assignors):
            assignors.append(ASSIGNORS[name]())
    if not assignors:
        raise KafkaConfigError("partition.assignment.strategy must name at least one assignor")
    return assignors
