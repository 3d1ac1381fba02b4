"""Partition leadership and ISR changes (Kafka's ReplicationControlManager and
PartitionChangeBuilder): images built by replaying records, records checked and replayed."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from odradek.controller.cluster_control import unregister_records
from odradek.controller.controller import replay_all
from odradek.controller.replication_control import (
    ELECTION_PREFERRED,
    ELECTION_UNCLEAN,
    ELR_FEATURE,
    RECOVERED,
    RECOVERING,
    PartitionElection,
    alter_partition,
    balance_partition_leaders,
    effective_min_isr,
    elect_leaders,
    handle_broker_controlled_shutdown,
    handle_broker_fenced,
    handle_broker_unclean_shutdown,
    handle_broker_unfenced,
    handle_broker_unregistered,
    imbalanced_partitions,
    merge_partition_change,
    unclean_leader_election_enabled,
)
from odradek.metadata.image import (
    EMPTY_IMAGE,
    LEADER_NO_CHANGE,
    NO_LEADER,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    MetadataImage,
    PartitionRegistration,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

AP = m.AlterPartitionRequest


def epoch_of(broker_id: int) -> int:
    return 100 + broker_id


class Cluster:
    """A metadata image built by replaying records, with helpers to change it."""

    def __init__(self, brokers: Sequence[int] = (1, 2, 3), *, fenced: Sequence[int] = (),
                 racks: Mapping[int, str] | None = None, elr: bool = False) -> None:
        records: list[Any] = [
            m.RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.uuid4(),
                                   broker_epoch=epoch_of(b), rack=(racks or {}).get(b),
                                   fenced=b in fenced)
            for b in brokers
        ]
        if elr:
            records.append(m.FeatureLevelRecord(name=ELR_FEATURE, feature_level=1))
        self.image = replay_all(EMPTY_IMAGE, records)

    def apply(self, records: Sequence[Any]) -> MetadataImage:
        self.image = replay_all(self.image, records)
        return self.image

    def topic(self, name: str, *partitions: tuple[Sequence[int], Sequence[int], int],
              configs: Mapping[str, str] | None = None) -> uuid.UUID:
        """A topic whose partitions have these (replicas, isr, leader)."""
        topic_id = uuid.uuid4()
        records: list[Any] = [m.TopicRecord(name=name, topic_id=topic_id)]
        records += [m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name=name, name=k,
                                   value=v) for k, v in (configs or {}).items()]
        records += [m.PartitionRecord(partition_id=p, topic_id=topic_id, replicas=list(replicas),
                                      isr=list(isr), leader=leader, leader_epoch=0,
                                      partition_epoch=0)
                    for p, (replicas, isr, leader) in enumerate(partitions)]
        self.apply(records)
        return topic_id

    def broker_config(self, name: str, value: str) -> None:
        self.apply([m.ConfigRecord(resource_type=RESOURCE_BROKER, resource_name="", name=name,
                                   value=value)])

    def fence(self, broker_id: int) -> list[m.PartitionChangeRecord]:
        """Fences a broker as the controller does: partition changes, then the fence."""
        records = handle_broker_fenced(self.image, broker_id)
        self.apply([*records, m.FenceBrokerRecord(id=broker_id, epoch=epoch_of(broker_id))])
        return records

    def unfence(self, broker_id: int) -> list[m.PartitionChangeRecord]:
        records = handle_broker_unfenced(self.image, broker_id)
        self.apply([m.UnfenceBrokerRecord(id=broker_id, epoch=epoch_of(broker_id)), *records])
        return records

    def part(self, topic: str = "t", partition: int = 0) -> PartitionRegistration:
        return self.image.topics_by_name[topic].partitions[partition]


def state(p: PartitionRegistration) -> tuple[int, tuple[int, ...]]:
    return p.leader, p.isr


# -- fencing (KIP-841)
def test_a_fenced_follower_leaves_the_isr_without_a_leader_epoch_bump():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1, 2, 3], 1))
    records = c.fence(2)
    assert len(records) == 1 and records[0].leader == LEADER_NO_CHANGE
    assert records[0].isr == [1, 3]
    p = c.part()
    assert state(p) == (1, (1, 3)) and (p.leader_epoch, p.partition_epoch) == (0, 1)


def test_a_fenced_leader_hands_over_to_the_next_active_isr_member_in_replica_order():
    c = Cluster(brokers=(1, 2, 3, 4))
    c.topic("t", ([1, 2, 3, 4], [4, 3, 1, 2], 1))
    c.apply([m.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=epoch_of(2),
                                              in_controlled_shutdown=1)])
    c.fence(1)
    p = c.part()
    # 2 comes first in replica order but is shutting down: 3 leads.
    assert state(p) == (3, (4, 3, 2)) and p.leader_epoch == 1


def test_partitions_without_the_fenced_broker_are_untouched():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1), ([2, 3], [2, 3], 2))
    c.topic("u", ([3], [3], 3))
    records = handle_broker_fenced(c.image, 3)
    assert [(r.partition_id, r.isr, r.leader) for r in records] == [(1, [2], LEADER_NO_CHANGE),
                                                                     (0, None, NO_LEADER)]


def test_the_last_isr_member_stays_in_the_isr_and_the_partition_loses_its_leader():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1], 1))
    (record,) = c.fence(1)
    assert record.isr is None and record.leader == NO_LEADER
    assert state(c.part()) == (NO_LEADER, (1,))
    assert c.part().leader_recovery_state == RECOVERED
    # Fencing the other (out of sync) replicas changes nothing more.
    assert c.fence(2) == [] and c.fence(3) == []
    # The last ISR member comes back: it leads again, with a new leader epoch.
    (record,) = c.unfence(1)
    assert record.leader == 1 and record.isr is None
    assert state(c.part()) == (1, (1,)) and c.part().leader_epoch == 2


def test_the_fence_works_whether_or_not_the_image_already_shows_it():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1, 2, 3], 1))
    before = handle_broker_fenced(c.image, 1)
    c.apply([m.FenceBrokerRecord(id=1, epoch=epoch_of(1))])
    assert handle_broker_fenced(c.image, 1) == before
    assert before[0].leader == 2 and before[0].isr == [2, 3]


# -- unclean leader election
def test_unclean_election_elects_an_out_of_sync_replica_and_marks_it_recovering():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1], 1), configs={"unclean.leader.election.enable": "true"})
    (record,) = c.fence(1)
    assert (record.leader, record.isr, record.leader_recovery_state) == (2, [2], RECOVERING)
    p = c.part()
    assert state(p) == (2, (2,)) and p.leader_recovery_state == RECOVERING


def test_unclean_election_finds_no_leader_when_no_replica_is_active():
    c = Cluster()
    c.topic("t", ([1, 2], [1], 1), configs={"unclean.leader.election.enable": "true"})
    c.fence(2)
    (record,) = c.fence(1)
    assert record.leader == NO_LEADER and record.isr is None
    # The first replica to come back leads, uncleanly if it was not in the ISR.
    (record,) = c.unfence(2)
    assert (record.leader, record.isr, record.leader_recovery_state) == (2, [2], RECOVERING)


@pytest.mark.parametrize("topic_value, cluster_value, static_value, expected", [
    (None, None, None, False),  # Kafka's default
    ("true", None, None, True),
    (None, "true", None, True),
    (None, None, True, True),
    (None, None, "true", True),
    ("false", "true", True, False),  # the topic overrides the broker
    ("true", "false", False, True),
    (None, "false", True, False),  # the cluster-wide dynamic config overrides the static one
])
def test_unclean_leader_election_enable_precedence(topic_value, cluster_value, static_value,
                                                   expected):
    c = Cluster()
    configs = {} if topic_value is None else {"unclean.leader.election.enable": topic_value}
    c.topic("t", ([1, 2], [1], 1), configs=configs)
    if cluster_value is not None:
        c.broker_config("unclean.leader.election.enable", cluster_value)
    static = {} if static_value is None else {"unclean.leader.election.enable": static_value}
    assert unclean_leader_election_enabled(c.image, "t", static) is expected
    (record,) = handle_broker_fenced(c.image, 1, broker_config=static)
    assert record.leader == (2 if expected else NO_LEADER)


# -- unfencing
def test_an_unfenced_broker_leads_leaderless_partitions_whose_isr_holds_it():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1), ([2, 1], [2], 2), ([3, 2], [3], 3))
    c.fence(3)
    c.fence(2)
    assert [state(c.part("t", p)) for p in range(3)] == [(1, (1,)), (NO_LEADER, (2,)),
                                                         (NO_LEADER, (3,))]
    records = c.unfence(2)
    assert [(r.partition_id, r.leader) for r in records] == [(1, 2)]
    # Partition 2's ISR is only 3, and unclean election is off: 2 does not lead it.
    assert [state(c.part("t", p)) for p in range(3)] == [(1, (1,)), (2, (2,)),
                                                         (NO_LEADER, (3,))]


def test_with_unclean_election_an_unfenced_broker_leads_partitions_whose_isr_is_down():
    c = Cluster()
    c.topic("t", ([3, 2], [3], 3), configs={"unclean.leader.election.enable": "true"})
    c.fence(2)
    c.fence(3)
    (record,) = c.unfence(2)
    assert (record.leader, record.isr, record.leader_recovery_state) == (2, [2], RECOVERING)


# -- controlled shutdown
def test_controlled_shutdown_moves_leadership_and_leaves_the_isrs():
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1, 2, 3], 1), ([2, 1], [2, 1], 2), ([1], [1], 1))
    records = handle_broker_controlled_shutdown(c.image, 1)
    assert [(r.partition_id, r.leader, r.isr) for r in records] == [
        (0, 2, [2, 3]),
        (1, LEADER_NO_CHANGE, [2]),
        (2, NO_LEADER, None),  # only member: the partition goes offline, as in Kafka
    ]
    c.apply([m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch_of(1),
                                              in_controlled_shutdown=1), *records])
    # A broker in controlled shutdown is not an acceptable leader for elections either.
    results, records = elect_leaders(c.image, ELECTION_PREFERRED, [("t", [0, 2])])
    assert [e.error for e in results[0][1]] == [ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE] * 2


# -- ELR (KIP-966)
def elr_cluster(elr: bool) -> Cluster:
    c = Cluster(elr=elr)
    c.topic("t", ([1, 2, 3], [1, 2, 3], 1), configs={"min.insync.replicas": "2"})
    return c


def test_without_elr_fencing_below_min_isr_just_shrinks_the_isr():
    c = elr_cluster(elr=False)
    c.fence(1)
    c.fence(2)
    c.fence(3)
    p = c.part()
    assert state(p) == (NO_LEADER, (3,)) and p.elr == () and p.last_known_elr == ()


def test_with_elr_replicas_fenced_below_min_isr_stay_eligible():
    c = elr_cluster(elr=True)
    (record,) = c.fence(1)
    assert record.isr == [2, 3] and record.eligible_leader_replicas is None  # ISR >= min ISR
    (record,) = c.fence(2)
    assert record.isr == [3] and record.eligible_leader_replicas == [2]
    (record,) = c.fence(3)  # the ISR may now become empty
    assert (record.isr, record.leader, record.eligible_leader_replicas) == ([], NO_LEADER,
                                                                            [2, 3])
    assert record.last_known_elr == [3]
    p = c.part()
    assert (p.isr, p.elr, p.last_known_elr, p.leader) == ((), (2, 3), (3,), NO_LEADER)
    # Broker 1 left the ISR while it was at min ISR: not eligible, and does not lead.
    assert c.unfence(1) == []
    # An ELR member comes back: it leads, and is the ISR.
    (record,) = c.unfence(2)
    assert (record.leader, record.isr, record.eligible_leader_replicas) == (2, [2], [3])
    assert record.last_known_elr == [] and record.leader_recovery_state == -1
    p = c.part()
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, (2,), (3,), ())


def test_with_elr_an_isr_back_at_min_isr_clears_the_elr():
    c = elr_cluster(elr=True)
    c.fence(1)
    c.fence(2)
    assert c.part().elr == (2,)
    c.unfence(2)  # the partition has a leader: nothing to elect
    request = AP(broker_id=3, broker_epoch=epoch_of(3), topics=[AP.TopicData(
        topic_id=c.image.topics_by_name["t"].topic_id, partitions=[AP.PartitionData(
            partition_index=0, leader_epoch=c.part().leader_epoch,
            partition_epoch=c.part().partition_epoch,
            new_isr_with_epochs=[AP.BrokerState(broker_id=3), AP.BrokerState(broker_id=2)])])])
    response, records = alter_partition(c.image, 3, epoch_of(3), request)
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert records[0].eligible_leader_replicas == []
    c.apply(records)
    assert c.part().isr == (3, 2) and c.part().elr == ()


def test_elr_records_survive_the_metadata_log_encoding():
    record = m.PartitionChangeRecord(topic_id=uuid.uuid4(), partition_id=3, isr=[],
                                     leader=NO_LEADER, eligible_leader_replicas=[2, 3],
                                     last_known_elr=[3])
    version = m.PartitionChangeRecord.MAX_VERSION
    decoded, _ = m.decode_metadata_record(m.encode_metadata_record(record, version))
    assert decoded == record
    partition = m.PartitionRecord(topic_id=uuid.uuid4(), partition_id=0, replicas=[1, 2],
                                  isr=[1], leader=1, eligible_leader_replicas=[2],
                                  last_known_elr=[])
    decoded, _ = m.decode_metadata_record(
        m.encode_metadata_record(partition, m.PartitionRecord.MAX_VERSION))
    assert decoded.eligible_leader_replicas == [2]


def test_an_uncleanly_shut_down_broker_leaves_isrs_and_elrs():
    c = elr_cluster(elr=True)
    c.fence(1)
    c.fence(2)
    assert c.part().elr == (2,)
    records = handle_broker_unclean_shutdown(c.image, 2)
    assert [(r.isr, r.eligible_leader_replicas) for r in records] == [(None, [])]
    assert handle_broker_unclean_shutdown(Cluster().image, 2) == []  # ELR off: nothing


def test_an_unregistered_broker_leaves_isrs_and_elrs():
    c = elr_cluster(elr=True)
    c.topic("u", ([2, 3], [2, 3], 2))
    c.fence(1)
    c.fence(2)
    records = handle_broker_unregistered(c.image, 3)
    # "t": 3 led with ISR [3]; "u": 3 was a follower.
    assert {(r.topic_id, r.isr[0] if r.isr else None) for r in records} == {
        (c.image.topics_by_name["t"].topic_id, None),
        (c.image.topics_by_name["u"].topic_id, None)}


def test_unregister_broker_records():
    """UnregisterBroker: the broker leaves its ISRs (a partition it led gets the next ISR
    member), then its registration goes; an unknown id is BROKER_ID_NOT_REGISTERED."""
    c = Cluster()
    c.topic("t", ([1, 2, 3], [1, 2, 3], 2))
    records = unregister_records(c.image, 2)
    assert isinstance(records[-1], m.UnregisterBrokerRecord)
    assert (records[-1].broker_id, records[-1].broker_epoch) == (2, epoch_of(2))
    c.apply(records)
    assert state(c.part()) == (1, (1, 3)) and 2 not in c.image.brokers
    with pytest.raises(KafkaError) as refused:
        unregister_records(c.image, 2)
    assert refused.value.code == ErrorCode.BROKER_ID_NOT_REGISTERED


# -- ElectLeaders
def preferred_cluster() -> Cluster:
    c = Cluster(brokers=(1, 2, 3, 4))
    c.topic("t", ([1, 2], [1, 2], 1), ([2, 3], [2, 3], 2), ([3, 4], [3, 4], 3))
    c.fence(1)
    c.fence(3)
    c.unfence(1)
    c.unfence(3)
    return c


def test_preferred_election_needs_the_preferred_replica_to_be_able_to_lead():
    c = preferred_cluster()
    # 1 and 3 are back but out of the ISR: their partitions are led by 2 and 4.
    assert [state(c.part("t", p)) for p in range(3)] == [(2, (2,)), (2, (2,)), (4, (4,))]
    c.apply([m.PartitionChangeRecord(topic_id=c.image.topics_by_name["t"].topic_id,
                                     partition_id=2, isr=[4, 3])])  # 3 caught up
    results, records = elect_leaders(c.image, ELECTION_PREFERRED, [("t", [0, 1, 2, 7]),
                                                                  ("nope", [0])])
    assert results == [
        ("t", [PartitionElection(0, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE),
               PartitionElection(1, ErrorCode.ELECTION_NOT_NEEDED),
               PartitionElection(2, ErrorCode.NONE),
               PartitionElection(7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 "No such partition as t-7")]),
        ("nope", [PartitionElection(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    "No such topic as nope")]),
    ]
    assert [(r.partition_id, r.leader, r.isr) for r in records] == [(2, 3, None)]
    c.apply(records)
    assert state(c.part("t", 2)) == (3, (4, 3))


def test_electing_every_partition_reports_only_those_that_needed_an_election():
    c = preferred_cluster()
    c.topic("u", ([4], [4], 4))
    results, records = elect_leaders(c.image, ELECTION_PREFERRED, None)
    assert results == [("t", [PartitionElection(0, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE),
                              PartitionElection(2, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)]),
                       ("u", [])]
    assert records == []


def test_a_partition_named_twice_is_elected_once():
    c = preferred_cluster()
    c.apply([m.PartitionChangeRecord(topic_id=c.image.topics_by_name["t"].topic_id,
                                     partition_id=0, isr=[2, 1])])
    results, records = elect_leaders(c.image, ELECTION_PREFERRED, [("t", [0, 0])])
    assert [e.error for e in results[0][1]] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len(records) == 1


def test_unclean_election_only_for_leaderless_partitions():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1), ([3, 2], [3], 3), ([3], [3], 3))
    c.fence(3)
    c.fence(2)
    c.unfence(2)
    assert [state(c.part("t", p)) for p in range(3)] == [(1, (1,)), (NO_LEADER, (3,)),
                                                         (NO_LEADER, (3,))]
    results, records = elect_leaders(c.image, ELECTION_UNCLEAN, [("t", [0, 1, 2])])
    assert [e.error for e in results[0][1]] == [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.NONE,
                                                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE]
    assert [(r.partition_id, r.leader, r.isr, r.leader_recovery_state) for r in records] == [
        (1, 2, [2], RECOVERING)]


def test_an_unknown_election_type_is_an_invalid_request():
    with pytest.raises(KafkaError) as exc:
        elect_leaders(Cluster().image, 7, None)
    assert exc.value.code == ErrorCode.INVALID_REQUEST


# -- auto leader rebalance
def test_imbalanced_partitions_move_back_to_their_preferred_leader():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1), ([2, 1], [2, 1], 2), ([3, 1], [3, 1], 3))
    c.fence(1)
    c.unfence(1)
    assert imbalanced_partitions(c.image) == []  # 1 is back, but not in the ISR yet
    topic_id = c.image.topics_by_name["t"].topic_id
    c.apply([m.PartitionChangeRecord(topic_id=topic_id, partition_id=0, isr=[2, 1])])
    assert imbalanced_partitions(c.image) == [("t", 0)]
    records, more = balance_partition_leaders(c.image)
    assert not more and [(r.partition_id, r.leader) for r in records] == [(0, 1)]
    c.apply(records)
    assert imbalanced_partitions(c.image) == []


def test_leader_rebalance_is_capped_per_run():
    c = Cluster()
    c.topic("t", *[([1, 2], [1, 2], 2)] * 5)
    assert len(imbalanced_partitions(c.image)) == 5
    records, more = balance_partition_leaders(c.image, max_elections=3)
    assert len(records) == 3 and more
    c.apply(records)
    records, more = balance_partition_leaders(c.image, max_elections=3)
    assert len(records) == 2 and not more


# -- AlterPartition
def alter_cluster() -> tuple[Cluster, uuid.UUID]:
    c = Cluster(brokers=(1, 2, 3, 4))
    topic_id = c.topic("t", ([1, 2, 3], [1, 2, 3], 1), ([2, 1], [2], 2))
    c.fence(2)  # partition 0: ISR [1, 3], partition epoch 1; partition 1 leaderless
    c.unfence(2)  # partition 1: leader 2 again, leader epoch 2, partition epoch 2
    return c, topic_id


def alter_request(topic_id: uuid.UUID, isr: Sequence[int], *, partition: int = 0,
                  leader_epoch: int = 0, partition_epoch: int = 1, broker: int = 1,
                  recovery: int = RECOVERED, isr_epochs: Mapping[int, int] | None = None
                  ) -> m.AlterPartitionRequest:
    data = AP.PartitionData(
        partition_index=partition, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
        new_isr=list(isr), leader_recovery_state=recovery,
        new_isr_with_epochs=[AP.BrokerState(broker_id=b, broker_epoch=(isr_epochs or {}).get(
            b, epoch_of(b))) for b in isr])
    return AP(broker_id=broker, broker_epoch=epoch_of(broker),
              topics=[AP.TopicData(topic_id=topic_id, partitions=[data])])


def only_partition(response: m.AlterPartitionResponse) -> m.AlterPartitionResponse.PartitionData:
    assert response.error_code == ErrorCode.NONE
    ((partition,),) = [t.partitions for t in response.topics]
    return partition


def test_alter_partition_expands_the_isr_and_reports_the_new_state():
    c, topic_id = alter_cluster()
    response, records = alter_partition(c.image, 1, epoch_of(1),
                                        alter_request(topic_id, [1, 3, 2]))
    p = only_partition(response)
    assert (p.error_code, p.leader_id, p.leader_epoch, p.isr, p.partition_epoch) == (
        ErrorCode.NONE, 1, 0, [1, 3, 2], 2)
    assert response.topics[0].topic_id == topic_id
    (record,) = records
    assert record.isr == [1, 3, 2] and record.leader == LEADER_NO_CHANGE
    c.apply(records)
    after = c.part()
    assert (after.isr, after.leader_epoch, after.partition_epoch) == ((1, 3, 2), 0, 2)
    assert merge_partition_change(PartitionRegistration((1, 2, 3), (1, 3), 1, 0, 1),
                                  record) == after


def test_alter_partition_shrinks_the_isr():
    c, topic_id = alter_cluster()
    response, records = alter_partition(c.image, 1, epoch_of(1), alter_request(topic_id, [1]))
    assert only_partition(response).isr == [1] and records[0].isr == [1]


def test_alter_partition_that_changes_nothing_writes_no_record():
    c, topic_id = alter_cluster()
    response, records = alter_partition(c.image, 1, epoch_of(1),
                                        alter_request(topic_id, [1, 3]))
    p = only_partition(response)
    assert records == [] and (p.error_code, p.isr, p.partition_epoch) == (ErrorCode.NONE,
                                                                          [1, 3], 1)


def test_a_recovering_leader_reports_it_has_recovered():
    c = Cluster()
    topic_id = c.topic("t", ([1, 2], [1], 1), configs={"unclean.leader.election.enable": "true"})
    c.fence(1)
    assert c.part().leader_recovery_state == RECOVERING
    request = alter_request(topic_id, [2], broker=2, leader_epoch=1, partition_epoch=1,
                            recovery=RECOVERED)
    response, records = alter_partition(c.image, 2, epoch_of(2), request)
    assert only_partition(response).leader_recovery_state == RECOVERED
    assert records[0].leader_recovery_state == RECOVERED
    c.apply(records)
    assert c.part().leader_recovery_state == RECOVERED


@pytest.mark.parametrize("change, error", [
    ({"leader_epoch": 1}, ErrorCode.NOT_CONTROLLER),  # epochs ahead of the controller's
    ({"partition_epoch": 2}, ErrorCode.NOT_CONTROLLER),
    ({"partition": 1, "broker": 2, "leader_epoch": 1, "partition_epoch": 2,
      "isr": [2]}, ErrorCode.FENCED_LEADER_EPOCH),
    ({"broker": 3}, ErrorCode.INVALID_REQUEST),  # not the leader
    ({"partition_epoch": 0}, ErrorCode.INVALID_UPDATE_VERSION),
    ({"isr": [1, 4]}, ErrorCode.INVALID_REQUEST),  # 4 is no replica
    ({"isr": [1, 1]}, ErrorCode.INVALID_REQUEST),
    ({"isr": [3]}, ErrorCode.INVALID_REQUEST),  # the leader must stay in the ISR
    ({"isr": []}, ErrorCode.INVALID_REQUEST),
    ({"isr": [1, 3], "recovery": RECOVERING}, ErrorCode.INVALID_REQUEST),
    ({"isr": [1], "recovery": RECOVERING}, ErrorCode.INVALID_REQUEST),  # RECOVERED -> RECOVERING
    ({"partition": 5}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ({"isr_epochs": {3: 999}}, ErrorCode.INELIGIBLE_REPLICA),  # a restarted follower
])
def test_alter_partition_validation(change: dict[str, Any], error: ErrorCode):
    c, topic_id = alter_cluster()
    args: dict[str, Any] = {"isr": [1, 3]} | change
    isr = args.pop("isr")
    response, records = alter_partition(c.image, args.get("broker", 1),
                                        epoch_of(args.get("broker", 1)),
                                        alter_request(topic_id, isr, **args))
    assert only_partition(response).error_code == error and records == []


@pytest.mark.parametrize("ineligible", ["fenced", "shutting down", "unregistered"])
@pytest.mark.parametrize("version, error", [(3, ErrorCode.INELIGIBLE_REPLICA),
                                            (2, ErrorCode.INELIGIBLE_REPLICA)])
def test_alter_partition_refuses_ineligible_isr_members(ineligible: str, version: int,
                                                        error: ErrorCode):
    c = Cluster(brokers=(1, 2, 3, 4))
    topic_id = c.topic("t", ([1, 2, 3, 4], [1], 1))
    if ineligible == "fenced":
        c.apply([m.FenceBrokerRecord(id=4, epoch=epoch_of(4))])
    elif ineligible == "shutting down":
        c.apply([m.BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=epoch_of(4),
                                                  in_controlled_shutdown=1)])
    else:
        c.apply([m.UnregisterBrokerRecord(broker_id=4, broker_epoch=epoch_of(4))])
    request = alter_request(topic_id, [1, 4], partition_epoch=0)
    response, records = alter_partition(c.image, 1, epoch_of(1), request, version=version)
    assert only_partition(response).error_code == error and records == []
    response, records = alter_partition(c.image, 1, epoch_of(1),
                                        alter_request(topic_id, [1, 2], partition_epoch=0),
                                        version=version)
    assert only_partition(response).error_code == ErrorCode.NONE and len(records) == 1


def test_alter_partition_from_a_stale_broker_epoch_is_refused_as_a_whole():
    c, topic_id = alter_cluster()
    for broker, epoch in ((1, epoch_of(1) - 1), (9, 5)):
        response, records = alter_partition(c.image, broker, epoch,
                                            alter_request(topic_id, [1, 3]))
        assert response.error_code == ErrorCode.STALE_BROKER_EPOCH
        assert response.topics == [] and records == []


def test_alter_partition_for_unknown_topics():
    c, topic_id = alter_cluster()
    response, _ = alter_partition(c.image, 1, epoch_of(1), alter_request(uuid.uuid4(), [1, 3]))
    assert only_partition(response).error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_alter_partition_below_min_isr_with_elr_keeps_the_removed_replicas_eligible():
    c = Cluster(brokers=(1, 2, 3, 4), elr=True)
    topic_id = c.topic("t", ([1, 2, 3, 4], [1, 2, 3, 4], 1), configs={"min.insync.replicas": "3"})
    response, records = alter_partition(c.image, 1, epoch_of(1),
                                        alter_request(topic_id, [1, 2], partition_epoch=0))
    assert only_partition(response).isr == [1, 2]
    assert records[0].eligible_leader_replicas == [3, 4] and records[0].leader == LEADER_NO_CHANGE


def test_effective_min_isr_is_capped_by_the_replication_factor():
    c = Cluster()
    c.topic("t", ([1, 2], [1, 2], 1), configs={"min.insync.replicas": "3"})
    c.topic("u", ([1, 2, 3], [1, 2, 3], 1))
    assert effective_min_isr(c.image, c.image.topics_by_name["t"]) == 2
    assert effective_min_isr(c.image, c.image.topics_by_name["u"]) == 1
    c.broker_config("min.insync.replicas", "2")
    assert effective_min_isr(c.image, c.image.topics_by_name["u"]) == 2
    assert effective_min_isr(c.image, c.image.topics_by_name["u"],
                             {"min.insync.replicas": 3}) == 2  # dynamic beats static
