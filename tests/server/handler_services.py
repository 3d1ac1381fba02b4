"""The request handlers of one broker+controller node built on real services, without a network.

`HandlerNode` opens what `Broker.start` opens - a metadata quorum on a tmp dir, the
QuorumController, a MetadataCache following the quorum, a LogManager and ReplicaManager on tmp
dirs, the group coordinator and the producer-id manager - and builds each API family with only
the services `Broker._bind_handlers` gives it. Tests call a handler with `call`, which passes
the request and the response through their wire encoding at the requested version, so a test
sees what a client of that version would send and read.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

from odradek.config.topic import validate_topic_props
from odradek.controller.cluster_control import BrokerRegistrationRequest
from odradek.controller.controller import ControllerState
from odradek.controller.quorum import METADATA_TOPIC, MetadataQuorum
from odradek.controller.quorum_controller import QuorumController
from odradek.coordinator import GroupCoordinator
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.coordinator.transaction_coordinator import TransactionCoordinator
from odradek.metadata.cache import MetadataCache
from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.server.apis import (
    BROKER_LISTENER,
    CONTROLLER_LISTENER,
    FORWARDED,
    ApiTable,
    controller_handler_table,
    forwarded_handler_table,
    handler_table,
)
from odradek.server.broker import METADATA_VERSION_LEVEL, SUPPORTED_FEATURES
from odradek.server.config import KafkaConfig
from odradek.server.coordinators import OffsetsTopicCreator, start_group_coordinator
from odradek.server.fetch_session import FetchSessionCache
from odradek.server.forwarding import EnvelopeApis
from odradek.server.handlers.acls import AclApis
from odradek.server.handlers.admin import AdminApis
from odradek.server.handlers.client_quotas import ClientQuotaApis
from odradek.server.handlers.controller import ControllerApis
from odradek.server.handlers.fetch import FetchApis
from odradek.server.handlers.groups import GroupApis
from odradek.server.handlers.metadata import MetadataApis
from odradek.server.handlers.produce import ProduceApis
from odradek.server.handlers.producer_ids import ProducerIdApis
from odradek.server.handlers.producers import ProducerStateApis
from odradek.server.handlers.raft import RaftApis
from odradek.server.handlers.scram import ScramApis
from odradek.server.handlers.transactions import TransactionApis
from odradek.server.network import RequestContext
from odradek.server.node_channel import NodeChannel
from odradek.server.replica_manager import ReplicaManager
from odradek.server.transactions import (
    TransactionStateTopicCreator,
    TransactionVerifier,
    start_transaction_coordinator,
    txn_offset_commit_verifier,
)
from odradek.storage import Log, LogManager
from odradek.storage.config import LogConfig

T = TypeVar("T")

NODE_ID = 1
HOST = "127.0.0.1"
# Nothing binds these ports: they are only what the broker registers and advertises.
BROKER_PORT = 19092
CONTROLLER_PORT = 19093
BROKER_LISTENER_NAME = "PLAINTEXT"
CONTROLLER_LISTENER_NAME = "CONTROLLER"
WAIT_S = 10.0  # bound on waiting for a condition; tests normally finish far sooner
CORRELATION_ID = 7

REQUEST_API_KEYS: dict[type[m.Message], int] = {
    spec.request: key for key, spec in m.API_BY_KEY.items()
}


def node_properties(data_dir: Path, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server.properties of the tests' broker processes (tests/broker_process.py), with the
    data and metadata logs in `data_dir`."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{HOST}:{CONTROLLER_PORT}",
        "listeners": f"{BROKER_LISTENER_NAME}://{HOST}:{BROKER_PORT},"
                     f"{CONTROLLER_LISTENER_NAME}://{HOST}:{CONTROLLER_PORT}",
        "advertised.listeners": f"{BROKER_LISTENER_NAME}://{HOST}:{BROKER_PORT}",
        "controller.listener.names": CONTROLLER_LISTENER_NAME,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir / "logs"),
        "metadata.log.dir": str(data_dir / "metadata"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        # Fewer offsets partitions than Kafka's 50: each one is a log opened on disk.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    props.update(overrides or {})
    return props


async def until(condition: Callable[[], T], message: str = "condition") -> T:
    """Waits (bounded by WAIT_S) until `condition()` is truthy; yields to the loop between
    checks, so background work (loads, commits) progresses."""
    async def poll() -> T:
        while not (value := condition()):
            await asyncio.sleep(0.001)
        return value

    try:
        return await asyncio.wait_for(poll(), WAIT_S)
    except TimeoutError:
        raise AssertionError(f"timed out after {WAIT_S}s waiting for {message}") from None


class HandlerNode:
    """One node's services and handler families; `async with HandlerNode.open(...)`."""

    def __init__(self, data_dir: Path, overrides: Mapping[str, str] | None = None) -> None:
        self.config = KafkaConfig(node_properties(data_dir, overrides), log_unused=False)
        self.cluster_id = "handler-tests-cluster"
        self.default_log_config: LogConfig = self.config.log_config()
        self.broker_epoch = -1
        self.quorum: MetadataQuorum | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.producer_id_blocks = 0  # blocks asked of the controller

    # -- lifecycle (the order of Broker.start)
    async def start(self) -> None:
        config = self.config
        os.makedirs(config.metadata_log_dir, exist_ok=True)
        self.log_manager = LogManager([os.path.abspath(d) for d in config.log_dirs],
                                      self.default_log_config,
                                      excluded_topics={METADATA_TOPIC})
        metadata_log = Log(os.path.join(config.metadata_log_dir, f"{METADATA_TOPIC}-0"),
                           LogConfig.from_props({"retention.ms": -1, "retention.bytes": -1}),
                           had_clean_shutdown=False)
        self.quorum = MetadataQuorum(metadata_log, NODE_ID)
        self.quorum.load()
        self.cache = MetadataCache(self.quorum.image)
        self.quorum.listeners.append(self.cache.publish)
        await self.quorum.become_leader()
        self.controller = QuorumController(
            self.quorum,
            ControllerState(
                num_partitions=int(config.get("num.partitions")),
                default_replication_factor=int(config.get("default.replication.factor")),
                config_validator=validate_topic_props,
            ),
            is_dynamic_broker_config=config.is_dynamic,
        )
        await self.controller.bootstrap_metadata_version(METADATA_VERSION_LEVEL)
        self.broker_epoch = await self.register_broker(NODE_ID)
        self.replica_manager = ReplicaManager(NODE_ID, self.log_manager,
                                              self.default_log_config)
        self.replica_manager.apply_image(self.cache.image)
        self.cache.subscribe(self.replica_manager.apply_image)
        self.group_coordinator = start_group_coordinator(config, self.cache,
                                                         self.replica_manager)
        self.producer_ids = ProducerIdManager(self._allocate_producer_ids)
        # One node: every partition leader is local, so nothing goes over this channel.
        self.txn_channel = NodeChannel(NODE_ID, lambda _node: None, request_timeout_ms=1000)
        self.transaction_coordinator = start_transaction_coordinator(
            config, self.cache, self.replica_manager, self.producer_ids,
            self.group_coordinator, self.txn_channel)
        self._build_handlers()

    async def stop(self) -> None:
        if self.transaction_coordinator is not None:
            await self.transaction_coordinator.close()
            await self.txn_channel.close()
        if self.group_coordinator is not None:
            await self.group_coordinator.close()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        if self.quorum is not None:
            await self.quorum.close()
        if self.log_manager is not None:
            self.log_manager.close()

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- the services the handler families get (as Broker._bind_handlers wires them)
    def _build_handlers(self) -> None:
        config, cache, controller = self.config, self.cache, self.controller
        assert self.replica_manager is not None and self.group_coordinator is not None
        self.apis = ApiTable()
        self.metadata_apis = MetadataApis(
            cache=cache, apis=self.apis, cluster_id=self.cluster_id,
            controller_id=lambda: NODE_ID, listener_kind=self.listener_kind,
            controller_endpoints=self.controller_endpoints,
            supported_features=SUPPORTED_FEATURES,
            create_topics=controller.create_topics,
            auto_create_topics=lambda: bool(config.get("auto.create.topics.enable")))
        self.admin_apis = AdminApis(node_id=NODE_ID, config=config,
                                    default_log_config=self.default_log_config, cache=cache,
                                    controller=controller, replica_manager=self.replica_manager)
        transactions = self.transaction_coordinator
        assert transactions is not None
        self.group_apis = GroupApis(self.group_coordinator, cache,
                                    OffsetsTopicCreator(config, cache, controller.create_topics),
                                    transactions=transactions,
                                    ensure_transaction_topic=TransactionStateTopicCreator(
                                        config, cache, controller.create_topics))
        self.producer_id_apis = ProducerIdApis(self.producer_ids, transactions)
        self.transaction_apis = TransactionApis(transactions, cache, self.replica_manager,
                                                self.group_coordinator,
                                                int(config.get("request.timeout.ms")))
        verifier = TransactionVerifier(NODE_ID, cache, transactions, self.txn_channel)

        def verification_enabled() -> bool:
            return bool(config.get("transaction.partition.verification.enable"))

        self.group_coordinator.transaction_verifier = txn_offset_commit_verifier(
            verifier, verification_enabled)
        self.produce_apis = ProduceApis(self.replica_manager, verifier, verification_enabled)
        self.raft_apis = RaftApis(self.quorum)
        self.scram_apis = ScramApis(cache, controller)
        self.client_quota_apis = ClientQuotaApis(cache, controller)
        self.acl_apis = AclApis(cache, controller)
        self.apis.bind(forwarded_handler_table(self.admin_apis, self.raft_apis, self.scram_apis,
                                               self.acl_apis, self.client_quota_apis),
                       FORWARDED)
        self.apis.bind(controller_handler_table(
            metadata=self.metadata_apis, raft=self.raft_apis,
            controller=ControllerApis(self.controller),
            envelope=EnvelopeApis(self.quorum, lambda api_key, version: self.apis.lookup(
                api_key, version, FORWARDED)), admin=self.admin_apis),
                       CONTROLLER_LISTENER)
        self.apis.bind(handler_table(
            metadata=self.metadata_apis,
            produce=self.produce_apis,
            fetch=FetchApis(self.replica_manager, FetchSessionCache(
                int(config.get("max.incremental.fetch.session.cache.slots"))),
                int(config.get("fetch.max.bytes"))),
            groups=self.group_apis, admin=self.admin_apis, producer_ids=self.producer_id_apis,
            raft=self.raft_apis, producers=ProducerStateApis(self.replica_manager),
            transactions=self.transaction_apis, scram=self.scram_apis,
            client_quotas=self.client_quota_apis, acls=self.acl_apis))

    def listener_kind(self, listener_name: str) -> str:
        if listener_name in self.config.controller_listener_names:
            return CONTROLLER_LISTENER
        return BROKER_LISTENER

    def controller_endpoints(self, listener_name: str) -> list[tuple[int, str, int]]:
        return [(node_id, voter.host, voter.port)
                for node_id, voter in sorted(self.config.quorum_voters.items())]

    async def _allocate_producer_ids(self) -> tuple[int, int]:
        self.producer_id_blocks += 1
        return await self.controller.allocate_producer_ids(NODE_ID, self.broker_epoch)

    async def register_broker(self, broker_id: int, port: int = BROKER_PORT) -> int:
        """Registers (and unfences) a broker with an endpoint on the PLAINTEXT listener."""
        endpoints = [(BROKER_LISTENER_NAME, HOST, port, 0)] if broker_id != NODE_ID else [
            (adv.name, adv.host or HOST, adv.port, adv.security_protocol_id)
            for adv in self.config.advertised_listeners]
        assert self.controller is not None
        epoch = await self.controller.register_broker(BrokerRegistrationRequest(
            broker_id=broker_id, cluster_id=self.controller.cluster_id,
            incarnation_id=uuid.uuid4(), endpoints=endpoints, features=SUPPORTED_FEATURES,
            rack=None))
        # Caught up at once (one process): the first heartbeat unfences it.
        reply = await self.controller.broker_heartbeat(broker_id, epoch, epoch)
        assert not reply.is_fenced
        return epoch

    async def add_fenced_broker(self, broker_id: int, port: int) -> None:
        """A broker that registered but was never unfenced (e.g. it is still catching up)."""
        assert self.quorum is not None
        await self.quorum.append([m.RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=1000 + broker_id,
            end_points=[m.RegisterBrokerRecord.BrokerEndpoint(
                name=BROKER_LISTENER_NAME, host=HOST, port=port, security_protocol=0)],
            fenced=True)])

    # -- calling handlers
    async def call(self, handler: Callable[..., Any], request: m.Message, version: int, *,
                   listener: str = BROKER_LISTENER_NAME) -> Any:
        """Calls `handler` as the network layer would for `request` sent at `version` on
        `listener`; returns the response as a client of that version decodes it."""
        api_key = REQUEST_API_KEYS[type(request)]
        frame = framing.encode_request(api_key, version, CORRELATION_ID, "handler-test", request)
        header, decoded = framing.decode_request(frame[4:])
        ctx = RequestContext(header=header, connection=None,  # type: ignore[arg-type]
                             listener=listener, received_ns=0)
        response = handler(ctx, decoded)
        if inspect.isawaitable(response):
            response = await response
        out = framing.encode_response(api_key, version, CORRELATION_ID, response)
        correlation_id, read_back = framing.decode_response(out[4:], api_key, version)
        assert correlation_id == CORRELATION_ID
        return read_back


def run_with_node(tmp_path: Path, scenario: Callable[[HandlerNode], Awaitable[None]],
                  overrides: Mapping[str, str] | None = None) -> None:
    """Runs `scenario(node)` on a fresh event loop with a node started in `tmp_path`."""
    async def main() -> None:
        async with HandlerNode(tmp_path, overrides) as node:
            await scenario(node)

    asyncio.run(main())
