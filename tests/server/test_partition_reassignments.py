"""AlterPartitionReassignments (45) and ListPartitionReassignments (46) against a real
single-node broker over a socket (node 1; the broker forwards both to its controller). On one
node a reassignment can only reorder or keep the replica set, so it completes at once; the
errors are Kafka's."""

from __future__ import annotations

import pytest
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

ALTER, LIST = 45, 46
BROKER_2_UNREGISTERED = ("The manual partition assignment includes broker 2, but no such broker "
                         "is registered.")
BROKER_1_TWICE = "The manual partition assignment includes the broker 1 more than once."
APR = m.AlterPartitionReassignmentsRequest
LPR = m.ListPartitionReassignmentsRequest


def alter(client: RawClient, topics: dict[str, dict[int, list[int] | None]]
          ) -> m.AlterPartitionReassignmentsResponse:
    return client.call(ALTER, 0, APR(timeout_ms=10_000, topics=[
        APR.ReassignableTopic(name=name, partitions=[
            APR.ReassignablePartition(partition_index=p, replicas=replicas)
            for p, replicas in partitions.items()])
        for name, partitions in topics.items()]))


def outcomes(response: m.AlterPartitionReassignmentsResponse
             ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    assert response.error_code == ErrorCode.NONE
    return {(t.name, p.partition_index): (ErrorCode(p.error_code), p.error_message)
            for t in response.responses for p in t.partitions}


@pytest.fixture(scope="module")
def client(odradek_broker):
    with RawClient(odradek_broker.host, odradek_broker.port) as raw:
        raw.create_topic("moving", partitions=2)
        yield raw


def test_both_apis_are_advertised_at_version_0(client):
    resp = client.call(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert versions[ALTER] == (0, 0) and versions[LIST] == (0, 0)


def test_nothing_is_in_progress(client):
    resp = client.call(LIST, 0, LPR(timeout_ms=10_000, topics=None))
    assert (resp.error_code, resp.topics) == (ErrorCode.NONE, [])
    resp = client.call(LIST, 0, LPR(timeout_ms=10_000, topics=[
        LPR.ListPartitionReassignmentsTopics(name="moving", partition_indexes=[0, 1, 9]),
        LPR.ListPartitionReassignmentsTopics(name="missing", partition_indexes=[0])]))
    assert (resp.error_code, resp.topics) == (ErrorCode.NONE, [])


def test_the_same_replicas_are_accepted_and_nothing_starts(client):
    assert outcomes(alter(client, {"moving": {0: [1]}})) == {
        ("moving", 0): (ErrorCode.NONE, None)}
    resp = client.call(LIST, 0, LPR(timeout_ms=10_000, topics=None))
    assert resp.topics == []


def test_bad_targets_get_kafkas_errors(client):
    resp = alter(client, {"moving": {0: [1, 2], 1: [1, 1], 7: [1]}, "missing": {0: [1]}})
    invalid = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert outcomes(resp) == {
        ("moving", 0): (invalid, BROKER_2_UNREGISTERED),
        ("moving", 1): (invalid, BROKER_1_TWICE),
        ("moving", 7): (unknown, "Unable to find partition moving:7."),
        ("missing", 0): (unknown, "Unable to find a topic named missing."),
    }
    resp = alter(client, {"moving": {0: []}})
    assert outcomes(resp) == {("moving", 0): (
        invalid, "The manual partition assignment includes an empty replica list.")}


def test_cancelling_without_a_reassignment(client):
    assert outcomes(alter(client, {"moving": {1: None}})) == {
        ("moving", 1): (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                        "No partition reassignment is in progress.")}


def test_the_partition_is_unchanged_after_the_refusals(client):
    resp = client.call(3, 12, m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(name="moving")]))
    (topic,) = resp.topics
    assert sorted((p.partition_index, list(p.replica_nodes), list(p.isr_nodes), p.leader_id)
                  for p in topic.partitions) == [(0, [1], [1], 1), (1, [1], [1], 1)]
