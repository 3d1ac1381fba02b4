"""A coordinator's runtime: the partitions it leads, and its writes across the commit boundary.

Kafka's CoordinatorRuntime, simplified. A coordinator (groups today, transactions next) keeps
its state in memory and persists every change as a record batch in a partition of its internal
topic, which it leads. The runtime is the part every such coordinator shares:

* Ownership. A partition this broker starts leading is *loading* (its records are replayed;
  requests for it answer COORDINATOR_LOAD_IN_PROGRESS), then *owned*; when the broker stops
  leading it, it is unloaded. Each load and unload starts a new generation, so late results of
  an older one (a slow replay, a write committed after a resignation) are recognised and
  dropped.
* Writes. `write(partition, records, apply)` appends the records as one batch and, once the
  batch is committed (the partition's high watermark passed it), runs `apply` to change the
  in-memory state. Nothing is applied that is not committed: a reader never sees state a
  leader change could take back. The applies of one partition run in append order, whatever
  order the commits are reported in. A failed append or commit runs `on_failure` instead, with
  the coordinator error a client should see (Kafka's mapping, `append_error`); so does a write
  whose partition was unloaded (or reloaded) before it committed, with NOT_COORDINATOR.
  A write may belong to a producer's transaction (a transactional offset commit): its batch
  carries the producer id and epoch and the transactional flag, as Kafka writes it, so the
  log tracks the transaction that the transaction coordinator's markers close.
* Ordered actions. `run_after_writes(partition, action)` runs an in-memory change behind the
  writes in flight (a transaction marker's completion, which must see them applied first).

Everything runs on the event loop; there are no locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import Compression, RecordBatchBuilder

log = logging.getLogger("odradek.coordinator.runtime")

T = TypeVar("T")
R = TypeVar("R")

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone

#: append(partition, batch bytes) -> awaitable that resolves once the batch is committed (the
#: high watermark passed its last offset), to the batch's base offset in the log (None if the
#: appender does not know it); raises KafkaError if the append or the commit fails.
Appender = Callable[[int, bytes], Awaitable[Any]]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: the base sequence of Kafka's transactional offset commit batches (GroupMetadataManager and
#: the CoordinatorRuntime build them with sequence 0; coordinator appends are not sequence
#: checked)
TRANSACTIONAL_BASE_SEQUENCE = 0

_NOT_AVAILABLE_ON_APPEND = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
})
_NOT_COORDINATOR_ON_APPEND = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
})
_TOO_LARGE_ON_APPEND = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE,
})


def append_error(error: ErrorCode, *, for_offsets: bool = False) -> ErrorCode:
    """The coordinator error a client sees for a failed append (Kafka's mapping)."""
    if error in _NOT_AVAILABLE_ON_APPEND:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in _NOT_COORDINATOR_ON_APPEND:
        return ErrorCode.NOT_COORDINATOR
    if error in _TOO_LARGE_ON_APPEND and for_offsets:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return ErrorCode.UNKNOWN_SERVER_ERROR


def build_batch(records: Iterable[Record], now_ms: int,
                compression: Compression = Compression.NONE, *,
                producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH) -> bytes:
    """One record batch of `records`, all stamped `now_ms`; with a producer id, a
    transactional batch of that producer's current transaction."""
    if producer_id == NO_PRODUCER_ID:
        builder = RecordBatchBuilder(compression=compression)
    else:
        builder = RecordBatchBuilder(compression=compression, producer_id=producer_id,
                                     producer_epoch=producer_epoch,
                                     base_sequence=TRANSACTIONAL_BASE_SEQUENCE,
                                     is_transactional=True)
    for key, value in records:
        builder.append(now_ms, key, value)
    return builder.build()


@dataclass(eq=False)
class _Write(Generic[T]):
    """A write between its append and its apply."""

    generation: int
    apply: Callable[..., T]
    on_failure: Callable[[ErrorCode], Any] | None
    map_error: Callable[[ErrorCode], ErrorCode]
    future: asyncio.Future[T]
    #: None while the commit is pending; NONE once committed; else the coordinator error.
    outcome: ErrorCode | None = None
    finished: bool = field(default=False)
    #: apply takes the batch's base offset (what the appender resolved to)
    with_offset: bool = False
    base_offset: int | None = None


class CoordinatorRuntime:
    """The partitions one coordinator leads, and its append-commit-apply writes to them."""

    def __init__(self, appender: Appender, *, clock: Clock = SYSTEM_CLOCK,
                 compression: Compression = Compression.NONE) -> None:
        self.appender = appender
        self.clock = clock
        self.compression = compression
        #: owned partition -> the generation it was loaded in
        self.owned: dict[int, int] = {}
        self.loading: set[int] = set()
        self._generations: dict[int, int] = {}
        #: per owned partition, its writes in append order, until applied or failed
        self._writes: dict[int, deque[_Write[Any]]] = {}
        self._appends: set[asyncio.Future[Any]] = set()

    # ------------------------------------------------------------------------------ ownership

    def error_for(self, partition: int) -> ErrorCode:
        """NONE if this coordinator owns `partition`, else the error to answer with."""
        if partition in self.owned:
            return ErrorCode.NONE
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def generation(self, partition: int) -> int | None:
        """The generation `partition` is owned in; None if it is not owned."""
        return self.owned.get(partition)

    @property
    def is_loading(self) -> bool:
        return bool(self.loading)

    def _next_generation(self, partition: int) -> int:
        generation = self._generations.get(partition, 0) + 1
        self._generations[partition] = generation
        return generation

    def start_loading(self, partition: int) -> int:
        """`partition` starts loading (a reload drops what was owned); returns the generation
        `complete_loading` must name."""
        if partition in self.owned:
            self._drop_writes(partition)
            del self.owned[partition]
        generation = self._next_generation(partition)
        self.loading.add(partition)
        return generation

    def is_current(self, partition: int, generation: int) -> bool:
        return self._generations.get(partition) == generation

    def complete_loading(self, partition: int, generation: int) -> bool:
        """`partition` is owned from now on, unless it was unloaded or reloaded since
        `start_loading` returned `generation`; whether it is."""
        if not self.is_current(partition, generation):
            return False
        self.loading.discard(partition)
        self.owned[partition] = generation
        self._writes[partition] = deque()
        return True

    def abort_loading(self, partition: int, generation: int) -> None:
        """The load of `generation` failed: `partition` is neither loading nor owned."""
        if self.is_current(partition, generation):
            self.loading.discard(partition)

    async def load(self, partition: int, replay: Callable[[], T], install: Callable[[T], R],
                   generation: int | None = None) -> R | None:
        """Loads `partition`: `replay()` runs off the event loop (it reads the log), then, if
        this load is still current, `install(replayed)` runs and the partition is owned, in
        one step. Returns what `install` returned; None for a superseded load."""
        if generation is None:
            generation = self.start_loading(partition)
        try:
            replayed = await asyncio.to_thread(replay)
        except BaseException:
            self.abort_loading(partition, generation)
            raise
        if not self.is_current(partition, generation):
            return None
        try:
            installed = install(replayed)
        except BaseException:
            self.abort_loading(partition, generation)
            raise
        self.complete_loading(partition, generation)
        return installed

    def unload(self, partition: int) -> None:
        """Stops coordinating `partition`: a load in progress is superseded and writes not yet
        applied fail with NOT_COORDINATOR (their `on_failure` runs now)."""
        self._next_generation(partition)
        self.loading.discard(partition)
        self.owned.pop(partition, None)
        self._drop_writes(partition)

    def _drop_writes(self, partition: int) -> None:
        for write in self._writes.pop(partition, ()):
            write.outcome = ErrorCode.NOT_COORDINATOR
            self._finish(partition, write)

    async def close(self) -> None:
        """Unloads every partition and stops waiting for the appends in flight."""
        for partition in list(self.owned) + list(self.loading):
            self.unload(partition)
        appends = list(self._appends)
        for append in appends:
            append.cancel()
        await asyncio.gather(*appends, return_exceptions=True)

    # ------------------------------------------------------------------------------ writes

    def write(self, partition: int, records: Iterable[Record], apply: Callable[..., T], *,
              on_failure: Callable[[ErrorCode], Any] | None = None,
              map_error: Callable[[ErrorCode], ErrorCode] = append_error,
              producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
              with_offset: bool = False) -> asyncio.Future[T]:
        """Appends `records` as one batch to `partition`; once committed, runs `apply()` (if the
        partition is still owned in the same generation) and resolves to its result. On
        failure, runs `on_failure(error)` and the future raises KafkaError(error), where error
        is the coordinator error: `map_error(append error)`, NOT_COORDINATOR when the
        partition changed hands, or the ownership error when it is not owned now.

        With a `producer_id`, the batch is a transactional batch of that producer (at
        `producer_epoch`). With `with_offset`, `apply(base offset)` gets the batch's base
        offset in the log (None when the appender does not say).

        Exactly one of `apply` and `on_failure` runs, whether or not anyone awaits the
        future; cancelling a wait for it changes nothing."""
        return self._write(partition, lambda: build_batch(
            records, self.clock.time_ms(), self.compression, producer_id=producer_id,
            producer_epoch=producer_epoch), apply, on_failure, map_error, with_offset)

    def write_batch(self, partition: int, batch: bytes, apply: Callable[..., T], *,
                    on_failure: Callable[[ErrorCode], Any] | None = None,
                    map_error: Callable[[ErrorCode], ErrorCode] = append_error,
                    with_offset: bool = False) -> asyncio.Future[T]:
        """`write` of a batch built by the caller (a transaction marker's control batch)."""
        return self._write(partition, lambda: batch, apply, on_failure, map_error, with_offset)

    def _write(self, partition: int, make_batch: Callable[[], bytes], apply: Callable[..., T],
               on_failure: Callable[[ErrorCode], Any] | None,
               map_error: Callable[[ErrorCode], ErrorCode],
               with_offset: bool) -> asyncio.Future[T]:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        # Failures reach the writer through on_failure or the future; a writer that does not
        # wait for the outcome must not make asyncio log "exception was never retrieved".
        future.add_done_callback(_retrieve)
        generation = self.owned.get(partition)
        write = _Write(generation or 0, apply, on_failure, map_error, future,
                       with_offset=with_offset)
        if generation is None:
            write.outcome = self.error_for(partition)
            self._finish(partition, write)
            return future
        batch = make_batch()
        self._writes[partition].append(write)
        # Tasks start in creation order, so the batches reach the log in the order of the
        # write calls.
        append = asyncio.ensure_future(self.appender(partition, batch))
        self._appends.add(append)
        append.add_done_callback(lambda done: self._appended(partition, write, done))
        return future

    def _appended(self, partition: int, write: _Write[Any], append: asyncio.Future[Any]) -> None:
        self._appends.discard(append)
        if write.finished:
            return  # unloaded meanwhile: already failed
        if append.cancelled():
            write.outcome = ErrorCode.NOT_COORDINATOR
        elif (error := append.exception()) is not None:
            if isinstance(error, KafkaError):
                log.warning("appending to partition %d failed: %s", partition, error)
                write.outcome = write.map_error(error.code)
            else:
                log.error("appending to partition %d failed", partition, exc_info=error)
                write.outcome = ErrorCode.UNKNOWN_SERVER_ERROR
        else:
            write.outcome = ErrorCode.NONE
            base_offset = append.result()
            write.base_offset = base_offset if isinstance(base_offset, int) else None
        self._drain(partition)

    def _drain(self, partition: int) -> None:
        # Applies run in append order: a write, and those behind it that are done, run once
        # every earlier write of the partition is done.
        writes = self._writes.get(partition)
        while writes and writes[0].outcome is not None:
            self._finish(partition, writes.popleft())

    def run_after_writes(self, partition: int, action: Callable[[], T]) -> asyncio.Future[T]:
        """Runs `action()` once every write to `partition` issued before this call is applied
        or failed (at once when there is none), if the partition is still owned in the same
        generation; resolves to its result. Fails with the ownership error (as `write` does)
        when the partition is not owned, or stops being owned first."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        generation = self.owned.get(partition)
        action_in_line = _Write(generation or 0, action, None, append_error, future)
        if generation is None:
            action_in_line.outcome = self.error_for(partition)
            self._finish(partition, action_in_line)
            return future
        action_in_line.outcome = ErrorCode.NONE
        self._writes[partition].append(action_in_line)
        self._drain(partition)
        return future

    def _finish(self, partition: int, write: _Write[Any]) -> None:
        write.finished = True
        outcome = write.outcome
        if outcome == ErrorCode.NONE and self.owned.get(partition) != write.generation:
            outcome = ErrorCode.NOT_COORDINATOR
        future = write.future
        if outcome == ErrorCode.NONE:
            try:
                result = write.apply(write.base_offset) if write.with_offset else write.apply()
            except Exception as exc:
                log.exception("applying a committed write to partition %d failed", partition)
                if not future.done():
                    future.set_exception(exc)
                return
            if not future.done():
                future.set_result(result)
            return
        assert outcome is not None
        if write.on_failure is not None:
            try:
                write.on_failure(outcome)
            except Exception:
                log.exception("the failure handler of a write to partition %d failed", partition)
        if not future.done():
            future.set_exception(KafkaError(outcome))

    @property
    def pending_writes(self) -> int:
        """Writes appended but not yet applied or failed."""
        return sum(len(writes) for writes in self._writes.values())


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
