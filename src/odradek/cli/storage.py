"""`odradek storage`: Kafka's kafka-storage.sh (random-uuid, format, info).

`format` writes `meta.properties` (version=1, cluster.id, node.id, a fresh directory.id) into every
directory of `log.dirs` and `metadata.log.dir`, with Kafka's checks and messages. The functions
used by `format` (`log_directories`, `load_ensemble`, `verify_ensemble`, `format_directories`)
are shared with `odradek server-start`, which formats a fresh single-node setup itself.

Dynamic controller quorums (KIP-853, Kafka 4.0's flags): `--standalone`, `--initial-controllers`
and `--no-initial-controllers` are for nodes whose `controller.quorum.voters` is empty (they
find the quorum through `controller.quorum.bootstrap.servers`). With the first two, the metadata
log directory also gets the bootstrap snapshot
`__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`: kraft.version 1 and a
VotersRecord of the initial voters, each with one endpoint under the first name of
`controller.listener.names`. A voter's directory.id in its metadata directory's meta.properties
is the one its voter entry names (a random one with `--standalone`).
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from odradek.cli.common import ToolArgumentParser, ToolError, configure_logging, run_tool
from odradek.config.listeners import Endpoint, parse_endpoints
from odradek.controller import features
from odradek.controller.bootstrap import parse_add_scram, write_bootstrap_records
from odradek.protocol import messages as m
from odradek.protocol.ids import kafka_str_to_uuid, uuid_to_kafka_str
from odradek.raft.config import METADATA_PARTITION, METADATA_TOPIC
from odradek.raft.snapshot import FileSnapshotStore, OffsetAndEpoch, bootstrap_snapshot
from odradek.raft.voters import KRAFT_VERSION_DYNAMIC, Voter, VoterSet
from odradek.server.config import ConfigError, KafkaConfig
from odradek.storage.checkpoint import (
    META_PROPERTIES,
    CorruptCheckpointError,
    read_meta_properties,
    topic_id_from_str,
    topic_id_to_str,
    write_meta_properties,
)

# Kafka's metadata.version levels 1..25 (MetadataVersion 3.0-IV1 .. 4.0-IV3; Kafka 4.0
# supports 3.3-IV3 and up); the level of a version is its index + 1.
# metadata.version names by level (level = index + 1): the controller's feature table.
METADATA_VERSIONS = tuple(name for name, _changed in features.METADATA_VERSIONS)
LATEST_METADATA_VERSION = METADATA_VERSIONS[-1]
_PRE_KRAFT_VERSION = re.compile(r"0\.\d+(\.\d+)*(-IV\d+)?|[12]\.\d+(\.\d+)?(-IV\d+)?|3\.0-IV0")
_KAFKA_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")
_RESERVED_DIRECTORY_IDS = 100  # Kafka reserves the directory ids 0:0 .. 0:99

LEGACY_MODE_PROBLEM = ("The kafka configuration file appears to be for a cluster in KRaft mode, "
                       "but the directories are formatted for legacy mode.")


def metadata_version_level(version: str) -> int:
    return METADATA_VERSIONS.index(version) + 1


def parse_release_version(text: str) -> str:
    """`3.8`, `3.8.0` or `3.8-IV0` -> the metadata.version it names (Kafka's fromVersionString)."""
    text = text.strip()
    segments = text.split(".")
    key = ".".join(segments[:2]) if len(segments) > 2 and not text.startswith("0.") else text
    if _PRE_KRAFT_VERSION.fullmatch(text):
        raise ToolError("Must specify a valid KRaft metadata.version of at least 3.0-IV0.")
    if key in METADATA_VERSIONS:
        return key
    same_release = [version for version in METADATA_VERSIONS if version.split("-")[0] == key]
    if same_release:
        return same_release[-1]
    raise ToolError(f"Version {text} is not a valid version")


def format_feature_levels(release_version: str | None, feature_args: list[str],
                          dynamic_quorum: bool) -> tuple[str, dict[str, int]]:
    """Kafka 4.0's Formatter: the metadata.version and the level of every feature a formatted
    cluster starts with. `--release-version` (or `--feature metadata.version=N`) sets
    metadata.version, by default the latest; each other feature defaults to its level for that
    metadata.version (`version-mapping`), kraft.version to 1 with a dynamic quorum flag and 0
    otherwise; `--feature name=level` overrides a default. Every level must exist and its
    dependencies hold."""
    requested: dict[str, int] = {}
    for text in feature_args:
        name, sep, level_text = text.partition("=")
        if not sep:
            raise ToolError(f"Can't parse feature=level string {text}: equals sign not found.")
        try:
            requested[name.strip()] = int(level_text.strip())
        except ValueError:
            raise ToolError(f"Can't parse feature=level string {text}: unable to parse "
                            f"{level_text.strip()} as a short.") from None
    mv_name = features.METADATA_VERSION_FEATURE
    if mv_name in requested:
        if release_version is not None:
            raise ToolError("Use --release-version instead of --feature metadata.version=X to "
                            "avoid ambiguity.")
        level = requested.pop(mv_name)
        if not 1 <= level <= len(METADATA_VERSIONS):
            raise ToolError(f"No MetadataVersion with feature level {level}.")
        release_version = METADATA_VERSIONS[level - 1]
    version = release_version or LATEST_METADATA_VERSION
    if metadata_version_level(version) < features.MINIMUM_KRAFT_VERSION:
        raise ToolError(f"Unsupported metadata.version {version}: the minimum is "
                        f"{METADATA_VERSIONS[features.MINIMUM_KRAFT_VERSION - 1]}.")
    known = sorted(features.FEATURE_VERSIONS)
    for name in requested:
        if name not in features.FEATURE_VERSIONS:
            raise ToolError(f"Unsupported feature: {name}. Supported features are: "
                            f"{', '.join(known)}")
    levels = {mv_name: metadata_version_level(version)}
    kraft = requested.get(features.KRAFT_VERSION_FEATURE)
    if kraft is not None and kraft == 0 and dynamic_quorum:
        raise ToolError("Cannot set kraft.version to 0 if controller.quorum.voters is empty and "
                        "one of the flags --standalone, --initial-controllers, or "
                        "--no-initial-controllers is used. For dynamic controllers support, "
                        "try removing the --feature flag for kraft.version.")
    if kraft is not None and kraft != 0 and not dynamic_quorum:
        raise ToolError(f"Cannot set kraft.version to {kraft} unless controller.quorum.voters "
                        "is empty and one of the flags --standalone, --initial-controllers, or "
                        "--no-initial-controllers is used. For dynamic controllers support, try "
                        "using one of --standalone, --initial-controllers, or "
                        "--no-initial-controllers and removing controller.quorum.voters.")
    for name in features.FEATURE_VERSIONS:
        if name == features.KRAFT_VERSION_FEATURE:
            levels[name] = kraft if kraft is not None else int(dynamic_quorum)
        else:
            levels[name] = requested.get(name, features.default_level(name, levels[mv_name]))
    for name, level in levels.items():
        if name != mv_name:
            reason = features.dependency_error(name, level, levels)
            if reason is not None:
                raise ToolError(reason)
    return version, levels


def feature_level_records(levels: Mapping[str, int]) -> list[Any]:
    """The bootstrap FeatureLevelRecords of `format_feature_levels`' levels: metadata.version
    and every other feature above 0. kraft.version 1 (a dynamic quorum) is among them, as
    Kafka 4.0.0's bootstrap metadata has it: that is where ApiVersions' finalized kraft.version
    comes from (Kafka 4.0.1+ reads the quorum's instead, KAFKA-18979; same answer)."""
    return [m.FeatureLevelRecord(name=name, feature_level=level)
            for name, level in levels.items()
            if name == features.METADATA_VERSION_FEATURE or level > 0]


def random_uuid() -> str:
    """Kafka's Uuid.randomUuid(): a random v4 UUID as unpadded URL-safe base64 (22 chars).

    Ids starting with '-' are skipped, as Kafka does, so an id never reads as a command-line
    flag; the reserved ids (all zeros, 0:1) cannot occur since v4 ids have version bits set.
    """
    while True:
        text = topic_id_to_str(uuid.uuid4())
        if not text.startswith("-"):
            return text


def random_directory_id(taken: set[str]) -> str:
    """A fresh directory.id: 128 random bits, not reserved, not starting with '-', not taken."""
    while True:
        raw = secrets.token_bytes(16)
        text = topic_id_to_str(raw)
        if (int.from_bytes(raw, "big") >= _RESERVED_DIRECTORY_IDS and not text.startswith("-")
                and text not in taken):
            return text


def validate_cluster_id(cluster_id: str) -> None:
    reason = None
    if not _KAFKA_UUID_TEXT.fullmatch(cluster_id):
        reason = "expected 22 characters of URL-safe base64 (as printed by random-uuid)"
    else:
        try:
            topic_id_from_str(cluster_id)
        except ValueError as exc:
            reason = str(exc)
    if reason is not None:
        raise ToolError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: "
                        f"{reason}")


def log_directories(config: KafkaConfig) -> list[str]:
    """The directories to format or inspect: log.dirs plus metadata.log.dir, sorted, unique."""
    return sorted({*config.log_dirs, config.metadata_log_dir})


def _display(directory: str) -> str:
    return directory.rstrip("/") or directory


def _meta_path(directory: str) -> str:
    return os.path.join(directory, META_PROPERTIES)


def load_ensemble(directories: list[str]) -> dict[str, dict[str, str] | None]:
    """Each directory's meta.properties (None when the directory is not formatted)."""
    ensemble: dict[str, dict[str, str] | None] = {}
    for directory in directories:
        try:
            ensemble[directory] = read_meta_properties(directory)
        except (CorruptCheckpointError, OSError) as exc:
            raise ToolError(f"Error loading {_meta_path(directory)}: {exc}") from exc
    return ensemble


def verify_ensemble(ensemble: Mapping[str, dict[str, str] | None], cluster_id: str | None,
                    node_id: int) -> None:
    """Kafka's MetaPropertiesEnsemble.verify: formatted directories agree with the expected
    cluster id and node id, are KRaft-formatted (version 1) and have distinct directory ids."""
    directory_ids: dict[str, str] = {}
    for directory, meta in ensemble.items():
        if meta is None:
            continue
        path = _meta_path(directory)
        if meta.get("version") != "1":
            raise ToolError(LEGACY_MODE_PROBLEM)
        if "cluster.id" not in meta:
            raise ToolError(f"Error loading {path}: cluster.id was not found.")
        if cluster_id is not None and meta["cluster.id"] != cluster_id:
            raise ToolError(f"Invalid cluster.id in: {path}. Expected {cluster_id}, but read "
                            f"{meta['cluster.id']}")
        stored_node_id = meta.get("node.id", "")
        if not re.fullmatch(r"-?[0-9]+", stored_node_id):
            raise ToolError(f"Error loading {path}: Unable to read node.id as a base-10 number.")
        if int(stored_node_id) != node_id:
            raise ToolError(f"Stored node id {stored_node_id} doesn't match previous node id "
                            f"{node_id} in {path}. If you moved your data, make sure your "
                            "configured node id matches. If you intend to create a new node, you "
                            "should remove all data in your data directories.")
        directory_id = meta.get("directory.id")
        if directory_id is not None:
            if directory_id in directory_ids:
                raise ToolError(f"Duplicate directory ID {directory_id} found. It was the "
                                f"directory ID of {directory_ids[directory_id]}, and also of "
                                f"{directory}")
            directory_ids[directory_id] = directory


def write_directory(directory: str, cluster_id: str, node_id: int, taken_ids: set[str],
                    directory_id: str | None = None) -> None:
    """Creates `directory` if needed and writes its meta.properties with `directory_id` (a
    fresh one when None)."""
    if directory_id is None:
        directory_id = random_directory_id(taken_ids)
    try:
        os.makedirs(directory, exist_ok=True)
        write_meta_properties(directory, cluster_id, node_id, directory_id)
    except OSError as exc:
        raise ToolError(f"Error while writing meta.properties file {directory}: {exc}") from exc
    taken_ids.add(directory_id)


# ------------------------------------------------------------------------------------------------
# dynamic quorums (KIP-853)


@dataclass(frozen=True)
class DynamicVoter:
    """One `--initial-controllers` entry (Kafka's DynamicVoter): `id@host:port:directoryId`."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    def voter(self, controller_listener: str) -> Voter:
        """The voter it makes: its one endpoint under the first controller listener name."""
        return Voter(self.node_id, self.directory_id,
                     {controller_listener: (self.host, self.port)})


class _ParseError(ValueError):
    """Kafka's IllegalArgumentException from DynamicVoter(s).parse: StorageTool does not catch
    it, so the JVM reports it as an uncaught exception."""

    def tool_error(self) -> ToolError:
        return ToolError(f'Exception in thread "main" java.lang.IllegalArgumentException: {self}')


def _parse_int(text: str) -> int:
    # Java's Integer.parseInt: an optional sign and decimal digits, in the int range.
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -2**31 <= int(text) < 2**31:
        raise ValueError(text)
    return int(text)


def parse_dynamic_voter(text: str) -> DynamicVoter:
    """Kafka's DynamicVoter.parse, with its messages."""
    text = text.strip()
    at = text.find("@")
    if at < 0:
        raise _ParseError("No @ found in dynamic voter string.")
    if at == 0:
        raise _ParseError("Invalid @ at beginning of dynamic voter string.")
    try:
        node_id = _parse_int(text[:at])
    except ValueError:
        raise _ParseError("Failed to parse node id in dynamic voter string.") from None
    if node_id < 0:
        raise _ParseError(f"Invalid negative node id {node_id} in dynamic voter string.")
    rest = text[at + 1:]
    if not rest:
        raise _ParseError("No hostname found after node id.")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise _ParseError("Hostname began with left bracket, but no right bracket was "
                              "found.")
        host, rest = rest[1:end], rest[end + 1:]
    else:
        end = rest.find(":")
        if end < 0:
            raise _ParseError("No colon following hostname could be found.")
        host, rest = rest[:end], rest[end:]
    if not rest.startswith(":"):
        raise _ParseError("Port section must start with a colon.")
    rest = rest[1:]
    end = rest.find(":")
    if end < 0:
        raise _ParseError("No colon following port could be found.")
    try:
        port = _parse_int(rest[:end])
    except ValueError:
        raise _ParseError("Failed to parse port in dynamic voter string.") from None
    if not 0 <= port <= 65535:
        raise _ParseError(f"Invalid port {port} in dynamic voter string.")
    try:
        directory_id = kafka_str_to_uuid(rest[end + 1:])
    except ValueError:
        raise _ParseError("Failed to parse directory ID in dynamic voter string.") from None
    return DynamicVoter(node_id, host, port, directory_id)


def parse_dynamic_voters(text: str) -> dict[int, DynamicVoter]:
    """Kafka's DynamicVoters.parse: comma-separated voters (empty entries skipped), by id."""
    voters: dict[int, DynamicVoter] = {}
    for entry in text.strip().split(","):
        if not entry:
            continue
        voter = parse_dynamic_voter(entry)
        if voter.node_id in voters:
            raise _ParseError(f"Node id {voter.node_id} was specified more than once.")
        voters[voter.node_id] = voter
    if not voters:
        raise _ParseError("No voters given.")
    return dict(sorted(voters.items()))


def advertised_controller_endpoint(config: KafkaConfig) -> Endpoint:
    """Kafka's effectiveAdvertisedControllerListeners.head: the first controller listener as
    `advertised.listeners` names it, else as `listeners` does (0.0.0.0 read as no host)."""
    name = config.controller_listener_names[0] if config.controller_listener_names else None
    advertised_text = config.get("advertised.listeners")
    advertised = (parse_endpoints(advertised_text, config.listener_security_protocol_map,
                                  "advertised.listeners", require_distinct_ports=False)
                  if advertised_text is not None else [])
    for endpoint in advertised:
        if endpoint.name == name:
            return endpoint
    for endpoint in config.listeners:
        if endpoint.name == name:
            if endpoint.host == "0.0.0.0":
                return Endpoint(endpoint.name, None, endpoint.port, endpoint.security_protocol)
            return endpoint
    raise ToolError("No controller listeners found.")


def standalone_voter(config: KafkaConfig, taken_ids: set[str]) -> DynamicVoter:
    """Kafka's createStandaloneDynamicVoters: this controller, at its advertised controller
    endpoint (localhost when that has no host), with a fresh directory id."""
    if not config.is_controller:
        raise ToolError("You can only use --standalone on a controller.")
    endpoint = advertised_controller_endpoint(config)
    directory_id = kafka_str_to_uuid(random_directory_id(taken_ids))
    return DynamicVoter(config.node_id, endpoint.host or "localhost", endpoint.port, directory_id)


# Kafka's Formatter.DirectoryType descriptions, printed by a format with a dynamic-quorum flag.
DATA_DIRECTORY = "data directory"
STATIC_METADATA_DIRECTORY = "metadata directory"
DYNAMIC_METADATA_NON_VOTER_DIRECTORY = "dynamic metadata directory"
DYNAMIC_METADATA_VOTER_DIRECTORY = "dynamic metadata voter directory"


def directory_type(directory: str, metadata_directory: str, node_id: int,
                   initial_voters: Mapping[int, DynamicVoter] | None) -> str:
    if directory != metadata_directory:
        return DATA_DIRECTORY
    if initial_voters is None:
        return STATIC_METADATA_DIRECTORY
    if node_id in initial_voters:
        return DYNAMIC_METADATA_VOTER_DIRECTORY
    return DYNAMIC_METADATA_NON_VOTER_DIRECTORY


def metadata_partition_directory(metadata_log_dir: str) -> str:
    """Where the metadata log and its snapshots live: `<metadata.log.dir>/__cluster_metadata-0`."""
    return os.path.join(metadata_log_dir, f"{METADATA_TOPIC}-{METADATA_PARTITION}")


def write_bootstrap_snapshot(metadata_log_dir: str, voters: VoterSet,
                             kraft_version: int = KRAFT_VERSION_DYNAMIC) -> str:
    """Kafka's writeDynamicQuorumSnapshot: the 0-0 checkpoint with the initial voter set,
    written atomically; returns its path."""
    store = FileSnapshotStore(metadata_partition_directory(metadata_log_dir))
    snapshot_id = OffsetAndEpoch(0, 0)
    writer = store.new_writer(snapshot_id)
    try:
        writer.append(bootstrap_snapshot(voters, kraft_version, int(time.time() * 1000)))
    except BaseException:
        writer.abort()
        raise
    writer.freeze()
    return str(store.path(snapshot_id))


def format_directories(config: KafkaConfig, cluster_id: str, out: TextIO, *,
                       ignore_formatted: bool = False,
                       release_version: str = LATEST_METADATA_VERSION,
                       dynamic_quorum: bool = False,
                       initial_voters: Mapping[int, DynamicVoter] | None = None,
                       bootstrap_records: list[Any] | None = None) -> list[str]:
    """Kafka's `kafka-storage.sh format` for one node; returns the directories it formatted.

    `dynamic_quorum` (one of the KIP-853 flags was given) prints each directory's type as
    Kafka 4.0 does; with `initial_voters` (`--standalone` / `--initial-controllers`) the metadata
    log directory also gets the bootstrap snapshot with those voters, and this node's voter
    entry names its directory.id."""
    validate_cluster_id(cluster_id)
    directories = log_directories(config)
    if not directories:
        raise ToolError("No log directories found in the configuration.")
    ensemble = load_ensemble(directories)
    verify_ensemble(ensemble, cluster_id, config.node_id)
    formatted = [directory for directory, meta in ensemble.items() if meta is not None]
    if formatted and not ignore_formatted:
        raise ToolError(f"Log directory {_display(formatted[0])} is already formatted. Use "
                        "--ignore-formatted to ignore this directory and format the others.")
    empty = [directory for directory, meta in ensemble.items() if meta is None]
    if not empty:
        print("All of the log directories are already formatted.", file=out)
        return []
    taken_ids = {meta["directory.id"] for meta in ensemble.values()
                 if meta is not None and "directory.id" in meta}
    if initial_voters is not None:
        taken_ids.update(uuid_to_kafka_str(voter.directory_id)
                         for voter in initial_voters.values())
    metadata_directory = config.metadata_log_dir
    for directory in empty:
        kind = directory_type(directory, metadata_directory, config.node_id, initial_voters)
        shown_kind = f"{kind} " if dynamic_quorum else ""
        print(f"Formatting {shown_kind}{_display(directory)} with metadata.version "
              f"{release_version}.", file=out)
        directory_id = None
        if initial_voters is not None and kind != DATA_DIRECTORY:
            # As Kafka: the snapshot first, then meta.properties (which marks it formatted).
            listener = config.controller_listener_names[0]
            voters = VoterSet([voter.voter(listener) for voter in initial_voters.values()])
            try:
                os.makedirs(directory, exist_ok=True)
                write_bootstrap_snapshot(directory, voters)
            except OSError as exc:
                raise ToolError(f"Error while writing meta.properties file {directory}: "
                                f"{exc}") from exc
            if kind == DYNAMIC_METADATA_VOTER_DIRECTORY:
                directory_id = uuid_to_kafka_str(initial_voters[config.node_id].directory_id)
        if bootstrap_records and os.path.abspath(directory) == os.path.abspath(
                metadata_directory):
            try:
                write_bootstrap_records(directory, bootstrap_records)
            except OSError as exc:
                raise ToolError(f"Error while writing the bootstrap records in {directory}: "
                                f"{exc}") from exc
        write_directory(directory, cluster_id, config.node_id, taken_ids, directory_id)
    return empty


def info(config: KafkaConfig, out: TextIO) -> int:
    """Kafka's `kafka-storage.sh info`: the directories, their meta.properties, any problems."""
    problems: list[str] = []
    found: list[str] = []
    first: dict[str, str] | None = None
    for directory in log_directories(config):
        shown = _display(directory)
        if not os.path.isdir(directory):
            problems.append(f"{shown} does not exist" if not os.path.exists(directory)
                            else f"{shown} is not a directory")
            continue
        found.append(shown)
        try:
            meta = read_meta_properties(directory)
        except (CorruptCheckpointError, OSError) as exc:
            problems.append(f"Error loading {_meta_path(directory)}: {exc}")
            continue
        if meta is None:
            problems.append(f"{shown} is not formatted.")
            continue
        if meta.get("version") == "1" and ("cluster.id" not in meta or "node.id" not in meta):
            missing = "cluster.id" if "cluster.id" not in meta else "node.id"
            problems.append(f"Error loading {_meta_path(directory)}: {missing} was not found.")
            continue
        if first is None:
            first = meta
        elif first.get("cluster.id") != meta.get("cluster.id"):
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.get("node.id") != meta.get("node.id"):
            problems.append("Mismatched node IDs between storage directories.")
    if first is not None and first.get("version") == "0":
        problems.append(LEGACY_MODE_PROBLEM)

    if found:
        print("Found log directory:" if len(found) == 1 else "Found log directories:", file=out)
        for directory in found:
            print(f"  {directory}", file=out)
        print(file=out)
    if first is not None:
        shown_meta = ", ".join(f"{key}={value}" for key, value in sorted(first.items()))
        print(f"Found metadata: {{{shown_meta}}}", file=out)
        print(file=out)
    if problems:
        print("Found problem:" if len(problems) == 1 else "Found problems:", file=out)
        for problem in problems:
            print(f"  {problem}", file=out)
        print(file=out)
        return 1
    return 0


def _build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="odradek storage",
                                description="The Odradek storage tool (kafka-storage.sh).")
    commands = parser.add_subparsers(dest="command", metavar="{info,format,random-uuid}")
    info_parser = commands.add_parser(
        "info", help="Get information about the log directories on this node.")
    format_parser = commands.add_parser("format", help="Format the log directories on this node.")
    commands.add_parser("random-uuid", help="Print a random UUID.")
    for sub in (info_parser, format_parser):
        sub.add_argument("--config", "-c", required=True,
                         help="The server configuration file to use.")
    format_parser.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    format_parser.add_argument("--ignore-formatted", "-g", action="store_true",
                               help="Skip directories that are already formatted.")
    format_parser.add_argument(
        "--add-scram", "-S", action="append", default=[],
        help="A SCRAM credential to create at bootstrap, e.g. "
             "'SCRAM-SHA-256=[name=alice,password=alice-secret]' (also iterations=, salt=, "
             "saltedpassword=); may be repeated.")
    format_parser.add_argument(
        "--release-version", "-r",
        help=f"The release version to use for the initial feature settings. The minimum is "
             f"{METADATA_VERSIONS[features.MINIMUM_KRAFT_VERSION - 1]}; the default is "
             f"{LATEST_METADATA_VERSION}")
    format_parser.add_argument(
        "--feature", "-f", action="append", default=[],
        help="The setting to use for a specific feature, in feature=level format. For "
             "example: `kraft.version=1`.")
    quorum = format_parser.add_mutually_exclusive_group()
    quorum.add_argument(
        "--standalone", "-s", action="store_true",
        help="Used to initialize a controller as a single-node dynamic quorum. When setting this "
             "flag, the controller.quorum.voters config must not be set, and "
             "controller.quorum.bootstrap.servers is set instead.")
    quorum.add_argument(
        "--no-initial-controllers", "-N", action="store_true",
        help="Used to initialize a server without specifying a dynamic quorum. When setting this "
             "flag, the controller.quorum.voters config should not be set, and "
             "controller.quorum.bootstrap.servers is set instead.")
    quorum.add_argument(
        "--initial-controllers", "-I",
        help="Used to initialize a server with the specified dynamic quorum. The argument is a "
             "comma-separated list of id@hostname:port:directory. The same values must be used "
             "to format all nodes. For example: 0@example.com:8082:JEXY6aqzQY-32P5TStzaFg,"
             "1@example.com:8083:MvDxzVmcRsaTz33bUuRU6A,2@example.com:8084:"
             "07R5amHmR32VDA6jHkGbTA. When setting this flag, the controller.quorum.voters "
             "config must not be set, and controller.quorum.bootstrap.servers is set instead.")
    return parser


def _load_config(path: str) -> KafkaConfig:
    try:
        return KafkaConfig.from_file(path)
    except ConfigError as exc:
        raise ToolError(str(exc)) from exc


def initial_voters_for_format(config: KafkaConfig, standalone: bool,
                              initial_controllers: str | None,
                              no_initial_controllers: bool) -> dict[int, DynamicVoter] | None:
    """Kafka 4.0's StorageTool checks of the dynamic-quorum flags, in its order; the initial
    voters to bootstrap (None: no bootstrap snapshot)."""
    static_voters = bool(config.quorum_voters)
    if static_voters and (initial_controllers is not None or standalone):
        raise ToolError("You cannot specify controller.quorum.voters and format the node with "
                        "--initial-controllers or --standalone. If you want to use dynamic "
                        "quorum, please remove controller.quorum.voters and specify "
                        "controller.quorum.bootstrap.servers instead.")
    voters = None
    if initial_controllers is not None:
        try:
            voters = parse_dynamic_voters(initial_controllers)
        except _ParseError as exc:
            raise exc.tool_error() from None
    if standalone:
        voter = standalone_voter(config, set())
        voters = {voter.node_id: voter}
    if (not no_initial_controllers and config.is_controller and not static_voters
            and voters is None):
        raise ToolError("Because controller.quorum.voters is not set on this controller, you "
                        "must specify one of the following: --standalone, --initial-controllers, "
                        "or --no-initial-controllers.")
    return voters


def _run(argv: list[str]) -> int:
    parser = _build_parser()
    if not argv:
        parser.print_help(sys.stderr)
        return 1
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 1
    if args.command == "random-uuid":
        print(random_uuid())
        return 0
    config = _load_config(args.config)
    if args.command == "info":
        return info(config, sys.stdout)
    requested_version = (parse_release_version(args.release_version)
                         if args.release_version is not None else None)
    initial_voters = initial_voters_for_format(config, args.standalone,
                                               args.initial_controllers,
                                               args.no_initial_controllers)
    dynamic_quorum = (args.standalone or args.no_initial_controllers
                      or args.initial_controllers is not None)
    release_version, levels = format_feature_levels(requested_version, args.feature,
                                                    dynamic_quorum)
    try:
        scram_records = [parse_add_scram(text) for text in args.add_scram]
    except (ConfigError, ValueError) as exc:
        raise ToolError(str(exc)) from exc
    # The bootstrap file carries the release version and features: the first active controller
    # writes them into the metadata log as they are (server/broker.py).
    format_directories(config, args.cluster_id, sys.stdout,
                       ignore_formatted=args.ignore_formatted, release_version=release_version,
                       dynamic_quorum=dynamic_quorum, initial_voters=initial_voters,
                       bootstrap_records=[*feature_level_records(levels), *scram_records])
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run_tool(_run, sys.argv[1:] if argv is None else argv)
