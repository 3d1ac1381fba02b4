"""Partition leadership and ISR changes, as Kafka's ReplicationControlManager and
PartitionChangeBuilder compute them: an image in, PartitionChangeRecords out.

Nothing here touches an image or the log; the quorum controller appends the records (with
whatever broker registration records go with them) and replays them. Every function works
whether or not the image already shows the broker event it handles: the broker being fenced
(or shutting down) is never an acceptable leader and always leaves the ISRs, the broker being
unfenced is always an acceptable leader.

Rules (Kafka 4.0):
- A leader must be *active*: registered, unfenced, not in controlled shutdown. A clean
  election picks, in replica order, the first active ISR member, keeping the current leader
  when it is still valid.
- The ISR never becomes empty while ELR is off: when the last ISR member is fenced it stays in
  the ISR and the partition has no leader (-1), so it can lead again once back (KIP-841 removes
  fenced brokers from ISRs, except the last one).
- Unclean election (`unclean.leader.election.enable`, topic config over the cluster-wide
  dynamic broker config over the static broker config; false by default) may elect any active
  replica when no ISR member can lead: the ISR becomes that replica alone and the leader
  recovery state RECOVERING (data may be lost).
- ELR (KIP-966), when the `eligible.leader.replicas.version` feature is >= 1: while the ISR is
  below min.insync.replicas, replicas that leave it go to the ELR (eligible leader replicas);
  the ISR may then become empty, and an active ELR member may be elected when it is. The
  last known leader is kept in `last_known_elr` when the ISR empties, and may be elected
  (uncleanly) when both ISR and ELR are empty.

Reassignments (KIP-455, as Kafka's PartitionReassignmentReplicas): AlterPartitionReassignments
writes a PartitionChangeRecord with replicas = target + the replicas being removed, and the
adding/removing sets; the brokers being added replicate, and the leader adds them to the ISR by
AlterPartition. Every PartitionChangeBuilder run (AlterPartition, broker fencing, unfencing,
shutdown, elections) completes a reassignment once every target replica is in the ISR: replicas
become the target, the removed replicas leave the ISR, adding/removing are cleared, and a leader
that was removed hands leadership to the first target replica in the ISR. Cancelling
(`replicas: null`) reverts to the original replicas (PartitionReassignmentRevert).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from odradek.metadata.image import (
    LEADER_NO_CHANGE,
    NO_LEADER,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

ELR_FEATURE = "eligible.leader.replicas.version"
UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS = "min.insync.replicas"

# LeaderRecoveryState: RECOVERING after an unclean election, until the leader reports (by
# AlterPartition) that it has recovered; -1 in a PartitionChangeRecord means "no change".
RECOVERED = 0
RECOVERING = 1
RECOVERY_NO_CHANGE = -1

# ElectLeaders election types.
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1

#: Kafka's cap on preferred elections per auto-rebalance run (the rest are for the next run).
MAX_ELECTIONS_PER_IMBALANCE = 1000


class Election(enum.Enum):
    PREFERRED = "preferred"  # the first replica if it can lead, else as ONLINE
    ONLINE = "online"  # an ISR member (or ELR member when the ISR is empty)
    UNCLEAN = "unclean"  # as ONLINE, else any active replica (may lose data)


class ConfigLookup(Protocol):
    """Static broker config: a Mapping or the broker's config object (anything with get)."""

    def get(self, key: str) -> Any: ...


# -- cluster state helpers
def is_active(image: MetadataImage, broker_id: int) -> bool:
    """Whether a broker may lead and be in an ISR: registered, unfenced, not shutting down."""
    reg = image.brokers.get(broker_id)
    return reg is not None and not reg.fenced and not reg.in_controlled_shutdown


def elr_enabled(image: MetadataImage) -> bool:
    """KIP-966 eligible leader replicas: on when the feature's finalized level is >= 1."""
    return image.features.get(ELR_FEATURE, 0) >= 1


def _config_value(image: MetadataImage, topic: str, key: str,
                  broker_config: ConfigLookup | None) -> Any:
    """A topic config's effective value: the topic's own, else the cluster-wide dynamic broker
    config, else the static broker config; None when none sets it."""
    value = image.topic_config(topic).get(key)
    if value is None:
        value = image.broker_config(None).get(key)
    if value is None and broker_config is not None:
        value = broker_config.get(key)
    return value


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def unclean_leader_election_enabled(image: MetadataImage, topic: str,
                                    broker_config: ConfigLookup | None = None) -> bool:
    value = _config_value(image, topic, UNCLEAN_LEADER_ELECTION_ENABLE, broker_config)
    return False if value is None else _as_bool(value)


def effective_min_isr(image: MetadataImage, topic: TopicImage,
                      broker_config: ConfigLookup | None = None) -> int:
    """min.insync.replicas of the topic, capped at its replication factor (as Kafka)."""
    value = _config_value(image, topic.name, MIN_INSYNC_REPLICAS, broker_config)
    try:
        min_isr = int(value) if value is not None else 1
    except (TypeError, ValueError):
        min_isr = 1
    first = topic.partitions.get(0) or next(iter(topic.partitions.values()), None)
    replication_factor = len(first.replicas) if first is not None else min_isr
    return min(min_isr, replication_factor)


def merge_partition_change(partition: PartitionRegistration,
                           record: m.PartitionChangeRecord) -> PartitionRegistration:
    """The partition after `record`, as MetadataDelta replays it (for responses that report
    the new state before the record is replayed)."""
    changes: dict[str, Any] = {"partition_epoch": partition.partition_epoch + 1}
    if record.isr is not None:
        changes["isr"] = tuple(record.isr)
    if record.replicas is not None:
        changes["replicas"] = tuple(record.replicas)
    if record.removing_replicas is not None:
        changes["removing_replicas"] = tuple(record.removing_replicas)
    if record.adding_replicas is not None:
        changes["adding_replicas"] = tuple(record.adding_replicas)
    if record.leader != LEADER_NO_CHANGE:
        changes["leader"] = record.leader
        changes["leader_epoch"] = partition.leader_epoch + 1
    if record.leader_recovery_state != RECOVERY_NO_CHANGE:
        changes["leader_recovery_state"] = record.leader_recovery_state
    if record.eligible_leader_replicas is not None:
        changes["elr"] = tuple(record.eligible_leader_replicas)
    if record.last_known_elr is not None:
        changes["last_known_elr"] = tuple(record.last_known_elr)
    return replace(partition, **changes)


# -- the partition change builder
def _is_no_op(record: m.PartitionChangeRecord) -> bool:
    return (record.isr is None and record.eligible_leader_replicas is None
            and record.last_known_elr is None and record.leader == LEADER_NO_CHANGE
            and record.replicas is None and record.removing_replicas is None
            and record.adding_replicas is None
            and record.leader_recovery_state == RECOVERY_NO_CHANGE
            and record.directories is None)


class PartitionChangeBuilder:
    """Computes the PartitionChangeRecord that moves a partition to a target ISR (and leader
    recovery state), electing a leader as `election` allows; None when nothing changes.

    `is_acceptable_leader(broker)` says which brokers may lead (normally: active ones).
    """

    def __init__(self, partition: PartitionRegistration, topic_id: uuid.UUID,
                 partition_id: int, is_acceptable_leader: Callable[[int], bool], min_isr: int,
                 *, election: Election = Election.ONLINE, elr: bool = False,
                 target_isr: Sequence[int] | None = None,
                 target_leader_recovery_state: int | None = None,
                 unclean_shutdown_replicas: Sequence[int] = (),
                 use_last_known_leader: bool = True,
                 target_replicas: Sequence[int] | None = None,
                 target_removing: Sequence[int] | None = None,
                 target_adding: Sequence[int] | None = None) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.min_isr = min_isr
        self.election = election
        self.elr = elr
        self.target_isr = list(partition.isr if target_isr is None else target_isr)
        self.target_replicas = list(partition.replicas if target_replicas is None
                                    else target_replicas)
        self.target_removing = list(partition.removing_replicas if target_removing is None
                                    else target_removing)
        self.target_adding = list(partition.adding_replicas if target_adding is None
                                  else target_adding)
        self.target_elr = list(partition.elr)
        self.target_last_known_elr = list(partition.last_known_elr)
        self.target_leader_recovery_state = (partition.leader_recovery_state
                                             if target_leader_recovery_state is None
                                             else target_leader_recovery_state)
        self.unclean_shutdown_replicas = frozenset(unclean_shutdown_replicas)
        self.use_last_known_leader = use_last_known_leader

    def build(self) -> m.PartitionChangeRecord | None:
        record = m.PartitionChangeRecord(topic_id=self.topic_id,
                                         partition_id=self.partition_id)
        self._complete_reassignment_if_needed()
        self._populate_target_elr()
        self._try_election(record)
        self._bump_leader_epoch_for_reassignment(record)
        self._update_record_elr(record)
        # The ISR may only become empty when ELR is on (then the ELR keeps who may lead).
        if (record.isr is None and (self.target_isr or self.elr)
                and self.target_isr != list(self.partition.isr)):
            record.isr = list(self.target_isr)
        self._update_last_known_leader(record)
        self._set_assignment_changes(record)
        if self.target_leader_recovery_state != self.partition.leader_recovery_state:
            record.leader_recovery_state = self.target_leader_recovery_state
        return None if _is_no_op(record) else record

    # -- election
    def _is_valid_new_leader(self, replica: int) -> bool:
        """In the target ISR, or in the ELR when the ISR is empty; and acceptable."""
        eligible = replica in self.target_isr or (not self.target_isr
                                                  and replica in self.target_elr)
        return eligible and self.is_acceptable_leader(replica)

    def _can_elect_last_known_leader(self) -> bool:
        p = self.partition
        if not self.elr or not self.use_last_known_leader:
            return False
        if self.target_elr or self.target_isr:
            return False
        # Kafka 4.0 elects the last known leader even when it is not active (its check of
        # that is inverted); a leader that cannot serve helps nobody, so Odradek requires it.
        return len(p.last_known_elr) == 1 and self.is_acceptable_leader(p.last_known_elr[0])

    def _elect_leader(self) -> tuple[int, bool]:
        """(new leader or NO_LEADER, whether the election was unclean)."""
        p = self.partition
        replicas = self.target_replicas
        if self.election is Election.PREFERRED:
            if replicas and self._is_valid_new_leader(replicas[0]):
                return replicas[0], False
            if self._is_valid_new_leader(p.leader):
                return p.leader, False  # the current leader still qualifies: keep it
            for replica in replicas[1:]:
                if self._is_valid_new_leader(replica):
                    return replica, False
            if self._can_elect_last_known_leader():
                return p.last_known_elr[0], True
            return NO_LEADER, False
        if self._is_valid_new_leader(p.leader):
            return p.leader, False
        for replica in replicas:
            if self._is_valid_new_leader(replica):
                return replica, False
        if self._can_elect_last_known_leader():
            return p.last_known_elr[0], True
        if self.election is Election.UNCLEAN:
            for replica in replicas:
                if self.is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def _try_election(self, record: m.PartitionChangeRecord) -> None:
        leader, unclean = self._elect_leader()
        if leader == self.partition.leader:
            return
        if leader in self.target_elr:
            # An ELR member elected from an empty ISR: it is the ISR now.
            self.target_isr = [leader]
            self.target_elr = [r for r in self.target_elr if r != leader]
        record.leader = leader
        if unclean:
            # Data-loss election: the new leader alone is the ISR, and it must recover.
            record.isr = [leader]
            if self.partition.leader_recovery_state != RECOVERING:
                record.leader_recovery_state = RECOVERING

    # -- reassignment
    def _complete_reassignment_if_needed(self) -> None:
        """Kafka's maybeCompleteReassignment: once every replica of the target assignment
        (replicas minus removing) is in the target ISR, the removed replicas leave the replicas
        and the ISR and adding/removing are cleared. Not while that would empty the ISR."""
        if not self.target_removing and not self.target_adding:
            return
        new_isr = list(self.target_isr)
        new_replicas = list(self.target_replicas)
        if self.target_removing:
            removing = set(self.target_removing)
            new_isr = [r for r in self.target_isr if r not in removing]
            if not new_isr:
                return
            new_replicas = [r for r in self.target_replicas if r not in removing]
            if not new_replicas:
                return
        if not set(new_replicas) <= set(new_isr):
            return
        self.target_isr = new_isr
        self.target_replicas = new_replicas
        self.target_removing = []
        self.target_adding = []

    def _bump_leader_epoch_for_reassignment(self, record: m.PartitionChangeRecord) -> None:
        """A replica leaving the replica set bumps the leader epoch (Kafka's
        triggerLeaderEpochBumpForReplicaReassignmentIfNeeded), so the removed replica's
        fetches are fenced."""
        if record.leader != LEADER_NO_CHANGE:
            return  # a new leader bumps it anyway
        if not set(self.partition.replicas) <= set(self.target_replicas):
            record.leader = self.partition.leader

    def _set_assignment_changes(self, record: m.PartitionChangeRecord) -> None:
        p = self.partition
        if self.target_replicas and self.target_replicas != list(p.replicas):
            record.replicas = list(self.target_replicas)
        if self.target_removing != list(p.removing_replicas):
            record.removing_replicas = list(self.target_removing)
        if self.target_adding != list(p.adding_replicas):
            record.adding_replicas = list(self.target_adding)

    # -- ELR
    def _populate_target_elr(self) -> None:
        if not self.elr:
            return
        if len(self.target_isr) >= self.min_isr:
            self.target_elr = []
            self.target_last_known_elr = []
            return
        isr = set(self.target_isr)
        # The ELR keeps the current ISR and ELR members that leave (or are not in) the target
        # ISR, but never a replica that shut down uncleanly (its log may be incomplete).
        candidates = set(self.target_elr) | set(self.partition.isr)
        self.target_elr = sorted(r for r in candidates if r not in isr
                                 and r not in self.unclean_shutdown_replicas)
        candidates |= set(self.target_last_known_elr)
        self.target_last_known_elr = sorted(r for r in candidates if r not in isr
                                            and r not in self.target_elr)

    def _update_record_elr(self, record: m.PartitionChangeRecord) -> None:
        p = self.partition
        if record.isr is not None or not self.elr:  # unclean election, or ELR off
            self.target_elr = []
            self.target_last_known_elr = []
        if self.target_elr != list(p.elr):
            record.eligible_leader_replicas = list(self.target_elr)
        if self.use_last_known_leader:
            return  # last_known_elr holds the last known leader: see _update_last_known_leader
        if self.target_last_known_elr != list(p.last_known_elr):
            record.last_known_elr = list(self.target_last_known_elr)

    def _update_last_known_leader(self, record: m.PartitionChangeRecord) -> None:
        p = self.partition
        if not self.use_last_known_leader or not self.elr:
            return
        if (record.isr is not None and not record.isr and p.leader != NO_LEADER
                and list(p.last_known_elr) != [p.leader]):
            # The ISR just emptied: remember who led last.
            record.last_known_elr = [p.leader]
        elif ((record.leader >= 0 or (p.leader != NO_LEADER and record.leader != NO_LEADER))
              and p.last_known_elr):
            # The partition has (or keeps) a leader: forget the last known one.
            record.last_known_elr = []


# -- iterating partitions
def _partitions(image: MetadataImage,
                wanted: Callable[[PartitionRegistration], bool]
                ) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    """Partitions matching `wanted`, by topic name then partition id (deterministic)."""
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        for partition_id in sorted(topic.partitions):
            partition = topic.partitions[partition_id]
            if wanted(partition):
                yield topic, partition_id, partition


def _leader_and_isr_updates(image: MetadataImage,
                            partitions: Iterable[tuple[TopicImage, int, PartitionRegistration]],
                            *, broker_to_remove: int = NO_LEADER,
                            broker_to_add: int = NO_LEADER,
                            broker_with_unclean_shutdown: int = NO_LEADER,
                            broker_config: ConfigLookup | None = None
                            ) -> list[m.PartitionChangeRecord]:
    """Kafka's generateLeaderAndIsrUpdates: the removed (or uncleanly shut down) broker leaves
    each ISR and may not lead; the added broker may lead even if the image still shows it
    fenced."""
    leaving = {broker_to_remove, broker_with_unclean_shutdown} - {NO_LEADER}

    def acceptable(replica: int) -> bool:
        if replica in leaving:
            return False
        return (broker_to_add != NO_LEADER and replica == broker_to_add) or is_active(
            image, replica)

    elr = elr_enabled(image)
    records = []
    for topic, partition_id, partition in partitions:
        unclean = unclean_leader_election_enabled(image, topic.name, broker_config)
        builder = PartitionChangeBuilder(
            partition, topic.topic_id, partition_id, acceptable,
            effective_min_isr(image, topic, broker_config),
            election=Election.UNCLEAN if unclean else Election.ONLINE, elr=elr,
            target_isr=[r for r in partition.isr if r not in leaving],
            unclean_shutdown_replicas=(() if broker_with_unclean_shutdown == NO_LEADER
                                       else (broker_with_unclean_shutdown,)))
        record = builder.build()
        if record is not None:
            records.append(record)
    return records


# -- broker events (the lead's broker lifecycle calls these)
def handle_broker_fenced(image: MetadataImage, broker_id: int, *,
                         broker_config: ConfigLookup | None = None
                         ) -> list[m.PartitionChangeRecord]:
    """Records for a broker being fenced: it leaves every ISR it is in (but stays as the last
    member of an ISR it is alone in, unless ELR is on), and partitions it led get a new leader
    from the rest of the ISR, else an unclean one if the topic allows, else none (-1).

    The caller adds the fencing record itself (BrokerRegistrationChangeRecord or
    FenceBrokerRecord), before or after these."""
    return _leader_and_isr_updates(
        image, _partitions(image, lambda p: broker_id in p.isr),
        broker_to_remove=broker_id, broker_config=broker_config)


def handle_broker_controlled_shutdown(image: MetadataImage, broker_id: int, *,
                                      broker_config: ConfigLookup | None = None
                                      ) -> list[m.PartitionChangeRecord]:
    """Records for a broker entering controlled shutdown: as for a fenced broker, it leaves the
    ISRs and hands leadership to another ISR member where one can lead. A partition whose only
    ISR member it is loses its leader (as in Kafka): the broker stops anyway.

    The caller adds the BrokerRegistrationChangeRecord (in_controlled_shutdown=1)."""
    return _leader_and_isr_updates(
        image, _partitions(image, lambda p: broker_id in p.isr),
        broker_to_remove=broker_id, broker_config=broker_config)


def handle_broker_unfenced(image: MetadataImage, broker_id: int, *,
                           broker_config: ConfigLookup | None = None
                           ) -> list[m.PartitionChangeRecord]:
    """Records for a broker being unfenced: every leaderless partition elects a leader if it now
    can (the broker counts as active even if the image still shows it fenced): an ISR member,
    an ELR member when the ISR is empty, or, where the topic allows unclean election, any
    active replica.

    The caller adds the unfencing record itself."""
    return _leader_and_isr_updates(
        image, _partitions(image, lambda p: p.leader == NO_LEADER),
        broker_to_add=broker_id, broker_config=broker_config)


def handle_broker_unclean_shutdown(image: MetadataImage, broker_id: int, *,
                                   broker_config: ConfigLookup | None = None
                                   ) -> list[m.PartitionChangeRecord]:
    """Records for a broker that re-registers after an unclean shutdown (ELR only, as Kafka):
    it leaves every ISR and ELR, since its log may have lost acknowledged records."""
    if not elr_enabled(image):
        return []
    in_isr = list(_partitions(image, lambda p: broker_id in p.isr))
    in_elr = list(_partitions(image, lambda p: broker_id in p.elr))
    return (_leader_and_isr_updates(image, in_isr, broker_with_unclean_shutdown=broker_id,
                                    broker_config=broker_config)
            + _leader_and_isr_updates(image, in_elr, broker_with_unclean_shutdown=broker_id,
                                      broker_config=broker_config))


def handle_broker_unregistered(image: MetadataImage, broker_id: int, *,
                               broker_config: ConfigLookup | None = None
                               ) -> list[m.PartitionChangeRecord]:
    """Records for a broker being unregistered: it leaves every ISR and ELR.
    The caller adds the UnregisterBrokerRecord."""
    in_isr = list(_partitions(image, lambda p: broker_id in p.isr))
    in_elr = list(_partitions(image, lambda p: broker_id in p.elr))
    return (_leader_and_isr_updates(image, in_isr, broker_to_remove=broker_id,
                                    broker_config=broker_config)
            + _leader_and_isr_updates(image, in_elr, broker_to_remove=broker_id,
                                      broker_config=broker_config))


# -- ElectLeaders
@dataclass(frozen=True, slots=True)
class PartitionElection:
    """The outcome of one partition's election, as ElectLeaders reports it."""

    partition_id: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def _elect_leader(image: MetadataImage, topic_name: str, partition_id: int,
                  election_type: int, broker_config: ConfigLookup | None
                  ) -> tuple[PartitionElection, m.PartitionChangeRecord | None]:
    topic = image.topics_by_name.get(topic_name)
    if topic is None:
        return PartitionElection(partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"No such topic as {topic_name}"), None
    partition = topic.partitions.get(partition_id)
    if partition is None:
        return PartitionElection(partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"No such partition as {topic_name}-{partition_id}"), None
    has_preferred_leader = bool(partition.replicas) and partition.leader == partition.replicas[0]
    if ((election_type == ELECTION_PREFERRED and has_preferred_leader)
            or (election_type == ELECTION_UNCLEAN and partition.leader != NO_LEADER)):
        return PartitionElection(partition_id, ErrorCode.ELECTION_NOT_NEEDED), None
    builder = PartitionChangeBuilder(
        partition, topic.topic_id, partition_id, lambda r: is_active(image, r),
        effective_min_isr(image, topic, broker_config),
        election=Election.PREFERRED if election_type == ELECTION_PREFERRED else Election.UNCLEAN,
        elr=elr_enabled(image))
    record = builder.build()
    if record is None:
        error = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                 if election_type == ELECTION_PREFERRED
                 else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        return PartitionElection(partition_id, error), None
    return PartitionElection(partition_id), record


ElectionResults = list[tuple[str, list[PartitionElection]]]


def elect_leaders(image: MetadataImage, election_type: int,
                  topic_partitions: Iterable[tuple[str, Sequence[int]]] | None, *,
                  broker_config: ConfigLookup | None = None
                  ) -> tuple[ElectionResults, list[m.PartitionChangeRecord]]:
    """ElectLeaders: per topic (in request order), each partition's outcome; and the records.

    PREFERRED (0): the first replica leads if it is an active ISR member (ELECTION_NOT_NEEDED
    if it already leads, PREFERRED_LEADER_NOT_AVAILABLE if no change can be made).
    UNCLEAN (1): only leaderless partitions; an ISR member if one can lead, else any active
    replica (ELECTION_NOT_NEEDED for a partition with a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE
    when no replica can lead).
    `topic_partitions` None means every partition, and then partitions that need no election
    are left out of the results (as Kafka). Raises KafkaError(INVALID_REQUEST) for an unknown
    election type.
    """
    if election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    results: ElectionResults = []
    records: list[m.PartitionChangeRecord] = []
    done: dict[tuple[str, int], PartitionElection] = {}

    def elect(topic: str, partition_id: int) -> PartitionElection:
        # A partition named twice is elected once (a second record would repeat the change).
        key = (topic, partition_id)
        if key not in done:
            outcome, record = _elect_leader(image, topic, partition_id, election_type,
                                            broker_config)
            done[key] = outcome
            if record is not None:
                records.append(record)
        return done[key]

    if topic_partitions is None:
        for name in sorted(image.topics_by_name):
            outcomes = [elect(name, p) for p in sorted(image.topics_by_name[name].partitions)]
            results.append((name, [o for o in outcomes
                                   if o.error != ErrorCode.ELECTION_NOT_NEEDED]))
    else:
        for name, partition_ids in topic_partitions:
            results.append((name, [elect(name, p) for p in partition_ids]))
    return results, records


# -- auto leader rebalance
def imbalanced_partitions(image: MetadataImage) -> list[tuple[str, int]]:
    """(topic, partition) whose preferred replica (the first) is in the ISR but not leader:
    those a preferred election may move back (Kafka's imbalancedPartitions)."""
    return [(topic.name, partition_id) for topic, partition_id, _ in _partitions(
        image, lambda p: bool(p.replicas) and p.leader != p.replicas[0]
        and p.replicas[0] in p.isr)]


def balance_partition_leaders(image: MetadataImage, *,
                              max_elections: int = MAX_ELECTIONS_PER_IMBALANCE,
                              broker_config: ConfigLookup | None = None
                              ) -> tuple[list[m.PartitionChangeRecord], bool]:
    """One auto-rebalance run (`auto.leader.rebalance.enable`, every
    `leader.imbalance.check.interval.seconds`): preferred elections for the imbalanced
    partitions, at most `max_elections` records; the flag says more remain (Kafka then runs
    again at once)."""
    elr = elr_enabled(image)
    records: list[m.PartitionChangeRecord] = []
    for topic_name, partition_id in imbalanced_partitions(image):
        if len(records) >= max_elections:
            return records, True
        topic = image.topics_by_name[topic_name]
        builder = PartitionChangeBuilder(
            topic.partitions[partition_id], topic.topic_id, partition_id,
            lambda r: is_active(image, r), effective_min_isr(image, topic, broker_config),
            election=Election.PREFERRED, elr=elr)
        record = builder.build()
        if record is not None:
            records.append(record)
    return records, False


# -- AlterPartition
def _valid_isr(replicas: Sequence[int], isr: Sequence[int]) -> bool:
    """Kafka's Replicas.validateIsr: no negative ids, no duplicates, only replicas."""
    return (all(r >= 0 for r in isr) and len(set(isr)) == len(isr)
            and set(isr) <= set(replicas))


def _ineligible_replicas(image: MetadataImage,
                         isr: Sequence[tuple[int, int]]) -> list[tuple[int, str]]:
    problems = []
    for broker_id, broker_epoch in isr:
        reg = image.brokers.get(broker_id)
        if reg is None:
            problems.append((broker_id, "not registered"))
        elif reg.in_controlled_shutdown:
            problems.append((broker_id, "shutting down"))
        elif reg.fenced:
            problems.append((broker_id, "fenced"))
        elif broker_epoch != -1 and reg.epoch != broker_epoch:
            # -1: the leader does not know the follower's epoch (requests before v3)
            mismatch = f"broker epoch mismatch: requested={broker_epoch} VS expected={reg.epoch}"
            problems.append((broker_id, mismatch))
    return problems


def _validate_alter_partition(image: MetadataImage, broker_id: int,
                              partition: PartitionRegistration | None,
                              data: m.AlterPartitionRequest.PartitionData,
                              new_isr: Sequence[tuple[int, int]], version: int) -> ErrorCode:
    """Kafka's validateAlterPartitionData, check by check."""
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Epochs newer than the controller's: this controller is probably no longer active, so the
    # leader should look for the new one.
    if data.leader_epoch > partition.leader_epoch:
        return ErrorCode.NOT_CONTROLLER
    if data.partition_epoch > partition.partition_epoch:
        return ErrorCode.NOT_CONTROLLER
    if data.leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if broker_id != partition.leader:
        return ErrorCode.INVALID_REQUEST
    if data.partition_epoch < partition.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    isr_ids = [b for b, _ in new_isr]
    if not _valid_isr(partition.replicas, isr_ids):
        return ErrorCode.INVALID_REQUEST
    if partition.leader not in isr_ids:  # the ISR always includes the leader
        return ErrorCode.INVALID_REQUEST
    recovery = data.leader_recovery_state
    if recovery == RECOVERING and len(isr_ids) > 1:
        return ErrorCode.INVALID_REQUEST  # a recovering leader is the ISR alone
    if partition.leader_recovery_state == RECOVERED and recovery == RECOVERING:
        return ErrorCode.INVALID_REQUEST
    if _ineligible_replicas(image, new_isr):
        return ErrorCode.INELIGIBLE_REPLICA
    return ErrorCode.NONE


def alter_partition(image: MetadataImage, broker_id: int, broker_epoch: int,
                    request: m.AlterPartitionRequest, *, version: int = 3,
                    broker_config: ConfigLookup | None = None
                    ) -> tuple[m.AlterPartitionResponse, list[m.PartitionChangeRecord]]:
    """AlterPartition (a partition leader changing its ISR or leader recovery state), validated
    as Kafka does; `version` is the request's (v2, all Kafka 4.0 takes, names topics by id; v3
    gives the ISR with broker epochs). Whether this node is the active controller is the caller's check.

    Top-level STALE_BROKER_EPOCH (and no topics) when the sender's registration does not match
    `broker_epoch`. Per partition: UNKNOWN_TOPIC_ID,
    NOT_CONTROLLER (epochs ahead of this controller's), FENCED_LEADER_EPOCH, INVALID_REQUEST
    (not the leader, bad ISR, bad recovery state), INVALID_UPDATE_VERSION (stale partition
    epoch), INELIGIBLE_REPLICA for ISR members that are
    unregistered, fenced, shutting down or of another broker epoch, NEW_LEADER_ELECTED when the
    change also moved leadership; otherwise the partition's new state.
    """
    R = m.AlterPartitionResponse
    reg = image.brokers.get(broker_id)
    if reg is None or reg.epoch != broker_epoch:
        return R(error_code=ErrorCode.STALE_BROKER_EPOCH), []
    response = R(error_code=ErrorCode.NONE)
    records: list[m.PartitionChangeRecord] = []
    elr = elr_enabled(image)
    for topic_data in request.topics:
        # AlterPartition v2+ (all Kafka 4.0 takes) names topics by id.
        out = R.TopicData(topic_id=topic_data.topic_id)
        response.topics.append(out)
        topic = image.topics_by_id.get(topic_data.topic_id)
        if topic is None:
            error = ErrorCode.UNKNOWN_TOPIC_ID
            out.partitions.extend(R.PartitionData(partition_index=d.partition_index,
                                                  error_code=error)
                                  for d in topic_data.partitions)
            continue
        for data in topic_data.partitions:
            if version >= 3:
                new_isr = [(b.broker_id, b.broker_epoch) for b in data.new_isr_with_epochs]
            else:
                new_isr = [(b, -1) for b in data.new_isr]
            partition_id = data.partition_index
            partition = topic.partitions.get(partition_id)
            error = _validate_alter_partition(image, broker_id, partition, data, new_isr,
                                              version)
            if error != ErrorCode.NONE or partition is None:
                out.partitions.append(R.PartitionData(partition_index=partition_id,
                                                      error_code=error))
                continue
            unclean = unclean_leader_election_enabled(image, topic.name, broker_config)
            builder = PartitionChangeBuilder(
                partition, topic.topic_id, partition_id, lambda r: is_active(image, r),
                effective_min_isr(image, topic, broker_config),
                election=Election.UNCLEAN if unclean else Election.ONLINE, elr=elr,
                target_isr=[b for b, _ in new_isr],
                target_leader_recovery_state=data.leader_recovery_state)
            record = builder.build()
            if record is not None:
                records.append(record)
                partition = merge_partition_change(partition, record)
                if record.leader not in (broker_id, LEADER_NO_CHANGE):
                    # The leader's request may not move leadership; it learns the new leader
                    # from the metadata instead.
                    out.partitions.append(R.PartitionData(
                        partition_index=partition_id, error_code=ErrorCode.NEW_LEADER_ELECTED))
                    continue
            out.partitions.append(R.PartitionData(
                partition_index=partition_id, error_code=ErrorCode.NONE,
                leader_id=partition.leader, leader_epoch=partition.leader_epoch,
                isr=list(partition.isr), leader_recovery_state=partition.leader_recovery_state,
                partition_epoch=partition.partition_epoch))
    return response, records


# -- partition reassignments (AlterPartitionReassignments, ListPartitionReassignments)
def is_reassigning(partition: PartitionRegistration) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


@dataclass(frozen=True, slots=True)
class ReassignmentReplicas:
    """Kafka's PartitionReassignmentReplicas for a move from `current` to `target`: the
    replicas to remove and to add (each sorted), and the replica set while it runs: the target
    followed by the replicas being removed."""

    removing: tuple[int, ...]
    adding: tuple[int, ...]
    replicas: tuple[int, ...]

    @classmethod
    def of(cls, current: Sequence[int], target: Sequence[int]) -> ReassignmentReplicas:
        removing = tuple(sorted(set(current) - set(target)))
        adding = tuple(sorted(set(target) - set(current)))
        return cls(removing, adding, tuple(target) + removing)


@dataclass(frozen=True, slots=True)
class ReassignmentRevert:
    """Kafka's PartitionReassignmentRevert: the replicas and ISR a cancelled reassignment goes
    back to (the replicas it was adding leave both). When only adding replicas were in the ISR,
    the first original replica becomes the ISR alone: an unclean election."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool

    @classmethod
    def of(cls, partition: PartitionRegistration) -> ReassignmentRevert:
        adding = set(partition.adding_replicas)
        replicas = tuple(r for r in partition.replicas if r not in adding)
        isr = tuple(r for r in partition.isr if r not in adding)
        if isr:
            return cls(replicas, isr, False)
        if not replicas:  # cannot happen: a reassignment starts from a non-empty replica set
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "Invalid replica assignment: addingReplicas contains all replicas.")
        return cls(replicas, (replicas[0],), True)


def validate_manual_partition_assignment(image: MetadataImage, replicas: Sequence[int],
                                         replication_factor: int | None = None) -> None:
    """Kafka's validateManualPartitionAssignment: raises KafkaError(INVALID_REPLICA_ASSIGNMENT)
    with Kafka's message. Brokers are checked in id order, so the lowest bad id is named (a
    negative id is an unregistered broker)."""
    if not replicas:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "The manual partition assignment includes an empty replica list.")
    previous: int | None = None
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes broker {broker_id}, "
                             "but no such broker is registered.")
        if broker_id == previous:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes the broker {broker_id} "
                             "more than once.")
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"The manual partition assignment includes a partition with "
                         f"{len(replicas)} replica(s), but this is not consistent with previous "
                         f"partitions, which have {replication_factor} replica(s).")


@dataclass(frozen=True, slots=True)
class ReassignmentOutcome:
    """One partition's answer in AlterPartitionReassignments."""

    partition_id: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


ReassignmentResults = list[tuple[str, list[ReassignmentOutcome]]]


def _reassignment_builder(image: MetadataImage, topic: TopicImage, partition_id: int,
                          partition: PartitionRegistration, broker_config: ConfigLookup | None,
                          **targets: Any) -> PartitionChangeBuilder:
    unclean = unclean_leader_election_enabled(image, topic.name, broker_config)
    return PartitionChangeBuilder(
        partition, topic.topic_id, partition_id, lambda r: is_active(image, r),
        effective_min_isr(image, topic, broker_config),
        election=Election.UNCLEAN if unclean else Election.ONLINE, elr=elr_enabled(image),
        **targets)


def _cancel_reassignment(image: MetadataImage, topic: TopicImage, partition_id: int,
                         partition: PartitionRegistration,
                         broker_config: ConfigLookup | None) -> m.PartitionChangeRecord | None:
    if not is_reassigning(partition):
        raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    revert = ReassignmentRevert.of(partition)
    if revert.unclean and not unclean_leader_election_enabled(image, topic.name, broker_config):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Unable to revert partition assignment for {topic.name}:{partition_id} "
                         "because it would require an unclean leader election.")
    return _reassignment_builder(
        image, topic, partition_id, partition, broker_config, target_isr=revert.isr,
        target_replicas=revert.replicas, target_removing=(), target_adding=()).build()


def _change_reassignment(image: MetadataImage, topic: TopicImage, partition_id: int,
                         partition: PartitionRegistration, target: Sequence[int],
                         broker_config: ConfigLookup | None) -> m.PartitionChangeRecord | None:
    """Kafka's changePartitionReassignment: the replica set grows to the target plus the
    replicas being removed; a target the ISR already covers completes at once (the builder
    sees it). Only non-empty adding/removing sets replace the partition's current ones."""
    validate_manual_partition_assignment(image, target)
    reassignment = ReassignmentReplicas.of(partition.replicas, target)
    targets: dict[str, Any] = {}
    if list(reassignment.replicas) != list(partition.replicas):
        targets["target_replicas"] = reassignment.replicas
    if reassignment.removing:
        targets["target_removing"] = reassignment.removing
    if reassignment.adding:
        targets["target_adding"] = reassignment.adding
    return _reassignment_builder(image, topic, partition_id, partition, broker_config,
                                 **targets).build()


def alter_partition_reassignments(
        image: MetadataImage,
        topics: Iterable[tuple[str, Iterable[tuple[int, Sequence[int] | None]]]], *,
        broker_config: ConfigLookup | None = None
) -> tuple[ReassignmentResults, list[m.PartitionChangeRecord]]:
    """AlterPartitionReassignments: per topic (request order), each partition's outcome, and
    the records (Kafka's alterPartitionReassignments, all-or-nothing as one batch).

    A partition's `replicas` is the target assignment, or None to cancel its reassignment.
    Errors: UNKNOWN_TOPIC_OR_PARTITION ("Unable to find a topic named t." / "Unable to find
    partition t:p."), INVALID_REPLICA_ASSIGNMENT (empty, duplicate or unregistered replicas;
    a cancel that would need an unclean election the topic does not allow),
    NO_REASSIGNMENT_IN_PROGRESS (cancelling a partition that is not reassigning).
    A partition named twice is changed twice, the second time over the first's result."""
    results: ReassignmentResults = []
    records: list[m.PartitionChangeRecord] = []
    changed: dict[tuple[uuid.UUID, int], PartitionRegistration] = {}
    for topic_name, partitions in topics:
        outcomes: list[ReassignmentOutcome] = []
        results.append((topic_name, outcomes))
        topic = image.topics_by_name.get(topic_name)
        for partition_id, target in partitions:
            try:
                if topic is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"Unable to find a topic named {topic_name}.")
                key = (topic.topic_id, partition_id)
                partition = changed.get(key) or topic.partitions.get(partition_id)
                if partition is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"Unable to find partition {topic_name}:{partition_id}.")
                if target is None:
                    record = _cancel_reassignment(image, topic, partition_id, partition,
                                                  broker_config)
                else:
                    record = _change_reassignment(image, topic, partition_id, partition,
                                                  target, broker_config)
            except KafkaError as exc:
                outcomes.append(ReassignmentOutcome(partition_id, exc.code, exc.message))
                continue
            if record is not None:
                records.append(record)
                changed[key] = merge_partition_change(partition, record)
            outcomes.append(ReassignmentOutcome(partition_id))
    return results, records


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A partition being reassigned, as ListPartitionReassignments reports it."""

    partition_id: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def list_partition_reassignments(
        image: MetadataImage,
        topics: Iterable[tuple[str, Iterable[int]]] | None = None
) -> list[tuple[str, list[OngoingReassignment]]]:
    """ListPartitionReassignments: the ongoing reassignments of the partitions asked (None:
    of every partition, by topic name). Unknown topics and partitions, and partitions not being
    reassigned, are left out, as are topics left with none (as Kafka)."""
    if topics is None:
        asked: list[tuple[str, Iterable[int]]] = [
            (name, sorted(image.topics_by_name[name].partitions))
            for name in sorted(image.topics_by_name)]
    else:
        asked = list(topics)
    out: list[tuple[str, list[OngoingReassignment]]] = []
    for name, partition_ids in asked:
        topic = image.topics_by_name.get(name)
        if topic is None:
            continue
        ongoing = []
        for partition_id in partition_ids:
            partition = topic.partitions.get(partition_id)
            if partition is not None and is_reassigning(partition):
                ongoing.append(OngoingReassignment(partition_id, partition.replicas,
                                                   partition.adding_replicas,
                                                   partition.removing_replicas))
        if ongoing:
            out.append((name, ongoing))
    return out


__all__ = [
    "ELECTION_PREFERRED",
    "ELECTION_UNCLEAN",
    "ELR_FEATURE",
    "MAX_ELECTIONS_PER_IMBALANCE",
    "RECOVERED",
    "RECOVERING",
    "ConfigLookup",
    "Election",
    "ElectionResults",
    "OngoingReassignment",
    "PartitionChangeBuilder",
    "PartitionElection",
    "ReassignmentOutcome",
    "ReassignmentReplicas",
    "ReassignmentResults",
    "ReassignmentRevert",
    "alter_partition",
    "alter_partition_reassignments",
    "balance_partition_leaders",
    "effective_min_isr",
    "elect_leaders",
    "elr_enabled",
    "handle_broker_controlled_shutdown",
    "handle_broker_fenced",
    "handle_broker_unclean_shutdown",
    "handle_broker_unfenced",
    "handle_broker_unregistered",
    "imbalanced_partitions",
    "is_active",
    "is_reassigning",
    "list_partition_reassignments",
    "merge_partition_change",
    "unclean_leader_election_enabled",
    "validate_manual_partition_assignment",
]
