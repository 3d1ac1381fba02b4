"""Admin requests sent straight to a controller listener (KIP-919, `bootstrap.controllers`):
raw requests to a combined node's controller listener for each admin API Kafka 4.0's
ControllerApis serves there (a success and one Kafka error each), their ApiVersions ranges,
authorization with the connection's own principal, and `odradek configs --bootstrap-controller`.

One node for the module: StandardAuthorizer, no-ACL denies; ANONYMOUS (the PLAINTEXT listeners')
and `admin` are super users. A second controller listener, SASL_PLAINTEXT, lets `alice` and
`mallory` (no ACLs) talk to the controller as themselves.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import pytest
from broker_process import BrokerProcess, free_port
from raw_client import RawClient

from odradek.cli import configs
from odradek.client import Admin, ConfigResource, NewTopic
from odradek.client.connection import Connection
from odradek.client.errors import KafkaConfigError
from odradek.client.security import SaslCredentials
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.server.apis import CONTROLLER_ADMIN_APIS

SPEC_DIR = Path(__file__).resolve().parents[2] / "tools" / "kafka-protocol" / "messages"
USERS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}
TOPIC, BROKER = 2, 4  # config resource types
ACL_TOPIC, PREFIXED, ALLOW, CREATE, ANY = 2, 4, 3, 5, 1  # Kafka's ACL codes


def _jaas() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="admin" password="admin-secret" {users};')


class Node:
    def __init__(self, process: BrokerProcess, sasl_port: int) -> None:
        self.process = process
        self.sasl_port = sasl_port

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.process.controller_port}"

    def call(self, api_key: int, version: int, request: m.Message):
        """One request on the PLAINTEXT controller listener (principal ANONYMOUS)."""
        with RawClient("127.0.0.1", self.process.controller_port) as client:
            return client.call(api_key, version, request)

    def call_as(self, user: str, request: m.Message, version: int):
        """One request on the SASL controller listener, as `user`."""
        async def main():
            connection = await Connection.open(
                "127.0.0.1", self.sasl_port, sasl=SaslCredentials("PLAIN", user, USERS[user]))
            try:
                return await connection.send(request, api_version=version)
            finally:
                await connection.close()
        return asyncio.run(main())


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("controller-admin")
    broker, controller, sasl = free_port(), free_port(), free_port()
    process = BrokerProcess(workdir, overrides={
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller},"
                     f"CONTROLLER_SASL://127.0.0.1:{sasl}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker}",
        "controller.listener.names": "CONTROLLER,CONTROLLER_SASL",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                          "CONTROLLER_SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller_sasl.plain.sasl.jaas.config": _jaas(),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    })
    process.port, process.controller_port = broker, controller
    process.start()
    try:
        yield Node(process, sasl)
    finally:
        process.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_topics(node: Node, *names: str, partitions: int = 1) -> m.CreateTopicsResponse:
    return node.call(19, 7, m.CreateTopicsRequest(timeout_ms=10_000, topics=[
        m.CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions,
                                             replication_factor=1) for name in names]))


def _errors(results, name_field: str = "name") -> dict:
    return {getattr(r, name_field): ErrorCode.from_code(r.error_code) for r in results}


def test_admin_apis_advertised_with_kafka40_controller_ranges(node):
    """ApiVersions on the controller listener: every admin API with its 4.0 spec range, each
    one whose spec lists the controller listener."""
    response = node.call(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                     client_software_version="1"))
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    for key in CONTROLLER_ADMIN_APIS:
        spec = next(json.loads(p.read_text()) for p in SPEC_DIR.glob("*Request.json")
                    if json.loads(p.read_text())["apiKey"] == key)
        low, _, high = spec["validVersions"].partition("-")
        assert "controller" in spec["listeners"], key
        assert advertised[key] == (int(low), int(high or low)), key
    # Every API a controller listener advertises is one Kafka 4.0 serves there.
    for key in advertised:
        assert "controller" in json.loads(next(
            p for p in SPEC_DIR.glob("*Request.json")
            if json.loads(p.read_text())["apiKey"] == key).read_text())["listeners"], key


def test_topics_created_grown_and_deleted(node):
    topic = _name("ctl-topic")
    created = _create_topics(node, topic)
    assert _errors(created.topics) == {topic: ErrorCode.NONE}
    assert created.topics[0].num_partitions == 1 and created.topics[0].configs  # v5+ configs
    assert _errors(_create_topics(node, topic).topics) == {topic: ErrorCode.TOPIC_ALREADY_EXISTS}

    def grow(count: int):
        return node.call(37, 3, m.CreatePartitionsRequest(timeout_ms=10_000, validate_only=False,
                                                          topics=[m.CreatePartitionsRequest.CreatePartitionsTopic(
                                                              name=topic, count=count, assignments=None)]))
    assert _errors(grow(3).results) == {topic: ErrorCode.NONE}
    assert _errors(grow(2).results) == {topic: ErrorCode.INVALID_PARTITIONS}

    def delete(name: str):
        return node.call(20, 6, m.DeleteTopicsRequest(timeout_ms=10_000, topics=[
            m.DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0))]))
    assert _errors(delete(topic).responses) == {topic: ErrorCode.NONE}
    assert _errors(delete(topic).responses) == {topic: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_configs_described_and_altered(node):
    topic = _name("ctl-cfg")
    _create_topics(node, topic)
    Res = m.IncrementalAlterConfigsRequest.AlterConfigsResource
    Cfg = m.IncrementalAlterConfigsRequest.AlterableConfig

    def alter(value: str):
        return node.call(44, 1, m.IncrementalAlterConfigsRequest(validate_only=False, resources=[
            Res(resource_type=TOPIC, resource_name=topic, configs=[
                Cfg(name="retention.ms", config_operation=0, value=value)])]))
    assert _errors(alter("3600000").responses, "resource_name") == {topic: ErrorCode.NONE}
    assert _errors(alter("soon").responses, "resource_name") == {topic: ErrorCode.INVALID_CONFIG}

    def describe(resource_type: int, name: str):
        return node.call(32, 4, m.DescribeConfigsRequest(
            include_synonyms=False, include_documentation=False, resources=[
                m.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=resource_type, resource_name=name,
                    configuration_keys=None)])).results[0]
    described = describe(TOPIC, topic)
    assert described.error_code == ErrorCode.NONE
    assert {c.name: c.value for c in described.configs}["retention.ms"] == "3600000"
    assert describe(TOPIC, _name("missing")).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    own = describe(BROKER, "1")  # this node's own configs, as Kafka's controller describes them
    assert own.error_code == ErrorCode.NONE
    assert {c.name: c.value for c in own.configs}["node.id"] == "1"
    assert describe(BROKER, "7").error_code == ErrorCode.INVALID_REQUEST  # another node's

    def legacy(name: str):
        return node.call(33, 2, m.AlterConfigsRequest(validate_only=False, resources=[
            m.AlterConfigsRequest.AlterConfigsResource(
                resource_type=TOPIC, resource_name=name, configs=[
                    m.AlterConfigsRequest.AlterableConfig(name="segment.ms", value="600000")])]))
    assert _errors(legacy(topic).responses, "resource_name") == {topic: ErrorCode.NONE}
    missing = _name("missing")
    assert _errors(legacy(missing).responses, "resource_name") == {
        missing: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def _acl_creation(name: str, resource_type: int = ACL_TOPIC, principal: str = "User:alice",
                  pattern: int = PREFIXED):
    return m.CreateAclsRequest.AclCreation(
        resource_type=resource_type, resource_name=name, resource_pattern_type=pattern,
        principal=principal, host="*", operation=CREATE, permission_type=ALLOW)


def _acl_filter(cls, name: str):
    return cls(resource_type_filter=ACL_TOPIC, resource_name_filter=name,
               pattern_type_filter=PREFIXED, principal_filter=None, host_filter=None,
               operation=ANY, permission_type=ANY)


def test_acls_created_described_and_deleted(node):
    prefix = _name("ctl-acl")
    created = node.call(30, 3, m.CreateAclsRequest(creations=[
        _acl_creation(prefix), _acl_creation(prefix, resource_type=ANY)]))
    assert [r.error_code for r in created.results] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    described = node.call(29, 3, _acl_filter(m.DescribeAclsRequest, prefix))
    assert described.error_code == ErrorCode.NONE
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == [
        (prefix, ["User:alice"])]
    bad_filter = node.call(29, 3, m.DescribeAclsRequest(
        resource_type_filter=ACL_TOPIC, resource_name_filter=None, pattern_type_filter=9,
        principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY))
    assert bad_filter.error_code == ErrorCode.INVALID_REQUEST
    deleted = node.call(31, 3, m.DeleteAclsRequest(filters=[
        _acl_filter(m.DeleteAclsRequest.DeleteAclsFilter, prefix)]))
    assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
    assert node.call(29, 3, _acl_filter(m.DescribeAclsRequest, prefix)).resources == []


def test_client_quotas_altered(node):
    Entry, Entity, Op = (m.AlterClientQuotasRequest.EntryData,
                         m.AlterClientQuotasRequest.EntityData, m.AlterClientQuotasRequest.OpData)

    def alter(key: str):
        response = node.call(49, 1, m.AlterClientQuotasRequest(validate_only=False, entries=[
            Entry(entity=[Entity(entity_type="client-id", entity_name="ctl-client")],
                  ops=[Op(key=key, value=1024.0, remove=False)])]))
        return ErrorCode.from_code(response.entries[0].error_code)
    assert alter("producer_byte_rate") == ErrorCode.NONE
    assert alter("no_such_quota") == ErrorCode.INVALID_REQUEST


def test_scram_credentials_altered_and_described(node):
    user = _name("ctl-user")

    def upsert(iterations: int):
        response = node.call(51, 0, m.AlterUserScramCredentialsRequest(deletions=[], upsertions=[
            m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=user, mechanism=1, iterations=iterations, salt=os.urandom(16),
                salted_password=os.urandom(32))]))
        return ErrorCode.from_code(response.results[0].error_code)
    assert upsert(100) == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert upsert(4096) == ErrorCode.NONE

    def describe(name: str):
        return node.call(50, 0, m.DescribeUserScramCredentialsRequest(users=[
            m.DescribeUserScramCredentialsRequest.UserName(name=name)])).results[0]
    found = describe(user)
    assert found.error_code == ErrorCode.NONE
    assert [(c.mechanism, c.iterations) for c in found.credential_infos] == [(1, 4096)]
    assert describe(_name("nobody")).error_code == ErrorCode.RESOURCE_NOT_FOUND


def test_leaders_elected_and_reassignments(node):
    topic = _name("ctl-elect")
    _create_topics(node, topic)

    def elect(name: str):
        response = node.call(43, 2, m.ElectLeadersRequest(election_type=0, timeout_ms=10_000,
                                                          topic_partitions=[m.ElectLeadersRequest.TopicPartitions(
                                                              topic=name, partitions=[0])]))
        assert response.error_code == ErrorCode.NONE
        return ErrorCode.from_code(response.replica_election_results[0].partition_result[0]
                                   .error_code)
    assert elect(topic) == ErrorCode.ELECTION_NOT_NEEDED  # its only replica already leads
    assert elect(_name("missing")) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def reassign(name: str):
        response = node.call(45, 0, m.AlterPartitionReassignmentsRequest(timeout_ms=10_000, topics=[
            m.AlterPartitionReassignmentsRequest.ReassignableTopic(name=name, partitions=[
                m.AlterPartitionReassignmentsRequest.ReassignablePartition(
                    partition_index=0, replicas=[1])])]))
        assert response.error_code == ErrorCode.NONE
        return ErrorCode.from_code(response.responses[0].partitions[0].error_code)
    assert reassign(topic) == ErrorCode.NONE  # already its replicas: nothing to move
    assert reassign(_name("missing")) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    listed = node.call(46, 0, m.ListPartitionReassignmentsRequest(timeout_ms=10_000, topics=None))
    assert listed.error_code == ErrorCode.NONE and listed.topics == []


def test_requests_authorized_for_the_connections_principal(node):
    """Kafka's ControllerApis authorizes with the controller's authorizer: the principal is the
    one the controller connection authenticated, and ACLs apply as on a broker."""
    prefix = _name("alice")
    allowed, other = f"{prefix}-t", _name("other")
    granted = node.call_as("admin", m.CreateAclsRequest(creations=[_acl_creation(prefix)]), 3)
    assert granted.results[0].error_code == ErrorCode.NONE
    create = m.CreateTopicsRequest(timeout_ms=10_000, topics=[
        m.CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1)
        for name in (allowed, other)])
    assert _errors(node.call_as("alice", create, 7).topics) == {
        allowed: ErrorCode.NONE, other: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert _errors(node.call_as("mallory", create, 7).topics) == {
        allowed: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        other: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    describe = m.DescribeConfigsRequest(include_synonyms=False, include_documentation=False,
                                        resources=[m.DescribeConfigsRequest.DescribeConfigsResource(
                                            resource_type=BROKER, resource_name="1",
                                            configuration_keys=None)])
    assert node.call_as("mallory", describe, 4).results[0].error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert node.call_as("admin", describe, 4).results[0].error_code == ErrorCode.NONE
    acls = node.call_as("mallory", m.CreateAclsRequest(creations=[_acl_creation("x")]), 3)
    assert acls.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # DescribeCluster on a controller listener needs ALTER on the cluster (Kafka's
    # ControllerApis), unlike on a broker listener.
    cluster = m.DescribeClusterRequest(endpoint_type=2)
    assert node.call_as("mallory", cluster, 1).error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert node.call_as("admin", cluster, 1).error_code == ErrorCode.NONE


def run_configs(capsys, *args: str) -> tuple[int, str, str]:
    code = configs.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_configs_tool_with_bootstrap_controller(node, capsys):
    bootstrap = ("--bootstrap-controller", node.controller)
    code, out, err = run_configs(capsys, *bootstrap, "--entity-type", "brokers",
                                 "--entity-default", "--alter", "--add-config",
                                 "log.cleaner.threads=2")
    assert code == 0, err
    assert out == "Completed updating default config for brokers in the cluster.\n"
    code, out, err = run_configs(capsys, *bootstrap, "--entity-type", "brokers",
                                 "--entity-default", "--describe")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Default configs for brokers in the cluster are:"
    assert lines[1].startswith("  log.cleaner.threads=2 sensitive=false "
                               "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2")
    code, out, err = run_configs(capsys, *bootstrap, "--entity-type", "brokers",
                                 "--entity-name", "1", "--alter", "--add-config",
                                 "log.cleaner.threads=3")
    assert code == 0, err
    assert out == "Completed updating config for broker 1.\n"
    code, out, err = run_configs(capsys, *bootstrap, "--broker", "1", "--describe")
    assert code == 0, err
    assert out.splitlines()[0] == "Dynamic configs for broker 1 are:"
    assert "  log.cleaner.threads=3 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" \
        "log.cleaner.threads=3" in out
    # A topic's configs altered through the controller, read back through a broker.
    topic = _name("ctl-tool")
    _create_topics(node, topic)
    code, out, err = run_configs(capsys, *bootstrap, "--topic", topic, "--alter",
                                 "--add-config", "retention.ms=7200000")
    assert code == 0, err
    with Admin({"bootstrap.servers": node.process.bootstrap}) as admin:
        entries = admin.describe_configs([ConfigResource.topic(topic)])[
            ConfigResource.topic(topic)]
    assert entries["retention.ms"].value == "7200000"


def _register(node: Node, broker_id: int) -> None:
    cluster_id = node.call(60, 1, m.DescribeClusterRequest(endpoint_type=2)).cluster_id
    R = m.BrokerRegistrationRequest
    registered = node.call(62, 4, R(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
        listeners=[R.Listener(name="PLAINTEXT", host="127.0.0.1", port=1, security_protocol=0)],
        features=[R.Feature(name="metadata.version", min_supported_version=1,
                            max_supported_version=30)],
        rack=None, is_migrating_zk_broker=False, log_dirs=[], previous_broker_epoch=-1))
    assert registered.error_code == ErrorCode.NONE


def test_broker_unregistered(node):
    _register(node, 42)
    unregister = m.UnregisterBrokerRequest(broker_id=42)
    assert node.call_as("mallory", unregister, 0).error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert node.call(64, 0, unregister).error_code == ErrorCode.NONE
    again = node.call(64, 0, unregister)
    assert (again.error_code, again.error_message) == (
        ErrorCode.BROKER_ID_NOT_REGISTERED, "Broker ID 42 is not currently registered")
    # On a broker listener too (forwarded to the active controller, here this node).
    _register(node, 43)
    with RawClient("127.0.0.1", node.process.port) as client:
        response = client.call(64, 0, m.UnregisterBrokerRequest(broker_id=43))
    assert response.error_code == ErrorCode.NONE


def test_admin_client_with_bootstrap_controllers(node):
    """Kafka's admin client with `bootstrap.controllers`: the controllers are its nodes, the
    active one its controller; what needs topic metadata fails, as controllers serve no
    Metadata."""
    topic = _name("ctl-admin")
    with Admin({"bootstrap.controllers": node.controller}) as admin:
        cluster = admin.describe_cluster()
        assert [(n.id, n.port) for n in cluster.nodes] == [(1, node.process.controller_port)]
        assert cluster.controller.id == 1
        assert set(admin.create_topics([NewTopic(topic, 2, 1)])) == {topic}
        assert admin.create_partitions({topic: 3}) == {topic: None}
        _register(node, 44)
        admin.unregister_broker(44)
        with pytest.raises(KafkaError) as missing:
            admin.unregister_broker(44)
        assert missing.value.code == ErrorCode.BROKER_ID_NOT_REGISTERED
        with pytest.raises(KafkaError) as raised:
            admin.list_topics()
        assert raised.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(KafkaConfigError, match="both bootstrap.servers and bootstrap.controllers"):
        Admin({"bootstrap.controllers": node.controller,
               "bootstrap.servers": node.process.bootstrap})
