"""The election state of one node (Kafka's QuorumState and its EpochState classes) and the
`quorum-state` file that makes it durable.

A node is in exactly one state of one epoch: Unattached (no leader known, no vote cast), Voted
(voted for a candidate), Candidate (asking for votes), Leader, Follower (of a known leader) or
Resigned (a leader that gave up, waiting for the next election). Every transition except to
Resigned is written to the `quorum-state` file BEFORE the node acts on it: a vote is granted,
an epoch bump is announced, a leader appends, only once the file says so. That is what keeps a
restarted node from voting twice in one epoch or forgetting it led one (it restarts Resigned, so
no record is ever written twice under the same offset and epoch).

Transitions a correct node never makes raise `IllegalStateError`; the client checks its inputs
before it asks for a transition, so a bad message never gets here.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from odradek.raft.config import RETRY_BACKOFF_BASE_MS, RaftConfig
from odradek.raft.leader_state import LeaderState
from odradek.raft.voters import VoterSet
from odradek.storage.checkpoint import atomic_write

QUORUM_STATE_FILE = "quorum-state"
QUORUM_STATE_VERSION = 0  # QuorumStateData v0: static voters, as Kafka 3.x writes it
NO_ID = -1


class IllegalStateError(RuntimeError):
    """A transition no correct node makes (a bug, not bad input)."""


# ------------------------------------------------------------------------------------------------
# the durable part


@dataclass(frozen=True)
class ElectionState:
    """What `quorum-state` holds: the epoch, the leader or the vote of that epoch, the voters."""

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voters: tuple[int, ...] = ()

    def to_json(self) -> str:
        """Kafka's QuorumStateData v0 as FileQuorumStateStore writes it (compact, with
        `data_version`)."""
        data = {
            "clusterId": "",
            "leaderId": NO_ID if self.leader_id is None else self.leader_id,
            "leaderEpoch": self.epoch,
            "votedId": NO_ID if self.voted_id is None else self.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": voter} for voter in self.voters],
            "data_version": QUORUM_STATE_VERSION,
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ElectionState:
        """Reads QuorumStateData v0 (and v1, KIP-853's, which has no voters)."""
        data = json.loads(text)
        version = data.get("data_version")
        if version not in (0, 1):
            raise ValueError(f"unknown quorum-state data_version {version!r}")
        leader_id = int(data.get("leaderId", NO_ID))
        voted_id = int(data.get("votedId", NO_ID))
        voters = tuple(int(v["voterId"]) for v in (data.get("currentVoters") or ()))
        return cls(epoch=int(data.get("leaderEpoch", 0)),
                   leader_id=None if leader_id == NO_ID else leader_id,
                   voted_id=None if voted_id == NO_ID else voted_id, voters=voters)


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None:
        """The last written state; None if none was ever written."""

    def write(self, state: ElectionState) -> None:
        """Durably replaces the state (returns once it would survive a crash)."""


class FileQuorumStateStore:
    """`<metadata log dir>/quorum-state`, replaced atomically (tmp + fsync + rename + fsync of
    the directory), like Kafka's FileQuorumStateStore."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> ElectionState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return ElectionState.from_json(text)

    def write(self, state: ElectionState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, state.to_json())


class MemoryQuorumStateStore:
    """A store that is durable by definition (for tests: it survives a simulated crash)."""

    def __init__(self) -> None:
        self.state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1


# ------------------------------------------------------------------------------------------------
# epoch states (LeaderState lives in leader_state)


class UnattachedState:
    """No leader known and no vote cast in this epoch. A voter starts an election when its
    election timeout passes; an observer waits (it has no deadline)."""

    name = "Unattached"
    leader_id: int | None = None
    voted_id: int | None = None

    def __init__(self, epoch: int, election_deadline_ms: int | None) -> None:
        self.epoch = epoch
        self.election_deadline_ms = election_deadline_ms

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return log_up_to_date



class VotedState:
    """Voted for `voted_id` in this epoch: the only candidate this node grants again."""

    name = "Voted"
    leader_id: int | None = None

    def __init__(self, epoch: int, voted_id: int, election_deadline_ms: int) -> None:
        self.epoch = epoch
        self.voted_id = voted_id
        self.election_deadline_ms = election_deadline_ms

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return candidate_id == self.voted_id



class CandidateState:
    """Asking the voters for their votes in `epoch` (it voted for itself). Won with a majority
    of grants; lost once a majority can no longer be reached or the election timeout passes,
    then it backs off before the next epoch's election."""

    name = "Candidate"
    leader_id: int | None = None

    def __init__(self, node_id: int, epoch: int, voters: VoterSet, retries: int,
                 election_deadline_ms: int) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.voters = voters
        self.retries = retries
        self.election_deadline_ms = election_deadline_ms
        self.granted: set[int] = {node_id}
        self.rejected: set[int] = set()
        self.backoff_deadline_ms: int | None = None

    @property
    def voted_id(self) -> int:
        return self.node_id

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False  # it voted for itself

    def record_granted(self, voter_id: int) -> None:
        if voter_id in self.voters and voter_id not in self.rejected:
            self.granted.add(voter_id)

    def record_rejected(self, voter_id: int) -> None:
        if voter_id in self.voters and voter_id not in self.granted:
            self.rejected.add(voter_id)

    @property
    def is_vote_granted(self) -> bool:
        return len(self.granted) >= self.voters.majority

    @property
    def is_vote_rejected(self) -> bool:
        """A majority can no longer be reached in this epoch."""
        return len(self.voters) - len(self.rejected) < self.voters.majority

    def unrecorded_voters(self) -> list[int]:
        return [v for v in self.voters if v not in self.granted and v not in self.rejected]

    @property
    def is_backing_off(self) -> bool:
        return self.backoff_deadline_ms is not None

    def start_backing_off(self, now_ms: int, backoff_ms: int) -> None:
        self.backoff_deadline_ms = now_ms + backoff_ms



class FollowerState:
    """Following a known leader: fetches from it; a voter that hears nothing for the fetch
    timeout starts an election."""

    name = "Follower"
    voted_id: int | None = None

    def __init__(self, epoch: int, leader_id: int, fetch_timeout_ms: int, now_ms: int) -> None:
        self.epoch = epoch
        self.leader_id = leader_id
        self.fetch_timeout_ms = fetch_timeout_ms
        self.fetch_deadline_ms = now_ms + fetch_timeout_ms

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False  # the epoch has a leader

    def reset_fetch_timeout(self, now_ms: int) -> None:
        self.fetch_deadline_ms = now_ms + self.fetch_timeout_ms

    def override_fetch_timeout(self, now_ms: int, timeout_ms: int) -> None:
        """EndQuorumEpoch: the leader is going; start the election sooner."""
        self.fetch_deadline_ms = now_ms + timeout_ms



class ResignedState:
    """A leader that gave up its epoch (graceful shutdown, lost quorum, or restarted after
    leading). It appends nothing; it tells the voters with EndQuorumEpoch and starts the next
    election when its election timeout passes."""

    name = "Resigned"
    voted_id: int | None = None

    def __init__(self, node_id: int, epoch: int, voters: VoterSet, election_deadline_ms: int,
                 preferred_successors: list[int]) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.election_deadline_ms = election_deadline_ms
        self.preferred_successors = preferred_successors
        self.unacknowledged = {v for v in voters if v != node_id}

    @property
    def leader_id(self) -> int:
        return self.node_id

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False

    def acknowledge_resignation(self, voter_id: int) -> None:
        self.unacknowledged.discard(voter_id)



EpochState = (UnattachedState | VotedState | CandidateState | FollowerState | ResignedState
              | LeaderState)


# ------------------------------------------------------------------------------------------------
# transitions


class QuorumState:
    """The current EpochState of `node_id` and the transitions between states; durable
    transitions write `quorum-state` first."""

    def __init__(self, node_id: int, voters: VoterSet, store: QuorumStateStore,
                 config: RaftConfig, rng: random.Random) -> None:
        self.node_id = node_id
        self.voters = voters
        self.store = store
        self.config = config
        self.rng = rng
        self.state: EpochState = UnattachedState(0, None)

    # -- queries
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def is_observer(self) -> bool:
        return not self.is_voter

    @property
    def is_leader(self) -> bool:
        return isinstance(self.state, LeaderState)

    def random_election_timeout_ms(self) -> int:
        """Uniform in [T, 2T): voters rarely time out together, so split votes are rare."""
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randrange(timeout)

    def election_backoff_ms(self, retries: int) -> int:
        """Binary exponential backoff with jitter after a lost election (Kafka's
        binaryExponentialElectionBackoffMs)."""
        bound = 2 << min(20, max(retries, 1) - 1)
        return min(RETRY_BACKOFF_BASE_MS * self.rng.randrange(bound),
                   self.config.election_backoff_max_ms)

    def _voter_deadline(self, now_ms: int) -> int | None:
        return now_ms + self.random_election_timeout_ms() if self.is_voter else None

    # -- start
    def initialize(self, log_last_epoch: int, now_ms: int) -> None:
        """The state after a (re)start, from `quorum-state` and the log's last epoch."""
        election = self.store.read() or ElectionState(0, voters=tuple(self.voters))
        timeout = self.random_election_timeout_ms()
        state: EpochState
        if election.epoch < log_last_epoch:
            # The log saw a later epoch than the file (a file lost or restored): start there.
            state = UnattachedState(log_last_epoch, self._voter_deadline(now_ms))
        elif election.leader_id == self.node_id:
            # We led this epoch. Restart resigned: never vote in it, never append in it again
            # (records we wrote but did not flush may be gone; their offsets must not be
            # reused under the same epoch).
            state = ResignedState(self.node_id, election.epoch, self.voters, now_ms + timeout,
                                  [])
        elif election.voted_id == self.node_id and self.is_voter:
            state = CandidateState(self.node_id, election.epoch, self.voters, 1, now_ms + timeout)
        elif election.voted_id is not None:
            state = VotedState(election.epoch, election.voted_id, now_ms + timeout)
        elif election.leader_id is not None and election.leader_id in self.voters:
            state = FollowerState(election.epoch, election.leader_id,
                                  self.config.fetch_timeout_ms, now_ms)
        else:
            state = UnattachedState(election.epoch, self._voter_deadline(now_ms))
        if self.store.read() != self._election_state(state):
            self.store.write(self._election_state(state))
        self.state = state

    def _election_state(self, state: EpochState) -> ElectionState:
        return ElectionState(state.epoch, leader_id=state.leader_id, voted_id=state.voted_id,
                             voters=tuple(self.voters))

    # -- transitions
    def _durable(self, state: EpochState) -> EpochState:
        # The file first: if the write fails, the node stays in its old state.
        self.store.write(self._election_state(state))
        self.state = state
        return state

    def transition_to_unattached(self, epoch: int, now_ms: int,
                                 keep_election_timer: bool = False) -> UnattachedState:
        """`keep_election_timer`: a Vote request moved us to its epoch; the election timer
        runs on unless we grant the vote (the Raft paper's rule: only a granted vote or a
        leader resets it). Otherwise a candidate whose log is too far behind to win could
        keep every voter from ever timing out by starting epoch after epoch."""
        if epoch <= self.epoch:
            raise IllegalStateError(f"cannot become Unattached in epoch {epoch} from "
                                    f"{self.state.name} in epoch {self.epoch}")
        deadline = self._voter_deadline(now_ms)
        if keep_election_timer and deadline is not None:
            current = self.state
            kept = getattr(current, "election_deadline_ms", None)
            if isinstance(current, FollowerState):
                kept = current.fetch_deadline_ms
            if kept is not None:
                deadline = kept
        state = UnattachedState(epoch, deadline)
        self._durable(state)
        return state

    def transition_to_voted(self, epoch: int, candidate_id: int, now_ms: int) -> VotedState:
        if candidate_id == self.node_id:
            raise IllegalStateError("a node votes for itself by becoming a candidate")
        # A candidate need not be in this node's voter set: with a dynamic quorum this node
        # may not have the newest set yet (KIP-853); the caller checked it may vote.
        if epoch < self.epoch or (epoch == self.epoch
                                  and not isinstance(self.state, UnattachedState)):
            raise IllegalStateError(f"cannot vote in epoch {epoch} from {self.state.name} in "
                                    f"epoch {self.epoch}")
        state = VotedState(epoch, candidate_id, now_ms + self.random_election_timeout_ms())
        self._durable(state)
        return state

    def transition_to_candidate(self, now_ms: int) -> CandidateState:
        if self.is_observer:
            raise IllegalStateError("an observer cannot become a candidate")
        if isinstance(self.state, LeaderState):
            raise IllegalStateError("a leader cannot become a candidate")
        retries = self.state.retries + 1 if isinstance(self.state, CandidateState) else 1
        state = CandidateState(self.node_id, self.epoch + 1, self.voters, retries,
                               now_ms + self.random_election_timeout_ms())
        self._durable(state)
        return state

    def transition_to_leader(self, epoch_start_offset: int, high_watermark: int,
                             now_ms: int) -> LeaderState:
        candidate = self.state
        if not isinstance(candidate, CandidateState) or not candidate.is_vote_granted:
            raise IllegalStateError(f"cannot become leader from {self.state.name}")
        state = LeaderState(self.node_id, candidate.epoch, epoch_start_offset, self.voters,
                            sorted(candidate.granted), high_watermark, now_ms, self.config)
        self._durable(state)
        return state

    def transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> FollowerState:
        if leader_id == self.node_id:
            raise IllegalStateError(f"cannot follow itself in epoch {epoch}")
        if epoch < self.epoch or (epoch == self.epoch and isinstance(
                self.state, (FollowerState, LeaderState, ResignedState))):
            raise IllegalStateError(f"cannot follow {leader_id} in epoch {epoch} from "
                                    f"{self.state.name} in epoch {self.epoch}")
        state = FollowerState(epoch, leader_id, self.config.fetch_timeout_ms, now_ms)
        self._durable(state)
        return state

    def transition_to_resigned(self, preferred_successors: Iterable[int],
                               now_ms: int) -> ResignedState:
        if not isinstance(self.state, LeaderState):
            raise IllegalStateError(f"only a leader resigns, not a {self.state.name}")
        # Same epoch and leader as the file already says: nothing to write.
        state = ResignedState(self.node_id, self.epoch, self.voters,
                              now_ms + self.random_election_timeout_ms(),
                              list(preferred_successors))
        self.state = state
        return state
