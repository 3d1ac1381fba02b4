"""`odradek metadata-quorum`: Kafka's kafka-metadata-quorum.sh (MetadataQuorumCommand).

    odradek metadata-quorum --bootstrap-server HOST:PORT describe --status
    odradek metadata-quorum --bootstrap-controller HOST:PORT describe --replication [--human-readable]

``describe --status`` prints the quorum summary (the cluster id from DescribeCluster, the rest
from DescribeQuorum)::

    ClusterId:              fMCL8kv1SWm87L_Md-I2hg
    LeaderId:               1
    LeaderEpoch:            2
    HighWatermark:          10
    MaxFollowerLag:         0
    MaxFollowerLagTimeMs:   0
    CurrentVoters:          [1,2,3]
    CurrentObservers:       []

Voters are printed as ids, Kafka 3.7/3.8's format: Odradek serves DescribeQuorum v1, which has
no directory ids or endpoints (Kafka 3.9's ``[{"id": 1, "directoryId": ...}]`` needs v2).
``describe --replication`` prints Kafka's NodeId/LogEndOffset/Lag/LastFetchTimestamp/
LastCaughtUpTimestamp/Status table (columns padded, each followed by a tab).

``add-controller`` and ``remove-controller`` (Kafka 3.9, KIP-853) parse as Kafka's do, but no
Odradek node serves AddRaftVoter/RemoveRaftVoter yet: they fail with Kafka's
UnsupportedVersionException text and exit code 1 (``--dry-run`` prints what would be done).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable

from odradek.cli.common import ToolArgumentParser, ToolError
from odradek.cli.kraft_client import (
    QuorumInfo,
    ReplicaState,
    UnsupportedApiError,
    run_kraft_tool,
    run_with_client,
)
from odradek.cli.tool_options import load_properties_file

PROG = "kafka-metadata-quorum"
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER = 80, 81
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
        ("CurrentVoters:", _ids(quorum.voters)),
        ("CurrentObservers:", _ids(quorum.observers)),
    ]
    return "\n".join(f"{label:<{_STATUS_LABEL_WIDTH}}{'null' if value is None else value}"
                     for label, value in rows)


def _ids(replicas: Iterable[ReplicaState]) -> str:
    return "[" + ",".join(str(replica.replica_id) for replica in replicas) + "]"


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

    def rows(replicas: Iterable[ReplicaState], status: str) -> list[list[str]]:
        return [[str(replica.replica_id), str(replica.log_end_offset),
                 str(leader.log_end_offset - replica.log_end_offset),
                 timestamp(replica.last_fetch_timestamp, "last fetch"),
                 timestamp(replica.last_caught_up_timestamp, "last caught up"), status]
                for replica in replicas]

    return (rows([leader], "Leader")
            + rows([v for v in quorum.voters if v.replica_id != quorum.leader_id], "Follower")
            + rows(quorum.observers, "Observer"))


REPLICATION_HEADERS = ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                       "LastCaughtUpTimestamp", "Status"]


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


def _controller_endpoints(props: dict[str, str]) -> list[str]:
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
    shown = []
    for name in props["controller.listener.names"].split(","):
        name = name.strip().upper()
        endpoint = listeners.get(name)
        if endpoint is None:
            raise ToolError(f"Cannot find information about controller listener name: {name}")
        host = endpoint.host or "localhost"
        shown_host = f"[{host}]" if ":" in host else host
        shown.append(f"{name}://{shown_host}:{endpoint.port}")
    return shown


def _unsupported(api_key: int) -> int:
    """Kafka's tool on a server without the API: the ExecutionException's message, then the
    head of its stack trace, on stderr; exit code 1."""
    error = UnsupportedApiError(api_key)
    print(error.java_text, file=sys.stderr)
    print(f"java.util.concurrent.ExecutionException: {error.java_text}", file=sys.stderr)
    return 1


def _require_api(props: dict[str, str], to_controllers: bool, api_key: int) -> None:
    """Kafka's admin client checks a node's ApiVersions before sending. No Odradek node serves
    AddRaftVoter/RemoveRaftVoter yet, and Odradek's codecs (generated from Kafka 3.8's specs)
    could not encode them: once a node answers, the call is unsupported. A node that cannot be
    reached fails first, as in Kafka."""

    async def reach(client):  # type: ignore[no-untyped-def]
        return await client.connection()

    run_with_client(props, to_controllers, reach)
    raise UnsupportedApiError(api_key)


def add_controller(props: dict[str, str], to_controllers: bool, dry_run: bool) -> int:
    controller_id = _controller_id(props)
    directory_id = _directory_id(_metadata_directory(props))
    endpoints = _controller_endpoints(props)
    if not dry_run:
        try:
            _require_api(props, to_controllers, ADD_RAFT_VOTER)
        except UnsupportedApiError:
            return _unsupported(ADD_RAFT_VOTER)
    verb = "DRY RUN of adding" if dry_run else "Added"
    print(f"{verb} controller {controller_id} with directory id {directory_id} and endpoints: "
          f"{', '.join(endpoints)}")
    return 0


def remove_controller(props: dict[str, str], to_controllers: bool, controller_id: int,
                      directory_id: str, dry_run: bool) -> int:
    from odradek.storage.checkpoint import topic_id_from_str

    if controller_id < 0:
        raise ToolError(f"Invalid negative --controller-id: {controller_id}")
    try:
        topic_id_from_str(directory_id)
    except ValueError as exc:
        raise ToolError(f"Failed to parse --controller-directory-id: {exc}") from None
    if not dry_run:
        try:
            _require_api(props, to_controllers, REMOVE_RAFT_VOTER)
        except UnsupportedApiError:
            return _unsupported(REMOVE_RAFT_VOTER)
    # Kafka's format string leaves two spaces after the verb.
    verb = "DRY RUN of removing " if dry_run else "Removed "
    print(f"{verb} KRaft controller {controller_id} with directory id {directory_id}")
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
            print(pretty_table(REPLICATION_HEADERS,
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
