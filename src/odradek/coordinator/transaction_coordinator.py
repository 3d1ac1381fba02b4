"""The transaction coordinator (Kafka's TransactionCoordinator, TransactionStateManager and the
coordinator side of TransactionMarkerChannelManager), for transactions v0/v1.

Transactional id T belongs to partition abs(hash(T)) % N of `__transaction_state`; the leader
of that partition coordinates T, with the partition's leader epoch as its coordinator epoch
(carried by every marker, so a deposed coordinator's late markers are refused). Leading a
partition loads it (the log replayed, last value per id); transactions found in PrepareCommit
or PrepareAbort resume writing their markers. Every change of a transaction is prepared
(`TransactionMetadata.pending_state`), written through the coordinator runtime, and applied
once committed.

EndTxn answers once PrepareCommit/PrepareAbort is committed; the markers are then written to
every partition of the transaction (`MarkerWriter`: the broker routes them to the partitions'
leaders), retried until each is written, and CompleteCommit/CompleteAbort is written last.
Timers of the injected clock abort transactions open past their timeout (with an epoch bump
that fences the producer) and expire transactional ids idle for
`transactional.id.expiration.ms` (a tombstone). Everything runs on the event loop: each
check-and-prepare runs without an await before its write, so no two transitions of one id
interleave.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock, TimerHandle
from odradek.coordinator.runtime import Appender, CoordinatorRuntime
from odradek.coordinator.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    LoadedTransactions,
    transaction_record,
)
from odradek.coordinator.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
    TxnTransit,
)
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.java import java_string_hashcode, kafka_abs
from odradek.protocol.records import Compression
from odradek.protocol.types import TopicPartition

log = logging.getLogger("odradek.coordinator.transactions")

S = TransactionState

#: how long the marker writer waits before retrying partitions whose leader was not reachable
#: or not ready (Kafka's marker channel retries on its next send round)
MARKER_RETRY_BACKOFF_S = 0.1
#: marker errors after which this coordinator stops: a newer coordinator took over
_FENCED_MARKER_ERRORS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH,
                                   ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                   ErrorCode.PRODUCER_FENCED})


@dataclass(frozen=True)
class TransactionConfig:
    """The broker settings the transaction coordinator follows (Kafka's names)."""

    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000
    load_buffer_size: int = 5 * 1024 * 1024  # transaction.state.log.load.buffer.size

    @classmethod
    def from_properties(cls, get: Callable[[str], Any]) -> TransactionConfig:
        return cls(
            transactional_id_expiration_ms=int(get("transactional.id.expiration.ms")),
            transaction_max_timeout_ms=int(get("transaction.max.timeout.ms")),
            abort_timed_out_interval_ms=int(
                get("transaction.abort.timed.out.transaction.cleanup.interval.ms")),
            remove_expired_interval_ms=int(
                get("transaction.remove.expired.transaction.cleanup.interval.ms")),
            load_buffer_size=int(get("transaction.state.log.load.buffer.size")),
        )


@dataclass(frozen=True)
class MarkerRequest:
    """COMMIT or ABORT markers to write to `partitions` for one producer."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


#: writes the markers of a request; returns each partition's error (NONE once written; a
#: partition whose topic no longer exists counts as written, as Kafka drops it)
MarkerWriter = Callable[[MarkerRequest], Awaitable[dict[TopicPartition, ErrorCode]]]


@dataclass(frozen=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


def _error_of(future: asyncio.Future[Any]) -> ErrorCode:
    if future.cancelled():
        return ErrorCode.NOT_COORDINATOR
    error = future.exception()
    if error is None:
        return ErrorCode.NONE
    return error.code if isinstance(error, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR


async def _outcome(write: asyncio.Future[Any]) -> ErrorCode:
    """Waits for a runtime write; its error code (NONE once applied). The write's own
    callbacks run whether or not this wait is cancelled."""
    await asyncio.wait([write])
    return _error_of(write)


def _settled(error: ErrorCode) -> asyncio.Future[ErrorCode]:
    done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
    done.set_result(error)
    return done


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, append: Appender, *,
                 num_partitions: Callable[[], int],
                 generate_producer_id: Callable[[], Awaitable[int]],
                 write_markers: MarkerWriter, clock: Clock = SYSTEM_CLOCK,
                 compression: Compression = Compression.NONE) -> None:
        self.config = config
        self.runtime = CoordinatorRuntime(append, clock=clock, compression=compression)
        self.clock = clock
        self._num_partitions = num_partitions
        self.generate_producer_id = generate_producer_id
        self.write_markers = write_markers
        #: owned partition -> transactional id -> its metadata
        self.transactions: dict[int, dict[str, TransactionMetadata]] = {}
        #: owned (or loading) partition -> the coordinator epoch it is led in
        self.coordinator_epochs: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: dict[str, TimerHandle] = {}
        self._active = False

    def time_ms(self) -> int:
        return self.clock.time_ms()

    def _spawn(self, work: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Starts the periodic aborts of timed-out transactions and expirations of ids."""
        self._active = True
        self._schedule("abort", self.config.abort_timed_out_interval_ms,
                       self.abort_timed_out_transactions)
        self._schedule("expire", self.config.remove_expired_interval_ms,
                       self.expire_transactional_ids)

    def _schedule(self, name: str, interval_ms: int, work: Callable[[], Any]) -> None:
        def fire() -> None:
            if not self._active:
                return
            try:
                work()
            except Exception:
                log.exception("periodic transaction work failed")
            self._schedule(name, interval_ms, work)

        self._timers[name] = self.clock.call_later(interval_ms / 1000, fire)

    async def close(self) -> None:
        self._active = False
        for timer in self._timers.values():
            timer.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for partition in [*self.runtime.owned, *self.runtime.loading]:
            self.resign(partition)
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.runtime.close()

    # ------------------------------------------------------------------------------ ownership

    def partition_for(self, transactional_id: str) -> int:
        return kafka_abs(java_string_hashcode(transactional_id)) % self._num_partitions()

    def elect(self, partition: int, log_: Any, coordinator_epoch: int) -> asyncio.Task[Any]:
        """This broker now leads `__transaction_state` partition `partition` at leader epoch
        `coordinator_epoch`: its transactions load in the background."""
        if partition in self.runtime.owned or partition in self.runtime.loading:
            self.resign(partition)
        generation = self.runtime.start_loading(partition)
        self.coordinator_epochs[partition] = coordinator_epoch
        return self._spawn(self._load(partition, log_, coordinator_epoch, generation))

    async def _load(self, partition: int, log_: Any, coordinator_epoch: int,
                    generation: int) -> None:
        started = self.time_ms()

        def install(loaded: LoadedTransactions) -> int:
            transactions = {md.transactional_id: md for md in loaded.metadata()
                            if self.partition_for(md.transactional_id) == partition}
            self.transactions[partition] = transactions
            return loaded.records

        try:
            records = await self.runtime.load(partition, partial(self._replay, log_), install,
                                              generation)
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, partition)
            return
        if records is None:
            return  # unloaded or reloaded meanwhile
        transactions = self.transactions[partition]
        log.info("loaded %d transactional ids from %s-%d (%d records) in %d ms",
                 len(transactions), TRANSACTION_STATE_TOPIC, partition, records,
                 self.time_ms() - started)
        # Transactions whose EndTxn was persisted by a previous coordinator: write their
        # markers, then their Complete state.
        for md in transactions.values():
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._start_markers(partition, generation, md, coordinator_epoch,
                                    md.prepare_complete(self.time_ms()))

    def _replay(self, log_: Any) -> LoadedTransactions:
        loaded = LoadedTransactions()
        offset = log_.log_start_offset
        end = log_.log_end_offset
        while offset < end:
            data = log_.read(offset, self.config.load_buffer_size, max_offset=end).read_bytes()
            next_offset = loaded.apply_batches(data)
            if next_offset <= offset:
                break
            offset = next_offset
        return loaded

    def resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: its transactions are dropped (markers in
        flight stop; the next coordinator resumes them from the log)."""
        self.runtime.unload(partition)
        self.transactions.pop(partition, None)
        self.coordinator_epochs.pop(partition, None)

    def _lookup(self, transactional_id: str,
                ) -> tuple[ErrorCode, int, dict[str, TransactionMetadata]]:
        """(ownership error, partition, the partition's transactions)."""
        partition = self.partition_for(transactional_id)
        error = self.runtime.error_for(partition)
        if error != ErrorCode.NONE:
            return error, partition, {}
        return ErrorCode.NONE, partition, self.transactions[partition]

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        return self._lookup(transactional_id)[0]

    # ------------------------------------------------------------------------------ writes

    def _persist(self, partition: int, md: TransactionMetadata, transit: TxnTransit, *,
                 then: Callable[[], Any] | None = None,
                 keep_pending_on_failure: bool = False) -> asyncio.Future[Any]:
        """Writes `transit`; once committed it is applied to `md` and `then()` runs."""
        def apply() -> Any:
            md.complete_transition(transit)
            return then() if then is not None else None

        def failed(error: ErrorCode) -> None:
            log.warning("writing %s of transactional id %s failed: %s",
                        transit.state.state_name, md.transactional_id, error.name)
            if not keep_pending_on_failure and md.pending_state == transit.state:
                md.abort_transition()

        return self.runtime.write(partition, [transaction_record(md.transactional_id, transit)],
                                  apply, on_failure=failed)

    # ------------------------------------------------------------------------------ InitProducerId

    def _valid_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.transaction_max_timeout_ms

    async def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                               expected: tuple[int, int] | None = None,
                               ) -> InitProducerIdResult:
        """InitProducerId with a transactional id; `expected` is the (producer id, epoch) a
        recovering producer sends (KIP-360)."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not self._valid_timeout(transaction_timeout_ms):
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error, partition, transactions = self._lookup(transactional_id)
        if error != ErrorCode.NONE:
            return InitProducerIdResult(error)
        if transactional_id not in transactions:
            try:
                producer_id = await self.generate_producer_id()
            except KafkaError as exc:
                return InitProducerIdResult(exc.code)
            error, partition, transactions = self._lookup(transactional_id)
            if error != ErrorCode.NONE:
                return InitProducerIdResult(error)
            transactions.setdefault(transactional_id, TransactionMetadata(
                transactional_id=transactional_id, producer_id=producer_id,
                last_producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
                last_producer_epoch=NO_PRODUCER_EPOCH, txn_timeout_ms=transaction_timeout_ms,
                state=S.EMPTY, txn_last_update_timestamp=self.time_ms()))
        new_producer_id: int | None = None
        while True:
            md = transactions[transactional_id]
            prepared = self._prepare_init(md, transaction_timeout_ms, expected, new_producer_id)
            if prepared is not None:
                break
            # The epoch is exhausted: a new producer id (then the checks again: others may
            # have changed the id while this waited).
            try:
                new_producer_id = await self.generate_producer_id()
            except KafkaError as exc:
                return InitProducerIdResult(exc.code)
            error, partition, transactions = self._lookup(transactional_id)
            if error != ErrorCode.NONE:
                return InitProducerIdResult(error)
            if transactional_id not in transactions:
                return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if isinstance(prepared, ErrorCode):
            return InitProducerIdResult(prepared)
        if prepared.state == S.PREPARE_EPOCH_FENCE:
            # Abort the ongoing transaction with the bumped epoch; the client retries (and
            # its retry bumps the epoch once more, or rotates the id if that exhausted it).
            aborted = await self.end_transaction(transactional_id, prepared.producer_id,
                                                 prepared.producer_epoch, commit=False,
                                                 from_client=False)
            error = aborted if aborted != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS
            return InitProducerIdResult(error)
        error = await _outcome(self._persist(partition, md, prepared))
        if error != ErrorCode.NONE:
            return InitProducerIdResult(error)
        return InitProducerIdResult(ErrorCode.NONE, prepared.producer_id,
                                    prepared.producer_epoch)

    def _prepare_init(self, md: TransactionMetadata, timeout_ms: int,
                      expected: tuple[int, int] | None, new_producer_id: int | None,
                      ) -> TxnTransit | ErrorCode | None:
        """The transition InitProducerId makes, or its error; None when a new producer id is
        needed first."""
        if md.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None and not md.is_valid_producer_id(*expected):
            return ErrorCode.PRODUCER_FENCED
        if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        now = self.time_ms()
        if md.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if md.is_producer_epoch_exhausted and (
                    expected is None or expected[1] == md.producer_epoch):
                if new_producer_id is None:
                    return None
                return md.prepare_producer_id_rotation(new_producer_id, timeout_ms, now,
                                                       record_last_epoch=expected is not None)
            return md.prepare_increment_producer_epoch(
                timeout_ms, expected[1] if expected is not None else None, now)
        if md.state == S.ONGOING:
            return md.prepare_fence_producer_epoch()
        log.error("transactional id %s is in state %s at InitProducerId", md.transactional_id,
                  md.state.state_name)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    # ------------------------------------------------------------------------------ AddPartitions

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: Iterable[TopicPartition],
                             ) -> ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        error, partition, transactions = self._lookup(transactional_id)
        if error != ErrorCode.NONE:
            return error
        md = transactions.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT,
                                                             S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        wanted = set(partitions)
        if md.state == S.ONGOING and wanted <= md.topic_partitions:
            return ErrorCode.NONE  # added already: nothing to write
        try:
            transit = md.prepare_add_partitions(wanted, self.time_ms())
        except IllegalTransition:
            log.exception("AddPartitionsToTxn of %s", transactional_id)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        return await _outcome(self._persist(partition, md, transit))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition],
                          ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890): whether each partition is in the
        producer's ongoing transaction (TRANSACTION_ABORTABLE when it is not)."""
        wanted = list(partitions)
        if not transactional_id:
            return dict.fromkeys(wanted, ErrorCode.INVALID_REQUEST)
        error, _partition, transactions = self._lookup(transactional_id)
        if error == ErrorCode.NONE:
            md = transactions.get(transactional_id)
            if md is None or md.producer_id != producer_id:
                error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif md.producer_epoch != producer_epoch:
                error = ErrorCode.PRODUCER_FENCED
            elif md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                error = ErrorCode.CONCURRENT_TRANSACTIONS
            else:
                return {tp: ErrorCode.NONE if tp in md.topic_partitions
                        else ErrorCode.TRANSACTION_ABORTABLE for tp in wanted}
        return dict.fromkeys(wanted, error)

    # ------------------------------------------------------------------------------ EndTxn

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        commit: bool, from_client: bool = True) -> asyncio.Future[ErrorCode]:
        """EndTxn: resolves once PrepareCommit/PrepareAbort is persisted (the markers and the
        Complete state follow in the background). The checks and the prepared transition
        happen before this returns (no await in between)."""
        if not transactional_id:
            return _settled(ErrorCode.INVALID_REQUEST)
        error, partition, transactions = self._lookup(transactional_id)
        if error != ErrorCode.NONE:
            return _settled(error)
        md = transactions.get(transactional_id)
        prepared = self._prepare_end(md, producer_id, producer_epoch, commit, from_client)
        if isinstance(prepared, ErrorCode):
            return _settled(prepared)
        transit, is_epoch_fence = prepared
        assert md is not None
        generation = self.runtime.generation(partition)
        coordinator_epoch = self.coordinator_epochs[partition]

        def persisted() -> ErrorCode:
            # Kafka's sendTxnMarkersCallback: the transaction is still this producer's and in
            # the prepared state; the client is answered and the markers start.
            if md.producer_id != producer_id:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if md.producer_epoch != producer_epoch:
                return ErrorCode.PRODUCER_FENCED
            if md.pending_transition_in_progress:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            assert generation is not None
            self._start_markers(partition, generation, md, coordinator_epoch,
                                md.prepare_complete(self.time_ms()))
            return ErrorCode.NONE

        write = self._persist(partition, md, transit, then=persisted)
        result: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(write: asyncio.Future[Any]) -> None:
            error = _error_of(write)
            if error == ErrorCode.NONE:
                error = write.result()
            elif is_epoch_fence and transactions.get(transactional_id) is md:
                # The epoch was bumped in memory but never returned: a later fence reuses it.
                md.has_failed_epoch_fence = True
            if not result.done():
                result.set_result(error)

        write.add_done_callback(done)
        return result

    def _prepare_end(self, md: TransactionMetadata | None, producer_id: int,
                     producer_epoch: int, commit: bool, from_client: bool,
                     ) -> tuple[TxnTransit, bool] | ErrorCode:
        if md is None or md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        # Clients must name the current epoch; the coordinator's own aborts (fencing, timeouts)
        # carry the bumped one.
        if (from_client and producer_epoch != md.producer_epoch) or \
                producer_epoch < md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending_state not in (None, S.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = md.state
        if state == S.ONGOING:
            next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            is_epoch_fence = False
            if next_state == S.PREPARE_ABORT and md.pending_state == S.PREPARE_EPOCH_FENCE:
                is_epoch_fence = True
                md.pending_state = None
                md.producer_epoch = producer_epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            try:
                return md.prepare_abort_or_commit(next_state, self.time_ms()), is_epoch_fence
            except IllegalTransition:
                log.exception("EndTxn of %s", md.transactional_id)
                return ErrorCode.UNKNOWN_SERVER_ERROR
        if state == S.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        if state == S.COMPLETE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE
        if state == S.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        if state == S.PREPARE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
        if state == S.EMPTY:
            return ErrorCode.INVALID_TXN_STATE
        log.error("transactional id %s is in state %s at EndTxn", md.transactional_id,
                  state.state_name)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    # ------------------------------------------------------------------------------ markers

    def _start_markers(self, partition: int, generation: int, md: TransactionMetadata,
                       coordinator_epoch: int, complete: TxnTransit) -> None:
        self._spawn(self._complete_transaction(partition, generation, md, coordinator_epoch,
                                               complete))

    async def _complete_transaction(self, partition: int, generation: int,
                                    md: TransactionMetadata, coordinator_epoch: int,
                                    complete: TxnTransit) -> None:
        """Writes the markers until every partition has its own, then the Complete state
        (Kafka's TransactionMarkerChannelManager)."""
        commit = complete.state == S.COMPLETE_COMMIT
        while md.topic_partitions:
            if not self.runtime.is_current(partition, generation):
                return  # no longer the coordinator: the next one resumes from the log
            request = MarkerRequest(md.transactional_id, md.producer_id, md.producer_epoch,
                                    commit, coordinator_epoch,
                                    tuple(sorted(md.topic_partitions)))
            try:
                results = await self.write_markers(request)
            except Exception:
                log.exception("writing markers of %s failed", md.transactional_id)
                results = {}
            if not self.runtime.is_current(partition, generation):
                return
            for tp, error in results.items():
                if error == ErrorCode.NONE:
                    md.remove_partition(tp)
                elif error in _FENCED_MARKER_ERRORS:
                    log.warning("markers of %s refused with %s: a newer coordinator or "
                                "producer took over", md.transactional_id, error.name)
                    return
            if md.topic_partitions:
                await self.clock.sleep(MARKER_RETRY_BACKOFF_S)
        while True:
            if not self.runtime.is_current(partition, generation):
                return
            error = await _outcome(self._persist(partition, md, complete,
                                                 keep_pending_on_failure=True))
            if error == ErrorCode.NONE or error == ErrorCode.NOT_COORDINATOR:
                return
            await self.clock.sleep(MARKER_RETRY_BACKOFF_S)

    # ------------------------------------------------------------------------------ timers

    def abort_timed_out_transactions(self) -> int:
        """Aborts every transaction of the owned partitions open for longer than its timeout,
        with a bumped epoch (the producer is fenced). Returns how many aborts started."""
        now = self.time_ms()
        started = 0
        for transactions in list(self.transactions.values()):
            for md in list(transactions.values()):
                if md.state != S.ONGOING or md.pending_transition_in_progress:
                    continue
                if md.txn_start_timestamp + md.txn_timeout_ms >= now:
                    continue
                fence = md.prepare_fence_producer_epoch()
                log.info("aborting transaction of %s (producer %d) open for %d ms, past its "
                         "timeout %d ms", md.transactional_id, md.producer_id,
                         now - md.txn_start_timestamp, md.txn_timeout_ms)
                aborted = self.end_transaction(md.transactional_id, fence.producer_id,
                                               fence.producer_epoch, commit=False,
                                               from_client=False)
                aborted.add_done_callback(partial(self._log_timeout_abort, md.transactional_id))
                started += 1
        return started

    @staticmethod
    def _log_timeout_abort(transactional_id: str, done: asyncio.Future[ErrorCode]) -> None:
        error = done.result()
        if error not in (ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                         ErrorCode.PRODUCER_FENCED, ErrorCode.CONCURRENT_TRANSACTIONS):
            log.warning("rollback of the timed-out transaction of %s failed: %s",
                        transactional_id, error.name)

    def expire_transactional_ids(self) -> int:
        """Tombstones the ids of the owned partitions with no transaction in flight and no
        update for `transactional.id.expiration.ms`. Returns how many expirations started."""
        now = self.time_ms()
        horizon = now - self.config.transactional_id_expiration_ms
        started = 0
        for partition, transactions in list(self.transactions.items()):
            for md in list(transactions.values()):
                if md.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) or \
                        md.pending_transition_in_progress or \
                        md.txn_last_update_timestamp > horizon:
                    continue
                transit = md.prepare_dead()

                def remove(md: TransactionMetadata = md,
                           transactions: dict[str, TransactionMetadata] = transactions) -> None:
                    if transactions.get(md.transactional_id) is md:
                        del transactions[md.transactional_id]

                self._persist(partition, md, transit, then=remove)
                started += 1
        return started

    # ------------------------------------------------------------------------------ describe

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        error, _partition, transactions = self._lookup(transactional_id)
        if error != ErrorCode.NONE:
            return error, None
        md = transactions.get(transactional_id)
        if md is None or md.state == S.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, md

    def list_transactions(self, state_filters: Iterable[str], producer_id_filters: Iterable[int],
                          duration_filter_ms: int = -1,
                          ) -> tuple[ErrorCode, list[str], list[TransactionListing]]:
        """(error, unknown state names, the matching transactions of the owned partitions)."""
        states: set[TransactionState] = set()
        unknown: list[str] = []
        names = list(state_filters)
        for name in names:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        if self.runtime.is_loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, unknown, []
        producer_ids = set(producer_id_filters)
        now = self.time_ms()
        listed = []
        for transactions in self.transactions.values():
            for md in transactions.values():
                if md.state == S.DEAD:
                    continue  # being removed
                if producer_ids and md.producer_id not in producer_ids:
                    continue
                if names and md.state not in states:
                    continue
                if duration_filter_ms >= 0 and now - md.txn_start_timestamp <= duration_filter_ms:
                    continue
                listed.append(TransactionListing(md.transactional_id, md.producer_id,
                                                 md.state.state_name))
        return ErrorCode.NONE, unknown, listed
