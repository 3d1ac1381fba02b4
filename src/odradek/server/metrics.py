"""The broker's metrics over HTTP in Prometheus' text format (`metrics.prometheus.listener`).

Names are those the Prometheus JMX exporter gives Kafka's MBeans with its standard Kafka rules
(the example `kafka-2_0_0.yml`, and Strimzi's KRaft additions for `raft-metrics` and the
`...Percent` gauges), so dashboards and alerts written for Kafka carry over:
`kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T` is
`kafka_server_brokertopicmetrics_bytesin_total{topic="T"}`, a RequestMetrics histogram's
99thPercentile is `kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"}`,
the RequestsPerSec meter of Produce v9 is
`kafka_network_requestmetrics_requests_total{request="Produce",version="9"}`.
docs/grafana/odradek.json is a dashboard on these names (tests/server/test_grafana_dashboard.py
keeps the two in step).

Nothing is computed per request for this: the counters Kafka keeps per topic are plain ints
added where the data passes already (`BrokerTopicStats`: an append's batch-header offsets and
size, a fetch response's record sizes), and everything else -- partitions, ISRs, purgatories,
groups, the quorum, connections, the request histograms -- is read when Prometheus scrapes.
The scrape is served by prometheus_client's own HTTP server on a thread of its own; the
broker's state is only ever touched on the event loop, so a scrape asks the loop for a
`BrokerSnapshot` (plain values, copied in one callback) and formats it on its thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import GCCollector, ProcessCollector, start_http_server
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from odradek.config.broker import metrics_listener
from odradek.protocol.errors import ErrorCode
from odradek.server.request_metrics import PARTS, Histogram, api_name

if TYPE_CHECKING:
    from odradek.server.broker import Broker

# Yammer histograms' percentiles as the JMX exporter names them (75thPercentile -> "0.75").
QUANTILES = ((0.5, "0.50"), (0.75, "0.75"), (0.95, "0.95"), (0.98, "0.98"), (0.99, "0.99"),
             (0.999, "0.999"))
SCRAPE_TIMEOUT_S = 10.0


@dataclass
class PartitionView:
    topic: str
    partition: int
    leader: bool
    isr: int
    replicas: int
    min_isr: int
    size: int
    waiting_produces: int


@dataclass
class BrokerSnapshot:
    """Everything one scrape reports, copied on the event loop."""

    topic_stats: dict[str, list[int]] = field(default_factory=dict)
    all_topics: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    requests: dict[str, tuple[Histogram, ...]] = field(default_factory=dict)
    requests_by_version: dict[tuple[str, int], int] = field(default_factory=dict)
    errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (request, error name)
    isr_changes: tuple[int, int, int] = (0, 0, 0)  # shrinks, expands, failed updates
    partitions: list[PartitionView] = field(default_factory=list)
    fetch_purgatory: int = 0
    connections: dict[str, int] = field(default_factory=dict)
    active_controller: bool = False
    offline_partitions: int = 0
    global_topics: int = 0
    global_partitions: int = 0
    active_brokers: int = 0
    fenced_brokers: int = 0
    raft: dict[str, float] = field(default_factory=dict)
    raft_state: str = ""
    classic_groups: dict[str, int] = field(default_factory=dict)
    consumer_groups: dict[str, int] = field(default_factory=dict)
    loop_stalls: tuple[int, int, float] | None = None  # stalls, starved, longest ms


def take_snapshot(broker: Broker) -> BrokerSnapshot:
    """Runs on the event loop: plain copies of the state the collectors report."""
    snap = BrokerSnapshot()
    replica_manager = broker.replica_manager
    if replica_manager is not None:
        stats = replica_manager.topic_stats
        snap.topic_stats = {topic: list(counts) for topic, counts in stats.by_topic.items()}
        snap.all_topics = list(stats.all_topics)
        for partition in replica_manager.partitions.values():
            leader = partition.is_leader
            snap.partitions.append(PartitionView(
                partition.topic, partition.index, leader, len(partition.isr),
                len(partition.replicas), partition.min_insync_replicas if leader else 0,
                partition.log.size_in_bytes, len(partition.commits) if leader else 0))
        snap.fetch_purgatory = replica_manager.fetch_purgatory.watcher_count
        isr = replica_manager.isr_stats
        snap.isr_changes = (isr.shrinks, isr.expands, isr.failed)
    network = broker.network
    if network is not None:
        snap.requests = {
            api_name(api_key): tuple(Histogram(list(h.counts), h.count, h.sum_ns, h.max_ns)
                                     for h in histograms)
            for api_key, histograms in network.request_metrics.by_api.items()}
        snap.requests_by_version = {
            (api_name(api_key), version): count
            for (api_key, version), count in network.request_metrics.by_version.items()}
        snap.errors = {
            (api_name(api_key), error_name(code)): count
            for api_key, counts in network.request_metrics.errors.items()
            for code, count in counts.items()}
        for connection in network.connections:
            name = connection.listener.name
            snap.connections[name] = snap.connections.get(name, 0) + 1
        for listener in network.bound_ports:
            snap.connections.setdefault(listener, 0)
    quorum = broker.quorum
    if quorum is not None:
        snap.active_controller = quorum.is_active
        image = quorum.image
        if snap.active_controller:
            # Kafka's controller gauges are reported by the active controller only.
            snap.global_topics = len(image.topics_by_name)
            snap.fenced_brokers = sum(1 for b in image.brokers.values() if b.fenced)
            snap.active_brokers = len(image.brokers) - snap.fenced_brokers
            for topic in image.topics_by_name.values():
                snap.global_partitions += len(topic.partitions)
                snap.offline_partitions += sum(1 for p in topic.partitions.values()
                                               if p.leader < 0)
        leader = quorum.leader_id
        raft = quorum.raft
        # A lone voter leads without a Raft client running.
        snap.raft_state = raft.state_name.lower() if raft is not None else (
            "leader" if quorum.is_single_voter else "unattached")
        now_ms = quorum.clock.time_ms()
        snap.raft = {"current_leader": -1 if leader is None else leader,
                     "current_vote": current_vote(quorum.node_id, snap.raft_state,
                                                  raft.state if raft is not None else None),
                     "current_epoch": quorum.epoch,
                     "high_watermark": quorum.high_watermark,
                     "log_end_offset": quorum.log.log_end_offset,
                     "log_end_epoch": quorum.raft_log.last_fetched_epoch,
                     "commit_latency_avg": quorum.commit_latency.avg(now_ms),
                     "commit_latency_max": quorum.commit_latency.max(now_ms),
                     "poll_idle_ratio_avg": quorum.poll_idle_ratio.avg(now_ms)}
    coordinator = broker.group_coordinator
    if coordinator is not None:
        for group in coordinator.manager.groups.values():
            if group.consumer is not None:
                state = group.consumer.state().value
                snap.consumer_groups[state] = snap.consumer_groups.get(state, 0) + 1
            else:
                state = group.state.value
                snap.classic_groups[state] = snap.classic_groups.get(state, 0) + 1
    monitor = broker.loop_monitor
    if monitor is not None:
        stats = monitor.stats
        snap.loop_stalls = (stats.stalls, stats.starved, stats.longest_ms)
    return snap


def current_vote(node_id: int, state_name: str, state: Any) -> int:
    """Kafka's raft-metrics current-vote: the leader and a candidate voted for themselves; an
    unattached voter reports whom it voted for in this epoch; others -1."""
    if state_name in ("leader", "candidate"):
        return node_id
    voted = getattr(state, "voted_id", None) if state_name in ("unattached", "voted") else None
    return -1 if voted is None else voted


def error_name(code: int) -> str:
    """Kafka's `Errors` name of an error code (the ErrorsPerSec `error` tag)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN_SERVER_ERROR"  # Kafka's Errors.forCode of a code it does not know


class LoopIdle:
    """The share of wall time the event-loop thread was not running (its CPU clock against
    the wall clock since the previous scrape): Kafka's request handler and network
    processor idle ratios, both at once, since one loop does both jobs here."""

    def __init__(self, thread_id: int) -> None:
        self.clock_id = time.pthread_getcpuclockid(thread_id)
        self.last = (time.monotonic(), time.clock_gettime(self.clock_id))

    def ratio(self) -> float:
        now = (time.monotonic(), time.clock_gettime(self.clock_id))
        wall, cpu = now[0] - self.last[0], now[1] - self.last[1]
        if wall >= 0.05:  # scrapes close together share the longer window
            self.last = now
        if wall <= 0:
            return 1.0
        return min(1.0, max(0.0, 1.0 - cpu / wall))


# The groups' Yammer gauges (kafka.coordinator.group:type=GroupMetadataManager).
_CLASSIC_STATES = (("Stable", "numgroupsstable"),
                   ("PreparingRebalance", "numgroupspreparingrebalance"),
                   ("CompletingRebalance", "numgroupscompletingrebalance"),
                   ("Empty", "numgroupsempty"), ("Dead", "numgroupsdead"))
_CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")


class BrokerCollector:
    """A prometheus_client collector over a broker: one snapshot per scrape."""

    def __init__(self, snapshot: Callable[[], BrokerSnapshot], node_id: int,
                 idle: LoopIdle | None) -> None:
        self.snapshot = snapshot
        self.node_id = node_id
        self.idle = idle

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        yield from self._topic_metrics(snap)
        yield from self._request_metrics(snap)
        yield from self._replica_metrics(snap)
        yield from self._controller_metrics(snap)
        yield from self._group_metrics(snap)
        yield from self._network_metrics(snap)

    def _topic_metrics(self, snap: BrokerSnapshot) -> Iterator[Metric]:
        for index, name, doc in (
                (0, "messagesin", "Messages appended (counted from batch headers)"),
                (1, "bytesin", "Bytes appended by clients"),
                (2, "bytesout", "Bytes sent to consumers in fetch responses"),
                (3, "replicationbytesout", "Bytes sent to follower replicas")):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}",
                                         f"{doc} (BrokerTopicMetrics)", labels=["topic"])
            # The all-topics MBean has no topic key: a series without the label.
            family.samples.append(Sample(f"{family.name}_total", {}, snap.all_topics[index]))
            for topic, counts in sorted(snap.topic_stats.items()):
                family.add_metric([topic], counts[index])
            yield family

    def _request_metrics(self, snap: BrokerSnapshot) -> Iterator[Metric]:
        # Kafka keeps one RequestsPerSec meter per API and version, and none per API alone.
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, by API and version (RequestsPerSec)",
                                       labels=["request", "version"])
        for (request, version), count in sorted(snap.requests_by_version.items()):
            requests.add_metric([request, str(version)], count)
        yield requests
        # ErrorsPerSec: every error code in the responses, NONE included, as Kafka counts them.
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                     "Error codes in responses, by API and error (ErrorsPerSec)",
                                     labels=["request", "error"])
        for (request, error), count in sorted(snap.errors.items()):
            errors.add_metric([request, error], count)
        yield errors
        for part_index, part in enumerate(PARTS):
            name = f"kafka_network_requestmetrics_{part.lower()}"
            gauge = GaugeMetricFamily(name, f"{part} percentiles by API (RequestMetrics)",
                                      labels=["request", "quantile"])
            count = CounterMetricFamily(f"{name}_count", f"{part} samples by API",
                                        labels=["request"])
            for request, histograms in sorted(snap.requests.items()):
                histogram = histograms[part_index]
                for fraction, label in QUANTILES:
                    gauge.add_metric([request, label], histogram.percentile_ms(fraction))
                count.add_metric([request], histogram.count)
            yield gauge
            yield count

    def _replica_metrics(self, snap: BrokerSnapshot) -> Iterator[Metric]:
        partitions = snap.partitions
        leaders = [p for p in partitions if p.leader]
        for name, value, doc in (
                ("partitioncount", len(partitions), "Partitions hosted on this broker"),
                ("leadercount", len(leaders), "Partitions this broker leads"),
                ("underreplicatedpartitions", sum(1 for p in leaders if p.isr < p.replicas),
                 "Led partitions whose ISR is smaller than their replica set"),
                ("underminisrpartitioncount", sum(1 for p in leaders if p.isr < p.min_isr),
                 "Led partitions whose ISR is below min.insync.replicas"),
                ("atminisrpartitioncount", sum(1 for p in leaders if p.isr == p.min_isr),
                 "Led partitions whose ISR is exactly min.insync.replicas")):
            yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc, value=value)
        size = GaugeMetricFamily("kafka_log_log_size", "Size of a partition's log in bytes",
                                 labels=["topic", "partition"])
        for p in sorted(partitions, key=lambda p: (p.topic, p.partition)):
            size.add_metric([p.topic, str(p.partition)], p.size)
        yield size
        for name, count, doc in zip(
                ("isrshrinks", "isrexpands", "failedisrupdates"), snap.isr_changes,
                ("ISR shrinks of led partitions the controller accepted (IsrShrinksPerSec)",
                 "ISR expansions of led partitions the controller accepted (IsrExpandsPerSec)",
                 "ISR changes the controller refused (FailedIsrUpdatesPerSec)"), strict=True):
            yield CounterMetricFamily(f"kafka_server_replicamanager_{name}", doc, value=count)
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting in a purgatory (acks=all produces, long-polling fetches)",
            labels=["delayedOperation"])
        purgatory.add_metric(["Produce"], sum(p.waiting_produces for p in leaders))
        purgatory.add_metric(["Fetch"], snap.fetch_purgatory)
        yield purgatory

    def _controller_metrics(self, snap: BrokerSnapshot) -> Iterator[Metric]:
        for name, value, doc in (
                ("activecontrollercount", int(snap.active_controller),
                 "1 on the active controller, else 0"),
                ("offlinepartitionscount", snap.offline_partitions,
                 "Partitions without a leader (active controller only)"),
                ("globaltopiccount", snap.global_topics, "Topics (active controller only)"),
                ("globalpartitioncount", snap.global_partitions,
                 "Partitions (active controller only)"),
                ("activebrokercount", snap.active_brokers,
                 "Registered brokers not fenced (active controller only)"),
                ("fencedbrokercount", snap.fenced_brokers,
                 "Registered brokers fenced, e.g. shut down (active controller only)")):
            yield GaugeMetricFamily(f"kafka_controller_kafkacontroller_{name}", doc, value=value)
        for name, value in snap.raft.items():
            yield GaugeMetricFamily(f"kafka_server_raftmetrics_{name}",
                                    f"The metadata quorum's {name.replace('_', '-')}",
                                    value=value)
        if snap.raft_state:
            state = GaugeMetricFamily("kafka_server_raftmetrics_current_state",
                                      "This node's state in the metadata quorum",
                                      labels=["current_state"])
            state.add_metric([snap.raft_state], 1)
            yield state

    def _group_metrics(self, snap: BrokerSnapshot) -> Iterator[Metric]:
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield GaugeMetricFamily(f"{prefix}numgroups", "Groups this broker coordinates",
                                value=sum(snap.classic_groups.values())
                                + sum(snap.consumer_groups.values()))
        for state, name in _CLASSIC_STATES:
            yield GaugeMetricFamily(f"{prefix}{name}", f"Classic groups in state {state}",
                                    value=snap.classic_groups.get(state, 0))
        consumer = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_consumer_group_count",
            "Consumer groups (KIP-848) by state", labels=["state"])
        for state in _CONSUMER_STATES:
            consumer.add_metric([state.lower()], snap.consumer_groups.get(state, 0))
        yield consumer

    def _network_metrics(self, snap: BrokerSnapshot) -> Iterator[Metric]:
        connections = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open connections by listener (one event loop: networkProcessor 0)",
            labels=["listener", "networkProcessor"])
        for listener, count in sorted(snap.connections.items()):
            connections.add_metric([listener, "0"], count)
        yield connections
        if self.idle is not None:
            idle = self.idle.ratio()
            yield GaugeMetricFamily(
                "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
                "Share of time the event loop (which handles every request) was idle",
                value=idle)
            yield GaugeMetricFamily(
                "kafka_network_socketserver_networkprocessoravgidle_percent",
                "Share of time the event loop (which does all network I/O) was idle",
                value=idle)
        if snap.loop_stalls is not None:
            stalls, starved, longest_ms = snap.loop_stalls
            yield CounterMetricFamily("odradek_event_loop_stalls",
                                      "Event-loop stalls over event.loop.stall.warn.ms",
                                      value=stalls)
            yield CounterMetricFamily("odradek_event_loop_starved",
                                      "Times the process was not scheduled for longer than "
                                      "event.loop.stall.warn.ms", value=starved)
            yield GaugeMetricFamily("odradek_event_loop_longest_stall_ms",
                                    "The longest stall caused by code", value=longest_ms)


class MetricsServer:
    """prometheus_client's HTTP server for one broker, on a thread of its own."""

    def __init__(self, broker: Broker, listener: str) -> None:
        self.host, self.port = metrics_listener(listener)
        self.loop = asyncio.get_running_loop()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(
            self._snapshot, broker.node_id, LoopIdle(threading.get_ident())))
        # The process' CPU, memory and descriptors (process_*) and the interpreter's garbage
        # collections (python_gc_*), read from /proc and gc at scrape time: what the JMX
        # exporter's process_* and jvm_gc_* give a Kafka dashboard's resources row.
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._broker = broker
        self._httpd: Any = None
        self._thread: threading.Thread | None = None

    def _snapshot(self) -> BrokerSnapshot:
        future: concurrent.futures.Future[BrokerSnapshot] = concurrent.futures.Future()

        def take() -> None:
            try:
                future.set_result(take_snapshot(self._broker))
            except BaseException as exc:  # noqa: BLE001 - answered to the scrape as a 500
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(take)
        return future.result(SCRAPE_TIMEOUT_S)

    def start(self) -> None:
        self._httpd, self._thread = start_http_server(self.port, self.host or "0.0.0.0",
                                                      registry=self.registry)
        self.port = self._httpd.server_address[1]

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
