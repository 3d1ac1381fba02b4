"""Kafka's StripedReplicaPlacer: distinct replicas, racks spread, leaders balanced and never
fenced, fenced brokers used only when the unfenced ones run out; and ControllerState placing
new topics and partitions with it."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from typing import Any

import pytest

from odradek.controller.controller import ControllerState, TopicSpec, replay_all
from odradek.controller.placement import (
    PlacementError,
    StripedReplicaPlacer,
    UsableBroker,
    place_replicas,
)
from odradek.metadata.image import EMPTY_IMAGE, NO_LEADER, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.storage.config import validate_topic_props

SEEDS = range(100)

# (rack of broker 1, 2, ...) layouts: no racks, balanced racks in various orders.
BALANCED_LAYOUTS = [
    [None, None, None],
    [None] * 5,
    ["a", "b", "c"],
    ["a", "a", "b", "b"],
    ["a", "a", "b", "b", "c", "c"],
    ["a", "b", "c", "a", "b", "c"],
    ["r1", "r1", "r1", "r2", "r2", "r2"],
    ["a", "a", "a", "b", "b", "b", "c", "c", "c"],  # Kafka's own placer would starve some
]


def brokers(racks: list[str | None], fenced: tuple[int, ...] = ()) -> list[UsableBroker]:
    return [UsableBroker(i + 1, rack, i + 1 in fenced) for i, rack in enumerate(racks)]


@pytest.mark.parametrize("racks", BALANCED_LAYOUTS)
@pytest.mark.parametrize("rf", [1, 2, 3])
def test_replicas_are_distinct_and_racks_spread(racks: list[str | None], rf: int):
    if rf > len(racks):
        pytest.skip("more replicas than brokers")
    rack_of = {b.broker_id: b.rack for b in brokers(racks)}
    num_racks = len(set(racks))
    for seed in SEEDS:
        placement = place_replicas(random.Random(seed), brokers(racks), 24, rf)
        assert len(placement) == 24
        for replicas in placement:
            assert len(replicas) == rf and len(set(replicas)) == rf
            per_rack = Counter(rack_of[r] for r in replicas)
            # Distinct racks where possible; otherwise as even as the racks allow.
            assert len(per_rack) == min(rf, num_racks)
            assert max(per_rack.values()) - min(per_rack.values()) <= 1


@pytest.mark.parametrize("racks", BALANCED_LAYOUTS)
def test_leaders_and_replicas_spread_evenly_over_brokers(racks: list[str | None]):
    n = len(racks)
    for seed in SEEDS:
        placement = place_replicas(random.Random(seed), brokers(racks), 4 * n, min(2, n))
        leaders = Counter(replicas[0] for replicas in placement)
        assert leaders == {b: 4 for b in range(1, n + 1)}, (seed, placement)
        replicas = Counter(r for rs in placement for r in rs)
        assert max(replicas.values()) - min(replicas.values()) <= 1


def test_each_round_of_leaders_covers_every_broker_before_repeating():
    for seed in SEEDS:
        placement = place_replicas(random.Random(seed), brokers([None] * 5), 15, 3)
        for round_start in range(0, 15, 5):
            assert {p[0] for p in placement[round_start:round_start + 5]} == {1, 2, 3, 4, 5}


def test_the_rng_makes_placement_deterministic():
    first = place_replicas(random.Random(3), brokers(["a", "b", "c", "a"]), 10, 3)
    assert first == place_replicas(random.Random(3), brokers(["a", "b", "c", "a"]), 10, 3)
    others = {str(place_replicas(random.Random(s), brokers(["a", "b", "c", "a"]), 10, 3))
              for s in range(10)}
    assert len(others) > 1  # the start offsets are random


def test_fenced_brokers_get_no_replicas_while_unfenced_ones_suffice():
    for seed in SEEDS:
        placement = place_replicas(random.Random(seed), brokers([None] * 5, fenced=(2, 4)),
                                   30, 3)
        assert all(not {2, 4} & set(replicas) for replicas in placement)
        assert Counter(p[0] for p in placement) == {1: 10, 3: 10, 5: 10}


def test_fenced_brokers_fill_in_as_followers_only_when_needed():
    for seed in SEEDS:
        placement = place_replicas(random.Random(seed), brokers([None] * 4, fenced=(3, 4)),
                                   12, 3)
        for replicas in placement:
            assert replicas[0] in (1, 2)  # a leader is never fenced
            assert len(set(replicas)) == 3 and {1, 2} <= set(replicas)


def test_rack_spread_comes_before_avoiding_fenced_brokers():
    # As Kafka: rack c's only unfenced broker is taken, so its fenced one is the third
    # replica rather than a second replica from rack a or b.
    racks = ["a", "b", "c", "c"]
    for seed in SEEDS:
        for replicas in place_replicas(random.Random(seed), brokers(racks, fenced=(4,)), 8, 3):
            assert {racks[r - 1] for r in replicas} == {"a", "b", "c"}
            assert replicas[0] != 4


@pytest.mark.parametrize("rf, fenced, message", [
    (0, (), "Invalid replication factor 0: the replication factor must be positive."),
    (4, (), ("The target replication factor of 4 cannot be reached because only 3 broker(s) "
            "are registered.")),
    (1, (1, 2, 3), "All brokers are currently fenced."),
])
def test_impossible_placements_raise_kafkas_messages(rf: int, fenced: tuple[int, ...],
                                                     message: str):
    with pytest.raises(PlacementError) as exc:
        place_replicas(random.Random(0), brokers([None] * 3, fenced), 1, rf)
    assert str(exc.value) == message


def test_new_partitions_continue_the_stripe_of_the_existing_ones():
    for seed in SEEDS:
        rng = random.Random(seed)
        existing = place_replicas(rng, brokers([None] * 4), 3, 2)
        added = StripedReplicaPlacer(rng, brokers([None] * 4), existing).place_all(5, 2)
        # Leaders keep rotating from the last one: the topic's leaders stay balanced.
        last = existing[-1][0]
        assert added[0][0] == last % 4 + 1
        leaders = Counter(p[0] for p in existing + added)
        assert leaders == {1: 2, 2: 2, 3: 2, 4: 2}, (existing, added)


# -- through ControllerState
ENDPOINTS = [("PLAINTEXT", "localhost", 9092, 0)]


def controller(seed: int = 7, replication_factor: int = 1) -> ControllerState:
    return ControllerState(num_partitions=1, default_replication_factor=replication_factor,
                           config_validator=validate_topic_props, rng=random.Random(seed))


def cluster(racks: list[str | None], fenced: tuple[int, ...] = (),
            shutting_down: tuple[int, ...] = ()) -> MetadataImage:
    records: list[Any] = []
    for i, rack in enumerate(racks):
        broker_id = i + 1
        records.append(m.RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=10 + broker_id,
            rack=rack, fenced=broker_id in fenced,
            in_controlled_shutdown=broker_id in shutting_down))
    return replay_all(EMPTY_IMAGE, records)


def test_create_topics_places_replicas_on_distinct_racks():
    racks = ["a", "a", "b", "b", "c", "c"]
    image = cluster(racks)
    for seed in range(20):
        results, records = controller(seed).create_topics(
            image, [TopicSpec("t", num_partitions=12, replication_factor=3)])
        assert results[0].error == ErrorCode.NONE
        partitions = [r for r in records if isinstance(r, m.PartitionRecord)]
        for p in partitions:
            assert {racks[r - 1] for r in p.replicas} == {"a", "b", "c"}
            assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert Counter(p.leader for p in partitions) == {b: 2 for b in range(1, 7)}


def test_brokers_in_controlled_shutdown_get_no_replicas():
    image = cluster([None] * 4, shutting_down=(2,))
    results, records = controller().create_topics(
        image, [TopicSpec("t", num_partitions=9, replication_factor=3)])
    assert results[0].error == ErrorCode.NONE
    assert all(2 not in r.replicas for r in records if isinstance(r, m.PartitionRecord))
    results, _ = controller().create_topics(image, [TopicSpec("u", replication_factor=4)])
    assert results[0].error == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "only 3 broker(s) are registered" in results[0].message


def test_manual_assignments_put_only_active_replicas_in_the_isr():
    image = cluster([None] * 3, fenced=(1,), shutting_down=(3,))
    results, records = controller().create_topics(
        image, [TopicSpec("t", assignments={0: [1, 2, 3], 1: [2, 1]})])
    assert results[0].error == ErrorCode.NONE
    p0, p1 = [r for r in records if isinstance(r, m.PartitionRecord)]
    assert (p0.replicas, p0.isr, p0.leader) == ([1, 2, 3], [2], 2)
    assert (p1.replicas, p1.isr, p1.leader) == ([2, 1], [2], 2)


def test_manual_assignments_on_inactive_brokers_only_are_refused():
    image = cluster([None] * 3, fenced=(1,), shutting_down=(3,))
    results, records = controller().create_topics(
        image, [TopicSpec("t", assignments={0: [2], 1: [1, 3]})])
    assert results[0].error == ErrorCode.INVALID_REPLICA_ASSIGNMENT and records == []
    assert results[0].message == ("All brokers specified in the manual partition assignment "
                                  "for partition 1 are fenced or in controlled shutdown.")
    image = replay_all(image, controller().create_topics(image, [TopicSpec("u")])[1])
    result, records = controller().create_partitions(image, "u", 2, [[1, 3]])
    assert result.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT and records == []


def test_create_partitions_keeps_leaders_balanced_and_racks_spread():
    racks = ["a", "b", "c", "a", "b", "c"]
    image = cluster(racks)
    for seed in range(20):
        state = controller(seed)
        _, records = state.create_topics(image, [TopicSpec("t", num_partitions=4,
                                                           replication_factor=2)])
        grown = replay_all(image, records)
        result, more = state.create_partitions(grown, "t", 12, None)
        assert result.error == ErrorCode.NONE
        assert [r.partition_id for r in more] == list(range(4, 12))
        grown = replay_all(grown, more)
        parts = grown.topics_by_name["t"].partitions
        assert Counter(p.leader for p in parts.values()) == {b: 2 for b in range(1, 7)}
        for p in parts.values():
            assert len({racks[r - 1] for r in p.replicas}) == 2
            assert p.leader != NO_LEADER


def test_random_clusters_always_get_valid_placements():
    fuzz = random.Random(2024)
    for _ in range(400):
        n = fuzz.randint(3, 6)
        racks = [fuzz.choice([None, "a", "b", "c"]) for _ in range(n)]
        if fuzz.random() < 0.3:
            racks = [None] * n
        fenced = tuple(b for b in range(1, n + 1) if fuzz.random() < 0.3)
        if len(fenced) == n:
            fenced = fenced[1:]
        rf = fuzz.randint(1, n)
        partitions = fuzz.randint(1, 20)
        rack_of = dict(enumerate(racks, start=1))
        placement = place_replicas(random.Random(fuzz.random()), brokers(racks, fenced),
                                   partitions, rf)
        assert len(placement) == partitions
        for replicas in placement:
            assert len(replicas) == rf and len(set(replicas)) == rf
            assert replicas[0] not in fenced
            assert len({rack_of[r] for r in replicas}) == min(rf, len(set(racks)))
            # fenced brokers only where the unfenced ones cannot fill the partition
            if rf <= n - len(fenced) and len(set(racks)) == 1:
                assert not set(fenced) & set(replicas)
