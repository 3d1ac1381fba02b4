"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
TxnOffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups.

The handlers translate each wire version to the group coordinator's calls and back; the
coordinator (`odradek.coordinator`) holds the state (`odradek.server.coordinators` wires it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from odradek.controller.features import GROUP_VERSION_FEATURE
from odradek.coordinator import (
    OFFSETS_TOPIC,
    GroupCoordinator,
    JoinRequest,
    OffsetAndMetadata,
    TopicPartition,
)
from odradek.coordinator.consumer_group import freeze
from odradek.coordinator.consumer_group_coordinator import HeartbeatRequest
from odradek.coordinator.transaction_coordinator import TransactionCoordinator
from odradek.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.metadata.cache import MetadataCache
from odradek.metadata.image import MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.transactions import coordinator_node

if TYPE_CHECKING:
    from odradek.server.network import RequestContext

COORDINATOR_TYPE_GROUP = 0
COORDINATOR_TYPE_TRANSACTION = 1
#: TxnOffsetCommit v4+ clients understand TRANSACTION_ABORTABLE (KIP-890)
TRANSACTION_ABORTABLE_TXN_OFFSET_COMMIT_VERSION = 4
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
CLASSIC_GROUP_TYPE = "classic"
#: ConsumerGroupDescribe v1 member_type: 1 = a member of the consumer protocol (0 = classic)
CONSUMER_MEMBER_TYPE = 1
CLASSIC_MEMBER_TYPE = 0


def _offsets_to_commit(image: MetadataImage, topics: Any, now: int, *,
                       with_leader_epoch: bool, expire_timestamp: int = -1,
                       ) -> tuple[dict[TopicPartition, ErrorCode],
                                  dict[TopicPartition, OffsetAndMetadata]]:
    """An (Txn)OffsetCommit request's partitions: the offsets to commit, and the partitions
    refused before the coordinator sees them (UNKNOWN_TOPIC_OR_PARTITION)."""
    errors: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if not _partition_exists(image, tp):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if with_leader_epoch else -1,
                metadata=p.committed_metadata or "",
                commit_timestamp=now,
                expire_timestamp=expire_timestamp)
    return errors, offsets


def _group_allowed(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return ctx.authorize(operation, ResourceType.GROUP, group_id)


def _group_operations(ctx: RequestContext, group_id: str, include: bool) -> int:
    return ctx.authorized_operations(ResourceType.GROUP, group_id) if include \
        else AUTHORIZED_OPERATIONS_OMITTED


def _refuse_unreadable_topics(ctx: RequestContext, topics: Any,
                              errors: dict[TopicPartition, ErrorCode],
                              offsets: dict[TopicPartition, Any]) -> None:
    """Partitions of topics the principal may not READ are refused (TOPIC_AUTHORIZATION_FAILED,
    before whether they exist), and not committed."""
    if ctx.authorizer is None:
        return
    readable = ctx.authorized_names(AclOperation.READ, ResourceType.TOPIC,
                                    (topic.name for topic in topics))
    for topic in topics:
        if topic.name in readable:
            continue
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            offsets.pop(tp, None)
            errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _all_partitions(topics: Any, error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
    return {TopicPartition(topic.name, p.partition_index): error
            for topic in topics for p in topic.partitions}


def _partition_exists(image: MetadataImage, tp: TopicPartition) -> bool:
    topic = image.topics_by_name.get(tp.topic)
    return topic is not None and tp.partition in topic.partitions


def _requested(topics: Iterable[Any] | None) -> list[TopicPartition] | None:
    if topics is None:
        return None
    return [TopicPartition(t.name, index) for t in topics for index in t.partition_indexes]


def _by_topic(offsets: dict[TopicPartition, OffsetAndMetadata | None]) -> dict[str, list]:
    topics: dict[str, list] = defaultdict(list)
    for tp, offset in offsets.items():
        topics[tp.topic].append((tp.partition, offset))
    return topics


class GroupApis:
    """The group APIs, answered by the group coordinator (FindCoordinator from the image)."""

    def __init__(self, coordinator: GroupCoordinator, cache: MetadataCache,
                 ensure_offsets_topic: Callable[[], Awaitable[ErrorCode]], *,
                 transactions: TransactionCoordinator,
                 ensure_transaction_topic: Callable[[], Awaitable[ErrorCode]],
                 consumer_protocol_configured: bool = True) -> None:
        self.coordinator = coordinator
        self.cache = cache
        self.ensure_offsets_topic = ensure_offsets_topic
        self.transactions = transactions
        self.ensure_transaction_topic = ensure_transaction_topic
        #: group.coordinator.rebalance.protocols names `consumer`
        self.consumer_protocol_configured = consumer_protocol_configured

    def consumer_protocol_enabled(self) -> bool:
        """Kafka 4.0's isConsumerGroupProtocolEnabled: the consumer protocol is configured and
        the cluster's group.version is at least 1 (KIP-848 consumer groups)."""
        return self.consumer_protocol_configured and \
            self.cache.image.features.get(GROUP_VERSION_FEATURE, 0) >= 1

    # -- FindCoordinator

    async def _find_coordinator(self, ctx: RequestContext, key_type: int,
                                key: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the coordinator of `key`."""
        no_node = -1, "", -1
        if key_type == COORDINATOR_TYPE_TRANSACTION and not ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, *no_node)
        if key_type == COORDINATOR_TYPE_GROUP and \
                not _group_allowed(ctx, AclOperation.DESCRIBE, key):
            return (ErrorCode.GROUP_AUTHORIZATION_FAILED, *no_node)
        if key_type == COORDINATOR_TYPE_TRANSACTION:
            # The leader of the id's __transaction_state partition (created on first use).
            error = await self.ensure_transaction_topic()
            if error != ErrorCode.NONE:
                return (error, *no_node)
            error, leader = coordinator_node(self.cache.image, TRANSACTION_STATE_TOPIC,
                                             self.transactions.partition_for(key))
        elif key_type == COORDINATOR_TYPE_GROUP:
            error = await self.ensure_offsets_topic()
            if error != ErrorCode.NONE:
                return (error, *no_node)
            error, leader = coordinator_node(self.cache.image, OFFSETS_TOPIC,
                                             self.coordinator.manager.partition_for(key))
        else:
            return (ErrorCode.INVALID_REQUEST, *no_node)
        if error != ErrorCode.NONE:
            return (error, *no_node)
        endpoint = leader.endpoint(ctx.listener)
        if endpoint is None:
            return (ErrorCode.COORDINATOR_NOT_AVAILABLE, *no_node)
        return ErrorCode.NONE, leader.broker_id, endpoint.host, endpoint.port

    async def find_coordinator(self, ctx: RequestContext, req: m.FindCoordinatorRequest):
        version = ctx.api_version
        R = m.FindCoordinatorResponse
        key_type = req.key_type if version >= 1 else COORDINATOR_TYPE_GROUP
        if version < 4:
            error, node_id, host, port = await self._find_coordinator(ctx, key_type, req.key)
            return R(error_code=error, error_message=error.message if error else None,
                     node_id=node_id, host=host, port=port)
        coordinators = []
        for key in req.coordinator_keys:
            error, node_id, host, port = await self._find_coordinator(ctx, key_type, key)
            coordinators.append(R.Coordinator(key=key, node_id=node_id, host=host, port=port,
                                              error_code=error,
                                              error_message=error.message if error else None))
        return R(coordinators=coordinators)

    # -- membership

    async def join_group(self, ctx: RequestContext, req: m.JoinGroupRequest):
        version = ctx.api_version
        R = m.JoinGroupResponse
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                     leader="", member_id="", members=[],
                     protocol_name=None if version >= 7 else "")
        result = await self.coordinator.join_group(JoinRequest(
            group_id=req.group_id,
            member_id=req.member_id,
            group_instance_id=req.group_instance_id if version >= 5 else None,
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_host}",  # Java's InetAddress.toString(), as Kafka reports
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if version >= 1
                                  else req.session_timeout_ms),
            protocol_type=req.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
            reason=req.reason if version >= 8 else None,
        ))
        response = R(
            error_code=result.error,
            generation_id=result.generation_id,
            leader=result.leader_id,
            member_id=result.member_id,
            members=[R.JoinGroupResponseMember(member_id=member_id, group_instance_id=instance_id,
                                               metadata=metadata)
                     for member_id, instance_id, metadata in result.members],
        )
        if version >= 7:
            response.protocol_type = result.protocol_type
            response.protocol_name = result.protocol_name
        else:
            response.protocol_name = result.protocol_name or ""
        if version >= 9:
            response.skip_assignment = result.skip_assignment
        return response

    async def sync_group(self, ctx: RequestContext, req: m.SyncGroupRequest):
        version = ctx.api_version
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            return m.SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                       assignment=b"")
        result = await self.coordinator.sync_group(
            req.group_id, req.generation_id, req.member_id,
            req.group_instance_id if version >= 3 else None,
            req.protocol_type if version >= 5 else None,
            req.protocol_name if version >= 5 else None,
            {a.member_id: bytes(a.assignment) for a in req.assignments})
        response = m.SyncGroupResponse(error_code=result.error, assignment=result.assignment)
        if version >= 5:
            response.protocol_type = result.protocol_type
            response.protocol_name = result.protocol_name
        return response

    def heartbeat(self, ctx: RequestContext, req: m.HeartbeatRequest):
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            return m.HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        error = self.coordinator.heartbeat(
            req.group_id, req.member_id, req.group_instance_id if ctx.api_version >= 3 else None,
            req.generation_id)
        return m.HeartbeatResponse(error_code=error)

    async def leave_group(self, ctx: RequestContext, req: m.LeaveGroupRequest):
        R = m.LeaveGroupResponse
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
        if ctx.api_version < 3:
            leaving = [(req.member_id, None)]
            reason = None
        else:
            leaving = [(member.member_id, member.group_instance_id) for member in req.members]
            reasons = {member.reason for member in req.members if member.reason}
            reason = ", ".join(sorted(reasons)) or None
        error, member_errors = await self.coordinator.leave_group_members(req.group_id,
                                                                          leaving, reason)
        if ctx.api_version < 3:
            return R(error_code=error if error != ErrorCode.NONE else member_errors[0])
        return R(error_code=error, members=[
            R.MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=code)
            for (member_id, instance_id), code in zip(leaving, member_errors)])

    # -- offsets

    async def offset_commit(self, ctx: RequestContext, req: m.OffsetCommitRequest):
        version = ctx.api_version
        R = m.OffsetCommitResponse
        coordinator = self.coordinator
        now = coordinator.time_ms()
        retention_ms = req.retention_time_ms if 2 <= version <= 4 else -1
        errors, offsets = _offsets_to_commit(
            self.cache.image, req.topics, now, with_leader_epoch=version >= 6,
            expire_timestamp=now + retention_ms if retention_ms != -1 else -1)
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            errors, offsets = _all_partitions(req.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED), {}
        else:
            _refuse_unreadable_topics(ctx, req.topics, errors, offsets)
        if offsets:
            errors.update(await coordinator.commit_offsets(
                req.group_id,
                req.member_id if version >= 1 else "",
                req.group_instance_id if version >= 7 else None,
                req.generation_id_or_member_epoch if version >= 1 else -1,
                offsets, api_version=version))
        return R(topics=[
            R.OffsetCommitResponseTopic(name=topic.name, partitions=[
                R.OffsetCommitResponsePartition(
                    partition_index=p.partition_index,
                    error_code=errors[TopicPartition(topic.name, p.partition_index)])
                for p in topic.partitions])
            for topic in req.topics])

    async def txn_offset_commit(self, ctx: RequestContext, req: m.TxnOffsetCommitRequest):
        """TxnOffsetCommit (v0-5): the offsets join the producer's transaction; v3+ name the
        member and generation of a consumer in a group (KIP-447), checked as OffsetCommit
        does."""
        version = ctx.api_version
        R = m.TxnOffsetCommitResponse
        coordinator = self.coordinator
        errors, offsets = _offsets_to_commit(self.cache.image, req.topics,
                                             coordinator.time_ms(), with_leader_epoch=version >= 2)
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                             req.transactional_id):
            errors, offsets = _all_partitions(
                req.topics, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), {}
        elif not _group_allowed(ctx, AclOperation.READ, req.group_id):
            errors, offsets = _all_partitions(req.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED), {}
        else:
            _refuse_unreadable_topics(ctx, req.topics, errors, offsets)
        if offsets:
            committed = await coordinator.txn_offset_commit(
                req.group_id, req.transactional_id, req.producer_id, req.producer_epoch,
                req.member_id if version >= 3 else "",
                req.generation_id if version >= 3 else -1,
                req.group_instance_id if version >= 3 else None,
                offsets)
            if version < TRANSACTION_ABORTABLE_TXN_OFFSET_COMMIT_VERSION:
                # Kafka's AddPartitionsToTxnManager maps the refusal back for clients that
                # do not know TRANSACTION_ABORTABLE.
                committed = {tp: ErrorCode.INVALID_TXN_STATE
                             if error == ErrorCode.TRANSACTION_ABORTABLE else error
                             for tp, error in committed.items()}
            errors.update(committed)
        return R(topics=[
            R.TxnOffsetCommitResponseTopic(name=topic.name, partitions=[
                R.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index,
                    error_code=errors[TopicPartition(topic.name, p.partition_index)])
                for p in topic.partitions])
            for topic in req.topics])

    def offset_fetch(self, ctx: RequestContext, req: m.OffsetFetchRequest):
        version = ctx.api_version
        R = m.OffsetFetchResponse
        if version >= 8:
            groups_out = []
            for group in req.groups:
                error, offsets, partition_errors = self._fetch(
                    ctx, group.group_id, _requested(group.topics), req.require_stable,
                    group.member_id if version >= 9 else None,
                    group.member_epoch if version >= 9 else -1)
                groups_out.append(R.OffsetFetchResponseGroup(
                    group_id=group.group_id, error_code=error,
                    topics=[R.OffsetFetchResponseTopics(name=name, partitions=[
                        R.OffsetFetchResponsePartitions(
                            partition_index=index,
                            committed_offset=offset.offset if offset else -1,
                            committed_leader_epoch=offset.leader_epoch if offset else -1,
                            metadata=offset.metadata if offset else "",
                            error_code=partition_errors.get(TopicPartition(name, index),
                                                    ErrorCode.NONE))
                        for index, offset in partitions])
                        for name, partitions in _by_topic(offsets).items()]))
            return R(groups=groups_out)
        # v0-1 always name the partitions; v2+ may ask for all (null topics).
        requested = _requested(req.topics if version >= 2 else (req.topics or []))
        error, offsets, partition_errors = self._fetch(ctx, req.group_id, requested,
                                               req.require_stable if version >= 7 else False)
        if error != ErrorCode.NONE:
            if version >= 2:
                return R(error_code=error)
            offsets = dict.fromkeys(requested or [])
        return R(
            error_code=error,
            topics=[R.OffsetFetchResponseTopic(name=name, partitions=[
                R.OffsetFetchResponsePartition(
                    partition_index=index,
                    committed_offset=offset.offset if offset else -1,
                    committed_leader_epoch=offset.leader_epoch if offset else -1,
                    metadata=offset.metadata if offset else "",
                    error_code=partition_errors.get(TopicPartition(name, index),
                                            error if version < 2 else ErrorCode.NONE))
                for index, offset in partitions])
                for name, partitions in _by_topic(offsets).items()],
        )

    def _fetch(self, ctx: RequestContext, group_id: str,
               requested: list[TopicPartition] | None, require_stable: bool,
               member_id: str | None = None, member_epoch: int = -1,
               ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None],
                          dict[TopicPartition, ErrorCode]]:
        """The group's offsets for OffsetFetch, and the partitions that answer an error:
        TOPIC_AUTHORIZATION_FAILED for a named topic the principal may not DESCRIBE (left out
        when all are asked for), UNSTABLE_OFFSET_COMMIT when the request requires stable
        offsets. GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group."""
        if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, {}, {}
        coordinator = self.coordinator
        partition_errors: dict[TopicPartition, ErrorCode] = {}
        if ctx.authorizer is not None and requested is not None:
            described = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                             (tp.topic for tp in requested))
            partition_errors = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
                                for tp in requested if tp.topic not in described}
            requested = [tp for tp in requested if tp not in partition_errors]
        error, offsets = coordinator.fetch_offsets(group_id, requested, require_stable,
                                                   member_id, member_epoch)
        if ctx.authorizer is not None and requested is None:
            described = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                             (tp.topic for tp in offsets))
            offsets = {tp: o for tp, o in offsets.items() if tp.topic in described}
        if error == ErrorCode.NONE and require_stable:
            partition_errors.update(dict.fromkeys(
                coordinator.unstable_partitions(group_id, offsets),
                ErrorCode.UNSTABLE_OFFSET_COMMIT))
        if partition_errors and error == ErrorCode.NONE:
            offsets = {**offsets, **dict.fromkeys(
                (tp for tp in partition_errors if tp not in offsets), None)}
        return error, offsets, partition_errors

    async def offset_delete(self, ctx: RequestContext, req: m.OffsetDeleteRequest):
        R = m.OffsetDeleteResponse
        if not _group_allowed(ctx, AclOperation.DELETE, req.group_id):
            return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        image = self.cache.image
        errors: dict[TopicPartition, ErrorCode] = {}
        wanted = []
        readable = ctx.authorized_names(AclOperation.READ, ResourceType.TOPIC,
                                        (topic.name for topic in req.topics))
        for topic in req.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if topic.name not in readable:
                    errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif _partition_exists(image, tp):
                    wanted.append(tp)
                else:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        error, deleted = await self.coordinator.delete_offsets(req.group_id, wanted)
        if error != ErrorCode.NONE:
            return R(error_code=error)
        errors.update(deleted)
        return R(error_code=ErrorCode.NONE, topics=[
            R.OffsetDeleteResponseTopic(name=topic.name, partitions=[
                R.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index,
                    error_code=errors[TopicPartition(topic.name, p.partition_index)])
                for p in topic.partitions])
            for topic in req.topics])

    # -- admin

    def describe_groups(self, ctx: RequestContext, req: m.DescribeGroupsRequest):
        R = m.DescribeGroupsResponse
        include_operations = ctx.api_version >= 3 and req.include_authorized_operations
        out = []
        for group_id in req.groups:
            if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
                out.append(R.DescribedGroup(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id,
                    group_state="", protocol_type="", protocol_data="", members=[]))
                continue
            error, summary = self.coordinator.describe_group(group_id)
            missing = (self.coordinator.classic_group_missing(group_id)
                       if error == ErrorCode.NONE and ctx.api_version >= 6 else None)
            if missing is not None:
                # Kafka 4.0 (KIP-1043): v6 tells an absent group and a consumer-protocol group
                # apart from an empty classic one; older versions see both as Dead.
                out.append(R.DescribedGroup(
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=missing,
                    group_id=group_id, group_state="", protocol_type="", protocol_data="",
                    members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
            out.append(R.DescribedGroup(
                error_code=error, group_id=group_id, group_state=summary.state,
                protocol_type=summary.protocol_type, protocol_data=summary.protocol,
                members=[R.DescribedGroupMember(
                    member_id=member.member_id, group_instance_id=member.group_instance_id,
                    client_id=member.client_id, client_host=member.client_host,
                    member_metadata=member.metadata, member_assignment=member.assignment)
                    for member in summary.members],
                authorized_operations=_group_operations(ctx, group_id, include_operations)))
        return R(groups=out)

    def list_groups(self, ctx: RequestContext, req: m.ListGroupsRequest):
        R = m.ListGroupsResponse
        version = ctx.api_version
        states = req.states_filter if version >= 4 else []
        types = {t.lower() for t in req.types_filter} if version >= 5 else set()
        error, groups = self.coordinator.list_groups(states)
        if types:
            groups = [group for group in groups if group.group_type in types]
        if not ctx.authorize_cluster(AclOperation.DESCRIBE):  # else: the groups it may see
            groups = [group for group in groups
                      if _group_allowed(ctx, AclOperation.DESCRIBE, group.group_id)]
        return R(error_code=error, groups=[
            R.ListedGroup(group_id=group.group_id, protocol_type=group.protocol_type,
                          group_state=group.state, group_type=group.group_type)
            for group in groups])

    # -- KIP-848 consumer groups

    async def consumer_group_heartbeat(self, ctx: RequestContext,
                                       req: m.ConsumerGroupHeartbeatRequest):
        R = m.ConsumerGroupHeartbeatResponse
        if not self.consumer_protocol_enabled():
            # Non-retriable: the client gives up on the consumer protocol at once.
            return R(error_code=ErrorCode.UNSUPPORTED_VERSION,
                     error_message=ErrorCode.UNSUPPORTED_VERSION.message, member_epoch=-1)
        if not _group_allowed(ctx, AclOperation.READ, req.group_id):
            return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, member_epoch=-1)
        if req.subscribed_topic_names and len(ctx.authorized_names(
                AclOperation.DESCRIBE, ResourceType.TOPIC, req.subscribed_topic_names)) < \
                len(set(req.subscribed_topic_names)):
            # Clients may not learn of topics they may not DESCRIBE.
            return R(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, member_epoch=-1)
        owned = None if req.topic_partitions is None else freeze(
            {tp.topic_id: tp.partitions for tp in req.topic_partitions})
        result = await self.coordinator.consumer_groups.heartbeat(HeartbeatRequest(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
            instance_id=req.instance_id, rack_id=req.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=req.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex if ctx.api_version >= 1 else None,
            server_assignor=req.server_assignor, owned=owned,
            client_id=ctx.client_id or "", client_host=f"/{ctx.client_host}",
            version=ctx.api_version))
        response = R(error_code=result.error, error_message=result.error_message,
                     member_id=result.member_id, member_epoch=result.member_epoch,
                     heartbeat_interval_ms=result.heartbeat_interval_ms)
        if result.error == ErrorCode.NONE and result.assignment is not None:
            response.assignment = R.Assignment(topic_partitions=[
                R.TopicPartitions(topic_id=topic_id, partitions=sorted(parts))
                for topic_id, parts in sorted(result.assignment.items(),
                                              key=lambda item: str(item[0]))])
        return response

    def consumer_group_describe(self, ctx: RequestContext, req: m.ConsumerGroupDescribeRequest):
        R = m.ConsumerGroupDescribeResponse
        image = self.cache.image
        if not self.consumer_protocol_enabled():
            return R(groups=[R.DescribedGroup(
                error_code=ErrorCode.UNSUPPORTED_VERSION, group_id=group_id, group_state="",
                assignor_name="", members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
                for group_id in req.group_ids])

        def assignment(parts: Any) -> Any:
            topics = []
            for topic_id, partitions in sorted(parts.items(), key=lambda item: str(item[0])):
                topic = image.topics_by_id.get(topic_id)
                topics.append(R.TopicPartitions(
                    topic_id=topic_id, topic_name=topic.name if topic is not None else "",
                    partitions=sorted(partitions)))
            return R.Assignment(topic_partitions=topics)

        include_operations = req.include_authorized_operations
        out = []
        allowed = [g for g in req.group_ids if _group_allowed(ctx, AclOperation.DESCRIBE, g)]
        for group_id in req.group_ids:
            if group_id not in allowed:
                out.append(R.DescribedGroup(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id,
                    group_state="", assignor_name="", members=[],
                    authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        for described in self.coordinator.consumer_groups.describe(allowed):
            out.append(R.DescribedGroup(
                error_code=described.error, error_message=described.error_message,
                group_id=described.group_id, group_state=described.state,
                group_epoch=described.group_epoch, assignment_epoch=described.assignment_epoch,
                assignor_name=described.assignor,
                members=[R.Member(
                    member_id=d.member.member_id, instance_id=d.member.instance_id,
                    rack_id=d.member.rack_id, member_epoch=d.member.member_epoch,
                    client_id=d.member.client_id, client_host=d.member.client_host,
                    subscribed_topic_names=list(d.member.subscribed_topic_names),
                    subscribed_topic_regex=d.member.subscribed_topic_regex,
                    assignment=assignment(d.member.assigned),
                    target_assignment=assignment(d.target),
                    member_type=CLASSIC_MEMBER_TYPE if d.member.uses_classic
                    else CONSUMER_MEMBER_TYPE)
                    for d in described.members],
                authorized_operations=_group_operations(ctx, described.group_id,
                                                        include_operations)))
        return R(groups=out)

    async def delete_groups(self, ctx: RequestContext, req: m.DeleteGroupsRequest):
        R = m.DeleteGroupsResponse
        allowed = [g for g in req.groups_names if _group_allowed(ctx, AclOperation.DELETE, g)]
        results = await self.coordinator.delete_groups(allowed) if allowed else {}
        results.update({g: ErrorCode.GROUP_AUTHORIZATION_FAILED
                        for g in req.groups_names if g not in results})
        return R(results=[R.DeletableGroupResult(group_id=group_id, error_code=error)
                          for group_id, error in results.items()])
