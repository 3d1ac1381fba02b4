"""The ACL matrix against a real broker process with StandardAuthorizer and SASL PLAIN users:
for each API family (metadata, produce, fetch, offsets, groups, admin topic/config operations,
transactions) and each of allowed / denied / no ACL, with `allow.everyone.if.no.acl.found`
false and true, the answer is Kafka's (authorization error codes, topics hidden from Metadata).

Resources are named by case: `allowed-*` (alice: ALLOW ALL, prefixed), `denied-*` (alice:
ALLOW ALL and DENY ALL, prefixed: DENY wins), `open-*` (no ACL at all). The cluster carries an
ACL for another user, so the no-ACL rule never opens it. `admin` is a super user; so is
ANONYMOUS, the principal of the PLAINTEXT listener the broker uses between its own parts (as a
Kafka deployment lists its inter-broker principal in super.users). `mallory` has no ACL.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.client.connection import Connection
from odradek.client.security import SaslCredentials
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.security.acl import ResourceType as Rt
from odradek.security.acl import all_operations_bitfield
from tests.broker_process import SHORT_BROKER_SESSION, BrokerProcess, free_port, wait_until

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "mallory": "mallory-secret"}
CASES = ("allowed", "denied", "open")
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
COORDINATOR_NOT_READY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def _jaas() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="admin" password="admin-secret" {users};')


@dataclass
class AclBroker:
    process: BrokerProcess
    sasl_port: int
    allow_everyone: bool
    topics: list[str] = field(default_factory=list)

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def client_config(self, user: str) -> dict[str, str]:
        return {"bootstrap.servers": self.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": USERS[user]}

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(self.client_config(user))


def start_acl_broker(workdir: Path, allow_everyone: bool) -> AclBroker:
    plaintext, sasl, controller = free_port(), free_port(), free_port()
    overrides = {
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl},"
                     f"CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plaintext},"
                                f"SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": str(allow_everyone).lower(),
        **SHORT_BROKER_SESSION,  # test_acls_survive_a_restart restarts it
    }
    process = BrokerProcess(workdir, overrides=overrides)
    process.port, process.controller_port = plaintext, controller
    process.start()
    return AclBroker(process, sasl, allow_everyone)


def _acl(resource_type, name, principal, operation, permission,
         pattern=ResourcePatternType.PREFIXED) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def grant_case_acls(broker: AclBroker) -> None:
    admin = broker.admin()
    bindings = [_acl(ResourceType.BROKER, "kafka-cluster", "User:bob", AclOperation.DESCRIBE,
                     AclPermissionType.ALLOW, ResourcePatternType.LITERAL)]
    for resource_type in (ResourceType.TOPIC, ResourceType.GROUP,
                          ResourceType.TRANSACTIONAL_ID):
        bindings.append(_acl(resource_type, "allowed-", "User:alice", AclOperation.ALL,
                             AclPermissionType.ALLOW))
        bindings.append(_acl(resource_type, "denied-", "User:alice", AclOperation.ALL,
                             AclPermissionType.ALLOW))
        bindings.append(_acl(resource_type, "denied-", "User:alice", AclOperation.ALL,
                             AclPermissionType.DENY))
    for future in admin.create_acls(bindings).values():
        assert future.result(30) is None
    topics = [f"{case}-t" for case in CASES]
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)
    broker.topics = topics
    producer = Producer({**broker.client_config("admin"), "linger.ms": 0})
    for topic in topics:
        producer.produce(topic, value=b"seed")
    assert producer.flush(30) == 0


@pytest.fixture(scope="module", params=[False, True], ids=["no-acl-denies", "no-acl-allows"])
def acl_broker(request, tmp_path_factory):
    broker = start_acl_broker(tmp_path_factory.mktemp("acl-broker"), request.param)
    try:
        grant_case_acls(broker)
        yield broker
    finally:
        broker.process.stop()


def run_as(broker: AclBroker, user: str, scenario):
    async def main():
        connection = await Connection.open(
            "127.0.0.1", broker.sasl_port, sasl=SaslCredentials("PLAIN", user, USERS[user]))
        try:
            return await scenario(connection)
        finally:
            await connection.close()
    return asyncio.run(main())


def _metadata(names: list[str] | None) -> m.MetadataRequest:
    return m.MetadataRequest(
        topics=None if names is None else [m.MetadataRequest.MetadataRequestTopic(name=n)
                                           for n in names],
        allow_auto_topic_creation=False, include_topic_authorized_operations=True)


def _produce(topic: str) -> m.ProduceRequest:
    batch = build_batch([(int(time.time() * 1000), None, b"v")])
    return m.ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[
        m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            m.ProduceRequest.PartitionProduceData(index=0, records=batch)])])


def _fetch(topic: str) -> m.FetchRequest:
    return m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                          session_id=0, session_epoch=-1, topics=[m.FetchRequest.FetchTopic(
                              topic=topic, partitions=[m.FetchRequest.FetchPartition(
                                  partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])


def _offset_commit(group: str, topic: str) -> m.OffsetCommitRequest:
    R = m.OffsetCommitRequest
    return R(group_id=group, generation_id_or_member_epoch=-1, member_id="",
             topics=[R.OffsetCommitRequestTopic(name=topic, partitions=[
                 R.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])


async def _answers(connection: Connection, case: str) -> dict[str, int]:
    """Each API family's error code for alice on the case's resources."""
    topic, group, txn_id = f"{case}-t", f"{case}-g", f"{case}-x"
    out: dict[str, int] = {}
    md = await connection.send(_metadata([topic]), api_version=12)
    out["metadata"] = md.topics[0].error_code
    produced = await connection.send(_produce(topic), api_version=9)
    out["produce"] = produced.responses[0].partition_responses[0].error_code
    fetched = await connection.send(_fetch(topic), api_version=12)
    out["fetch"] = fetched.responses[0].partitions[0].error_code
    listed = await connection.send(m.ListOffsetsRequest(replica_id=-1, topics=[
        m.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]),
        api_version=7)
    out["list_offsets"] = listed.topics[0].partitions[0].error_code
    found = await connection.send(m.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
                                  api_version=4)
    out["find_coordinator"] = found.coordinators[0].error_code
    joined = await connection.send(m.JoinGroupRequest(
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(
            name="range", metadata=b"")]), api_version=9)
    out["join_group"] = joined.error_code
    committed = await connection.send(_offset_commit(group, topic), api_version=8)
    out["offset_commit"] = committed.topics[0].partitions[0].error_code
    fetched_offsets = await connection.send(m.OffsetFetchRequest(groups=[
        m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=[
            m.OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]),
        api_version=8)
    out["offset_fetch"] = fetched_offsets.groups[0].error_code
    described = await connection.send(m.DescribeGroupsRequest(
        groups=[group], include_authorized_operations=True), api_version=5)
    out["describe_groups"] = described.groups[0].error_code
    created = await connection.send(m.CreateTopicsRequest(timeout_ms=10000, validate_only=True,
                                                          topics=[m.CreateTopicsRequest.CreatableTopic(
                                                              name=f"{case}-new", num_partitions=1,
                                                              replication_factor=1)]),
                                    api_version=7)
    out["create_topics"] = created.topics[0].error_code
    configs = await connection.send(m.DescribeConfigsRequest(resources=[
        m.DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                         configuration_keys=None)]),
        api_version=4)
    out["describe_configs"] = configs.results[0].error_code
    IA = m.IncrementalAlterConfigsRequest
    altered = await connection.send(IA(validate_only=True, resources=[IA.AlterConfigsResource(
        resource_type=2, resource_name=topic, configs=[IA.AlterableConfig(
            name="retention.ms", config_operation=0, value="3600000")])]), api_version=1)
    out["alter_configs"] = altered.responses[0].error_code
    partitions = await connection.send(m.CreatePartitionsRequest(
        timeout_ms=10000, validate_only=True, topics=[
            m.CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=2,
                                                            assignments=None)]),
        api_version=3)
    out["create_partitions"] = partitions.results[0].error_code
    records = await connection.send(m.DeleteRecordsRequest(timeout_ms=10000, topics=[
        m.DeleteRecordsRequest.DeleteRecordsTopic(name=topic, partitions=[
            m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=0)])]),
        api_version=2)
    out["delete_records"] = records.topics[0].partitions[0].error_code
    deleted = await connection.send(m.DeleteTopicsRequest(topic_names=[f"{case}-gone"],
                                                          timeout_ms=10000), api_version=5)
    out["delete_topics"] = deleted.responses[0].error_code
    txn_coordinator = await connection.send(
        m.FindCoordinatorRequest(key_type=1, coordinator_keys=[txn_id]), api_version=4)
    out["find_txn_coordinator"] = txn_coordinator.coordinators[0].error_code
    deadline = time.monotonic() + 30
    while True:
        init = await connection.send(m.InitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout_ms=60000, producer_id=-1,
            producer_epoch=-1), api_version=4)
        if init.error_code not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    out["init_producer_id"] = init.error_code
    txns = await connection.send(m.DescribeTransactionsRequest(transactional_ids=[txn_id]),
                                 api_version=0)
    out["describe_transactions"] = txns.transaction_states[0].error_code
    producer_id, epoch = init.producer_id, init.producer_epoch
    added = await connection.send(m.AddOffsetsToTxnRequest(
        transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch,
        group_id=group), api_version=3)
    out["add_offsets_to_txn"] = added.error_code
    TC = m.TxnOffsetCommitRequest
    txn_committed = await connection.send(TC(
        transactional_id=txn_id, group_id=group, producer_id=producer_id, producer_epoch=epoch,
        generation_id=-1, member_id="", topics=[TC.TxnOffsetCommitRequestTopic(
            name=topic, partitions=[TC.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=1)])]), api_version=3)
    out["txn_offset_commit"] = txn_committed.topics[0].partitions[0].error_code
    ended = await connection.send(m.EndTxnRequest(
        transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch,
        committed=False), api_version=3)
    out["end_txn"] = ended.error_code
    beat = await connection.send(m.HeartbeatRequest(group_id=group, generation_id=1,
                                                    member_id="nobody"), api_version=4)
    out["heartbeat"] = beat.error_code
    producers = await connection.send(m.DescribeProducersRequest(topics=[
        m.DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]),
        api_version=0)
    out["describe_producers"] = producers.topics[0].partitions[0].error_code
    joined_kip848 = await connection.send(m.ConsumerGroupHeartbeatRequest(
        group_id=f"{case}-cg", member_id="", member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=[topic], topic_partitions=[]), api_version=0)
    out["consumer_group_heartbeat"] = joined_kip848.error_code
    cg_described = await connection.send(m.ConsumerGroupDescribeRequest(
        group_ids=[f"{case}-cg"], include_authorized_operations=True), api_version=0)
    out["consumer_group_describe"] = cg_described.groups[0].error_code
    partitions_described = await connection.send(m.DescribeTopicPartitionsRequest(
        topics=[m.DescribeTopicPartitionsRequest.TopicRequest(name=topic)],
        response_partition_limit=100), api_version=0)
    out["describe_topic_partitions"] = partitions_described.topics[0].error_code
    OD = m.OffsetDeleteRequest
    offsets_deleted = await connection.send(OD(group_id=group, topics=[OD.OffsetDeleteRequestTopic(
        name=topic, partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])]),
        api_version=0)
    out["offset_delete"] = offsets_deleted.error_code or \
        offsets_deleted.topics[0].partitions[0].error_code
    groups_deleted = await connection.send(m.DeleteGroupsRequest(
        groups_names=[f"{case}-never-g"]), api_version=2)
    out["delete_groups"] = groups_deleted.results[0].error_code
    return out


#: API family -> (answer when authorized, answer when not): Kafka's codes
EXPECTED = {
    "metadata": (ErrorCode.NONE, TOPIC_DENIED),
    "produce": (ErrorCode.NONE, TOPIC_DENIED),
    "fetch": (ErrorCode.NONE, TOPIC_DENIED),
    "list_offsets": (ErrorCode.NONE, TOPIC_DENIED),
    "find_coordinator": (ErrorCode.NONE, GROUP_DENIED),
    "join_group": (ErrorCode.MEMBER_ID_REQUIRED, GROUP_DENIED),
    "offset_commit": (ErrorCode.NONE, GROUP_DENIED),
    "offset_fetch": (ErrorCode.NONE, GROUP_DENIED),
    "describe_groups": (ErrorCode.NONE, GROUP_DENIED),
    "create_topics": (ErrorCode.NONE, TOPIC_DENIED),
    "describe_configs": (ErrorCode.NONE, TOPIC_DENIED),
    "alter_configs": (ErrorCode.NONE, TOPIC_DENIED),
    "create_partitions": (ErrorCode.NONE, TOPIC_DENIED),
    "delete_records": (ErrorCode.NONE, TOPIC_DENIED),
    "delete_topics": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, TOPIC_DENIED),
    "find_txn_coordinator": (ErrorCode.NONE, TXN_DENIED),
    "init_producer_id": (ErrorCode.NONE, TXN_DENIED),
    # the id exists once InitProducerId has run
    "describe_transactions": (ErrorCode.NONE, TXN_DENIED),
    "add_offsets_to_txn": (ErrorCode.NONE, TXN_DENIED),
    "txn_offset_commit": (ErrorCode.NONE, TXN_DENIED),
    "end_txn": (ErrorCode.NONE, TXN_DENIED),
    "heartbeat": (ErrorCode.UNKNOWN_MEMBER_ID, GROUP_DENIED),
    "describe_producers": (ErrorCode.NONE, TOPIC_DENIED),
    "consumer_group_heartbeat": (ErrorCode.NONE, GROUP_DENIED),
    "consumer_group_describe": (ErrorCode.NONE, GROUP_DENIED),
    "describe_topic_partitions": (ErrorCode.NONE, TOPIC_DENIED),
    # DELETE on the group, then READ on each topic
    "offset_delete": (ErrorCode.NONE, GROUP_DENIED),
    "delete_groups": (ErrorCode.GROUP_ID_NOT_FOUND, GROUP_DENIED),
}


@pytest.mark.parametrize("case", CASES)
def test_acl_matrix(acl_broker, case):
    authorized = {"allowed": True, "denied": False, "open": acl_broker.allow_everyone}[case]
    answers = run_as(acl_broker, "alice", lambda c: _answers(c, case))
    expected = {api: int(codes[0] if authorized else codes[1])
                for api, codes in EXPECTED.items()}
    assert {api: ErrorCode.from_code(code).name for api, code in answers.items()} == \
        {api: ErrorCode.from_code(code).name for api, code in expected.items()}


def test_metadata_lists_only_what_the_principal_may_describe(acl_broker):
    async def listing(connection: Connection):
        response = await connection.send(_metadata(None), api_version=12)
        # internal topics have no ACL: visible with allow.everyone.if.no.acl.found, as Kafka
        return {t.name: t.topic_authorized_operations for t in response.topics
                if not t.name.startswith("__")}

    alice = run_as(acl_broker, "alice", listing)
    mallory = run_as(acl_broker, "mallory", listing)
    open_topics = {"open-t"} if acl_broker.allow_everyone else set()
    assert set(alice) == {"allowed-t"} | open_topics
    assert alice["allowed-t"] == all_operations_bitfield(Rt.TOPIC)
    assert set(mallory) == open_topics
    admin = run_as(acl_broker, "admin", listing)
    assert set(acl_broker.topics) <= set(admin)


def test_a_principal_without_rights_reads_nothing_and_writes_nothing(acl_broker):
    guarded = ["allowed-t", "denied-t"] + ([] if acl_broker.allow_everyone else ["open-t"])

    async def attempts(connection: Connection):
        errors = []
        for topic in guarded:
            produced = await connection.send(_produce(topic), api_version=9)
            errors.append(produced.responses[0].partition_responses[0].error_code)
            fetched = await connection.send(_fetch(topic), api_version=12)
            partition = fetched.responses[0].partitions[0]
            errors.append(partition.error_code)
            assert not partition.records
        return errors

    assert set(run_as(acl_broker, "mallory", attempts)) == {TOPIC_DENIED}
    # Odradek's own view, as the super user: mallory's produce left nothing.
    consumer = Consumer({**acl_broker.client_config("admin"), "group.id": "admin-check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("denied-t", 0), timeout=30)
    finally:
        consumer.close()
    assert high - low == 1  # the seed record only (alice was denied too)


def test_confluent_kafka_producer_and_consumer(acl_broker):
    producer = Producer({**acl_broker.client_config("alice"), "linger.ms": 0,
                         "message.timeout.ms": 10000})
    outcomes: dict[str, str | None] = {}

    def delivered(topic):
        def report(error, _message):
            outcomes[topic] = error.name() if error is not None else None
        return report

    for topic in ("allowed-t", "denied-t"):
        producer.produce(topic, value=b"x", on_delivery=delivered(topic))
    producer.flush(30)
    assert outcomes == {"allowed-t": None, "denied-t": "TOPIC_AUTHORIZATION_FAILED"}

    consumer = Consumer({**acl_broker.client_config("mallory"), "group.id": "allowed-mallory",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["allowed-t"])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is not None, "mallory read a record"
                error = message.error()
        # The group (alice's prefix covers it, for alice only) is refused before the topic.
        assert error is not None and error.name() == "GROUP_AUTHORIZATION_FAILED"
    finally:
        consumer.close()


def test_kafka_python_sees_only_describable_topics(acl_broker):
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(
        bootstrap_servers=acl_broker.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"])
    try:
        topics = consumer.topics()
    finally:
        consumer.close()
    expected = {"allowed-t"} | ({"open-t"} if acl_broker.allow_everyone else set())
    assert {t for t in topics if not t.startswith("__")} == expected


def test_aiokafka_producer(acl_broker, caplog):
    """aiokafka waits for the metadata of a topic it may not describe until its request
    timeout (it logs the topic as unauthorized and does not raise that itself)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError

    async def main():
        producer = AIOKafkaProducer(
            bootstrap_servers=acl_broker.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN", sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"], request_timeout_ms=3000)
        await producer.start()
        try:
            written = await producer.send_and_wait("allowed-t", b"from-aiokafka")
            with pytest.raises((TopicAuthorizationFailedError, UnknownTopicOrPartitionError)):
                await producer.send_and_wait("denied-t", b"refused")
            return written
        finally:
            await producer.stop()

    assert asyncio.run(main()).offset >= 1
    assert "Topic denied-t is not authorized for this client" in caplog.text

def test_acl_admin_apis_with_confluent_kafka(acl_broker):
    admin = acl_broker.admin()
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    listed = admin.describe_acls(everything).result(30)
    assert len(listed) >= 10
    # a MATCH filter: the ACLs that apply to topic allowed-t for alice
    match = AclBindingFilter(ResourceType.TOPIC, "allowed-t", ResourcePatternType.MATCH,
                             "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
    assert [(b.name, b.resource_pattern_type) for b in admin.describe_acls(match).result(30)] \
        == [("allowed-", ResourcePatternType.PREFIXED)]
    # alice may not manage ACLs (DescribeAcls' top-level error: librdkafka answers an empty
    # list, so the wire answer is checked)
    alice = acl_broker.admin("alice")
    grant = _acl(ResourceType.TOPIC, "x", "User:alice", AclOperation.ALL,
                 AclPermissionType.ALLOW, ResourcePatternType.LITERAL)
    with pytest.raises(KafkaException) as refused:
        alice.create_acls([grant])[grant].result(30)
    assert refused.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"

    async def describe(connection: Connection):
        return await connection.send(m.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1),
            api_version=3)

    assert run_as(acl_broker, "alice", describe).error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # create, see enforced, delete
    extra = _acl(ResourceType.TOPIC, "open-t", "User:mallory", AclOperation.READ,
                 AclPermissionType.ALLOW, ResourcePatternType.LITERAL)
    admin.create_acls([extra])[extra].result(30)

    async def mallory_metadata(connection: Connection):
        response = await connection.send(_metadata(["open-t"]), api_version=12)
        return response.topics[0].error_code

    try:
        wait_until(lambda: run_as(acl_broker, "mallory", mallory_metadata) == ErrorCode.NONE,
                   30, message="mallory's new ACL in effect")
    finally:
        deleted = admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, "open-t", ResourcePatternType.LITERAL, "User:mallory", None,
            AclOperation.ANY, AclPermissionType.ANY)])
        assert len(next(iter(deleted.values())).result(30)) == 1


def test_create_and_delete_acls_validation_as_kafka(acl_broker):
    """Each invalid creation fails alone with INVALID_REQUEST and Kafka's message (AclApis'
    checks, then AclControlManager.validateNewAcl's); the valid one in the same request is
    created. A DeleteAcls filter with an unknown element: INVALID_REQUEST."""
    C = m.CreateAclsRequest.AclCreation
    topic, group, cluster = int(Rt.TOPIC), int(Rt.GROUP), int(Rt.CLUSTER)
    literal, prefixed, match = 3, 4, 2
    read, any_operation = 3, 1
    allow, deny, any_permission = 3, 2, 1
    creations = {
        "valid": C(resource_type=topic, resource_name="allowed-v", resource_pattern_type=literal,
                   principal="User:bob", host="*", operation=read, permission_type=allow),
        "principal without a type": C(resource_type=topic, resource_name="x",
                                      resource_pattern_type=literal, principal="bob",
                                      host="*", operation=read, permission_type=allow),
        "resource type ANY": C(resource_type=1, resource_name="x",
                               resource_pattern_type=literal, principal="User:bob", host="*",
                               operation=read, permission_type=allow),
        "unknown resource type": C(resource_type=42, resource_name="x",
                                   resource_pattern_type=literal, principal="User:bob",
                                   host="*", operation=read, permission_type=allow),
        "pattern MATCH": C(resource_type=group, resource_name="x", resource_pattern_type=match,
                           principal="User:bob", host="*", operation=read,
                           permission_type=deny),
        "operation ANY": C(resource_type=topic, resource_name="x",
                           resource_pattern_type=prefixed, principal="User:bob", host="*",
                           operation=any_operation, permission_type=allow),
        "permission ANY": C(resource_type=topic, resource_name="x",
                            resource_pattern_type=literal, principal="User:bob", host="*",
                            operation=read, permission_type=any_permission),
        "cluster named otherwise": C(resource_type=cluster, resource_name="my-cluster",
                                     resource_pattern_type=literal, principal="User:bob",
                                     host="*", operation=read, permission_type=allow),
        "empty name": C(resource_type=topic, resource_name="", resource_pattern_type=literal,
                        principal="User:bob", host="*", operation=read, permission_type=allow),
    }

    async def create(connection: Connection):
        response = await connection.send(m.CreateAclsRequest(creations=list(creations.values())),
                                          api_version=3)
        return {name: (ErrorCode.from_code(r.error_code).name, r.error_message)
                for name, r in zip(creations, response.results, strict=True)}

    invalid = "INVALID_REQUEST"
    assert run_as(acl_broker, "admin", create) == {
        "valid": ("NONE", None),
        "principal without a type": (invalid, ("Could not parse principal from `bob` (no colon "
                                     "is present separating the principal type from the "
                                     "principal name)")),
        "resource type ANY": (invalid, "Invalid resourceType ANY"),
        "unknown resource type": (invalid, "Invalid resourceType UNKNOWN"),
        "pattern MATCH": (invalid, "Invalid patternType MATCH"),
        "operation ANY": (invalid, "Invalid operation ANY"),
        "permission ANY": (invalid, "Invalid permissionType ANY"),
        "cluster named otherwise": (invalid, ("The only valid name for the CLUSTER resource is "
                                    "kafka-cluster")),
        "empty name": (invalid, "Invalid empty resource name"),
    }
    F = m.DeleteAclsRequest.DeleteAclsFilter

    async def delete(connection: Connection):
        response = await connection.send(m.DeleteAclsRequest(filters=[
            F(resource_type_filter=42, resource_name_filter=None, pattern_type_filter=literal,
              principal_filter=None, host_filter=None, operation=read, permission_type=allow),
            F(resource_type_filter=topic, resource_name_filter=None, pattern_type_filter=literal,
              principal_filter=None, host_filter=None, operation=77, permission_type=allow),
            F(resource_type_filter=topic, resource_name_filter="allowed-v",
              pattern_type_filter=literal, principal_filter="User:bob", host_filter=None,
              operation=any_operation, permission_type=any_permission)]), api_version=3)
        return [(ErrorCode.from_code(r.error_code).name, r.error_message,
                 [a.resource_name for a in r.matching_acls]) for r in response.filter_results]

    assert run_as(acl_broker, "admin", delete) == [
        (invalid, "Unknown patternFilter.", []), (invalid, "Unknown entryFilter.", []),
        ("NONE", None, ["allowed-v"])]


def test_delete_topics_needs_describe_then_delete(acl_broker):
    """Kafka's ControllerApis order: without DESCRIBE a topic is refused whether it exists or
    not; with DESCRIBE only, a missing topic is UNKNOWN_TOPIC_OR_PARTITION and an existing one
    refused."""
    admin = acl_broker.admin()
    describe_only = [_acl(ResourceType.TOPIC, name, "User:alice", AclOperation.DESCRIBE,
                          AclPermissionType.ALLOW, ResourcePatternType.LITERAL)
                     for name in ("kept", "never-created")]
    for future in admin.create_acls(describe_only).values():
        future.result(30)
    for future in admin.create_topics([NewTopic("kept", 1, 1)]).values():
        future.result(30)

    async def delete(connection: Connection):
        response = await connection.send(m.DeleteTopicsRequest(
            topic_names=["kept", "never-created", "denied-t"], timeout_ms=10000),
            api_version=5)
        return {r.name: r.error_code for r in response.responses}

    assert run_as(acl_broker, "alice", delete) == {
        "kept": TOPIC_DENIED, "never-created": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "denied-t": TOPIC_DENIED}
    # and nothing was deleted
    assert "kept" in admin.list_topics(timeout=30).topics

def test_refusals_at_the_oldest_served_versions(acl_broker):
    """A principal without rights (mallory) gets each refusal in the shape its version has
    (fields a version lacks are not sent: an encoding failure would close the connection)."""
    M = m
    batch = build_batch([(int(time.time() * 1000), None, b"v")])

    async def oldest(connection: Connection) -> dict[str, int]:
        out = {}
        md = await connection.send(M.MetadataRequest(topics=[
            M.MetadataRequest.MetadataRequestTopic(name="denied-t")]), api_version=0)
        out["metadata v0"] = md.topics[0].error_code
        md = await connection.send(M.MetadataRequest(topics=[
            M.MetadataRequest.MetadataRequestTopic(name="denied-t")],
            allow_auto_topic_creation=False), api_version=5)
        out["metadata v5"] = md.topics[0].error_code
        produced = await connection.send(M.ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
            M.ProduceRequest.TopicProduceData(name="denied-t", partition_data=[
                M.ProduceRequest.PartitionProduceData(index=0, records=batch)])]),
            api_version=3)
        out["produce v3"] = produced.responses[0].partition_responses[0].error_code
        fetched = await connection.send(_fetch("denied-t"), api_version=4)
        out["fetch v4"] = fetched.responses[0].partitions[0].error_code
        listed = await connection.send(M.ListOffsetsRequest(replica_id=-1, topics=[
            M.ListOffsetsRequest.ListOffsetsTopic(name="denied-t", partitions=[
                M.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]),
            api_version=1)
        out["list_offsets v1"] = listed.topics[0].partitions[0].error_code
        found = await connection.send(M.FindCoordinatorRequest(key="denied-g"), api_version=0)
        out["find_coordinator v0"] = found.error_code
        joined = await connection.send(M.JoinGroupRequest(
            group_id="denied-g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
            member_id="", protocol_type="consumer", protocols=[]), api_version=2)
        out["join_group v2"] = joined.error_code
        synced = await connection.send(M.SyncGroupRequest(
            group_id="denied-g", generation_id=1, member_id="m", assignments=[]), api_version=0)
        out["sync_group v0"] = synced.error_code
        left = await connection.send(M.LeaveGroupRequest(group_id="denied-g", member_id="m"),
                                     api_version=0)
        out["leave_group v0"] = left.error_code
        described = await connection.send(M.DescribeGroupsRequest(groups=["denied-g"]),
                                          api_version=0)
        out["describe_groups v0"] = described.groups[0].error_code
        committed = await connection.send(M.OffsetCommitRequest(
            group_id="denied-g", generation_id_or_member_epoch=-1, member_id="",
            topics=[M.OffsetCommitRequest.OffsetCommitRequestTopic(name="denied-t", partitions=[
                M.OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0,
                                                                   committed_offset=1)])]),
            api_version=2)
        out["offset_commit v2"] = committed.topics[0].partitions[0].error_code
        fetched_offsets = await connection.send(M.OffsetFetchRequest(group_id="denied-g", topics=[
            M.OffsetFetchRequest.OffsetFetchRequestTopic(name="denied-t",
                                                         partition_indexes=[0])]),
            api_version=1)
        out["offset_fetch v1"] = fetched_offsets.topics[0].partitions[0].error_code
        created = await connection.send(M.CreateTopicsRequest(timeout_ms=5000, topics=[
            M.CreateTopicsRequest.CreatableTopic(name="denied-x", num_partitions=1,
                                                 replication_factor=1)]), api_version=2)
        out["create_topics v2"] = created.topics[0].error_code
        deleted = await connection.send(M.DeleteTopicsRequest(topic_names=["denied-t"],
                                                              timeout_ms=5000), api_version=1)
        out["delete_topics v1"] = deleted.responses[0].error_code
        configs = await connection.send(M.DescribeConfigsRequest(resources=[
            M.DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                             configuration_keys=None)]),
            api_version=1)
        out["describe_configs broker v1"] = configs.results[0].error_code
        dirs = await connection.send(M.DescribeLogDirsRequest(topics=None), api_version=1)
        out["describe_log_dirs v1 (no dirs)"] = len(dirs.results)
        elected = await connection.send(M.ElectLeadersRequest(topic_partitions=[
            M.ElectLeadersRequest.TopicPartitions(topic="denied-t", partitions=[0])],
            timeout_ms=5000), api_version=0)
        out["elect_leaders v0"] = \
            elected.replica_election_results[0].partition_result[0].error_code
        init = await connection.send(M.InitProducerIdRequest(
            transactional_id="denied-x", transaction_timeout_ms=60000), api_version=0)
        out["init_producer_id v0"] = init.error_code
        added = await connection.send(M.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="denied-x", v3_and_below_producer_id=1,
            v3_and_below_producer_epoch=0, v3_and_below_topics=[
                M.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="denied-t",
                                                                    partitions=[0])]),
            api_version=0)
        out["add_partitions_to_txn v0"] = \
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        scram = await connection.send(M.DescribeUserScramCredentialsRequest(users=None),
                                      api_version=0)
        out["describe_user_scram_credentials"] = scram.error_code
        acls = await connection.send(M.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1),
            api_version=1)
        out["describe_acls v1"] = acls.error_code
        cluster = await connection.send(M.DescribeClusterRequest(
            include_cluster_authorized_operations=True), api_version=0)
        out["describe_cluster ops v0"] = cluster.cluster_authorized_operations
        return out

    assert run_as(acl_broker, "mallory", oldest) == {
        "metadata v0": TOPIC_DENIED, "metadata v5": TOPIC_DENIED, "produce v3": TOPIC_DENIED,
        "fetch v4": TOPIC_DENIED, "list_offsets v1": TOPIC_DENIED,
        "find_coordinator v0": GROUP_DENIED, "join_group v2": GROUP_DENIED,
        "sync_group v0": GROUP_DENIED, "leave_group v0": GROUP_DENIED,
        "describe_groups v0": GROUP_DENIED, "offset_commit v2": GROUP_DENIED,
        "offset_fetch v1": GROUP_DENIED, "create_topics v2": TOPIC_DENIED,
        "delete_topics v1": TOPIC_DENIED,
        "describe_configs broker v1": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "describe_log_dirs v1 (no dirs)": 0,
        "elect_leaders v0": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "init_producer_id v0": TXN_DENIED, "add_partitions_to_txn v0": TXN_DENIED,
        "describe_user_scram_credentials": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "describe_acls v1": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "describe_cluster ops v0": 0,
    }


def test_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(acl_broker):
    """InitProducerId without a transactional id (Kafka 4.0): IDEMPOTENT_WRITE on the cluster
    or WRITE on any topic; mallory has neither (open topics count only through the no-ACL
    rule)."""
    request = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                      producer_id=-1, producer_epoch=-1)

    async def init(connection: Connection) -> int:
        return (await connection.send(request, api_version=4)).error_code

    assert run_as(acl_broker, "alice", init) == ErrorCode.NONE  # WRITE on allowed-*
    assert run_as(acl_broker, "mallory", init) == (
        ErrorCode.NONE if acl_broker.allow_everyone else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

async def _once_coordinator_ready(send, error_of) -> m.Message:
    """`send()`'s answer, sent again while the coordinator loads (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        response = await send()
        if error_of(response) not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.1)


def test_listings_show_only_what_the_principal_may_describe(acl_broker):
    """ListGroups, ListTransactions and DescribeTopicPartitions (all topics) leave out what the
    principal may not DESCRIBE (ListGroups: everything with DESCRIBE on the cluster, as bob);
    DescribeGroups and ConsumerGroupDescribe report the principal's authorized operations."""
    groups = {f"{case}-lg" for case in CASES}
    consumer_groups = {f"{case}-lcg" for case in CASES}
    txn_ids = {f"{case}-lx" for case in CASES}

    async def create(connection: Connection):
        # the first FindCoordinator creates the internal topics (as Kafka's)
        for key_type, key in ((0, "allowed-lg"), (1, "allowed-lx")):
            await connection.send(m.FindCoordinatorRequest(key_type=key_type,
                                                           coordinator_keys=[key]),
                                  api_version=4)
        for group in sorted(groups):
            committed = await _once_coordinator_ready(
                lambda group=group: connection.send(_offset_commit(group, "open-t"),
                                                    api_version=8),
                lambda r: r.topics[0].partitions[0].error_code)
            assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        for group in sorted(consumer_groups):
            joined = await _once_coordinator_ready(
                lambda group=group: connection.send(m.ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                    subscribed_topic_names=["open-t"], topic_partitions=[]), api_version=0),
                lambda r: r.error_code)
            assert joined.error_code == ErrorCode.NONE
        for txn_id in sorted(txn_ids):
            init = await _once_coordinator_ready(
                lambda txn_id=txn_id: connection.send(m.InitProducerIdRequest(
                    transactional_id=txn_id, transaction_timeout_ms=60000, producer_id=-1,
                    producer_epoch=-1), api_version=4),
                lambda r: r.error_code)
            assert init.error_code == ErrorCode.NONE

    run_as(acl_broker, "admin", create)

    async def listings(connection: Connection):
        listed = await connection.send(m.ListGroupsRequest(states_filter=[], types_filter=[]),
                                       api_version=5)
        txns = await connection.send(m.ListTransactionsRequest(
            state_filters=[], producer_id_filters=[], duration_filter=-1), api_version=1)
        partitions = await connection.send(m.DescribeTopicPartitionsRequest(
            topics=[], response_partition_limit=2000), api_version=0)
        described = await connection.send(m.DescribeGroupsRequest(
            groups=sorted(groups), include_authorized_operations=True), api_version=5)
        cg_described = await connection.send(m.ConsumerGroupDescribeRequest(
            group_ids=sorted(consumer_groups), include_authorized_operations=True),
            api_version=0)
        return {
            "groups": {g.group_id for g in listed.groups} & (groups | consumer_groups),
            "transactions": {t.transactional_id for t in txns.transaction_states} & txn_ids,
            "topics": {t.name for t in partitions.topics} & set(acl_broker.topics),
            "describe_groups": {g.group_id: (ErrorCode.from_code(g.error_code).name,
                                             g.authorized_operations)
                                for g in described.groups},
            "consumer_group_describe": {g.group_id: (ErrorCode.from_code(g.error_code).name,
                                                     g.authorized_operations)
                                        for g in cg_described.groups},
        }

    visible = {"allowed"} | ({"open"} if acl_broker.allow_everyone else set())
    group_ops = all_operations_bitfield(Rt.GROUP)
    omitted = -2147483648  # Kafka's AUTHORIZED_OPERATIONS_OMITTED

    def described(suffix: str) -> dict:
        return {f"{case}-{suffix}": ("NONE", group_ops) if case in visible
                else ("GROUP_AUTHORIZATION_FAILED", omitted) for case in CASES}

    assert run_as(acl_broker, "alice", listings) == {
        "groups": {f"{case}-{kind}" for case in visible for kind in ("lg", "lcg")},
        "transactions": {f"{case}-lx" for case in visible},
        "topics": {f"{case}-t" for case in visible},
        "describe_groups": described("lg"),
        "consumer_group_describe": described("lcg"),
    }
    # mallory has no ACL: only what the no-ACL rule opens
    mallory = run_as(acl_broker, "mallory", listings)
    opened = {"open"} if acl_broker.allow_everyone else set()
    assert mallory["groups"] == {f"{case}-{kind}" for case in opened for kind in ("lg", "lcg")}
    assert mallory["transactions"] == {f"{case}-lx" for case in opened}
    assert mallory["topics"] == {f"{case}-t" for case in opened}
    # bob may DESCRIBE the cluster: ListGroups shows him every group (and nothing else more)
    bob = run_as(acl_broker, "bob", listings)
    assert bob["groups"] == groups | consumer_groups
    assert bob["transactions"] == {f"{case}-lx" for case in opened}


def test_offset_delete_needs_delete_on_the_group_then_read_on_each_topic(acl_broker):
    OD = m.OffsetDeleteRequest
    names = ["allowed-t", "denied-t", "open-t", "allowed-missing"]

    async def delete(connection: Connection):
        await connection.send(m.FindCoordinatorRequest(key_type=0,
                                                       coordinator_keys=["allowed-od"]),
                              api_version=4)
        committed = await _once_coordinator_ready(
            lambda: connection.send(_offset_commit("allowed-od", "allowed-t"), api_version=8),
            lambda r: r.topics[0].partitions[0].error_code)
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        response = await connection.send(OD(group_id="allowed-od", topics=[
            OD.OffsetDeleteRequestTopic(name=name, partitions=[
                OD.OffsetDeleteRequestPartition(partition_index=0)]) for name in names]),
            api_version=0)
        return response.error_code, {t.name: ErrorCode.from_code(t.partitions[0].error_code).name
                                     for t in response.topics}

    assert run_as(acl_broker, "alice", delete) == (ErrorCode.NONE, {
        "allowed-t": "NONE", "denied-t": "TOPIC_AUTHORIZATION_FAILED",
        "open-t": "NONE" if acl_broker.allow_everyone else "TOPIC_AUTHORIZATION_FAILED",
        "allowed-missing": "UNKNOWN_TOPIC_OR_PARTITION"})


def test_cluster_operations_need_their_cluster_acl(acl_broker):
    """Reassignments, features and the quorum (KafkaApis/ControllerApis: ALTER or DESCRIBE on
    the cluster): alice has no cluster ACL, bob may DESCRIBE it; each refusal is the top-level
    CLUSTER_AUTHORIZATION_FAILED (and per partition for AlterPartitionReassignments, as its
    getErrorResponse)."""
    AR, LR = m.AlterPartitionReassignmentsRequest, m.ListPartitionReassignmentsRequest

    async def attempts(connection: Connection):
        out = {}
        altered = await connection.send(AR(timeout_ms=10000, topics=[AR.ReassignableTopic(
            name="allowed-t", partitions=[AR.ReassignablePartition(partition_index=0,
                                                                    replicas=None)])]),
            api_version=0)
        out["alter_partition_reassignments"] = (
            altered.error_code, altered.responses[0].partitions[0].error_code)
        listed = await connection.send(LR(timeout_ms=10000, topics=None), api_version=0)
        out["list_partition_reassignments"] = listed.error_code
        features = await connection.send(m.UpdateFeaturesRequest(
            timeout_ms=10000, validate_only=True, feature_updates=[
                m.UpdateFeaturesRequest.FeatureUpdateKey(
                    feature="metadata.version", max_version_level=1, upgrade_type=1)]),
            api_version=1)
        out["update_features"] = (features.error_code, len(features.results))
        quorum = await connection.send(m.DescribeQuorumRequest(topics=[
            m.DescribeQuorumRequest.TopicData(topic_name="__cluster_metadata", partitions=[
                m.DescribeQuorumRequest.PartitionData(partition_index=0)])]), api_version=2)
        out["describe_quorum"] = quorum.error_code
        added = await connection.send(m.AddRaftVoterRequest(
            cluster_id=None, timeout_ms=10000, voter_id=99,
            voter_directory_id=uuid.uuid4(), listeners=[m.AddRaftVoterRequest.Listener(
                name="CONTROLLER", host="127.0.0.1", port=1)]), api_version=0)
        out["add_raft_voter"] = added.error_code
        removed = await connection.send(m.RemoveRaftVoterRequest(
            cluster_id=None, voter_id=99, voter_directory_id=uuid.uuid4()), api_version=0)
        out["remove_raft_voter"] = removed.error_code
        return out

    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert run_as(acl_broker, "alice", attempts) == {
        "alter_partition_reassignments": (denied, denied),
        "list_partition_reassignments": denied, "update_features": (denied, 0),
        "describe_quorum": denied, "add_raft_voter": denied, "remove_raft_voter": denied}
    # DESCRIBE is not ALTER
    assert run_as(acl_broker, "bob", attempts) == {
        "alter_partition_reassignments": (denied, denied),
        "list_partition_reassignments": ErrorCode.NONE, "update_features": (denied, 0),
        "describe_quorum": ErrorCode.NONE, "add_raft_voter": denied,
        "remove_raft_voter": denied}


def test_acls_survive_a_restart(acl_broker):
    """The bindings are metadata records: a restarted broker replays them from its metadata
    log (last in this module: the broker restarts)."""
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)

    def described() -> set[tuple]:
        admin = acl_broker.admin()
        return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.operation,
                 b.permission_type) for b in admin.describe_acls(everything).result(30)}

    before = described()
    acl_broker.process.restart()
    assert described() == before
    answers = run_as(acl_broker, "alice", lambda c: _answers(c, "denied"))
    assert set(answers.values()) == {TOPIC_DENIED, GROUP_DENIED, TXN_DENIED}
