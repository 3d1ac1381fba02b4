"""The Kafka messages Raft exchanges, built and unpacked for the one metadata partition.

Versions: Vote v1 (names the voter asked and both directory ids, KIP-853), BeginQuorumEpoch v1
(with the leader's endpoints: a voter that does not know the leader yet can follow it),
EndQuorumEpoch v0, Fetch v17 (ReplicaState, topic id, the fetcher's directory id; the answer
names the leader's endpoint, so an observer that asked a bootstrap server finds the leader),
FetchSnapshot v0, DescribeQuorum v2 (directory ids and the voters' listeners); AddRaftVoter,
RemoveRaftVoter and UpdateRaftVoter v0.
`single_partition` returns None for a request that is not about exactly the metadata
partition; the client answers it INVALID_REQUEST.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.raft.config import METADATA_PARTITION, METADATA_TOPIC, METADATA_TOPIC_ID
from odradek.raft.voters import NO_DIRECTORY_ID, directory_id_or_none

# The version each API is encoded at (the simulation's network and the network layer).
API_VERSIONS: dict[type[m.Message], int] = {
    m.VoteRequest: 1, m.VoteResponse: 1,
    m.BeginQuorumEpochRequest: 1, m.BeginQuorumEpochResponse: 1,
    m.EndQuorumEpochRequest: 0, m.EndQuorumEpochResponse: 0,
    m.FetchRequest: 17, m.FetchResponse: 17,
    m.FetchSnapshotRequest: 0, m.FetchSnapshotResponse: 0,
    m.DescribeQuorumRequest: 2, m.DescribeQuorumResponse: 2,
    m.UpdateRaftVoterRequest: 0, m.UpdateRaftVoterResponse: 0,
}


NO_LEADER = -1


def single_partition(message: Any) -> Any | None:
    """The one partition entry of a Raft request/response about the metadata partition."""
    topics = getattr(message, "topics", None)
    if topics is None:
        topics = getattr(message, "responses", None)
    if not topics or len(topics) != 1:
        return None
    topic = topics[0]
    name = getattr(topic, "topic_name", None)
    if name is None:
        name = getattr(topic, "name", None)  # FetchSnapshot
    if name is None:  # Fetch v13+: by topic id
        if getattr(topic, "topic_id", None) != METADATA_TOPIC_ID:
            return None
    elif name != METADATA_TOPIC:
        return None
    partitions = topic.partitions or []
    if len(partitions) != 1:
        return None
    partition = partitions[0]
    index = getattr(partition, "partition_index", None)
    if index is None:
        index = getattr(partition, "partition", getattr(partition, "index", None))
    return partition if index == METADATA_PARTITION else None


def leader_or_none(leader_id: int) -> int | None:
    return None if leader_id < 0 else leader_id


# -- Vote
def vote_request(cluster_id: str, epoch: int, candidate_id: int, last_epoch: int,
                 last_offset: int, voter_id: int = -1,
                 voter_directory_id: uuid.UUID | None = None,
                 candidate_directory_id: uuid.UUID | None = None) -> m.VoteRequest:
    """`voter_id`/`voter_directory_id`: the voter asked (v1); -1 when not named."""
    return m.VoteRequest(cluster_id=cluster_id, voter_id=voter_id, topics=[m.VoteRequest.TopicData(
        topic_name=METADATA_TOPIC, partitions=[m.VoteRequest.PartitionData(
            partition_index=METADATA_PARTITION, replica_epoch=epoch, replica_id=candidate_id,
            replica_directory_id=candidate_directory_id or NO_DIRECTORY_ID,
            voter_directory_id=voter_directory_id or NO_DIRECTORY_ID,
            last_offset_epoch=last_epoch, last_offset=last_offset)])])


def vote_response(error: ErrorCode, leader_id: int | None, epoch: int,
                  granted: bool) -> m.VoteResponse:
    return m.VoteResponse(topics=[m.VoteResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[m.VoteResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error.code,
            leader_id=NO_LEADER if leader_id is None else leader_id, leader_epoch=epoch,
            vote_granted=granted)])])


# -- BeginQuorumEpoch
def begin_epoch_request(cluster_id: str, epoch: int, leader_id: int, voter_id: int = -1,
                        voter_directory_id: uuid.UUID | None = None,
                        leader_endpoints: Mapping[str, tuple[str, int]] | None = None,
                        ) -> m.BeginQuorumEpochRequest:
    R = m.BeginQuorumEpochRequest
    return R(cluster_id=cluster_id, voter_id=voter_id, topics=[
        R.TopicData(topic_name=METADATA_TOPIC, partitions=[
            R.PartitionData(partition_index=METADATA_PARTITION,
                            voter_directory_id=voter_directory_id or NO_DIRECTORY_ID,
                            leader_id=leader_id, leader_epoch=epoch)])],
        leader_endpoints=listeners_of(leader_endpoints or {}, R.LeaderEndpoint))


def begin_epoch_response(error: ErrorCode, leader_id: int | None,
                         epoch: int) -> m.BeginQuorumEpochResponse:
    return m.BeginQuorumEpochResponse(topics=[m.BeginQuorumEpochResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[m.BeginQuorumEpochResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error.code,
            leader_id=NO_LEADER if leader_id is None else leader_id, leader_epoch=epoch)])])


# -- EndQuorumEpoch
def end_epoch_request(cluster_id: str, epoch: int, leader_id: int,
                      preferred_successors: list[int]) -> m.EndQuorumEpochRequest:
    return m.EndQuorumEpochRequest(cluster_id=cluster_id, topics=[
        m.EndQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[
            m.EndQuorumEpochRequest.PartitionData(
                partition_index=METADATA_PARTITION, leader_id=leader_id, leader_epoch=epoch,
                preferred_successors=list(preferred_successors))])])


def end_epoch_response(error: ErrorCode, leader_id: int | None,
                       epoch: int) -> m.EndQuorumEpochResponse:
    return m.EndQuorumEpochResponse(topics=[m.EndQuorumEpochResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[m.EndQuorumEpochResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error.code,
            leader_id=NO_LEADER if leader_id is None else leader_id, leader_epoch=epoch)])])


# -- Fetch
def fetch_request(cluster_id: str, replica_id: int, epoch: int, fetch_offset: int,
                  last_fetched_epoch: int, max_wait_ms: int,
                  max_bytes: int, directory_id: uuid.UUID | None = None) -> m.FetchRequest:
    return m.FetchRequest(
        cluster_id=cluster_id, replica_state=m.FetchRequest.ReplicaState(replica_id=replica_id),
        max_wait_ms=max_wait_ms, min_bytes=0, max_bytes=max_bytes,
        topics=[m.FetchRequest.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[
            m.FetchRequest.FetchPartition(
                partition=METADATA_PARTITION, current_leader_epoch=epoch,
                fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch,
                partition_max_bytes=max_bytes,
                replica_directory_id=directory_id or NO_DIRECTORY_ID)])])


def fetch_directory_id(partition: Any) -> uuid.UUID | None:
    return directory_id_or_none(getattr(partition, "replica_directory_id", None))


def fetch_replica_id(request: m.FetchRequest) -> int:
    state = request.replica_state
    return -1 if state is None else state.replica_id


def fetch_response(error: ErrorCode, leader_id: int | None, epoch: int, high_watermark: int,
                   records: bytes = b"", diverging: tuple[int, int] | None = None,
                   top_level_error: ErrorCode = ErrorCode.NONE,
                   snapshot_id: tuple[int, int] | None = None,
                   leader_endpoint: tuple[str, int] | None = None) -> m.FetchResponse:
    """`diverging` and `snapshot_id` are (end offset, epoch); `leader_endpoint` the leader's
    (host, port) on the controller listener, sent when the leader is known (NodeEndpoints)."""
    partition = m.FetchResponse.PartitionData(
        partition_index=METADATA_PARTITION, error_code=error.code, high_watermark=high_watermark,
        current_leader=m.FetchResponse.LeaderIdAndEpoch(
            leader_id=NO_LEADER if leader_id is None else leader_id, leader_epoch=epoch),
        records=records)
    if diverging is not None:
        partition.diverging_epoch = m.FetchResponse.EpochEndOffset(epoch=diverging[1],
                                                                   end_offset=diverging[0])
    if snapshot_id is not None:
        partition.snapshot_id = m.FetchResponse.SnapshotId(end_offset=snapshot_id[0],
                                                           epoch=snapshot_id[1])
    response = m.FetchResponse(error_code=top_level_error.code, responses=[
        m.FetchResponse.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID,
                                               partitions=[partition])])
    if leader_id is not None and leader_endpoint is not None:
        response.node_endpoints = [m.FetchResponse.NodeEndpoint(
            node_id=leader_id, host=leader_endpoint[0], port=leader_endpoint[1])]
    return response


def fetch_response_endpoints(response: m.FetchResponse) -> dict[int, tuple[str, int]]:
    return {e.node_id: (e.host, e.port) for e in (response.node_endpoints or ())}


# -- FetchSnapshot
def fetch_snapshot_request(cluster_id: str, replica_id: int, epoch: int,
                           snapshot_id: tuple[int, int], position: int,
                           max_bytes: int) -> m.FetchSnapshotRequest:
    """`snapshot_id` is (end offset, epoch)."""
    R = m.FetchSnapshotRequest
    return R(cluster_id=cluster_id, replica_id=replica_id, max_bytes=max_bytes, topics=[
        R.TopicSnapshot(name=METADATA_TOPIC, partitions=[R.PartitionSnapshot(
            partition=METADATA_PARTITION, current_leader_epoch=epoch,
            snapshot_id=R.SnapshotId(end_offset=snapshot_id[0], epoch=snapshot_id[1]),
            position=position)])])


def fetch_snapshot_response(error: ErrorCode, leader_id: int | None, epoch: int,
                            snapshot_id: tuple[int, int] = (-1, -1), size: int = 0,
                            position: int = 0,
                            records: bytes = b"") -> m.FetchSnapshotResponse:
    R = m.FetchSnapshotResponse
    return R(error_code=0, topics=[R.TopicSnapshot(name=METADATA_TOPIC, partitions=[
        R.PartitionSnapshot(
            index=METADATA_PARTITION, error_code=error.code,
            snapshot_id=R.SnapshotId(end_offset=snapshot_id[0], epoch=snapshot_id[1]),
            current_leader=R.LeaderIdAndEpoch(
                leader_id=NO_LEADER if leader_id is None else leader_id, leader_epoch=epoch),
            size=size, position=position, unaligned_records=records)])])


def top_level_error(response_cls: type[m.Message], error: ErrorCode) -> m.Message:
    """An answer that is only an error (bad cluster id, not the metadata partition)."""
    if response_cls is m.FetchResponse:
        return m.FetchResponse(error_code=error.code, responses=[])
    return response_cls(error_code=error.code, topics=[])


# -- DescribeQuorum
def listeners_of(endpoints: Mapping[str, tuple[str, int]], cls: type) -> list[Any]:
    """A voter's endpoints as the `Listeners` entries of a request or response struct."""
    return [cls(name=name, host=host, port=port) for name, (host, port) in endpoints.items()]


def describe_quorum_request() -> m.DescribeQuorumRequest:
    return m.DescribeQuorumRequest(topics=[m.DescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC,
        partitions=[m.DescribeQuorumRequest.PartitionData(partition_index=METADATA_PARTITION)])])


def describe_quorum_as_of(response: m.Message, version: int) -> m.Message:
    """A DescribeQuorum answer cut to what `version` has: before v2, no directory ids and no
    nodes (the fields would not encode)."""
    if version >= 2 or not isinstance(response, m.DescribeQuorumResponse):
        return response
    response.nodes = []
    for topic in response.topics or ():
        for partition in topic.partitions or ():
            for replica in (partition.current_voters or []) + (partition.observers or []):
                replica.replica_directory_id = NO_DIRECTORY_ID
    return response
