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
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
ENDPOINT_TYPE_BROKER, ENDPOINT_TYPE_CONTROLLER = 1, 2

#: Kafka's ApiKeys names of the APIs the KRaft tools may find missing (Kafka 3.9's raft voter
#: APIs are not in the 3.8 specs Odradek generates its codecs from).
API_NAMES = {UPDATE_FEATURES: "UPDATE_FEATURES", 80: "ADD_RAFT_VOTER", 81: "REMOVE_RAFT_VOTER"}


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


@dataclass(frozen=True)
class QuorumInfo:
    """Kafka's QuorumInfo: the leader's view of the metadata partition's replicas."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[ReplicaState]
    observers: list[ReplicaState]


def _replica(state: Any) -> ReplicaState:
    def optional(value: int) -> int | None:
        return value if value >= 0 else None

    return ReplicaState(state.replica_id, state.log_end_offset,
                        optional(state.last_fetch_timestamp),
                        optional(state.last_caught_up_timestamp))


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
            response = await connection.send(raft_messages.describe_quorum_request())
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
            return QuorumInfo(partition.leader_id, partition.leader_epoch,
                              partition.high_watermark,
                              [_replica(v) for v in partition.current_voters],
                              [_replica(o) for o in partition.observers])

        return await self._call("describeMetadataQuorum", timeout_ms, ask)

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
