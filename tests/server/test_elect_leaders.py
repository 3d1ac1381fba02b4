"""ElectLeaders (API 43) against a real single-node broker over a socket: with RF=1 every
partition already has its preferred leader, and no replica can be elected uncleanly."""

from __future__ import annotations

import pytest
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

ELECT_LEADERS = 43
EL = m.ElectLeadersRequest


def request(topic_partitions: dict[str, list[int]] | None,
            election_type: int = 0) -> m.ElectLeadersRequest:
    asked = (None if topic_partitions is None else
             [EL.TopicPartitions(topic=t, partitions=ps) for t, ps in topic_partitions.items()])
    return EL(election_type=election_type, topic_partitions=asked, timeout_ms=10_000)


def outcomes(response: m.ElectLeadersResponse) -> dict[tuple[str, int], ErrorCode]:
    return {(r.topic, p.partition_id): ErrorCode(p.error_code)
            for r in response.replica_election_results for p in r.partition_result}


@pytest.fixture(scope="module")
def client(odradek_broker):
    with RawClient(odradek_broker.host, odradek_broker.port) as raw:
        raw.create_topic("elect-me", partitions=2)
        yield raw


def test_elect_leaders_is_advertised_at_versions_0_to_2(client):
    resp = client.call(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert versions[ELECT_LEADERS] == (0, 2)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_preferred_election_is_not_needed_on_one_node(client, version: int):
    resp = client.call(ELECT_LEADERS, version, request({"elect-me": [0, 1], "missing": [0]}))
    assert outcomes(resp) == {
        ("elect-me", 0): ErrorCode.ELECTION_NOT_NEEDED,
        ("elect-me", 1): ErrorCode.ELECTION_NOT_NEEDED,
        ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    if version >= 1:
        assert resp.error_code == ErrorCode.NONE
    unknown = [p for r in resp.replica_election_results if r.topic == "missing"
               for p in r.partition_result]
    assert unknown[0].error_message == "No such topic as missing"


def test_unknown_partitions_are_unknown(client):
    resp = client.call(ELECT_LEADERS, 2, request({"elect-me": [7]}))
    assert outcomes(resp) == {("elect-me", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_unclean_election_is_not_needed_for_partitions_with_a_leader(client):
    resp = client.call(ELECT_LEADERS, 2, request({"elect-me": [0]}, election_type=1))
    assert outcomes(resp) == {("elect-me", 0): ErrorCode.ELECTION_NOT_NEEDED}


def test_electing_every_partition_lists_only_those_that_needed_an_election(client):
    resp = client.call(ELECT_LEADERS, 2, request(None))
    assert resp.error_code == ErrorCode.NONE
    assert outcomes(resp) == {}
    assert "elect-me" in {r.topic for r in resp.replica_election_results}


def test_an_unknown_election_type_fails_the_whole_request(client):
    resp = client.call(ELECT_LEADERS, 2, request({"elect-me": [0]}, election_type=5))
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    assert outcomes(resp) == {("elect-me", 0): ErrorCode.INVALID_REQUEST}


def test_an_empty_request_elects_nothing(client):
    resp = client.call(ELECT_LEADERS, 2, request({}))
    assert resp.error_code == ErrorCode.NONE and resp.replica_election_results == []
