"""What a leader tracks of its replicas (Kafka's LeaderState): each voter's and observer's
fetched end offset, the high watermark those give, who acknowledged the epoch, and whether a
majority still fetches (check-quorum).

The high watermark is the end offset a majority of voters has (the leader counts its own
FLUSHED end offset), and it moves only once that offset is past the epoch's start offset: an
entry of an older epoch is never committed by counting its replicas, only by committing the new
epoch's LeaderChange after it (Raft's rule). It never moves back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from odradek.raft.config import OBSERVER_SESSION_TIMEOUT_MS, RaftConfig
from odradek.raft.voters import VoterSet


@dataclass
class ReplicaState:
    """One replica as the leader sees it (Kafka's LeaderState.ReplicaState)."""

    node_id: int
    end_offset: int | None = None  # its fetch offset in this epoch; None before it fetched
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end_offset: int = -1
    acknowledged: bool = False  # it knows this leader (fetched, or answered BeginQuorumEpoch)
    directory_id: uuid.UUID | None = None  # as its last Fetch said (KIP-853)

    def update_follower(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        # Caught up: at the leader's end now, or at the leader's end of its previous fetch (then
        # it was caught up as of that fetch).
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif (self.last_fetch_leader_end_offset > 0
              and fetch_offset >= self.last_fetch_leader_end_offset):
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_end_offset = leader_end_offset
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)
        self.end_offset = fetch_offset
        self.acknowledged = True


class LeaderState:
    name = "Leader"
    voted_id: int | None = None

    def __init__(self, node_id: int, epoch: int, epoch_start_offset: int, voters: VoterSet,
                 granting_voters: list[int], high_watermark: int, now_ms: int,
                 config: RaftConfig) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset  # where this epoch's LeaderChange is
        self.voters = voters
        self.granting_voters = granting_voters
        self.high_watermark = high_watermark  # inherited; moves only forward
        self.config = config
        self.voter_states = {v: ReplicaState(v) for v in voters}
        if node_id in self.voter_states:
            self.voter_states[node_id].acknowledged = True
        self.observer_states: dict[int, ReplicaState] = {}
        self.high_watermark_sent: dict[int, int] = {}  # replica -> in our last Fetch answer
        self._fetched_voters: set[int] = set()
        self.check_quorum_deadline_ms = now_ms + config.check_quorum_timeout_ms

    @property
    def leader_id(self) -> int:
        return self.node_id

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False

    # -- acknowledgement
    def non_acknowledging_voters(self) -> list[int]:
        return [v for v, state in self.voter_states.items() if not state.acknowledged]

    def add_acknowledgement_from(self, voter_id: int) -> None:
        state = self.voter_states.get(voter_id)
        if state is not None:
            state.acknowledged = True

    # -- replication
    def update_local_state(self, flushed_end_offset: int, now_ms: int) -> bool:
        """The leader's own log is durable below `flushed_end_offset`; returns whether the
        high watermark moved."""
        state = self.voter_states.get(self.node_id)
        if state is None:
            return False
        state.end_offset = flushed_end_offset
        state.last_fetch_ms = state.last_caught_up_ms = now_ms
        return self._maybe_update_high_watermark()

    def update_replica_state(self, replica_id: int, fetch_offset: int, leader_end_offset: int,
                             now_ms: int, directory_id: uuid.UUID | None = None) -> bool:
        """A valid Fetch at `fetch_offset`: the replica has everything below it. Returns
        whether the high watermark moved."""
        if replica_id < 0 or replica_id == self.node_id:
            return False
        state = self.voter_states.get(replica_id)
        if state is None:
            state = self.observer_states.setdefault(replica_id, ReplicaState(replica_id))
            state.directory_id = directory_id
            state.update_follower(fetch_offset, leader_end_offset, now_ms)
            return False  # observers never count
        state.directory_id = directory_id
        state.update_follower(fetch_offset, leader_end_offset, now_ms)
        self._update_check_quorum(replica_id, now_ms)
        return self._maybe_update_high_watermark()

    def _maybe_update_high_watermark(self) -> bool:
        offsets = sorted((-1 if s.end_offset is None else s.end_offset
                          for s in self.voter_states.values()), reverse=True)
        majority_offset = offsets[len(offsets) // 2]
        if majority_offset > self.epoch_start_offset and majority_offset > self.high_watermark:
            self.high_watermark = majority_offset
            return True
        return False

    def update_voters(self, voters: VoterSet) -> bool:
        """The voter set changed (a VotersRecord was appended or truncated away): a new voter
        brings its progress as an observer, a removed one goes on as an observer. Returns
        whether the high watermark moved."""
        self.voters = voters
        states: dict[int, ReplicaState] = {}
        for node_id in voters:
            state = self.voter_states.get(node_id) or self.observer_states.pop(node_id, None)
            states[node_id] = state or ReplicaState(node_id)
        for node_id, state in self.voter_states.items():
            if node_id not in voters and node_id != self.node_id:
                self.observer_states[node_id] = state
        if self.node_id in states:
            states[self.node_id].acknowledged = True
        self.voter_states = states
        return self._maybe_update_high_watermark()

    def is_caught_up(self, replica_id: int, now_ms: int) -> bool:
        """Whether an observer fetched up to this leader's end within the fetch timeout (Kafka
        adds only such a replica as a voter, so the high watermark does not stall)."""
        state = self.observer_states.get(replica_id)
        return (state is not None and state.last_caught_up_ms >= 0
                and now_ms - state.last_caught_up_ms <= self.config.fetch_timeout_ms)

    # -- check quorum
    def update_check_quorum(self, voter_id: int, now_ms: int) -> None:
        """A voter showed it follows this leader (a valid Fetch or FetchSnapshot)."""
        if voter_id != self.node_id and voter_id in self.voter_states:
            self._update_check_quorum(voter_id, now_ms)

    def _update_check_quorum(self, voter_id: int, now_ms: int) -> None:
        self._fetched_voters.add(voter_id)
        needed = self.voters.majority - (1 if self.node_id in self.voters else 0)
        if len(self._fetched_voters) >= needed:
            self._fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + self.config.check_quorum_timeout_ms

    def check_quorum_expired(self, now_ms: int) -> bool:
        if len(self.voters) == 1 and self.node_id in self.voters:
            return False  # a lone voter is its own majority
        return now_ms >= self.check_quorum_deadline_ms

    def next_check_quorum_ms(self) -> int | None:
        if len(self.voters) == 1 and self.node_id in self.voters:
            return None
        return self.check_quorum_deadline_ms

    def expire_observers(self, now_ms: int) -> None:
        for node_id, state in list(self.observer_states.items()):
            if now_ms - state.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS:
                del self.observer_states[node_id]

    # -- resignation
    def preferred_successors(self) -> list[int]:
        """The other voters, most caught up first (EndQuorumEpoch's PreferredSuccessors)."""
        others = [s for v, s in self.voter_states.items() if v != self.node_id]
        others.sort(key=lambda s: -1 if s.end_offset is None else s.end_offset, reverse=True)
        return [s.node_id for s in others]
