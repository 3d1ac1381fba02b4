"""The fault schedule is a function of the seed: a printed seed replays the same faults."""

from __future__ import annotations

import itertools

import pytest

from faults.nemesis import KINDS, QUIET_AFTER_FAULT_S, SCENARIOS, make_schedule


def schedule(seed: int, scenario: str = "mixed", window: float = 40.0):
    shape = SCENARIOS[scenario]
    return make_schedule(seed, shape.kinds, window, shape.faults, shape.duration, [1, 2, 3])


def test_the_same_seed_gives_the_same_schedule():
    assert schedule(42) == schedule(42)
    assert schedule(42) != schedule(43)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("seed", range(20))
def test_faults_are_in_order_inside_the_window_and_do_not_overlap(scenario, seed):
    faults = schedule(seed, scenario)
    shape = SCENARIOS[scenario]
    assert len(faults) == shape.faults
    assert all(f.kind in shape.kinds and f.kind in KINDS for f in faults)
    assert all(shape.duration[0] <= f.duration <= shape.duration[1] for f in faults)
    assert all(f.fallback_node in (1, 2, 3) for f in faults)
    assert faults[0].at >= 0
    for earlier, later in itertools.pairwise(faults):
        assert earlier.at + earlier.duration + QUIET_AFTER_FAULT_S <= later.at + 1e-6


def test_the_issue_kill_scenario_is_five_kills_in_40_s_restarted_after_3_s():
    faults = schedule(7, "kill-leader")
    assert [f.kind for f in faults] == ["kill"] * 5
    assert {f.duration for f in faults} == {3.0}
    assert faults[-1].at + faults[-1].duration <= 40.0
