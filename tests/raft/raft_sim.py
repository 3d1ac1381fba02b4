"""A deterministic simulation of a KRaft quorum: N RaftClients, a seeded scheduler, a network
that delivers, drops, duplicates, delays and reorders, crashes and restarts, partitions.

Everything random comes from one `random.Random(seed)`, and time is simulated, so a seed replays
the same run exactly. Every message crosses the network as bytes (encoded and decoded with the
generated codecs at the versions Raft uses), so codec mistakes show up too.

Invariants, checked as the run goes (every step, or at the event that could break them):
- election safety: at most one leader per epoch, ever (every `quorum-state` write that names a
  leader agrees), and a node votes for at most one candidate per epoch;
- log matching: two logs with a batch of the same (last offset, epoch) have identical prefixes
  up to it (a prefix hash per batch, registered globally);
- committed entries never change: each node's committed prefix (below its high watermark) is a
  prefix of the global committed log, and a log never truncates below its high watermark;
- leader completeness: a leader of epoch L has every entry committed in an epoch before L;
- the high watermark of a node never goes back (until it crashes: then it re-derives it);
- committed batches are handed out in offset order, each exactly the committed one;
- every acknowledged append (the leader's high watermark passed it in its epoch) is in the
  final committed log exactly once;
- liveness: once the network heals and every node is up, a leader is elected and appends
  commit within a bounded simulated time.

Snapshots (KIP-630): each node's state machine is the hash of the committed log it replayed
(the same prefix hash the checker keeps), so a snapshot is that hash at its end offset. Nodes
snapshot their state at random moments and apply the retention rules with a small size limit,
so logs are truncated before their snapshots during the run; a lagging or restarted node whose
fetch offset falls before its leader's log start then catches up by FetchSnapshot. Checked: a
snapshot handed out (downloaded or loaded at restart) is exactly the committed state at its
offset, logs truncated from the start or installed from a snapshot still match the committed
log, and leader completeness holds through a leader's snapshot.

Dynamic quorums (KIP-853, `dynamic=True`): every node starts from a bootstrap snapshot naming
the first `voters` nodes (with directory ids) at kraft.version 1 and no static voters; the
others are observers. An admin sends AddRaftVoter (an observer) and RemoveRaftVoter (a voter,
the leader included) to the leader at random moments, so the voter set changes while nodes
crash, partitions come and go and snapshots are taken; the invariants above must hold through
every change. Checked besides: an admin request answered NONE has its VotersRecord in the
committed log, and once the network heals every node that is up agrees on the voter set the
committed log ends with. With `bootstrap_observers`, the observers are formatted with
--no-initial-controllers: no bootstrap snapshot, only `controller.quorum.bootstrap.servers`
(negative ids, one per voter, that the network routes to that voter), so they learn the leader
from a Fetch answer.

Drivers: by default every node polls at every step. With `deadline_driven`, a node polls as
MetadataQuorum's driver does: after an input (a message, a send failure, an append, a flush) or
once its `next_deadline_ms` is reached, never otherwise. Like the real driver, it reads the
clock again after `poll` to compute the deadline, and the timer may fire up to 1 ms before the
deadline (uvloop counts timers in whole milliseconds from the loop's cached time), so a
deadline the client misses or drops shows up as a node that stops.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import ControlRecordType, iter_batches, iter_records
from odradek.protocol.records.control import decode_control_key
from odradek.raft import MemoryQuorumStateStore, MemoryRaftLog, RaftClient, RaftConfig
from odradek.raft.client import CommittedSnapshot, OutboundReply, OutboundRequest
from odradek.raft.log import OffsetAndEpoch
from odradek.raft.messages import API_VERSIONS
from odradek.raft.quorum_state import ElectionState
from odradek.raft.snapshot import bootstrap_snapshot, clean_snapshots
from odradek.raft.voters import KRAFT_VERSION_DYNAMIC, Voter, VoterSet

CLUSTER_ID = "sim-cluster"
ADMIN = -100  # the sender id of the simulated admin's AddRaftVoter / RemoveRaftVoter
LISTENER = "CONTROLLER"
LIVENESS_BOUND_MS = 20_000


class InvariantViolation(AssertionError):
    pass


# ------------------------------------------------------------------------------------------------
# instrumented storage


def chain(previous: bytes, data: bytes) -> bytes:
    """The prefix hash of a log (or state machine) after one more batch."""
    return hashlib.blake2b(previous + data, digest_size=16).digest()


class SimLog(MemoryRaftLog):
    """The in-memory log, plus a prefix hash per batch reported to the checker. A log that
    starts after 0 keeps an anchor: the prefix hash at its start (`by_last_offset[start - 1]`,
    its data None when it came from a snapshot)."""

    def __init__(self, node_id: int, checker: Checker) -> None:
        super().__init__()
        self.node_id = node_id
        self.checker = checker
        self.prefix: list[bytes] = []  # per batch: hash of every batch up to and including it
        # last offset -> (epoch, prefix, data)
        self.by_last_offset: dict[int, tuple[int, bytes, bytes | None]] = {}
        self.start_prefix = b""
        self.installs = 0
        self._crashing = False

    def delete_before(self, offset: int) -> bool:
        anchor = self.by_last_offset.get(offset - 1)
        if anchor is None:
            self.checker.fail(f"node {self.node_id}: log start moves to {offset}, not after a "
                              f"batch of its log")
        before = len(self._batches)
        if not super().delete_before(offset):
            return False
        del self.prefix[:before - len(self._batches)]
        self.start_prefix = anchor[1]
        for last in [o for o in self.by_last_offset if o < offset - 1]:
            del self.by_last_offset[last]
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        snapshot = self.snapshots.latest_id()
        if snapshot is None or snapshot.offset != offset:
            self.checker.fail(f"node {self.node_id}: full truncation to {offset} without a "
                              f"snapshot there")
        state = CommittedSnapshot(snapshot, self.snapshots).read().values[0]
        super().truncate_fully_and_start_at(offset)
        self.prefix = []
        self.start_prefix = state
        self.by_last_offset = {offset - 1: (snapshot.epoch, state, None)}
        self.installs += 1

    def _add(self, data: bytes, epoch: int, first: int, last: int) -> None:
        super()._add(data, epoch, first, last)
        previous = self.prefix[-1] if self.prefix else self.start_prefix
        digest = chain(previous, data)
        self.prefix.append(digest)
        self.by_last_offset[last] = (epoch, digest, data)
        self.checker.on_batch(self.node_id, last, epoch, digest)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        if not self._crashing and offset < self.high_watermark:
            raise InvariantViolation(f"node {self.node_id} truncates to {offset}, below its "
                                     f"high watermark {self.high_watermark}")
        super().truncate_to(offset)
        kept = len(self._batches)
        for last in [o for o in self.by_last_offset if o >= self.end_offset]:
            self.by_last_offset.pop(last, None)
        del self.prefix[kept:]

    def crash(self) -> None:
        self._crashing = True
        try:
            super().crash()
        finally:
            self._crashing = False


class RecordingStore(MemoryQuorumStateStore):
    """quorum-state in memory (it survives crashes), every write shown to the checker."""

    def __init__(self, node_id: int, checker: Checker) -> None:
        super().__init__()
        self.node_id = node_id
        self.checker = checker

    def write(self, state: ElectionState) -> None:
        self.checker.on_election_state(self.node_id, state)
        super().write(state)


# ------------------------------------------------------------------------------------------------
# the checker


@dataclass
class CommittedEntry:
    last_offset: int
    epoch: int
    prefix: bytes
    data: bytes
    tag: int  # the epoch of the node that first saw it committed (at least its commit epoch)


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.votes: dict[tuple[int, int], int] = {}  # (node, epoch) -> candidate
        self.batches: dict[tuple[int, int], bytes] = {}  # (last offset, epoch) -> prefix hash
        self.committed: list[CommittedEntry] = []
        self.committed_index: dict[int, int] = {}  # last offset -> index in committed
        self.failure: str | None = None

    def fail(self, what: str) -> None:
        if self.failure is None:
            self.failure = what
        raise InvariantViolation(what)

    def on_election_state(self, node_id: int, state: ElectionState) -> None:
        if state.leader_id is not None:
            known = self.leaders.setdefault(state.epoch, state.leader_id)
            if known != state.leader_id:
                self.fail(f"election safety: epoch {state.epoch} has leaders {known} and "
                          f"{state.leader_id} (written by node {node_id})")
        if state.voted_id is not None:
            known = self.votes.setdefault((node_id, state.epoch), state.voted_id)
            if known != state.voted_id:
                self.fail(f"node {node_id} voted for {known} and {state.voted_id} in epoch "
                          f"{state.epoch}")

    def on_batch(self, node_id: int, last_offset: int, epoch: int, prefix: bytes) -> None:
        known = self.batches.setdefault((last_offset, epoch), prefix)
        if known != prefix:
            self.fail(f"log matching: node {node_id} has a batch ending at {last_offset} in "
                      f"epoch {epoch} whose log prefix differs from another node's")

    @property
    def committed_end(self) -> int:
        return self.committed[-1].last_offset + 1 if self.committed else 0

    def check_committed_prefix(self, node_id: int, log: SimLog, epoch: int) -> None:
        """The node's log below its high watermark is a prefix of the committed log, which it
        extends if it is longer."""
        hw = log.high_watermark
        if hw == 0:
            return
        entry = log.by_last_offset.get(hw - 1)
        if entry is None:
            self.fail(f"node {node_id}: high watermark {hw} is not at a batch boundary")
        if hw <= self.committed_end:
            index = self.committed_index.get(hw - 1)
            if index is None or self.committed[index].prefix != entry[1]:
                self.fail(f"node {node_id}: committed prefix up to {hw} differs from the "
                          f"committed log")
            return
        if self.committed:
            top = self.committed[-1]
            mine = log.by_last_offset.get(top.last_offset)
            if mine is None or mine[1] != top.prefix:
                self.fail(f"node {node_id}: commits up to {hw} without the committed log up "
                          f"to {self.committed_end}")
        # Extend the committed log with the node's batches in [committed_end, hw).
        offsets = sorted(o for o in log.by_last_offset if self.committed_end <= o < hw)
        for last in offsets:
            batch_epoch, prefix, data = log.by_last_offset[last]
            if data is None:
                self.fail(f"node {node_id}: its snapshot at {last + 1} is past the committed "
                          f"log ({self.committed_end})")
            self.committed_index[last] = len(self.committed)
            self.committed.append(CommittedEntry(last, batch_epoch, prefix, data, epoch))

    def check_leader_completeness(self, node_id: int, log: SimLog, epoch: int) -> None:
        for entry in reversed(self.committed):
            if entry.tag < epoch:
                if entry.last_offset < log.start_offset - 1:
                    # Before the log start: the snapshot's state includes it if the anchor
                    # is the committed state at the log start.
                    index = self.committed_index.get(log.start_offset - 1)
                    if index is None or self.committed[index].prefix != log.start_prefix:
                        self.fail(f"leader completeness: leader {node_id} of epoch {epoch} "
                                  f"starts its log at {log.start_offset} from a state that "
                                  f"is not the committed one")
                    return
                mine = log.by_last_offset.get(entry.last_offset)
                if mine is None or mine[1] != entry.prefix:
                    self.fail(f"leader completeness: leader {node_id} of epoch {epoch} lacks "
                              f"the entry ending at {entry.last_offset} committed in epoch "
                              f"{entry.tag}")
                return


# ------------------------------------------------------------------------------------------------
# nodes and network


@dataclass
class SimNode:
    node_id: int
    log: SimLog
    store: RecordingStore
    flush_in_poll: bool
    client: RaftClient | None = None
    incarnation: int = 0
    last_hw: int = 0
    next_publish: int = 0
    state: bytes = b""  # the state machine: the prefix hash of what it replayed
    state_epoch: int = 0
    retention_bytes: int = 2000
    wake_at: int = 0  # deadline_driven: when its driver's timer fires
    woken: bool = True  # deadline_driven: an input arrived since its last poll

    @property
    def up(self) -> bool:
        return self.client is not None


@dataclass(order=True)
class Envelope:
    deliver_at: int
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    is_request: bool = field(compare=False)
    cls: type = field(compare=False)
    payload: bytes = field(compare=False)
    correlation_id: int = field(compare=False)
    src_incarnation: int = field(compare=False)
    dst_incarnation: int = field(compare=False)  # responses: the requester's incarnation
    # The id the requester addressed (a bootstrap server's negative id, or the node's own):
    # its answer and any send failure are reported to the requester under that id.
    peer_id: int = field(compare=False, default=0)


@dataclass
class SimStats:
    delivered: int = 0
    dropped: int = 0
    crashes: int = 0
    partitions: int = 0
    appended: int = 0
    acked: int = 0
    max_epoch: int = 0
    snapshots: int = 0
    snapshot_loads: int = 0  # snapshots handed to a state machine (downloaded or at restart)
    installs: int = 0  # snapshots downloaded from a leader (FetchSnapshot)
    truncations: int = 0  # log starts moved by retention
    voters_added: int = 0  # AddRaftVoter answered NONE
    voters_removed: int = 0  # RemoveRaftVoter answered NONE


class Simulation:
    def __init__(self, seed: int, voters: int = 3, observers: int = 1, steps: int = 10_000,
                 config: RaftConfig | None = None, dynamic: bool = False,
                 bootstrap_observers: bool = False, deadline_driven: bool = False,
                 faults: bool = True, down: tuple[int, ...] = (),
                 refused_probability: float = 0.5) -> None:
        """`faults` False: a calm network from the start (no drops, crashes or partitions);
        `down`: nodes not started yet (`start_node`); `refused_probability`: how often a
        request to a node that is down or cut off fails at once (connection refused) rather
        than getting no answer."""
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self.config = config or RaftConfig()
        self.checker = Checker()
        self.dynamic = dynamic
        self.deadline_driven = deadline_driven
        self.refused_probability = refused_probability
        self.voter_ids = list(range(1, voters + 1))
        self.node_ids = self.voter_ids + [100 + i for i in range(observers)]
        # controller.quorum.bootstrap.servers of the observers: negative id -> voter.
        self.bootstrap_servers = ({-2 - i: v for i, v in enumerate(self.voter_ids)}
                                  if bootstrap_observers else {})
        self.directory_ids = {node_id: uuid.UUID(int=self.rng.getrandbits(128) | 1)
                              for node_id in self.node_ids}
        self.now = 0
        self.nodes: dict[int, SimNode] = {}
        self.admin_pending: dict[int, tuple[str, int]] = {}  # correlation id -> (kind, node)
        self.admin_done: list[tuple[str, int, int]] = []  # (kind, node, leader's record offset)
        self._admin_correlation = 0
        for node_id in self.node_ids:
            self.nodes[node_id] = SimNode(node_id, SimLog(node_id, self.checker),
                                          RecordingStore(node_id, self.checker),
                                          flush_in_poll=self.rng.random() < 0.5,
                                          retention_bytes=self.rng.randint(600, 4000))
            if dynamic and not (self.bootstrap_servers and node_id not in self.voter_ids):
                self._write_bootstrap_snapshot(self.nodes[node_id])
            if node_id not in down:
                self._start(self.nodes[node_id])
        self.in_flight: list[Envelope] = []
        self._seq = 0
        self.partition: dict[int, int] = {}  # node -> side; absent: fully connected
        self.calm = not faults
        self.calm_since: int | None = None
        self.first_ack_after_calm: int | None = None
        self.appends: dict[bytes, tuple[int, int, int]] = {}  # value -> (node, offset, epoch)
        self.acked: dict[bytes, int] = {}  # value -> offset
        self._next_value = 0
        self.stats = SimStats()

    # -- nodes
    def _voter(self, node_id: int) -> Voter:
        return Voter(node_id, self.directory_ids[node_id], {LISTENER: ("sim", 9000 + node_id)})

    def _write_bootstrap_snapshot(self, node: SimNode) -> None:
        """What `storage format --initial-controllers` writes: the 0-0 snapshot."""
        voters = VoterSet([self._voter(v) for v in self.voter_ids])
        writer = node.log.snapshots.new_writer(OffsetAndEpoch(0, 0))
        writer.append(bootstrap_snapshot(voters, KRAFT_VERSION_DYNAMIC, 0))
        writer.freeze()

    def _start(self, node: SimNode) -> None:
        node.incarnation += 1
        node.last_hw = 0
        node.next_publish = 0
        node.state = b""
        node.state_epoch = 0
        node.woken = True
        if self.dynamic:
            bootstrap = ({server: ("sim", 9000 + voter)
                          for server, voter in self.bootstrap_servers.items()}
                         if node.node_id not in self.voter_ids else None)
            node.client = RaftClient(
                node.node_id, None, node.log, node.store, cluster_id=CLUSTER_ID,
                now_ms=self.now, config=self.config, rng=random.Random(self.rng.random()),
                flush_in_poll=node.flush_in_poll, directory_id=self.directory_ids[node.node_id],
                listener=LISTENER, local_endpoints={LISTENER: ("sim", 9000 + node.node_id)},
                bootstrap=bootstrap)
            return
        node.client = RaftClient(node.node_id, self.voter_ids, node.log, node.store,
                                 cluster_id=CLUSTER_ID, now_ms=self.now, config=self.config,
                                 rng=random.Random(self.rng.random()),
                                 flush_in_poll=node.flush_in_poll)

    def start_node(self, node_id: int) -> None:
        """Starts a node that is down (its log and quorum-state as it left them)."""
        node = self.nodes[node_id]
        if not node.up:
            self._start(node)

    def _crash(self, node: SimNode) -> None:
        node.client = None
        node.log.crash()
        self.stats.crashes += 1

    # -- network
    def _connected(self, a: int, b: int) -> bool:
        return self.partition.get(a, 0) == self.partition.get(b, 0)

    def _send(self, src: int, dst: int, message: Any, is_request: bool, correlation_id: int,
              dst_incarnation: int = 0, peer_id: int | None = None) -> None:
        """`dst` may be a bootstrap server's id (a request): it goes to that voter."""
        if peer_id is None:
            peer_id = dst
        dst = self.bootstrap_servers.get(dst, dst)
        cls = type(message)
        payload = message.encode(API_VERSIONS[cls])
        copies = 1
        if not self.calm:
            if self.rng.random() < 0.05:
                self.stats.dropped += 1
                return
            if self.rng.random() < 0.01:
                copies = 2
        for _ in range(copies):
            if not self.calm and self.rng.random() < 0.05:
                delay = self.rng.randint(20, 1500)  # a straggler: reordering and staleness
            else:
                delay = self.rng.randint(1, 8)
            self._seq += 1
            self.in_flight.append(Envelope(
                self.now + delay, self._seq, src, dst, is_request, cls, payload, correlation_id,
                self.nodes[src].incarnation, dst_incarnation, peer_id))

    def _route(self, node: SimNode, outbound: list[OutboundRequest | OutboundReply]) -> None:
        for item in outbound:
            if isinstance(item, OutboundRequest):
                self._send(node.node_id, item.destination, item.request, True,
                           item.correlation_id)
            else:
                requester, requester_incarnation, correlation_id, peer_id = item.request_id
                if requester == ADMIN:
                    self._admin_answer(node, correlation_id, item.response)
                    continue
                self._send(node.node_id, requester, item.response, False, correlation_id,
                           requester_incarnation, peer_id)

    def _deliver(self, envelope: Envelope) -> None:
        node = self.nodes[envelope.dst]
        if not node.up or not self._connected(envelope.src, envelope.dst):
            self.stats.dropped += 1
            if envelope.is_request and self.rng.random() < self.refused_probability:
                # The sender sees the connection fail (refused, reset).
                sender = self.nodes[envelope.src]
                if sender.up and sender.incarnation == envelope.src_incarnation:
                    sender.client.handle_send_failure(envelope.peer_id, envelope.correlation_id,
                                                      self.now)
                    sender.woken = True
            return
        message = envelope.cls.decode(envelope.payload, API_VERSIONS[envelope.cls])
        self.stats.delivered += 1
        client = node.client
        node.woken = True
        if envelope.is_request:
            request_id = (envelope.src, envelope.src_incarnation, envelope.correlation_id,
                          envelope.peer_id)
            response = client.handle_request(envelope.src, message, self.now, request_id)
            if response is not None:
                self._send(node.node_id, envelope.src, response, False, envelope.correlation_id,
                           envelope.src_incarnation, envelope.peer_id)
        elif node.incarnation == envelope.dst_incarnation:
            client.handle_response(envelope.peer_id, message, self.now, envelope.correlation_id)

    # -- the run
    def run(self) -> SimStats:
        calm_at = int(self.steps * 0.75)
        for step in range(self.steps):
            if step == calm_at:
                self._heal_everything()
            try:
                self._step()
                self._check()
            except InvariantViolation as exc:
                raise InvariantViolation(f"step {step}, t={self.now} ms: {exc}") from exc
        self._final_checks()
        return self.stats

    def _heal_everything(self) -> None:
        self.calm = True
        self.calm_since = self.now
        self.partition = {}
        for node in self.nodes.values():
            if not node.up:
                self._start(node)

    def run_until(self, condition: Any, limit_ms: int) -> bool:
        """Steps (checking the invariants) until `condition()` holds or `limit_ms` of simulated
        time passed; returns whether it holds."""
        deadline = self.now + limit_ms
        while not condition():
            if self.now >= deadline:
                return False
            self._step()
            self._check()
        return True

    def _step(self) -> None:
        rng = self.rng
        self.now += rng.randint(1, 15)
        due = [e for e in self.in_flight if e.deliver_at <= self.now]
        if due:
            self.in_flight = [e for e in self.in_flight if e.deliver_at > self.now]
            rng.shuffle(due)  # same-time deliveries in any order
            for envelope in due:
                self._deliver(envelope)
        if not self.calm:
            self._faults()
        for node in self.nodes.values():
            if node.up and not node.flush_in_poll and rng.random() < 0.4:
                if node.log.flushed_end < node.log.end_offset:
                    node.woken = True  # the real driver polls once its flush is done
                node.log.flush()
        if rng.random() < 0.3:
            self._append()
        if self.dynamic and rng.random() < 0.004 and self.now - (self.calm_since or self.now) < 5000:
            # (Not in the last part of the calm phase: the run ends with a settled quorum.)
            self._change_voters()
        order = list(self.nodes.values())
        rng.shuffle(order)
        for node in order:
            if node.up and (not self.deadline_driven or node.woken or self.now >= node.wake_at):
                self._route(node, node.client.poll(self.now))
                if self.deadline_driven:
                    node.woken = False
                    # The driver's next clock read is later than the poll's, and its timer may
                    # fire up to 1 ms early.
                    node.wake_at = (node.client.next_deadline_ms(self.now + rng.randint(0, 1))
                                    - rng.randint(0, 1))

    def _faults(self) -> None:
        rng = self.rng
        for node in self.nodes.values():
            if node.up and rng.random() < 0.0015:
                self._crash(node)
            elif not node.up and rng.random() < 0.01:
                self._start(node)
        if rng.random() < 0.002:
            self.stats.partitions += 1
            self.partition = {n: rng.randint(0, 1) for n in self.node_ids}
        elif self.partition and rng.random() < 0.004:
            self.partition = {}
        if rng.random() < 0.0005:
            for node in self.nodes.values():
                if node.up and node.client.is_leader:
                    node.client.resign(self.now)
                    node.woken = True

    # -- dynamic quorums: the admin
    def _change_voters(self) -> None:
        leaders = [n for n in self.nodes.values() if n.up and n.client.is_leader]
        if not leaders:
            return
        leader = self.rng.choice(leaders)
        voters = set(leader.client.voters)
        observers = [n for n in self.node_ids if n not in voters]
        self._admin_correlation += 1
        correlation = self._admin_correlation
        if observers and (len(voters) <= 2 or self.rng.random() < 0.5):
            node_id = self.rng.choice(observers)
            kind = "add"
            endpoint = ("sim", 9000 + node_id)
            request: m.Message = m.AddRaftVoterRequest(
                cluster_id=CLUSTER_ID, timeout_ms=self.rng.randint(200, 3000), voter_id=node_id,
                voter_directory_id=self.directory_ids[node_id],
                listeners=[m.AddRaftVoterRequest.Listener(name=LISTENER, host=endpoint[0],
                                                          port=endpoint[1])])
        else:
            node_id = self.rng.choice(sorted(voters))
            kind = "remove"
            request = m.RemoveRaftVoterRequest(cluster_id=CLUSTER_ID, voter_id=node_id,
                                               voter_directory_id=self.directory_ids[node_id])
        # Through the wire format, as the network would carry it.
        request = type(request).decode(request.encode(0), 0)
        self.admin_pending[correlation] = (kind, node_id)
        leader.woken = True
        response = leader.client.handle_request(ADMIN, request, self.now,
                                                (ADMIN, 0, correlation, ADMIN))
        if response is not None:
            self._admin_answer(leader, correlation, response)

    def _admin_answer(self, node: SimNode, correlation: int, response: m.Message) -> None:
        kind, node_id = self.admin_pending.pop(correlation)
        if response.error_code != ErrorCode.NONE.code:
            return
        # Answered NONE: the leader's VotersRecord for it is committed. Its offset is the last
        # voters record the leader has (no other change can be in flight).
        entry = node.client.history.last_entry
        if entry is None or entry[0] >= node.log.high_watermark:
            self.checker.fail(f"{kind} voter {node_id} answered before its record committed")
        self.admin_done.append((kind, node_id, entry[0]))
        voters = entry[1]
        if (kind == "add") != (node_id in voters):
            self.checker.fail(f"{kind} voter {node_id} answered but the set is {voters.ids}")
        if kind == "add":
            self.stats.voters_added += 1
        else:
            self.stats.voters_removed += 1

    def _append(self) -> None:
        leaders = [n for n in self.nodes.values() if n.up and n.client.is_leader]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        values = []
        for _ in range(self.rng.randint(1, 3)):
            self._next_value += 1
            values.append(b"v%d" % self._next_value)
        offset = node.client.append(values, self.now)
        node.woken = True
        for value in values:
            self.appends[value] = (node.node_id, offset, node.client.epoch)
        self.stats.appended += len(values)

    def _check(self) -> None:
        checker = self.checker
        for node in self.nodes.values():
            if not node.up:
                continue
            client = node.client
            log = node.log
            self.stats.max_epoch = max(self.stats.max_epoch, client.epoch)
            hw = log.high_watermark
            if hw < node.last_hw:
                checker.fail(f"node {node.node_id}: high watermark went back from "
                             f"{node.last_hw} to {hw}")
            checker.check_committed_prefix(node.node_id, log, client.epoch)
            node.last_hw = hw
            if client.is_leader:
                checker.check_leader_completeness(node.node_id, log, client.epoch)
                self._acknowledge(node)
            for batch in client.take_committed():
                if isinstance(batch, CommittedSnapshot):
                    self._load_snapshot(node, batch)
                    continue
                if batch.base_offset != node.next_publish:
                    checker.fail(f"node {node.node_id}: committed batch at {batch.base_offset}, "
                                 f"expected {node.next_publish}")
                index = checker.committed_index.get(batch.last_offset)
                if index is None or checker.committed[index].data != batch.data:
                    checker.fail(f"node {node.node_id}: handed out a batch ending at "
                                 f"{batch.last_offset} that is not the committed one")
                node.next_publish = batch.last_offset + 1
                node.state = chain(node.state, batch.data)
                node.state_epoch = batch.epoch
                if checker.committed[index].prefix != node.state:
                    checker.fail(f"node {node.node_id}: state at {batch.last_offset} is not "
                                 f"the committed log's")
            if self.rng.random() < 0.02:
                self._snapshot(node)

    def _load_snapshot(self, node: SimNode, snapshot: CommittedSnapshot) -> None:
        checker = self.checker
        if snapshot.snapshot_id.offset < node.next_publish:
            checker.fail(f"node {node.node_id}: snapshot {snapshot.snapshot_id} handed out "
                         f"after offset {node.next_publish}")
        state = snapshot.read().values[0]
        index = checker.committed_index.get(snapshot.last_offset)
        if index is None or checker.committed[index].prefix != state:
            checker.fail(f"node {node.node_id}: snapshot {snapshot.snapshot_id} is not the "
                         f"committed state")
        if checker.committed[index].epoch != snapshot.epoch:
            checker.fail(f"node {node.node_id}: snapshot {snapshot.snapshot_id} has the epoch "
                         f"{snapshot.epoch}, the committed batch "
                         f"{checker.committed[index].epoch}")
        node.next_publish = snapshot.snapshot_id.offset
        node.state = state
        node.state_epoch = snapshot.epoch
        self.stats.snapshot_loads += 1

    def _snapshot(self, node: SimNode) -> None:
        """The state machine snapshots its state, then retention truncates the log."""
        client = node.client
        if node.next_publish <= 0:
            return
        latest = node.log.snapshots.latest_id()
        if latest is None or latest.offset < node.next_publish:
            writer = client.create_snapshot(OffsetAndEpoch(node.next_publish, node.state_epoch),
                                            self.now)
            if writer is not None:
                writer.append([node.state])
                writer.freeze()
                self.stats.snapshots += 1
        start = node.log.start_offset
        node.woken = True  # the real driver polls after a snapshot is written
        clean_snapshots(node.log, node.retention_bytes, -1, self.now)
        if node.log.start_offset > start:
            self.stats.truncations += 1

    def _acknowledge(self, leader: SimNode) -> None:
        """An append is acknowledged when its leader's high watermark passes it in its epoch
        (what MetadataQuorum's appenders wait for)."""
        hw = leader.log.high_watermark
        epoch = leader.client.epoch
        for value, (node_id, offset, append_epoch) in list(self.appends.items()):
            appender = self.nodes[node_id].client
            if appender is None or not appender.is_leader or appender.epoch != append_epoch:
                del self.appends[value]  # its leader is gone: it is never acknowledged
                continue
            if node_id == leader.node_id and append_epoch == epoch and offset < hw:
                del self.appends[value]
                index = self.checker.committed_index.get(offset)
                if index is None or self.checker.committed[index].epoch != epoch:
                    self.checker.fail(f"acknowledged {value!r} at {offset} is not committed")
                self.acked[value] = offset
                self.stats.acked += 1
                if self.calm and self.first_ack_after_calm is None:
                    self.first_ack_after_calm = self.now

    def _final_checks(self) -> None:
        self.stats.installs = sum(node.log.installs for node in self.nodes.values())
        counts: dict[bytes, int] = {}
        for entry in self.checker.committed:
            for pos, header in iter_batches(entry.data):
                if header.is_control:
                    continue
                for record in iter_records(entry.data, pos, header):
                    counts[bytes(record.value)] = counts.get(bytes(record.value), 0) + 1
        for value in self.acked:
            if counts.get(value) != 1:
                self.checker.fail(f"acknowledged {value!r} is committed {counts.get(value, 0)} "
                                  f"times")
        if self.calm_since is not None:
            if (self.first_ack_after_calm is None
                    or self.first_ack_after_calm - self.calm_since > LIVENESS_BOUND_MS):
                self.checker.fail(f"liveness: nothing committed within {LIVENESS_BOUND_MS} ms "
                                  f"of the network healing (at {self.calm_since} ms)")
            leaders = [n.node_id for n in self.nodes.values() if n.up and n.client.is_leader]
            if len(leaders) != 1:
                self.checker.fail(f"liveness: {len(leaders)} leaders at the end of a calm phase")
        if self.dynamic:
            self._check_voter_changes()

    def _check_voter_changes(self) -> None:
        """Every voter change answered NONE is in the committed log, and the nodes agree on
        the set the committed log ends with."""
        committed_voters: dict[int, frozenset[int]] = {}  # offset -> set
        for entry in self.checker.committed:
            for pos, header in iter_batches(entry.data):
                if not header.is_control:
                    continue
                for record in iter_records(entry.data, pos, header):
                    if decode_control_key(record.key) == ControlRecordType.KRAFT_VOTERS:
                        voters = m.VotersRecord.decode(bytes(record.value), 0)
                        committed_voters[record.offset] = frozenset(
                            v.voter_id for v in voters.voters)
        for kind, node_id, offset in self.admin_done:
            voters = committed_voters.get(offset)
            if voters is None or (kind == "add") != (node_id in voters):
                self.checker.fail(f"{kind} of voter {node_id} answered NONE, but the committed "
                                  f"log has {voters} at offset {offset}")
        if not self.calm_since:
            return
        final = (committed_voters[max(committed_voters)] if committed_voters
                 else frozenset(self.voter_ids))
        leaders = [n for n in self.nodes.values() if n.up and n.client.is_leader]
        for node in self.nodes.values():
            # A voter removed while it was away never hears of it (it asks for votes, not for
            # records): Kafka's procedure shuts a controller down before removing it. Every
            # node of the final set, and every node following the leader, must agree.
            follows = leaders and node.up and node.client.leader_id == leaders[0].node_id
            if not (node.node_id in final or follows):
                continue
            if not node.up or node.log.end_offset < self.checker.committed_end:
                continue
            # As of the committed end (a newer change may be appended, not yet committed).
            ids = node.client.history.voters_at(self.checker.committed_end - 1).ids
            if frozenset(ids) != final:
                self.checker.fail(f"node {node.node_id} has voters {ids} at the committed "
                                  f"end, the committed log ends with {sorted(final)}")
