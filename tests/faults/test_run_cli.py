"""tests/faults/run.py's arguments, and --check on a history file."""

from __future__ import annotations

import json

from faults import run


def test_defaults_and_overrides(tmp_path):
    config = run.parse_args(["--seed", "9", "--rf", "1", "--workdir", str(tmp_path)])
    assert (config.seed, config.replication_factor, config.min_insync_replicas) == (9, 1, 1)
    assert (config.scenario, config.duration, config.brokers) == ("kill-leader", 40.0, 3)
    config = run.parse_args(["--scenario", "partition-leader", "--fault-duration", "2:4",
                             "--broker-config", "broker.session.timeout.ms=6000",
                             "--workdir", str(tmp_path)])
    assert config.min_insync_replicas == 2 and config.uses_netns
    assert config.fault_duration == (2.0, 4.0)
    assert config.broker_config == {"broker.session.timeout.ms": "6000"}


def test_check_only_reads_a_history(tmp_path, capsys):
    path = tmp_path / "h.jsonl"
    events = [{"t": 1, "type": "invoke", "process": "p0", "value": "a", "partition": 0},
              {"t": 2, "type": "ack", "process": "p0", "value": "a", "partition": 0,
               "offset": 0},
              {"t": 3, "type": "session", "session": "final-0", "final": True, "start": 0},
              {"t": 4, "type": "session-end", "session": "final-0", "complete": True}]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert run.main(["--check", str(path)]) == 1  # "a" was acknowledged and never read
    assert "lost 1" in capsys.readouterr().out
