"""One fault run end to end: a cluster (loopback or namespaces), a topic, the workload, the
nemesis on its seeded schedule, a final full read, the checker. Used by tests/faults/run.py and
by the tests.

Phases (each marked in the history): warm-up (workload only), faults (the schedule's window),
cool-down (workload only: the cluster must recover), drain (the producer stops, every record
gets its answer), final read (a new consumer session reads every partition from 0)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from faults.checker import Report, check
from faults.cluster import FaultCluster
from faults.history import History
from faults.nemesis import SCENARIOS, Fault, Nemesis, describe_schedule, make_schedule
from faults.netns import NetnsNetwork

# Each node's log directory, in the full-disk scenario: a tmpfs of this size (filled by the
# nemesis), roomy enough for the workload until then.
SMALL_DISK_BYTES = 256 << 20
from faults.workload import ConsumerSession, ProducerWorker

START_TIMEOUT_S = 60.0  # N Python broker processes starting on a shared 2-core machine
TOPIC_READY_TIMEOUT_S = 30.0


@dataclass
class ScenarioConfig:
    workdir: Path
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(2**31))
    scenario: str = "kill-leader"  # a key of nemesis.SCENARIOS
    duration: float = 40.0  # the faults window, seconds
    brokers: int = 3
    partitions: int = 1
    replication_factor: int = 3
    min_insync_replicas: int = 2
    rate: float = 100.0  # records a second
    faults: int | None = None  # default: the scenario's
    fault_duration: tuple[float, float] | None = None  # default: the scenario's
    netns: bool | None = None  # None: only when the scenario partitions the network
    warmup: float = 3.0
    cooldown: float = 8.0
    read_deadline: float = 60.0  # bound on each consumer session's catching up
    broker_config: dict[str, str] = field(default_factory=dict)
    topic: str = "faults"

    @property
    def uses_small_disks(self) -> bool:
        return "fill-disk" in SCENARIOS[self.scenario].kinds

    @property
    def uses_netns(self) -> bool:
        if self.netns is not None:
            return self.netns
        return "partition" in SCENARIOS[self.scenario].kinds


@dataclass
class RunResult:
    config: ScenarioConfig
    schedule: list[Fault]
    history_path: Path
    report: Report
    harness_errors: list[str]  # a worker that crashed: the history is then not to be trusted
    liveness_problems: list[str] = field(default_factory=list)
    log_tails: str = ""

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.harness_errors and not self.liveness_problems

    def summary(self) -> str:
        lines = [(f"seed {self.config.seed}, scenario {self.config.scenario}, "
                  f"{self.config.brokers} brokers, RF={self.config.replication_factor}, "
                  f"min.insync.replicas={self.config.min_insync_replicas}, "
                  f"{self.config.partitions} partition(s), "
                  f"{'netns' if self.config.uses_netns else 'loopback'}"),
                 f"history: {self.history_path}",
                 self.report.summary()]
        lines += [f"NOT LIVE: {problem}" for problem in self.liveness_problems]
        lines += [f"HARNESS ERROR: {error}" for error in self.harness_errors]
        if not self.ok:
            lines.append(f"replay with --seed {self.config.seed}")
        return "\n".join(lines)


def acked_targets(history: History) -> dict[int, int]:
    """Per partition, one past the highest acknowledged offset."""
    targets: dict[int, int] = {}
    for event in list(history.events):
        # (an ack without an offset, librdkafka's "persisted, offset unknown", sets none)
        if event["type"] == "ack" and event["offset"] is not None:
            targets[event["partition"]] = max(targets.get(event["partition"], 0),
                                              event["offset"] + 1)
    return targets


def liveness_problems(events: list[dict]) -> list[str]:
    """A run is only evidence if the cluster took writes, and took them again once the faults
    were over (it recovered): otherwise "nothing lost" says nothing."""
    acks = [e["t"] for e in events if e["type"] == "ack"]
    faults_end = next((e["t"] for e in events
                       if e["type"] == "phase" and e["name"] == "faults-end"), None)
    if not acks:
        return ["no record was acknowledged in the whole run"]
    if faults_end is not None and max(acks) < faults_end:
        return [("no record was acknowledged after the faults ended "
                f"(t={faults_end:.1f}s): the cluster did not recover")]
    return []


def create_topic(cluster: FaultCluster, config: ScenarioConfig) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(config.topic, num_partitions=config.partitions,
                     replication_factor=config.replication_factor,
                     config={"min.insync.replicas": str(config.min_insync_replicas)})
    admin.create_topics([topic], operation_timeout=15)[config.topic].result(30)
    cluster.wait_partitions_ready(config.topic, config.partitions, config.replication_factor,
                                  TOPIC_READY_TIMEOUT_S)


def run_scenario(config: ScenarioConfig,
                 log: Callable[[str], None] = lambda text: print(text, flush=True)) -> RunResult:
    shape = SCENARIOS[config.scenario]
    node_ids = list(range(1, config.brokers + 1))
    schedule = make_schedule(config.seed, shape.kinds, config.duration,
                             config.faults if config.faults is not None else shape.faults,
                             config.fault_duration or shape.duration, node_ids)
    log(f"fault run: seed {config.seed} (replay with --seed {config.seed}), scenario "
        f"{config.scenario}: {describe_schedule(schedule)}")
    config.workdir.mkdir(parents=True, exist_ok=True)
    history_path = config.workdir / f"history-{config.scenario}-{config.seed}.jsonl"
    history = History(history_path)
    client_log = config.workdir / "clients.log"
    history.record("meta", config={k: str(v) for k, v in asdict(config).items()},
                   schedule=[asdict(f) for f in schedule])
    harness_errors: list[str] = []
    tails = ""
    with ExitStack() as stack:
        stack.callback(history.close)
        network = None
        if config.uses_netns:
            network = NetnsNetwork(node_ids)
            stack.callback(network.teardown)  # after the cluster is down (LIFO)
            network.setup()
            log(f"nodes in network namespaces {network.tag}n*, "
                f"addresses {network.address(1)}..{network.address(node_ids[-1])}")
        cluster = FaultCluster(config.workdir / "cluster", config.brokers,
                               config.broker_config, network,
                               disk_bytes=SMALL_DISK_BYTES if config.uses_small_disks else None)
        stack.callback(cluster.unmount_disks)  # after the cluster is down (LIFO)
        cluster.format()
        cluster.start()
        stack.callback(cluster.shutdown)
        try:
            cluster.wait_ready(START_TIMEOUT_S)
            create_topic(cluster, config)
        except BaseException:
            log(cluster.log_tails())
            raise
        log(f"cluster up, topic {config.topic} ready at t={history.now():.1f}s")

        producer = ProducerWorker("p0", cluster.bootstrap, config.topic, config.partitions,
                                  config.rate, history, client_log=client_log)
        live = ConsumerSession("live-0", cluster.bootstrap, config.topic, config.partitions,
                               history, final=False, deadline_s=config.read_deadline,
                               targets=lambda: acked_targets(history), client_log=client_log)
        nemesis = Nemesis(cluster, schedule, config.topic, 0, history)
        producer.start()
        live.start()
        try:
            time.sleep(config.warmup)
            history.record("phase", name="faults-start")
            nemesis.start()
            last = max((f.at + f.duration for f in schedule), default=0.0)
            nemesis.join(max(config.duration, last) + 60)
            if nemesis.is_alive():
                harness_errors.append("the nemesis did not finish its schedule in time")
                nemesis.stop()
            history.record("phase", name="faults-end")
            time.sleep(config.cooldown)
        finally:
            nemesis.stop()
            nemesis.join(30)
            producer.stop()
            producer.join(90)
            history.record("phase", name="produce-end")
            live.finish()
            live.join(config.read_deadline + 30)
        final = ConsumerSession("final-0", cluster.bootstrap, config.topic, config.partitions,
                                history, final=True, deadline_s=config.read_deadline,
                                targets=lambda: acked_targets(history), client_log=client_log)
        final.start()
        final.finish()
        final.join(config.read_deadline + 30)
        history.record("phase", name="end")
        for name, worker in (("nemesis", nemesis), ("producer", producer), ("live consumer", live),
                             ("final consumer", final)):
            if worker.is_alive():
                harness_errors.append(f"the {name} did not finish")
            if worker.error is not None:
                harness_errors.append(f"the {name} failed: {worker.error!r}")
        for node in cluster.nodes.values():
            if not node.running:
                harness_errors.append(f"node {node.node_id} is not running at the end "
                                      f"(exit {node.proc.returncode if node.proc else None})")
        tails = cluster.log_tails()
    result = RunResult(config, schedule, history_path, check(history.events), harness_errors,
                       liveness_problems(history.events), tails)
    log(result.summary())
    if not result.ok:
        log(f"node logs under {config.workdir / 'cluster'}; their tails:\n{tails}")
    return result
