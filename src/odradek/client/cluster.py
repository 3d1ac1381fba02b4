"""The client's view of a cluster: bootstrap, metadata cache, connection pool, retries.

`Cluster` is what every client (admin, producer, consumer) builds on:

* connections are pooled by broker address, opened on demand (concurrent callers share one
  connect), with per-address reconnect backoff, and closed when idle too long;
* `MetadataCache` holds brokers, controller, topics and partition leaders from the latest
  Metadata responses; it is refreshed when older than ``metadata.max.age.ms``, when a caller
  asks for topics it does not know, and after errors that mean it is stale
  (``note_error``: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...);
* `RetryState`/`Cluster.call` implement the retry rule: retriable errors are retried with
  exponential backoff (``retry.backoff.ms`` .. ``retry.backoff.max.ms``) up to ``retries``
  times and never past the call's deadline (``default.api.timeout.ms`` unless given).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, TypeVar

from odradek.client.config import ClientConfig, parse_bootstrap_servers
from odradek.client.connection import Connection
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError, error_from_code
from odradek.client.retry import Deadline, ExponentialBackoff
from odradek.client.security import client_security
from odradek.client.types import Node, PartitionMetadata, TopicMetadata, TopicPartition
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.messages import (
    DescribeClusterRequest,
    MetadataRequest,
    MetadataResponse,
)

__all__ = ["INVALID_METADATA_ERRORS", "Cluster", "MetadataCache", "RetryState"]

log = logging.getLogger("odradek.client.cluster")

T = TypeVar("T")
Address = tuple[str, int]

METADATA_KEY = 3
DESCRIBE_CLUSTER_KEY = 60
ENDPOINT_TYPE_CONTROLLER = 2  # DescribeCluster's endpoint type of controller listeners

#: Errors that mean the cached metadata is stale (Kafka's InvalidMetadataException family,
#: plus lost connections): seeing one triggers a refresh before the retry.
INVALID_METADATA_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
})


def _shared_task(registry: dict[Any, asyncio.Task[T]], key: Any,
                 coroutine: Awaitable[T]) -> asyncio.Task[T]:
    """Run `coroutine` as a task registered under `key` until it finishes, so concurrent
    callers can await the same work (each through `asyncio.shield`, so one caller's
    cancellation does not cancel it for the others)."""
    task: asyncio.Task[T] = asyncio.get_running_loop().create_task(coroutine)  # type: ignore[arg-type]
    registry[key] = task

    def finished(done: asyncio.Task[T]) -> None:
        if registry.get(key) is done:
            del registry[key]
        if not done.cancelled():
            done.exception()  # retrieved: no "never retrieved" warning when nobody waited

    task.add_done_callback(finished)
    return task


class MetadataCache:
    """The latest cluster metadata. Updated in place by `update`."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        #: -1 while unknown
        self.controller_id = -1
        self.brokers: dict[int, Node] = {}
        self.topics: dict[str, TopicMetadata] = {}
        #: monotonic time of the last update; 0 before the first
        self.updated_at = 0.0

    def age_ms(self) -> float:
        return (time.monotonic() - self.updated_at) * 1000 if self.updated_at else float("inf")

    def update(self, response: MetadataResponse, *, all_topics: bool) -> None:
        """Take in a Metadata response. With ``all_topics`` the response lists every topic
        and replaces the topic table; otherwise the topics it names are replaced and the
        ones reported unknown are dropped."""
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        self.brokers = {
            broker.node_id: Node(broker.node_id, broker.host, broker.port, broker.rack)
            for broker in response.brokers
        }
        topics = {} if all_topics else dict(self.topics)
        for topic in response.topics:
            error = ErrorCode.from_code(topic.error_code)
            if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or topic.name is None:
                topics.pop(topic.name or "", None)
                continue
            topics[topic.name] = topic_metadata_from_response(topic)
        self.topics = topics
        self.updated_at = time.monotonic()

    def update_nodes(self, cluster_id: str | None, controller_id: int,
                     nodes: Iterable[Node]) -> None:
        """Take in the nodes a DescribeCluster response names (no topics)."""
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.brokers = {node.id: node for node in nodes}
        self.updated_at = time.monotonic()

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def leader(self, tp: TopicPartition) -> int | None:
        """The leader's node id, None when unknown or leaderless."""
        partition = self.partition(tp)
        if partition is None or partition.leader < 0:
            return None
        return partition.leader

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic.name
        return None


def topic_metadata_from_response(topic: Any) -> TopicMetadata:
    """A `TopicMetadata` from a Metadata (or DescribeTopicPartitions) response topic."""
    partitions = {
        p.partition_index: PartitionMetadata(
            topic=topic.name,
            partition=p.partition_index,
            leader=p.leader_id,
            leader_epoch=p.leader_epoch,
            replicas=tuple(p.replica_nodes),
            isr=tuple(p.isr_nodes),
            offline_replicas=tuple(p.offline_replicas),
            error=ErrorCode.from_code(p.error_code),
        )
        for p in topic.partitions
    }
    return TopicMetadata(
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=partitions,
        error=ErrorCode.from_code(topic.error_code),
    )


class RetryState:
    """Attempt bookkeeping of one call: `backoff(error)` decides whether to retry it."""

    def __init__(self, cluster: Cluster, deadline: Deadline, call_name: str) -> None:
        self.cluster = cluster
        self.deadline = deadline
        self.call_name = call_name
        self.attempts = 0

    async def backoff(self, error: KafkaError) -> None:
        """Return after the backoff when the call should be retried after `error`; raise
        `error` when it is out of retries, or a KafkaTimeoutError when the wait would pass
        the deadline."""
        if self.attempts >= self.cluster.retries:
            raise error
        self.cluster.note_error(error)
        delay_ms = self.cluster.retry_backoff.delay_ms(self.attempts)
        self.attempts += 1
        if self.deadline.remaining_ms() <= delay_ms:
            raise self.timeout_error(error)
        await asyncio.sleep(delay_ms / 1000)

    def timeout_error(self, last_error: KafkaError | None = None) -> KafkaTimeoutError:
        """The error of a call out of time; Kafka's texts (no broker reachable, or not)."""
        if isinstance(last_error, KafkaConnectionError):
            error = KafkaTimeoutError(
                f"Timed out waiting for a node assignment. Call: {self.call_name}")
        else:
            cause = (f" The last error was {last_error.code.name}: {last_error.message}"
                     if last_error else "")
            error = KafkaTimeoutError(f"Call(callName={self.call_name}) timed out after "
                                      f"{self.attempts} attempt(s).{cause}")
        error.__cause__ = last_error
        return error


class Cluster:
    """Connections and metadata for one client. Use inside one event loop."""

    def __init__(self, config: ClientConfig, *, default_client_id: str = "odradek") -> None:
        self.config = config
        self.client_id: str = config["client.id"] or default_client_id
        self.bootstrap_addresses: list[Address] = parse_bootstrap_servers(
            config["bootstrap.servers"])
        #: an admin client given `bootstrap.controllers` (KIP-919): the nodes it knows are the
        #: controllers DescribeCluster names, the controller the active one; no topics.
        self.to_controllers = bool(config.get("bootstrap.controllers"))
        self.request_timeout_ms: int = config["request.timeout.ms"]
        self.security = client_security(config)
        self.default_api_timeout_ms: int = config["default.api.timeout.ms"]
        self.retries: int = config["retries"]
        self.metadata_max_age_ms: int = config["metadata.max.age.ms"]
        self.connections_max_idle_ms: int = config["connections.max.idle.ms"]
        self.retry_backoff = ExponentialBackoff(config["retry.backoff.ms"],
                                                config["retry.backoff.max.ms"])
        self.reconnect_backoff = ExponentialBackoff(config["reconnect.backoff.ms"],
                                                    config["reconnect.backoff.max.ms"])
        self.metadata = MetadataCache()
        self._connections: dict[Address, Connection] = {}
        self._connecting: dict[Address, asyncio.Task[Connection]] = {}
        # address -> (consecutive failures, monotonic time before which we do not retry)
        self._failures: dict[Address, tuple[int, float]] = {}
        self._refreshes: dict[frozenset[str] | None, asyncio.Task[MetadataResponse]] = {}
        self._metadata_stale = True
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()  # idle connections being closed

    # ------------------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        self._closed = True
        for task in [*self._connecting.values(), *self._refreshes.values()]:
            task.cancel()
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), *self._closing,
                             return_exceptions=True)

    def deadline(self, timeout_ms: float | None = None) -> Deadline:
        """A call's deadline: `timeout_ms`, or ``default.api.timeout.ms``."""
        return Deadline(self.default_api_timeout_ms if timeout_ms is None else timeout_ms)

    def request_timeout(self, deadline: Deadline) -> float:
        """The timeout of one request: ``request.timeout.ms``, cut to what the call has left
        (at least 1 ms, so a request is always attempted)."""
        return max(1.0, deadline.cap(self.request_timeout_ms))

    # ------------------------------------------------------------------------------ connections

    def _address_of(self, node_id: int) -> Address:
        node = self.metadata.brokers.get(node_id)
        if node is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE,
                             f"Node {node_id} is not in the cluster metadata")
        return node.host, node.port

    def _node_id_of(self, address: Address) -> int | None:
        for node in self.metadata.brokers.values():
            if (node.host, node.port) == address:
                return node.id
        return None

    async def connection(self, node_id: int, deadline: Deadline | None = None) -> Connection:
        """A ready connection to broker `node_id` (from the metadata)."""
        return await self.connect_to(self._address_of(node_id), deadline)

    async def connect_to(self, address: Address, deadline: Deadline | None = None) -> Connection:
        """A ready connection to `address`, opened if needed; concurrent callers share one
        connect. Raises KafkaConnectionError while the address is in reconnect backoff."""
        if self._closed:
            raise KafkaConnectionError("The client is closed")
        self._close_idle_connections()
        connection = self._connections.get(address)
        if connection is not None and connection.ready:
            return connection
        task = self._connecting.get(address)
        if task is None:
            failures, retry_at = self._failures.get(address, (0, 0.0))
            wait_s = retry_at - time.monotonic()
            if wait_s > 0:
                raise KafkaConnectionError(
                    f"Connection to {address[0]}:{address[1]} is in reconnect backoff for "
                    f"{wait_s * 1000:.0f} ms after {failures} failure(s)")
            timeout_ms = self.config["socket.connection.setup.timeout.ms"]
            if deadline is not None:
                timeout_ms = max(1.0, deadline.cap(timeout_ms))
            task = _shared_task(self._connecting, address, self._open(address, timeout_ms))
        return await asyncio.shield(task)

    async def open_dedicated(self, address: Address, deadline: Deadline | None = None
                             ) -> Connection:
        """A connection of its own to `address`, outside the pool, that the caller closes.
        Kafka's consumer talks to its group coordinator this way: a broker answers one
        connection's requests in order, so a heartbeat or JoinGroup must not queue behind the
        long poll of a Fetch to the same broker."""
        if self._closed:
            raise KafkaConnectionError("The client is closed")
        timeout_ms = self.config["socket.connection.setup.timeout.ms"]
        if deadline is not None:
            timeout_ms = max(1.0, deadline.cap(timeout_ms))
        return await self._new_connection(address, timeout_ms)

    async def _new_connection(self, address: Address, timeout_ms: float) -> Connection:
        host, port = address
        return await Connection.open(
            host, port,
            node_id=self._node_id_of(address),
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=timeout_ms,
            send_buffer_bytes=self.config["send.buffer.bytes"],
            receive_buffer_bytes=self.config["receive.buffer.bytes"],
            ssl_context=self.security.ssl_context,
            sasl=self.security.sasl,
        )

    async def _open(self, address: Address, timeout_ms: float) -> Connection:
        try:
            connection = await self._new_connection(address, timeout_ms)
        except KafkaError:
            failures = self._failures.get(address, (0, 0.0))[0] + 1
            delay_ms = self.reconnect_backoff.delay_ms(failures - 1)
            self._failures[address] = (failures, time.monotonic() + delay_ms / 1000)
            raise
        self._failures.pop(address, None)
        old = self._connections.get(address)
        if old is not None:
            await old.close()
        if self._closed:
            await connection.close()
            raise KafkaConnectionError("The client is closed")
        self._connections[address] = connection
        return connection

    def _close_idle_connections(self) -> None:
        if self.connections_max_idle_ms < 0:
            return
        limit = time.monotonic() - self.connections_max_idle_ms / 1000
        for address, connection in list(self._connections.items()):
            if connection.closed:
                del self._connections[address]
            elif connection.in_flight == 0 and connection.last_used < limit:
                del self._connections[address]
                task = asyncio.get_running_loop().create_task(connection.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    def _candidate_addresses(self) -> list[Address]:
        """Known brokers, least loaded first (ready ones before unopened ones), then the
        bootstrap servers as a fallback when no broker is known or reachable."""
        known = [(node.host, node.port) for node in self.metadata.brokers.values()]
        random.shuffle(known)

        def load(address: Address) -> tuple[int, int]:
            connection = self._connections.get(address)
            if connection is not None and connection.ready:
                return 0, connection.in_flight
            return 1, 0

        known.sort(key=load)
        bootstrap = [a for a in random.sample(self.bootstrap_addresses,
                                              len(self.bootstrap_addresses)) if a not in known]
        return known + bootstrap

    async def any_connection(self, deadline: Deadline | None = None) -> Connection:
        """A ready connection to the least loaded reachable broker (Kafka's leastLoadedNode).
        Raises the last KafkaConnectionError when none can be reached now. With
        `bootstrap.controllers`: the active controller when known (writes are carried out
        there; any controller answers the reads), else the least loaded controller."""
        if self.to_controllers:
            metadata = await self.ensure_metadata(deadline=deadline)
            if metadata.controller_id in metadata.brokers:
                try:
                    return await self.connection(metadata.controller_id, deadline)
                except KafkaConnectionError:
                    self.request_update()
        return await self._least_loaded_connection(deadline)

    async def _least_loaded_connection(self, deadline: Deadline | None = None) -> Connection:
        last_error: KafkaError | None = None
        for address in self._candidate_addresses():
            try:
                return await self.connect_to(address, deadline)
            except KafkaConnectionError as exc:
                last_error = exc
            if deadline is not None and deadline.expired():
                break
        raise last_error or KafkaConnectionError("No broker address to connect to")

    async def send_to_any(self, request: Any, deadline: Deadline, *,
                          raise_error: bool = False) -> Any:
        """`request` to any broker within `deadline`, for the APIs any broker answers (or
        forwards); with `raise_error`, the response's top-level error is raised."""
        connection = await self.any_connection(deadline)
        response = await connection.send(request, timeout_ms=self.request_timeout(deadline))
        if raise_error:
            error = error_from_code(response.error_code, getattr(response, "error_message", None))
            if error is not None:
                raise error
        return response

    # ------------------------------------------------------------------------------ metadata

    def request_update(self) -> None:
        """Mark the metadata stale so the next `ensure_metadata` refreshes it."""
        self._metadata_stale = True

    def note_error(self, error: KafkaError) -> None:
        if error.code in INVALID_METADATA_ERRORS:
            self.request_update()

    async def refresh_metadata(
        self,
        topics: Collection[str] | None = (),
        *,
        allow_auto_topic_creation: bool = False,
        deadline: Deadline | None = None,
    ) -> MetadataResponse:
        """Send one Metadata request to the least loaded broker and update the cache.

        `topics`: names to describe; empty for brokers only; None for every topic. Concurrent
        refreshes of the same topic set share one request. Connection failures raise.
        """
        key = None if topics is None else frozenset(topics)
        task = self._refreshes.get(key)
        if task is None:
            task = _shared_task(self._refreshes, key,
                                self._fetch_metadata(key, allow_auto_topic_creation, deadline))
        return await asyncio.shield(task)

    async def _fetch_metadata(
        self,
        topics: frozenset[str] | None,
        allow_auto_topic_creation: bool,
        deadline: Deadline | None,
    ) -> MetadataResponse:
        deadline = deadline or Deadline(self.request_timeout_ms)
        if self.to_controllers:
            return await self._fetch_controllers(topics, deadline)
        connection = await self.any_connection(deadline)
        # v1+: an empty array means "no topics", null means "all" (v0 could not say "none").
        version = connection.pick_version(METADATA_KEY, min_version=1)
        request = MetadataRequest(
            topics=None if topics is None else [
                MetadataRequest.MetadataRequestTopic(name=name) for name in sorted(topics)
            ],
            allow_auto_topic_creation=allow_auto_topic_creation,
        )
        response: MetadataResponse = await connection.send(
            request, api_version=version, timeout_ms=self.request_timeout(deadline))
        self.metadata.update(response, all_topics=topics is None)
        self._metadata_updated()
        return response

    def _metadata_updated(self) -> None:
        self._metadata_stale = False
        # Connections opened before we knew which node an address is get their id now.
        for address, conn in self._connections.items():
            if conn.node_id is None:
                conn.node_id = self._node_id_of(address)

    async def _fetch_controllers(self, topics: frozenset[str] | None,
                                 deadline: Deadline) -> Any:
        """The controllers' metadata (DescribeCluster of controller endpoints), as Kafka's
        admin client learns it with `bootstrap.controllers`; controllers serve no Metadata,
        so topics cannot be asked (Kafka's UnsupportedVersionException)."""
        if topics is None or topics:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             "The node does not support METADATA")
        connection = await self._least_loaded_connection(deadline)
        request = DescribeClusterRequest(endpoint_type=ENDPOINT_TYPE_CONTROLLER)
        response = await connection.send(
            request, api_version=connection.pick_version(DESCRIBE_CLUSTER_KEY, min_version=1),
            timeout_ms=self.request_timeout(deadline))
        error = error_from_code(response.error_code, response.error_message)
        if error is not None:
            raise error
        self.metadata.update_nodes(response.cluster_id, response.controller_id, [
            Node(b.broker_id, b.host, b.port, b.rack) for b in response.brokers])
        self._metadata_updated()
        return response

    def metadata_is_stale(self, topics: Iterable[str] = ()) -> bool:
        return (
            self._metadata_stale
            or self.metadata.age_ms() >= self.metadata_max_age_ms
            or any(topic not in self.metadata.topics for topic in topics)
        )

    async def ensure_metadata(
        self, topics: Collection[str] = (), deadline: Deadline | None = None
    ) -> MetadataCache:
        """The cache, refreshed first when stale, too old or missing one of `topics`."""
        wanted = set(topics)
        if self.metadata_is_stale(wanted):
            await self.refresh_metadata(wanted | set(self.metadata.topics), deadline=deadline)
        return self.metadata

    async def leaders(
        self, partitions: Iterable[TopicPartition], deadline: Deadline
    ) -> dict[TopicPartition, int | KafkaError]:
        """The leader of each partition, or why it has none: UNKNOWN_TOPIC_OR_PARTITION when
        the topic or partition does not exist, LEADER_NOT_AVAILABLE (retriable) when the
        partition is leaderless. Refreshes the metadata when a leader is unknown."""
        wanted = list(dict.fromkeys(partitions))
        topics = {tp.topic for tp in wanted}
        metadata = self.metadata
        if self.metadata_is_stale(topics) or any(metadata.leader(tp) is None for tp in wanted):
            await self.refresh_metadata(topics | set(metadata.topics), deadline=deadline)
        result: dict[TopicPartition, int | KafkaError] = {}
        for tp in wanted:
            topic = metadata.topics.get(tp.topic)
            partition = None if topic is None else topic.partitions.get(tp.partition)
            if topic is not None and topic.error != ErrorCode.NONE:
                result[tp] = KafkaError(topic.error)
            elif partition is None:
                result[tp] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        f"Partition {tp} does not exist")
            elif partition.leader < 0:
                result[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE,
                                        f"Partition {tp} has no leader")
            else:
                result[tp] = partition.leader
        return result

    # ------------------------------------------------------------------------------ calls

    async def call(
        self,
        call_name: str,
        attempt: Callable[[Deadline], Awaitable[T]],
        *,
        timeout_ms: float | None = None,
        retriable: Callable[[KafkaError], bool] | None = None,
    ) -> T:
        """Run `attempt(deadline)` until it returns, retrying retriable KafkaErrors (all
        retriable ones unless `retriable` says otherwise) with backoff until the deadline."""
        deadline = self.deadline(timeout_ms)
        state = RetryState(self, deadline, call_name)
        is_retriable = retriable or (lambda err: err.retriable)
        while True:
            try:
                return await attempt(deadline)
            except KafkaError as error:
                if not is_retriable(error):
                    raise
                await state.backoff(error)
