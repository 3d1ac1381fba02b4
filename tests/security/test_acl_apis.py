"""Without an authorizer (the security tests' broker has none): the ACL APIs are advertised and
answer SECURITY_DISABLED, and every supported operation is reported as authorized, as Kafka
does."""

from __future__ import annotations

import asyncio

from odradek.client.connection import Connection
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import ResourceType, all_operations_bitfield


def _call(address: str, requests: list[tuple[m.Message, int]]) -> list[m.Message]:
    host, port = address.rsplit(":", 1)

    async def main():
        connection = await Connection.open(host, int(port))
        try:
            return [await connection.send(request, api_version=version)
                    for request, version in requests]
        finally:
            await connection.close()
    return asyncio.run(main())


def test_acl_apis_answer_security_disabled(secure_broker):
    versions, created, described, deleted = _call(secure_broker.plaintext, [
        (m.ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3),
        (m.CreateAclsRequest(creations=[m.CreateAclsRequest.AclCreation(
            resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a",
            host="*", operation=3, permission_type=3)]), 3),
        (m.DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                               pattern_type_filter=1, principal_filter=None, host_filter=None,
                               operation=1, permission_type=1), 3),
        (m.DeleteAclsRequest(filters=[m.DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1)]), 3),
    ])
    advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert advertised[29] == advertised[30] == advertised[31] == (1, 3)
    assert created.results[0].error_code == ErrorCode.SECURITY_DISABLED
    assert described.error_code == ErrorCode.SECURITY_DISABLED
    assert deleted.filter_results[0].error_code == ErrorCode.SECURITY_DISABLED


def test_every_operation_is_authorized_without_an_authorizer(secure_broker):
    topic = "acl-ops-topic"
    _call(secure_broker.plaintext, [(m.CreateTopicsRequest(timeout_ms=10000, topics=[
        m.CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1,
                                             replication_factor=1)]), 7)])
    metadata, cluster, old_metadata = _call(secure_broker.plaintext, [
        (m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)],
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=True), 12),
        (m.DescribeClusterRequest(include_cluster_authorized_operations=True), 1),
        (m.MetadataRequest(topics=[], include_cluster_authorized_operations=True), 10),
    ])
    assert metadata.topics[0].topic_authorized_operations == \
        all_operations_bitfield(ResourceType.TOPIC)
    assert cluster.cluster_authorized_operations == all_operations_bitfield(ResourceType.CLUSTER)
    assert old_metadata.cluster_authorized_operations == \
        all_operations_bitfield(ResourceType.CLUSTER)
