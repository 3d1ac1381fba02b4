"""Run one fault scenario against a fresh cluster and check its history.

    python tests/faults/run.py --seed 42 --scenario kill-leader --duration 40 --brokers 3

prints the seed (replay a run with the same --seed), writes the history (JSON lines) and the
nodes' logs under --workdir, runs the checker and prints its summary: acknowledged count, lost,
duplicates, inconsistent offsets, skipped/backwards polls, longest unavailability. Exit status 0
when no anomaly was found, 1 otherwise. See docs/faults.md."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the faults package

from faults.checker import check
from faults.history import read_history
from faults.nemesis import SCENARIOS
from faults.scenario import ScenarioConfig, run_scenario


def duration_range(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def broker_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def parse_args(argv: list[str] | None = None) -> ScenarioConfig | Path:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="replays a run's schedule (default: random)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="kill-leader")
    parser.add_argument("--duration", type=float, default=40.0,
                        help="seconds of the faults window (default 40)")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--replication-factor", "--rf", type=int, default=3)
    parser.add_argument("--min-insync-replicas", type=int, default=None,
                        help="default: 2 when RF >= 3, else 1")
    parser.add_argument("--rate", type=float, default=100.0, help="records a second")
    parser.add_argument("--faults", type=int, help="how many (default: the scenario's)")
    parser.add_argument("--fault-duration", type=duration_range, metavar="S[:S]",
                        help="each fault lasts S seconds, or uniform in S:S")
    parser.add_argument("--netns", action=argparse.BooleanOptionalAction, default=None,
                        help="nodes in network namespaces (default: when the scenario "
                             "partitions)")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--cooldown", type=float, default=8.0)
    parser.add_argument("--broker-config", type=broker_setting, action="append", default=[],
                        metavar="KEY=VALUE", help="a server.properties setting for every node")
    parser.add_argument("--workdir", type=Path,
                        help="where the history and node data go (default: a new temp dir)")
    parser.add_argument("--check", type=Path, metavar="HISTORY",
                        help="only check an existing history file and print the summary")
    args = parser.parse_args(argv)
    if args.check:
        return args.check
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"odradek-faults-{args.scenario}-"))
    min_isr = args.min_insync_replicas
    if min_isr is None:
        min_isr = 2 if args.replication_factor >= 3 else 1
    config = ScenarioConfig(workdir=workdir, scenario=args.scenario, duration=args.duration,
                            brokers=args.brokers, partitions=args.partitions,
                            replication_factor=args.replication_factor,
                            min_insync_replicas=min_isr, rate=args.rate, faults=args.faults,
                            fault_duration=args.fault_duration, netns=args.netns,
                            warmup=args.warmup, cooldown=args.cooldown,
                            broker_config=dict(args.broker_config))
    if args.seed is not None:
        config.seed = args.seed
    return config


def main(argv: list[str] | None = None) -> int:
    parsed = parse_args(argv)
    if isinstance(parsed, Path):
        report = check(read_history(parsed))
        print(report.summary())
        return 0 if report.ok else 1
    result = run_scenario(parsed)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
