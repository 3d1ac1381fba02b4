"""The broker process: wires storage, the metadata quorum, the replica manager and the network.

`run(config)` is what `odradek server-start` calls. Start order follows Kafka's KRaft node:
load the metadata log into an image, (re-)register this broker, open the logs the image says
we host, then open the listeners. SIGTERM/SIGINT shut down cleanly: listeners closed, in-flight
requests finished, logs flushed, checkpoints and clean-shutdown markers written.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from odradek.config import describe as config_describe
from odradek.config.describe import ConfigEntry
from odradek.config.topic import LIST_TOPIC_CONFIGS, validate_topic_props
from odradek.controller.controller import ControllerState, OpResult, TopicSpec
from odradek.controller.quorum import METADATA_TOPIC, MetadataQuorum
from odradek.coordinator import GroupCoordinator
from odradek.metadata.image import (
    METADATA_VERSION_FEATURE,
    RESOURCE_BROKER,
    MetadataImage,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.server.apis import (
    BROKER_LISTENER,
    CONTROLLER_LISTENER,
    ApiTable,
    bind_broker_handlers,
)
from odradek.server.fetch_session import FetchSessionCache
from odradek.server.handlers.fetch import FetchApis
from odradek.server.handlers.groups import start_group_coordinator
from odradek.server.handlers.metadata import unsupported_api_versions_response
from odradek.server.handlers.produce import ProduceApis
from odradek.server.network import (
    ConnectionCloseRequest,
    ListenerConfig,
    NetworkServer,
    RequestContext,
)
from odradek.server.replica_manager import ReplicaManager
from odradek.storage import Log, LogManager
from odradek.storage.checkpoint import read_meta_properties
from odradek.storage.config import LogConfig

log = logging.getLogger("odradek.broker")

# metadata.version 3.8-IV0, the newest level of the 3.8 specs Odradek implements.
METADATA_VERSION_LEVEL = 20
HOUSEKEEPING_INTERVAL_S = 0.5
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {METADATA_VERSION_FEATURE: (1, 20)}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.controller_id = self.node_id
        self.log_dirs: list[str] = [os.path.abspath(d) for d in config.log_dirs]
        self.metadata_log_dir = os.path.abspath(config.metadata_log_dir)
        self.cluster_id = ""
        self.apis = ApiTable()
        self.controller_listener_names = frozenset(config.controller_listener_names)
        self.supported_features = SUPPORTED_FEATURES
        self.fetch_sessions = FetchSessionCache(
            int(config.get("max.incremental.fetch.session.cache.slots")))
        self.fetch_max_bytes = int(config.get("fetch.max.bytes"))
        self.network: NetworkServer | None = None
        self.log_manager: LogManager | None = None
        self.quorum: MetadataQuorum | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None  # group coordinator
        self._tasks: list[asyncio.Task] = []
        self._admin_lock = asyncio.Lock()
        self._producer_ids: list[int] | None = None  # [next, end) of our current block
        self.default_log_config: LogConfig = config.log_config()
        self.controller = ControllerState(
            num_partitions=int(config.get("num.partitions")),
            default_replication_factor=int(config.get("default.replication.factor")),
            config_validator=validate_topic_props,
        )

    # -- lifecycle
    @property
    def image(self) -> MetadataImage:
        return self.quorum.image  # type: ignore[union-attr]

    async def start(self) -> None:
        meta = read_meta_properties(self.metadata_log_dir)
        if meta is None:
            raise RuntimeError(f"No meta.properties found in {self.metadata_log_dir}")
        self.cluster_id = meta["cluster.id"]
        self.log_manager = LogManager(
            self.log_dirs, self.default_log_config,
            recovery_threads_per_data_dir=int(
                self.config.get("num.recovery.threads.per.data.dir")),
            retention_check_interval_ms=int(self.config.get("log.retention.check.interval.ms")),
            flush_checkpoint_interval_ms=int(
                self.config.get("log.flush.offset.checkpoint.interval.ms")),
            excluded_topics={METADATA_TOPIC},
        )
        metadata_config = LogConfig.from_props({
            "segment.bytes": self.config.get("metadata.log.segment.bytes"),
            "retention.ms": -1,
            "retention.bytes": -1,
        })
        # The metadata log is always fully recovered: it is small and must be exact.
        metadata_log = Log(os.path.join(self.metadata_log_dir, f"{METADATA_TOPIC}-0"),
                           metadata_config, had_clean_shutdown=False)
        self.quorum = MetadataQuorum(metadata_log, self.node_id)
        self.quorum.load()
        await self.quorum.become_leader()
        await self._bootstrap_metadata()
        self.replica_manager = ReplicaManager(self.node_id, self.log_manager,
                                              self.default_log_config)
        self.replica_manager.apply_image(self.image)
        self.quorum.listeners.append(self.replica_manager.apply_image)
        # group coordinator: follows the leadership of the __consumer_offsets partitions
        self.group_coordinator = start_group_coordinator(self)
        self._bind_handlers()

        self.network = NetworkServer(
            dispatcher=self.dispatch,
            unsupported_version_response=lambda header: unsupported_api_versions_response(
                self, header),
            max_request_size=int(self.config.get("socket.request.max.bytes")),
            idle_timeout_ms=int(self.config.get("connections.max.idle.ms")),
        )
        await self.network.start(self._listener_configs())
        # Ports bound as 0 (tests) are only known now: re-register with the real ones.
        if any(listener.port == 0 for listener in self._listener_configs()):
            await self._register_broker()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._housekeeping()))
        log.info("Odradek broker %d started (cluster %s) listening on %s", self.node_id,
                 self.cluster_id, self.bound_addresses())

    def bound_addresses(self) -> dict[str, tuple[str, int]]:
        out = {}
        for listener in self._listener_configs():
            port = self.network.bound_ports.get(listener.name, listener.port)  # type: ignore[union-attr]
            out[listener.name] = (listener.host, port)
        return out

    def _listener_configs(self) -> list[ListenerConfig]:
        return [ListenerConfig(name=e.name, host=e.host or "", port=e.port,
                               security_protocol=e.security_protocol)
                for e in self.config.listeners]

    async def _bootstrap_metadata(self) -> None:
        async with self._admin_lock:
            if self.image.metadata_version == 0:
                await self._commit([m.FeatureLevelRecord(name=METADATA_VERSION_FEATURE,
                                                         feature_level=METADATA_VERSION_LEVEL)])
        await self._register_broker()

    async def _register_broker(self) -> None:
        # Under the admin lock: the re-registration after the listeners open may race with
        # the first admin requests.
        async with self._admin_lock:
            bound = self.network.bound_ports if self.network else {}
            endpoints = []
            for adv in self.config.advertised_listeners:
                port = adv.port or bound.get(adv.name, 0)
                host = adv.host or socket.getfqdn()
                endpoints.append((adv.name, host, port, adv.security_protocol_id))
            epoch = self.quorum.log.log_end_offset  # type: ignore[union-attr]
            records = self.controller.register_broker(
                self.image, self.node_id, uuid.uuid4(), epoch, endpoints,
                self.config.get("broker.rack"), self.supported_features)
            await self._commit(records)

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
        if self.group_coordinator is not None:  # group coordinator: answers pending joins
            await self.group_coordinator.close()
        if self.replica_manager is not None:  # long-polling fetches answer now
            self.replica_manager.shutdown()
        if self.network is not None:
            await self.network.stop()
        if self.quorum is not None:
            # Pending metadata commits finish (their listeners still reach open logs) before
            # the metadata log closes.
            await self.quorum.close()
        if self.log_manager is not None:
            self.log_manager.close()
        log.info("Odradek broker %d shut down", self.node_id)

    # -- request dispatch
    def _bind_handlers(self) -> None:
        """Each API family gets the services it needs."""
        replica_manager = self.replica_manager
        produce = ProduceApis(replica_manager)
        fetch = FetchApis(replica_manager, self.fetch_sessions, self.fetch_max_bytes)
        self.apis.bind(bind_broker_handlers(self))
        self.apis.bind({
            0: produce.produce,
            1: fetch.fetch,
            2: fetch.list_offsets,
            23: fetch.offset_for_leader_epoch,
        })

    def listener_kind(self, listener_name: str) -> str:
        """Whether a listener is a controller listener (which serves only controller APIs)."""
        if listener_name in self.controller_listener_names:
            return CONTROLLER_LISTENER
        return BROKER_LISTENER

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

    # -- controller operations (single voter: applied through our own quorum)
    # Each operation holds `_admin_lock`, computes its records from `self.image` and waits in
    # `_commit` until they are committed, so the next operation (and whoever reads
    # `self.image` after this one returns) sees an image that includes them.
    async def _commit(self, records: list[Any]) -> None:
        """Append records to the metadata quorum and wait until they are committed."""
        if not records:
            return
        committed = self.quorum.append(records)  # type: ignore[union-attr]
        try:
            await asyncio.shield(committed)
        except asyncio.CancelledError:
            # The caller went away (its connection closed), but the records are in the log
            # and will commit: keep the admin lock until they have, so the next operation
            # does not compute its records from an image that lacks them.
            await asyncio.wait([committed])
            if not committed.cancelled():
                committed.exception()  # retrieved: its failure is not logged as unhandled
            raise

    async def create_topics(self, specs: Sequence[TopicSpec],
                            validate_only: bool = False) -> list[OpResult]:
        async with self._admin_lock:
            results, records = self.controller.create_topics(self.image, specs)
            if not validate_only:
                await self._commit(records)
            return results

    async def auto_create_topics(self, names: Sequence[str]) -> dict[str, ErrorCode]:
        results = await self.create_topics([TopicSpec(name=n) for n in names])
        out = {}
        for name, res in zip(names, results):
            if res.error == ErrorCode.NONE:
                # Kafka answers LEADER_NOT_AVAILABLE until the new topic is fully visible; here
                # it is visible at once, so the caller reads it from the new image.
                continue
            out[name] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                         if res.error == ErrorCode.TOPIC_ALREADY_EXISTS else res.error)
        return out

    async def next_producer_id(self) -> int:
        """Producer ids come in blocks the controller hands out (ProducerIdsRecord)."""
        async with self._admin_lock:
            if self._producer_ids is None or self._producer_ids[0] >= self._producer_ids[1]:
                epoch = self.image.brokers[self.node_id].epoch
                (first, count), records = self.controller.allocate_producer_ids(
                    self.image, self.node_id, epoch)
                await self._commit(records)
                self._producer_ids = [first, first + count]
            producer_id = self._producer_ids[0]
            self._producer_ids[0] += 1
            return producer_id

    async def delete_topics(self, names: Sequence[str],
                            ids: Sequence[uuid.UUID]) -> list[OpResult]:
        async with self._admin_lock:
            results, records = self.controller.delete_topics(self.image, names, ids)
            await self._commit(records)
            return results

    async def create_partitions(self, name: str, count: int,
                                assignments: list[list[int]] | None,
                                validate_only: bool) -> OpResult:
        async with self._admin_lock:
            result, records = self.controller.create_partitions(self.image, name, count,
                                                                assignments)
            if not validate_only:
                await self._commit(records)
            return result

    async def alter_configs(self, resource_type: int, resource_name: str,
                            ops: list[tuple[str, int, str | None]], *, incremental: bool,
                            validate_only: bool) -> OpResult:
        if resource_type == RESOURCE_BROKER:
            unknown = [k for k, _op, _v in ops if not self.config.is_dynamic(k)]
            if unknown:
                return OpResult.fail(
                    ErrorCode.INVALID_REQUEST,
                    f"Cannot update these configs dynamically: {set(unknown)}")
        async with self._admin_lock:
            result, records = self.controller.alter_configs(
                self.image, resource_type, resource_name, ops, incremental=incremental,
                list_keys=LIST_TOPIC_CONFIGS)
            if result.error == ErrorCode.NONE and not validate_only:
                await self._commit(records)
            return result

    # -- config descriptions (DescribeConfigs, CreateTopics v5+): rendered by odradek.config
    def topic_config_entries(self, topic: str,
                             overrides: Mapping[str, str] | None = None) -> list[ConfigEntry]:
        if overrides is None:
            overrides = self.image.topic_config(topic)
        return config_describe.topic_config_entries(self.config, self.default_log_config,
                                                    overrides)

    def broker_config_entries(self, resource_name: str) -> list[ConfigEntry]:
        dynamic = self.image.broker_config(self.node_id if resource_name else None)
        return config_describe.broker_config_entries(self.config, dynamic,
                                                     per_broker=bool(resource_name))


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
        await broker.start()
        await stop.wait()
        log.info("shutting down")
        await broker.stop()
        return 0

    return asyncio.run(main())

