"""One node of the KRaft quorum (Kafka's KafkaRaftClient), sans-I/O.

Inputs: `handle_request(sender, request, now_ms, request_id)` answers a request (or parks a
Fetch with nothing to return: its answer comes out of a later `poll` as an `OutboundReply`),
`handle_response(sender, response, now_ms, correlation_id)` takes the answer to a request this
node sent, `handle_send_failure` says a request could not be delivered, and `append` writes
records on the leader. Output: `poll(now_ms)` runs the timers and returns the messages to send
(`OutboundRequest`s, each answered through `handle_response` with its correlation id, and
`OutboundReply`s to parked Fetches); `next_deadline_ms(now_ms)` says when to poll at the latest;
`take_committed()` hands out, in offset order, the batches the high watermark has passed. The
driver calls `poll` after every input.

The protocol, as Kafka (KIP-595):
- Election: a voter that hears from no leader for its randomized election timeout (or from its
  leader for the fetch timeout) becomes a candidate of the next epoch and asks every voter with
  Vote. A voter grants at most one candidate per epoch, and only one whose log (last epoch, end
  offset) is at least its own. A majority of grants makes the leader, which writes a
  LeaderChange control record and tells the voters with BeginQuorumEpoch. A lost election
  backs off (exponential, jittered) before the next epoch.
- Replication is pulled: followers and observers Fetch(fetch offset, last fetched epoch); the
  leader answers a fetch whose epoch does not match its log with a diverging epoch, and the
  follower truncates to it. The leader's high watermark is the offset a majority of voters has
  flushed, moved only once the current epoch's LeaderChange is in it; a follower's is the
  leader's, capped at its own log end.
- A leader that no majority fetched from for 1.5 x fetch timeout resigns (check-quorum); a
  leader that shuts down resigns with EndQuorumEpoch, so the others elect at once.
- Snapshots (KIP-630): the state machine above writes snapshots of committed state
  (`create_snapshot`); a leader whose log starts after a follower's fetch offset answers its
  Fetch with the id of its newest snapshot, which the follower downloads in chunks
  (FetchSnapshot), validates, and installs: its whole log is truncated, restarting at the
  snapshot's end, and `take_committed` hands the snapshot out (a `CommittedSnapshot`) before
  the batches after it. A FetchSnapshot is a leader-only request (errors as Fetch), refused
  with SNAPSHOT_NOT_FOUND for an unknown snapshot and POSITION_OUT_OF_RANGE for a position
  outside it; a chunk that does not continue the download (other snapshot, position or size)
  is dropped, and a download whose bytes are not a valid snapshot is discarded whole.
- Dynamic quorums (KIP-853, kraft.version 1): the voter set is in the log, as VotersRecord
  control records (the first in the bootstrap snapshot `storage format` wrote), and a set takes
  effect when appended (`VoterSetHistory`; truncation takes it back). The leader adds a voter
  (AddRaftVoter) only once the HWM is in its epoch, no other change is uncommitted, and the new
  voter fetched up to its end as an observer within the fetch timeout; it removes one
  (RemoveRaftVoter) under the same rules, and updates a voter's endpoints (UpdateRaftVoter).
  Each appends a VotersRecord and is answered once that record is committed (or with
  REQUEST_TIMED_OUT after the request's timeout); a leader that removed itself resigns once the
  removal is committed. A voter asked for its vote checks that it is the voter the request names
  (Vote v1), not that the candidate is in its set, which may be older. A node without voters
  (formatted with --no-initial-controllers, or a broker) fetches from
  `controller.quorum.bootstrap.servers` (negative ids) until a Fetch answer names the leader
  and its endpoint.
- Every state change is in `quorum-state` before the node acts on it (see quorum_state).
- Requests carry the epoch; a stale one is refused (FENCED_LEADER_EPOCH), a different cluster id
  is refused (INCONSISTENT_CLUSTER_ID), a Vote or BeginQuorumEpoch from or to a non-voter is
  refused (INCONSISTENT_VOTER_SET), a malformed one is INVALID_REQUEST; a refused request
  changes nothing.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    iter_batches,
    iter_records,
)
from odradek.protocol.records.control import build_control_record_batch, decode_control_key
from odradek.raft import messages as msg
from odradek.raft.config import RETRY_BACKOFF_BASE_MS, RaftConfig
from odradek.raft.leader_state import LeaderState, ReplicaState
from odradek.raft.log import (
    DIVERGING,
    SNAPSHOT,
    VALID,
    OffsetAndEpoch,
    RaftLog,
    iter_log_batches,
    truncation_offset,
    validate_fetch,
)
from odradek.raft.quorum_state import (
    CandidateState,
    EpochState,
    FollowerState,
    QuorumState,
    QuorumStateStore,
    ResignedState,
    UnattachedState,
    VotedState,
)
from odradek.raft.requests import RequestManager
from odradek.raft.snapshot import (
    CorruptSnapshotError,
    RawSnapshotWriter,
    SnapshotContent,
    SnapshotWriter,
    check_snapshot,
    kraft_control_batch,
    read_snapshot,
)
from odradek.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    Voter,
    VoterSet,
    VoterSetHistory,
    directory_id_or_none,
    voter_set_from_record,
)

log = logging.getLogger("odradek.raft")


@dataclass(frozen=True)
class OutboundRequest:
    """A request to send to `destination`; its answer goes to `handle_response` with
    `correlation_id`."""

    destination: int
    correlation_id: int
    request: m.Message


@dataclass(frozen=True)
class OutboundReply:
    """The answer to a request `handle_request` parked (a long-polling Fetch)."""

    destination: int
    request_id: Any
    response: m.Message


@dataclass(frozen=True)
class CommittedBatch:
    """A batch the high watermark passed: the records for the state machine above."""

    base_offset: int
    last_offset: int
    epoch: int
    is_control: bool
    data: bytes  # the whole RecordBatch v2


@dataclass(frozen=True)
class CommittedSnapshot:
    """The committed state as of `snapshot_id.offset` (exclusive), to replace the state machine
    with: handed out when this node's log no longer has what comes before (it installed a
    leader's snapshot) or at start, before the batches after it."""

    snapshot_id: OffsetAndEpoch
    store: Any  # the SnapshotStore holding it

    @property
    def last_offset(self) -> int:
        return self.snapshot_id.offset - 1

    @property
    def epoch(self) -> int:
        return self.snapshot_id.epoch

    def read(self) -> SnapshotContent:
        """The validated content (raises CorruptSnapshotError)."""
        return read_snapshot(self.store.read_all(self.snapshot_id))


@dataclass
class _SnapshotDownload:
    """A follower fetching its leader's snapshot (FetchSnapshot, chunk by chunk)."""

    snapshot_id: OffsetAndEpoch
    leader_id: int
    writer: RawSnapshotWriter
    size: int | None = None  # the snapshot's size, from the first answer


@dataclass
class _VoterChange:
    """An AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter the leader is carrying out: answered
    once its VotersRecord (at `offset`) is committed, or REQUEST_TIMED_OUT at `deadline_ms`."""

    response_cls: type[m.Message]
    sender_id: int
    request_id: Any
    offset: int
    deadline_ms: int
    removed_id: int | None = None  # RemoveRaftVoter: the voter removed


@dataclass
class _ParkedFetch:
    sender_id: int
    request_id: Any
    replica_id: int
    partition: Any  # FetchRequest.FetchPartition
    max_bytes: int
    deadline_ms: int
    epoch: int
    high_watermark: int = field(default=0)


class RaftClient:
    def __init__(self, node_id: int, voters: VoterSet | Iterable[int] | None, raft_log: RaftLog,
                 store: QuorumStateStore, *, cluster_id: str, now_ms: int,
                 config: RaftConfig | None = None, rng: random.Random | None = None,
                 flush_in_poll: bool = True, directory_id: uuid.UUID | None = None,
                 listener: str | None = None,
                 local_endpoints: Mapping[str, tuple[str, int]] | None = None,
                 bootstrap: Mapping[int, tuple[str, int]] | None = None,
                 history: VoterSetHistory | None = None) -> None:
        """`voters`: the static voters (`controller.quorum.voters`); None or empty for a
        dynamic quorum, whose voters are in the log. `flush_in_poll`: `poll` flushes the log
        itself (Kafka's raft thread does); without it the driver flushes (e.g. on a worker
        thread) and polls after, and a follower does not fetch again before its log is
        flushed. `directory_id`: this node's metadata directory id (KIP-853 voter key);
        `listener`: the controller listener name peers are reached on; `local_endpoints`: this
        node's controller endpoints (listener -> host/port); `bootstrap`: negative id ->
        endpoint of each `controller.quorum.bootstrap.servers` entry; `history`: the voter
        history of a dynamic quorum if the caller read it already (`read_voter_history`)."""
        self.node_id = node_id
        static = (voters if isinstance(voters, VoterSet)
                  else VoterSet(voters if voters is not None else ()))
        self.history = history if history is not None else VoterSetHistory(static)
        loaded = history is not None
        self.directory_id = directory_id
        self.listener = listener
        # Kept by reference: the driver fills it in once its listeners are bound.
        self.local_endpoints = local_endpoints if local_endpoints is not None else {}
        self.bootstrap_ids = sorted(bootstrap or {}, reverse=True)
        # node id -> (host, port) on the controller listener: every node this one may send to
        # (the network layer dials from here). Bootstrap servers have negative ids.
        self.endpoints: dict[int, tuple[str, int]] = dict(bootstrap or {})
        self.log = raft_log
        self.cluster_id = cluster_id
        self.config = config or RaftConfig()
        self.rng = rng or random.Random()
        self.flush_in_poll = flush_in_poll
        self.quorum = QuorumState(node_id, static, store, self.config, self.rng)
        self.requests = RequestManager(self.config.request_timeout_ms,
                                       self.config.retry_backoff_ms)
        self._polled_at_ms = now_ms  # the time the last `poll` decided what to send at
        self._parked: list[_ParkedFetch] = []
        self._replies: list[OutboundReply] = []
        self._committed_next = raft_log.start_offset  # next offset take_committed hands out
        self._download: _SnapshotDownload | None = None
        self._handed_out = False  # take_committed was called
        self._voter_change: _VoterChange | None = None
        if not loaded:
            read_voter_history(self.log, self.history)
        self.quorum.voters = self.voters
        self._learn_voter_endpoints()
        self.quorum.initialize(raft_log.last_fetched_epoch, now_ms)
        if self.voters.is_only_voter(node_id):
            # A lone voter needs no one's vote: it leads at once.
            if not isinstance(self.quorum.state, CandidateState):
                self.quorum.transition_to_candidate(now_ms)
            self._maybe_become_leader(now_ms)

    # ------------------------------------------------------------------------------------------
    # the voter set

    @property
    def voters(self) -> VoterSet:
        """The voter set in effect: the newest in the log, else the static one."""
        return self.history.latest

    @property
    def kraft_version(self) -> int:
        return self.history.kraft_version

    @property
    def is_dynamic(self) -> bool:
        """Voters come from the log (kraft.version 1), not from the config."""
        return not len(self.history.static)

    def _observe_control_batches(self, data: bytes | memoryview) -> bool:
        """Takes the KRaftVersionRecord / VotersRecord of appended batches into the history;
        returns whether the voter set changed."""
        before = self.voters
        observe_control_batches(self.history, data)
        return self.voters != before

    def _learn_voter_endpoints(self) -> None:
        for node_id, endpoint in self.voters.endpoints(self.listener).items():
            if node_id != self.node_id:
                self.endpoints[node_id] = endpoint

    def _on_voters_changed(self, now_ms: int) -> None:
        voters = self.voters
        log.info("node %d: voters now %s", self.node_id, voters.ids)
        self.quorum.voters = voters
        self._learn_voter_endpoints()
        state = self.quorum.state
        if isinstance(state, LeaderState) and state.update_voters(voters):
            self._on_leader_high_watermark(state)

    def _own_endpoint(self) -> tuple[str, int] | None:
        if self.listener is not None and self.listener in self.local_endpoints:
            return self.local_endpoints[self.listener]
        return next(iter(self.local_endpoints.values()), None)

    def _endpoint_of(self, node_id: int | None) -> tuple[str, int] | None:
        if node_id is None:
            return None
        if node_id == self.node_id:
            return self._own_endpoint()
        return self.endpoints.get(node_id)

    # ------------------------------------------------------------------------------------------
    # state

    @property
    def state(self) -> EpochState:
        return self.quorum.state

    @property
    def state_name(self) -> str:
        return self.quorum.state.name

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    @property
    def is_leader(self) -> bool:
        return self.quorum.is_leader

    @property
    def high_watermark(self) -> int:
        """The commit index: every offset below it is committed."""
        return self.log.high_watermark

    @property
    def epoch_start_offset(self) -> int | None:
        """On the leader, where its epoch's LeaderChange record is."""
        state = self.quorum.state
        return state.epoch_start_offset if isinstance(state, LeaderState) else None

    def __repr__(self) -> str:
        return (f"RaftClient(node={self.node_id}, {self.state_name}, epoch={self.epoch}, "
                f"leader={self.leader_id}, end={self.log.end_offset}, hw={self.high_watermark})")

    # ------------------------------------------------------------------------------------------
    # appends (leader only)

    def append(self, values: Iterable[bytes], now_ms: int, epoch: int | None = None) -> int:
        """Writes `values` as one batch; returns its last offset. Committed once the high
        watermark passes it. `epoch`, if given, must be the current one (a caller that decided
        what to write as leader of an epoch must not write it in a later one)."""
        state = self._writable_leader(epoch)
        builder = RecordBatchBuilder(partition_leader_epoch=state.epoch)
        count = 0
        for value in values:
            builder.append(now_ms, None, value)
            count += 1
        if count == 0:
            raise ValueError("an append needs at least one record")
        return self.log.append_as_leader(builder.build(), state.epoch)[1]

    def append_batch(self, batch: bytes, epoch: int | None = None) -> int:
        """Writes one prebuilt RecordBatch v2 (offsets and epoch are assigned); returns its last
        offset."""
        state = self._writable_leader(epoch)
        return self.log.append_as_leader(batch, state.epoch)[1]

    def _writable_leader(self, epoch: int | None) -> LeaderState:
        state = self.quorum.state
        if not isinstance(state, LeaderState) or (epoch is not None and epoch != state.epoch):
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"node {self.node_id} is not the leader of epoch "
                             f"{state.epoch if epoch is None else epoch} ({state.name})")
        return state

    def resign(self, now_ms: int) -> None:
        """Graceful: the leader gives up its epoch and tells the voters (EndQuorumEpoch), the
        most caught-up first in line."""
        state = self.quorum.state
        if isinstance(state, LeaderState):
            self.quorum.transition_to_resigned(state.preferred_successors(), now_ms)
            self._after_transition()

    # ------------------------------------------------------------------------------------------
    # committed batches

    def take_committed(self) -> list[CommittedBatch | CommittedSnapshot]:
        """The batches the high watermark passed since the last call, in offset order; first,
        if this node has a snapshot past what it handed out, that snapshot (a snapshot is
        committed by definition: only committed state is ever snapshotted)."""
        out: list[CommittedBatch | CommittedSnapshot] = []
        latest = self.log.snapshots.latest_id()
        if latest is not None and (latest.offset > self._committed_next or (
                not self._handed_out and latest.offset == self._committed_next > 0)):
            # (At start, a log that begins at a snapshot's end needs that snapshot first.)
            out.append(CommittedSnapshot(latest, self.log.snapshots))
            self._committed_next = latest.offset
        self._handed_out = True
        end = self.log.high_watermark
        if self._committed_next >= end:
            return out
        for header, data in iter_log_batches(self.log, self._committed_next, end):
            out.append(CommittedBatch(header.base_offset, header.last_offset,
                                      header.partition_leader_epoch, header.is_control, data))
            self._committed_next = header.next_offset
        return out

    # ------------------------------------------------------------------------------------------
    # snapshots

    @property
    def is_fetching_snapshot(self) -> bool:
        return self._download is not None

    def create_snapshot(self, snapshot_id: OffsetAndEpoch,
                        last_contained_timestamp: int) -> SnapshotWriter | None:
        """A writer for a snapshot of the committed state up to `snapshot_id.offset`
        (exclusive) whose last record is of `snapshot_id.epoch` (Kafka's createSnapshot);
        None if that snapshot exists already. The writer may be used from another thread; the
        snapshot counts once frozen. Raises ValueError for an id that is not committed or does
        not match this log."""
        snapshots = self.log.snapshots
        if snapshots.info(snapshot_id) is not None:
            return None
        if snapshot_id.offset > self.high_watermark or snapshot_id.offset > self._committed_next:
            raise ValueError(f"snapshot {snapshot_id} is past what is committed and handed out "
                             f"({min(self.high_watermark, self._committed_next)})")
        if snapshot_id.offset <= 0:
            raise ValueError(f"snapshot {snapshot_id} would be empty")
        if validate_fetch(self.log, snapshot_id.offset, snapshot_id.epoch).kind != VALID:
            raise ValueError(f"snapshot {snapshot_id} does not match the log (start "
                             f"{self.log.start_offset})")
        last = snapshot_id.offset - 1
        voters = self.history.voters_at(last) if self.is_dynamic else None
        return SnapshotWriter(snapshots.new_writer(snapshot_id), last_contained_timestamp,
                              self.history.kraft_version_at(last), voters)

    def _abort_download(self) -> None:
        if self._download is not None:
            self._download.writer.abort()
            self._download = None

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch, now_ms: int) -> None:
        """A downloaded snapshot is frozen: the whole log goes, it restarts at the snapshot's
        end with the high watermark there; older snapshots are of no use any more."""
        log.info("node %d: installing snapshot %s (log was [%d, %d), high watermark %d)",
                 self.node_id, snapshot_id, self.log.start_offset, self.log.end_offset,
                 self.log.high_watermark)
        self.log.truncate_fully_and_start_at(snapshot_id.offset)
        for older in self.log.snapshots.ids():
            if older < snapshot_id:
                self.log.snapshots.delete(older)
        if self.is_dynamic:
            content = check_snapshot(self.log.snapshots.read_all(snapshot_id),
                                     decode_values=False)
            before = self.voters
            self.history.reset(snapshot_id.offset, content.kraft_version, content.voters)
            if self.voters != before:
                self._on_voters_changed(now_ms)

    # ------------------------------------------------------------------------------------------
    # timers and outbound messages

    def poll(self, now_ms: int) -> list[OutboundRequest | OutboundReply]:
        self._polled_at_ms = now_ms
        if self.flush_in_poll and self.log.flushed_end < self.log.end_offset:
            self.log.flush()
        out: list[OutboundRequest | OutboundReply] = []
        state = self.quorum.state
        if isinstance(state, LeaderState):
            self._poll_leader(state, now_ms, out)
        elif isinstance(state, CandidateState):
            self._poll_candidate(state, now_ms, out)
        elif isinstance(state, FollowerState):
            self._poll_follower(state, now_ms, out)
        elif isinstance(state, ResignedState):
            self._poll_resigned(state, now_ms, out)
        else:  # Unattached, Voted
            self._poll_unattached(state, now_ms, out)
        self._complete_parked_fetches(now_ms)
        out.extend(self._replies)
        self._replies = []
        return out

    def next_deadline_ms(self, now_ms: int) -> int:
        """When `poll` must run next at the latest (with no input before). Request timeouts
        and backoffs count as of the last `poll` (Kafka computes its poll timeout at the
        instant it decided what to send): a backoff that kept that poll from sending is a
        deadline even if the driver's clock has passed it since (then it is already due)."""
        deadlines = [now_ms + 60_000]
        state = self.quorum.state
        if isinstance(state, LeaderState):
            check = state.next_check_quorum_ms()
            if check is not None:
                deadlines.append(check)
        elif isinstance(state, CandidateState):
            deadlines.append(state.backoff_deadline_ms if state.backoff_deadline_ms is not None
                             else state.election_deadline_ms)
        elif isinstance(state, FollowerState):
            deadlines.append(state.fetch_deadline_ms)
        elif state.election_deadline_ms is not None:
            deadlines.append(state.election_deadline_ms)
        request_deadline = self.requests.next_deadline_ms(min(now_ms, self._polled_at_ms))
        if request_deadline is not None:
            deadlines.append(request_deadline)
        deadlines.extend(parked.deadline_ms for parked in self._parked)
        if self._replies:
            deadlines.append(now_ms)
        return min(deadlines)

    def _send(self, destination: int, request: m.Message, now_ms: int,
              out: list[OutboundRequest | OutboundReply]) -> None:
        correlation_id = self.requests.on_send(destination, now_ms)
        out.append(OutboundRequest(destination, correlation_id, request))

    def _poll_leader(self, state: LeaderState, now_ms: int,
                     out: list[OutboundRequest | OutboundReply]) -> None:
        if state.update_local_state(self.log.flushed_end, now_ms):
            self._on_leader_high_watermark(state)
        if state.check_quorum_expired(now_ms):
            log.info("node %d: no majority fetched in epoch %d for %d ms: resigning",
                     self.node_id, state.epoch, self.config.check_quorum_timeout_ms)
            self.quorum.transition_to_resigned([], now_ms)
            self._after_transition()
            return
        state.expire_observers(now_ms)
        self._maybe_complete_voter_change(state, now_ms)
        if self.quorum.state is not state:
            return
        for voter in state.non_acknowledging_voters():
            if self.requests.is_ready(voter, now_ms):
                self._send(voter, msg.begin_epoch_request(
                    self.cluster_id, state.epoch, self.node_id, voter,
                    self.voters.voter(voter).directory_id if voter in self.voters else None,
                    self.local_endpoints), now_ms, out)

    def _poll_candidate(self, state: CandidateState, now_ms: int,
                        out: list[OutboundRequest | OutboundReply]) -> None:
        if state.backoff_deadline_ms is not None:
            if now_ms >= state.backoff_deadline_ms:
                self._become_candidate(now_ms, out)
            return
        if now_ms >= state.election_deadline_ms:
            state.start_backing_off(now_ms, self.quorum.election_backoff_ms(state.retries))
            return
        self._send_votes(state, now_ms, out)

    def _send_votes(self, state: CandidateState, now_ms: int,
                    out: list[OutboundRequest | OutboundReply]) -> None:
        if state.is_vote_rejected:
            return
        for voter in state.unrecorded_voters():
            if self.requests.is_ready(voter, now_ms):
                self._send(voter, msg.vote_request(
                    self.cluster_id, state.epoch, self.node_id, self.log.last_fetched_epoch,
                    self.log.end_offset, voter_id=voter,
                    voter_directory_id=self.voters.voter(voter).directory_id
                    if voter in self.voters else None,
                    candidate_directory_id=self.directory_id), now_ms, out)

    def _become_candidate(self, now_ms: int, out: list[OutboundRequest | OutboundReply]) -> None:
        state = self.quorum.transition_to_candidate(now_ms)
        self._after_transition()
        if not self._maybe_become_leader(now_ms):
            self._send_votes(state, now_ms, out)

    def _poll_follower(self, state: FollowerState, now_ms: int,
                       out: list[OutboundRequest | OutboundReply]) -> None:
        expired = now_ms >= state.fetch_deadline_ms
        if expired and self.quorum.is_voter:
            log.info("node %d: no answer from leader %d for the fetch timeout: election",
                     self.node_id, state.leader_id)
            self._become_candidate(now_ms, out)
            return
        # An observer that lost its leader asks any voter (the answer names the leader).
        target = self._random_ready_voter(now_ms) if expired else state.leader_id
        self._maybe_fetch(target, now_ms, out)

    def _poll_unattached(self, state: UnattachedState | VotedState, now_ms: int,
                         out: list[OutboundRequest | OutboundReply]) -> None:
        if self.quorum.is_voter:
            if state.election_deadline_ms is None:
                # Became a voter (a VotersRecord) while it had no election timer.
                state.election_deadline_ms = now_ms + self.quorum.random_election_timeout_ms()
            elif now_ms >= state.election_deadline_ms:
                self._become_candidate(now_ms, out)
        else:
            self._maybe_fetch(self._random_ready_voter(now_ms), now_ms, out)

    def _poll_resigned(self, state: ResignedState, now_ms: int,
                       out: list[OutboundRequest | OutboundReply]) -> None:
        if now_ms >= state.election_deadline_ms and self.quorum.is_voter:
            self._become_candidate(now_ms, out)
            return
        for voter in sorted(state.unacknowledged):
            if self.requests.is_ready(voter, now_ms):
                self._send(voter, msg.end_epoch_request(
                    self.cluster_id, state.epoch, self.node_id, state.preferred_successors),
                    now_ms, out)

    def _random_ready_voter(self, now_ms: int) -> int | None:
        """A voter to ask who leads (an observer that lost or never had its leader); with
        bootstrap servers configured, one of those (Kafka's observers ask them)."""
        candidates = self.bootstrap_ids or [v for v in self.voters if v != self.node_id]
        ready = [v for v in candidates if self.requests.is_ready(v, now_ms)]
        return self.rng.choice(ready) if ready else None

    def _maybe_fetch(self, target: int | None, now_ms: int,
                     out: list[OutboundRequest | OutboundReply]) -> None:
        if target is None or not self.requests.is_ready(target, now_ms):
            return
        if self.log.flushed_end < self.log.end_offset:
            return  # the fetch offset tells the leader what we have durably: flush first
        download = self._download
        if download is not None:
            if download.leader_id == target:
                self._send(target, msg.fetch_snapshot_request(
                    self.cluster_id, self.node_id, self.epoch, download.snapshot_id,
                    download.writer.size, self.config.fetch_max_bytes), now_ms, out)
                return
            self._abort_download()  # another node now: start over from a Fetch
        self._send(target, msg.fetch_request(
            self.cluster_id, self.node_id, self.epoch, self.log.end_offset,
            self.log.last_fetched_epoch, self.config.fetch_max_wait_ms,
            self.config.fetch_max_bytes, self.directory_id), now_ms, out)

    # ------------------------------------------------------------------------------------------
    # transitions

    def _after_transition(self) -> None:
        # Answers to requests sent in the old state no longer apply; parked fetches get their
        # (error) answer in the next poll. A snapshot download is of the old leader's.
        self.requests.reset_all()
        self._abort_download()
        if self._voter_change is not None and not self.is_leader:
            self._finish_voter_change(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def _maybe_become_leader(self, now_ms: int) -> bool:
        state = self.quorum.state
        if not isinstance(state, CandidateState) or not state.is_vote_granted:
            return False
        epoch_start = self.log.end_offset
        leader = self.quorum.transition_to_leader(epoch_start, self.log.high_watermark, now_ms)
        self._after_transition()
        change = m.LeaderChangeMessage(
            version=0, leader_id=self.node_id,
            voters=[m.LeaderChangeMessage.Voter(voter_id=v) for v in self.voters],
            granting_voters=[m.LeaderChangeMessage.Voter(voter_id=v)
                             for v in leader.granting_voters])
        batch = build_control_record_batch(ControlRecordType.LEADER_CHANGE, change.encode(0),
                                           now_ms, partition_leader_epoch=leader.epoch)
        self.log.append_as_leader(batch, leader.epoch)
        log.info("node %d: leader of epoch %d from offset %d", self.node_id, leader.epoch,
                 epoch_start)
        if self.flush_in_poll:
            self.log.flush()
        if leader.update_local_state(self.log.flushed_end, now_ms):
            self._on_leader_high_watermark(leader)
        return True

    def _maybe_transition(self, leader_id: int | None, epoch: int, now_ms: int) -> None:
        """What a request or response says about the epoch's leader, if it is news."""
        if leader_id is not None and (leader_id == self.node_id or (
                leader_id not in self.voters and leader_id not in self.endpoints)):
            leader_id = None  # not a leader we could follow (we could not reach it)
        if epoch > self.epoch:
            if leader_id is not None:
                self.quorum.transition_to_follower(epoch, leader_id, now_ms)
            else:
                self.quorum.transition_to_unattached(epoch, now_ms)
            self._after_transition()
        elif epoch == self.epoch and leader_id is not None and self.leader_id is None:
            self.quorum.transition_to_follower(epoch, leader_id, now_ms)
            self._after_transition()

    def _consistent_leader(self, leader_id: int | None, epoch: int) -> bool:
        return (epoch != self.epoch or leader_id is None or self.leader_id is None
                or leader_id == self.leader_id)

    def _on_leader_high_watermark(self, state: LeaderState) -> None:
        self.log.update_high_watermark(state.high_watermark)

    # ------------------------------------------------------------------------------------------
    # requests

    def handle_request(self, sender_id: int, request: m.Message, now_ms: int,
                       request_id: Any = None) -> m.Message | None:
        """The answer to `request`, or None for a Fetch parked until there is something to
        return (only when `request_id` is given; the answer then comes out of `poll`)."""
        if isinstance(request, m.FetchRequest):
            return self._handle_fetch(sender_id, request, now_ms, request_id)
        if isinstance(request, m.FetchSnapshotRequest):
            return self._handle_fetch_snapshot(request, now_ms)
        if isinstance(request, m.VoteRequest):
            return self._handle_vote(request, now_ms)
        if isinstance(request, m.BeginQuorumEpochRequest):
            return self._handle_begin_epoch(request, now_ms)
        if isinstance(request, m.EndQuorumEpochRequest):
            return self._handle_end_epoch(request, now_ms)
        if isinstance(request, m.DescribeQuorumRequest):
            return self.describe_quorum(now_ms, request)
        if isinstance(request, m.AddRaftVoterRequest):
            return self._handle_add_voter(sender_id, request, now_ms, request_id)
        if isinstance(request, m.RemoveRaftVoterRequest):
            return self._handle_remove_voter(sender_id, request, now_ms, request_id)
        if isinstance(request, m.UpdateRaftVoterRequest):
            return self._handle_update_voter(sender_id, request, now_ms, request_id)
        raise TypeError(f"not a Raft request: {type(request).__name__}")

    def _valid_cluster_id(self, cluster_id: str | None) -> bool:
        # A request without one is accepted (older clients), like Kafka.
        return cluster_id is None or cluster_id == self.cluster_id

    def _validate_voter_only(self, remote_id: int, epoch: int) -> ErrorCode | None:
        if epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if remote_id < 0 or remote_id == self.node_id:
            return ErrorCode.INVALID_REQUEST
        if self.quorum.is_observer or remote_id not in self.voters:
            return ErrorCode.INCONSISTENT_VOTER_SET
        return None

    def _validate_addressed_voter(self, remote_id: int, epoch: int, voter_id: int,
                                  voter_directory_id: uuid.UUID | None) -> ErrorCode | None:
        if epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if remote_id < 0 or remote_id == self.node_id:
            return ErrorCode.INVALID_REQUEST
        directory_id = directory_id_or_none(voter_directory_id)
        # Not whether this node sees itself as a voter: a voter added while it was away has
        # an older set, and must still vote (Kafka's isValidVoterKey).
        if voter_id != self.node_id or (
                directory_id is not None and self.directory_id is not None
                and directory_id != self.directory_id):
            return ErrorCode.INCONSISTENT_VOTER_SET
        return None

    def _has_live_leader(self, now_ms: int) -> bool:
        """This node leads, or heard from its leader within the fetch timeout."""
        state = self.quorum.state
        return isinstance(state, LeaderState) or (
            isinstance(state, FollowerState) and now_ms < state.fetch_deadline_ms)

    def _validate_leader_only(self, epoch: int) -> ErrorCode | None:
        if epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if not self.quorum.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    def _handle_vote(self, request: m.VoteRequest, now_ms: int) -> m.Message:
        if not self._valid_cluster_id(request.cluster_id):
            return msg.top_level_error(m.VoteResponse, ErrorCode.INCONSISTENT_CLUSTER_ID)
        partition = msg.single_partition(request)
        if partition is None:
            return msg.top_level_error(m.VoteResponse, ErrorCode.INVALID_REQUEST)
        candidate_id = partition.replica_id
        candidate_epoch = partition.replica_epoch
        last_epoch = partition.last_offset_epoch
        last_offset = partition.last_offset
        if last_offset < 0 or last_epoch < 0 or last_epoch >= candidate_epoch:
            return self._vote_response(ErrorCode.INVALID_REQUEST, False)
        if request.voter_id >= 0:
            # Vote v1 names the voter asked: this node must be that voter; the candidate may be
            # in a newer voter set than this node has (KIP-853).
            error = self._validate_addressed_voter(candidate_id, candidate_epoch,
                                                   request.voter_id,
                                                   partition.voter_directory_id)
        else:
            error = self._validate_voter_only(candidate_id, candidate_epoch)
        if error is not None:
            return self._vote_response(error, False)
        if (self.is_dynamic and candidate_id not in self.voters
                and self._has_live_leader(now_ms)):
            # A candidate outside our voter set while our leader is alive: most likely a voter
            # removed while it was away. Refused without moving to its epoch, so it cannot
            # depose a working leader (the Raft dissertation's rule, 4.2.3).
            return self._vote_response(ErrorCode.NONE, False)
        if candidate_epoch > self.epoch:
            self.quorum.transition_to_unattached(candidate_epoch, now_ms,
                                                 keep_election_timer=True)
            self._after_transition()
        ours = OffsetAndEpoch(self.log.end_offset, self.log.last_fetched_epoch)
        up_to_date = (last_epoch, last_offset) >= (ours.epoch, ours.offset)
        granted = self.quorum.state.can_grant_vote(candidate_id, up_to_date)
        if granted and isinstance(self.quorum.state, UnattachedState):
            self.quorum.transition_to_voted(candidate_epoch, candidate_id, now_ms)
        return self._vote_response(ErrorCode.NONE, granted)

    def _vote_response(self, error: ErrorCode, granted: bool) -> m.VoteResponse:
        return msg.vote_response(error, self.leader_id, self.epoch, granted)

    def _accept_epoch_notice(self, request: Any, response_type: type,
                             now_ms: int) -> tuple[m.Message | None, Any, ErrorCode]:
        """The checks BeginQuorumEpoch and EndQuorumEpoch share, and the transition to the
        leader they name: (a top-level error response or None, the partition, the error)."""
        partition = msg.single_partition(request)
        refusal = (ErrorCode.INCONSISTENT_CLUSTER_ID
                   if not self._valid_cluster_id(request.cluster_id)
                   else ErrorCode.INVALID_REQUEST if partition is None else None)
        if refusal is not None:
            return msg.top_level_error(response_type, refusal), None, refusal
        leader_id, epoch = partition.leader_id, partition.leader_epoch
        if self.is_dynamic:
            # The leader may be in a newer voter set than ours (or, resigning after removing
            # itself, in none): only the epoch and the leader's id are checked.
            error = (ErrorCode.FENCED_LEADER_EPOCH if epoch < self.epoch
                     else ErrorCode.INVALID_REQUEST if leader_id < 0 or leader_id == self.node_id
                     else None)
        else:
            error = self._validate_voter_only(leader_id, epoch)
        if error is None and not self._consistent_leader(leader_id, epoch):
            # Another leader in our epoch: impossible with correct peers; change nothing.
            error = ErrorCode.INVALID_REQUEST
        if error is None:
            self._maybe_transition(leader_id, epoch, now_ms)
        return None, partition, error or ErrorCode.NONE

    def _handle_begin_epoch(self, request: m.BeginQuorumEpochRequest,
                            now_ms: int) -> m.Message:
        partition = msg.single_partition(request)
        endpoints = {e.name: (e.host, e.port) for e in request.leader_endpoints or ()}
        endpoint = (endpoints.get(self.listener) if self.listener is not None
                    else next(iter(endpoints.values()), None))
        if partition is not None and endpoint is not None and partition.leader_id != self.node_id:
            # How to reach a leader this node may not know as a voter yet (KIP-853).
            self.endpoints[partition.leader_id] = endpoint
        refused, _partition, error = self._accept_epoch_notice(
            request, m.BeginQuorumEpochResponse, now_ms)
        if refused is not None:
            return refused
        return msg.begin_epoch_response(error, self.leader_id, self.epoch)

    def _handle_end_epoch(self, request: m.EndQuorumEpochRequest, now_ms: int) -> m.Message:
        refused, partition, error = self._accept_epoch_notice(
            request, m.EndQuorumEpochResponse, now_ms)
        if refused is not None:
            return refused
        if error == ErrorCode.NONE:
            leader_id = partition.leader_id
            state = self.quorum.state
            if isinstance(state, FollowerState) and state.leader_id == leader_id:
                # Successors later in the leader's list wait longer, so the most caught up
                # usually wins the election.
                successors = list(partition.preferred_successors or [])
                position = successors.index(self.node_id) if self.node_id in successors else -1
                backoff = 0 if position <= 0 else min(RETRY_BACKOFF_BASE_MS << (position - 1),
                                                      self.config.election_backoff_max_ms)
                state.override_fetch_timeout(now_ms, backoff)
        return msg.end_epoch_response(error, self.leader_id, self.epoch)

    def _handle_fetch(self, sender_id: int, request: m.FetchRequest, now_ms: int,
                      request_id: Any) -> m.Message | None:
        if not self._valid_cluster_id(request.cluster_id):
            return msg.top_level_error(m.FetchResponse, ErrorCode.INCONSISTENT_CLUSTER_ID)
        partition = msg.single_partition(request)
        if partition is None:
            return msg.top_level_error(m.FetchResponse, ErrorCode.INVALID_REQUEST)
        if (request.max_wait_ms < 0 or partition.fetch_offset < 0
                or partition.last_fetched_epoch < 0
                or partition.last_fetched_epoch > partition.current_leader_epoch):
            return msg.fetch_response(ErrorCode.INVALID_REQUEST, self.leader_id, self.epoch,
                                      self.high_watermark)
        replica_id = msg.fetch_replica_id(request)
        max_bytes = max(min(request.max_bytes, partition.partition_max_bytes), 1)
        state = self.quorum.state
        known = (state.high_watermark_sent.get(replica_id, -1)
                 if isinstance(state, LeaderState) else -1)
        response = self._try_complete_fetch(replica_id, partition, max_bytes, now_ms)
        answered = response.responses[0].partitions[0]
        diverging = answered.diverging_epoch
        # A replica that has not seen the current high watermark gets it at once, not at the
        # end of the long poll: followers learn the commit index as soon as it moves.
        snapshot = answered.snapshot_id
        if (answered.error_code != 0 or answered.records or request.max_wait_ms == 0
                or (diverging is not None and diverging.epoch >= 0) or request_id is None
                or (snapshot is not None and snapshot.end_offset >= 0)
                or answered.high_watermark > known):
            return response
        wait = min(request.max_wait_ms, self.config.fetch_max_wait_ms)
        self._parked.append(_ParkedFetch(sender_id, request_id, replica_id, partition, max_bytes,
                                         now_ms + wait, self.epoch, self.high_watermark))
        return None

    def _try_complete_fetch(self, replica_id: int, partition: Any, max_bytes: int,
                            now_ms: int) -> m.FetchResponse:
        error = self._validate_leader_only(partition.current_leader_epoch)
        if error is not None:
            return msg.fetch_response(error, self.leader_id, self.epoch, self.high_watermark,
                                      leader_endpoint=self._endpoint_of(self.leader_id))
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        if replica_id in self.voters:
            # Any valid fetch of a voter shows it follows this leader (Kafka 3.6+), also one
            # answered with a diverging epoch or a snapshot id.
            state.update_check_quorum(replica_id, now_ms)
        validation = validate_fetch(self.log, partition.fetch_offset,
                                    partition.last_fetched_epoch)
        own = self._own_endpoint()
        if validation.kind == DIVERGING:
            return msg.fetch_response(ErrorCode.NONE, self.node_id, self.epoch,
                                      self.high_watermark, diverging=validation.position,
                                      leader_endpoint=own)
        if validation.kind == SNAPSHOT:
            return msg.fetch_response(ErrorCode.NONE, self.node_id, self.epoch,
                                      self.high_watermark, snapshot_id=validation.position,
                                      leader_endpoint=own)
        fetch_offset = partition.fetch_offset
        records = (self.log.read(fetch_offset, max_bytes)
                   if fetch_offset < self.log.end_offset else b"")
        if state.update_replica_state(replica_id, fetch_offset, self.log.end_offset, now_ms,
                                      msg.fetch_directory_id(partition)):
            self._on_leader_high_watermark(state)
        state.high_watermark_sent[replica_id] = self.high_watermark
        return msg.fetch_response(ErrorCode.NONE, self.node_id, self.epoch,
                                  self.high_watermark, records=records, leader_endpoint=own)

    def _complete_parked_fetches(self, now_ms: int) -> None:
        if not self._parked:
            return
        still: list[_ParkedFetch] = []
        for parked in self._parked:
            if (now_ms >= parked.deadline_ms or not self.is_leader or self.epoch != parked.epoch
                    or self.log.end_offset > parked.partition.fetch_offset
                    or self.high_watermark != parked.high_watermark):
                response = self._try_complete_fetch(parked.replica_id, parked.partition,
                                                    parked.max_bytes, now_ms)
                self._replies.append(OutboundReply(parked.sender_id, parked.request_id,
                                                   response))
            else:
                still.append(parked)
        self._parked = still

    def _handle_fetch_snapshot(self, request: m.FetchSnapshotRequest,
                               now_ms: int) -> m.Message:
        """Kafka's handleFetchSnapshotRequest: a chunk of the snapshot from `position`."""
        if not self._valid_cluster_id(request.cluster_id):
            return msg.top_level_error(m.FetchSnapshotResponse,
                                       ErrorCode.INCONSISTENT_CLUSTER_ID)
        partition = msg.single_partition(request)
        if partition is None or partition.snapshot_id is None:
            return msg.top_level_error(m.FetchSnapshotResponse, ErrorCode.INVALID_REQUEST)
        error = self._validate_leader_only(partition.current_leader_epoch)
        if error is not None:
            return msg.fetch_snapshot_response(error, self.leader_id, self.epoch)
        snapshot_id = OffsetAndEpoch(partition.snapshot_id.end_offset,
                                     partition.snapshot_id.epoch)
        info = self.log.snapshots.info(snapshot_id)
        if info is None:
            return msg.fetch_snapshot_response(ErrorCode.SNAPSHOT_NOT_FOUND, self.node_id,
                                               self.epoch)
        position = partition.position
        if position < 0 or position >= info.size:
            return msg.fetch_snapshot_response(ErrorCode.POSITION_OUT_OF_RANGE, self.node_id,
                                               self.epoch)
        max_bytes = max(min(request.max_bytes, info.size), 1)
        try:
            chunk = self.log.snapshots.read(snapshot_id, position, max_bytes)
        except OSError:  # deleted meanwhile (retention)
            return msg.fetch_snapshot_response(ErrorCode.SNAPSHOT_NOT_FOUND, self.node_id,
                                               self.epoch)
        state = self.quorum.state
        if isinstance(state, LeaderState) and request.replica_id in self.voters:
            state.update_check_quorum(request.replica_id, now_ms)
        return msg.fetch_snapshot_response(ErrorCode.NONE, self.node_id, self.epoch,
                                           snapshot_id, info.size, position, chunk)

    def describe_quorum(self, now_ms: int,
                        request: m.DescribeQuorumRequest | None = None) -> m.DescribeQuorumResponse:
        """DescribeQuorum: only the leader knows the replicas' progress."""
        if request is not None and msg.single_partition(request) is None:
            return msg.top_level_error(m.DescribeQuorumResponse, ErrorCode.INVALID_REQUEST)
        D = m.DescribeQuorumResponse
        state = self.quorum.state
        if not isinstance(state, LeaderState):
            partition = D.PartitionData(
                partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER.code,
                leader_id=-1 if self.leader_id is None else self.leader_id,
                leader_epoch=self.epoch, high_watermark=self.high_watermark,
                current_voters=[], observers=[])
        else:
            voters = self.voters

            def describe(replica: ReplicaState) -> Any:
                # A voter by its voter key (none for a static voter, as Kafka's), an observer
                # by what its Fetch said.
                directory_id = (voters.voter(replica.node_id).directory_id
                                if replica.node_id in voters else replica.directory_id)
                return D.ReplicaState(
                    replica_id=replica.node_id,
                    replica_directory_id=directory_id or msg.NO_DIRECTORY_ID,
                    log_end_offset=-1 if replica.end_offset is None else replica.end_offset,
                    last_fetch_timestamp=replica.last_fetch_ms,
                    last_caught_up_timestamp=replica.last_caught_up_ms)

            partition = D.PartitionData(
                partition_index=0, error_code=0, leader_id=self.node_id,
                leader_epoch=state.epoch, high_watermark=self.high_watermark,
                current_voters=[describe(r) for r in state.voter_states.values()],
                observers=[describe(r) for r in state.observer_states.values()])
        nodes = []
        for voter in self.voters.voters():
            endpoints = dict(voter.endpoints)
            if not endpoints and voter.node_id == self.node_id:
                endpoints = dict(self.local_endpoints)
            elif not endpoints and voter.node_id in self.endpoints and self.listener:
                endpoints = {self.listener: self.endpoints[voter.node_id]}
            nodes.append(D.Node(node_id=voter.node_id,
                                listeners=msg.listeners_of(endpoints, D.Listener)))
        return D(topics=[D.TopicData(topic_name=msg.METADATA_TOPIC, partitions=[partition])],
                 nodes=nodes)

    # ------------------------------------------------------------------------------------------
    # voter changes (KIP-853), on the leader

    def _voter_change_refusal(self, now_ms: int,
                              action: str = "updating") -> tuple[ErrorCode, str] | None:
        """Kafka's checks before any voter change: leading, the HWM in this epoch (so every
        earlier change is known), kraft.version 1, no other change in flight."""
        state = self.quorum.state
        if not isinstance(state, LeaderState):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, "this node is not the leader"
        if self.high_watermark <= state.epoch_start_offset:
            return (ErrorCode.REQUEST_TIMED_OUT, ("Request timed out waiting for leader to "
                    "establish HWM and fence previous voter changes"))
        if self.kraft_version < KRAFT_VERSION_DYNAMIC:
            return (ErrorCode.UNSUPPORTED_VERSION, (f"Cluster doesn't support {action} voter "
                    f"because the kraft.version feature is {self.kraft_version}"))
        entry = self.history.last_entry
        if self._voter_change is not None or (entry is not None
                                              and entry[0] >= self.high_watermark):
            return (ErrorCode.REQUEST_TIMED_OUT, ("Request timed out waiting for voters to "
                    "commit the latest voter change"))
        return None

    def _append_voters(self, voters: VoterSet, now_ms: int) -> int:
        """Appends a VotersRecord (with the kraft.version) as the leader; the set takes effect
        at once. Returns its offset."""
        state = self._writable_leader(None)
        batch = kraft_control_batch(0, state.epoch, now_ms, self.kraft_version, voters)
        first, _last = self.log.append_as_leader(batch, state.epoch)
        voters_offset = first + 1  # the batch: KRaftVersionRecord, then VotersRecord
        self.history.add_kraft_version(first, self.kraft_version)
        self.history.add_voters(voters_offset, voters)
        self._on_voters_changed(now_ms)
        if self.flush_in_poll:
            self.log.flush()
        if state.update_local_state(self.log.flushed_end, now_ms):
            self._on_leader_high_watermark(state)
        return voters_offset

    def _start_voter_change(self, response_cls: type[m.Message], sender_id: int,
                            request_id: Any, voters: VoterSet, timeout_ms: int, now_ms: int,
                            removed_id: int | None = None) -> m.Message | None:
        offset = self._append_voters(voters, now_ms)
        self._voter_change = _VoterChange(response_cls, sender_id, request_id, offset,
                                          now_ms + timeout_ms, removed_id)
        if request_id is None:  # no way to answer later: answer now (the change is made)
            self._voter_change = None
            return _voter_response(response_cls, ErrorCode.NONE, None)
        self._maybe_complete_voter_change(self.quorum.state, now_ms)
        for reply in self._replies:  # committed at once (a lone voter): answer now
            if reply.request_id == request_id and reply.destination == sender_id:
                self._replies.remove(reply)
                return reply.response
        return None

    def _maybe_complete_voter_change(self, state: EpochState, now_ms: int) -> None:
        change = self._voter_change
        if change is None:
            return
        if self.high_watermark > change.offset:
            self._finish_voter_change(ErrorCode.NONE)
            if change.removed_id == self.node_id and isinstance(state, LeaderState):
                log.info("node %d: removed from the voters; resigning", self.node_id)
                self.quorum.transition_to_resigned(
                    [v for v in state.preferred_successors() if v in self.voters], now_ms)
                self._after_transition()
        elif now_ms >= change.deadline_ms:
            self._finish_voter_change(ErrorCode.REQUEST_TIMED_OUT,
                                      "the voter change did not commit in time")

    def _finish_voter_change(self, error: ErrorCode, message: str | None = None) -> None:
        change, self._voter_change = self._voter_change, None
        if change is not None:
            self._replies.append(OutboundReply(
                change.sender_id, change.request_id,
                _voter_response(change.response_cls, error, message)))

    def _handle_add_voter(self, sender_id: int, request: m.AddRaftVoterRequest, now_ms: int,
                          request_id: Any) -> m.Message | None:
        R = m.AddRaftVoterResponse
        if not self._valid_cluster_id(request.cluster_id):
            return _voter_response(R, ErrorCode.INCONSISTENT_CLUSTER_ID, None)
        refusal = self._voter_change_refusal(now_ms, "adding")
        if refusal is not None:
            return _voter_response(R, *refusal)
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        voter_id = request.voter_id
        directory_id = directory_id_or_none(request.voter_directory_id)
        if voter_id in self.voters:
            return _voter_response(R, ErrorCode.DUPLICATE_VOTER,
                                   f"The voter id for {voter_id} is already part of the set "
                                   f"of voters {self.voters.ids}.")
        endpoints = {listener.name: (listener.host, listener.port)
                     for listener in request.listeners or ()}
        if voter_id < 0 or directory_id is None or not endpoints or (
                self.listener is not None and self.listener not in endpoints):
            return _voter_response(R, ErrorCode.INVALID_REQUEST,
                                   f"AddRaftVoter needs a voter id, a directory id and an "
                                   f"endpoint on the {self.listener} listener")
        observer = state.observer_states.get(voter_id)
        if (observer is None or observer.directory_id != directory_id
                or not state.is_caught_up(voter_id, now_ms)):
            return _voter_response(R, ErrorCode.REQUEST_TIMED_OUT,
                                   f"Aborted add voter operation for {voter_id} since it is "
                                   f"lagging behind")
        new_voters = self.voters.with_voter(Voter(voter_id, directory_id, endpoints))
        log.info("node %d: adding voter %d (directory %s): voters %s", self.node_id, voter_id,
                 directory_id, new_voters.ids)
        return self._start_voter_change(R, sender_id, request_id, new_voters,
                                        max(request.timeout_ms, 0) or
                                        self.config.request_timeout_ms, now_ms)

    def _handle_remove_voter(self, sender_id: int, request: m.RemoveRaftVoterRequest,
                             now_ms: int, request_id: Any) -> m.Message | None:
        R = m.RemoveRaftVoterResponse
        if not self._valid_cluster_id(request.cluster_id):
            return _voter_response(R, ErrorCode.INCONSISTENT_CLUSTER_ID, None)
        refusal = self._voter_change_refusal(now_ms, "removing")
        if refusal is not None:
            return _voter_response(R, *refusal)
        directory_id = directory_id_or_none(request.voter_directory_id)
        voter_id = request.voter_id
        if voter_id not in self.voters or self.voters.voter(voter_id).directory_id != directory_id:
            return _voter_response(R, ErrorCode.VOTER_NOT_FOUND,
                                   f"Cannot remove voter {voter_id} (directory {directory_id}): "
                                   f"not one of the voters {self.voters.ids}")
        if len(self.voters) == 1:
            return _voter_response(R, ErrorCode.VOTER_NOT_FOUND,
                                   "Cannot remove the last voter of the quorum")
        new_voters = self.voters.without_voter(voter_id)
        log.info("node %d: removing voter %d: voters %s", self.node_id, voter_id,
                 new_voters.ids)
        return self._start_voter_change(R, sender_id, request_id, new_voters,
                                        self.config.request_timeout_ms * 15, now_ms,
                                        removed_id=voter_id)

    def _handle_update_voter(self, sender_id: int, request: m.UpdateRaftVoterRequest,
                             now_ms: int, request_id: Any) -> m.Message | None:
        R = m.UpdateRaftVoterResponse
        if not self._valid_cluster_id(request.cluster_id):
            return self._update_voter_response(ErrorCode.INCONSISTENT_CLUSTER_ID)
        error = self._validate_leader_only(request.current_leader_epoch)
        if error is not None:
            return self._update_voter_response(error)
        refusal = self._voter_change_refusal(now_ms)
        if refusal is not None:
            return self._update_voter_response(refusal[0])
        voter_id = request.voter_id
        directory_id = directory_id_or_none(request.voter_directory_id)
        if not self.voters.is_voter(voter_id, directory_id):
            return self._update_voter_response(ErrorCode.VOTER_NOT_FOUND)
        endpoints = {listener.name: (listener.host, listener.port)
                     for listener in request.listeners or ()}
        feature = request.kraft_version_feature
        versions = (feature.min_supported_version, feature.max_supported_version)
        if (not endpoints or (self.listener is not None and self.listener not in endpoints)
                or not versions[0] <= self.kraft_version <= versions[1]):
            return self._update_voter_response(ErrorCode.INVALID_REQUEST)
        current = self.voters.voter(voter_id)
        updated = Voter(voter_id, current.directory_id or directory_id, endpoints, versions)
        if updated == current:
            return self._update_voter_response(ErrorCode.NONE)
        response = self._start_voter_change(R, sender_id, request_id,
                                            self.voters.with_voter(updated),
                                            self.config.request_timeout_ms, now_ms)
        return response

    def _update_voter_response(self, error: ErrorCode) -> m.UpdateRaftVoterResponse:
        R = m.UpdateRaftVoterResponse
        leader = self._endpoint_of(self.leader_id)
        return R(error_code=error.code, current_leader=R.CurrentLeader(
            leader_id=-1 if self.leader_id is None else self.leader_id,
            leader_epoch=self.epoch, host=leader[0] if leader else "",
            port=leader[1] if leader else 0))

    # ------------------------------------------------------------------------------------------
    # responses

    def handle_send_failure(self, destination: int, correlation_id: int, now_ms: int) -> None:
        """The request could not be delivered or its connection broke: retry after backoff."""
        self.requests.on_failure(destination, correlation_id, now_ms)

    def handle_response(self, sender_id: int, response: m.Message, now_ms: int,
                        correlation_id: int | None = None) -> None:
        """The answer of `sender_id` to our request `correlation_id`; an answer to a request
        no longer in flight is dropped."""
        if not self.requests.on_response(sender_id, correlation_id):
            return
        if isinstance(response, m.FetchResponse):
            ok = self._handle_fetch_response(sender_id, response, now_ms)
        elif isinstance(response, m.FetchSnapshotResponse):
            ok = self._handle_fetch_snapshot_response(sender_id, response, now_ms)
        elif isinstance(response, m.VoteResponse):
            ok = self._handle_vote_response(sender_id, response, now_ms)
        elif isinstance(response, m.BeginQuorumEpochResponse):
            ok = self._handle_begin_epoch_response(sender_id, response, now_ms)
        elif isinstance(response, m.EndQuorumEpochResponse):
            ok = self._handle_end_epoch_response(sender_id, response, now_ms)
        else:
            raise TypeError(f"not a Raft response: {type(response).__name__}")
        if not ok:
            self.requests.back_off(sender_id, now_ms)

    def _common_response(self, error: ErrorCode, leader_id: int | None, epoch: int,
                         now_ms: int) -> bool | None:
        """Kafka's maybeHandleCommonResponse: what any answer's epoch and leader tell us.
        True/False: handled (ok or not); None: the caller handles it."""
        if epoch < self.epoch or error == ErrorCode.UNKNOWN_LEADER_EPOCH:
            return True  # we are ahead: the answer no longer matters
        if epoch > self.epoch or error in (ErrorCode.FENCED_LEADER_EPOCH,
                                           ErrorCode.NOT_LEADER_OR_FOLLOWER):
            before = (self.epoch, self.leader_id)
            if self._consistent_leader(leader_id, epoch):
                self._maybe_transition(leader_id, epoch, now_ms)
            # An error that taught us nothing (e.g. a resigned leader) is retried after backoff.
            return error == ErrorCode.NONE or (self.epoch, self.leader_id) != before
        if epoch == self.epoch and leader_id is not None and self.leader_id is None:
            if self._consistent_leader(leader_id, epoch):
                self._maybe_transition(leader_id, epoch, now_ms)
            return None if error == ErrorCode.NONE else False
        return None

    def _handle_vote_response(self, sender_id: int, response: m.VoteResponse,
                              now_ms: int) -> bool:
        partition = msg.single_partition(response)
        if response.error_code != 0 or partition is None:
            return False
        error = ErrorCode.from_code(partition.error_code)
        handled = self._common_response(error, msg.leader_or_none(partition.leader_id),
                                        partition.leader_epoch, now_ms)
        if handled is not None:
            return handled
        if error != ErrorCode.NONE:
            return False
        state = self.quorum.state
        if isinstance(state, CandidateState):
            if partition.vote_granted:
                state.record_granted(sender_id)
                self._maybe_become_leader(now_ms)
            else:
                state.record_rejected(sender_id)
                if state.is_vote_rejected and not state.is_backing_off:
                    state.start_backing_off(now_ms,
                                            self.quorum.election_backoff_ms(state.retries))
        return True

    def _epoch_response_error(self, response: Any, now_ms: int) -> bool | ErrorCode:
        """BeginQuorumEpoch and EndQuorumEpoch answers alike: the outcome when the answer is
        settled by its error or leader (a bool), else the partition's error code."""
        partition = msg.single_partition(response)
        if response.error_code != 0 or partition is None:
            return False
        error = ErrorCode.from_code(partition.error_code)
        handled = self._common_response(error, msg.leader_or_none(partition.leader_id),
                                        partition.leader_epoch, now_ms)
        return handled if handled is not None else error

    def _handle_begin_epoch_response(self, sender_id: int,
                                     response: m.BeginQuorumEpochResponse, now_ms: int) -> bool:
        error = self._epoch_response_error(response, now_ms)
        if isinstance(error, bool):
            return error
        state = self.quorum.state
        if error == ErrorCode.NONE and isinstance(state, LeaderState):
            state.add_acknowledgement_from(sender_id)
        return error == ErrorCode.NONE

    def _handle_end_epoch_response(self, sender_id: int, response: m.EndQuorumEpochResponse,
                                   now_ms: int) -> bool:
        error = self._epoch_response_error(response, now_ms)
        if isinstance(error, bool):
            return error
        state = self.quorum.state
        if error == ErrorCode.NONE and isinstance(state, ResignedState):
            state.acknowledge_resignation(sender_id)
        return error == ErrorCode.NONE

    def _handle_fetch_response(self, sender_id: int, response: m.FetchResponse,
                               now_ms: int) -> bool:
        partition = msg.single_partition(response)
        if response.error_code != 0 or partition is None:
            return False
        error = ErrorCode.from_code(partition.error_code)
        current = partition.current_leader
        leader_id = msg.leader_or_none(current.leader_id) if current is not None else None
        epoch = current.leader_epoch if current is not None else -1
        for node_id, endpoint in msg.fetch_response_endpoints(response).items():
            if node_id != self.node_id:
                self.endpoints[node_id] = endpoint  # how to reach the leader it names
        handled = self._common_response(error, leader_id, epoch, now_ms)
        if handled is not None:
            return handled
        state = self.quorum.state
        if error != ErrorCode.NONE:
            return False
        if not isinstance(state, FollowerState) or sender_id != state.leader_id:
            return True  # not from the leader we follow: nothing to take
        diverging = partition.diverging_epoch
        snapshot = partition.snapshot_id
        if diverging is not None and diverging.epoch >= 0:
            target = truncation_offset(self.log, OffsetAndEpoch(diverging.end_offset,
                                                                diverging.epoch))
            if target < self.log.high_watermark:
                log.error("node %d: leader %d asks to truncate to %d, below the high "
                          "watermark %d: refused", self.node_id, sender_id, target,
                          self.log.high_watermark)
                return False
            log.info("node %d: truncating to %d (diverging epoch %d ends at %d)",
                     self.node_id, target, diverging.epoch, diverging.end_offset)
            self.log.truncate_to(target)
            if self.history.truncate_from(target):
                self._on_voters_changed(now_ms)
        elif snapshot is not None and (snapshot.epoch >= 0 or snapshot.end_offset >= 0):
            if snapshot.epoch < 0 or snapshot.end_offset <= 0:
                log.warning("node %d: leader %d sent an invalid snapshot id %s",
                            self.node_id, sender_id, snapshot)
                return False
            # Not checked against the local log: the snapshot is past its end (KIP-630).
            snapshot_id = OffsetAndEpoch(snapshot.end_offset, snapshot.epoch)
            log.info("node %d: leader %d sends snapshot %s (our log ends at %d)",
                     self.node_id, sender_id, snapshot_id, self.log.end_offset)
            self._abort_download()
            self._download = _SnapshotDownload(snapshot_id, sender_id,
                                               self.log.snapshots.new_writer(snapshot_id))
        else:
            records = partition.records
            if records is not None and len(records):
                try:
                    self.log.append_as_follower(records)
                except KafkaError as exc:
                    log.warning("node %d: cannot append the fetched records: %s",
                                self.node_id, exc)
                    return False
                if self._observe_control_batches(records):
                    self._on_voters_changed(now_ms)
                if self.flush_in_poll:
                    self.log.flush()  # voters fetch again only with the data on disk
            if partition.high_watermark >= 0:
                new = min(partition.high_watermark, self.log.end_offset)
                if new > self.log.high_watermark:
                    self.log.update_high_watermark(new)
        state.reset_fetch_timeout(now_ms)
        return True

    def _handle_fetch_snapshot_response(self, sender_id: int,
                                        response: m.FetchSnapshotResponse,
                                        now_ms: int) -> bool:
        partition = msg.single_partition(response)
        if response.error_code != 0 or partition is None:
            return False
        error = ErrorCode.from_code(partition.error_code)
        current = partition.current_leader
        leader_id = msg.leader_or_none(current.leader_id) if current is not None else None
        epoch = current.leader_epoch if current is not None else -1
        handled = self._common_response(error, leader_id, epoch, now_ms)
        if handled is not None:
            return handled
        state = self.quorum.state
        download = self._download
        if (not isinstance(state, FollowerState) or sender_id != state.leader_id
                or download is None or download.leader_id != sender_id):
            return True  # nothing to take
        snapshot = partition.snapshot_id
        if (error == ErrorCode.SNAPSHOT_NOT_FOUND or snapshot is None
                or snapshot.end_offset < 0 or snapshot.epoch < 0):
            # The leader deleted it meanwhile (retention): start over with a Fetch.
            log.info("node %d: leader %d no longer has snapshot %s", self.node_id, sender_id,
                     download.snapshot_id)
            self._abort_download()
            state.reset_fetch_timeout(now_ms)
            return True
        if error != ErrorCode.NONE:
            log.warning("node %d: FetchSnapshot of %s refused: %s", self.node_id,
                        download.snapshot_id, error.name)
            self._abort_download()
            return False
        chunk = partition.unaligned_records or b""
        size = partition.size
        writer = download.writer
        if (OffsetAndEpoch(snapshot.end_offset, snapshot.epoch) != download.snapshot_id
                or partition.position != writer.size
                or (download.size is not None and size != download.size)
                or size <= 0 or writer.size + len(chunk) > size
                or (not chunk and writer.size < size)):
            log.warning("node %d: dropping a FetchSnapshot chunk that does not continue the "
                        "download of %s (position %d of %d, %d bytes, have %d)",
                        self.node_id, download.snapshot_id, partition.position, size,
                        len(chunk), writer.size)
            return False
        download.size = size
        writer.append(chunk)
        if writer.size == size:
            self._download = None
            try:
                writer.freeze()
            except CorruptSnapshotError as exc:
                log.warning("node %d: the snapshot %s from leader %d is invalid, discarded: "
                            "%s", self.node_id, download.snapshot_id, sender_id, exc)
                return False
            self._install_snapshot(download.snapshot_id, now_ms)
        state.reset_fetch_timeout(now_ms)
        return True


def _voter_response(response_cls: type[m.Message], error: ErrorCode,
                    message: str | None) -> m.Message:
    """The answer to AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter."""
    if response_cls is m.UpdateRaftVoterResponse:
        return m.UpdateRaftVoterResponse(error_code=error.code)
    return response_cls(error_code=error.code, error_message=message)


def observe_control_batches(history: VoterSetHistory, data: bytes | memoryview) -> None:
    """Takes the KRaftVersionRecords and VotersRecords of `data`'s batches into `history`."""
    for pos, header in iter_batches(data):
        if not header.is_control:
            continue
        for record in iter_records(data, pos, header):
            kind = decode_control_key(record.key)
            if kind == ControlRecordType.KRAFT_VOTERS:
                history.add_voters(record.offset, voter_set_from_record(
                    m.VotersRecord.decode(bytes(record.value or b""), 0)))
            elif kind == ControlRecordType.KRAFT_VERSION:
                history.add_kraft_version(record.offset, m.KRaftVersionRecord.decode(
                    bytes(record.value or b""), 0).kraft_version)


def read_voter_history(raft_log: RaftLog, history: VoterSetHistory) -> VoterSetHistory:
    """A dynamic quorum's voters as of the log's end: the newest snapshot's, then every voters
    record in the log after it (nothing to do with static voters: the log holds none)."""
    if len(history.static):
        return history
    start = raft_log.start_offset
    latest = raft_log.snapshots.latest_id()
    if latest is not None:
        try:
            content = check_snapshot(raft_log.snapshots.read_all(latest), decode_values=False)
        except (CorruptSnapshotError, OSError) as exc:
            log.warning("cannot read the voters of snapshot %s: %s", latest, exc)
        else:
            history.reset(latest.offset, content.kraft_version, content.voters)
            start = max(start, latest.offset)
    for header, data in iter_log_batches(raft_log, start, raft_log.end_offset):
        if header.is_control:
            observe_control_batches(history, data)
    return history
