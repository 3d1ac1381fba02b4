"""Server-side assignment of KIP-848 consumer groups: the assignors that compute the target
assignment (Kafka's UniformAssignor and RangeAssignor) and the reconciliation of a member's
current assignment towards its target (Kafka's CurrentAssignmentBuilder).

Assignors see the members' subscriptions (topic ids) and the topics' partition counts, and the
current target (to stay sticky); they return member id -> topic id -> partitions. Pure
functions: no I/O, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from odradek.coordinator.consumer_group import (
    NO_PARTITION_EPOCH,
    Assignment,
    ConsumerMember,
    MemberState,
    freeze,
)

UNIFORM = "uniform"
RANGE = "range"
#: what `group.consumer.assignors` may name: the short names and Kafka's class names
ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


@dataclass(frozen=True)
class AssignmentSpec:
    #: member id -> the topic ids it subscribes to (existing topics only)
    subscriptions: Mapping[str, frozenset[uuid.UUID]]
    #: topic id -> number of partitions
    partitions: Mapping[uuid.UUID, int]
    #: member id -> its current target (stickiness)
    current: Mapping[str, Assignment]


def uniform_assign(spec: AssignmentSpec) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """Kafka's UniformAssignor: every partition of a subscribed topic goes to one member that
    subscribes to it, the members' counts differ by at most one where their subscriptions
    allow, and partitions stay where they are whenever that holds (sticky)."""
    members = sorted(spec.subscriptions)
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {member: set() for member in members}
    taken: set[tuple[uuid.UUID, int]] = set()
    all_partitions = sorted(((topic_id, p) for topic_id, n in spec.partitions.items()
                             for p in range(n)
                             if any(topic_id in spec.subscriptions[mm] for mm in members)),
                            key=lambda tp: (str(tp[0]), tp[1]))
    # Homogeneous quota (the members' fair share); heterogeneous groups are evened out below.
    quota = -(-len(all_partitions) // len(members)) if members else 0
    for member in members:
        for topic_id, parts in spec.current.get(member, {}).items():
            if topic_id not in spec.subscriptions[member]:
                continue
            for p in sorted(parts):
                tp = (topic_id, p)
                if p < spec.partitions.get(topic_id, 0) and tp not in taken and \
                        len(owned[member]) < quota:
                    owned[member].add(tp)
                    taken.add(tp)

    def eligible(tp: tuple[uuid.UUID, int]) -> list[str]:
        return [member for member in members if tp[0] in spec.subscriptions[member]]

    for tp in all_partitions:
        if tp not in taken:
            candidates = eligible(tp)
            target = min(candidates, key=lambda mm: (len(owned[mm]), mm))
            owned[target].add(tp)
            taken.add(tp)
    # Even out: move a partition from a member to an eligible one with at least two fewer.
    moved = True
    while moved:
        moved = False
        for source in sorted(members, key=lambda mm: (-len(owned[mm]), mm)):
            for tp in sorted(owned[source], key=lambda x: (str(x[0]), -x[1])):
                receivers = [mm for mm in eligible(tp)
                             if len(owned[mm]) <= len(owned[source]) - 2]
                if receivers:
                    receiver = min(receivers, key=lambda mm: (len(owned[mm]), mm))
                    owned[source].discard(tp)
                    owned[receiver].add(tp)
                    moved = True
                    break
            if moved:
                break
    return {member: _grouped(owned[member]) for member in members}


def range_assign(spec: AssignmentSpec) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """Kafka's RangeAssignor: per topic, its subscribers (by member id) get consecutive ranges,
    the first ones one partition more when it does not divide; topics with the same
    subscribers and partition count are co-partitioned (same ranges to the same members)."""
    out: dict[str, set[tuple[uuid.UUID, int]]] = {member: set() for member in spec.subscriptions}
    for topic_id, n in spec.partitions.items():
        subscribers = sorted(member for member, topics in spec.subscriptions.items()
                             if topic_id in topics)
        if not subscribers:
            continue
        share, extra = divmod(n, len(subscribers))
        start = 0
        for index, member in enumerate(subscribers):
            size = share + (1 if index < extra else 0)
            out[member].update((topic_id, p) for p in range(start, start + size))
            start += size
    return {member: _grouped(tps) for member, tps in out.items()}


def _grouped(tps: set[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, frozenset[int]]:
    by_topic: dict[uuid.UUID, set[int]] = {}
    for topic_id, p in tps:
        by_topic.setdefault(topic_id, set()).add(p)
    return freeze(by_topic)


ASSIGNORS: dict[str, Callable[[AssignmentSpec], dict[str, dict[uuid.UUID, frozenset[int]]]]] = {
    UNIFORM: uniform_assign,
    RANGE: range_assign,
}


def assignor_names(configured: list[str]) -> list[str]:
    """`group.consumer.assignors` as assignor names (class names mapped to Kafka's names);
    raises ValueError for one Odradek does not have."""
    names = []
    for entry in configured:
        name = ASSIGNOR_CLASSES.get(entry.strip(), entry.strip())
        if name not in ASSIGNORS:
            raise ValueError(f"unknown consumer group assignor {entry!r}")
        names.append(name)
    return names


# ------------------------------------------------------------------------------------------
# reconciliation


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the client still owns any of `partitions` (None: it did not say, so it does)."""
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              partition_epoch: Callable[[uuid.UUID, int], int],
              owned: Assignment | None) -> ConsumerMember:
    """Kafka's CurrentAssignmentBuilder: the member's next current assignment. A member first
    revokes what its target no longer has (UNREVOKED_PARTITIONS, keeping its epoch); then it
    gets the target epoch and the target's partitions that no other member holds any more
    (those still held leave it UNRELEASED_PARTITIONS until released). `owned` is what the
    heartbeat says the client owns (None when it did not say)."""
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # the revocation is not acknowledged yet
        return _next(member, min(member.member_epoch + 1, target_epoch), target,
                     partition_epoch, owned, target_epoch=target_epoch)
    if member.state == MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        return _next(member, member.member_epoch, target, partition_epoch, owned,
                     target_epoch=target_epoch)
    return member


def _next(member: ConsumerMember, epoch: int, target: Assignment,
          partition_epoch: Callable[[uuid.UUID, int], int], owned: Assignment | None, *,
          target_epoch: int) -> ConsumerMember:
    """Kafka's computeNextAssignment."""
    kept: dict[uuid.UUID, set[int]] = {}
    revoke: dict[uuid.UUID, set[int]] = {}
    to_assign: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for topic_id in set(member.assigned) | set(target):
        current = member.assigned.get(topic_id, frozenset())
        wanted = target.get(topic_id, frozenset())
        if current & wanted:
            kept[topic_id] = set(current & wanted)
        if current - wanted:
            revoke[topic_id] = set(current - wanted)
        for p in sorted(wanted - current):
            if partition_epoch(topic_id, p) == NO_PARTITION_EPOCH:
                to_assign.setdefault(topic_id, set()).add(p)
            else:
                unreleased = True
    revoke_frozen = freeze(revoke)
    if revoke_frozen and _owns_any(owned, revoke_frozen):
        # Revoke first, in the current epoch; nothing new until the client acknowledges.
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS,
                                 assigned=freeze(kept), pending_revocation=revoke_frozen)
    assigned = {topic_id: kept.get(topic_id, set()) | to_assign.get(topic_id, set())
                for topic_id in set(kept) | set(to_assign)}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=freeze(assigned),
                             pending_revocation={})
