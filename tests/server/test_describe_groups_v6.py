"""DescribeGroups of groups that are not classic groups, as Kafka 4.0's GroupMetadataManager
(KIP-1043): v6 answers GROUP_ID_NOT_FOUND, "Group G not found." for an absent group and
"Group G is not a classic group." for a consumer-protocol group; v0-v5 answer Dead with no
error. ListGroups v5 filters by type."""

from __future__ import annotations

import time
import uuid

import pytest
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode


def wait_for(condition, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.fixture(scope="module")
def groups(odradek_broker):
    """A consumer-protocol group with one member and a classic group with committed offsets."""
    consumer_group, classic_group = (f"cg-{uuid.uuid4().hex[:6]}", f"classic-{uuid.uuid4().hex[:6]}")
    with RawClient(odradek_broker.host, odradek_broker.port) as client:
        def coordinator_ready():
            found = client.call(10, 4, m.FindCoordinatorRequest(
                key_type=0, coordinator_keys=[consumer_group, classic_group]))
            return all(c.error_code == ErrorCode.NONE for c in found.coordinators)

        assert wait_for(coordinator_ready), "no group coordinator"
        joined = client.call(68, 0, m.ConsumerGroupHeartbeatRequest(
            group_id=consumer_group, member_id=uuid.uuid4().hex, member_epoch=0,
            rebalance_timeout_ms=30000, subscribed_topic_names=["t"], topic_partitions=[]))
        assert joined.error_code == ErrorCode.NONE
        committed = client.call(8, 2, m.OffsetCommitRequest(
            group_id=classic_group, generation_id_or_member_epoch=-1, member_id="",
            topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(
                name="__consumer_offsets", partitions=[
                    m.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0)])]))
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
    return consumer_group, classic_group


def describe(broker, version: int, *group_ids: str):
    with RawClient(broker.host, broker.port) as client:
        return {g.group_id: g for g in client.call(15, version, m.DescribeGroupsRequest(
            groups=list(group_ids))).groups}


def test_v6_names_absent_and_consumer_groups(odradek_broker, groups):
    consumer_group, classic_group = groups
    absent = f"absent-{uuid.uuid4().hex[:6]}"
    described = describe(odradek_broker, 6, consumer_group, classic_group, absent)
    assert (described[absent].error_code, described[absent].error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {absent} not found.")
    assert (described[consumer_group].error_code, described[consumer_group].error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {consumer_group} is not a classic group.")
    assert described[consumer_group].members == []
    classic = described[classic_group]
    assert (classic.error_code, classic.group_state) == (ErrorCode.NONE, "Empty")


@pytest.mark.parametrize("version", [0, 5])
def test_older_versions_answer_dead(odradek_broker, groups, version):
    consumer_group, _ = groups
    absent = f"absent-{uuid.uuid4().hex[:6]}"
    described = describe(odradek_broker, version, consumer_group, absent)
    for group_id in (consumer_group, absent):
        assert (described[group_id].error_code, described[group_id].group_state) == (
            ErrorCode.NONE, "Dead")


def test_list_groups_v5_type_filter(odradek_broker, groups):
    consumer_group, classic_group = groups
    with RawClient(odradek_broker.host, odradek_broker.port) as client:
        def listed(*types: str):
            response = client.call(16, 5, m.ListGroupsRequest(types_filter=list(types)))
            assert response.error_code == ErrorCode.NONE
            return {g.group_id: (g.group_type, g.protocol_type) for g in response.groups}

        consumer_only = listed("consumer")
        assert consumer_only[consumer_group] == ("consumer", "consumer")
        assert classic_group not in consumer_only
        assert listed("Classic")[classic_group] == ("classic", "")
        assert consumer_group not in listed("classic")
