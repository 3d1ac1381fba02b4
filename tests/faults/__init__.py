"""Odradek's fault-injection suite: real broker processes (on loopback or each in a network
namespace of its own), an idempotent acks=all workload, a nemesis that kills, pauses and
partitions nodes on a seeded schedule, and a Jepsen-style checker over the recorded history.
See docs/faults.md."""

from __future__ import annotations

import sys
from pathlib import Path

# The cluster helpers live beside the cluster tests (tests/cluster/quorum_cluster.py imports
# tests/broker_process.py); put both directories on the path whether we were imported by
# pytest or by tests/faults/run.py.
_TESTS = Path(__file__).resolve().parent.parent
for _path in (_TESTS, _TESTS / "cluster"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
