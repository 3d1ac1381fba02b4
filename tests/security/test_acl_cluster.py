"""ACLs in a two-node cluster: CreateAcls sent to the node that is not the active controller is
forwarded (in an Envelope, with the client's principal) and authorized there; the bindings
reach every node's image, and each node enforces them. Users authenticate on a SASL_PLAINTEXT
listener; the nodes talk to each other over PLAINTEXT as User:ANONYMOUS, a super user."""

from __future__ import annotations

import asyncio

from cluster.quorum_cluster import HOST, QuorumCluster

from odradek.client.connection import Connection
from odradek.client.security import SaslCredentials
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from tests.broker_process import free_port, wait_until

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


def _call(port: int, user: str, request: m.Message, version: int):
    async def main():
        connection = await Connection.open(HOST, port,
                                           sasl=SaslCredentials("PLAIN", user, USERS[user]))
        try:
            return await connection.send(request, api_version=version)
        finally:
            await connection.close()
    return asyncio.run(main())


def _create(principal: str) -> m.CreateAclsRequest:
    return m.CreateAclsRequest(creations=[m.CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="shared", resource_pattern_type=3, principal=principal,
        host="*", operation=8, permission_type=3)])  # TOPIC shared LITERAL DESCRIBE ALLOW


DESCRIBE_ALL = m.DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                     pattern_type_filter=1, principal_filter=None,
                                     host_filter=None, operation=1, permission_type=1)


def test_acls_are_forwarded_replicated_and_enforced_on_every_node(tmp_path):
    cluster = QuorumCluster(tmp_path / "cluster", size=2)
    nodes = list(cluster.nodes.values())
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes)
    sasl_ports = {}
    for node in nodes:
        sasl_ports[node.node_id] = free_port()
        node.write_config(voters, {
            "listeners": f"PLAINTEXT://{HOST}:{node.port},"
                         f"SASL_PLAINTEXT://{HOST}:{sasl_ports[node.node_id]},"
                         f"CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port},"
                                    f"SASL_PLAINTEXT://{HOST}:{sasl_ports[node.node_id]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
        })
    cluster.format()
    cluster.start()
    try:
        leader, _epoch = cluster.wait_for_leader(60)
        follower = next(n for n in nodes if n.node_id != leader)

        def registered() -> bool:
            metadata = nodes[0].metadata()
            return metadata is not None and len(metadata.brokers) == 2

        wait_until(registered, 60, interval=0.2, message="both brokers registered")
        assert follower.create_topic("shared", replication_factor=2) == 0

        def alice_sees_shared(node_id: int) -> bool:
            response = _call(sasl_ports[node_id], "alice", m.MetadataRequest(
                topics=[m.MetadataRequest.MetadataRequestTopic(name="shared")],
                allow_auto_topic_creation=False), 12)
            return response.topics[0].error_code == ErrorCode.NONE

        assert not alice_sees_shared(follower.node_id)
        # alice may not create ACLs: decided by the active controller, for her principal
        refused = _call(sasl_ports[follower.node_id], "alice", _create("User:alice"), 3)
        assert refused.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # the admin may, through the follower
        created = _call(sasl_ports[follower.node_id], "admin", _create("User:alice"), 3)
        assert created.results[0].error_code == ErrorCode.NONE
        for node in nodes:
            wait_until(lambda node=node: alice_sees_shared(node.node_id), 30, interval=0.1,
                       message=f"the ACL in effect on node {node.node_id}")
            described = _call(sasl_ports[node.node_id], "admin", DESCRIBE_ALL, 3)
            assert [(r.resource_name, [a.principal for a in r.acls])
                    for r in described.resources] == [("shared", ["User:alice"])]
    finally:
        cluster.stop()
