"""The seeded simulation of a KRaft quorum, snapshots included (see raft_sim.py for what it
checks).

CI runs a few seeds of 3 and 5 voters (plus an observer) for 10,000 steps each; even seeds drive
the nodes on their deadlines (as MetadataQuorum does) rather than polling every step. More
seeds or
one seed: `ODRADEK_RAFT_SEEDS=1-500` or `ODRADEK_RAFT_SEED=1234` (`ODRADEK_RAFT_STEPS` changes
the length). A failing run names its seed and the command that replays it.
"""

from __future__ import annotations

import os

import pytest
from raft_sim import InvariantViolation, Simulation

DEFAULT_SEEDS = {3: [1, 2, 3], 5: [1, 2]}


def _seeds_from_env() -> list[int] | None:
    one = os.environ.get("ODRADEK_RAFT_SEED")
    if one:
        return [int(one)]
    spec = os.environ.get("ODRADEK_RAFT_SEEDS")
    if not spec:
        return None
    seeds: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def _cases() -> list[tuple[int, int]]:
    seeds = _seeds_from_env()
    voters = [int(v) for v in os.environ.get("ODRADEK_RAFT_VOTERS", "3,5").split(",")]
    if seeds is None:
        return [(n, seed) for n in voters for seed in DEFAULT_SEEDS.get(n, [1])]
    return [(n, seed) for n in voters for seed in seeds]


STEPS = int(os.environ.get("ODRADEK_RAFT_STEPS", "10000"))


@pytest.mark.parametrize(("voters", "seed"), _cases())
def test_simulated_quorum_keeps_raft_invariants(voters: int, seed: int) -> None:
    simulation = Simulation(seed, voters=voters, observers=1, steps=STEPS,
                            deadline_driven=seed % 2 == 0)
    try:
        stats = simulation.run()
    except InvariantViolation as exc:
        pytest.fail(f"raft simulation, {voters} voters, seed {seed}: {exc}\nreplay: "
                    f"ODRADEK_RAFT_SEED={seed} ODRADEK_RAFT_VOTERS={voters} "
                    f"ODRADEK_RAFT_STEPS={STEPS} python -m pytest "
                    f"tests/raft/test_simulation.py", pytrace=False)
    # The run must have exercised something: elections, faults, commits, snapshots and logs
    # truncated before them.
    assert stats.acked > 0 and stats.max_epoch > 1 and stats.crashes > 0, stats
    assert stats.snapshots > 0 and stats.truncations > 0, stats


DYNAMIC_SEEDS = [1, 2, 3]


@pytest.mark.parametrize("seed", _seeds_from_env() or DYNAMIC_SEEDS)
def test_simulated_dynamic_quorum_keeps_raft_invariants_through_voter_changes(seed: int) -> None:
    """KIP-853: voters added and removed (the leader too) while the run goes on."""
    simulation = Simulation(seed, voters=3, observers=2, steps=STEPS, dynamic=True,
                            deadline_driven=seed % 2 == 0)
    try:
        stats = simulation.run()
    except InvariantViolation as exc:
        pytest.fail(f"raft simulation, dynamic quorum, seed {seed}: {exc}\nreplay: "
                    f"ODRADEK_RAFT_SEED={seed} ODRADEK_RAFT_STEPS={STEPS} python -m pytest "
                    f"tests/raft/test_simulation.py -k dynamic", pytrace=False)
    assert stats.acked > 0 and stats.max_epoch > 1 and stats.crashes > 0, stats
    assert stats.voters_added > 0 and stats.voters_removed > 0, stats


BOOTSTRAP_DOWN_MS = 5000
CATCH_UP_BOUND_MS = 2000


@pytest.mark.parametrize("seed", _seeds_from_env() or [1, 2, 3])
def test_observer_started_before_its_bootstrap_server_finds_the_leader(seed: int) -> None:
    """An observer formatted with --no-initial-controllers polls while its only bootstrap
    server refuses connections for a few seconds; once the server is up, the observer learns
    the leader from a Fetch answer and catches up. Driven on deadlines, as the real driver:
    a retry backoff the client drops from its deadline leaves it asleep for a minute."""
    simulation = Simulation(seed, voters=1, observers=1, dynamic=True, bootstrap_observers=True,
                            deadline_driven=True, faults=False, down=(1,),
                            refused_probability=1.0)
    voter, observer = simulation.nodes[1], simulation.nodes[100]
    simulation.run_until(lambda: False, BOOTSTRAP_DOWN_MS)
    assert observer.client.leader_id is None and observer.log.end_offset == 0
    simulation.start_node(1)
    assert voter.client.is_leader
    target = voter.client.append([b"after the bootstrap server came up"], simulation.now)
    caught_up = simulation.run_until(
        lambda: observer.client.leader_id == 1 and observer.log.high_watermark > target,
        CATCH_UP_BOUND_MS)
    assert caught_up, (f"seed {seed}: {observer.client!r} did not catch up with "
                       f"{voter.client!r} within {CATCH_UP_BOUND_MS} ms of its bootstrap "
                       f"server starting")
    assert observer.client.state_name == "Follower"
    assert observer.log.end_offset >= target + 1 and observer.client.epoch == voter.client.epoch
