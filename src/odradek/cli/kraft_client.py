"""What the KRaft tools (`metadata-quorum`, `features`) ask a cluster, the way Kafka's admin
client asks it for kafka-metadata-quorum.sh and kafka-features.sh.

* ``--bootstrap-server`` talks to broker listeners, ``--bootstrap-controller`` to controller
  listeners (Kafka's ``bootstrap.controllers``); either way the given addresses are tried in
  turn, and with brokers also the brokers their Metadata names.
* DescribeQuorum is answered by the quorum leader: a node that is not the leader answers
  NOT_LEADER_OR_FOLLOWER, so the next node is tried, until one answers or the call's
  ``default.api.timeout.ms`` runs out (then Kafka's TimeoutException text).
* An API the node does not serve fails as Kafka's client does:
  ``UnsupportedVersionException: The node does not support UPDATE_FEATURES``.
* AddRaftVoter / RemoveRaftVoter (KIP-853) go, like DescribeQuorum, to the node that answers
  them: a node that is not the quorum leader (NOT_LEADER_OR_FOLLOWER) or a broker without a
  controller (NOT_CONTROLLER) sends the call on to the next node.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from odradek.cli.common import configure_logging, run_tool
from odradek.client.cluster import Cluster
from odradek.client.config import ADMIN_CONFIG, parse_bootstrap_servers
from odradek.client.connection import Connection
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError
from odradek.client.retry import Deadline
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.raft import messages as raft_messages

T = TypeVar("T")

DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
UPDATE_FEATURES = 57
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER = 80, 81
ENDPOINT_TYPE_BROKER, ENDPOINT_TYPE_CONTROLLER = 1, 2
#: Kafka's Uuid.ZERO_UUID: a replica whose directory id is not known (DescribeQuorum v0-1,
#: static voters).
ZERO_UUID = uuid.UUID(int=0)

#: Kafka's ApiKeys names of the APIs the KRaft tools may find missing.
API_NAMES = {UPDATE_FEATURES: "UPDATE_FEATURES", ADD_RAFT_VOTER: "ADD_RAFT_VOTER",
             REMOVE_RAFT_VOTER: "REMOVE_RAFT_VOTER"}


class UnsupportedApiError(Exception):
    """The node does not serve an API: Kafka's UnsupportedVersionException."""

    def __init__(self, api_key: int) -> None:
        self.api_name = API_NAMES.get(api_key, str(api_key))
        super().__init__(f"The node does not support {self.api_name}")

    @property
    def java_text(self) -> str:
        return f"org.apache.kafka.common.errors.UnsupportedVersionException: {self}"


@dataclass(frozen=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int | None  # None: unknown (-1 on the wire)
    last_caught_up_timestamp: int | None
    directory_id: uuid.UUID = ZERO_UUID  # DescribeQuorum v2+


@dataclass(frozen=True)
class RaftVoterEndpoint:
    """Kafka's RaftVoterEndpoint: a controller listener of a quorum node."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        # Kafka's RaftVoterEndpoint.toString: an IPv6 host in brackets.
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True)
class QuorumInfo:
    """Kafka's QuorumInfo: the leader's view of the metadata partition's replicas."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[ReplicaState]
    observers: list[ReplicaState]
    #: node id -> its endpoints (DescribeQuorum v2+ `nodes`)
    nodes: dict[int, list[RaftVoterEndpoint]] = field(default_factory=dict)
    #: the DescribeQuorum version that answered: below 2 there are no directory ids nor nodes
    version: int = 1


def _replica(state: Any) -> ReplicaState:
    def optional(value: int) -> int | None:
        return value if value >= 0 else None

    return ReplicaState(state.replica_id, state.log_end_offset,
                        optional(state.last_fetch_timestamp),
                        optional(state.last_caught_up_timestamp),
                        getattr(state, "replica_directory_id", None) or ZERO_UUID)


def java_exception_text(error: KafkaError) -> str:
    """A KafkaError as the message of the Java exception the admin client would throw."""
    from odradek.cli.tool_options import java_error

    if isinstance(error, KafkaTimeoutError):
        return f"org.apache.kafka.common.errors.TimeoutException: {error.message}"
    return java_error(error)


class KraftClient:
    """Requests to a cluster's brokers (default) or controllers (``to_controllers``)."""

    def __init__(self, props: dict[str, Any], *, to_controllers: bool = False) -> None:
        self.to_controllers = to_controllers
        config = ADMIN_CONFIG.parse({key: value for key, value in props.items()
                                     if key in ADMIN_CONFIG.keys})
        self.cluster = Cluster(config, default_client_id="odradek-kraft-tool")
        self.bootstrap = parse_bootstrap_servers(config["bootstrap.servers"])

    async def close(self) -> None:
        await self.cluster.close()

    # -- machinery
    def _addresses(self) -> list[tuple[str, int]]:
        """The bootstrap addresses, then (brokers only) the brokers the metadata names."""
        addresses = list(self.bootstrap)
        if not self.to_controllers:
            for node in self.cluster.metadata.brokers.values():
                if (node.host, node.port) not in addresses:
                    addresses.append((node.host, node.port))
        return addresses

    async def _each_node(self, deadline: Deadline,
                         ask: Callable[[Connection], Awaitable[T | None]]) -> T:
        """`ask` each reachable node in turn until one gives an answer (not None); a pass
        without one raises the last error (retried by `_call` when retriable)."""
        last_error: KafkaError = KafkaConnectionError("No node address to connect to")
        for address in self._addresses():
            try:
                connection = await self.cluster.connect_to(address, deadline)
                answer = await ask(connection)
            except UnsupportedApiError:
                raise
            except KafkaError as error:
                last_error = error
                continue
            if answer is not None:
                return answer
            last_error = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                    "The node is not the metadata quorum leader")
        if not self.to_controllers and isinstance(last_error, KafkaError):
            # Learn the other brokers for the next pass (a pass may have reached none).
            try:
                await self.cluster.refresh_metadata((), deadline=deadline)
            except KafkaError:
                pass
        raise last_error

    async def _call(self, name: str, deadline_ms: float | None,
                    ask: Callable[[Connection], Awaitable[T | None]]) -> T:
        def retriable(error: KafkaError) -> bool:
            return error.retriable or isinstance(error, KafkaConnectionError)

        return await self.cluster.call(name, lambda deadline: self._each_node(deadline, ask),
                                       timeout_ms=deadline_ms, retriable=retriable)

    # -- calls
    async def describe_quorum(self, timeout_ms: float | None = None) -> QuorumInfo:
        async def ask(connection: Connection) -> QuorumInfo | None:
            if not connection.supports(DESCRIBE_QUORUM):
                raise UnsupportedApiError(DESCRIBE_QUORUM)
            # The newest version both sides know (v2 adds directory ids and endpoints).
            version = connection.pick_version(DESCRIBE_QUORUM)
            response = await connection.send(raft_messages.describe_quorum_request(),
                                             api_version=version)
            if response.error_code != 0:
                error = KafkaError(response.error_code, getattr(response, "error_message", None))
                if error.code == ErrorCode.NOT_CONTROLLER:
                    return None  # a broker without a controller: ask another node
                raise error
            partition = raft_messages.single_partition(response)
            if partition is None:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 "The response from the server does not describe "
                                 "__cluster_metadata-0")
            if partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER.code:
                return None  # Kafka's admin retries this (retriable): ask another node
            if partition.error_code != 0:
                raise KafkaError(partition.error_code)
            nodes = {node.node_id: [RaftVoterEndpoint(listener.name, listener.host,
                                                      listener.port)
                                    for listener in node.listeners]
                     for node in (getattr(response, "nodes", None) or [])}
            return QuorumInfo(partition.leader_id, partition.leader_epoch,
                              partition.high_watermark,
                              [_replica(v) for v in partition.current_voters],
                              [_replica(o) for o in partition.observers],
                              nodes, version)

        return await self._call("describeMetadataQuorum", timeout_ms, ask)

    async def _raft_voter_call(self, name: str, api_key: int,
                               build: Callable[[int], m.Message],
                               timeout_ms: float | None) -> None:
        """Send an AddRaftVoter / RemoveRaftVoter built by `build(timeout_ms left)` to the
        node that takes it; a KafkaError for the response's error."""
        deadline = self.cluster.deadline(timeout_ms)

        async def ask(connection: Connection) -> m.Message | None:
            if not connection.supports(api_key):
                raise UnsupportedApiError(api_key)
            response = await connection.send(build(int(deadline.remaining_ms())),
                                             api_version=connection.pick_version(api_key))
            if response.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER.code,
                                       ErrorCode.NOT_CONTROLLER.code):
                return None  # not the quorum leader (or no controller): ask another node
            return response  # the leader's answer, final (not another node's to try)

        response = await self._call(name, timeout_ms, ask)
        if response.error_code != 0:
            raise KafkaError(response.error_code, response.error_message)

    async def add_raft_voter(self, voter_id: int, directory_id: uuid.UUID,
                             endpoints: list[RaftVoterEndpoint],
                             cluster_id: str | None = None,
                             timeout_ms: float | None = None) -> None:
        """Kafka's Admin.addRaftVoter: AddRaftVoter v0 with the call's remaining time as the
        request's TimeoutMs."""
        R = m.AddRaftVoterRequest

        def build(remaining_ms: int) -> m.Message:
            return R(cluster_id=cluster_id, timeout_ms=remaining_ms, voter_id=voter_id,
                     voter_directory_id=directory_id,
                     listeners=[R.Listener(name=e.name, host=e.host, port=e.port)
                                for e in endpoints])

        await self._raft_voter_call("addRaftVoter", ADD_RAFT_VOTER, build, timeout_ms)

    async def remove_raft_voter(self, voter_id: int, directory_id: uuid.UUID,
                                cluster_id: str | None = None,
                                timeout_ms: float | None = None) -> None:
        """Kafka's Admin.removeRaftVoter: RemoveRaftVoter v0."""

        def build(_remaining_ms: int) -> m.Message:
            return m.RemoveRaftVoterRequest(cluster_id=cluster_id, voter_id=voter_id,
                                            voter_directory_id=directory_id)

        await self._raft_voter_call("removeRaftVoter", REMOVE_RAFT_VOTER, build, timeout_ms)

    async def cluster_id(self, timeout_ms: float | None = None) -> str | None:
        """DescribeCluster's cluster id (with the endpoint type of the listeners we talk to)."""

        async def ask(connection: Connection) -> str | None:
            version = connection.pick_version(DESCRIBE_CLUSTER)
            request = m.DescribeClusterRequest(
                include_cluster_authorized_operations=False,
                endpoint_type=(ENDPOINT_TYPE_CONTROLLER if self.to_controllers
                               else ENDPOINT_TYPE_BROKER))
            response = await connection.send(request, api_version=version)
            if response.error_code != 0:
                raise KafkaError(response.error_code, response.error_message)
            return response.cluster_id

        return await self._call("describeCluster", timeout_ms, ask)

    async def api_versions(self, timeout_ms: float | None = None) -> m.ApiVersionsResponse:
        """The ApiVersions answer of the first reachable node (features, supported APIs)."""

        async def ask(connection: Connection) -> m.ApiVersionsResponse | None:
            return connection.api_versions_response

        return await self._call("describeFeatures", timeout_ms, ask)

    async def connection(self, timeout_ms: float | None = None) -> Connection:
        """A connection to the first reachable node."""

        async def ask(connection: Connection) -> Connection:
            return connection

        return await self._call("leastLoadedNode", timeout_ms, ask)


def run_with_client(props: dict[str, Any], to_controllers: bool,
                    body: Callable[[KraftClient], Awaitable[T]]) -> T:
    """Run `body` with a client on a fresh event loop, closing the client afterwards."""

    async def main() -> T:
        client = KraftClient(props, to_controllers=to_controllers)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(main())


def run_kraft_tool(build_parser: Callable[[], Any], execute: Callable[[Any], int],
                   argv: list[str] | None, *,
                   reported: tuple[type[Exception], ...] = ()) -> int:
    """The main of an argparse4j-style KRaft tool (kafka-metadata-quorum, kafka-features):
    `common.run_tool` (usage and tool errors), plus a KafkaError printed as the Java exception
    text Kafka's tools print and the `reported` errors by their message; exit code 1."""
    configure_logging()

    def body(args: list[str]) -> int:
        try:
            return execute(build_parser().parse_args(args))
        except KafkaError as exc:
            # Kafka prints the ExecutionException's message (the cause's class and message).
            print(java_exception_text(exc), file=sys.stderr)
            return 1
        except reported as exc:
            print(exc, file=sys.stderr)
            return 1

    return run_tool(body, sys.argv[1:] if argv is None else argv)
