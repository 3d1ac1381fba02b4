"""The KRaft quorum's APIs: Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum, the Fetch
and FetchSnapshot of `__cluster_metadata`, and AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter, served on controller listeners and answered by this node's Raft client
(through `MetadataQuorum.handle_request`, which parks a long-polling Fetch).

DescribeQuorum on a broker listener is forwarded to the active controller (server.forwarding), as
Kafka does; when it cannot be (no leader known before the forwarding deadline), a voter answers
it itself (a follower with NOT_LEADER_OR_FOLLOWER and the leader it knows, as Raft answers it)
and a node that is not a voter answers NOT_CONTROLLER.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.raft import messages as raft_messages
from odradek.security.acl import AclOperation

if TYPE_CHECKING:
    from odradek.controller.quorum import MetadataQuorum
    from odradek.server.network import RequestContext

# Fetch v15 moved the replica id from the request's body into ReplicaState.
_REPLICA_STATE_VERSION = 15


_NO_TOPICS = (m.AddRaftVoterResponse, m.RemoveRaftVoterResponse, m.UpdateRaftVoterResponse)


def _denied(response_cls: type[m.Message]) -> m.Message:
    """CLUSTER_AUTHORIZATION_FAILED: the quorum's own APIs need CLUSTER_ACTION (voters and
    observers), DescribeQuorum DESCRIBE and voter changes ALTER on the cluster, as Kafka."""
    if response_cls in _NO_TOPICS:
        return response_cls(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return raft_messages.top_level_error(response_cls, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


class RaftApis:
    def __init__(self, quorum: MetadataQuorum) -> None:
        self.quorum = quorum

    async def vote(self, ctx: RequestContext, req: m.VoteRequest):
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return _denied(m.VoteResponse)
        return await self.quorum.handle_request(-1, req)

    async def begin_quorum_epoch(self, ctx: RequestContext, req: m.BeginQuorumEpochRequest):
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return _denied(m.BeginQuorumEpochResponse)
        return await self.quorum.handle_request(-1, req)

    async def end_quorum_epoch(self, ctx: RequestContext, req: m.EndQuorumEpochRequest):
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return _denied(m.EndQuorumEpochResponse)
        return await self.quorum.handle_request(-1, req)

    async def fetch(self, ctx: RequestContext, req: m.FetchRequest):
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return _denied(m.FetchResponse)
        if ctx.api_version < _REPLICA_STATE_VERSION:
            req.replica_state = m.FetchRequest.ReplicaState(replica_id=req.replica_id)
        replica_id = raft_messages.fetch_replica_id(req)
        return await self.quorum.handle_request(replica_id, req)

    async def fetch_snapshot(self, ctx: RequestContext, req: m.FetchSnapshotRequest):
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return _denied(m.FetchSnapshotResponse)
        return await self.quorum.handle_request(req.replica_id, req)

    async def describe_quorum(self, ctx: RequestContext, req: m.DescribeQuorumRequest):
        if not ctx.authorize_cluster(AclOperation.DESCRIBE):
            return _denied(m.DescribeQuorumResponse)
        return raft_messages.describe_quorum_as_of(
            await self.quorum.handle_request(-1, req), ctx.api_version)

    # KIP-853: answered by the leader once the new voter set is committed (parked until then).
    async def add_raft_voter(self, ctx: RequestContext, req: m.AddRaftVoterRequest):
        if not ctx.authorize_cluster(AclOperation.ALTER):
            return _denied(m.AddRaftVoterResponse)
        return await self.quorum.handle_request(-1, req)

    async def remove_raft_voter(self, ctx: RequestContext, req: m.RemoveRaftVoterRequest):
        if not ctx.authorize_cluster(AclOperation.ALTER):
            return _denied(m.RemoveRaftVoterResponse)
        return await self.quorum.handle_request(-1, req)

    async def update_raft_voter(self, ctx: RequestContext, req: m.UpdateRaftVoterRequest):
        if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return _denied(m.UpdateRaftVoterResponse)
        return await self.quorum.handle_request(req.voter_id, req)

    async def describe_quorum_on_broker(self, ctx: RequestContext,
                                        req: m.DescribeQuorumRequest):
        if not ctx.authorize_cluster(AclOperation.DESCRIBE):
            return _denied(m.DescribeQuorumResponse)
        if self.quorum.node_id not in self.quorum.voters:
            return raft_messages.top_level_error(m.DescribeQuorumResponse,
                                                 ErrorCode.NOT_CONTROLLER)
        return raft_messages.describe_quorum_as_of(
            await self.quorum.handle_request(-1, req), ctx.api_version)
