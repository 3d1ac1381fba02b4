"""The transactional producer's state machine and coordinator requests (Kafka's
TransactionManager, transactional part; the idempotent part is `producer._Idempotence`).

    producer = Producer({"bootstrap.servers": ..., "transactional.id": "orders-1"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"v")
    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
    producer.commit_transaction()        # or abort_transaction()

States and transitions are Kafka's (UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION ->
COMMITTING/ABORTING_TRANSACTION -> READY, plus ABORTABLE_ERROR and FATAL_ERROR). One
transactional request is in flight at a time (`_lock`), as in Kafka's Sender. The wire calls:

* FindCoordinator(TRANSACTION, transactional id), and FindCoordinator(GROUP) for offsets;
* InitProducerId with the transactional id; after an abortable error, when the coordinator
  supports it (InitProducerId v3+, KIP-360), the abort is followed by InitProducerId with the
  current producer id and epoch, which bumps the epoch instead of fencing the producer;
* AddPartitionsToTxn (v3 and below: the client form), sent by the sender for every partition
  new to the transaction before the first batch to it, batched;
* AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group
  coordinator (`send_offsets_to_transaction`);
* EndTxn once every batch of the transaction has completed.

Errors are classified as Kafka's handlers do: fatal ones (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH
from the coordinator, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, ...) leave the
producer usable only for `close`; abortable ones (a failed produce, GROUP_AUTHORIZATION_FAILED,
UNKNOWN_MEMBER_ID on TxnOffsetCommit, TRANSACTION_ABORTABLE...) require `abort_transaction`;
retriable ones (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE
after finding the coordinator again, CONCURRENT_TRANSACTIONS) are retried with backoff.
Transaction version 2 (KIP-890 part 2: implicit partition adds, a new epoch per transaction)
is not used: request versions stay below it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.client.cluster import Cluster
from odradek.client.connection import Connection
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError
from odradek.client.retry import ExponentialBackoff
from odradek.client.subscription import OffsetAndMetadata
from odradek.client.types import ConsumerGroupMetadata, Node, TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "PreparedTransaction",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionState",
    "TransactionStateError",
]

log = logging.getLogger("odradek.client.transactions")

_FIND_COORDINATOR_BATCHED = 4
_COORDINATOR_GROUP, _COORDINATOR_TRANSACTION = 0, 1
# The highest versions of transaction version 1 (the versions above them announce KIP-890
# part 2 support, which this client does not implement).
MAX_ADD_PARTITIONS_VERSION = 3  # v4+ is the broker-to-broker (verify) form
MAX_END_TXN_VERSION = 4
MAX_TXN_OFFSET_COMMIT_VERSION = 4
MAX_TRANSACTIONAL_PRODUCE_VERSION = 11
#: InitProducerId v3 takes the current producer id and epoch (KIP-360 epoch bumps)
_INIT_PRODUCER_ID_BUMP_VERSION = 3
#: Kafka's ADD_PARTITIONS_RETRY_BACKOFF_MS: the first AddPartitionsToTxn of a transaction
#: retried after CONCURRENT_TRANSACTIONS (the previous transaction still completing)
_ADD_PARTITIONS_RETRY_BACKOFF_MS = 20


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"
    #: the transaction was handed off (`prepare`): another process ends it
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"

    def __str__(self) -> str:
        return self.value


S = TransactionState
#: target -> the states it may be reached from (Kafka's State.isTransitionValid)
_VALID_SOURCES: dict[TransactionState, frozenset[TransactionState]] = {
    S.UNINITIALIZED: frozenset({S.READY}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION,
                                  S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TransactionState),
    S.PREPARED_TRANSACTION: frozenset({S.IN_TRANSACTION}),
}

#: produce errors after which the producer can only be closed (maybeTransitionToErrorState)
_FATAL_PRODUCE_ERRORS = frozenset({
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.UNSUPPORTED_VERSION,
})
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})
_REFIND = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})
_NEEDS_EPOCH_BUMP = frozenset({ErrorCode.UNKNOWN_PRODUCER_ID,
                               ErrorCode.INVALID_PRODUCER_ID_MAPPING})


@dataclass(frozen=True)
class PreparedTransaction:
    """An open transaction handed off by its producer (`AsyncProducer.prepare_transaction`):
    whoever holds it ends it with `end_transaction` (commit or abort) from any process, as
    KIP-939's two-phase commit lets a coordinator outside the producer do. `started` is False
    when nothing was sent, so there is no transaction to end."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    started: bool


class TransactionStateError(RuntimeError):
    """A transactional method called in a state that does not allow it (Kafka's
    IllegalStateException): a programming error, not a broker's answer."""


class TransactionAbortedError(KafkaError):
    """A record's batch was failed because its transaction is being aborted (Kafka's
    TransactionAbortedException)."""

    def __init__(self, message: str = "Failing batch since transaction was aborted") -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)


class _Retry(Exception):
    """A transactional request to send again after `backoff_ms`, after finding the
    coordinator again when `refind`."""

    def __init__(self, refind: bool = False, backoff_ms: float | None = None) -> None:
        super().__init__()
        self.refind = refind
        self.backoff_ms = backoff_ms


class TransactionManager:
    """The transactional state of one producer. Lives on the producer's event loop; `state`
    is read from other threads (the blocking `send`) too."""

    def __init__(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        cluster: Cluster,
        *,
        request_timeout_ms: int,
        backoff: ExponentialBackoff,
        producer_id_and_epoch: Callable[[], tuple[int, int]],
        set_producer_id: Callable[[int, int], None],
        spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]],
        wake: Callable[[], None],
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.cluster = cluster
        self.request_timeout_ms = request_timeout_ms
        self.backoff = backoff
        self._producer_id_and_epoch = producer_id_and_epoch
        #: sets the producer id and epoch and restarts every partition's sequences
        self._set_producer_id = set_producer_id
        self._spawn = spawn
        self._wake = wake
        self.state = S.UNINITIALIZED
        self.last_error: KafkaError | None = None
        self.coordinator: Node | None = None
        self._group_coordinators: dict[str, Node] = {}
        #: partitions with batches waiting to be added, being added, and added
        self.new_partitions: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        self.partitions: set[TopicPartition] = set()
        #: the coordinator knows of this transaction (a partition or offsets were added)
        self.transaction_started = False
        self.epoch_bump_required = False
        self.coordinator_supports_epoch_bump = False
        self._lock = asyncio.Lock()
        self._add_task: asyncio.Task[None] | None = None
        #: the running init/commit/abort and the state it was started for (Kafka's
        #: pendingResult: calling the method again after a timeout awaits the same work)
        self._pending: tuple[TransactionState, asyncio.Task[None]] | None = None

    # ------------------------------------------------------------------------------ state

    def _transition(self, target: TransactionState, error: KafkaError | None = None) -> None:
        if self.state not in _VALID_SOURCES[target]:
            raise TransactionStateError(
                f"TransactionalId {self.transactional_id}: Invalid transition attempted from "
                f"state {self.state} to state {target}")
        if target in (S.FATAL_ERROR, S.ABORTABLE_ERROR):
            self.last_error = error
        elif target != S.ABORTING_TRANSACTION:
            self.last_error = None
        log.debug("TransactionalId %s: transition from state %s to %s", self.transactional_id,
                  self.state, target)
        self.state = target
        self._wake()

    def fatal(self, error: KafkaError) -> KafkaError:
        log.info("TransactionalId %s: transiting to fatal error state due to %s",
                 self.transactional_id, error)
        self._transition(S.FATAL_ERROR, error)
        return error

    def abortable(self, error: KafkaError) -> KafkaError:
        if self.state == S.ABORTING_TRANSACTION:
            log.debug("Skipping transition to abortable error state since the transaction is "
                      "already being aborted: %s", error)
            return error
        if self.state == S.FATAL_ERROR:
            return error
        log.info("TransactionalId %s: transiting to abortable error state due to %s",
                 self.transactional_id, error)
        self._transition(S.ABORTABLE_ERROR, error)
        return error

    def _abortable_if_possible(self, error: KafkaError) -> KafkaError:
        """UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING: recoverable by an epoch bump when
        the coordinator can do one, fatal otherwise."""
        if self.coordinator_supports_epoch_bump:
            self.epoch_bump_required = True
            return self.abortable(error)
        return self.fatal(error)

    @property
    def has_error(self) -> bool:
        return self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    @property
    def is_completing(self) -> bool:
        return self.state in (S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION)

    @property
    def fails_queued_batches(self) -> bool:
        """Queued batches can no longer be part of a transaction that will commit."""
        return self.state in (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION, S.FATAL_ERROR)

    def _maybe_fail_with_error(self) -> None:
        error = self.last_error
        if not self.has_error or error is None:
            return
        if error.code in _FENCED or self.state == S.ABORTABLE_ERROR and \
                error.code == ErrorCode.TRANSACTION_ABORTABLE:
            raise error
        raise KafkaError(error.code, "Cannot execute transactional method because we are in an "
                         f"error state: {error.message}")

    def fail_if_not_ready_for_send(self) -> None:
        """Raise unless records may be sent now (Kafka's failIfNotReadyForSend)."""
        if self.has_error:
            error = self.last_error
            raise KafkaError(error.code if error else ErrorCode.UNKNOWN_SERVER_ERROR,
                             "Cannot perform send because at least one previous transactional "
                             f"or idempotent request has failed with errors: {error}")
        if self._producer_id_and_epoch()[0] < 0:
            raise TransactionStateError("Cannot perform a 'send' before completing a call to "
                                        "initTransactions when transactions are enabled.")
        if self.state != S.IN_TRANSACTION:
            raise TransactionStateError(f"Cannot call send in state {self.state}")

    def send_allowed(self, tp: TopicPartition) -> bool:
        """Whether a batch may go to `tp` now (called by the sender while draining); a partition
        new to the transaction is queued for AddPartitionsToTxn."""
        if tp in self.partitions:
            return self.state != S.FATAL_ERROR
        if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION) and \
                tp not in self.pending_partitions:
            self.new_partitions.add(tp)
        return False

    def on_batch_failed(self, error: KafkaError, had_sequence: bool) -> None:
        """A batch of the transaction failed for good (Kafka's maybeTransitionToErrorState)."""
        if self.state == S.FATAL_ERROR:
            return
        if isinstance(error, TransactionAbortedError):
            if had_sequence and self.coordinator_supports_epoch_bump:
                # A retried batch dropped by the abort used sequence numbers the broker never
                # saw: the next transaction starts a new epoch.
                self.epoch_bump_required = True
            return
        if error.code in _FATAL_PRODUCE_ERRORS:
            self.fatal(error)
            return
        if self.coordinator_supports_epoch_bump and (not self.is_completing or had_sequence):
            # The partition's sequence numbers no longer follow on from what the broker saw.
            self.epoch_bump_required = True
        self.abortable(error)

    # ------------------------------------------------------------------------------ the API

    def begin(self) -> None:
        self._maybe_fail_with_error()
        self._transition(S.IN_TRANSACTION)

    async def initialize(self, timeout_ms: float) -> None:
        await self._cached(S.INITIALIZING, "initTransactions", self._begin_init,
                           timeout_ms)

    async def commit(self, timeout_ms: float, flush: Callable[[], Awaitable[None]]) -> None:
        def begin() -> Awaitable[None]:
            self._maybe_fail_with_error()
            self._transition(S.COMMITTING_TRANSACTION)
            return self._complete(True, flush)

        await self._cached(S.COMMITTING_TRANSACTION, "commitTransaction", begin, timeout_ms)

    async def abort(self, timeout_ms: float, flush: Callable[[], Awaitable[None]]) -> None:
        def begin() -> Awaitable[None]:
            if self.state != S.ABORTABLE_ERROR:
                self._maybe_fail_with_error()
            self._transition(S.ABORTING_TRANSACTION)
            self.new_partitions.clear()  # nothing more is sent in an aborted transaction
            return self._complete(False, flush)

        await self._cached(S.ABORTING_TRANSACTION, "abortTransaction", begin, timeout_ms)

    async def prepare(self, timeout_ms: float,
                      flush: Callable[[], Awaitable[None]]) -> PreparedTransaction:
        """Send everything of the open transaction and hand it off without ending it: the
        producer is then only good for `close` (which leaves the transaction open), and the
        returned `PreparedTransaction` is ended by `end_transaction` elsewhere."""
        self._maybe_fail_with_error()
        if self.state != S.IN_TRANSACTION:
            raise TransactionStateError(f"Cannot prepare a transaction in state {self.state}")

        async def send_all() -> None:
            self._wake()
            await flush()

        await self._await(self._spawn(send_all()), "prepareTransaction", timeout_ms)
        self._maybe_fail_with_error()  # a batch of the transaction failed: it can only abort
        producer_id, epoch = self._producer_id_and_epoch()
        self._transition(S.PREPARED_TRANSACTION)
        return PreparedTransaction(self.transactional_id, producer_id, epoch,
                                   self.transaction_started or bool(self.partitions))

    async def send_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                           group: ConsumerGroupMetadata, timeout_ms: float) -> None:
        self._maybe_fail_with_error()
        if self.state != S.IN_TRANSACTION:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "Cannot send offsets to transaction "
                             "either because the producer is not in an active transaction")
        task = self._spawn(self._send_offsets(dict(offsets), group))
        await self._await(task, "sendOffsetsToTransaction", timeout_ms)

    async def _cached(self, target: TransactionState, operation: str,
                      begin: Callable[[], Awaitable[None]], timeout_ms: float) -> None:
        pending = self._pending
        if pending is not None and pending[0] == self.state == target:
            task = pending[1]
        else:
            task = self._spawn(begin())
            self._pending = (target, task)
        await self._await(task, operation, timeout_ms)
        self._pending = None

    @staticmethod
    async def _await(task: asyncio.Task[None], operation: str, timeout_ms: float) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_ms / 1000)
        except TimeoutError:
            raise KafkaTimeoutError(f"Timeout expired after {timeout_ms:.0f}ms while awaiting "
                                    f"{operation}") from None

    def close(self) -> None:
        if self._pending is not None:
            self._pending[1].cancel()
        if self._add_task is not None:
            self._add_task.cancel()

    # ------------------------------------------------------------------------------ flows

    def _begin_init(self) -> Awaitable[None]:
        self._transition(S.INITIALIZING)
        log.info("TransactionalId %s: invoking InitProducerId for the first time in order to "
                 "acquire a producer ID", self.transactional_id)
        return self._init_producer_id(bump=False)

    async def _complete(self, commit: bool, flush: Callable[[], Awaitable[None]]) -> None:
        """End the transaction once every batch of it has completed (Kafka's EndTxn waits for
        the accumulator to drain; an abort fails what was not sent yet)."""
        self._wake()
        await flush()
        if commit and self.state == S.ABORTABLE_ERROR:
            # A batch of the transaction failed while committing: it cannot commit.
            assert self.last_error is not None
            raise self.last_error
        if self.state == S.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.transaction_started and not (
                self.last_error is not None and
                self.last_error.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING):
            await self._end_txn(commit)
        self.transaction_started = False
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.partitions.clear()
        if self.epoch_bump_required:
            self._transition(S.INITIALIZING)
            log.info("TransactionalId %s: invoking InitProducerId with the current producer id "
                     "and epoch %s in order to bump the epoch", self.transactional_id,
                     self._producer_id_and_epoch())
            await self._init_producer_id(bump=True)
        else:
            self._transition(S.READY)

    def maybe_add_partitions(self) -> None:
        """Start an AddPartitionsToTxn for the partitions new to the transaction (called by the
        sender; one such request at a time)."""
        if self.new_partitions and self._add_task is None and \
                self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
            self._add_task = self._spawn(self._add_partitions())

    async def _add_partitions(self) -> None:
        try:
            async with self._lock:
                self.pending_partitions |= self.new_partitions
                self.new_partitions.clear()
                await self._request(_COORDINATOR_TRANSACTION, self.transactional_id,
                                    self._add_partitions_request, self._on_add_partitions)
        except KafkaError:
            pass  # the state says what went wrong; the sender fails the queued batches
        finally:
            self._add_task = None
            self._wake()

    async def _send_offsets(self, offsets: dict[TopicPartition, Any],
                            group: ConsumerGroupMetadata) -> None:
        async with self._lock:
            producer_id, epoch = self._producer_id_and_epoch()
            add = m.AddOffsetsToTxnRequest(transactional_id=self.transactional_id,
                                           producer_id=producer_id, producer_epoch=epoch,
                                           group_id=group.group_id)
            await self._request(_COORDINATOR_TRANSACTION, self.transactional_id,
                                lambda _c: (add, None),
                                lambda r, _v: self._on_add_offsets(r, group.group_id))
            self.transaction_started = True
            pending = {tp: _offset_and_metadata(value) for tp, value in offsets.items()}
            while pending:
                request = self._txn_offset_commit_request(pending, group)
                await self._request(_COORDINATOR_GROUP, group.group_id,
                                    lambda _c, request=request: (
                                        request, MAX_TXN_OFFSET_COMMIT_VERSION),
                                    lambda r, _v: self._on_txn_offset_commit(r, pending, group))

    async def _end_txn(self, commit: bool) -> None:
        async with self._lock:
            producer_id, epoch = self._producer_id_and_epoch()
            request = m.EndTxnRequest(transactional_id=self.transactional_id,
                                      producer_id=producer_id, producer_epoch=epoch,
                                      committed=commit)
            await self._request(_COORDINATOR_TRANSACTION, self.transactional_id,
                                lambda _c: (request, MAX_END_TXN_VERSION), self._on_end_txn)

    async def _init_producer_id(self, bump: bool) -> None:
        async with self._lock:
            def build(connection: Connection) -> tuple[m.Message, int | None]:
                producer_id, epoch = self._producer_id_and_epoch() if bump else (-1, -1)
                return m.InitProducerIdRequest(
                    transactional_id=self.transactional_id,
                    transaction_timeout_ms=self.transaction_timeout_ms,
                    producer_id=producer_id, producer_epoch=epoch), None

            await self._request(_COORDINATOR_TRANSACTION, self.transactional_id, build,
                                self._on_init_producer_id)

    # ------------------------------------------------------------------------------ requests

    async def _request(
        self,
        key_type: int,
        key: str,
        build: Callable[[Connection], tuple[m.Message, int | None]],
        handle: Callable[[Any, int], Any],
    ) -> Any:
        """Send a transactional request to the coordinator of `key` until `handle` takes the
        response (returns) or fails it (raises a KafkaError, after moving the state); `handle`
        raises `_Retry` for another attempt. Connection failures find the coordinator again.
        There is no deadline: as in Kafka, the work goes on until it succeeds or fails for
        good, and the caller's timeout only bounds how long it waits."""
        attempts = 0
        while True:
            backoff_ms: float | None = None
            try:
                connection = await self._coordinator_connection(key_type, key)
                request, max_version = build(connection)
                version = connection.pick_version(request.API_KEY,  # type: ignore[attr-defined]
                                                  max_version=max_version)
                response = await connection.send(request, api_version=version,
                                                 timeout_ms=self.request_timeout_ms)
                return handle(response, version)
            except _Retry as retry:
                if retry.refind:
                    self._forget_coordinator(key_type, key)
                backoff_ms = retry.backoff_ms
            except (KafkaConnectionError, KafkaTimeoutError) as error:
                log.debug("TransactionalId %s: %s; will retry", self.transactional_id, error)
                self._forget_coordinator(key_type, key)
            except KafkaError as error:
                if error.code == ErrorCode.UNSUPPORTED_VERSION and not self.has_error:
                    raise self.fatal(error) from None
                raise
            if backoff_ms is None:
                backoff_ms = self.backoff.delay_ms(attempts)
            attempts += 1
            await asyncio.sleep(backoff_ms / 1000)

    def _forget_coordinator(self, key_type: int, key: str) -> None:
        if key_type == _COORDINATOR_TRANSACTION:
            self.coordinator = None
        else:
            self._group_coordinators.pop(key, None)

    async def _coordinator_connection(self, key_type: int, key: str) -> Connection:
        node = self.coordinator if key_type == _COORDINATOR_TRANSACTION else \
            self._group_coordinators.get(key)
        if node is None:
            node = await self._find_coordinator(key_type, key)
            if key_type == _COORDINATOR_TRANSACTION:
                self.coordinator = node
            else:
                self._group_coordinators[key] = node
            log.info("TransactionalId %s: discovered %s coordinator %s", self.transactional_id,
                     "transaction" if key_type == _COORDINATOR_TRANSACTION else "group", node)
        return await self.cluster.connect_to((node.host, node.port))

    async def _find_coordinator(self, key_type: int, key: str) -> Node:
        kind = "TRANSACTION" if key_type == _COORDINATOR_TRANSACTION else "GROUP"
        connection = await self.cluster.any_connection()
        version = connection.pick_version(m.FindCoordinatorRequest.API_KEY)
        batched = version >= _FIND_COORDINATOR_BATCHED
        request = m.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]) \
            if batched else m.FindCoordinatorRequest(key=key, key_type=key_type)
        response = await connection.send(request, api_version=version,
                                         timeout_ms=self.request_timeout_ms)
        found = response.coordinators[0] if batched else response
        code = ErrorCode.from_code(found.error_code)
        if code == ErrorCode.NONE:
            return Node(found.node_id, found.host, found.port)
        if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            raise _Retry()
        if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            raise self.fatal(KafkaError(code))
        if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            raise self.abortable(KafkaError(code, f"Not authorized to access group: {key}"))
        raise self.fatal(KafkaError(code, f"Could not find a coordinator with type {kind} with "
                                          f"key {key} due to unexpected error: "
                                          f"{found.error_message or code.message}"))

    # ------------------------------------------------------------------------------ responses

    def _common_errors(self, code: ErrorCode, what: str) -> None:
        """The handling every coordinator response shares; returns for an unhandled code."""
        if code in _REFIND:
            raise _Retry(refind=True)
        if code in _RETRY:
            raise _Retry()
        if code in _FENCED:
            # An older coordinator may still answer INVALID_PRODUCER_EPOCH: the same fence.
            raise self.fatal(KafkaError(ErrorCode.PRODUCER_FENCED))
        if code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            raise self.fatal(KafkaError(code))
        if code == ErrorCode.TRANSACTION_ABORTABLE:
            raise self.abortable(KafkaError(code))
        if code in _NEEDS_EPOCH_BUMP and what != "InitProducerId":
            raise self._abortable_if_possible(KafkaError(code))

    def _on_init_producer_id(self, response: Any, version: int) -> None:
        code = ErrorCode.from_code(response.error_code)
        if code == ErrorCode.NONE:
            self.coordinator_supports_epoch_bump = version >= _INIT_PRODUCER_ID_BUMP_VERSION
            self._set_producer_id(response.producer_id, response.producer_epoch)
            log.info("TransactionalId %s: producer id set to %d with epoch %d",
                     self.transactional_id, response.producer_id, response.producer_epoch)
            self.epoch_bump_required = False
            self._transition(S.READY)
            return
        self._common_errors(code, "InitProducerId")
        raise self.fatal(KafkaError(code, "Unexpected error in InitProducerIdResponse; "
                                          f"{code.message}"))

    def _add_partitions_request(self, _connection: Connection) -> tuple[m.Message, int]:
        producer_id, epoch = self._producer_id_and_epoch()
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(self.pending_partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                name=topic, partitions=partitions) for topic, partitions in by_topic.items()])
        return request, MAX_ADD_PARTITIONS_VERSION

    def _on_add_partitions(self, response: Any, _version: int) -> None:
        errors = {TopicPartition(topic.name, p.partition_index):
                  ErrorCode.from_code(p.partition_error_code)
                  for topic in response.results_by_topic_v3_and_below or ()
                  for p in topic.results_by_partition}
        if not errors and response.error_code:
            errors = {tp: ErrorCode.from_code(response.error_code)
                      for tp in self.pending_partitions}
        partition_errors = False
        unauthorized: set[str] = set()
        for tp, code in errors.items():
            if code == ErrorCode.NONE:
                continue
            if code == ErrorCode.CONCURRENT_TRANSACTIONS:
                # The previous transaction is still completing: retry soon.
                raise _Retry(backoff_ms=_ADD_PARTITIONS_RETRY_BACKOFF_MS
                             if not self.partitions else None)
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise _Retry()
            if code == ErrorCode.INVALID_TXN_STATE:
                raise self.fatal(KafkaError(code))
            self._common_errors(code, "AddPartitionsToTxn")
            if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                unauthorized.add(tp.topic)
            elif code == ErrorCode.OPERATION_NOT_ATTEMPTED:
                partition_errors = True
            else:
                log.error("Could not add partition %s due to unexpected error %s", tp, code.name)
                partition_errors = True
        # Added or not, they are no longer pending: on an error the batches are aborted.
        self.pending_partitions -= set(errors)
        if unauthorized:
            raise self.abortable(KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                            f"Not authorized to access topics: "
                                            f"{sorted(unauthorized)}"))
        if partition_errors:
            raise self.abortable(KafkaError(
                next(c for c in errors.values() if c not in (ErrorCode.NONE,
                                                             ErrorCode.OPERATION_NOT_ATTEMPTED)),
                "Could not add partitions to transaction due to errors: "
                + ", ".join(f"{tp}={code.name}" for tp, code in sorted(errors.items()))))
        log.debug("Successfully added partitions %s to transaction", sorted(errors))
        self.partitions |= set(errors)
        self.transaction_started = True

    def _on_add_offsets(self, response: Any, group_id: str) -> None:
        code = ErrorCode.from_code(response.error_code)
        if code == ErrorCode.NONE:
            return
        self._common_errors(code, "AddOffsetsToTxn")
        if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            raise self.abortable(KafkaError(code, f"Not authorized to access group: {group_id}"))
        raise self.fatal(KafkaError(code, "Unexpected error in AddOffsetsToTxnResponse: "
                                          f"{code.message}"))

    def _txn_offset_commit_request(self, pending: dict[TopicPartition, OffsetAndMetadata],
                                   group: ConsumerGroupMetadata) -> m.Message:
        producer_id, epoch = self._producer_id_and_epoch()
        R = m.TxnOffsetCommitRequest
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in sorted(pending.items()):
            by_topic.setdefault(tp.topic, []).append(R.TxnOffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset.offset,
                committed_leader_epoch=-1 if offset.leader_epoch is None
                else offset.leader_epoch,
                committed_metadata=offset.metadata))
        return R(transactional_id=self.transactional_id, group_id=group.group_id,
                 producer_id=producer_id, producer_epoch=epoch,
                 generation_id=group.generation_id, member_id=group.member_id,
                 group_instance_id=group.group_instance_id,
                 topics=[R.TxnOffsetCommitRequestTopic(name=name, partitions=parts)
                         for name, parts in by_topic.items()])

    def _on_txn_offset_commit(self, response: Any, pending: dict[TopicPartition, Any],
                              group: ConsumerGroupMetadata) -> None:
        refind = False
        for topic in response.topics or ():
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                code = ErrorCode.from_code(p.error_code)
                if code == ErrorCode.NONE:
                    pending.pop(tp, None)
                elif code in _REFIND or code == ErrorCode.REQUEST_TIMED_OUT:
                    refind = True
                elif code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    continue  # retried with the same coordinator
                elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                    raise self.abortable(KafkaError(
                        code, f"Not authorized to access group: {group.group_id}"))
                elif code == ErrorCode.FENCED_INSTANCE_ID:
                    raise self.abortable(KafkaError(code))
                elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    # Kafka's CommitFailedException
                    raise self.abortable(KafkaError(
                        code, "Transaction offset Commit failed due to consumer group metadata "
                              f"mismatch: {code.message}"))
                elif code == ErrorCode.TRANSACTION_ABORTABLE:
                    raise self.abortable(KafkaError(code))
                elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                              ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                              ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT):
                    raise self.fatal(KafkaError(code))
                else:
                    raise self.fatal(KafkaError(code, "Unexpected error in "
                                                      f"TxnOffsetCommitResponse: {code.message}"))
        if pending:
            raise _Retry(refind=refind)

    def _on_end_txn(self, response: Any, _version: int) -> None:
        code = ErrorCode.from_code(response.error_code)
        if code == ErrorCode.NONE:
            return
        self._common_errors(code, "EndTxn")
        if code == ErrorCode.INVALID_TXN_STATE:
            raise self.fatal(KafkaError(code))
        raise self.fatal(KafkaError(code, f"Unhandled error in EndTxnResponse: {code.message}"))


def _offset_and_metadata(value: OffsetAndMetadata | int) -> OffsetAndMetadata:
    return value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
