"""KRaft's Raft (KIP-595, voters as data from KIP-853), sans-I/O.

`RaftClient` is one node of the `__cluster_metadata` quorum as a state machine: messages in
(`handle_request`, `handle_response`), messages out (`poll`), time passed in as `now_ms`. It owns
no socket, task, thread or timer, so the same code runs under the asyncio network layer and
under the deterministic simulation in `tests/raft`.

Modules, one job each: `config` (timeouts, the metadata partition's names), `voters` (the voter
set as data), `quorum_state` (the election state of one node and its `quorum-state` file),
`leader_state` (what a leader tracks of its replicas: high watermark, check-quorum,
DescribeQuorum), `log` (what Raft needs of the replicated log, over the storage `Log` or in
memory), `snapshot` (KIP-630 snapshots: the file format, the stores, retention), `requests`
(one in-flight request per peer, timeouts and backoff), `messages` (the Kafka messages Raft
exchanges), `client` (the protocol).
"""

from odradek.raft.client import (
    CommittedBatch,
    CommittedSnapshot,
    OutboundReply,
    OutboundRequest,
    RaftClient,
)
from odradek.raft.config import RaftConfig
from odradek.raft.log import MemoryRaftLog, RaftLog, StorageRaftLog
from odradek.raft.quorum_state import (
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    QuorumStateStore,
)
from odradek.raft.snapshot import FileSnapshotStore, MemorySnapshotStore, OffsetAndEpoch
from odradek.raft.voters import VoterSet

__all__ = [
    "CommittedBatch",
    "CommittedSnapshot",
    "ElectionState",
    "FileQuorumStateStore",
    "FileSnapshotStore",
    "MemoryQuorumStateStore",
    "MemoryRaftLog",
    "MemorySnapshotStore",
    "OffsetAndEpoch",
    "OutboundReply",
    "OutboundRequest",
    "QuorumStateStore",
    "RaftClient",
    "RaftConfig",
    "RaftLog",
    "StorageRaftLog",
    "VoterSet",
]
