"""The admin client: `AdminClient` (async) and `Admin` (its blocking facade).

    async with AdminClient({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
        await admin.create_topics([NewTopic("events", num_partitions=3)])

    with Admin({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
        admin.describe_topics(["events"])

Calls that act on several items (topics, resources, partitions) return a dict keyed by item.
An item that failed raises its `KafkaError` (the Kafka error name and the broker's message);
pass ``raise_errors=False`` to get the errors as values instead. Each call retries retriable
failures (lost connections, NOT_CONTROLLER, a moved leader...) with backoff until its
``timeout_ms`` (default ``default.api.timeout.ms``) runs out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import Any, Self, TypeVar

from odradek.client.admin_acls import AclAdmin
from odradek.client.admin_groups import GroupAdmin
from odradek.client.admin_quotas import ClientQuotaAdmin
from odradek.client.admin_scram import ScramAdmin
from odradek.client.admin_transactions import TransactionAdmin
from odradek.client.admin_types import (
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    CreatedTopic,
    DeletedRecords,
    IsolationLevel,
    ListOffsetsResultInfo,
    LogDirDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    PartitionReassignment,
    ReplicaInfo,
    TopicDescription,
    TopicListing,
    TopicPartitionInfo,
)
from odradek.client.cluster import Cluster, RetryState, topic_metadata_from_response
from odradek.client.config import ADMIN_CONFIG, ClientConfig, admin_bootstrap
from odradek.client.connection import Connection
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError, error_from_code
from odradek.client.retry import Deadline
from odradek.client.sync import SyncFacade, blocking
from odradek.client.types import Node, TopicMetadata, TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

__all__ = ["Admin", "AdminClient"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")

_client_ids = itertools.count(1)

# API keys
_LIST_OFFSETS, _METADATA, _CREATE_TOPICS, _DELETE_TOPICS, _DELETE_RECORDS = 2, 3, 19, 20, 21
_DESCRIBE_CONFIGS, _ALTER_CONFIGS, _DESCRIBE_LOG_DIRS, _CREATE_PARTITIONS = 32, 33, 35, 37
_INCREMENTAL_ALTER_CONFIGS, _DESCRIBE_CLUSTER, _DESCRIBE_TOPIC_PARTITIONS = 44, 60, 75
_ALTER_PARTITION_REASSIGNMENTS, _LIST_PARTITION_REASSIGNMENTS = 45, 46

#: Errors worth retrying for calls answered by the controller (any broker forwards them).
_CONTROLLER_RETRY = frozenset({
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.NETWORK_EXCEPTION,
})
#: Errors worth retrying for calls answered by a broker about its own data.
_BROKER_RETRY = _CONTROLLER_RETRY | {ErrorCode.LEADER_NOT_AVAILABLE}
#: Errors worth retrying for calls answered by partition leaders (after a metadata refresh).
_LEADER_RETRY = _BROKER_RETRY | {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # the leader may not know a new topic yet
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE,
}

#: DescribeTopicPartitions' default page size (Kafka's partitionSizeLimitPerResponse)
DEFAULT_PARTITION_LIMIT = 2000


@dataclasses.dataclass(slots=True)
class _Retry:
    """An item outcome meaning "try this item again" (after a backoff)."""

    error: KafkaError


Outcome = Any  # a result, a KafkaError (final) or a _Retry


def _is_transient(error: KafkaError, retry_codes: frozenset[ErrorCode]) -> bool:
    """Whether a failure of a whole attempt should be retried."""
    return isinstance(error, (KafkaConnectionError, KafkaTimeoutError)) or (
        error.code in retry_codes
    )


def _finish(results: dict[K, Any], raise_errors: bool) -> dict[K, Any]:
    if raise_errors:
        for value in results.values():
            if isinstance(value, KafkaError):
                raise value
    return results


class AdminClient(GroupAdmin, TransactionAdmin, ScramAdmin, ClientQuotaAdmin, AclAdmin):
    """Kafka's Admin API over asyncio (the consumer group calls come from `GroupAdmin`, the
    transaction calls from `TransactionAdmin`).
    Connects lazily; `close` (or ``async with``) when done."""

    def __init__(self, config: Mapping[str, Any] | ClientConfig) -> None:
        self.config = config if isinstance(config, ClientConfig) \
            else ADMIN_CONFIG.parse(admin_bootstrap(config))
        self.cluster = Cluster(self.config, default_client_id=f"adminclient-{next(_client_ids)}")

    async def close(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------ machinery

    def _outcome(self, error: KafkaError, retry_codes: frozenset[ErrorCode]) -> Outcome:
        """A per-item error: retried when its code is in `retry_codes`, else final."""
        if error.code in retry_codes:
            self.cluster.note_error(error)
            return _Retry(error)
        return error

    async def _run(
        self,
        call_name: str,
        items: Mapping[K, V],
        attempt: Callable[[dict[K, V], Deadline], Awaitable[dict[K, Outcome]]],
        timeout_ms: float | None,
        retry_codes: frozenset[ErrorCode],
    ) -> dict[K, Any]:
        """Run `attempt` over the pending items until each has a final outcome: a result or
        a KafkaError. Items the attempt marks `_Retry` go again after a backoff; when the
        retries or the deadline run out they get the timeout error."""
        deadline = self.cluster.deadline(timeout_ms)
        state = RetryState(self.cluster, deadline, call_name)
        pending = dict(items)
        results: dict[K, Any] = {}
        while pending:
            try:
                outcomes = await attempt(pending, deadline)
            except KafkaError as error:
                retry = _is_transient(error, retry_codes)
                outcomes = {key: _Retry(error) if retry else error for key in pending}
            retry_items: dict[K, V] = {}
            last_error: KafkaError | None = None
            for key, value in pending.items():
                outcome = outcomes.get(key, _missing_result(key))
                if isinstance(outcome, _Retry):
                    retry_items[key] = value
                    last_error = outcome.error
                else:
                    results[key] = outcome
            if not retry_items:
                break
            assert last_error is not None
            try:
                await state.backoff(last_error)
            except KafkaError as error:
                results.update((key, error) for key in retry_items)
                break
            pending = retry_items
        return {key: results[key] for key in items}

    async def _fan_out(
        self,
        groups: Mapping[Any, list[K]],
        send: Callable[[Any, list[K]], Awaitable[dict[K, Outcome]]],
        retry_codes: frozenset[ErrorCode],
    ) -> dict[K, Outcome]:
        """Send one request per group (e.g. per broker) concurrently; a group whose request
        failed as a whole gives that failure to each of its items."""
        keys = list(groups)
        replies = await asyncio.gather(*(send(key, groups[key]) for key in keys),
                                       return_exceptions=True)
        outcomes: dict[K, Outcome] = {}
        for key, reply in zip(keys, replies):
            if isinstance(reply, KafkaError):
                retry = _is_transient(reply, retry_codes)
                if retry:
                    self.cluster.note_error(reply)
                outcomes.update((item, _Retry(reply) if retry else reply) for item in groups[key])
            elif isinstance(reply, BaseException):
                raise reply
            else:
                outcomes.update(reply)
        return outcomes

    async def _controller(self, deadline: Deadline) -> Connection:
        """A connection to the controller named by the metadata (with KRaft, any broker,
        which forwards); any broker when none is named."""
        metadata = await self.cluster.ensure_metadata(deadline=deadline)
        if metadata.controller_id in metadata.brokers:
            return await self.cluster.connection(metadata.controller_id, deadline)
        return await self.cluster.any_connection(deadline)

    async def _node(self, node_id: int | None, deadline: Deadline) -> Connection:
        if node_id is None:
            return await self.cluster.any_connection(deadline)
        await self.cluster.ensure_metadata(deadline=deadline)
        return await self.cluster.connection(node_id, deadline)

    async def _request(
        self,
        connection: Connection,
        request: m.Message,
        deadline: Deadline,
        *,
        min_version: int | None = None,
    ) -> Any:
        version = connection.pick_version(request.API_KEY, min_version=min_version)  # type: ignore[arg-type]
        return await connection.send(request, api_version=version,
                                     timeout_ms=self.cluster.request_timeout(deadline))

    # ------------------------------------------------------------------------------ topics

    async def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[str, CreatedTopic | KafkaError]:
        """Create topics; with `validate_only` the broker only checks the request."""
        topics = {topic.name: topic for topic in new_topics}

        async def attempt(pending: dict[str, NewTopic], deadline: Deadline) -> dict:
            connection = await self._controller(deadline)
            request_timeout = self.cluster.request_timeout(deadline)
            request = m.CreateTopicsRequest(
                topics=[_creatable_topic(topic) for topic in pending.values()],
                timeout_ms=int(request_timeout),
                validate_only=validate_only,
            )
            response = await self._request(connection, request, deadline,
                                           min_version=1 if validate_only else None)
            outcomes: dict[str, Outcome] = {}
            for result in response.topics:
                error = error_from_code(result.error_code, result.error_message)
                outcomes[result.name] = (
                    self._outcome(error, _CONTROLLER_RETRY) if error else _created_topic(result)
                )
            return outcomes

        results = await self._run("createTopics", topics, attempt, timeout_ms, _CONTROLLER_RETRY)
        return _finish(results, raise_errors)

    async def delete_topics(
        self,
        topics: Iterable[str | uuid.UUID],
        *,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[str | uuid.UUID, None | KafkaError]:
        """Delete topics given by name or by topic id."""
        wanted = {topic: topic for topic in topics}

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            connection = await self._controller(deadline)
            request_timeout = self.cluster.request_timeout(deadline)
            by_id = any(isinstance(topic, uuid.UUID) for topic in pending)
            version = connection.pick_version(_DELETE_TOPICS, min_version=6 if by_id else None)
            request = m.DeleteTopicsRequest(timeout_ms=int(request_timeout))
            if version >= 6:
                request.topics = [
                    m.DeleteTopicsRequest.DeleteTopicState(topic_id=topic)
                    if isinstance(topic, uuid.UUID)
                    else m.DeleteTopicsRequest.DeleteTopicState(name=topic)
                    for topic in pending
                ]
            else:
                request.topic_names = list(pending)
            response = await connection.send(request, api_version=version,
                                             timeout_ms=request_timeout)
            outcomes: dict = {}
            for result in response.responses:
                key = result.name if result.name in pending else result.topic_id
                error = error_from_code(result.error_code, result.error_message)
                outcomes[key] = self._outcome(error, _CONTROLLER_RETRY) if error else None
            return outcomes

        results = await self._run("deleteTopics", wanted, attempt, timeout_ms, _CONTROLLER_RETRY)
        return _finish(results, raise_errors)

    async def list_topics(
        self, *, include_internal: bool = False, timeout_ms: float | None = None
    ) -> dict[str, TopicListing]:
        """Every topic (internal ones like ``__consumer_offsets`` only when asked)."""

        async def attempt(deadline: Deadline) -> m.MetadataResponse:
            return await self.cluster.refresh_metadata(None, deadline=deadline)

        response = await self.cluster.call("listTopics", attempt, timeout_ms=timeout_ms)
        listings = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.NONE or topic.name is None:
                continue
            if topic.is_internal and not include_internal:
                continue
            listings[topic.name] = TopicListing(topic.name, topic.topic_id, topic.is_internal)
        return dict(sorted(listings.items()))

    async def describe_topics(
        self,
        topics: Iterable[str],
        *,
        include_configs: bool = False,
        partition_limit: int = DEFAULT_PARTITION_LIMIT,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[str, TopicDescription | KafkaError]:
        """Partitions (leader, replicas, ISR, ELR), topic id and, with `include_configs`, the
        topic configs. Uses DescribeTopicPartitions (at most `partition_limit` partitions per
        response, paged) when the broker has it, else Metadata (then `elr`/`last_known_elr`
        are None)."""
        wanted = {topic: topic for topic in topics}

        async def attempt(pending: dict[str, str], deadline: Deadline) -> dict:
            connection = await self.cluster.any_connection(deadline)
            if connection.supports(_DESCRIBE_TOPIC_PARTITIONS):
                described = await self._describe_topic_partitions(connection, pending,
                                                                  partition_limit, deadline)
            else:
                described = await self._describe_topics_by_metadata(connection, pending, deadline)
            return {
                name: self._outcome(value, _BROKER_RETRY) if isinstance(value, KafkaError)
                else value
                for name, value in described.items()
            }

        results = await self._run("describeTopics", wanted, attempt, timeout_ms, _BROKER_RETRY)
        if include_configs:
            found = [name for name, value in results.items() if isinstance(value, TopicDescription)]
            configs = await self.describe_configs(
                [ConfigResource.topic(name) for name in found], timeout_ms=timeout_ms,
                raise_errors=False)
            for name in found:
                config = configs[ConfigResource.topic(name)]
                results[name] = (config if isinstance(config, KafkaError)
                                 else dataclasses.replace(results[name], configs=config))
        return _finish(results, raise_errors)

    async def _describe_topic_partitions(
        self, connection: Connection, names: Iterable[str], partition_limit: int,
        deadline: Deadline,
    ) -> dict[str, TopicDescription | KafkaError]:
        request = m.DescribeTopicPartitionsRequest(
            topics=[m.DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in sorted(names)],
            response_partition_limit=partition_limit,
        )
        topics: dict[str, Any] = {}
        partitions: dict[str, list[Any]] = defaultdict(list)
        while True:
            response = await self._request(connection, request, deadline)
            for topic in response.topics:
                topics.setdefault(topic.name, topic)
                partitions[topic.name].extend(topic.partitions)
            cursor = response.next_cursor
            if cursor is None:
                break
            request.cursor = m.DescribeTopicPartitionsRequest.Cursor(
                topic_name=cursor.topic_name, partition_index=cursor.partition_index)
        described: dict[str, TopicDescription | KafkaError] = {}
        for name, topic in topics.items():
            error = error_from_code(topic.error_code)
            if error is not None:
                described[name] = error
                continue
            infos = [
                TopicPartitionInfo(
                    partition=p.partition_index,
                    leader=p.leader_id if p.leader_id >= 0 else None,
                    replicas=tuple(p.replica_nodes),
                    isr=tuple(p.isr_nodes),
                    # Kafka brokers always send these lists; read a null as "none".
                    elr=tuple(p.eligible_leader_replicas or ()),
                    last_known_elr=tuple(p.last_known_elr or ()),
                    leader_epoch=p.leader_epoch,
                    offline_replicas=tuple(p.offline_replicas),
                )
                for p in sorted(partitions[name], key=lambda p: p.partition_index)
            ]
            described[name] = TopicDescription(name, topic.topic_id, topic.is_internal, infos)
        return described

    async def _describe_topics_by_metadata(
        self, connection: Connection, names: Iterable[str], deadline: Deadline
    ) -> dict[str, TopicDescription | KafkaError]:
        request = m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=False,
        )
        response = await self._request(connection, request, deadline, min_version=1)
        described: dict[str, TopicDescription | KafkaError] = {}
        for topic in response.topics:
            error = error_from_code(topic.error_code)
            described[topic.name] = error or _description_from_metadata(
                topic_metadata_from_response(topic))
        return described

    async def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions | int],
        *,
        validate_only: bool = False,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[str, None | KafkaError]:
        """Grow topics to more partitions (``{"t": 6}`` or ``{"t": NewPartitions(6, ...)}``)."""
        wanted = {
            name: spec if isinstance(spec, NewPartitions) else NewPartitions(spec)
            for name, spec in new_partitions.items()
        }

        async def attempt(pending: dict[str, NewPartitions], deadline: Deadline) -> dict:
            connection = await self._controller(deadline)
            request_timeout = self.cluster.request_timeout(deadline)
            request = m.CreatePartitionsRequest(
                topics=[
                    m.CreatePartitionsRequest.CreatePartitionsTopic(
                        name=name,
                        count=spec.total_count,
                        assignments=None if spec.assignments is None else [
                            m.CreatePartitionsRequest.CreatePartitionsAssignment(
                                broker_ids=list(ids))
                            for ids in spec.assignments
                        ],
                    )
                    for name, spec in pending.items()
                ],
                timeout_ms=int(request_timeout),
                validate_only=validate_only,
            )
            response = await self._request(connection, request, deadline)
            outcomes: dict[str, Outcome] = {}
            for result in response.results:
                error = error_from_code(result.error_code, result.error_message)
                outcomes[result.name] = self._outcome(error, _CONTROLLER_RETRY) if error else None
            return outcomes

        results = await self._run("createPartitions", wanted, attempt, timeout_ms,
                                  _CONTROLLER_RETRY)
        return _finish(results, raise_errors)

    # ------------------------------------------------------------------------------ configs

    @staticmethod
    def _config_node(resource: ConfigResource) -> int | None:
        """Broker (and broker logger) configs are answered by that broker; the rest, and the
        cluster-wide broker default (empty name), by any broker."""
        per_broker = (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)
        if resource.type not in per_broker or not resource.name:
            return None
        try:
            return int(resource.name)
        except ValueError:
            raise ValueError(f"Invalid broker id in {resource}") from None

    def _group_by_node(self, resources: Iterable[ConfigResource]) -> dict[int | None, list]:
        groups: dict[int | None, list[ConfigResource]] = defaultdict(list)
        for resource in resources:
            groups[self._config_node(resource)].append(resource)
        return groups

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[ConfigResource, dict[str, ConfigEntry] | KafkaError]:
        """Every config of each resource, with its value, source and flags."""
        wanted = {resource: resource for resource in resources}

        async def send(node_id: int | None, group: list[ConfigResource], deadline: Deadline):
            connection = await self._node(node_id, deadline)
            request = m.DescribeConfigsRequest(
                resources=[
                    m.DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=r.type, resource_name=r.name, configuration_keys=None)
                    for r in group
                ],
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
            response = await self._request(connection, request, deadline)
            outcomes: dict[ConfigResource, Outcome] = {}
            for result in response.results:
                resource = ConfigResource(ConfigResourceType(result.resource_type),
                                          result.resource_name)
                error = error_from_code(result.error_code, result.error_message)
                outcomes[resource] = (self._outcome(error, _BROKER_RETRY) if error
                                      else {c.name: _config_entry(c) for c in result.configs})
            return outcomes

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            return await self._fan_out(self._group_by_node(pending),
                                       lambda node, group: send(node, group, deadline),
                                       _BROKER_RETRY)

        results = await self._run("describeConfigs", wanted, attempt, timeout_ms, _BROKER_RETRY)
        return _finish(results, raise_errors)

    async def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[ConfigResource, None | KafkaError]:
        """Replace each resource's whole set of overrides (the legacy AlterConfigs API: a
        config left out returns to its default)."""
        entries = {
            resource: [
                m.AlterConfigsRequest.AlterableConfig(name=name, value=value)
                for name, value in values.items()
            ]
            for resource, values in configs.items()
        }

        def build(group: list[ConfigResource]) -> m.AlterConfigsRequest:
            return m.AlterConfigsRequest(
                resources=[
                    m.AlterConfigsRequest.AlterConfigsResource(
                        resource_type=r.type, resource_name=r.name, configs=entries[r])
                    for r in group
                ],
                validate_only=validate_only,
            )

        return await self._alter("alterConfigs", entries, build, timeout_ms, raise_errors)

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[ConfigResource, None | KafkaError]:
        """Apply SET/DELETE/APPEND/SUBTRACT operations to configs, leaving others alone."""
        operations = {
            resource: [
                m.IncrementalAlterConfigsRequest.AlterableConfig(
                    name=op.name, config_operation=op.op, value=op.value)
                for op in ops
            ]
            for resource, ops in changes.items()
        }

        def build(group: list[ConfigResource]) -> m.IncrementalAlterConfigsRequest:
            return m.IncrementalAlterConfigsRequest(
                resources=[
                    m.IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=r.type, resource_name=r.name, configs=operations[r])
                    for r in group
                ],
                validate_only=validate_only,
            )

        return await self._alter("incrementalAlterConfigs", operations, build, timeout_ms,
                                 raise_errors)

    async def _alter(
        self,
        call_name: str,
        wanted: Mapping[ConfigResource, Any],
        build: Callable[[list[ConfigResource]], m.Message],
        timeout_ms: float | None,
        raise_errors: bool,
    ) -> dict[ConfigResource, None | KafkaError]:
        """The shared half of alter_configs and incremental_alter_configs."""

        async def send(node_id: int | None, group: list[ConfigResource], deadline: Deadline):
            # With `bootstrap.controllers`, what no one node answers goes to the active
            # controller (Kafka's LeastLoadedBrokerOrActiveKController).
            connection = await (self._controller(deadline) if node_id is None
                                and self.cluster.to_controllers
                                else self._node(node_id, deadline))
            response = await self._request(connection, build(group), deadline)
            outcomes: dict[ConfigResource, Outcome] = {}
            for result in response.responses:
                resource = ConfigResource(ConfigResourceType(result.resource_type),
                                          result.resource_name)
                error = error_from_code(result.error_code, result.error_message)
                outcomes[resource] = self._outcome(error, _CONTROLLER_RETRY) if error else None
            return outcomes

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            return await self._fan_out(self._group_by_node(pending),
                                       lambda node, group: send(node, group, deadline),
                                       _CONTROLLER_RETRY)

        results = await self._run(call_name, wanted, attempt, timeout_ms, _CONTROLLER_RETRY)
        return _finish(results, raise_errors)

    # ------------------------------------------------------------------------------ cluster

    async def describe_cluster(self, *, timeout_ms: float | None = None) -> ClusterDescription:
        """Cluster id, controller and live brokers (DescribeCluster, else Metadata)."""

        async def attempt(deadline: Deadline) -> ClusterDescription:
            connection = await self.cluster.any_connection(deadline)
            if not connection.supports(_DESCRIBE_CLUSTER):
                response = await self.cluster.refresh_metadata((), deadline=deadline)
                nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
                return _cluster_description(response.cluster_id, response.controller_id, nodes)
            if self.cluster.to_controllers:  # the controllers, as the cluster's nodes
                await self.cluster.refresh_metadata((), deadline=deadline)
                metadata = self.cluster.metadata
                return _cluster_description(metadata.cluster_id, metadata.controller_id,
                                            list(metadata.brokers.values()))
            response = await self._request(connection, m.DescribeClusterRequest(), deadline)
            error = error_from_code(response.error_code, response.error_message)
            if error is not None:
                raise error
            nodes = [Node(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
            return _cluster_description(response.cluster_id, response.controller_id, nodes)

        return await self.cluster.call("describeCluster", attempt, timeout_ms=timeout_ms,
                                       retriable=lambda e: _is_transient(e, _BROKER_RETRY))

    async def unregister_broker(self, broker_id: int, *, timeout_ms: float | None = None) -> None:
        """Removes a broker's registration for good (UnregisterBroker, carried out by the active
        controller); BROKER_ID_NOT_REGISTERED when it has none."""

        async def attempt(deadline: Deadline) -> None:
            connection = await self._controller(deadline)
            response = await self._request(
                connection, m.UnregisterBrokerRequest(broker_id=broker_id), deadline)
            error = error_from_code(response.error_code, response.error_message)
            if error is not None:
                raise error

        await self.cluster.call("unregisterBroker", attempt, timeout_ms=timeout_ms,
                                retriable=lambda e: _is_transient(e, _CONTROLLER_RETRY))

    async def list_client_metrics_resources(self, *,
                                            timeout_ms: float | None = None) -> list[str]:
        """The names of the client metrics subscriptions (ListClientMetricsResources)."""

        async def attempt(deadline: Deadline) -> list[str]:
            connection = await self.cluster.any_connection(deadline)
            response = await self._request(connection, m.ListClientMetricsResourcesRequest(),
                                           deadline)
            error = error_from_code(response.error_code, None)
            if error is not None:
                raise error
            return sorted(r.name for r in response.client_metrics_resources)

        return await self.cluster.call("listClientMetricsResources", attempt,
                                       timeout_ms=timeout_ms,
                                       retriable=lambda e: _is_transient(e, _BROKER_RETRY))

    async def describe_log_dirs(
        self,
        broker_ids: Iterable[int] | None = None,
        *,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[int, dict[str, LogDirDescription] | KafkaError]:
        """Each broker's log directories with their replicas (all brokers by default)."""
        if broker_ids is None:
            metadata = await self.cluster.ensure_metadata(
                deadline=self.cluster.deadline(timeout_ms))
            broker_ids = sorted(metadata.brokers)
        wanted = {node_id: node_id for node_id in broker_ids}

        async def send(node_id: int, _group: list[int], deadline: Deadline) -> dict:
            connection = await self._node(node_id, deadline)
            response = await self._request(connection, m.DescribeLogDirsRequest(topics=None),
                                           deadline)
            error = error_from_code(response.error_code)
            if error is not None:
                return {node_id: self._outcome(error, _BROKER_RETRY)}
            return {node_id: {result.log_dir: _log_dir(result) for result in response.results}}

        async def attempt(pending: dict[int, int], deadline: Deadline) -> dict:
            return await self._fan_out({node: [node] for node in pending},
                                       lambda node, group: send(node, group, deadline),
                                       _BROKER_RETRY)

        results = await self._run("describeLogDirs", wanted, attempt, timeout_ms, _BROKER_RETRY)
        return _finish(results, raise_errors)

    # ------------------------------------------------------------------------ reassignments

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Iterable[int] | None],
        *,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[TopicPartition, None | KafkaError]:
        """Start (or change) the reassignment of each partition to its target replicas, or
        cancel it (None): Kafka's Admin.alterPartitionReassignments, answered by the
        controller (any broker forwards it)."""
        wanted = {tp: None if replicas is None else list(replicas)
                  for tp, replicas in reassignments.items()}
        R = m.AlterPartitionReassignmentsRequest

        async def attempt(pending: dict[TopicPartition, list[int] | None],
                          deadline: Deadline) -> dict:
            connection = await self._controller(deadline)
            by_topic: dict[str, list[Any]] = defaultdict(list)
            for tp, replicas in pending.items():
                by_topic[tp.topic].append(R.ReassignablePartition(
                    partition_index=tp.partition, replicas=replicas))
            request = R(timeout_ms=int(self.cluster.request_timeout(deadline)), topics=[
                R.ReassignableTopic(name=topic, partitions=partitions)
                for topic, partitions in by_topic.items()])
            response = await self._request(connection, request, deadline)
            error = error_from_code(response.error_code, response.error_message)
            if error is not None:
                raise error
            outcomes: dict[TopicPartition, Outcome] = {}
            for topic in response.responses:
                for partition in topic.partitions:
                    error = error_from_code(partition.error_code, partition.error_message)
                    outcomes[TopicPartition(topic.name, partition.partition_index)] = (
                        self._outcome(error, _CONTROLLER_RETRY) if error else None)
            return outcomes

        results = await self._run("alterPartitionReassignments", wanted, attempt, timeout_ms,
                                  _CONTROLLER_RETRY)
        return _finish(results, raise_errors)

    async def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The ongoing reassignments (of `partitions`, or all): Kafka's
        Admin.listPartitionReassignments."""
        asked = None if partitions is None else list(dict.fromkeys(partitions))
        R = m.ListPartitionReassignmentsRequest

        async def attempt(deadline: Deadline) -> dict[TopicPartition, PartitionReassignment]:
            connection = await self._controller(deadline)
            topics = None
            if asked is not None:
                by_topic: dict[str, list[int]] = defaultdict(list)
                for tp in asked:
                    by_topic[tp.topic].append(tp.partition)
                topics = [R.ListPartitionReassignmentsTopics(name=name, partition_indexes=ids)
                          for name, ids in by_topic.items()]
            request = R(timeout_ms=int(self.cluster.request_timeout(deadline)), topics=topics)
            response = await self._request(connection, request, deadline)
            error = error_from_code(response.error_code, response.error_message)
            if error is not None:
                raise error
            return {
                TopicPartition(topic.name, p.partition_index): PartitionReassignment(
                    tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
                for topic in response.topics for p in topic.partitions}

        return await self.cluster.call("listPartitionReassignments", attempt,
                                       timeout_ms=timeout_ms,
                                       retriable=lambda e: _is_transient(e, _CONTROLLER_RETRY))

    # ------------------------------------------------------------------------------ offsets

    async def _by_leader(
        self, pending: Iterable[TopicPartition], deadline: Deadline
    ) -> tuple[dict[int, list[TopicPartition]], dict[TopicPartition, Outcome]]:
        """Group partitions by leader; partitions without one get their outcome (unknown
        topic or partition: final; no leader yet: retry)."""
        leaders = await self.cluster.leaders(pending, deadline)
        groups: dict[int, list[TopicPartition]] = defaultdict(list)
        outcomes: dict[TopicPartition, Outcome] = {}
        for tp, leader in leaders.items():
            if isinstance(leader, KafkaError):
                outcomes[tp] = self._outcome(leader, _BROKER_RETRY)
            else:
                groups[leader].append(tp)
        return groups, outcomes

    async def list_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetSpec | int],
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[TopicPartition, ListOffsetsResultInfo | KafkaError]:
        """Look up offsets: earliest, latest, max-timestamp or by timestamp, per partition."""
        wanted = {
            TopicPartition(*tp): spec.timestamp if isinstance(spec, OffsetSpec) else spec
            for tp, spec in offsets.items()
        }

        async def send(leader: int, group: list[TopicPartition], deadline: Deadline) -> dict:
            connection = await self.cluster.connection(leader, deadline)
            timestamps = [wanted[tp] for tp in group]
            min_version = 1
            if isolation_level == IsolationLevel.READ_COMMITTED:
                min_version = 2
            if OffsetSpec.MAX_TIMESTAMP in timestamps:
                min_version = 7
            if OffsetSpec.EARLIEST_LOCAL_TIMESTAMP in timestamps:
                min_version = 8
            by_topic: dict[str, list[Any]] = defaultdict(list)
            for tp in group:
                by_topic[tp.topic].append(m.ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=tp.partition, timestamp=wanted[tp]))
            request = m.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation_level,
                topics=[m.ListOffsetsRequest.ListOffsetsTopic(name=name, partitions=parts)
                        for name, parts in by_topic.items()],
            )
            response = await self._request(connection, request, deadline,
                                           min_version=min_version)
            outcomes: dict[TopicPartition, Outcome] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    error = error_from_code(p.error_code)
                    outcomes[tp] = self._outcome(error, _LEADER_RETRY) if error else \
                        ListOffsetsResultInfo(
                            offset=p.offset,
                            timestamp=p.timestamp,
                            leader_epoch=p.leader_epoch if p.leader_epoch >= 0 else None)
            return outcomes

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            groups, outcomes = await self._by_leader(pending, deadline)
            outcomes.update(await self._fan_out(
                groups, lambda leader, group: send(leader, group, deadline), _LEADER_RETRY))
            return outcomes

        results = await self._run("listOffsets", wanted, attempt, timeout_ms, _LEADER_RETRY)
        return _finish(results, raise_errors)

    async def delete_records(
        self,
        before_offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[TopicPartition, DeletedRecords | KafkaError]:
        """Delete every record before the given offset (-1: the high watermark) of each
        partition; returns the new low watermarks."""
        wanted = {TopicPartition(*tp): offset for tp, offset in before_offsets.items()}

        async def send(leader: int, group: list[TopicPartition], deadline: Deadline) -> dict:
            connection = await self.cluster.connection(leader, deadline)
            by_topic: dict[str, list[Any]] = defaultdict(list)
            for tp in group:
                by_topic[tp.topic].append(m.DeleteRecordsRequest.DeleteRecordsPartition(
                    partition_index=tp.partition, offset=wanted[tp]))
            request = m.DeleteRecordsRequest(
                topics=[m.DeleteRecordsRequest.DeleteRecordsTopic(name=name, partitions=parts)
                        for name, parts in by_topic.items()],
                timeout_ms=int(self.cluster.request_timeout(deadline)),
            )
            response = await self._request(connection, request, deadline)
            outcomes: dict[TopicPartition, Outcome] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    error = error_from_code(p.error_code)
                    outcomes[tp] = self._outcome(error, _LEADER_RETRY) if error else \
                        DeletedRecords(p.low_watermark)
            return outcomes

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            groups, outcomes = await self._by_leader(pending, deadline)
            outcomes.update(await self._fan_out(
                groups, lambda leader, group: send(leader, group, deadline), _LEADER_RETRY))
            return outcomes

        results = await self._run("deleteRecords", wanted, attempt, timeout_ms, _LEADER_RETRY)
        return _finish(results, raise_errors)


# ---------------------------------------------------------------------------------- helpers


def _missing_result(key: Any) -> KafkaError:
    return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"The response had no result for {key}")


def _creatable_topic(topic: NewTopic) -> Any:
    assignment = topic.replica_assignment
    request = m.CreateTopicsRequest
    return request.CreatableTopic(
        name=topic.name,
        num_partitions=-1 if assignment else topic.num_partitions,
        replication_factor=-1 if assignment else topic.replication_factor,
        assignments=[
            request.CreatableReplicaAssignment(partition_index=index, broker_ids=list(brokers))
            for index, brokers in sorted((assignment or {}).items())
        ],
        configs=[request.CreatableTopicConfig(name=name, value=value)
                 for name, value in topic.configs.items()],
    )


def _created_topic(result: Any) -> CreatedTopic:
    configs = {
        c.name: ConfigEntry(
            name=c.name,
            value=c.value,
            source=ConfigSource.from_code(c.config_source),
            is_read_only=c.read_only,
            is_sensitive=c.is_sensitive,
        )
        for c in result.configs or ()
    }
    return CreatedTopic(result.name, result.topic_id, result.num_partitions,
                        result.replication_factor, configs)


def _config_entry(config: Any) -> ConfigEntry:
    source = ConfigSource.from_code(config.config_source)
    return ConfigEntry(
        name=config.name,
        value=config.value,
        source=source,
        is_read_only=config.read_only,
        is_sensitive=config.is_sensitive,
        synonyms=tuple(
            ConfigSynonym(s.name, s.value, ConfigSource.from_code(s.source))
            for s in config.synonyms or ()
        ),
        config_type=ConfigType.from_code(config.config_type),
        documentation=config.documentation,
    )


def _description_from_metadata(topic: TopicMetadata) -> TopicDescription:
    infos = [
        TopicPartitionInfo(
            partition=p.partition,
            leader=p.leader if p.leader >= 0 else None,
            replicas=p.replicas,
            isr=p.isr,
            leader_epoch=p.leader_epoch,
            offline_replicas=p.offline_replicas,
        )
        for _, p in sorted(topic.partitions.items())
    ]
    return TopicDescription(topic.name, topic.topic_id, topic.is_internal, infos)


def _cluster_description(cluster_id: str | None, controller_id: int,
                         nodes: list[Node]) -> ClusterDescription:
    by_id = {node.id: node for node in nodes}
    return ClusterDescription(cluster_id, by_id.get(controller_id), nodes)


def _log_dir(result: Any) -> LogDirDescription:
    replicas = {
        TopicPartition(topic.name, p.partition_index): ReplicaInfo(
            p.partition_size, p.offset_lag, p.is_future_key)
        for topic in result.topics
        for p in topic.partitions
    }
    return LogDirDescription(
        path=result.log_dir,
        error=error_from_code(result.error_code),
        replicas=replicas,
        total_bytes=result.total_bytes if result.total_bytes >= 0 else None,
        usable_bytes=result.usable_bytes if result.usable_bytes >= 0 else None,
    )


# ---------------------------------------------------------------------------------- sync


class Admin(SyncFacade[AdminClient]):
    """The blocking admin client: `AdminClient`'s methods, run on a private event loop
    thread. Use as a context manager, or call `close`."""

    def __init__(self, config: Mapping[str, Any] | ClientConfig) -> None:
        parsed = config if isinstance(config, ClientConfig) \
            else ADMIN_CONFIG.parse(admin_bootstrap(config))
        super().__init__(lambda: AdminClient(parsed), "odradek-admin")

    create_topics = blocking(AdminClient.create_topics)
    delete_topics = blocking(AdminClient.delete_topics)
    list_topics = blocking(AdminClient.list_topics)
    describe_topics = blocking(AdminClient.describe_topics)
    create_partitions = blocking(AdminClient.create_partitions)
    describe_configs = blocking(AdminClient.describe_configs)
    alter_configs = blocking(AdminClient.alter_configs)
    incremental_alter_configs = blocking(AdminClient.incremental_alter_configs)
    describe_cluster = blocking(AdminClient.describe_cluster)
    unregister_broker = blocking(AdminClient.unregister_broker)
    describe_log_dirs = blocking(AdminClient.describe_log_dirs)
    alter_partition_reassignments = blocking(AdminClient.alter_partition_reassignments)
    list_partition_reassignments = blocking(AdminClient.list_partition_reassignments)
    list_offsets = blocking(AdminClient.list_offsets)
    delete_records = blocking(AdminClient.delete_records)
    find_coordinator = blocking(AdminClient.find_coordinator)
    list_groups = blocking(AdminClient.list_groups)
    describe_groups = blocking(AdminClient.describe_groups)
    list_consumer_group_offsets = blocking(AdminClient.list_consumer_group_offsets)
    alter_consumer_group_offsets = blocking(AdminClient.alter_consumer_group_offsets)
    delete_groups = blocking(AdminClient.delete_groups)
    delete_consumer_group_offsets = blocking(AdminClient.delete_consumer_group_offsets)
    describe_producers = blocking(AdminClient.describe_producers)
    describe_transactions = blocking(AdminClient.describe_transactions)
    list_transactions = blocking(AdminClient.list_transactions)
    list_transactions_by_broker = blocking(AdminClient.list_transactions_by_broker)
    abort_transaction = blocking(AdminClient.abort_transaction)
    alter_user_scram_credentials = blocking(AdminClient.alter_user_scram_credentials)
    describe_user_scram_credentials = blocking(AdminClient.describe_user_scram_credentials)
    alter_client_quotas = blocking(AdminClient.alter_client_quotas)
    describe_client_quotas = blocking(AdminClient.describe_client_quotas)
    create_acls = blocking(AdminClient.create_acls)
    describe_acls = blocking(AdminClient.describe_acls)
    delete_acls = blocking(AdminClient.delete_acls)
    end_transaction = blocking(AdminClient.end_transaction)
