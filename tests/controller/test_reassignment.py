"""Partition reassignments in the controller (Kafka's ReplicationControlManager with
PartitionReassignmentReplicas and PartitionReassignmentRevert): AlterPartitionReassignments,
ListPartitionReassignments, and completion wherever the ISR changes (AlterPartition, fencing)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from odradek.controller.replication_control import (
    OngoingReassignment,
    ReassignmentOutcome,
    ReassignmentReplicas,
    ReassignmentRevert,
    alter_partition,
    alter_partition_reassignments,
    handle_broker_fenced,
    is_reassigning,
    list_partition_reassignments,
    merge_partition_change,
)
from odradek.metadata.image import (
    LEADER_NO_CHANGE,
    PartitionRegistration,
    image_records,
    replay_records,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from tests.controller.test_replication_control import Cluster, alter_request, epoch_of


def reassign(c: Cluster, topic: str, partition: int, target: Sequence[int] | None,
             ) -> tuple[ReassignmentOutcome, list[m.PartitionChangeRecord]]:
    results, records = alter_partition_reassignments(c.image, [(topic, [(partition, target)])])
    ((name, (outcome,)),) = results
    assert name == topic
    c.apply(records)
    return outcome, records


def assignment(p: PartitionRegistration) -> tuple[Any, ...]:
    return p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas


def alter_isr(c: Cluster, topic_id: uuid.UUID, isr: Sequence[int], *, broker: int,
              partition: int = 0) -> m.AlterPartitionResponse.PartitionData:
    """The leader's AlterPartition with the partition's current epochs, applied."""
    p = c.part(partition=partition)
    request = alter_request(topic_id, isr, partition=partition, leader_epoch=p.leader_epoch,
                            partition_epoch=p.partition_epoch, broker=broker)
    response, records = alter_partition(c.image, broker, epoch_of(broker), request)
    c.apply(records)
    ((data,),) = [t.partitions for t in response.topics]
    return data


# -- the replica sets (PartitionReassignmentReplicas, PartitionReassignmentRevert)
def test_reassignment_replicas_are_the_target_then_the_removed_ones_sorted():
    r = ReassignmentReplicas.of([3, 1, 2], [4, 2, 5])
    assert (r.removing, r.adding, r.replicas) == ((1, 3), (4, 5), (4, 2, 5, 1, 3))


def test_revert_drops_the_adding_replicas_from_replicas_and_isr():
    p = PartitionRegistration(replicas=(4, 5, 1, 2), isr=(1, 2, 4), leader=1, leader_epoch=0,
                              partition_epoch=1, removing_replicas=(1, 2),
                              adding_replicas=(4, 5))
    assert ReassignmentRevert.of(p) == ReassignmentRevert((1, 2), (1, 2), False)
    only_adding_in_isr = PartitionRegistration(
        replicas=(4, 1), isr=(4,), leader=4, leader_epoch=1, partition_epoch=2,
        removing_replicas=(1,), adding_replicas=(4,))
    assert ReassignmentRevert.of(only_adding_in_isr) == ReassignmentRevert((1,), (1,), True)


# -- starting a reassignment
def test_a_move_grows_the_replicas_to_the_union_and_records_adding_and_removing():
    c = Cluster(brokers=(1, 2, 3, 4))
    c.topic("t", ([1, 2], [1, 2], 1))
    outcome, (record,) = reassign(c, "t", 0, [3, 4])
    assert outcome == ReassignmentOutcome(0)
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == (
        [3, 4, 1, 2], [3, 4], [1, 2])
    # The ISR and the leader stay until the new replicas catch up; no leader epoch bump.
    assert record.isr is None and record.leader == LEADER_NO_CHANGE
    p = c.part()
    assert assignment(p) == ((3, 4, 1, 2), (1, 2), 1, (3, 4), (1, 2))
    assert (p.leader_epoch, p.partition_epoch) == (0, 1)
    assert is_reassigning(p)


def test_a_reorder_of_the_same_replicas_completes_at_once():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1, 2, 3], 1))
    _, (record,) = reassign(c, "t", 0, [3, 2, 1])
    assert record.replicas == [3, 2, 1] and record.leader == LEADER_NO_CHANGE
    assert assignment(c.part()) == ((3, 2, 1), (1, 2, 3), 1, (), ())


def test_removing_replicas_already_covered_by_the_isr_completes_at_once():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1, 2, 3], 1))
    _, (record,) = reassign(c, "t", 0, [2, 3])
    # Replica 1 (the leader) leaves: 2 leads, epoch bumped, nothing left in flight.
    assert record.leader == 2 and record.isr == [2, 3] and record.replicas == [2, 3]
    assert record.adding_replicas is None and record.removing_replicas is None
    p = c.part()
    assert assignment(p) == ((2, 3), (2, 3), 2, (), ()) and p.leader_epoch == 1


def test_shrinking_without_changing_the_leader_still_bumps_the_leader_epoch():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1, 2, 3], 1))
    _, (record,) = reassign(c, "t", 0, [1, 2])
    assert record.leader == 1  # same leader, written to bump the epoch (fences replica 3)
    p = c.part()
    assert assignment(p) == ((1, 2), (1, 2), 1, (), ()) and p.leader_epoch == 1


def test_the_same_assignment_writes_nothing():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1))
    outcome, records = reassign(c, "t", 0, [1, 2])
    assert outcome.error == ErrorCode.NONE and records == []


@pytest.mark.parametrize("target,message", [
    ([], "The manual partition assignment includes an empty replica list."),
    ([1, 2, 2], "The manual partition assignment includes the broker 2 more than once."),
    ([1, 9, 7], ("The manual partition assignment includes broker 7, but no such broker is "
                 "registered.")),
    ([1, -1], ("The manual partition assignment includes broker -1, but no such broker is "
               "registered.")),
])
def test_invalid_targets_are_refused_with_kafkas_messages(target: list[int], message: str):
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1))
    outcome, records = reassign(c, "t", 0, target)
    assert (outcome.error, outcome.message) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)
    assert records == []


def test_unknown_topics_and_partitions():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1))
    results, records = alter_partition_reassignments(
        c.image, [("nope", [(0, [1])]), ("t", [(5, [1]), (0, [2, 1])])])
    assert records and results == [
        ("nope", [ReassignmentOutcome(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                      "Unable to find a topic named nope.")]),
        ("t", [ReassignmentOutcome(5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   "Unable to find partition t:5."),
               ReassignmentOutcome(0)]),
    ]


def test_a_fenced_target_replica_is_accepted_it_is_registered():
    c = Cluster(brokers=(1, 2, 3), fenced=(3,))
    c.topic("t", ([1], [1], 1))
    outcome, _ = reassign(c, "t", 0, [3])
    assert outcome.error == ErrorCode.NONE
    assert assignment(c.part()) == ((3, 1), (1,), 1, (3,), (1,))


# -- completion by AlterPartition
def test_the_leader_adding_the_new_replica_to_the_isr_completes_the_move():
    c = Cluster(brokers=(1, 2))
    topic_id = c.topic("t", ([1], [1], 1))
    reassign(c, "t", 0, [2])
    data = alter_isr(c, topic_id, [1, 2], broker=1)
    # The completion moves leadership off the removed leader: the leader learns it from the
    # metadata, its request gets NEW_LEADER_ELECTED.
    assert data.error_code == ErrorCode.NEW_LEADER_ELECTED
    p = c.part()
    assert assignment(p) == ((2,), (2,), 2, (), ())
    assert (p.leader_epoch, p.partition_epoch) == (1, 2)
    assert list_partition_reassignments(c.image) == []


def test_an_isr_expansion_that_keeps_the_leader_completes_with_a_leader_epoch_bump():
    c = Cluster()
    topic_id = c.topic("t", ([1, 2], [1, 2], 1))
    reassign(c, "t", 0, [1, 3])  # replicas [1, 3, 2], adding [3], removing [2]
    data = alter_isr(c, topic_id, [1, 2, 3], broker=1)
    assert data.error_code == ErrorCode.NONE
    p = c.part()
    assert assignment(p) == ((1, 3), (1, 3), 1, (), ())
    # Replica 2 left, so the leader epoch went up; the response carries the new state.
    assert (data.leader_id, data.leader_epoch, list(data.isr), data.partition_epoch) == (
        1, 1, [1, 3], p.partition_epoch)


def test_completion_waits_for_every_target_replica():
    c = Cluster(brokers=(1, 2, 3, 4))
    topic_id = c.topic("t", ([1], [1], 1))
    reassign(c, "t", 0, [2, 3])
    data = alter_isr(c, topic_id, [1, 2], broker=1)
    assert data.error_code == ErrorCode.NONE
    assert assignment(c.part()) == ((2, 3, 1), (1, 2), 1, (2, 3), (1,))
    data = alter_isr(c, topic_id, [1, 2, 3], broker=1)
    assert data.error_code == ErrorCode.NEW_LEADER_ELECTED
    assert assignment(c.part()) == ((2, 3), (2, 3), 2, (), ())


def test_growing_the_replication_factor_completes_when_the_new_replica_joins():
    c = Cluster()
    topic_id = c.topic("t", ([1], [1], 1))
    reassign(c, "t", 0, [1, 2])
    assert assignment(c.part()) == ((1, 2), (1,), 1, (2,), ())
    data = alter_isr(c, topic_id, [1, 2], broker=1)
    assert data.error_code == ErrorCode.NONE
    p = c.part()
    assert assignment(p) == ((1, 2), (1, 2), 1, (), ()) and p.leader_epoch == 0


# -- completion on other ISR changes
def test_fencing_a_removed_replica_can_complete_the_reassignment():
    c = Cluster(brokers=(1, 2, 3))
    topic_id = c.topic("t", ([1, 2], [1, 2], 1))
    reassign(c, "t", 0, [1, 3])
    alter_isr(c, topic_id, [1, 2], broker=1)  # no change
    c.apply(handle_broker_fenced(c.image, 2))
    assert assignment(c.part()) == ((1, 3, 2), (1,), 1, (3,), (2,))  # 3 is not in yet
    alter_isr(c, topic_id, [1, 3], broker=1)
    assert assignment(c.part()) == ((1, 3), (1, 3), 1, (), ())


def test_fencing_the_leader_does_not_complete_while_a_target_replica_is_missing():
    c = Cluster(brokers=(1, 2, 3))
    c.topic("t", ([1, 2], [1, 2], 1))
    reassign(c, "t", 0, [2, 3])
    records = handle_broker_fenced(c.image, 1)
    c.apply(records)
    # 1 leaves the ISR, 2 leads; 3 has not joined, so the reassignment goes on.
    assert assignment(c.part()) == ((2, 3, 1), (2,), 2, (3,), (1,))


# -- cancelling
def test_cancel_reverts_to_the_original_replicas():
    c = Cluster(brokers=(1, 2, 3, 4))
    topic_id = c.topic("t", ([1, 2], [1, 2], 1))
    reassign(c, "t", 0, [3, 4])
    alter_isr(c, topic_id, [1, 2, 3], broker=1)
    outcome, (record,) = reassign(c, "t", 0, None)
    assert outcome == ReassignmentOutcome(0)
    assert (record.replicas, record.isr, record.adding_replicas, record.removing_replicas) == (
        [1, 2], [1, 2], [], [])
    assert assignment(c.part()) == ((1, 2), (1, 2), 1, (), ())


def test_cancel_without_a_reassignment_in_progress():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1))
    outcome, records = reassign(c, "t", 0, None)
    assert (outcome.error, outcome.message, records) == (
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.", [])


def reassigned_away_and_lost_the_originals(configs: dict[str, str]) -> Cluster:
    """A partition moving from 1 to 2 whose ISR holds only 2 (1 was fenced)."""
    c = Cluster(brokers=(1, 2))
    topic_id = c.topic("t", ([1], [1], 1), configs=configs)
    reassign(c, "t", 0, [1, 2])  # grow first, so 2 can join the ISR
    alter_isr(c, topic_id, [1, 2], broker=1)
    reassign(c, "t", 0, [2])  # completes at once: replicas [2]
    assert assignment(c.part()) == ((2,), (2,), 2, (), ())
    reassign(c, "t", 0, [1])  # replicas [1, 2], adding [1], removing [2]
    c.apply([m.PartitionChangeRecord(topic_id=topic_id, partition_id=0, isr=[2],
                                     adding_replicas=[2], removing_replicas=[1],
                                     replicas=[2, 1])])
    return c


def test_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it():
    c = reassigned_away_and_lost_the_originals({})
    outcome, records = reassign(c, "t", 0, None)
    assert (outcome.error, outcome.message, records) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("Unable to revert partition assignment for t:0 because it would require an unclean "
         "leader election."), [])
    c = reassigned_away_and_lost_the_originals({"unclean.leader.election.enable": "true"})
    outcome, _ = reassign(c, "t", 0, None)
    assert outcome.error == ErrorCode.NONE
    p = c.part()
    assert (p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas) == (
        (1,), (1,), 1, (), ())


# -- listing
def test_list_shows_only_partitions_in_flight_and_skips_unknown_topics():
    c = Cluster(brokers=(1, 2, 3, 4))
    c.topic("a", ([1], [1], 1), ([2], [2], 2))
    c.topic("b", ([3], [3], 3))
    reassign(c, "a", 1, [4])
    reassign(c, "b", 0, [3, 4])
    expected_a = ("a", [OngoingReassignment(1, (4, 2), (4,), (2,))])
    expected_b = ("b", [OngoingReassignment(0, (3, 4), (4,), ())])
    assert list_partition_reassignments(c.image) == [expected_a, expected_b]
    assert list_partition_reassignments(c.image, [("a", [0, 1, 7]), ("zz", [0])]) == [expected_a]
    assert list_partition_reassignments(c.image, [("a", [0])]) == []


def test_a_partition_named_twice_is_changed_over_its_first_change():
    c = Cluster(brokers=(1, 2, 3, 4))
    c.topic("t", ([1], [1], 1))
    results, records = alter_partition_reassignments(c.image, [("t", [(0, [2]), (0, [3])])])
    assert [o.error for _, outcomes in results for o in outcomes] == [ErrorCode.NONE] * 2
    c.apply(records)
    assert assignment(c.part()) == ((3, 1, 2), (1,), 1, (3,), (1, 2))


def test_merge_and_snapshots_keep_adding_and_removing():
    c = Cluster(brokers=(1, 2, 3))
    c.topic("t", ([1], [1], 1))
    before = c.part()
    _, (record,) = reassign(c, "t", 0, [2])
    assert merge_partition_change(before, record) == c.part()
    rebuilt = replay_records(image_records(c.image))
    assert rebuilt.topics_by_name["t"].partitions[0] == c.part()
