"""MetadataApis called directly: ApiVersions, Metadata, DescribeCluster, DescribeTopicPartitions
against a real metadata quorum, controller and metadata cache (no network)."""

from __future__ import annotations

import uuid

import pytest
from handler_services import (
    BROKER_LISTENER_NAME,
    BROKER_PORT,
    CONTROLLER_LISTENER_NAME,
    CONTROLLER_PORT,
    HOST,
    NODE_ID,
    HandlerNode,
    run_with_node,
)

from odradek.controller.controller import TopicSpec
from odradek.metadata.image import METADATA_VERSION_FEATURE
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import RequestHeader
from odradek.server.apis import (
    CONTROLLER_APIS,
    CONTROLLER_SERVED_VERSIONS,
    MAX_VERSION_OVERRIDES,
    SERVED_VERSIONS,
)
from odradek.server.broker import METADATA_VERSION_LEVEL
from odradek.server.handlers.metadata import (
    ENDPOINT_TYPE_BROKER,
    ENDPOINT_TYPE_CONTROLLER,
    unsupported_api_versions_response,
)

MetadataTopic = m.MetadataRequest.MetadataRequestTopic
DescribeTopic = m.DescribeTopicPartitionsRequest.TopicRequest
Cursor = m.DescribeTopicPartitionsRequest.Cursor


def api_versions_request() -> m.ApiVersionsRequest:
    return m.ApiVersionsRequest(client_software_name="handler-test",
                                client_software_version="1.0")


def metadata_request(*names: str, allow_auto_topic_creation: bool = True) -> m.MetadataRequest:
    return m.MetadataRequest(topics=[MetadataTopic(name=name) for name in names],
                             allow_auto_topic_creation=allow_auto_topic_creation)


async def create_topic(node: HandlerNode, name: str, partitions: int = 1) -> uuid.UUID:
    (result,) = await node.controller.create_topics([TopicSpec(name, num_partitions=partitions)])
    assert result.error == ErrorCode.NONE, result.message
    return result.data["topic_id"]


# -- ApiVersions


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_advertises_the_api_table_versions(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.api_versions, api_versions_request(), version)
        assert resp.error_code == ErrorCode.NONE
        advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert advertised == node.apis.versions
        assert set(advertised) == set(SERVED_VERSIONS)
        for api_key, (low, high) in advertised.items():
            assert low == SERVED_VERSIONS[api_key]
            assert high == MAX_VERSION_OVERRIDES.get(api_key, m.API_BY_KEY[api_key].max_version)
        # Advertised as Kafka 4.0 does (transactions v2 is gated by transaction.version).
        assert (advertised[24][1], advertised[26][1]) == (5, 5)

    run_with_node(tmp_path, scenario)


def test_api_versions_on_a_controller_listener_advertises_only_controller_apis(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.api_versions, api_versions_request(), 3,
                               listener=CONTROLLER_LISTENER_NAME)
        advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert set(advertised) == set(CONTROLLER_APIS)
        assert advertised == {k: (CONTROLLER_SERVED_VERSIONS[k], m.API_BY_KEY[k].max_version)
                              for k in CONTROLLER_APIS}
        for api_key in advertised:  # each one is a controller API in Kafka's specs too
            assert "controller" in m.API_BY_KEY[api_key].listeners

    run_with_node(tmp_path, scenario)


def test_api_versions_v3_reports_supported_and_finalized_features(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.api_versions, api_versions_request(), 3)
        supported = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
        # v3 leaves out the features whose lowest level is 0 (KAFKA-17011)
        assert supported == {METADATA_VERSION_FEATURE: (7, METADATA_VERSION_LEVEL)}
        finalized = {f.name: (f.min_version_level, f.max_version_level)
                     for f in resp.finalized_features}
        assert finalized[METADATA_VERSION_FEATURE] == (METADATA_VERSION_LEVEL,
                                                       METADATA_VERSION_LEVEL)
        # The epoch of the finalized features is the metadata offset they were read at.
        assert resp.finalized_features_epoch == node.cache.image.offset >= 0
        resp = await node.call(node.metadata_apis.api_versions, api_versions_request(), 4)
        assert {f.name: (f.min_version, f.max_version) for f in resp.supported_features} == {
            METADATA_VERSION_FEATURE: (7, METADATA_VERSION_LEVEL), "group.version": (0, 1),
            "kraft.version": (0, 1), "transaction.version": (0, 1)}

    run_with_node(tmp_path, scenario)


def test_api_versions_before_v3_has_no_features(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.api_versions, api_versions_request(), 2)
        assert resp.supported_features == []
        assert resp.finalized_features == []
        assert resp.finalized_features_epoch == -1

    run_with_node(tmp_path, scenario)


def test_unsupported_api_versions_version_gets_a_v0_answer_listing_api_versions(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        header = RequestHeader(request_api_key=18, request_api_version=99, correlation_id=5,
                               client_id="future-client")
        resp = unsupported_api_versions_response(node.apis, header)
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        # KIP-511: only ApiVersions itself, so the client can retry at a version we know.
        assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == \
            [(18, *node.apis.versions[18])]
        # It is answered at v0, which every client can read.
        m.ApiVersionsResponse.decode(resp.encode(0), 0)

    run_with_node(tmp_path, scenario)


# -- Metadata


@pytest.mark.parametrize("version", [4, 9, 12])
def test_metadata_unknown_topic_without_auto_creation_is_unknown(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.metadata,
                               metadata_request("absent", allow_auto_topic_creation=False),
                               version)
        (topic,) = resp.topics
        assert (topic.name, topic.error_code) == ("absent", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        assert topic.partitions == []
        assert "absent" not in node.cache.image.topics_by_name

    run_with_node(tmp_path, scenario)


@pytest.mark.parametrize("version", [1, 4, 12])
def test_metadata_auto_creates_a_missing_topic_with_the_broker_defaults(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.metadata, metadata_request("orders"), version)
        (topic,) = resp.topics
        # Odradek answers with the created topic at once (Kafka says LEADER_NOT_AVAILABLE until
        # the topic reaches its metadata cache, here the create returns once committed).
        assert (topic.name, topic.error_code) == ("orders", ErrorCode.NONE)
        assert [p.partition_index for p in topic.partitions] == [0, 1, 2]  # num.partitions
        for partition in topic.partitions:
            assert partition.error_code == ErrorCode.NONE
            assert partition.leader_id == NODE_ID
            assert partition.replica_nodes == partition.isr_nodes == [NODE_ID]
        created = node.cache.image.topics_by_name["orders"]
        if version >= 10:
            assert topic.topic_id == created.topic_id
        # The replica manager follows the new image: the partitions are open here.
        assert {(p.topic, p.index) for p in node.replica_manager.partitions_of(["orders"])} == \
            {("orders", 0), ("orders", 1), ("orders", 2)}

    run_with_node(tmp_path, scenario, overrides={"num.partitions": "3"})


def test_metadata_auto_creation_disabled_by_config(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.metadata, metadata_request("orders"), 12)
        (topic,) = resp.topics
        assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "orders" not in node.cache.image.topics_by_name

    run_with_node(tmp_path, scenario, overrides={"auto.create.topics.enable": "false"})


def test_metadata_auto_creation_of_an_invalid_name_is_an_invalid_topic(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.metadata,
                               metadata_request("bad name!", "good"), 12)
        errors = {t.name: t.error_code for t in resp.topics}
        assert errors == {"bad name!": ErrorCode.INVALID_TOPIC_EXCEPTION, "good": ErrorCode.NONE}
        assert set(node.cache.image.topics_by_name) == {"good"}

    run_with_node(tmp_path, scenario)


def test_metadata_invalid_name_without_auto_creation_is_an_invalid_topic(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.metadata,
                               metadata_request("bad name!", allow_auto_topic_creation=False), 12)
        (topic,) = resp.topics
        assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION

    run_with_node(tmp_path, scenario)


def test_metadata_all_topics_null_at_v1_and_empty_at_v0(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "a")
        await create_topic(node, "b", partitions=2)
        everything = await node.call(node.metadata_apis.metadata, m.MetadataRequest(topics=None),
                                     1)
        assert sorted(t.name for t in everything.topics) == ["a", "b"]
        v0_everything = await node.call(node.metadata_apis.metadata,
                                        m.MetadataRequest(topics=[]), 0)
        assert sorted(t.name for t in v0_everything.topics) == ["a", "b"]
        nothing = await node.call(node.metadata_apis.metadata, m.MetadataRequest(topics=[]), 1)
        assert nothing.topics == []
        # Asking for all topics never creates one.
        assert set(node.cache.image.topics_by_name) == {"a", "b"}

    run_with_node(tmp_path, scenario)


def test_metadata_by_topic_id(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        topic_id = await create_topic(node, "orders", partitions=2)
        unknown_id = uuid.uuid4()
        resp = await node.call(node.metadata_apis.metadata, m.MetadataRequest(topics=[
            MetadataTopic(name=None, topic_id=topic_id),
            MetadataTopic(name=None, topic_id=unknown_id)]), 12)
        by_id = {t.topic_id: t for t in resp.topics}
        assert by_id[unknown_id].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        assert by_id[unknown_id].name is None
        assert by_id[topic_id].error_code == ErrorCode.NONE
        assert by_id[topic_id].name == "orders"
        assert len(by_id[topic_id].partitions) == 2

    run_with_node(tmp_path, scenario)


def test_metadata_lists_live_brokers_only(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await node.register_broker(2, port=BROKER_PORT + 2)
        await node.add_fenced_broker(3, port=BROKER_PORT + 3)
        assert node.cache.image.brokers[3].fenced
        resp = await node.call(node.metadata_apis.metadata, m.MetadataRequest(topics=None), 12)
        assert sorted((b.node_id, b.host, b.port) for b in resp.brokers) == [
            (NODE_ID, HOST, BROKER_PORT), (2, HOST, BROKER_PORT + 2)]
        assert resp.cluster_id == node.cluster_id
        assert resp.controller_id == NODE_ID

    run_with_node(tmp_path, scenario)


# -- DescribeCluster


def test_describe_cluster_on_a_broker_listener_lists_live_brokers(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await node.add_fenced_broker(3, port=BROKER_PORT + 3)
        for version in (0, 1):
            resp = await node.call(node.metadata_apis.describe_cluster,
                                   m.DescribeClusterRequest(), version)
            assert resp.error_code == ErrorCode.NONE
            assert resp.cluster_id == node.cluster_id
            assert resp.controller_id == NODE_ID
            assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == \
                [(NODE_ID, HOST, BROKER_PORT)]
            if version >= 1:
                assert resp.endpoint_type == ENDPOINT_TYPE_BROKER

    run_with_node(tmp_path, scenario)


def test_describe_cluster_on_a_controller_listener_lists_the_controllers(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.metadata_apis.describe_cluster,
                               m.DescribeClusterRequest(endpoint_type=ENDPOINT_TYPE_CONTROLLER),
                               1, listener=CONTROLLER_LISTENER_NAME)
        assert resp.error_code == ErrorCode.NONE
        assert resp.endpoint_type == ENDPOINT_TYPE_CONTROLLER
        assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == \
            [(NODE_ID, HOST, CONTROLLER_PORT)]

    run_with_node(tmp_path, scenario)


def test_describe_cluster_endpoint_type_mismatch(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        describe = node.metadata_apis.describe_cluster
        # v0 cannot name an endpoint type (it means BROKER): a controller listener refuses it
        # with INVALID_REQUEST, as v0 has no better error.
        v0 = await node.call(describe, m.DescribeClusterRequest(), 0,
                             listener=CONTROLLER_LISTENER_NAME)
        assert v0.error_code == ErrorCode.INVALID_REQUEST
        assert v0.brokers == []
        # v1 (KIP-919): MISMATCHED_ENDPOINT_TYPE, either way round.
        v1_on_controller = await node.call(
            describe, m.DescribeClusterRequest(endpoint_type=ENDPOINT_TYPE_BROKER), 1,
            listener=CONTROLLER_LISTENER_NAME)
        assert v1_on_controller.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
        v1_on_broker = await node.call(
            describe, m.DescribeClusterRequest(endpoint_type=ENDPOINT_TYPE_CONTROLLER), 1,
            listener=BROKER_LISTENER_NAME)
        assert v1_on_broker.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
        assert "CONTROLLER" in v1_on_broker.error_message
        unknown = await node.call(describe, m.DescribeClusterRequest(endpoint_type=7), 1)
        assert unknown.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE

    run_with_node(tmp_path, scenario)


# -- DescribeTopicPartitions


def partitions_of(resp: m.DescribeTopicPartitionsResponse) -> list[tuple[str, int]]:
    return [(t.name, p.partition_index) for t in resp.topics for p in t.partitions]


def cursor_of(resp: m.DescribeTopicPartitionsResponse) -> tuple[str, int] | None:
    cursor = resp.next_cursor
    return None if cursor is None else (cursor.topic_name, cursor.partition_index)


def test_describe_topic_partitions_pages_with_a_cursor(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "a", partitions=3)
        await create_topic(node, "b", partitions=2)
        await create_topic(node, "c", partitions=1)
        describe = node.metadata_apis.describe_topic_partitions
        first = await node.call(describe, m.DescribeTopicPartitionsRequest(
            topics=[], response_partition_limit=2), 0)
        assert partitions_of(first) == [("a", 0), ("a", 1)]
        assert cursor_of(first) == ("a", 2)
        second = await node.call(describe, m.DescribeTopicPartitionsRequest(
            topics=[], response_partition_limit=2, cursor=first.next_cursor), 0)
        assert partitions_of(second) == [("a", 2), ("b", 0)]
        assert cursor_of(second) == ("b", 1)
        last = await node.call(describe, m.DescribeTopicPartitionsRequest(
            topics=[], response_partition_limit=2,
            cursor=Cursor(topic_name="b", partition_index=1)), 0)
        assert partitions_of(last) == [("b", 1), ("c", 0)]
        assert cursor_of(last) is None
        # Everything at once when the limit allows it.
        whole = await node.call(describe, m.DescribeTopicPartitionsRequest(topics=[]), 0)
        assert len(partitions_of(whole)) == 6 and whole.next_cursor is None
        topic_ids = {t.name: t.topic_id for t in whole.topics}
        assert topic_ids == {n: t.topic_id for n, t in node.cache.image.topics_by_name.items()}

    run_with_node(tmp_path, scenario)


def test_describe_topic_partitions_named_topics_sorted_with_unknown_ones(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "b", partitions=2)
        await create_topic(node, "a", partitions=1)
        resp = await node.call(node.metadata_apis.describe_topic_partitions,
                               m.DescribeTopicPartitionsRequest(topics=[
                                   DescribeTopic(name="b"), DescribeTopic(name="zz"),
                                   DescribeTopic(name="a")]), 0)
        assert [(t.name, t.error_code) for t in resp.topics] == [
            ("a", ErrorCode.NONE), ("b", ErrorCode.NONE),
            ("zz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert partitions_of(resp) == [("a", 0), ("b", 0), ("b", 1)]
        for topic in resp.topics[:2]:
            for partition in topic.partitions:
                assert partition.leader_id == NODE_ID
                assert partition.isr_nodes == [NODE_ID]

    run_with_node(tmp_path, scenario)


def test_describe_topic_partitions_limit_used_up_at_a_topic_boundary(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "a", partitions=2)
        await create_topic(node, "b", partitions=1)
        resp = await node.call(node.metadata_apis.describe_topic_partitions,
                               m.DescribeTopicPartitionsRequest(
                                   topics=[], response_partition_limit=2), 0)
        assert cursor_of(resp) == ("b", 0)
        assert [t.name for t in resp.topics] == ["a"]

    run_with_node(tmp_path, scenario)
