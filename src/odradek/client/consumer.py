"""The consumer: `AsyncConsumer` (asyncio) and `Consumer` (blocking), Kafka's KafkaConsumer
with manual assignment or group membership (`subscribe`).

    with Consumer({"bootstrap.servers": "127.0.0.1:9092", "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition("events", 0)])
        for record in c.poll(timeout_ms=1000):
            print(record.offset, record.key, record.value)

* Partitions come from `assign()` or, after `subscribe()`, from the group (see `group`:
  join, assignors, heartbeats, rebalance listener); where each starts comes from the
  `OffsetStore` (the group's committed offsets) and otherwise ``auto.offset.reset``
  (earliest / latest / none). `seek`, `seek_to_beginning` and `seek_to_end` move positions;
  the latter two are resolved lazily (ListOffsets) on the next `poll` or `position`.
* `poll` returns up to ``max.poll.records`` records. Fetching is pipelined: before `poll`
  returns, the next Fetch requests are already sent for partitions with no buffered data, so
  the broker's long poll (``fetch.max.wait.ms``, ``fetch.min.bytes``) overlaps with the
  application's work. Incremental fetch sessions (KIP-227) keep requests small.
* An OFFSET_OUT_OF_RANGE fetch resets the position with ``auto.offset.reset``, or raises
  `OffsetOutOfRangeError` from `poll` when it is ``none``.
* ``isolation.level=read_committed`` reads up to the last stable offset and drops aborted
  transactions; control batches are never returned.
* `committed` / `commit` read and write the group's offsets; without ``group.id`` they (and
  `subscribe`) raise Kafka's INVALID_GROUP_ID error. With ``enable.auto.commit`` the
  positions are committed every ``auto.commit.interval.ms`` (from `poll`), before a
  rebalance revokes partitions and on `close`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from odradek.client.admin import AdminClient
from odradek.client.admin_types import IsolationLevel, OffsetSpec
from odradek.client.cluster import Cluster
from odradek.client.config import COMMON_CONFIG, ClientConfig, ConfigKey, at_least, one_of
from odradek.client.consumer_group_protocol import ConsumerGroupMembership
from odradek.client.errors import KafkaConfigError, KafkaTimeoutError
from odradek.client.fetcher import ConsumerRecord, Deserializer, Fetcher, OffsetOutOfRangeError
from odradek.client.group import ConsumerCoordinator, GroupOffsetStore, RebalanceListener
from odradek.client.retry import Deadline
from odradek.client.subscription import (
    NoGroupOffsetStore,
    OffsetAndMetadata,
    OffsetResetStrategy,
    OffsetStore,
    SubscriptionPattern,
    SubscriptionState,
)
from odradek.client.sync import SyncFacade, blocking
from odradek.client.types import ConsumerGroupMetadata, TopicPartition
from odradek.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CONSUMER_CONFIG",
    "AsyncConsumer",
    "Consumer",
    "ConsumerRecord",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
]

log = logging.getLogger("odradek.client.consumer")

P = ParamSpec("P")
R = TypeVar("R")

_client_ids = itertools.count(1)

#: The consumer's configuration keys with Kafka 3.8's defaults.
CONSUMER_CONFIG = COMMON_CONFIG.extend(keys=[
    ConfigKey("group.id", "str", None),
    ConfigKey("group.instance.id", "str", None),
    ConfigKey("group.protocol", "str", "classic", one_of("classic", "consumer")),
    # group.protocol=consumer: the server assignor to ask for (null: the group's default)
    ConfigKey("group.remote.assignor", "str", None),
    ConfigKey("enable.auto.commit", "bool", True),
    ConfigKey("auto.commit.interval.ms", "int", 5_000, at_least(0)),
    ConfigKey("auto.offset.reset", "str", "latest", one_of("latest", "earliest", "none")),
    ConfigKey("fetch.min.bytes", "int", 1, at_least(0)),
    ConfigKey("fetch.max.bytes", "int", 52_428_800, at_least(0)),
    ConfigKey("fetch.max.wait.ms", "int", 500, at_least(0)),
    ConfigKey("max.partition.fetch.bytes", "int", 1_048_576, at_least(0)),
    ConfigKey("max.poll.records", "int", 500, at_least(1)),
    ConfigKey("max.poll.interval.ms", "int", 300_000, at_least(1)),
    ConfigKey("session.timeout.ms", "int", 45_000),
    ConfigKey("heartbeat.interval.ms", "int", 3_000),
    ConfigKey("partition.assignment.strategy", "list",
              ["org.apache.kafka.clients.consumer.RangeAssignor",
               "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"]),
    ConfigKey("isolation.level", "str", "read_uncommitted",
              one_of("read_uncommitted", "read_committed")),
    ConfigKey("check.crcs", "bool", True),
    ConfigKey("client.rack", "str", ""),
    ConfigKey("exclude.internal.topics", "bool", True),
    ConfigKey("allow.auto.create.topics", "bool", True),
    # Java class names from properties files; records come back as bytes here.
    ConfigKey("key.deserializer", "str", None),
    ConfigKey("value.deserializer", "str", None),
])


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and ``auto.offset.reset`` is ``none``."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.partitions = sorted(partitions)
        names = ", ".join(str(tp) for tp in self.partitions)
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"Undefined offset with no reset policy for partitions: [{names}]")


@dataclass(frozen=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int
    leader_epoch: int | None = None


#: Kafka 4.0's ConsumerConfig: keys the chosen group protocol does not use, refused when set
#: (the consumer protocol's assignment, session and heartbeats are the coordinator's)
UNSUPPORTED_BY_GROUP_PROTOCOL: dict[str, tuple[str, ...]] = {
    "consumer": ("partition.assignment.strategy", "heartbeat.interval.ms", "session.timeout.ms"),
    "classic": ("group.remote.assignor",),
}


def check_group_protocol_configs(config: ClientConfig) -> None:
    """Kafka's checkUnsupportedConfigs: a consumer with a group.id must not set what its
    group.protocol ignores (KafkaConfigError naming the keys, as Kafka's ConfigException)."""
    if config["group.id"] is None:
        return
    protocol = config["group.protocol"]
    invalid = [name for name in UNSUPPORTED_BY_GROUP_PROTOCOL[protocol]
               if config.originals.get(name) is not None
               and str(config.originals[name]).strip()]
    if invalid:
        raise KafkaConfigError(f"{', '.join(invalid)} cannot be set when "
                               f"group.protocol={protocol.upper()}")


class AsyncConsumer:
    """Kafka's consumer on asyncio, with manual partition assignment (`assign`) or group
    membership (`subscribe`). Use from one task at a time; ``await close()`` (or
    ``async with``) when done."""

    def __init__(
        self,
        config: Mapping[str, Any] | ClientConfig,
        *,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        offset_store: OffsetStore | None = None,
    ) -> None:
        self.config = config if isinstance(config, ClientConfig) else \
            CONSUMER_CONFIG.parse(config)
        config = self.config
        check_group_protocol_configs(config)
        group_id = config["group.id"]
        default_id = f"consumer-{group_id}-{next(_client_ids)}" if group_id else \
            f"consumer-{next(_client_ids)}"
        self.cluster = Cluster(config, default_client_id=default_id)
        self.client_id = self.cluster.client_id
        self.group_id: str | None = group_id
        self.max_poll_records: int = config["max.poll.records"]
        self.default_api_timeout_ms: int = config["default.api.timeout.ms"]
        self.isolation_level = (IsolationLevel.READ_COMMITTED
                                if config["isolation.level"] == "read_committed"
                                else IsolationLevel.READ_UNCOMMITTED)
        self.subscriptions = SubscriptionState(OffsetResetStrategy(config["auto.offset.reset"]))
        self.fetcher = Fetcher(self.cluster, self.subscriptions, config, self._request_metadata,
                               key_deserializer, value_deserializer)
        self.coordinator: ConsumerCoordinator | None = None
        if group_id:
            membership = ConsumerGroupMembership if config["group.protocol"] == "consumer" \
                else ConsumerCoordinator
            self.coordinator = membership(
                self.cluster, config, self.subscriptions, self.fetcher.drop,
                self.fetcher.data_ready.set)
        if offset_store is None:
            offset_store = GroupOffsetStore(self.coordinator) if self.coordinator else \
                NoGroupOffsetStore()
        self.offset_store: OffsetStore = offset_store
        # Offset lookups reuse the admin client's ListOffsets logic over this consumer's
        # connections and metadata.
        self._admin = AdminClient(config)
        self._admin.cluster = self.cluster
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_retry_at = 0.0
        self._positions_task: asyncio.Task[None] | None = None
        self._positions_retry_at = 0.0
        self._positions_failures = 0
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------ assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Consume exactly these partitions (replacing the previous assignment)."""
        self._check_open()
        if self.coordinator is not None and self.coordinator.subscribed:
            raise RuntimeError("Subscription to topics, partitions and pattern are mutually "
                               "exclusive")
        removed = self.subscriptions.assign_from_user(TopicPartition(*tp) for tp in partitions)
        self.fetcher.drop(removed)
        self._request_metadata()

    def assignment(self) -> set[TopicPartition]:
        return self.subscriptions.assignment

    async def unsubscribe(self) -> None:
        """Drop the assignment; a group member (auto-)commits, revokes and leaves its group."""
        if self.coordinator is not None and self.coordinator.subscribed:
            await self.coordinator.unsubscribe()
        self.fetcher.drop(self.subscriptions.assign_from_user([]))

    def subscribe(self, topics: Iterable[str] | str | re.Pattern[str] | SubscriptionPattern, *,
                  pattern: str | re.Pattern[str] | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """Join the consumer group (``group.id``) for `topics` (names, a compiled regular
        expression matched against every topic name by this client, or a `SubscriptionPattern`
        the coordinator resolves, with group.protocol=consumer); the group assigns the
        partitions on the next `poll`s. `listener`'s ``on_partitions_revoked`` / ``on_partitions_assigned``
        / ``on_partitions_lost`` run around each rebalance."""
        self._check_open()
        if self.coordinator is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, NoGroupOffsetStore.MESSAGE)
        if isinstance(topics, SubscriptionPattern):
            if not isinstance(self.coordinator, ConsumerGroupMembership):
                # the consumer's group protocol is wrong, not the argument's type
                raise ValueError(  # noqa: TRY004
                    "A SubscriptionPattern (a regular expression resolved by the broker) needs "
                    "group.protocol=consumer")
            if not self.coordinator.subscribed and self.subscriptions.assignment:
                raise RuntimeError("Subscription to topics, partitions and pattern are "
                                   "mutually exclusive")
            self.coordinator.subscribe([], None, listener, server_regex=topics.pattern)
            self._request_metadata()
            return
        if isinstance(topics, re.Pattern):
            topics, pattern = [], topics
        elif isinstance(topics, str):
            topics = [topics]
        names = list(topics)
        if pattern is None and not names:
            raise ValueError("subscribe() needs topics or a pattern; use unsubscribe() to "
                             "leave the group")
        if any(not name or not name.strip() for name in names):
            raise ValueError("Topic collection to subscribe to cannot contain null or empty "
                             "topic")
        if not self.coordinator.subscribed and self.subscriptions.assignment:
            raise RuntimeError("Subscription to topics, partitions and pattern are mutually "
                               "exclusive")
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.coordinator.subscribe(names, compiled, listener)
        self._request_metadata()

    def subscription(self) -> set[str]:
        """The subscribed topics (those matching the pattern, with a pattern)."""
        coordinator = self.coordinator
        if coordinator is None or not coordinator.subscribed:
            return set()
        return set(coordinator.subscribed_topics
                   if coordinator.pattern is not None or coordinator.server_regex is not None
                   else coordinator.topics)

    def group_metadata(self) -> ConsumerGroupMetadata | None:
        """This member's `ConsumerGroupMetadata` (group id, generation, member id, group
        instance id), for `Producer.send_offsets_to_transaction`; None without ``group.id``."""
        c = self.coordinator
        return None if c is None else ConsumerGroupMetadata(c.group_id, c.generation_id,
                                                            c.member_id, c.group_instance_id)

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Fetch `partition` from `offset` on the next poll."""
        if offset < 0:
            raise ValueError("seek offset must not be a negative number")
        self.subscriptions.require(TopicPartition(*partition)).seek(offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._request_reset(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._request_reset(partitions, OffsetResetStrategy.LATEST)

    def _request_reset(self, partitions: Iterable[TopicPartition] | None,
                       strategy: OffsetResetStrategy) -> None:
        targets = self.subscriptions.assignment if partitions is None else partitions
        for tp in targets:
            self.subscriptions.require(TopicPartition(*tp)).request_reset(strategy)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.subscriptions.require(TopicPartition(*tp)).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.subscriptions.require(TopicPartition(*tp)).paused = False
        self.fetcher.data_ready.set()

    def paused(self) -> set[TopicPartition]:
        return self.subscriptions.paused()

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark seen in the last fetch of `partition` (None before one)."""
        state = self.subscriptions.require(TopicPartition(*partition))
        return state.high_watermark if state.high_watermark >= 0 else None

    def metrics(self) -> dict[str, float]:
        """A few of Kafka's consumer metrics by their Kafka names (`records-lag-max`,
        `records-consumed-rate`, `fetch-latency-avg`, ...)."""
        return self.fetcher.metrics.as_dict(self.subscriptions)

    async def position(self, partition: TopicPartition | tuple[str, int],
                       timeout_ms: float | None = None) -> int:
        """The offset of the next record `poll` returns for `partition` (looked up when not
        known yet)."""
        tp = TopicPartition(*partition)
        state = self.subscriptions.require(tp)
        limit_ms = self.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = Deadline(limit_ms)
        while not state.has_valid_position:
            task = self._ensure_positions()
            if task is None:  # backing off after a failed lookup
                await asyncio.sleep(min(0.05, deadline.remaining_ms() / 1000))
            else:
                await asyncio.wait([task], timeout=deadline.remaining_ms() / 1000)
                self._ensure_positions()  # raises the task's error, if any
            if deadline.expired() and not state.has_valid_position:
                raise KafkaTimeoutError(f"Timeout of {limit_ms:.0f}ms expired before the "
                                        f"position for partition {tp} could be determined")
        assert state.position is not None
        return state.position

    # ------------------------------------------------------------------------------ polling

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None
                   ) -> list[ConsumerRecord]:
        """Records fetched since the last poll (up to ``max.poll.records``); waits up to
        `timeout_ms` for some when none are buffered."""
        self._check_open()
        coordinator = self.coordinator
        if not (coordinator is not None and coordinator.subscribed) and \
                not self.subscriptions.assignment:
            raise RuntimeError("Consumer is not subscribed to any topics or assigned any "
                               "partitions")
        limit = max_records or self.max_poll_records
        deadline = Deadline(timeout_ms)
        fetcher = self.fetcher
        while True:
            if coordinator is not None:
                await coordinator.poll(deadline)
            self._ensure_positions()
            if self.cluster.metadata_is_stale({tp.topic for tp in self.subscriptions.assignment}):
                self._request_metadata()
            records = fetcher.collect(limit)
            fetcher.data_ready.clear()
            fetcher.send_fetches()  # the next fetch runs while the caller handles these
            if records:
                return records
            remaining = deadline.remaining_ms()
            if remaining <= 0:
                return []
            try:
                async with asyncio.timeout(remaining / 1000):
                    await fetcher.data_ready.wait()
            except TimeoutError:
                return []

    def _ensure_positions(self) -> asyncio.Task[None] | None:
        """Start looking up missing positions (committed offsets, then auto.offset.reset);
        re-raises the error of a finished lookup. Returns the running lookup, if any."""
        task = self._positions_task
        if task is not None and task.done():
            self._positions_task = None
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        if self._positions_task is None and time.monotonic() >= self._positions_retry_at and (
                self.subscriptions.missing_positions() or self.subscriptions.awaiting_reset()):
            self._positions_task = asyncio.get_running_loop().create_task(
                self._update_positions())
        return self._positions_task

    async def _update_positions(self) -> None:
        try:
            missing = self.subscriptions.missing_positions()
            if missing:
                committed = await self.offset_store.initial_offsets(missing)
                unknown = []
                for tp in missing:
                    state = self.subscriptions.state(tp)
                    if state is None or state.position is not None or \
                            state.reset_strategy is not None:
                        continue
                    found = committed.get(tp)
                    if found is not None:
                        state.seek(found.offset, found.leader_epoch or -1)
                    else:
                        unknown.append(tp)
                if unknown and self.subscriptions.default_reset is OffsetResetStrategy.NONE:
                    raise NoOffsetForPartitionError(unknown)
                for tp in unknown:
                    self.subscriptions.require(tp).request_reset(
                        self.subscriptions.default_reset)
            await self._reset_positions()
        finally:
            self.fetcher.data_ready.set()

    async def _reset_positions(self) -> None:
        wanted = self.subscriptions.awaiting_reset()
        if not wanted:
            return
        results = await self._admin.list_offsets(
            {tp: strategy.timestamp for tp, strategy in wanted.items()},
            isolation_level=self.isolation_level, raise_errors=False)
        failed: KafkaError | None = None
        for tp, result in results.items():
            state = self.subscriptions.state(tp)
            if state is None or state.reset_strategy is not wanted[tp]:
                continue  # unassigned or re-seeked meanwhile
            if isinstance(result, KafkaError):
                failed = result
                continue
            state.seek(result.offset, -1 if result.leader_epoch is None else result.leader_epoch)
        if failed is not None:
            if not failed.retriable:
                raise failed
            delay_ms = self.cluster.retry_backoff.delay_ms(self._positions_failures)
            self._positions_failures += 1
            self._positions_retry_at = time.monotonic() + delay_ms / 1000
        else:
            self._positions_failures = 0

    def _request_metadata(self) -> None:
        """Refresh the metadata of the assigned topics (once at a time, with backoff)."""
        if self._metadata_task is not None or self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on the loop yet (assign before the first poll): poll asks again
        self._metadata_task = loop.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        try:
            delay = self._metadata_retry_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            topics = {tp.topic for tp in self.subscriptions.assignment}
            await self.cluster.refresh_metadata(
                topics | set(self.cluster.metadata.topics),
                allow_auto_topic_creation=self.config["allow.auto.create.topics"])
            coordinator = self.coordinator
            if coordinator is not None and await coordinator.pattern_changed():
                coordinator.request_rejoin("the topics matching the pattern changed")
        except KafkaError as error:
            log.debug("metadata refresh failed: %s", error)
        finally:
            self._metadata_retry_at = time.monotonic() + \
                self.cluster.retry_backoff.initial_ms / 1000
            self._metadata_task = None
            self.fetcher.data_ready.set()

    # ------------------------------------------------------------------------------ offsets

    async def beginning_offsets(self, partitions: Iterable[TopicPartition],
                                timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """The first offset of each partition (its log start offset)."""
        return await self._offsets(partitions, OffsetSpec.EARLIEST_TIMESTAMP, timeout_ms)

    async def end_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition: the high watermark, or the
        last stable offset with ``read_committed``."""
        return await self._offsets(partitions, OffsetSpec.LATEST_TIMESTAMP, timeout_ms)

    async def _offsets(self, partitions: Iterable[TopicPartition], spec: int,
                       timeout_ms: float | None) -> dict[TopicPartition, int]:
        results = await self._admin.list_offsets(
            {TopicPartition(*tp): spec for tp in partitions},
            isolation_level=self.isolation_level, timeout_ms=timeout_ms)
        return {tp: info.offset for tp, info in results.items()}  # type: ignore[union-attr]

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the earliest offset whose timestamp is at least the given one
        (None when there is none)."""
        for tp, timestamp in timestamps.items():
            if timestamp < 0:
                raise ValueError(f"The target time for partition {TopicPartition(*tp)} is "
                                 f"{timestamp}. The target time cannot be negative.")
        results = await self._admin.list_offsets(
            {TopicPartition(*tp): ts for tp, ts in timestamps.items()},
            isolation_level=self.isolation_level, timeout_ms=timeout_ms)
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, info in results.items():
            assert not isinstance(info, KafkaError)
            found[tp] = None if info.offset < 0 else OffsetAndTimestamp(
                info.offset, info.timestamp, info.leader_epoch)
        return found

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (the broker creates a missing topic when it
        auto-creates topics and ``allow.auto.create.topics`` is true, as in Kafka)."""
        metadata = await self.cluster.refresh_metadata(
            {topic} | set(self.cluster.metadata.topics),
            allow_auto_topic_creation=self.config["allow.auto.create.topics"])
        for entry in metadata.topics:
            if entry.name == topic and entry.error_code == ErrorCode.NONE:
                return sorted(p.partition_index for p in entry.partitions)
        return []

    async def list_topics(self) -> dict[str, list[int]]:
        """Every topic (internal ones excepted per ``exclude.internal.topics``) with its
        partitions."""
        metadata = await self.cluster.refresh_metadata(None)
        exclude_internal = self.config["exclude.internal.topics"]
        return {
            t.name: sorted(p.partition_index for p in t.partitions)
            for t in metadata.topics
            if t.error_code == ErrorCode.NONE and t.name and
            not (exclude_internal and t.is_internal)
        }

    async def committed(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self.offset_store.committed([TopicPartition(*tp) for tp in partitions])

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
                     ) -> None:
        """Commit `offsets` (default: the current positions) to the group, synchronously."""
        if offsets is None:
            offsets = {tp: OffsetAndMetadata(state.position, leader_epoch=state.position_epoch
                                             if state.position_epoch >= 0 else None)
                       for tp, state in self.subscriptions.items() if state.position is not None}
        await self.offset_store.commit({
            TopicPartition(*tp): value if isinstance(value, OffsetAndMetadata)
            else OffsetAndMetadata(value) for tp, value in offsets.items()})

    # ------------------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("This consumer has already been closed.")

    async def close(self) -> None:
        if self._closed:
            return
        if self.coordinator is not None:
            try:
                await self.coordinator.close()
            except Exception as error:  # closing goes on: the group expires us anyway
                log.warning("leaving group %s failed: %s", self.group_id, error)
        self._closed = True
        for task in (self._metadata_task, self._positions_task):
            if task is not None:
                task.cancel()
        await self.fetcher.close()
        await asyncio.gather(*(t for t in (self._metadata_task, self._positions_task)
                               if t is not None), return_exceptions=True)
        await self.cluster.close()


async def _invoke(method: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    return method(*args, **kwargs)


def on_loop(method: Callable[Concatenate[AsyncConsumer, P], R]
            ) -> Callable[Concatenate[Consumer, P], R]:
    """A blocking method that runs a plain (non-async) `AsyncConsumer` method on the client's
    loop thread, where the consumer's state lives."""

    @functools.wraps(method)
    def wrapper(self: Consumer, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(_invoke(method, (self._async, *args), kwargs))

    return wrapper


class _ThreadedListener:
    """Runs a blocking consumer's rebalance callbacks off the loop thread."""

    def __init__(self, listener: RebalanceListener) -> None:
        self.listener = listener
        for name in ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost"):
            callback = getattr(listener, name, None)
            if callback is not None:
                # (async callbacks run on the loop as they are)
                setattr(self, name, callback if inspect.iscoroutinefunction(callback)
                        else functools.partial(asyncio.to_thread, callback))


class Consumer(SyncFacade[AsyncConsumer]):
    """The blocking consumer: `AsyncConsumer`'s methods, run on a private event loop thread.
    Use as a context manager, or call `close`."""

    def __init__(
        self,
        config: Mapping[str, Any] | ClientConfig,
        *,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        offset_store: OffsetStore | None = None,
    ) -> None:
        parsed = config if isinstance(config, ClientConfig) else CONSUMER_CONFIG.parse(config)
        check_group_protocol_configs(parsed)
        super().__init__(lambda: AsyncConsumer(parsed, key_deserializer=key_deserializer,
                                               value_deserializer=value_deserializer,
                                               offset_store=offset_store),
                         "odradek-consumer")

    assign = on_loop(AsyncConsumer.assign)
    assignment = on_loop(AsyncConsumer.assignment)
    unsubscribe = blocking(AsyncConsumer.unsubscribe)
    subscription = on_loop(AsyncConsumer.subscription)
    group_metadata = on_loop(AsyncConsumer.group_metadata)

    def subscribe(self, topics: Iterable[str] | str | re.Pattern[str] | SubscriptionPattern, *,
                  pattern: str | re.Pattern[str] | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """`AsyncConsumer.subscribe`; the listener's callbacks run in a worker thread while
        the rebalance waits for them, so they may call this consumer (e.g. `commit`)."""
        wrapped = None if listener is None else _ThreadedListener(listener)
        self._run(_invoke(AsyncConsumer.subscribe, (self._async, topics),
                          {"pattern": pattern, "listener": wrapped}))

    metrics = on_loop(AsyncConsumer.metrics)
    seek = on_loop(AsyncConsumer.seek)
    seek_to_beginning = on_loop(AsyncConsumer.seek_to_beginning)
    seek_to_end = on_loop(AsyncConsumer.seek_to_end)
    pause = on_loop(AsyncConsumer.pause)
    resume = on_loop(AsyncConsumer.resume)
    paused = on_loop(AsyncConsumer.paused)
    highwater = on_loop(AsyncConsumer.highwater)
    position = blocking(AsyncConsumer.position)
    poll = blocking(AsyncConsumer.poll)
    beginning_offsets = blocking(AsyncConsumer.beginning_offsets)
    end_offsets = blocking(AsyncConsumer.end_offsets)
    offsets_for_times = blocking(AsyncConsumer.offsets_for_times)
    partitions_for = blocking(AsyncConsumer.partitions_for)
    list_topics = blocking(AsyncConsumer.list_topics)
    committed = blocking(AsyncConsumer.committed)
    commit = blocking(AsyncConsumer.commit)
