"""`odradek metadata-quorum`: Kafka's kafka-metadata-quorum.sh (MetadataQuorumCommand).

    odradek metadata-quorum --bootstrap-server HOST:PORT describe --status
    odradek metadata-quorum --bootstrap-controller HOST:PORT describe --replication [--human-readable]
    odradek metadata-quorum --bootstrap-controller HOST:PORT --command-config new-controller.properties add-controller
    odradek metadata-quorum --bootstrap-server HOST:PORT remove-controller --controller-id 3 --controller-directory-id DIRID

``describe --status`` prints the quorum summary (the cluster id from DescribeCluster, the rest
from DescribeQuorum)::

    ClusterId:              fMCL8kv1SWm87L_Md-I2hg
    LeaderId:               1
    LeaderEpoch:            2
    HighWatermark:          10
    MaxFollowerLag:         0
    MaxFollowerLagTimeMs:   0
    CurrentVoters:          [{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://h1:9093"]}, ...]
    CurrentObservers:       [{"id": 4, "directoryId": "..."}]

The voters and observers are Kafka 4.0's JSON-like objects when DescribeQuorum v2 answers
(a zero directory id and an empty endpoint list are left out, as Kafka does); a node that only
speaks v0/v1 gets Kafka 3.8's ``[1,2,3]``. ``describe --replication`` prints Kafka's
NodeId/DirectoryId/LogEndOffset/Lag/LastFetchTimestamp/LastCaughtUpTimestamp/Status table
(columns padded, each followed by a tab; no DirectoryId column below v2).

``add-controller`` reads the new controller's own server.properties (``--command-config``): its
node.id, the directory.id of its metadata log directory's meta.properties and its controller
listeners (advertised.listeners over listeners), and sends AddRaftVoter; ``remove-controller``
sends RemoveRaftVoter. Both print Kafka's line on success, Kafka's exception text (and the head
of its stack trace) on failure, exit code 1; ``--dry-run`` only prints what would be done.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
import uuid
from collections.abc import Iterable

from odradek.cli.common import ToolArgumentParser, ToolError
from odradek.cli.kraft_client import (
    ZERO_UUID,
    QuorumInfo,
    RaftVoterEndpoint,
    ReplicaState,
    UnsupportedApiError,
    java_exception_text,
    run_kraft_tool,
    run_with_client,
)
from odradek.cli.tool_options import load_properties_file
from odradek.protocol.errors import KafkaError
from odradek.protocol.ids import kafka_str_to_uuid, uuid_to_kafka_str

PROG = "kafka-metadata-quorum"
#: DescribeQuorum from this version on carries directory ids and endpoints (Kafka 3.9+'s output)
DESCRIBE_QUORUM_WITH_NODES = 2
_STATUS_LABEL_WIDTH = 24


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog=PROG,
                                description="This tool describes kraft metadata quorum status.")
    connection = parser.add_mutually_exclusive_group(required=True)
    connection.add_argument(
        "--bootstrap-server",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
             "to the Kafka cluster.")
    connection.add_argument(
        "--bootstrap-controller",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
             "to the Kafka controllers.")
    parser.add_argument(
        "--command-config",
        help="Property file containing configs to be passed to Admin Client. For "
             "add-controller, the file is used to specify the controller properties as well.")
    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{describe,add-controller,remove-controller}")
    describe = commands.add_parser("describe", help="Describe the metadata quorum info")
    status = describe.add_argument_group("Status")
    status.add_argument(
        "--status", action="store_true",
        help="A short summary of the quorum status and the other provides detailed "
             "information about the status of replication.")
    replication = describe.add_argument_group("Replication")
    replication.add_argument("--replication", action="store_true",
                             help="Detailed information about the status of replication")
    replication.add_argument("--human-readable", action="store_true",
                             help="Human-readable output")
    add = commands.add_parser("add-controller",
                              help="Add a controller to the KRaft controller cluster")
    add.add_argument("--dry-run", action="store_true",
                     help="True if we should print what would be done, but not do it.")
    remove = commands.add_parser("remove-controller",
                                 help="Remove a controller from the KRaft controller cluster")
    remove.add_argument("--controller-id", "-i", type=int, required=True,
                        help="The id of the controller to remove.")
    remove.add_argument("--controller-directory-id", "-d", required=True,
                        help="The directory ID of the controller to remove.")
    remove.add_argument("--dry-run", action="store_true",
                        help="True if we should print what would be done, but not do it.")
    return parser


# ------------------------------------------------------------------------------------------
# output


def status_text(cluster_id: str | None, quorum: QuorumInfo) -> str:
    leader = _leader(quorum)
    # Kafka takes the first voter with the smallest log end offset as the most lagging one.
    most_lagging = min(quorum.voters, key=lambda voter: voter.log_end_offset)
    max_lag = leader.log_end_offset - most_lagging.log_end_offset
    if most_lagging is leader:
        max_lag_time_ms = 0
    elif (leader.last_caught_up_timestamp is not None
          and most_lagging.last_caught_up_timestamp is not None):
        max_lag_time_ms = leader.last_caught_up_timestamp - most_lagging.last_caught_up_timestamp
    else:
        max_lag_time_ms = -1
    rows = [
        ("ClusterId:", cluster_id),
        ("LeaderId:", quorum.leader_id),
        ("LeaderEpoch:", quorum.leader_epoch),
        ("HighWatermark:", quorum.high_watermark),
        ("MaxFollowerLag:", max_lag),
        ("MaxFollowerLagTimeMs:", max_lag_time_ms),
        ("CurrentVoters:", _replica_list(quorum, quorum.voters)),
        ("CurrentObservers:", _replica_list(quorum, quorum.observers)),
    ]
    return "\n".join(f"{label:<{_STATUS_LABEL_WIDTH}}{'null' if value is None else value}"
                     for label, value in rows)


def _replica_list(quorum: QuorumInfo, replicas: Iterable[ReplicaState]) -> str:
    if quorum.version < DESCRIBE_QUORUM_WITH_NODES:
        # Kafka 3.8's tool: the ids only.
        return "[" + ",".join(str(replica.replica_id) for replica in replicas) + "]"
    return "[" + ", ".join(replica_text(replica, quorum.nodes.get(replica.replica_id, []))
                           for replica in replicas) + "]"


def replica_text(replica: ReplicaState, endpoints: list[RaftVoterEndpoint]) -> str:
    """Kafka 4.0's MetadataQuorumCommand.Node.toString:
    ``{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://host:9093"]}``, without the
    directory id when it is zero and without the endpoints when there are none."""
    text = f'{{"id": {replica.replica_id}'
    if replica.directory_id != ZERO_UUID:
        text += f', "directoryId": "{uuid_to_kafka_str(replica.directory_id)}"'
    if endpoints:
        text += ', "endpoints": [' + ", ".join(f'"{e}"' for e in endpoints) + "]"
    return text + "}"


def _leader(quorum: QuorumInfo) -> ReplicaState:
    for voter in quorum.voters:
        if voter.replica_id == quorum.leader_id:
            return voter
    # Kafka's tool fails here too (Optional.get() on no leader); say why.
    raise ToolError("No value present")


def relative_time_ms(timestamp_ms: int, description: str, now_ms: int | None = None) -> int:
    """Kafka's relativeTimeMs: how long ago a timestamp was; a future one is clock drift."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if not 0 < timestamp_ms <= now:
        raise ToolError(f"Error while computing relative time, possible drift in system clock."
                        f"{os.linesep}Current timestamp is {now}, {description} timestamp is "
                        f"{timestamp_ms}")
    return now - timestamp_ms


def replication_rows(quorum: QuorumInfo, human_readable: bool,
                     now_ms: int | None = None) -> list[list[str]]:
    leader = _leader(quorum)

    def timestamp(value: int | None, description: str) -> str:
        if value is None:
            return "-1"
        if human_readable:
            return f"{relative_time_ms(value, description, now_ms)} ms ago"
        return str(value)

    with_directory_ids = quorum.version >= DESCRIBE_QUORUM_WITH_NODES

    def rows(replicas: Iterable[ReplicaState], status: str) -> list[list[str]]:
        return [[str(replica.replica_id),
                 *([uuid_to_kafka_str(replica.directory_id)] if with_directory_ids else []),
                 str(replica.log_end_offset),
                 str(leader.log_end_offset - replica.log_end_offset),
                 timestamp(replica.last_fetch_timestamp, "last fetch"),
                 timestamp(replica.last_caught_up_timestamp, "last caught up"), status]
                for replica in replicas]

    return (rows([leader], "Leader")
            + rows([v for v in quorum.voters if v.replica_id != quorum.leader_id], "Follower")
            + rows(quorum.observers, "Observer"))


REPLICATION_HEADERS = ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                       "LastCaughtUpTimestamp", "Status"]
#: Kafka 3.9+'s columns, with DescribeQuorum v2's directory ids
REPLICATION_HEADERS_V2 = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                          "LastCaughtUpTimestamp", "Status"]


def replication_headers(quorum: QuorumInfo) -> list[str]:
    return (REPLICATION_HEADERS_V2 if quorum.version >= DESCRIBE_QUORUM_WITH_NODES
            else REPLICATION_HEADERS)


def pretty_table(headers: list[str], rows: list[list[str]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column's width, then a
    tab (the last column too)."""
    widths = [max([len(header)] + [len(row[i]) for row in rows])
              for i, header in enumerate(headers)]
    return "\n".join("".join(f"{cell:<{width}}\t" for cell, width in zip(row, widths))
                     for row in [headers, *rows])


# ------------------------------------------------------------------------------------------
# add-controller / remove-controller


def _controller_id(props: dict[str, str]) -> int:
    if "node.id" not in props:
        raise ToolError("node.id not found in configuration file. Is this a valid controller "
                        "configuration file?")
    node_id = int(props["node.id"])
    if node_id < 0:
        raise ToolError("node.id was negative in configuration file. Is this a valid "
                        "controller configuration file?")
    if "controller" not in props.get("process.roles", ""):
        raise ToolError("process.roles did not contain 'controller' in configuration file. "
                        "Is this a valid controller configuration file?")
    return node_id


def _metadata_directory(props: dict[str, str]) -> str:
    if "metadata.log.dir" in props:
        return props["metadata.log.dir"]
    if "log.dirs" in props:
        return props["log.dirs"].strip().split(",")[0]
    raise ToolError("Neither metadata.log.dir nor log.dirs were found. Is this a valid "
                    "controller configuration file?")


def _directory_id(directory: str) -> str:
    from odradek.storage.checkpoint import CorruptCheckpointError, read_meta_properties

    try:
        meta = read_meta_properties(directory)
    except (CorruptCheckpointError, OSError):
        meta = None
    if meta is None:
        raise ToolError(f"Unable to read meta.properties from {directory}")
    if "directory.id" not in meta:
        raise ToolError(f"No directory id found in {directory}")
    return meta["directory.id"]


class _EveryListenerPlaintext(dict):  # type: ignore[type-arg]
    """Kafka's add-controller reads the listeners with every name mapped to PLAINTEXT."""

    def get(self, key: str, default: str | None = None) -> str:  # type: ignore[override]
        return "PLAINTEXT"


def controller_endpoints(props: dict[str, str]) -> list[RaftVoterEndpoint]:
    """Kafka's getControllerAdvertisedListeners: each name of controller.listener.names with its
    advertised.listeners entry, else its listeners entry (no host: localhost)."""
    from odradek.config import ConfigError
    from odradek.config.listeners import parse_endpoints

    listeners = {}
    for key in ("listeners", "advertised.listeners"):
        try:
            endpoints = parse_endpoints(props.get(key, ""), _EveryListenerPlaintext(), key,
                                        require_distinct_ports=False)
        except ConfigError as exc:
            raise ToolError(str(exc)) from None
        listeners.update((endpoint.name, endpoint) for endpoint in endpoints)
    if "controller.listener.names" not in props:
        raise ToolError("controller.listener.names was not found. Is this a valid controller "
                        "configuration file?")
    out: list[RaftVoterEndpoint] = []
    for name in props["controller.listener.names"].split(","):
        name = name.strip().upper()
        endpoint = listeners.get(name)
        if endpoint is None:
            raise ToolError(f"Cannot find information about controller listener name: {name}")
        voter_endpoint = RaftVoterEndpoint(name, endpoint.host or "localhost", endpoint.port)
        if voter_endpoint not in out:  # Kafka collects them in a LinkedHashSet
            out.append(voter_endpoint)
    return out


def _report_failure(error: KafkaError | UnsupportedApiError) -> int:
    """Kafka's tool on a failed admin call: the ExecutionException's message, then the head of
    its stack trace, on stderr; exit code 1."""
    text = (error.java_text if isinstance(error, UnsupportedApiError)
            else java_exception_text(error))
    print(text, file=sys.stderr)
    print(f"java.util.concurrent.ExecutionException: {text}", file=sys.stderr)
    return 1


def add_controller(props: dict[str, str], to_controllers: bool, dry_run: bool) -> int:
    controller_id = _controller_id(props)
    directory_id = _directory_id(_metadata_directory(props))
    endpoints = controller_endpoints(props)
    if not dry_run:
        async def add(client):  # type: ignore[no-untyped-def]
            await client.add_raft_voter(controller_id, kafka_str_to_uuid(directory_id),
                                        endpoints)

        try:
            run_with_client(props, to_controllers, add)
        except (KafkaError, UnsupportedApiError) as exc:
            return _report_failure(exc)
    verb = "DRY RUN of adding" if dry_run else "Added"
    print(f"{verb} controller {controller_id} with directory id {directory_id} and endpoints: "
          f"{', '.join(str(endpoint) for endpoint in endpoints)}")
    return 0


def uuid_from_string(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString (Java's URL-safe base64 decoder), with its messages."""
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as "
                         "a base64 UUID")
    body = text.rstrip("=")
    for char in body:
        if not (char.isascii() and (char.isalnum() or char in "-_")):
            raise ValueError(f"Illegal base64 character {ord(char):x}")
    if len(body) % 4 == 1:
        raise ValueError("Last unit does not have enough valid bits")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if len(raw) != 16:
        raise ValueError(f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal "
                         "to the expected 16 bytes of a base64-encoded UUID")
    return uuid.UUID(bytes=raw)


def remove_controller(props: dict[str, str], to_controllers: bool, controller_id: int,
                      directory_id: str, dry_run: bool) -> int:
    if controller_id < 0:
        raise ToolError(f"Invalid negative --controller-id: {controller_id}")
    try:
        directory_uuid = uuid_from_string(directory_id)
    except ValueError as exc:
        raise ToolError(f"Failed to parse --controller-directory-id: {exc}") from None
    if not dry_run:
        async def remove(client):  # type: ignore[no-untyped-def]
            await client.remove_raft_voter(controller_id, directory_uuid)

        try:
            run_with_client(props, to_controllers, remove)
        except (KafkaError, UnsupportedApiError) as exc:
            return _report_failure(exc)
    # Kafka's format string leaves two spaces after the verb.
    verb = "DRY RUN of removing " if dry_run else "Removed "
    print(f"{verb} KRaft controller {controller_id} with directory id "
          f"{uuid_to_kafka_str(directory_uuid)}")
    return 0


# ------------------------------------------------------------------------------------------
# main


def _properties(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    if not os.path.exists(path):
        raise ToolError(f"Properties file {path} does not exist.")
    return load_properties_file(path)


def execute(args: argparse.Namespace) -> int:
    props = _properties(args.command_config)
    to_controllers = args.bootstrap_controller is not None
    props["bootstrap.servers"] = args.bootstrap_controller or args.bootstrap_server
    if args.command == "describe":
        if args.status and args.replication:
            raise ToolError("Only one of --status or --replication should be specified with "
                            "describe sub-command")
        if args.replication:
            async def replication(client):  # type: ignore[no-untyped-def]
                return await client.describe_quorum()

            quorum = run_with_client(props, to_controllers, replication)
            print(pretty_table(replication_headers(quorum),
                               replication_rows(quorum, args.human_readable)))
            return 0
        if args.status:
            if args.human_readable:
                raise ToolError("The option --human-readable is only supported along with "
                                "--replication")

            async def status(client):  # type: ignore[no-untyped-def]
                cluster_id = await client.cluster_id()
                return cluster_id, await client.describe_quorum()

            cluster_id, quorum = run_with_client(props, to_controllers, status)
            print(status_text(cluster_id, quorum))
            return 0
        raise ToolError("One of --status or --replication must be specified with describe "
                        "sub-command")
    if args.command == "add-controller":
        if args.command_config is None:
            raise ToolError("You must supply the configuration file of the controller you are "
                            "adding when using add-controller.")
        return add_controller(props, to_controllers, args.dry_run)
    return remove_controller(props, to_controllers, args.controller_id,
                             args.controller_directory_id, args.dry_run)


def main(argv: list[str] | None = None) -> int:
    return run_kraft_tool(build_parser, execute, argv)


if __name__ == "__main__":
    sys.exit(main())
