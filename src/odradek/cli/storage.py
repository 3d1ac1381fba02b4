"""`odradek storage`: Kafka's kafka-storage.sh (random-uuid, format, info).

`format` writes `meta.properties` (version=1, cluster.id, node.id, a fresh directory.id) into every
directory of `log.dirs` and `metadata.log.dir`, with Kafka's checks and messages. The functions
used by `format` (`log_directories`, `load_ensemble`, `verify_ensemble`, `format_directories`)
are shared with `odradek server-start`, which formats a fresh single-node setup itself.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import uuid
from collections.abc import Mapping
from typing import TextIO

from odradek.cli.common import ToolArgumentParser, ToolError, configure_logging, run_tool
from odradek.controller import features
from odradek.server.config import ConfigError, KafkaConfig
from odradek.storage.checkpoint import (
    META_PROPERTIES,
    CorruptCheckpointError,
    read_meta_properties,
    topic_id_from_str,
    topic_id_to_str,
    write_meta_properties,
)

# Kafka's metadata.version levels 1..20 (MetadataVersion 3.0-IV1 .. 3.8-IV0, all production
# in Kafka 3.8); the level of a version is its index + 1.
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


def write_directory(directory: str, cluster_id: str, node_id: int, taken_ids: set[str]) -> None:
    """Creates `directory` if needed and writes its meta.properties with a fresh directory.id."""
    directory_id = random_directory_id(taken_ids)
    try:
        os.makedirs(directory, exist_ok=True)
        write_meta_properties(directory, cluster_id, node_id, directory_id)
    except OSError as exc:
        raise ToolError(f"Error while writing meta.properties file {directory}: {exc}") from exc
    taken_ids.add(directory_id)


def format_directories(config: KafkaConfig, cluster_id: str, out: TextIO, *,
                       ignore_formatted: bool = False,
                       release_version: str = LATEST_METADATA_VERSION) -> list[str]:
    """Kafka's `kafka-storage.sh format` for one node; returns the directories it formatted."""
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
    for directory in empty:
        print(f"Formatting {_display(directory)} with metadata.version {release_version}.",
              file=out)
        write_directory(directory, cluster_id, config.node_id, taken_ids)
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
        "--release-version", "-r",
        help=f"The metadata.version to start with; at least 3.0-IV1, by default "
             f"{LATEST_METADATA_VERSION}.")
    format_parser.add_argument(
        "--standalone", "-s", action="store_true",
        help="Format a controller as the only voter of a new single-node controller quorum.")
    return parser


def _load_config(path: str) -> KafkaConfig:
    try:
        return KafkaConfig.from_file(path)
    except ConfigError as exc:
        raise ToolError(str(exc)) from exc


def _check_standalone(config: KafkaConfig) -> None:
    """--standalone makes this controller the whole initial quorum (Kafka 3.9's flag)."""
    if not config.is_controller:
        raise ToolError("You cannot use --standalone on a broker node.")
    voters = config.quorum_voters
    if voters and set(voters) != {config.node_id}:
        raise ToolError("You cannot specify controller.quorum.voters with other voters and format "
                        "the node with --standalone. If you want a single-node quorum, set "
                        f"controller.quorum.voters to this node only ({config.node_id}@host:port) "
                        "or use controller.quorum.bootstrap.servers instead.")


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
    release_version = (parse_release_version(args.release_version)
                       if args.release_version is not None else LATEST_METADATA_VERSION)
    if args.standalone:
        _check_standalone(config)
    format_directories(config, args.cluster_id, sys.stdout,
                       ignore_formatted=args.ignore_formatted, release_version=release_version)
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run_tool(_run, sys.argv[1:] if argv is None else argv)
