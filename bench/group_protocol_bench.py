"""KIP-848 against the classic protocol: how long a 3-member group takes to be stable again
after a member leaves (6 partitions; stable: the two others own three partitions each).

Run: `python -m bench group_protocol` (writes docs/performance.md) or
`python bench/group_protocol_bench.py [--quick]` (prints the section only).

Both protocols get the same pace: the broker's group.consumer.heartbeat.interval.ms and the
classic clients' heartbeat.interval.ms are 500 ms, the classic clients use the cooperative
(incremental) assignor, and group.initial.rebalance.delay.ms is 0. The correctness of the same
scenario is asserted in tests/compat/test_groups_consumer_protocol*.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # BrokerProcess
sys.path.insert(0, str(ROOT / "tests" / "compat"))  # the group members of the tests

from broker_process import BrokerProcess
from group_members import LibrdkafkaMember, OdradekMember, create_topic, wait_for

NAME = "group_protocol"

BROKER = {"offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0",
          "group.consumer.min.heartbeat.interval.ms": "500",
          "group.consumer.heartbeat.interval.ms": "500"}
#: Odradek's classic consumer with the same pace as librdkafka's classic members
ODRADEK_CLASSIC = {"group.protocol": "classic", "heartbeat.interval.ms": 500,
                   "session.timeout.ms": 6000,
                   "partition.assignment.strategy": "cooperative-sticky"}


def _members(kind: str, bootstrap: str, group: str, topic: str) -> list:
    if kind == "librdkafka consumer":
        return [LibrdkafkaMember(bootstrap, group, topic) for _ in range(3)]
    if kind == "librdkafka classic":
        return [LibrdkafkaMember(bootstrap, group, topic, protocol="classic") for _ in range(3)]
    if kind == "odradek consumer":
        return [OdradekMember(bootstrap, group, topic) for _ in range(3)]
    return [OdradekMember(bootstrap, group, topic, **ODRADEK_CLASSIC) for _ in range(3)]


def _balanced(members, per_member: int) -> bool:
    owned = [m.owned for m in members]
    return all(len(o) == per_member for o in owned) and \
        len(set().union(*owned)) == per_member * len(members)


def stabilise_after_leave(broker: BrokerProcess, kind: str) -> float:
    topic, group = create_topic(broker.bootstrap, 6), f"bench-{uuid.uuid4().hex[:6]}"
    members = _members(kind, broker.bootstrap, group, topic)
    for member in members:
        member.start()
    try:
        wait_for(lambda: _balanced(members, 2), 60, f"three {kind} members with 2 each")
        leaving = members[-1]
        started = time.monotonic()
        leaving.stop.set()
        wait_for(lambda: _balanced(members[:2], 3), 60, f"two {kind} members with 3 each")
        return time.monotonic() - started
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.join(30)


KINDS = ("librdkafka consumer", "odradek consumer", "librdkafka classic", "odradek classic")


def run(quick: bool = False) -> str:
    rounds = 1 if quick else 3
    results: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as work:
        broker = BrokerProcess(Path(work), overrides=BROKER).start()
        try:
            for _ in range(rounds):
                for kind in KINDS:
                    took = stabilise_after_leave(broker, kind)
                    results[kind].append(took)
                    print(f"  {kind}: {took:.2f} s", flush=True)
        finally:
            broker.stop()
    lines = ["## Group protocols: stable again after a member leaves", "",
             ("3 members, 6 partitions, one member closes (it leaves the group); time until "
              f"the other two own 3 partitions each. Median of {rounds} run(s); heartbeats "
              "every 500 ms for both protocols, cooperative assignor for the classic ones."),
             "",
             "| members | protocol | seconds (median) | runs |", "|---|---|---|---|"]
    for kind in KINDS:
        client, protocol = kind.split()
        values = results[kind]
        lines.append(f"| {client} | {protocol} | {statistics.median(values):.2f} | "
                     f"{', '.join(f'{v:.2f}' for v in values)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(run(quick=parser.parse_args().quick))


if __name__ == "__main__":
    main()
