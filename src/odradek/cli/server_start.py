"""`odradek server-start [CONFIG] [--override property=value]...` (Kafka's kafka-server-start.sh).

Without CONFIG the node runs with the embedded single-node defaults (`make run`). Before the
node starts, its storage is checked: a fresh single-voter combined node (the embedded default,
for one) is formatted automatically with a new cluster id; any other unformatted node must be
formatted with `odradek storage format` first, as Kafka requires.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import TextIO

from odradek import __version__
from odradek.cli import log4j
from odradek.cli.common import ToolArgumentParser, ToolError, configure_logging, run_tool
from odradek.cli.storage import (
    format_directories,
    load_ensemble,
    log_directories,
    random_uuid,
    verify_ensemble,
    write_directory,
)
from odradek.server.config import (
    ConfigError,
    KafkaConfig,
    embedded_default_config,
    parse_override,
)

log = logging.getLogger("odradek.cli.server_start")

BROKER_MODULE = "odradek.server.broker"


def build_config(config_path: str | None, overrides: list[str]) -> KafkaConfig:
    """The node's configuration: the file (or the embedded defaults) plus `--override` items."""
    try:
        override_props = dict(parse_override(item) for item in overrides)
        if config_path is None:
            return embedded_default_config(overrides=override_props)
        return KafkaConfig.from_file(config_path, override_props)
    except ConfigError as exc:
        raise ToolError(str(exc)) from exc


def may_auto_format(config: KafkaConfig) -> bool:
    """Only a combined node that is the single voter of its quorum can safely invent a cluster
    id; a node of a larger quorum must share a cluster id formatted by the operator."""
    return (config.is_combined and set(config.quorum_voters) == {config.node_id}
            and not config.quorum_bootstrap_servers)


def _not_formatted(config: KafkaConfig) -> ToolError:
    return ToolError(f"No `meta.properties` found in {config.metadata_log_dir} (have you run "
                     "`odradek storage format` to format the directory?)")


def prepare_storage(config: KafkaConfig, out: TextIO) -> str:
    """Checks the log directories' meta.properties before startup and returns the cluster id.

    Unformatted storage is formatted when `may_auto_format` allows it (printing Kafka's
    `Formatting ...` lines and the new cluster id), otherwise it is an error. Empty data
    directories next to a formatted metadata directory get meta.properties copied from it, as
    Kafka does at startup.
    """
    ensemble = load_ensemble(log_directories(config))
    formatted = {directory: meta for directory, meta in ensemble.items() if meta is not None}
    if not formatted:
        if not may_auto_format(config):
            raise _not_formatted(config)
        cluster_id = random_uuid()
        format_directories(config, cluster_id, out)
        print(f"Formatted new storage with cluster id {cluster_id}", file=out)
        return cluster_id
    metadata_dir_meta = ensemble.get(config.metadata_log_dir)
    if metadata_dir_meta is None:
        raise _not_formatted(config)
    verify_ensemble(ensemble, None, config.node_id)  # KRaft format, cluster.id present, node id
    cluster_id = metadata_dir_meta["cluster.id"]
    verify_ensemble(ensemble, cluster_id, config.node_id)
    metas = list(formatted.values())
    taken_ids = {meta["directory.id"] for meta in metas if "directory.id" in meta}
    for directory, meta in ensemble.items():
        if meta is None:
            log.info("Writing meta.properties of cluster %s to the new log directory %s",
                     cluster_id, directory)
            write_directory(directory, cluster_id, config.node_id, taken_ids)
    return cluster_id


def run_broker(config: KafkaConfig) -> int:
    """Runs the node until it stops; the broker module is imported only now."""
    try:
        broker = importlib.import_module(BROKER_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != BROKER_MODULE:
            raise
        raise ToolError(f"The broker ({BROKER_MODULE}) is not available in this build.") from exc
    return broker.run(config)


def _build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(
        prog="odradek server-start",
        description="Start an Odradek node (kafka-server-start.sh). Without CONFIG, a single "
                    "combined broker+controller on localhost:9092 with data in ./odradek-data.")
    parser.add_argument("config", nargs="?", metavar="CONFIG",
                        help="server.properties file (default: the embedded single-node config)")
    parser.add_argument("--override", action="append", default=[], metavar="property=value",
                        help="Optional property that overrides the value set in CONFIG "
                             "(repeatable).")
    parser.add_argument("--log4j", metavar="FILE",
                        help="log4j-style properties file configuring the logs (as "
                             "KAFKA_LOG4J_OPTS=-Dlog4j.configuration=file:FILE), e.g. the "
                             "request log kafka.request.logger.")
    parser.add_argument("--version", action="store_true", help="Print the version and exit.")
    return parser


def _run(argv: list[str]) -> int:
    args = _build_parser().parse_args(argv)
    if args.version:
        print(__version__)
        return 0
    log4j_file = args.log4j or log4j.config_path_from_env()
    if log4j_file is not None:
        try:
            log4j.configure(log4j_file)
        except (OSError, ValueError, KeyError) as exc:
            raise ToolError(f"Cannot apply the log4j configuration {log4j_file}: {exc}") from exc
    config = build_config(args.config, args.override)
    prepare_storage(config, sys.stdout)
    sys.stdout.flush()
    return run_broker(config)


def main(argv: list[str] | None = None) -> int:
    configure_logging(logging.INFO, sys.stdout)
    return run_tool(_run, sys.argv[1:] if argv is None else argv)
