"""ApiVersions, Metadata, DescribeCluster, DescribeTopicPartitions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from odradek.controller.controller import TopicSpec, validate_topic_name
from odradek.metadata.cache import MetadataCache
from odradek.metadata.image import MetadataImage, TopicImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.controller.controller import OpResult
    from odradek.server.apis import ApiTable
    from odradek.server.network import RequestContext

#: creates topics with the broker's defaults (the controller's CreateTopics)
CreateTopics = Callable[[Sequence[TopicSpec]], Awaitable[list["OpResult"]]]

AUTHORIZED_OPERATIONS_OMITTED = -2147483648

# DescribeCluster endpoint types (Kafka's EndpointType).
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
ENDPOINT_TYPE_NAMES = {ENDPOINT_TYPE_BROKER: "BROKER", ENDPOINT_TYPE_CONTROLLER: "CONTROLLER"}


def unsupported_api_versions_response(apis: ApiTable, header) -> m.ApiVersionsResponse:
    """The v0 answer to an ApiVersions request at a version we don't know (KIP-511)."""
    lo, hi = apis.versions[18]
    return m.ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[m.ApiVersionsResponse.ApiVersion(api_key=18, min_version=lo, max_version=hi)],
    )

def _brokers(ctx: RequestContext, image: MetadataImage):
    out = []
    for reg in image.brokers.values():
        if reg.fenced:
            continue
        endpoint = reg.endpoint(ctx.listener)
        if endpoint is None:
            continue
        out.append((reg.broker_id, endpoint.host, endpoint.port, reg.rack))
    return out

def cluster_authorized_operations(ctx: RequestContext) -> int:
    """The cluster's authorized operations, reported (as Kafka) only to a principal that may
    DESCRIBE the cluster (0 otherwise)."""
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


def _topic_metadata(topic: TopicImage, live: set[int], ctx: RequestContext | None = None,
                    include_operations: bool = False,
                    ) -> m.MetadataResponse.MetadataResponseTopic:
    parts = []
    for index in sorted(topic.partitions):
        reg = topic.partitions[index]
        offline = [r for r in reg.replicas if r not in live]
        leader_alive = reg.leader in live
        parts.append(
            m.MetadataResponse.MetadataResponsePartition(
                error_code=ErrorCode.NONE if leader_alive else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=reg.leader if leader_alive else -1,
                leader_epoch=reg.leader_epoch,
                replica_nodes=list(reg.replicas),
                isr_nodes=list(reg.isr),
                offline_replicas=offline,
            )
        )
    return m.MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=parts,
        topic_authorized_operations=(
            ctx.authorized_operations(ResourceType.TOPIC, topic.name)
            if include_operations and ctx is not None else AUTHORIZED_OPERATIONS_OMITTED),
    )


class MetadataApis:
    """ApiVersions, Metadata, DescribeCluster and DescribeTopicPartitions, answered from the
    metadata image this broker has."""

    def __init__(self, *, cache: MetadataCache, apis: ApiTable, cluster_id: str,
                 controller_id: Callable[[], int], listener_kind: Callable[[str], str],
                 controller_endpoints: Callable[[str], list[tuple[int, str, int]]],
                 supported_features: Mapping[str, tuple[int, int]],
                 create_topics: CreateTopics, auto_create_topics: Callable[[], bool],
                 quorum_leader_id: Callable[[], int] | None = None) -> None:
        self.cache = cache
        # The active controller as a controller listener's DescribeCluster names it (Kafka's
        # ControllerApis: the quorum leader, -1 unknown), where admin clients with
        # `bootstrap.controllers` send what only the active controller carries out.
        self.quorum_leader_id = quorum_leader_id or controller_id
        self.apis = apis
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.listener_kind = listener_kind
        self.controller_endpoints = controller_endpoints
        self.supported_features = supported_features
        self.create_topics = create_topics
        self.auto_create_topics_enabled = auto_create_topics

    async def auto_create_topics(self, names: Sequence[str]) -> dict[str, ErrorCode]:
        """Creates missing topics a Metadata request names; returns the errors of those that
        could not be created."""
        results = await self.create_topics([TopicSpec(name=n) for n in names])
        out = {}
        for name, res in zip(names, results):
            if res.error == ErrorCode.NONE:
                # Created: on the active controller the new image has it at once (the create
                # returns once committed) and the caller reads it from there; a broker that
                # forwarded the create may not have replayed it yet, and answers as Kafka
                # does until it has.
                out[name] = ErrorCode.LEADER_NOT_AVAILABLE
                continue
            out[name] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                         if res.error == ErrorCode.TOPIC_ALREADY_EXISTS else res.error)
        return out

    def api_versions(self, ctx: RequestContext, req: m.ApiVersionsRequest):
        resp = m.ApiVersionsResponse(
            error_code=ErrorCode.NONE,
            api_keys=[
                m.ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in self.apis.advertised(self.listener_kind(ctx.listener)).items()
            ],
        )
        if ctx.api_version >= 3:
            image = self.cache.image
            # v3 and below leave out features whose lowest level is 0: clients before
            # ApiVersions v4 take a 0 minimum for an unsupported feature (KAFKA-17011).
            resp.supported_features = [
                m.ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
                for name, (lo, hi) in self.supported_features.items()
                if lo > 0 or ctx.api_version >= 4
            ]
            resp.finalized_features_epoch = image.offset
            resp.finalized_features = [
                m.ApiVersionsResponse.FinalizedFeatureKey(
                    name=name, max_version_level=level, min_version_level=level
                )
                for name, level in sorted(image.features.items())
            ]
        return resp

    async def metadata(self, ctx: RequestContext, req: m.MetadataRequest):
        version = ctx.api_version
        image = self.cache.image
        topics_out = []
        all_topics = req.topics is None or (version == 0 and not req.topics)
        if all_topics:
            # null (v1+) or empty at v0: all topics (those the principal may not DESCRIBE
            # are left out, as Kafka does).
            wanted_names = [t.name for t in image.topics_by_id.values()]
            by_id = []
        else:
            wanted_names = [t.name for t in req.topics if t.name is not None]
            by_id = [t.topic_id for t in req.topics if t.name is None]
        described = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                         wanted_names)
        allow_auto_create = req.allow_auto_topic_creation if version >= 4 else True
        missing = [n for n in wanted_names if n in described and n not in image.topics_by_name]
        created_errors: dict[str, ErrorCode] = {}
        if missing and allow_auto_create and self.auto_create_topics_enabled():
            # Auto-creation needs CREATE on the cluster or on each topic.
            if not ctx.authorize_cluster(AclOperation.CREATE):
                creatable = ctx.authorized_names(AclOperation.CREATE, ResourceType.TOPIC,
                                                 missing)
                created_errors = {name: ErrorCode.TOPIC_AUTHORIZATION_FAILED
                                  for name in missing if name not in creatable}
                missing = [name for name in missing if name in creatable]
            if missing:
                created_errors.update(await self.auto_create_topics(missing))
                image = self.cache.image
        else:
            # As Kafka: a missing topic that will not be created is UNKNOWN_TOPIC_OR_PARTITION,
            # unless its name could never be a topic's.
            created_errors = {name: ErrorCode.INVALID_TOPIC_EXCEPTION for name in missing
                              if validate_topic_name(name) is not None}
        include_operations = version >= 8 and req.include_topic_authorized_operations
        # a refused topic reports no operations (the field exists from v8)
        denied_operations = 0 if version >= 8 else AUTHORIZED_OPERATIONS_OMITTED
        live = {b for b, reg in image.brokers.items() if not reg.fenced}
        for name in wanted_names:
            if name not in described:
                if not all_topics:  # named: refused without saying whether it exists
                    topics_out.append(m.MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                        topic_authorized_operations=denied_operations))
                continue
            topic = image.topics_by_name.get(name)
            if topic is None:
                error = created_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                topics_out.append(
                    m.MetadataResponse.MetadataResponseTopic(error_code=error, name=name)
                )
            else:
                topics_out.append(_topic_metadata(topic, live, ctx, include_operations))
        for topic_id in by_id:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                topics_out.append(
                    m.MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id
                    )
                )
            elif not ctx.authorize_topic(AclOperation.DESCRIBE, topic.name):
                topics_out.append(m.MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None,
                    topic_id=topic_id, topic_authorized_operations=denied_operations))
            else:
                topics_out.append(_topic_metadata(topic, live, ctx, include_operations))
        response = m.MetadataResponse(
            brokers=[
                m.MetadataResponse.MetadataResponseBroker(node_id=b, host=h, port=p, rack=r)
                for b, h, p, r in _brokers(ctx, image)
            ],
            cluster_id=self.cluster_id,
            controller_id=self.controller_id(),
            topics=topics_out,
        )
        if 8 <= version <= 10 and req.include_cluster_authorized_operations:
            response.cluster_authorized_operations = cluster_authorized_operations(ctx)
        return response

    def describe_cluster(self, ctx: RequestContext, req: m.DescribeClusterRequest):
        """Brokers on a broker listener, controllers on a controller listener (KIP-919); asking a
        listener for the other kind of endpoint is an error, as in Kafka."""
        R = m.DescribeClusterResponse
        on_controller = self.listener_kind(ctx.listener) == "controller"
        expected = ENDPOINT_TYPE_CONTROLLER if on_controller else ENDPOINT_TYPE_BROKER
        requested = req.endpoint_type
        if on_controller and not ctx.authorize_cluster(AclOperation.ALTER):
            # Kafka's ControllerApis: unlike on a broker, ALTER on the cluster is needed.
            return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                     error_message="Cluster authorization failed.", cluster_id="")
        if requested not in ENDPOINT_TYPE_NAMES:
            return R(error_code=ErrorCode.INVALID_REQUEST if ctx.api_version == 0
                     else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                     error_message=f"Unsupported endpoint type {requested}",
                     cluster_id="")
        if requested != expected:
            return R(error_code=ErrorCode.INVALID_REQUEST if ctx.api_version == 0
                     else ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                     error_message=f"The request was sent to an endpoint of type "
                                   f"{ENDPOINT_TYPE_NAMES[expected]}, but we wanted an endpoint of "
                                   f"type {ENDPOINT_TYPE_NAMES[requested]}",
                     cluster_id="")
        if on_controller:
            nodes = [(node_id, host, port, None)
                     for node_id, host, port in self.controller_endpoints(ctx.listener)]
        else:
            nodes = _brokers(ctx, self.cache.image)
        return R(
            error_code=ErrorCode.NONE,
            endpoint_type=expected,
            cluster_id=self.cluster_id,
            controller_id=self.quorum_leader_id() if on_controller else self.controller_id(),
            brokers=[R.DescribeClusterBroker(broker_id=b, host=h, port=p, rack=r)
                     for b, h, p, r in nodes],
            cluster_authorized_operations=(
                cluster_authorized_operations(ctx) if req.include_cluster_authorized_operations
                else AUTHORIZED_OPERATIONS_OMITTED),
        )

    def describe_topic_partitions(self, ctx: RequestContext,
                                  req: m.DescribeTopicPartitionsRequest):
        image = self.cache.image
        live = {b for b, reg in image.brokers.items() if not reg.fenced}
        names = [t.name for t in req.topics] or sorted(image.topics_by_name)
        names = sorted(names)
        cursor = req.cursor
        if cursor is not None:
            names = [n for n in names if n >= cursor.topic_name]
        budget = max(1, req.response_partition_limit)
        topics_out = []
        next_cursor = None
        R = m.DescribeTopicPartitionsResponse
        described = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        for name in names:
            topic = image.topics_by_name.get(name)
            if name not in described:
                if req.topics:  # named: refused; listing all: left out (as Kafka)
                    topics_out.append(R.DescribeTopicPartitionsResponseTopic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
                continue
            if topic is None:
                topics_out.append(R.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            resumes_here = cursor is not None and name == cursor.topic_name
            start = cursor.partition_index if resumes_here else 0
            parts = []
            for index in sorted(topic.partitions):
                if index < start:
                    continue
                if budget == 0:
                    next_cursor = R.Cursor(topic_name=name, partition_index=index)
                    break
                reg = topic.partitions[index]
                parts.append(R.DescribeTopicPartitionsResponsePartition(
                    error_code=ErrorCode.NONE,
                    partition_index=index,
                    leader_id=reg.leader,
                    leader_epoch=reg.leader_epoch,
                    replica_nodes=list(reg.replicas),
                    isr_nodes=list(reg.isr),
                    eligible_leader_replicas=[],
                    last_known_elr=[],
                    offline_replicas=[r for r in reg.replicas if r not in live],
                ))
                budget -= 1
            if parts or next_cursor is None:
                # A topic the limit left no room for is not listed: the cursor points at it.
                topics_out.append(R.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.NONE, name=name, topic_id=topic.topic_id,
                    is_internal=topic.internal, partitions=parts))
            if next_cursor is not None:
                break
        return R(topics=topics_out, next_cursor=next_cursor)
