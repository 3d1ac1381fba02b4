"""Admin APIs: topics, partitions, configs, delete records, log dirs."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from odradek.config import describe as config_describe
from odradek.config.describe import ConfigEntry
from odradek.controller.controller import TopicSpec
from odradek.controller.features import FeatureUpdate, upgrade_type_of
from odradek.controller.replication_control import ELECTION_PREFERRED
from odradek.metadata.cache import MetadataCache
from odradek.metadata.image import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.controller.quorum_controller import QuorumController
    from odradek.server.network import RequestContext
    from odradek.server.replica_manager import ReplicaManager
    from odradek.storage.config import LogConfig

log = logging.getLogger("odradek.admin")

CLUSTER_DENIED = "Cluster authorization failed."
TOPIC_DENIED = "Topic authorization failed."


def config_resource_denied(ctx: RequestContext, resource_type: int, name: str,
                           operation: AclOperation) -> ErrorCode | None:
    """The error for a config resource the principal may not DESCRIBE_CONFIGS / ALTER_CONFIGS
    (topics: on the topic; groups: on the group; brokers, loggers and client metrics
    subscriptions: on the cluster), or None."""
    if resource_type == RESOURCE_TOPIC:
        return None if ctx.authorize_topic(operation, name) \
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS):
        return None if ctx.authorize_cluster(operation) \
            else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if resource_type == RESOURCE_GROUP:
        return None if ctx.authorize(operation, ResourceType.GROUP, name) \
            else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


class AdminApis:
    """CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
    IncrementalAlterConfigs, DeleteRecords, DescribeLogDirs, ElectLeaders,
    AlterPartitionReassignments, ListPartitionReassignments, UpdateFeatures:
    metadata changes go to the controller, data changes to the replica manager."""

    def __init__(self, *, node_id: int, config: Any, default_log_config: LogConfig,
                 cache: MetadataCache, controller: QuorumController,
                 replica_manager: ReplicaManager) -> None:
        self.node_id = node_id
        self.config = config
        self.default_log_config = default_log_config
        self.cache = cache
        self.controller = controller
        self.replica_manager = replica_manager

    # -- config descriptions (DescribeConfigs, CreateTopics v5+): rendered by odradek.config
    def topic_config_entries(self, topic: str,
                             overrides: Mapping[str, str] | None = None) -> list[ConfigEntry]:
        if overrides is None:
            overrides = self.cache.image.topic_config(topic)
        return config_describe.topic_config_entries(self.config, self.default_log_config,
                                                    overrides)

    def broker_config_entries(self, resource_name: str) -> list[ConfigEntry]:
        image = self.cache.image
        own = image.configs.get((RESOURCE_BROKER, resource_name), {}) if resource_name else None
        return config_describe.broker_config_entries(
            self.config, image.configs.get((RESOURCE_BROKER, ""), {}), own)

    def group_config_entries(self, group_id: str) -> list[ConfigEntry]:
        """A group's configs: its ConfigRecords over the broker's `group.*` values. The group
        need not exist (Kafka describes any name)."""
        return config_describe.group_config_entries(
            self.config.get, self.cache.image.configs.get((RESOURCE_GROUP, group_id), {}))

    async def create_topics(self, ctx: RequestContext, req: m.CreateTopicsRequest):
        version = ctx.api_version
        R = m.CreateTopicsResponse
        specs, seen, duplicates = [], set(), set()
        for t in req.topics:
            if t.name in seen:
                duplicates.add(t.name)
            seen.add(t.name)
        # CREATE on the cluster allows every topic; else CREATE on each topic is needed.
        denied: set[str] = set()
        if not ctx.authorize_cluster(AclOperation.CREATE):
            names = {t.name for t in req.topics}
            denied = names - ctx.authorized_names(AclOperation.CREATE, ResourceType.TOPIC, names)
        for t in req.topics:
            if t.name in duplicates or t.name in denied:
                continue
            specs.append(TopicSpec(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
                configs={c.name: c.value for c in t.configs},
            ))
        results = await self.controller.create_topics(specs, validate_only=req.validate_only)
        out = []
        by_name = dict(zip((s.name for s in specs), results))
        for name in dict.fromkeys(t.name for t in req.topics):
            if name in duplicates:
                out.append(R.CreatableTopicResult(
                    name=name, error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"Duplicate topic name {name} in the request."))
                continue
            if name in denied:
                out.append(R.CreatableTopicResult(
                    name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message=TOPIC_DENIED if version >= 1 else None))
                continue
            res = by_name[name]
            item = R.CreatableTopicResult(name=name, error_code=res.error,
                                          error_message=res.message if version >= 1 else None)
            if res.error == ErrorCode.NONE:
                item.topic_id = res.data["topic_id"]
                item.num_partitions = res.data["num_partitions"]
                item.replication_factor = res.data["replication_factor"]
                if version >= 5 and not ctx.authorize_topic(AclOperation.DESCRIBE_CONFIGS, name):
                    item.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif version >= 5:
                    item.configs = [
                        R.CreatableTopicConfigs(name=e.name, value=e.value,
                                                read_only=e.is_read_only,
                                                config_source=int(e.source),
                                                is_sensitive=e.is_sensitive)
                        for e in self.topic_config_entries(name, res.data["configs"])
                    ]
            out.append(item)
        return R(topics=out)

    async def delete_topics(self, ctx: RequestContext, req: m.DeleteTopicsRequest):
        version = ctx.api_version
        R = m.DeleteTopicsResponse
        if not self.config.get("delete.topic.enable"):
            names = req.topic_names if version < 6 else [t.name for t in req.topics]
            # Versions before 3 predate TOPIC_DELETION_DISABLED: Kafka answers INVALID_REQUEST.
            error = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
            return R(responses=[R.DeletableTopicResult(name=n, error_code=error)
                                for n in names])
        if version < 6:
            items = [(n, None) for n in req.topic_names]
        else:
            items = [(t.name, t.topic_id if t.name is None else None) for t in req.topics]
        names = [n for n, i in items if n is not None]
        ids = [i for n, i in items if n is None]
        image = self.cache.image

        def deletable(name: str | None, topic_id: Any) -> bool:
            """As Kafka's ControllerApis: a topic the principal may not DESCRIBE is refused
            whether or not it exists; one it may describe but not DELETE, if it exists (a
            missing one answers UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID)."""
            if name is None:
                topic = image.topics_by_id.get(topic_id)
                if topic is None:
                    return True  # the controller answers UNKNOWN_TOPIC_ID
                name = topic.name
            if not ctx.authorize_topic(AclOperation.DESCRIBE, name):
                return False
            return name not in image.topics_by_name or \
                ctx.authorize_topic(AclOperation.DELETE, name)

        denied = [(n, None) for n in names if not deletable(n, None)] + \
                 [(None, i) for i in ids if not deletable(None, i)]
        names = [n for n in names if (n, None) not in denied]
        ids = [i for i in ids if (None, i) not in denied]
        results = await self.controller.delete_topics(names, ids) if names or ids else []
        out = []
        for name, topic_id in denied:
            item = R.DeletableTopicResult(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                          error_message=TOPIC_DENIED if version >= 5 else None)
            if topic_id is not None:
                item.topic_id = topic_id
            out.append(item)
        asked = [(n, None) for n in names] + [(None, i) for i in ids]
        for (name, topic_id), res in zip(asked, results):
            item = R.DeletableTopicResult(
                name=res.data.get("name", name), error_code=res.error,
                error_message=res.message if res.error else None)
            item.topic_id = res.data.get("topic_id", topic_id) or item.topic_id
            out.append(item)
        return R(responses=out)

    async def create_partitions(self, ctx: RequestContext, req: m.CreatePartitionsRequest):
        R = m.CreatePartitionsResponse
        out = []
        counts = Counter(t.name for t in req.topics)
        for name in (n for n, count in counts.items() if count > 1):
            out.append(R.CreatePartitionsTopicResult(name=name,
                                                     error_code=ErrorCode.INVALID_REQUEST,
                                                     error_message="Duplicate topic name."))
        for t in req.topics:
            if counts[t.name] > 1:
                continue
            if not ctx.authorize_topic(AclOperation.ALTER, t.name):
                out.append(R.CreatePartitionsTopicResult(
                    name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message=TOPIC_DENIED))
                continue
            assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            res = await self.controller.create_partitions(t.name, t.count, assignments,
                                                          req.validate_only)
            out.append(R.CreatePartitionsTopicResult(name=t.name, error_code=res.error,
                                                     error_message=res.message))
        return R(results=out)

    async def elect_leaders(self, ctx: RequestContext, req: m.ElectLeadersRequest):
        """ElectLeaders: preferred (v0 always) or unclean elections, by the controller."""
        R = m.ElectLeadersResponse
        election_type = req.election_type if ctx.api_version >= 1 else ELECTION_PREFERRED
        asked = (None if req.topic_partitions is None
                 else [(t.topic, list(t.partitions)) for t in req.topic_partitions])
        try:
            if not ctx.authorize_cluster(AclOperation.ALTER):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
            results = await self.controller.elect_leaders(election_type, asked,
                                                          broker_config=self.config)
        except KafkaError as exc:
            # As Kafka's error response: the error at the top (v1+) and for every partition
            # asked.
            return R(error_code=exc.code if ctx.api_version >= 1 else ErrorCode.NONE,
                     replica_election_results=[
                R.ReplicaElectionResult(topic=topic, partition_result=[
                    R.PartitionResult(partition_id=p, error_code=exc.code,
                                      error_message=exc.message) for p in partitions])
                for topic, partitions in asked or ()])
        return R(error_code=ErrorCode.NONE, replica_election_results=[
            R.ReplicaElectionResult(topic=topic, partition_result=[
                R.PartitionResult(partition_id=e.partition_id, error_code=e.error,
                                  error_message=e.message) for e in elections])
            for topic, elections in results])

    async def alter_partition_reassignments(self, ctx: RequestContext,
                                            req: m.AlterPartitionReassignmentsRequest):
        """AlterPartitionReassignments: the controller starts, changes or cancels (replicas
        null) each partition's reassignment; a failure of the whole request (not the active
        controller) is the top-level error, and every partition's (as Kafka's
        getErrorResponse)."""
        R = m.AlterPartitionReassignmentsResponse
        asked = [(t.name, [(p.partition_index,
                            None if p.replicas is None else list(p.replicas))
                           for p in t.partitions]) for t in req.topics]
        try:
            if not ctx.authorize_cluster(AclOperation.ALTER):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
            results = await self.controller.alter_partition_reassignments(asked)
        except KafkaError as exc:
            return R(error_code=exc.code, error_message=exc.message, responses=[
                R.ReassignableTopicResponse(name=name, partitions=[
                    R.ReassignablePartitionResponse(partition_index=p, error_code=exc.code,
                                                    error_message=exc.message)
                    for p, _ in partitions])
                for name, partitions in asked])
        return R(error_code=ErrorCode.NONE, error_message=None, responses=[
            R.ReassignableTopicResponse(name=name, partitions=[
                R.ReassignablePartitionResponse(partition_index=o.partition_id,
                                                error_code=o.error, error_message=o.message)
                for o in outcomes])
            for name, outcomes in results])

    async def list_partition_reassignments(self, ctx: RequestContext,
                                           req: m.ListPartitionReassignmentsRequest):
        """ListPartitionReassignments: the ongoing reassignments (of the partitions asked, or
        of all when `topics` is null), from the active controller."""
        R = m.ListPartitionReassignmentsResponse
        asked = (None if req.topics is None
                 else [(t.name, list(t.partition_indexes)) for t in req.topics])
        try:
            if not ctx.authorize_cluster(AclOperation.DESCRIBE):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
            ongoing = await self.controller.list_partition_reassignments(asked)
        except KafkaError as exc:
            return R(error_code=exc.code, error_message=exc.message, topics=[])
        return R(error_code=ErrorCode.NONE, error_message=None, topics=[
            R.OngoingTopicReassignment(name=name, partitions=[
                R.OngoingPartitionReassignment(
                    partition_index=r.partition_id, replicas=list(r.replicas),
                    adding_replicas=list(r.adding_replicas),
                    removing_replicas=list(r.removing_replicas))
                for r in reassignments])
            for name, reassignments in ongoing])

    async def update_features(self, ctx: RequestContext, req: m.UpdateFeaturesRequest):
        """UpdateFeatures: the controller answers per feature (v0-1; v2 has the first failure
        as its top-level error); a failure of the whole request (not the active controller) is
        the top-level error, with no results (Kafka's UpdateFeaturesResponse.createWithErrors)."""
        R = m.UpdateFeaturesResponse
        version = ctx.api_version
        updates = [FeatureUpdate(u.feature, u.max_version_level,
                                 upgrade_type_of(version, u.allow_downgrade, u.upgrade_type))
                   for u in req.feature_updates]
        try:
            if not ctx.authorize_cluster(AclOperation.ALTER):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
            results = await self.controller.update_features(
                updates, validate_only=version >= 1 and req.validate_only)
        except KafkaError as exc:
            return R(error_code=exc.code, error_message=exc.message, results=[])
        if version >= 2:
            # v2 has no per-feature results (KIP-1022): the first failure is the answer's.
            failed = next((r for r in results.values() if r.error != ErrorCode.NONE), None)
            if failed is not None:
                return R(error_code=failed.error, error_message=failed.message, results=[])
        return R(error_code=ErrorCode.NONE, error_message=None, results=[
            R.UpdatableFeatureResult(feature=name, error_code=result.error,
                                     error_message=result.message)
            for name, result in results.items()])

    def describe_configs(self, ctx: RequestContext, req: m.DescribeConfigsRequest):
        R = m.DescribeConfigsResponse
        results = []
        for res in req.resources:
            out = R.DescribeConfigsResult(resource_type=res.resource_type,
                                          resource_name=res.resource_name, configs=[])
            try:
                denied = config_resource_denied(ctx, res.resource_type, res.resource_name,
                                                AclOperation.DESCRIBE_CONFIGS)
                if denied is not None:
                    raise KafkaError(denied, None)
                if res.resource_type == RESOURCE_TOPIC:
                    if res.resource_name not in self.cache.image.topics_by_name:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"Topic {res.resource_name} does not exist")
                    entries = self.topic_config_entries(res.resource_name)
                elif res.resource_type == RESOURCE_BROKER:
                    if res.resource_name not in ("", str(self.node_id)):
                        raise KafkaError(ErrorCode.INVALID_REQUEST,
                                         f"Unexpected broker id, expected {self.node_id} or empty "
                                         f"string, but received {res.resource_name}")
                    entries = self.broker_config_entries(res.resource_name)
                elif res.resource_type == RESOURCE_BROKER_LOGGER:
                    entries = []
                elif res.resource_type == RESOURCE_CLIENT_METRICS:
                    if not res.resource_name:
                        raise KafkaError(ErrorCode.INVALID_REQUEST,
                                         "Client metrics subscription name must not be empty")
                    entries = config_describe.client_metrics_config_entries(
                        self.cache.image.configs.get(
                            (RESOURCE_CLIENT_METRICS, res.resource_name), {}))
                elif res.resource_type == RESOURCE_GROUP:
                    if not res.resource_name:
                        raise KafkaError(ErrorCode.INVALID_REQUEST,
                                         "Group name must not be empty")
                    entries = self.group_config_entries(res.resource_name)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     f"Unsupported resource type {res.resource_type}")
            except KafkaError as exc:
                out.error_code, out.error_message = exc.code, exc.message
                results.append(out)
                continue
            keys = set(res.configuration_keys) if res.configuration_keys is not None else None
            for e in entries:
                if keys is not None and e.name not in keys:
                    continue
                item = R.DescribeConfigsResourceResult(
                    name=e.name, value=None if e.is_sensitive else e.value,
                    read_only=e.is_read_only, config_source=int(e.source),
                    is_sensitive=e.is_sensitive, config_type=int(e.config_type))
                if req.include_synonyms:
                    item.synonyms = [R.DescribeConfigsSynonym(name=s.name, value=s.value,
                                                              source=int(s.source))
                                     for s in e.synonyms]
                if req.include_documentation:
                    item.documentation = e.documentation
                out.configs.append(item)
            results.append(out)
        return R(results=results)

    async def alter_configs(self, ctx: RequestContext, req: m.AlterConfigsRequest):
        R = m.AlterConfigsResponse
        out = []
        for res in req.resources:
            denied = config_resource_denied(ctx, res.resource_type, res.resource_name,
                                            AclOperation.ALTER_CONFIGS)
            if denied is not None:
                out.append(R.AlterConfigsResourceResponse(
                    error_code=denied, error_message=None,
                    resource_type=res.resource_type, resource_name=res.resource_name))
                continue
            ops = [(c.name, 0, c.value) for c in res.configs]
            result = await self.controller.alter_configs(res.resource_type, res.resource_name, ops,
                                                incremental=False, validate_only=req.validate_only)
            out.append(R.AlterConfigsResourceResponse(
                error_code=result.error, error_message=result.message,
                resource_type=res.resource_type, resource_name=res.resource_name))
        return R(responses=out)

    async def incremental_alter_configs(self, ctx: RequestContext,
                                        req: m.IncrementalAlterConfigsRequest):
        R = m.IncrementalAlterConfigsResponse
        out = []
        for res in req.resources:
            denied = config_resource_denied(ctx, res.resource_type, res.resource_name,
                                            AclOperation.ALTER_CONFIGS)
            if denied is not None:
                out.append(R.AlterConfigsResourceResponse(
                    error_code=denied, error_message=None,
                    resource_type=res.resource_type, resource_name=res.resource_name))
                continue
            ops = [(c.name, c.config_operation, c.value) for c in res.configs]
            result = await self.controller.alter_configs(res.resource_type, res.resource_name, ops,
                                                incremental=True, validate_only=req.validate_only)
            out.append(R.AlterConfigsResourceResponse(
                error_code=result.error, error_message=result.message,
                resource_type=res.resource_type, resource_name=res.resource_name))
        return R(responses=out)

    def list_client_metrics_resources(self, ctx: RequestContext,
                                      req: m.ListClientMetricsResourcesRequest):
        """The client metrics subscriptions (CLIENT_METRICS config resources that set
        something), as Kafka 4.0: DESCRIBE_CONFIGS on the cluster needed."""
        R = m.ListClientMetricsResourcesResponse
        if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
            return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                     client_metrics_resources=[])
        names = sorted(name for kind, name in self.cache.image.configs
                       if kind == RESOURCE_CLIENT_METRICS)
        return R(error_code=ErrorCode.NONE, client_metrics_resources=[
            R.ClientMetricsResource(name=name) for name in names])

    def delete_records(self, ctx: RequestContext, req: m.DeleteRecordsRequest):
        R = m.DeleteRecordsResponse
        replica_manager = self.replica_manager
        topics_out = []
        deletable = ctx.authorized_names(AclOperation.DELETE, ResourceType.TOPIC,
                                         (t.name for t in req.topics))
        for t in req.topics:
            parts = []
            for p in t.partitions:
                out = R.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                     low_watermark=-1)
                if t.name not in deletable:
                    out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    parts.append(out)
                    continue
                try:
                    out.low_watermark = replica_manager.delete_records(t.name, p.partition_index,
                                                                       p.offset)
                except KafkaError as exc:
                    out.error_code = exc.code
                parts.append(out)
            topics_out.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
        return R(topics=topics_out)

    def describe_log_dirs(self, ctx: RequestContext, req: m.DescribeLogDirsRequest):
        R = m.DescribeLogDirsResponse
        if not ctx.authorize_cluster(AclOperation.DESCRIBE):
            # v3+ say why; older versions get no directories, as Kafka answers them
            return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                     if ctx.api_version >= 3 else ErrorCode.NONE, results=[])
        wanted = None
        if req.topics is not None:
            wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
        by_dir = {
            log_dir: {topic: [R.DescribeLogDirsPartition(partition_index=index, partition_size=size,
                                                         offset_lag=lag, is_future_key=False)
                              for index, size, lag in partitions]
                      for topic, partitions in topics.items()}
            for log_dir, topics in self.replica_manager.log_dir_descriptions(wanted).items()}
        results = []
        for log_dir, topics in by_dir.items():
            usage = shutil.disk_usage(log_dir)
            results.append(R.DescribeLogDirsResult(
                error_code=ErrorCode.NONE, log_dir=log_dir,
                topics=[R.DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in topics.items()],
                total_bytes=usage.total, usable_bytes=usage.free))
        return R(results=results)
