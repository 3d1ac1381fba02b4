"""The broker process: wires storage, the metadata quorum, the replica manager and the network.

`run(config)` is what `odradek server-start` calls. Start order follows Kafka's KRaft node:
load the metadata log into an image, (re-)register this broker, open the logs the image says
we host, then open the listeners.

With several voters in `controller.quorum.voters` the listeners open before the quorum has a
leader (the voters elect one over their controller listeners), and the node then waits until its
image has caught up with the leader's. Only the active controller (the quorum leader) runs
controller operations: the first one bootstraps metadata.version. Every broker registers with the
active controller and heartbeats to it (`BrokerLifecycleManager`; in-process when this node is
the active controller), and start-up ends once the controller has unfenced it.

SIGTERM/SIGINT shut down cleanly: a controlled shutdown first (the controller moves this broker's
leaderships away), then listeners closed, in-flight requests finished, logs flushed, checkpoints
and clean-shutdown markers written.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from odradek.client.security import ClientSecurity
from odradek.config import group as group_config
from odradek.config.broker import BROKER_CONFIGS
from odradek.config.topic import validate_topic_props
from odradek.config.types import ConfigError
from odradek.controller.bootstrap import read_bootstrap_records
from odradek.controller.cluster_control import BrokerRegistrationRequest
from odradek.controller.controller import ControllerState
from odradek.controller.features import LATEST_METADATA_VERSION, SUPPORTED_FEATURES
from odradek.controller.quorum import METADATA_TOPIC, MetadataQuorum
from odradek.controller.quorum_controller import QuorumController
from odradek.coordinator import GroupCoordinator
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.coordinator.transaction_coordinator import TransactionCoordinator
from odradek.metadata.cache import MetadataCache
from odradek.metadata.image import MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.ids import kafka_str_to_uuid
from odradek.raft import RaftConfig
from odradek.security.authorizer import StandardAuthorizer
from odradek.server.alter_partition import AlterPartitionManager
from odradek.server.apis import (
    BROKER_LISTENER,
    CONTROLLER_LISTENER,
    FORWARDED,
    FORWARDED_APIS,
    ApiTable,
    controller_admin_handler_table,
    controller_handler_table,
    forwarded_handler_table,
    handler_table,
)
from odradek.server.authentication import (
    build_listener_security,
    peer_client_security,
    reload_tls,
)
from odradek.server.broker_lifecycle import BrokerLifecycleManager
from odradek.server.client_quotas import ClientQuotas
from odradek.server.connection_quotas import ConnectionQuotas
from odradek.server.controller_mutation_quota import ControllerMutationQuotas
from odradek.server.coordinators import OffsetsTopicCreator, start_group_coordinator
from odradek.server.fetch_session import FetchSessionCache
from odradek.server.forwarding import EnvelopeApis, ForwardingManager
from odradek.server.handlers.acls import AclApis
from odradek.server.handlers.admin import AdminApis
from odradek.server.handlers.client_quotas import ClientQuotaApis
from odradek.server.handlers.controller import ControllerApis
from odradek.server.handlers.fetch import FetchApis
from odradek.server.handlers.groups import GroupApis
from odradek.server.handlers.metadata import MetadataApis, unsupported_api_versions_response
from odradek.server.handlers.produce import ProduceApis
from odradek.server.handlers.producer_ids import ProducerIdApis
from odradek.server.handlers.producers import ProducerStateApis
from odradek.server.handlers.raft import RaftApis
from odradek.server.handlers.scram import ScramApis
from odradek.server.handlers.transactions import TransactionApis
from odradek.server.loop_monitor import FsyncOnLoopCheck, GcPauseMonitor, LoopStallMonitor
from odradek.server.metrics import MetricsServer
from odradek.server.network import (
    ConnectionCloseRequest,
    ListenerConfig,
    NetworkServer,
    RequestContext,
)
from odradek.server.node_channel import NodeChannel
from odradek.server.quotas import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuota,
)
from odradek.server.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from odradek.server.replica_manager import ReplicaManager
from odradek.server.replica_selector import replica_selector
from odradek.server.request_metrics import RequestMetrics
from odradek.server.transactions import (
    TransactionStateTopicCreator,
    TransactionVerifier,
    start_transaction_coordinator,
    txn_offset_commit_verifier,
)
from odradek.storage import Log, LogManager
from odradek.storage.checkpoint import read_meta_properties
from odradek.storage.cleaner import CleanerConfig
from odradek.storage.config import LogConfig
from odradek.storage.dir_failure import LogDirFailureChannel

log = logging.getLogger("odradek.broker")

# metadata.version 4.0-IV3, the newest level of the 4.0 specs Odradek implements (one source:
# the controller's feature table).
METADATA_VERSION_LEVEL = LATEST_METADATA_VERSION
HOUSEKEEPING_INTERVAL_S = 0.5


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.log_dirs: list[str] = [os.path.abspath(d) for d in config.log_dirs]
        self.metadata_log_dir = os.path.abspath(config.metadata_log_dir)
        self.cluster_id = ""
        self.apis = ApiTable()
        self.controller_listener_names = frozenset(config.controller_listener_names)
        self.supported_features = SUPPORTED_FEATURES
        self.fetch_sessions = FetchSessionCache(
            int(config.get("max.incremental.fetch.session.cache.slots")))
        self.fetch_max_bytes = int(config.get("fetch.max.bytes"))
        # An I/O error on a log directory (or the metadata log's) halts the process, as Kafka
        # does when no directory is left; `halt` is replaceable for in-process tests.
        self.dir_failures = LogDirFailureChannel()
        self.dir_failures.subscribe(self._on_log_dir_failure)
        self.halt: Callable[[int], None] = os._exit
        self.network: NetworkServer | None = None
        self.fetch_apis: FetchApis | None = None
        self.client_quotas: ClientQuotas | None = None
        self.connection_quotas: ConnectionQuotas | None = None
        self.log_manager: LogManager | None = None
        self.quorum: MetadataQuorum | None = None
        self.raft_channel: NodeChannel | None = None
        self.replica_manager: ReplicaManager | None = None
        self.metadata_cache: MetadataCache | None = None
        self.controller: QuorumController | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        # Inter-broker requests of the transaction coordinator (markers to partition leaders)
        # and of Produce's verification (AddPartitionsToTxn to coordinators).
        self.txn_channel: NodeChannel | None = None
        self.producer_ids = ProducerIdManager(self._allocate_producer_ids)
        self.controller_apis: ControllerApis | None = None
        self.lifecycle: BrokerLifecycleManager | None = None
        self.controller_channel: NodeChannel | None = None
        self.replica_fetchers: ReplicaFetcherManager | None = None
        self.alter_partitions: AlterPartitionManager | None = None
        # This node's controller endpoints (listener -> host/port) as Raft tells its peers;
        # filled in once the listeners are bound (a port may be 0 in the config).
        self._local_controller_endpoints: dict[str, tuple[str, int]] = {}
        self._tasks: list[asyncio.Task] = []
        self._listeners: list[ListenerConfig] | None = None
        self._peer_security: dict[str, ClientSecurity] = {}
        self.default_log_config: LogConfig = config.log_config()
        self._cleaner_configs_seen: object = None
        stall_warn_ms = int(config.get("event.loop.stall.warn.ms"))
        self.loop_monitor: LoopStallMonitor | None = None
        self.gc_monitor = GcPauseMonitor(stall_warn_ms) if stall_warn_ms else None
        self.fsync_check = FsyncOnLoopCheck() if config.get("event.loop.fsync.check") else None
        self.metrics_server: MetricsServer | None = None  # metrics.prometheus.listener

    # -- lifecycle
    @property
    def image(self) -> MetadataImage:
        return self.metadata_cache.image  # type: ignore[union-attr]

    async def start(self) -> None:
        meta = read_meta_properties(self.metadata_log_dir)
        if meta is None:
            raise RuntimeError(f"No meta.properties found in {self.metadata_log_dir}")
        self.cluster_id = meta["cluster.id"]
        self._start_monitors()
        is_broker = self.config.is_broker
        if is_broker:  # a dedicated controller keeps only the metadata log
            self.log_manager = self._build_log_manager()
        metadata_config = LogConfig.from_props({
            "segment.bytes": self.config.get("metadata.log.segment.bytes"),
            "retention.ms": -1,
            "retention.bytes": -1,
        })
        # The metadata log is always fully recovered: it is small and must be exact.
        metadata_log = Log(os.path.join(self.metadata_log_dir, f"{METADATA_TOPIC}-0"),
                           metadata_config, had_clean_shutdown=False,
                           dir_failures=self.dir_failures)
        self.quorum = self._build_quorum(metadata_log)
        self.quorum.load()
        self.metadata_cache = MetadataCache(self.quorum.image)
        self.quorum.listeners.append(self.metadata_cache.publish)
        self.controller = QuorumController(
            self.quorum,
            ControllerState(
                num_partitions=int(self.config.get("num.partitions")),
                default_replication_factor=int(self.config.get("default.replication.factor")),
                config_validator=validate_topic_props,
                group_config_validator=lambda configs: group_config.validate(
                    configs, self.config.get),
            ),
            is_dynamic_broker_config=self.config.is_dynamic,
            cluster_id=self.cluster_id,
            session_timeout_ms=int(self.config.get("broker.session.timeout.ms")),
            broker_config=self.config,
        )
        self.controller_apis = ControllerApis(self.controller)
        self.quorum.activation_listeners.append(self.controller.on_activation)
        if is_broker:
            lifecycle = self.lifecycle = BrokerLifecycleManager(
                self._registration, send=self._send_to_controller,
                metadata_offset=lambda: self.image.offset,
                heartbeat_interval_ms=int(self.config.get("broker.heartbeat.interval.ms")))
            self.metadata_cache.subscribe(lambda image: lifecycle.on_metadata(image.offset))
            if self.log_manager is not None and self.log_manager.cleaner is not None:
                self.metadata_cache.subscribe(self._reconfigure_log_cleaner)
                self._reconfigure_log_cleaner(self.metadata_cache.image)  # set before a restart
        single_voter = self.quorum.is_single_voter
        # Ports bound as 0 (tests) are only known once the listeners are open; otherwise a
        # lone voter registers before it opens them, so its first clients find it registered.
        register_first = is_broker and single_voter and all(
            listener.port != 0 for listener in self._listener_configs())
        if single_voter:
            # A lone voter leads at once: the same start as before Raft.
            await self.quorum.become_leader()
            await self.controller.bootstrap_metadata_version(
                METADATA_VERSION_LEVEL, read_bootstrap_records(self.metadata_log_dir))
        else:
            self.quorum.activation_listeners.append(self._on_activation)
            self.quorum.start()
        if register_first:
            await self._join_cluster()
        if is_broker:
            self.replica_manager = self._build_replication()
            self.replica_manager.apply_image(self.image)
            self.metadata_cache.subscribe(self.replica_manager.apply_image)
            # New partitions' logs are created on a worker thread before the image applies.
            self.quorum.preparers.append(self.replica_manager.prepare_image)
            # Follows the leadership of the __consumer_offsets partitions (after the replica
            # manager in the subscription order, since it reads the partitions it opened).
            self.group_coordinator = start_group_coordinator(self.config, self.metadata_cache,
                                                             self.replica_manager)
            self.txn_channel = NodeChannel(
                self.node_id, self._inter_broker_endpoint,
                request_timeout_ms=int(self.config.get("request.timeout.ms")),
                client_id=f"transactions-{self.node_id}",
                security=self.inter_broker_security)
            # Follows the leadership of the __transaction_state partitions.
            self.transaction_coordinator = start_transaction_coordinator(
                self.config, self.metadata_cache, self.replica_manager, self.producer_ids,
                self.group_coordinator, self.txn_channel)
        self._bind_handlers()

        self.network = NetworkServer(
            dispatcher=self.dispatch,
            unsupported_version_response=lambda header: unsupported_api_versions_response(
                self.apis, header),
            max_request_size=int(self.config.get("socket.request.max.bytes")),
            idle_timeout_ms=int(self.config.get("connections.max.idle.ms")),
            request_metrics=RequestMetrics(int(self.config.get("request.slow.log.ms"))),
            authorizer=StandardAuthorizer.from_config(self.config, lambda: self.image.acls),
        )
        self._build_quotas(self.network)
        listeners = self._listener_configs()
        # Raft needs the controller listeners at once; client and inter-broker requests are
        # served only once the metadata has caught up (Kafka's enableRequestProcessing after
        # the initial catch-up), so no client is told of a stale or empty image.
        early = listeners if single_voter else [
            listener for listener in listeners
            if listener.name in self.controller_listener_names]
        await self.network.start(early)
        self._local_controller_endpoints.update(self._controller_endpoints())
        if not single_voter:
            log.info("node %d: waiting for the metadata quorum to elect a leader",
                     self.node_id)
            await self.quorum.wait_until_caught_up()
            log.info("node %d: metadata caught up (%r)", self.node_id, self.quorum.raft)
            await self.network.start([listener for listener in listeners
                                      if listener not in early])
        if is_broker and not register_first:
            await self._join_cluster()
        if is_broker:
            loop = asyncio.get_running_loop()
            self._tasks.append(loop.create_task(self._housekeeping()))
            self._tasks.append(loop.create_task(self._isr_expiration()))
        self._start_metrics_server()
        log.info("Odradek %s %d started (cluster %s) listening on %s",
                 "broker" if is_broker else "controller", self.node_id, self.cluster_id,
                 self.bound_addresses())

    def _start_metrics_server(self) -> None:
        listener = self.config.get("metrics.prometheus.listener")
        if not listener:
            return
        self.metrics_server = MetricsServer(self, listener)
        self.metrics_server.start()
        log.info("node %d: metrics on http://%s:%d/metrics", self.node_id,
                 self.metrics_server.host or "0.0.0.0", self.metrics_server.port)

    def _build_replication(self) -> ReplicaManager:
        """The replica manager, the fetchers that replicate what this broker follows, and
        the AlterPartition channel through which its leaderships change their ISRs."""
        config = self.config
        replica_manager = ReplicaManager(
            self.node_id, self.log_manager, self.default_log_config,  # type: ignore[arg-type]
            replica_lag_time_max_ms=int(config.get("replica.lag.time.max.ms")))
        replica_manager.leader_quota = self._replication_quota(LEADER_RATE, LEADER_REPLICAS)
        replica_manager.replica_selector = replica_selector(config.get("replica.selector.class"))
        follower_quota = self._replication_quota(FOLLOWER_RATE, FOLLOWER_REPLICAS)
        self.replica_fetchers = ReplicaFetcherManager(
            self.node_id, replica_manager, self._inter_broker_endpoint,
            broker_epoch=lambda: self.broker_epoch,
            config=FetcherConfig(
                max_wait_ms=int(config.get("replica.fetch.wait.max.ms")),
                min_bytes=int(config.get("replica.fetch.min.bytes")),
                partition_max_bytes=int(config.get("replica.fetch.max.bytes")),
                response_max_bytes=int(config.get("replica.fetch.response.max.bytes")),
                backoff_ms=int(config.get("replica.fetch.backoff.ms")),
                socket_timeout_ms=int(config.get("replica.socket.timeout.ms")),
                num_fetchers=int(config.get("num.replica.fetchers")),
                security=self.inter_broker_security),
            quota=follower_quota)
        replica_manager.fetchers = self.replica_fetchers
        self.alter_partitions = AlterPartitionManager(
            self.node_id, lambda: self.broker_epoch, self._send_to_controller, replica_manager)
        replica_manager.submit_isr_change = self.alter_partitions.submit
        return replica_manager

    def _build_quotas(self, network: NetworkServer) -> None:
        """Client quotas and connection limits, following the metadata image. Controller
        listeners carry no client traffic: no client quotas there, and neither they nor the
        inter-broker listener count against the broker-wide connection limits."""
        config = self.config
        samples = int(config.get("quota.window.num"))
        window_s = int(config.get("quota.window.size.seconds"))
        self.client_quotas = ClientQuotas(samples=samples, window_s=window_s)
        self.connection_quotas = ConnectionQuotas(
            {key: config.get(key) for key in (
                "max.connections", "max.connections.per.ip",
                "max.connections.per.ip.overrides", "max.connection.creation.rate")},
            exempt_listeners=self.controller_listener_names | (
                {config.inter_broker_listener_name} if config.is_broker else set()),
            broker_id=self.node_id, samples=samples, window_ms=window_s * 1000)
        for quotas in (self.client_quotas, self.connection_quotas):
            quotas.apply_image(self.image)
            self.metadata_cache.subscribe(quotas.apply_image)  # type: ignore[union-attr]
        network.client_quotas = self.client_quotas if config.is_broker else None
        network.connection_quotas = self.connection_quotas
        network.unquoted_listeners = self.controller_listener_names
        if self.fetch_apis is not None:
            self.fetch_apis.client_quotas = self.client_quotas

    def _replication_quota(self, rate_config: str, replicas_config: str) -> ReplicationQuota:
        """One side of replication throttling, following the metadata image's configs."""
        config = self.config
        quota = ReplicationQuota(
            self.node_id, rate_config, replicas_config, int(config.get(rate_config)),
            samples=int(config.get("replication.quota.window.num")),
            window_ms=int(config.get("replication.quota.window.size.seconds")) * 1000)
        quota.apply_image(self.image)
        self.metadata_cache.subscribe(quota.apply_image)
        return quota

    def _inter_broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where a leader's followers fetch from: its inter-broker listener, as registered."""
        reg = self.image.brokers.get(broker_id)
        endpoint = reg.endpoint(self.config.inter_broker_listener_name) if reg else None
        if endpoint is None:
            return None
        return (endpoint.host or "127.0.0.1", endpoint.port)

    async def _isr_expiration(self) -> None:
        """Kafka's isr-expiration task: every half `replica.lag.time.max.ms`, followers that
        fell behind leave the ISRs this broker leads."""
        interval_s = int(self.config.get("replica.lag.time.max.ms")) / 2000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.replica_manager.maybe_shrink_isrs()  # type: ignore[union-attr]
            except Exception:
                log.exception("ISR expiration failed")

    def _on_log_dir_failure(self, directory: Path, error: OSError) -> None:
        """Kafka takes one failed directory of several offline and halts when none is left
        or the metadata log's has failed. Odradek does not move partitions off a single
        offline directory, so any failed directory halts the node: its replicas elsewhere
        take over once its session expires, and restart recovery truncates whatever the
        failed write left in its logs."""
        if Path(directory).resolve() == Path(self.metadata_log_dir).resolve():
            reason = f"the metadata log directory {directory} has failed"
        else:
            reason = f"log directory {directory} has failed"
        log.critical("Shutdown broker because %s (%s): halting", reason, error)
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.halt(1)

    def _build_log_manager(self) -> LogManager:
        return LogManager(
            self.log_dirs, self.default_log_config,
            recovery_threads_per_data_dir=int(
                self.config.get("num.recovery.threads.per.data.dir")),
            retention_check_interval_ms=int(self.config.get("log.retention.check.interval.ms")),
            flush_checkpoint_interval_ms=int(
                self.config.get("log.flush.offset.checkpoint.interval.ms")),
            producer_id_expiration_ms=int(self.config.get("producer.id.expiration.ms")),
            producer_id_expiration_check_interval_ms=int(
                self.config.get("producer.id.expiration.check.interval.ms")),
            excluded_topics={METADATA_TOPIC},
            dir_failures=self.dir_failures,
            cleaner_config=self._cleaner_config(),
        )

    def _cleaner_config(self, image: MetadataImage | None = None) -> CleanerConfig:
        """The `log.cleaner.*` settings: static, overlaid by the dynamic broker configs
        (cluster-wide default, then this broker's) of the metadata image."""
        dynamic = image.broker_config(self.node_id) if image is not None else {}

        def get(name: str) -> Any:
            if name in dynamic:
                try:
                    return BROKER_CONFIGS[name].parse(dynamic[name])
                except (ValueError, KeyError) as error:  # validated by the controller
                    log.warning("ignoring dynamic %s=%r: %s", name, dynamic[name], error)
            return self.config.get(name)

        return CleanerConfig.from_broker_config(get)

    def _reconfigure_log_cleaner(self, image: MetadataImage) -> None:
        cleaner = self.log_manager.cleaner if self.log_manager is not None else None
        if cleaner is not None and image.configs is not self._cleaner_configs_seen:
            self._cleaner_configs_seen = image.configs
            cleaner.reconfigure(self._cleaner_config(image))

    def _build_quorum(self, metadata_log: Log) -> MetadataQuorum:
        config = self.config
        voters = config.quorum_voters
        raft_config = RaftConfig(
            election_timeout_ms=int(config.get("controller.quorum.election.timeout.ms")),
            fetch_timeout_ms=int(config.get("controller.quorum.fetch.timeout.ms")),
            election_backoff_max_ms=int(config.get("controller.quorum.election.backoff.max.ms")),
            request_timeout_ms=int(config.get("controller.quorum.request.timeout.ms")),
            retry_backoff_ms=int(config.get("controller.quorum.retry.backoff.ms")),
        )
        # No controller.quorum.voters: a dynamic quorum (KIP-853), whose voters are in the
        # metadata log; the node finds the leader through controller.quorum.bootstrap.servers.
        dynamic = not voters
        voter_ids = set(voters) or {self.node_id}
        voter_endpoints = {node_id: (voter.host, voter.port) for node_id, voter in voters.items()
                           if node_id != self.node_id}
        bootstrap = {-2 - index: endpoint
                     for index, endpoint in enumerate(config.quorum_bootstrap_servers)}
        meta = read_meta_properties(self.metadata_log_dir) or {}
        directory_id = (kafka_str_to_uuid(meta["directory.id"]) if meta.get("directory.id")
                        else None)
        send = None
        quorum: MetadataQuorum | None = None
        if dynamic or voter_ids != {self.node_id}:
            def resolve(node_id: int) -> tuple[str, int] | None:
                return quorum.endpoint_of(node_id) if quorum is not None else None

            self.raft_channel = NodeChannel(self.node_id, resolve,
                                            request_timeout_ms=raft_config.request_timeout_ms,
                                            security=self.controller_security)
            send = self.raft_channel.send
            # The lifecycle's own connections: heartbeats never wait behind a Raft Fetch.
            self.controller_channel = NodeChannel(
                self.node_id, resolve, request_timeout_ms=raft_config.request_timeout_ms,
                client_id=f"broker-lifecycle-{self.node_id}",
                security=self.controller_security)
        quorum = MetadataQuorum(
            metadata_log, self.node_id, voters=voter_ids, cluster_id=self.cluster_id,
            raft_config=raft_config, send=send, dynamic=dynamic, directory_id=directory_id,
            listener=(config.controller_listener_names or [None])[0],
            local_endpoints=self._local_controller_endpoints, bootstrap=bootstrap,
            voter_endpoints=voter_endpoints,
            snapshot_max_bytes=int(
                config.get("metadata.log.max.record.bytes.between.snapshots")),
            snapshot_interval_ms=int(config.get("metadata.log.max.snapshot.interval.ms")),
            retention_bytes=int(config.get("metadata.max.retention.bytes")),
            retention_ms=int(config.get("metadata.max.retention.ms")))
        return quorum

    def controller_id(self) -> int:
        """The controller as Metadata and DescribeCluster report it to clients (-1: unknown):
        the active controller when it is also a live broker, else a live broker (as Kafka's
        KRaft brokers do: clients can only reach brokers, which forward admin requests)."""
        leader = self.quorum.leader_id if self.quorum is not None else None
        if leader is None:
            return -1
        live = [b for b, reg in self.image.brokers.items() if not reg.fenced]
        if leader in live or not live:
            return leader
        return self.node_id if self.node_id in live else min(live)

    def _on_activation(self, active: bool) -> None:
        """The quorum made this node the active controller (or stopped doing so)."""
        if active:
            self._tasks.append(asyncio.get_running_loop().create_task(self._claim_controller()))

    async def _claim_controller(self) -> None:
        """The first active controller bootstraps metadata.version."""
        try:
            await self.controller.bootstrap_metadata_version(  # type: ignore[union-attr]
                METADATA_VERSION_LEVEL, read_bootstrap_records(self.metadata_log_dir))
        except KafkaError as exc:
            log.warning("node %d: lost the leadership while taking over as controller: %s",
                        self.node_id, exc)

    def bound_addresses(self) -> dict[str, tuple[str, int]]:
        out = {}
        for listener in self._listener_configs():
            port = self.network.bound_ports.get(listener.name, listener.port)  # type: ignore[union-attr]
            out[listener.name] = (listener.host, port)
        return out

    def _listener_configs(self) -> list[ListenerConfig]:
        """The listeners with their TLS contexts and SASL settings (built once: a TLS context
        loads its key and trust stores)."""
        if self._listeners is None:
            self._listeners = [
                ListenerConfig(name=e.name, host=e.host or "", port=e.port,
                               security_protocol=e.security_protocol,
                               security=build_listener_security(
                                   self.config, e.name, e.security_protocol,
                                   self._scram_credentials, self._dynamic_broker_config()))
                for e in self.config.listeners]
            if any(listener.security.uses_ssl for listener in self._listeners
                   if listener.security is not None):
                self.metadata_cache.subscribe(self._reload_tls)  # type: ignore[union-attr]
        return self._listeners

    def _dynamic_broker_config(self) -> Mapping[str, str]:
        if self.metadata_cache is None:
            return {}
        return self.metadata_cache.image.broker_config(self.node_id)

    def _reload_tls(self, image: MetadataImage) -> None:
        """A listener's key or trust store changed (dynamic `listener.name.<listener>.ssl.*`
        configs, or a store file replaced and its config set again): new connections use
        the new one, open connections keep theirs; a store that does not load is logged and
        the listener keeps its current one (Kafka's behaviour on a bad dynamic update)."""
        dynamic = image.broker_config(self.node_id)
        for listener in self._listeners or ():
            security = listener.security
            if security is None or not security.uses_ssl:
                continue
            try:
                if reload_tls(security, self.config, dynamic):
                    log.info("listener %s: reloaded its TLS key and trust stores", listener.name)
            except ConfigError as exc:
                log.error("listener %s: keeping its TLS stores, the new ones do not load: %s",
                          listener.name, exc)

    @property
    def inter_broker_security(self) -> ClientSecurity:
        """TLS/SASL of this broker's connections to other brokers' inter-broker listener
        (replica fetchers, transaction markers)."""
        if "broker" not in self._peer_security:
            self._peer_security["broker"] = peer_client_security(
                self.config, self.config.inter_broker_listener_name,
                self.config.inter_broker_security_protocol,
                str(self.config.get("sasl.mechanism.inter.broker.protocol")))
        return self._peer_security["broker"]

    @property
    def controller_security(self) -> ClientSecurity:
        """TLS/SASL of connections to the controllers' listener (Raft, registration,
        heartbeats, forwarded requests)."""
        if "controller" not in self._peer_security:
            name = (self.config.controller_listener_names or [None])[0]
            protocol = self.config.listener_security_protocol_map.get(name, "PLAINTEXT") \
                if name else "PLAINTEXT"
            self._peer_security["controller"] = peer_client_security(
                self.config, name, protocol,
                str(self.config.get("sasl.mechanism.controller.protocol")))
        return self._peer_security["controller"]

    def _scram_credentials(self) -> Any:
        return self.metadata_cache.image.scram_credentials if self.metadata_cache else {}

    async def _join_cluster(self) -> None:
        """Register with the active controller and wait until it unfences this broker."""
        self.lifecycle.start()
        await self.lifecycle.wait_until_registered()
        await self.lifecycle.wait_until_unfenced()
        log.info("node %d: registered and unfenced (broker epoch %d)", self.node_id,
                 self.broker_epoch)

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch if self.lifecycle is not None else -1

    def _registration(self) -> BrokerRegistrationRequest:
        bound = self.network.bound_ports if self.network else {}
        endpoints = []
        for adv in self.config.advertised_listeners:
            port = adv.port or bound.get(adv.name, 0)
            host = adv.host or socket.getfqdn()
            endpoints.append((adv.name, host, port, adv.security_protocol_id))
        return BrokerRegistrationRequest(
            broker_id=self.node_id, cluster_id=self.cluster_id,
            incarnation_id=self.lifecycle.incarnation_id,  # type: ignore[union-attr]
            endpoints=endpoints, features=self.supported_features,
            rack=self.config.get("broker.rack"))

    async def _send_to_controller(self, request: Any, api_version: int) -> Any:
        """A request to the active controller: answered in-process when that is this node,
        else over the controller channel to the quorum's leader."""
        leader = self.quorum.leader_id if self.quorum is not None else None
        if leader is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is known yet")
        if leader == self.node_id:
            return await self.controller_apis.local_handler(request)(None, request)  # type: ignore[union-attr]
        if self.controller_channel is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER,
                             f"the controller {leader} has no known endpoint")
        return await self.controller_channel.send(leader, request, api_version=api_version)

    async def _allocate_producer_ids(self) -> tuple[int, int]:
        response = await self._send_to_controller(
            m.AllocateProducerIdsRequest(broker_id=self.node_id,
                                         broker_epoch=self.broker_epoch), 0)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(response.error_code)
        return response.producer_id_start, response.producer_id_len

    async def _housekeeping(self) -> None:
        """Periodic log work (retention, flushes, checkpoints, delayed deletions): the log
        manager keeps the schedule, this loop gives it the clock."""
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                await asyncio.to_thread(self.log_manager.tick, _now_ms())  # type: ignore[union-attr]
            except Exception:
                log.exception("log housekeeping failed")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.lifecycle is not None:
            if not self.lifecycle.fenced:
                # Leaderships move to other replicas while this broker still serves.
                await self.lifecycle.controlled_shutdown(
                    int(self.config.get("broker.session.timeout.ms")) / 1000)
            await self.lifecycle.close()
        if self.controller is not None:
            await self.controller.close()
        if self.transaction_coordinator is not None:
            await self.transaction_coordinator.close()
        if self.txn_channel is not None:
            await self.txn_channel.close()
        if self.group_coordinator is not None:  # group coordinator: answers pending joins
            await self.group_coordinator.close()
        if self.replica_fetchers is not None:
            await self.replica_fetchers.close()
        if self.alter_partitions is not None:
            await self.alter_partitions.close()
        if self.replica_manager is not None:  # long-polling fetches answer now
            self.replica_manager.shutdown()
        if self.network is not None:
            await self.network.stop()
        if self.quorum is not None:
            # Pending metadata commits finish (their listeners still reach open logs) before
            # the metadata log closes.
            await self.quorum.close()
        if self.raft_channel is not None:
            await self.raft_channel.close()
        if self.controller_channel is not None:
            await self.controller_channel.close()
        if self.log_manager is not None:
            self.log_manager.close()
        self._stop_monitors()
        log.info("Odradek broker %d shut down", self.node_id)

    def _start_monitors(self) -> None:
        stall_warn_ms = int(self.config.get("event.loop.stall.warn.ms"))
        if stall_warn_ms and self.loop_monitor is None:
            self.loop_monitor = LoopStallMonitor(asyncio.get_running_loop(), stall_warn_ms)
            self.loop_monitor.start()
        if self.gc_monitor is not None:
            self.gc_monitor.start()
        if self.fsync_check is not None:
            self.fsync_check.install()

    def _stop_monitors(self) -> None:
        if self.loop_monitor is not None:
            self.loop_monitor.stop()
            stats = self.loop_monitor.stats
            log.info("event loop: %d stalls over %d ms (longest %.0f ms), %d times not "
                     "scheduled", stats.stalls, self.loop_monitor.threshold_s * 1000,
                     stats.longest_ms, stats.starved)
            self.loop_monitor = None
        if self.gc_monitor is not None:
            self.gc_monitor.stop()
        if self.fsync_check is not None:
            self.fsync_check.uninstall()

    # -- request dispatch
    def _bind_handlers(self) -> None:
        """Each API family gets the services it needs."""
        cache, controller = self.metadata_cache, self.controller
        replica_manager = self.replica_manager
        assert cache is not None and controller is not None and self.quorum is not None
        raft = RaftApis(self.quorum)
        forwarding = ForwardingManager(self.node_id, self.quorum, self.controller_channel)
        create_topics = functools.partial(forwarding.create_topics, controller.create_topics)
        metadata = MetadataApis(
            cache=cache, apis=self.apis, cluster_id=self.cluster_id,
            controller_id=self.controller_id, listener_kind=self.listener_kind,
            controller_endpoints=self.controller_endpoints,
            supported_features=self.supported_features,
            create_topics=create_topics,
            auto_create_topics=lambda: bool(self.config.get("auto.create.topics.enable")),
            quorum_leader_id=lambda: _or_unknown(self.quorum.leader_id if self.quorum else None))
        admin = AdminApis(node_id=self.node_id, config=self.config,
                          default_log_config=self.default_log_config, cache=cache,
                          controller=controller, replica_manager=replica_manager)  # type: ignore[arg-type]
        scram = ScramApis(cache, controller)
        client_quotas = ClientQuotaApis(cache, controller)
        acls = AclApis(cache, controller)
        # Controller mutation quotas hold CreateTopics, DeleteTopics and CreatePartitions where
        # they are carried out: here, as the active controller.
        config = self.config
        mutation_quotas = ControllerMutationQuotas(
            lambda: cache.image, lambda: int(config.get("num.partitions")),
            samples=int(config.get("controller.quota.window.num")),
            window_ms=int(config.get("controller.quota.window.size.seconds")) * 1000)
        mutation_quotas.apply_image(cache.image)
        cache.subscribe(mutation_quotas.apply_image)
        # Forwarded requests are carried out here, as the active controller.
        forwarded = mutation_quotas.wrap(
            forwarded_handler_table(admin, raft, scram, acls, client_quotas,
                                    self.controller_apis))
        self.apis.bind(forwarded, FORWARDED)
        # Admin clients with `bootstrap.controllers` (KIP-919): the same execution as a
        # forwarded request, for the principal of their own connection.
        self.apis.bind(controller_admin_handler_table(forwarded, admin, scram, acls),
                       CONTROLLER_LISTENER)
        envelope = EnvelopeApis(self.quorum, lambda api_key, version: self.apis.lookup(
            api_key, version, FORWARDED))
        self.apis.bind(controller_handler_table(metadata=metadata, raft=raft,
                                                controller=self.controller_apis,  # type: ignore[arg-type]
                                                envelope=envelope, admin=admin),
                       CONTROLLER_LISTENER)
        if replica_manager is None:
            return  # a dedicated controller: no broker listener
        transactions = self.transaction_coordinator
        assert transactions is not None and self.txn_channel is not None
        verifier = TransactionVerifier(self.node_id, cache, transactions, self.txn_channel)

        def verification_enabled() -> bool:
            return bool(self.config.get("transaction.partition.verification.enable"))

        self.group_coordinator.transaction_verifier = txn_offset_commit_verifier(  # type: ignore[union-attr]
            verifier, verification_enabled)
        handlers = handler_table(
            metadata=metadata,
            produce=ProduceApis(replica_manager, verifier, verification_enabled),
            fetch=self._fetch_apis(FetchApis(replica_manager, self.fetch_sessions,
                                             self.fetch_max_bytes)),
            groups=GroupApis(self.group_coordinator,  # type: ignore[arg-type]
                             cache, OffsetsTopicCreator(self.config, cache, create_topics),
                             transactions=transactions,
                             ensure_transaction_topic=TransactionStateTopicCreator(
                                 self.config, cache, create_topics),
                             consumer_protocol_configured="consumer" in {
                                 protocol.lower() for protocol in
                                 self.config.get("group.coordinator.rebalance.protocols")}),
            admin=admin,
            producer_ids=ProducerIdApis(self.producer_ids, transactions),
            raft=raft,
            producers=ProducerStateApis(replica_manager),
            transactions=TransactionApis(transactions, cache, replica_manager,
                                         self.group_coordinator,  # type: ignore[arg-type]
                                         int(self.config.get("request.timeout.ms"))),
            scram=scram,
            client_quotas=client_quotas,
            acls=acls,
            controller=self.controller_apis,
        )
        handlers = mutation_quotas.wrap(handlers)
        self.apis.bind({api_key: forwarding.wrap(handler) if api_key in FORWARDED_APIS
                        else handler for api_key, handler in handlers.items()})

    def _fetch_apis(self, fetch_apis: FetchApis) -> FetchApis:
        self.fetch_apis = fetch_apis  # given the consumer quotas once they are built
        return fetch_apis

    def listener_kind(self, listener_name: str) -> str:
        """Whether a listener is a controller listener (which serves only controller APIs)."""
        if listener_name in self.controller_listener_names:
            return CONTROLLER_LISTENER
        return BROKER_LISTENER

    def _controller_endpoints(self) -> dict[str, tuple[str, int]]:
        """This node's controller listeners as peers reach them (advertised, else bound)."""
        if not self.config.is_controller:
            return {}
        bound = self.network.bound_ports if self.network else {}
        advertised = {e.name: e for e in self.config.advertised_listeners}
        out = {}
        for endpoint in self.config.controller_listeners:
            adv = advertised.get(endpoint.name, endpoint)
            host = adv.host or endpoint.host or socket.getfqdn()
            out[endpoint.name] = (host, adv.port or bound.get(endpoint.name, endpoint.port))
        return out

    def controller_endpoints(self, listener_name: str) -> list[tuple[int, str, int]]:
        """(node id, host, port) of the quorum's controllers, as DescribeCluster sent to a
        controller listener reports them: the voters, with this node's own bound address."""
        own = None
        bound = self.network.bound_ports if self.network else {}
        for endpoint in self.config.listeners:
            if endpoint.name == listener_name:
                own = (endpoint.host, bound.get(endpoint.name, endpoint.port))
        out = []
        voters = self.config.quorum_voters
        for node_id in sorted(voters | {self.node_id: None}):
            voter = voters.get(node_id)
            if node_id == self.node_id and own is not None:
                host = own[0] or (voter.host if voter is not None else socket.getfqdn())
                out.append((node_id, host, own[1]))
            elif voter is not None:
                out.append((node_id, voter.host, voter.port))
        return out

    def dispatch(self, ctx: RequestContext, request: Any) -> Any:
        api_key = ctx.header.request_api_key
        handler = self.apis.lookup(api_key, ctx.api_version, self.listener_kind(ctx.listener))
        if handler is None:
            raise ConnectionCloseRequest(
                f"unsupported request: api key {api_key} version {ctx.api_version}")
        return handler(ctx, request)


def _or_unknown(node_id: int | None) -> int:
    return -1 if node_id is None else node_id


def run(config: Any) -> int:
    """Run a broker until SIGTERM/SIGINT; returns the process exit code."""
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency, but stay runnable
        pass

    async def main() -> int:
        broker = Broker(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # A node of a larger quorum waits in start() for a leader to be elected: SIGTERM must
        # stop it there too.
        starting = asyncio.ensure_future(broker.start())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # a failed start raises here
            await stopping
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        log.info("shutting down")
        await broker.stop()
        return 0

    return asyncio.run(main())

