"""The nemesis: faults on a schedule drawn from a seeded RNG, so `--seed N` replays the same
schedule (when, which kind, for how long; the node hit is the watched partition's leader at that
moment, found with a Metadata request, or the schedule's fallback node when none is known).

Kinds: kill (SIGKILL, restart after the duration), pause (SIGSTOP, SIGCONT after it), partition
(the node's link down, up after it; needs the nodes in network namespaces), fill-disk (the
node's disk full: it halts at its next write; room again after the duration and the node
restarted; needs the nodes' log directories on small disks)."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass

from faults.cluster import FaultCluster
from faults.history import History

KINDS = ("kill", "pause", "partition", "fill-disk")
MIXED_KINDS = ("kill", "pause", "partition")  # fill-disk needs small disks: its own scenario


@dataclass(frozen=True)
class ScenarioShape:
    kinds: tuple[str, ...]
    faults: int  # how many in the faults window
    duration: tuple[float, float]  # each fault lasts uniform(lo, hi) seconds


# A paused or cut-off leader only loses its leadership once the controller stops hearing its
# heartbeats (broker.session.timeout.ms, 9 s by default), so those faults last longer than that.
SCENARIOS = {
    "kill-leader": ScenarioShape(("kill",), 5, (3.0, 3.0)),  # issue 15: 5 x kill -9 in 40 s
    "pause-leader": ScenarioShape(("pause",), 2, (14.0, 16.0)),
    "partition-leader": ScenarioShape(("partition",), 2, (14.0, 16.0)),
    "mixed": ScenarioShape(MIXED_KINDS, 3, (3.0, 12.0)),
    # The leader halts at once; its disk stays full a few seconds, then it comes back.
    "full-disk-leader": ScenarioShape(("fill-disk",), 3, (4.0, 6.0)),
}

QUIET_AFTER_FAULT_S = 1.0  # at least this long between one fault's end and the next's start


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the faults window opens
    kind: str
    duration: float
    fallback_node: int


def make_schedule(seed: int, kinds: tuple[str, ...], window: float, count: int,
                  duration: tuple[float, float], nodes: list[int]) -> list[Fault]:
    """`count` faults in `window` seconds: one per equal slot, at a random time in it that
    leaves the fault room to end before the slot does."""
    rng = random.Random(seed)
    slot = window / max(count, 1)
    schedule: list[Fault] = []
    for index in range(count):
        length = round(rng.uniform(*duration), 3)
        slack = max(slot - length - QUIET_AFTER_FAULT_S, 0.0)
        at = index * slot + rng.uniform(0, slack)
        if schedule:  # faults longer than their slot push the next one later, never overlap
            at = max(at, schedule[-1].at + schedule[-1].duration + QUIET_AFTER_FAULT_S)
        schedule.append(Fault(at=round(at, 3), kind=rng.choice(kinds), duration=length,
                              fallback_node=rng.choice(nodes)))
    return schedule


def describe_schedule(schedule: list[Fault]) -> str:
    return "; ".join(f"{f.kind} at +{f.at:.1f}s for {f.duration:.1f}s" for f in schedule)


class Nemesis(threading.Thread):
    """Runs a schedule against the cluster, recording each action in the history. Whatever it
    did is undone when it ends, even early (stop()) or on an error (kept in `error`)."""

    def __init__(self, cluster: FaultCluster, schedule: list[Fault], topic: str,
                 partition: int, history: History) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.cluster = cluster
        self.schedule = schedule
        self.topic = topic
        self.partition = partition
        self.history = history
        self._stop_event = threading.Event()
        self.error: BaseException | None = None
        self._undo: list[tuple[str, int]] = []

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        opened = time.monotonic()
        try:
            for index, fault in enumerate(self.schedule):
                if self._stop_event.wait(max(opened + fault.at - time.monotonic(), 0)):
                    return
                self._inject(index, fault)
                self._stop_event.wait(fault.duration)
                self._heal()
        except BaseException as error:  # noqa: BLE001 - reported by the scenario
            self.error = error
            self.history.record("nemesis", action="error", error=repr(error))
        finally:
            try:
                self._heal()
            except BaseException as error:  # noqa: BLE001
                self.error = self.error or error

    def _inject(self, index: int, fault: Fault) -> None:
        leader = self.cluster.partition_leader(self.topic, self.partition)
        node = leader if leader is not None else fault.fallback_node
        details = {"node": node, "fault": index, "leader_known": leader is not None,
                   "planned": asdict(fault)}
        if fault.kind == "kill":
            self.cluster.nodes[node].kill()
            self.history.record("nemesis", action="kill", **details)
            self._undo.append(("restart", node))
        elif fault.kind == "pause":
            self.cluster.pause(node)
            self.history.record("nemesis", action="pause", **details)
            self._undo.append(("resume", node))
        elif fault.kind == "partition":
            self.cluster.isolate(node)
            self.history.record("nemesis", action="isolate", **details)
            self._undo.append(("heal", node))
        elif fault.kind == "fill-disk":
            self.cluster.fill_disk(node)
            self.history.record("nemesis", action="fill-disk", **details)
            self._undo.append(("free-disk", node))
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _heal(self) -> None:
        while self._undo:
            action, node = self._undo.pop()
            if action == "restart":
                self.cluster.nodes[node].start()
            elif action == "resume":
                self.cluster.resume(node)
            elif action == "free-disk":
                self.cluster.free_disk(node)
            else:
                self.cluster.heal(node)
            self.history.record("nemesis", action=action, node=node)
