"""A transactional id's state at the transaction coordinator (Kafka's TransactionMetadata).

A transaction moves Empty -> Ongoing (partitions added) -> PrepareCommit/PrepareAbort (EndTxn
persisted; markers being written) -> CompleteCommit/CompleteAbort (every marker written) and
back to Ongoing or Empty. PrepareEpochFence is an in-memory step of InitProducerId (or of the
abort of a timed-out transaction): the producer epoch is bumped and the ongoing transaction
aborted, so a zombie producer with the old epoch is fenced. Dead precedes the tombstone of an
expired transactional id.

Every change is prepared as a `TxnTransit` (the metadata's `pending_state` is set meanwhile, so
concurrent requests see CONCURRENT_TRANSACTIONS), persisted in `__transaction_state`, and
applied with `complete_transition` once committed, or dropped with `abort_transition`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from odradek.protocol.errors import ErrorCode
from odradek.protocol.types import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


class TransactionState(enum.Enum):
    """Kafka's transaction states: (id in TransactionLogValue.transaction_status, name)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        for state in cls:
            if state.state_name == name:
                return state
        return None


S = TransactionState

#: state -> the states it may be entered from (Kafka's validPreviousStates, transactions v1)
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: states whose transactional id may expire (no transaction in flight)
EXPIRABLE_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing: an id at Short.MaxValue - 1 gets a new id."""
    return epoch >= SHORT_MAX - 1


@dataclass(frozen=True)
class TxnTransit:
    """The metadata a prepared transition leads to (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


class IllegalTransition(Exception):
    """A transition the state machine forbids: a coordinator bug, never a client error."""


@dataclass(eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    #: an epoch fence whose write failed: the epoch was bumped already, don't bump it again
    has_failed_epoch_fence: bool = False

    # -- queries
    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def is_valid_producer_id(self, producer_id: int, producer_epoch: int) -> bool:
        """InitProducerId with an id and epoch (KIP-360): the producer is fenced unless the
        metadata was just created, the id is the current one (the epoch is checked when it is
        bumped), or the id is the previous one with an exhausted epoch (a retry of a rotation
        whose answer was lost)."""
        return (self.producer_epoch == NO_PRODUCER_EPOCH
                or producer_id == self.producer_id
                or (producer_id == self.last_producer_id
                    and is_epoch_exhausted(producer_epoch)))

    # -- preparing transitions
    def _prepare(self, state: TransactionState, producer_id: int, producer_epoch: int,
                 last_producer_epoch: int, txn_timeout_ms: int,
                 topic_partitions: frozenset[TopicPartition], txn_start_timestamp: int,
                 update_timestamp: int, last_producer_id: int | None = None) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: cannot prepare {state.state_name} while "
                f"{self.pending_state.state_name} is pending")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.state_name} -> "
                                    f"{state.state_name} is not a valid transition")
        self.pending_state = state
        return TxnTransit(
            producer_id=producer_id,
            last_producer_id=self.last_producer_id if last_producer_id is None
            else last_producer_id,
            producer_epoch=producer_epoch, last_producer_epoch=last_producer_epoch,
            txn_timeout_ms=txn_timeout_ms, state=state, topic_partitions=topic_partitions,
            txn_start_timestamp=txn_start_timestamp, txn_last_update_timestamp=update_timestamp)

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int,
                                         expected_epoch: int | None, now_ms: int,
                                         ) -> TxnTransit | ErrorCode:
        """InitProducerId on an id with no transaction in flight: the epoch is bumped (or,
        for a retry of a bump whose answer was lost, kept); PRODUCER_FENCED for a producer
        whose epoch is neither the current nor the previous one."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: epoch {self.producer_epoch} "
                                    "is exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._prepare(S.EMPTY, self.producer_id, next_epoch, last_epoch, txn_timeout_ms,
                             frozenset(), -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int,
                                     now_ms: int, record_last_epoch: bool) -> TxnTransit:
        """The epoch is exhausted: a new producer id at epoch 0."""
        return self._prepare(
            S.EMPTY, new_producer_id, 0,
            self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms, frozenset(), -1, now_ms, last_producer_id=self.producer_id)

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """The ongoing transaction is to be aborted with a bumped epoch (never returned to a
        client: it answers CONCURRENT_TRANSACTIONS and the client's retry bumps again)."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence epoch {SHORT_MAX}")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped,
                             NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_add_partitions(self, partitions: set[TopicPartition],
                               now_ms: int) -> TxnTransit:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) \
            else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             frozenset(self.topic_partitions | partitions), start, now_ms)

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TxnTransit:
        return self._prepare(state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp,
                             now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, frozenset(),
                             self.txn_start_timestamp, now_ms)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, frozenset(),
                             self.txn_start_timestamp, self.txn_last_update_timestamp)

    # -- applying them
    def complete_transition(self, transit: TxnTransit) -> None:
        """The persisted transition takes effect."""
        if self.pending_state != transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state.state_name} but "
                f"{self.pending_state.state_name if self.pending_state else 'nothing'} "
                "is pending")
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.state = transit.state
        self.pending_state = None
        self.has_failed_epoch_fence = False

    def abort_transition(self) -> None:
        self.pending_state = None

    def remove_partition(self, tp: TopicPartition) -> None:
        """A marker was written to `tp` (or its topic is gone)."""
        self.topic_partitions.discard(tp)
