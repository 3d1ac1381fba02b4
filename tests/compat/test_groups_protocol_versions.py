"""The group APIs at old and new versions, over a real socket: the handlers' translation of
each wire version (fields that appear, disappear or change meaning between versions)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from broker_process import BrokerProcess

from odradek.client import Admin, NewTopic
from odradek.client.connection import Connection
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

SUBSCRIPTION = m.encode_versioned(m.ConsumerProtocolSubscription(topics=["t"]), 0)
J = m.JoinGroupRequest
OC = m.OffsetCommitRequest
OF = m.OffsetFetchRequest


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("group-versions"),
                           overrides={"offsets.topic.num.partitions": "2"}).start()
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("t", num_partitions=2, replication_factor=1)])
    yield broker
    broker.stop()


def scenario(broker, body) -> None:
    async def run() -> None:
        connection = await Connection.open(broker.host, broker.port, client_id="versions")
        try:
            await body(connection)
        finally:
            await connection.close()

    asyncio.run(asyncio.wait_for(run(), 60))


def _group() -> str:
    return f"v-{uuid.uuid4().hex[:8]}"


def _join(group: str, member_id: str = "", **kwargs) -> m.JoinGroupRequest:
    return J(group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
             member_id=member_id, protocol_type="consumer",
             protocols=[J.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)],
             **kwargs)


def test_find_coordinator_versions(broker):
    async def body(c: Connection) -> None:
        v0 = await c.send(m.FindCoordinatorRequest(key="g"), api_version=0)
        assert (v0.error_code, v0.node_id, v0.port) == (0, 1, broker.port)
        v3 = await c.send(m.FindCoordinatorRequest(key="g", key_type=0), api_version=3)
        assert (v3.error_code, v3.error_message, v3.host) == (0, None, broker.host)
        v4 = await c.send(m.FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]),
                          api_version=4)
        assert [(x.key, x.node_id, x.error_code) for x in v4.coordinators] == [
            ("a", 1, 0), ("b", 1, 0)]
        txn = await c.send(m.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]),
                           api_version=5)
        # The transaction coordinator: __transaction_state's leader for the id's partition.
        assert [(x.key, x.node_id, x.error_code) for x in txn.coordinators] == [("tx", 1, 0)]
        bad = await c.send(m.FindCoordinatorRequest(key="x", key_type=7), api_version=3)
        assert bad.error_code == ErrorCode.INVALID_REQUEST

    scenario(broker, body)


def test_old_join_sync_heartbeat_leave(broker):
    async def body(c: Connection) -> None:
        group = _group()
        # v2-v3 (Kafka 4.0 takes JoinGroup from v2): no MEMBER_ID_REQUIRED round trip.
        joined = await c.send(J(group_id=group, session_timeout_ms=10_000, member_id="",
                                rebalance_timeout_ms=10_000, protocol_type="consumer",
                                protocols=[J.JoinGroupRequestProtocol(name="range",
                                                                      metadata=SUBSCRIPTION)]),
                              api_version=2)
        assert joined.error_code == 0 and joined.generation_id == 1
        assert joined.member_id.startswith("versions-") and joined.protocol_name == "range"
        assert [member.metadata for member in joined.members] == [SUBSCRIPTION]
        synced = await c.send(m.SyncGroupRequest(
            group_id=group, generation_id=1, member_id=joined.member_id,
            assignments=[m.SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=joined.member_id, assignment=b"\x00\x00abc")]), api_version=0)
        assert (synced.error_code, synced.assignment) == (0, b"\x00\x00abc")
        beat = await c.send(m.HeartbeatRequest(group_id=group, generation_id=1,
                                               member_id=joined.member_id), api_version=0)
        assert beat.error_code == 0
        left = await c.send(m.LeaveGroupRequest(group_id=group, member_id=joined.member_id),
                            api_version=0)
        assert left.error_code == 0
        gone = await c.send(m.LeaveGroupRequest(group_id=group, member_id=joined.member_id),
                            api_version=2)
        assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID

    scenario(broker, body)


def test_new_join_sync_and_batch_leave(broker):
    async def body(c: Connection) -> None:
        group = _group()
        first = await c.send(_join(group, reason="start"), api_version=9)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = await c.send(_join(group, first.member_id), api_version=9)
        assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
        assert joined.skip_assignment is False
        mismatch = await c.send(m.SyncGroupRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
            protocol_type="consumer", protocol_name="roundrobin", assignments=[]),
            api_version=5)
        assert mismatch.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        synced = await c.send(m.SyncGroupRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
            protocol_type="consumer", protocol_name="range", assignments=[]), api_version=5)
        assert (synced.error_code, synced.protocol_name, synced.assignment) == (0, "range", b"")
        left = await c.send(m.LeaveGroupRequest(group_id=group, members=[
            m.LeaveGroupRequest.MemberIdentity(member_id=joined.member_id, reason="bye"),
            m.LeaveGroupRequest.MemberIdentity(member_id="nobody")]), api_version=5)
        assert left.error_code == 0
        assert [(x.member_id, x.error_code) for x in left.members] == [
            (joined.member_id, 0), ("nobody", ErrorCode.UNKNOWN_MEMBER_ID)]

    scenario(broker, body)


def test_offset_commit_and_fetch_versions(broker):
    async def body(c: Connection) -> None:
        group = _group()

        def commit(offset: int, retention_time_ms: int = -1, **partition) -> OC:
            return OC(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                      retention_time_ms=retention_time_ms, topics=[OC.OffsetCommitRequestTopic(name="t", partitions=[
                          OC.OffsetCommitRequestPartition(partition_index=0,
                                                          committed_offset=offset,
                                                          committed_metadata="m", **partition),
                          OC.OffsetCommitRequestPartition(partition_index=9,
                                                          committed_offset=offset)])])

        # Kafka 4.0 takes OffsetCommit from v2.
        first = await c.send(commit(3), api_version=2)
        assert [p.error_code for p in first.topics[0].partitions] == [
            0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        v2 = await c.send(commit(4, retention_time_ms=60_000), api_version=2)
        assert v2.topics[0].partitions[0].error_code == 0
        v8 = await c.send(commit(5, committed_leader_epoch=3), api_version=8)
        assert v8.topics[0].partitions[0].error_code == 0

        fetch_v1 = await c.send(OF(group_id=group, topics=[
            OF.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]), api_version=1)
        assert [(p.partition_index, p.committed_offset, p.metadata)
                for p in fetch_v1.topics[0].partitions] == [(0, 5, "m"), (1, -1, "")]
        fetch_v7 = await c.send(OF(group_id=group, topics=None, require_stable=True),
                                api_version=7)
        (partition,) = fetch_v7.topics[0].partitions
        assert (fetch_v7.error_code, partition.committed_offset,
                partition.committed_leader_epoch) == (0, 5, 3)
        fetch_v9 = await c.send(OF(groups=[
            OF.OffsetFetchRequestGroup(group_id=group, topics=None),
            OF.OffsetFetchRequestGroup(group_id="never-committed", topics=[
                OF.OffsetFetchRequestTopics(name="t", partition_indexes=[1])])]), api_version=9)
        assert [(g.group_id, [(t.name, [p.committed_offset for p in t.partitions])
                              for t in g.topics]) for g in fetch_v9.groups] == [
            (group, [("t", [5])]), ("never-committed", [("t", [-1])])]

        deleted = await c.send(m.OffsetDeleteRequest(group_id=group, topics=[
            m.OffsetDeleteRequest.OffsetDeleteRequestTopic(name="t", partitions=[
                m.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]),
            api_version=0)
        assert deleted.error_code == 0 and deleted.topics[0].partitions[0].error_code == 0
        missing = await c.send(m.OffsetDeleteRequest(group_id=group, topics=[]), api_version=0)
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND  # its last offset went

    scenario(broker, body)


def test_describe_list_delete_versions(broker):
    async def body(c: Connection) -> None:
        group = _group()
        first = await c.send(_join(group), api_version=5)
        joined = await c.send(_join(group, first.member_id, group_instance_id=None),
                              api_version=5)
        described = await c.send(m.DescribeGroupsRequest(groups=[group, "nope"],
                                                         include_authorized_operations=True),
                                 api_version=5)
        live, dead = described.groups
        assert (live.group_state, live.protocol_type, live.protocol_data) == (
            "CompletingRebalance", "consumer", "")
        assert [x.member_id for x in live.members] == [joined.member_id]
        assert live.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
        assert (dead.error_code, dead.group_state) == (0, "Dead")
        old = await c.send(m.DescribeGroupsRequest(groups=[group]), api_version=0)
        assert old.groups[0].group_state == "CompletingRebalance"

        listed = await c.send(m.ListGroupsRequest(), api_version=0)
        assert (group, "consumer") in {(g.group_id, g.protocol_type) for g in listed.groups}
        filtered = await c.send(m.ListGroupsRequest(states_filter=["completingrebalance"]),
                                api_version=4)
        assert [g.group_state for g in filtered.groups if g.group_id == group] == [
            "CompletingRebalance"]
        typed = await c.send(m.ListGroupsRequest(types_filter=["consumer"]), api_version=5)
        assert typed.groups == []  # classic groups only

        busy = await c.send(m.DeleteGroupsRequest(groups_names=[group, "nope"]), api_version=0)
        assert [(r.group_id, r.error_code) for r in busy.results] == [
            (group, ErrorCode.NON_EMPTY_GROUP), ("nope", ErrorCode.GROUP_ID_NOT_FOUND)]

    scenario(broker, body)

