"""Consumer group calls of the admin client (Kafka's Admin consumer-group API).

`GroupAdmin` is mixed into `AdminClient`; it uses only the client's `Cluster`:

    async with AdminClient({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
        groups = await admin.list_groups()
        described = await admin.describe_groups(["my-group"])
        offsets = await admin.list_consumer_group_offsets("my-group")

Each call finds the group's coordinator (FindCoordinator) and sends it the request; the
coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS)
and lost connections are retried, finding the coordinator again, until the call's timeout.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from odradek.client.cluster import Cluster
from odradek.client.connection import Connection
from odradek.client.errors import error_from_code, raise_for
from odradek.client.offset_fetch import committed_offsets, offset_fetch_request
from odradek.client.retry import Deadline
from odradek.client.subscription import OffsetAndMetadata
from odradek.client.types import Node, TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError, ErrorCode, KafkaError
from odradek.protocol.primitives import Reader

__all__ = [
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "OffsetAndMetadata",
    "decode_assignment",
    "group_state",
]

T = TypeVar("T")

_FIND_COORDINATOR, _LIST_GROUPS = 10, 16
_FIND_COORDINATOR_BATCHED = 4  # FindCoordinator v4+ takes a list of keys
_COORDINATOR_TYPE_GROUP = 0
_AUTHORIZED_OPERATIONS_OMITTED = -2147483648


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None  # ListGroups v4+
    type: str | None = None  # ListGroups v5+

    @property
    def is_simple_consumer_group(self) -> bool:
        return not self.protocol_type


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    #: the partitions of a consumer group member's assignment (empty for other protocols)
    assignment: tuple[TopicPartition, ...] = ()
    metadata: bytes = b""
    assignment_bytes: bytes = b""
    #: consumer (KIP-848) groups only: the member's epoch, its target assignment, and
    #: whether it speaks the consumer protocol (False: a classic member in the group)
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] = ()
    upgraded: bool | None = None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    #: the chosen protocol: for consumers, the partition assignment strategy
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: Node
    authorized_operations: int | None = None
    #: "consumer" for a KIP-848 group (described by ConsumerGroupDescribe), else "classic"
    type: str = "classic"
    #: consumer groups only
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None

    @property
    def is_simple_consumer_group(self) -> bool:
        return not self.protocol_type


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a ConsumerProtocolAssignment (empty when `data` is not one).
    Versions newer than ours are read with our newest schema: they only append fields."""
    cls = m.ConsumerProtocolAssignment
    if len(data) < 2:
        return ()
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < cls.MIN_VERSION:
        return ()
    reader = Reader(data, 2)
    try:
        assignment = cls.read(reader, min(version, cls.MAX_VERSION))
    except DecodeError:
        return ()
    return tuple(TopicPartition(tp.topic, index)
                 for tp in assignment.assigned_partitions for index in tp.partitions)


@dataclass
class _Coordinator:
    node: Node
    connection: Connection
    deadline: Deadline = field(repr=False)


class GroupAdmin:
    """The consumer-group half of `AdminClient` (needs `self.cluster`)."""

    cluster: Cluster

    # ------------------------------------------------------------------------------ machinery

    async def _find_coordinator(self, group_id: str, deadline: Deadline) -> Node:
        connection = await self.cluster.any_connection(deadline)
        version = connection.pick_version(_FIND_COORDINATOR)
        if version >= _FIND_COORDINATOR_BATCHED:
            request = m.FindCoordinatorRequest(key_type=_COORDINATOR_TYPE_GROUP,
                                               coordinator_keys=[group_id])
        else:
            request = m.FindCoordinatorRequest(key=group_id, key_type=_COORDINATOR_TYPE_GROUP)
        response = await connection.send(request, api_version=version,
                                         timeout_ms=self.cluster.request_timeout(deadline))
        if version >= _FIND_COORDINATOR_BATCHED:
            (found,) = response.coordinators
            raise_for(found.error_code, found.error_message)
            return Node(found.node_id, found.host, found.port)
        raise_for(response.error_code, response.error_message)
        return Node(response.node_id, response.host, response.port)

    async def _with_coordinator(self, call_name: str, group_id: str,
                                send: Callable[[_Coordinator], Awaitable[T]],
                                timeout_ms: float | None) -> T:
        """Runs `send` against the group's coordinator, retrying retriable errors (a moved or
        loading coordinator, a lost connection) with backoff until the deadline."""

        async def attempt(deadline: Deadline) -> T:
            node = await self._find_coordinator(group_id, deadline)
            connection = await self.cluster.connect_to((node.host, node.port), deadline)
            return await send(_Coordinator(node, connection, deadline))

        return await self.cluster.call(call_name, attempt, timeout_ms=timeout_ms)

    async def _send(self, coordinator: _Coordinator, request: m.Message,
                    min_version: int | None = None) -> Any:
        connection = coordinator.connection
        version = connection.pick_version(request.API_KEY,  # type: ignore[arg-type]
                                          min_version=min_version)
        return await connection.send(request, api_version=version,
                                     timeout_ms=self.cluster.request_timeout(coordinator.deadline))

    # ------------------------------------------------------------------------------ calls

    async def find_coordinator(self, group_id: str, *, timeout_ms: float | None = None) -> Node:
        """The broker coordinating `group_id`."""
        return await self.cluster.call(
            "findCoordinator", lambda deadline: self._find_coordinator(group_id, deadline),
            timeout_ms=timeout_ms)

    async def list_groups(self, *, states: Iterable[str] | None = None,
                          types: Iterable[str] | None = None,
                          timeout_ms: float | None = None) -> list[GroupListing]:
        """Every group of every broker (`states`/`types` filter them; they need ListGroups
        v4/v5)."""
        states_filter = list(states or ())
        types_filter = list(types or ())
        min_version = 5 if types_filter else 4 if states_filter else None

        async def from_broker(node_id: int, deadline: Deadline) -> list[GroupListing]:
            connection = await self.cluster.connection(node_id, deadline)
            version = connection.pick_version(_LIST_GROUPS, min_version=min_version)
            response = await connection.send(
                m.ListGroupsRequest(states_filter=states_filter, types_filter=types_filter),
                api_version=version, timeout_ms=self.cluster.request_timeout(deadline))
            raise_for(response.error_code)
            return [GroupListing(g.group_id, g.protocol_type,
                                 g.group_state if version >= 4 else None,
                                 g.group_type if version >= 5 else None)
                    for g in response.groups]

        async def attempt(deadline: Deadline) -> list[GroupListing]:
            metadata = await self.cluster.ensure_metadata(deadline=deadline)
            listings = await asyncio.gather(*(from_broker(node_id, deadline)
                                              for node_id in sorted(metadata.brokers)))
            return sorted((g for broker in listings for g in broker), key=lambda g: g.group_id)

        return await self.cluster.call("listGroups", attempt, timeout_ms=timeout_ms)

    async def describe_groups(self, group_ids: Iterable[str], *,
                              include_authorized_operations: bool = False,
                              timeout_ms: float | None = None,
                              raise_errors: bool = True,
                              ) -> dict[str, GroupDescription | KafkaError]:
        """State, protocol and members of each group. A group that does not exist is a
        GROUP_ID_NOT_FOUND error ("Group G not found."), as Kafka 4.0's admin client reports
        DescribeGroups v6's answer; a broker before Kafka 4.0 describes it in state "Dead"."""

        async def describe(group_id: str) -> GroupDescription:
            async def send(coordinator: _Coordinator) -> GroupDescription:
                # As Kafka 4.0's admin client: ConsumerGroupDescribe first; a classic group
                # (GROUP_ID_NOT_FOUND) or an older broker falls back to DescribeGroups.
                not_found_message = None
                if m.ConsumerGroupDescribeRequest.API_KEY in coordinator.connection.api_versions:
                    response = await self._send(coordinator, m.ConsumerGroupDescribeRequest(
                        group_ids=[group_id],
                        include_authorized_operations=include_authorized_operations))
                    (described,) = response.groups
                    if described.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
                        raise_for(described.error_code, described.error_message)
                        return _consumer_group_description(described, coordinator.node)
                    not_found_message = described.error_message
                response = await self._send(coordinator, m.DescribeGroupsRequest(
                    groups=[group_id],
                    include_authorized_operations=include_authorized_operations))
                (group,) = response.groups
                if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                    # Kafka's DescribeConsumerGroupsHandler keeps ConsumerGroupDescribe's
                    # message, the more telling of the two.
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     not_found_message or group.error_message or None)
                raise_for(group.error_code, group.error_message)
                return _group_description(group, coordinator.node)

            return await self._with_coordinator("describeConsumerGroups", group_id, send,
                                                timeout_ms)

        return await _each(list(dict.fromkeys(group_ids)), describe, raise_errors)

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, *,
        require_stable: bool = False, timeout_ms: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of the group (of `partitions` only, when given); partitions
        without a committed offset are left out."""
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def send(coordinator: _Coordinator) -> dict[TopicPartition, OffsetAndMetadata]:
            topics: dict[str, list[int]] | None = None
            if wanted is not None:
                topics = defaultdict(list)
                for tp in wanted:
                    topics[tp.topic].append(tp.partition)
            version = coordinator.connection.pick_version(m.OffsetFetchRequest.API_KEY,
                                                          min_version=2)
            request = offset_fetch_request(group_id, topics, require_stable, version)
            response = await coordinator.connection.send(
                request, api_version=version,
                timeout_ms=self.cluster.request_timeout(coordinator.deadline))
            return committed_offsets(response, version)

        return await self._with_coordinator("listConsumerGroupOffsets", group_id, send,
                                            timeout_ms)

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], *,
        timeout_ms: float | None = None, raise_errors: bool = True,
    ) -> dict[TopicPartition, None | KafkaError]:
        """Commit `offsets` for the group as a tool does: outside the group (generation -1),
        which the coordinator accepts only while the group has no members."""
        wanted = {TopicPartition(*tp): value if isinstance(value, OffsetAndMetadata)
                  else OffsetAndMetadata(value) for tp, value in offsets.items()}
        R = m.OffsetCommitRequest

        async def send(coordinator: _Coordinator) -> dict[TopicPartition, None | KafkaError]:
            by_topic: dict[str, list[Any]] = defaultdict(list)
            for tp, offset in wanted.items():
                by_topic[tp.topic].append(R.OffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=offset.offset,
                    committed_leader_epoch=-1 if offset.leader_epoch is None
                    else offset.leader_epoch,
                    committed_metadata=offset.metadata))
            response = await self._send(coordinator, R(
                group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                topics=[R.OffsetCommitRequestTopic(name=name, partitions=parts)
                        for name, parts in by_topic.items()]), min_version=2)
            results: dict[TopicPartition, None | KafkaError] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    error = error_from_code(p.error_code)
                    if error is not None and error.code in _COORDINATOR_ERRORS:
                        raise error  # the whole call goes to the (new) coordinator again
                    results[TopicPartition(topic.name, p.partition_index)] = error
            return results

        results = await self._with_coordinator("alterConsumerGroupOffsets", group_id, send,
                                               timeout_ms)
        return _finish(results, raise_errors)

    async def delete_groups(self, group_ids: Iterable[str], *, timeout_ms: float | None = None,
                            raise_errors: bool = True) -> dict[str, None | KafkaError]:
        """Delete groups (only groups without members; NON_EMPTY_GROUP otherwise) with their
        committed offsets."""

        async def delete(group_id: str) -> None:
            async def send(coordinator: _Coordinator) -> None:
                response = await self._send(coordinator,
                                            m.DeleteGroupsRequest(groups_names=[group_id]))
                (result,) = response.results
                raise_for(result.error_code)

            await self._with_coordinator("deleteConsumerGroups", group_id, send, timeout_ms)

        return await _each(list(dict.fromkeys(group_ids)), delete, raise_errors)

    async def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *,
        timeout_ms: float | None = None, raise_errors: bool = True,
    ) -> dict[TopicPartition, None | KafkaError]:
        """Delete the group's committed offsets of `partitions` (OffsetDelete). A group-level
        failure (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...) raises."""
        wanted = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        R = m.OffsetDeleteRequest

        async def send(coordinator: _Coordinator) -> dict[TopicPartition, None | KafkaError]:
            by_topic: dict[str, list[Any]] = defaultdict(list)
            for tp in wanted:
                by_topic[tp.topic].append(R.OffsetDeleteRequestPartition(
                    partition_index=tp.partition))
            response = await self._send(coordinator, R(group_id=group_id, topics=[
                R.OffsetDeleteRequestTopic(name=name, partitions=parts)
                for name, parts in by_topic.items()]))
            raise_for(response.error_code)
            return {TopicPartition(topic.name, p.partition_index): error_from_code(p.error_code)
                    for topic in response.topics for p in topic.partitions}

        results = await self._with_coordinator("deleteConsumerGroupOffsets", group_id, send,
                                               timeout_ms)
        return _finish(results, raise_errors)


_COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


async def _each(keys: list[str], call: Callable[[str], Awaitable[Any]],
                raise_errors: bool) -> dict[str, Any]:
    """`call` for each key concurrently; failures become values unless `raise_errors`."""
    outcomes = await asyncio.gather(*(call(key) for key in keys), return_exceptions=True)
    results: dict[str, Any] = {}
    for key, outcome in zip(keys, outcomes):
        if isinstance(outcome, BaseException) and not isinstance(outcome, KafkaError):
            raise outcome
        results[key] = outcome
    return _finish(results, raise_errors)


def _finish(results: dict[Any, Any], raise_errors: bool) -> dict[Any, Any]:
    if raise_errors:
        for value in results.values():
            if isinstance(value, KafkaError):
                raise value
    return results


def group_state(described: GroupDescription | KafkaError) -> str:
    """The state of a `describe_groups(..., raise_errors=False)` result: "Dead" for a group
    that does not exist (GROUP_ID_NOT_FOUND, which Kafka 4.0's tools treat as an inactive
    group); any other error is raised."""
    if isinstance(described, KafkaError):
        if described.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise described
        return "Dead"
    return described.state


def _consumer_group_description(group: Any, coordinator: Node) -> GroupDescription:
    """A KIP-848 group from ConsumerGroupDescribe (Kafka's ConsumerGroupDescription: the
    protocol is the server assignor's name)."""
    def partitions(assignment: Any) -> tuple[TopicPartition, ...]:
        return tuple(TopicPartition(tp.topic_name, p)
                     for tp in assignment.topic_partitions for p in tp.partitions)

    members = tuple(
        MemberDescription(
            member_id=member.member_id, group_instance_id=member.instance_id,
            client_id=member.client_id, host=member.client_host,
            assignment=partitions(member.assignment),
            member_epoch=member.member_epoch,
            target_assignment=partitions(member.target_assignment),
            upgraded=member.member_type == _CONSUMER_MEMBER_TYPE
            if member.member_type >= 0 else None)
        for member in group.members)
    operations = group.authorized_operations
    return GroupDescription(
        group_id=group.group_id, state=group.group_state, protocol_type="consumer",
        protocol=group.assignor_name, members=members, coordinator=coordinator,
        authorized_operations=None if operations == _AUTHORIZED_OPERATIONS_OMITTED
        else operations, type="consumer", group_epoch=group.group_epoch,
        target_assignment_epoch=group.assignment_epoch)


#: ConsumerGroupDescribe v1's MemberType: 0 classic, 1 consumer (-1 unknown)
_CONSUMER_MEMBER_TYPE = 1


def _group_description(group: Any, coordinator: Node) -> GroupDescription:
    consumer = group.protocol_type in ("consumer", "")
    members = tuple(
        MemberDescription(
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            client_id=member.client_id,
            host=member.client_host,
            assignment=decode_assignment(bytes(member.member_assignment)) if consumer else (),
            metadata=bytes(member.member_metadata),
            assignment_bytes=bytes(member.member_assignment),
        )
        for member in group.members)
    operations = group.authorized_operations
    return GroupDescription(
        group_id=group.group_id, state=group.group_state, protocol_type=group.protocol_type,
        protocol=group.protocol_data, members=members, coordinator=coordinator,
        authorized_operations=None if operations == _AUTHORIZED_OPERATIONS_OMITTED
        else operations)
