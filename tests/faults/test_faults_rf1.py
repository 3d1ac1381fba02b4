"""Real processes, today's broker (no replication needed): 3 combined nodes, a topic of one
partition with replication factor 1, an idempotent acks=all producer and a consumer, while the
partition's leader is killed with -9 and restarted 3 s later. Every acknowledged record must
survive the crash: read back exactly once, at the offset it was acknowledged at, with no skipped
or backwards poll."""

from __future__ import annotations

from faults.history import read_history
from faults.scenario import ScenarioConfig, run_scenario
from faults.seeds import events_between, fault_windows, scenario_seed


def test_acknowledged_writes_survive_kill_9_of_their_only_replica(tmp_path):
    config = ScenarioConfig(workdir=tmp_path, seed=scenario_seed(), scenario="kill-leader",
                            duration=8.0, brokers=3, partitions=1, replication_factor=1,
                            min_insync_replicas=1, rate=100.0, faults=1,
                            fault_duration=(3.0, 3.0), warmup=2.0, cooldown=3.0,
                            read_deadline=30.0)
    result = run_scenario(config)
    assert result.ok, result.summary()

    events = read_history(result.history_path)
    [(kill, restarted_at)] = fault_windows(events)
    assert kill["action"] == "kill" and kill["leader_known"], result.summary()
    before = events_between(events, "ack", 0, kill["t"])
    after = events_between(events, "ack", restarted_at, float("inf"))
    assert before and after, f"acks before the kill and after the restart\n{result.summary()}"
    assert not events_between(events, "ack", kill["t"] + 0.5, restarted_at), (
        "acks while the partition's only replica was dead")
    assert result.report.acked == result.report.attempted, result.summary()
    print(f"\nseed {config.seed}: acked {result.report.acked}, longest unavailability "
          f"{result.report.longest_unavailability.length:.2f}s")  # type: ignore[union-attr]
