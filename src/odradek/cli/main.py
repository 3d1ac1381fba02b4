"""`odradek <tool> [args...]`: one entry point for every tool, like Kafka's bin/*.sh scripts.

`TOOLS` maps a tool name to the module implementing it; a tool module defines
`main(argv: list[str]) -> int` (argv without the tool name) and is imported only when that tool
runs, so `odradek` starts fast and a broken tool cannot break the others. Adding a tool is
writing its module and, if its name is not listed yet, adding one line here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass

from odradek import __version__

KAFKA_VERSION = "3.8"


@dataclass(frozen=True)
class Tool:
    module: str
    summary: str


TOOLS: dict[str, Tool] = {
    "server-start": Tool("odradek.cli.server_start",
                         "Start a broker/controller node (kafka-server-start.sh)."),
    "storage": Tool("odradek.cli.storage",
                    "Format and inspect log directories (kafka-storage.sh)."),
    "topics": Tool("odradek.cli.topics",
                   "Create, list, describe, alter and delete topics (kafka-topics.sh)."),
    "console-producer": Tool("odradek.cli.console_producer",
                             "Produce lines of stdin to a topic (kafka-console-producer.sh)."),
    "console-consumer": Tool("odradek.cli.console_consumer",
                             "Print a topic's records (kafka-console-consumer.sh)."),
    "consumer-groups": Tool("odradek.cli.consumer_groups",
                            "List, describe, delete groups and reset offsets "
                            "(kafka-consumer-groups.sh)."),
    "configs": Tool("odradek.cli.configs",
                    "Describe and alter topic, broker and client configs (kafka-configs.sh)."),
    "acls": Tool("odradek.cli.acls",
                 "Add, remove and list ACLs (kafka-acls.sh)."),
    "get-offsets": Tool("odradek.cli.get_offsets",
                        "Print partition offsets for a time or position (kafka-get-offsets.sh)."),
    "delete-records": Tool("odradek.cli.delete_records",
                           "Delete records up to an offset (kafka-delete-records.sh)."),
    "dump-log": Tool("odradek.cli.dump_log",
                     "Print the contents of log segment files (kafka-dump-log.sh)."),
    "metadata-quorum": Tool("odradek.cli.metadata_quorum",
                            "Describe the KRaft metadata quorum (kafka-metadata-quorum.sh)."),
    "features": Tool("odradek.cli.features",
                     "Describe and update feature flags (kafka-features.sh)."),
    "leader-election": Tool("odradek.cli.leader_election",
                            "Elect preferred or unclean partition leaders "
                            "(kafka-leader-election.sh)."),
    "reassign-partitions": Tool("odradek.cli.reassign_partitions",
                                "Move partitions between brokers: generate, execute, verify, "
                                "cancel and list reassignments (kafka-reassign-partitions.sh)."),
    "log-dirs": Tool("odradek.cli.log_dirs",
                     "Describe the brokers' log directories (kafka-log-dirs.sh)."),
    "metadata-shell": Tool("odradek.cli.metadata_shell",
                           "Browse a cluster metadata log or snapshot "
                           "(kafka-metadata-shell.sh)."),
    "transactions": Tool("odradek.cli.transactions",
                         "List, describe and abort transactions; find hanging ones "
                         "(kafka-transactions.sh)."),
    "cluster-start": Tool("odradek.cli.cluster_start",
                          "Format and run a local N-node cluster in the foreground."),
    "producer-perf-test": Tool("odradek.cli.producer_perf_test",
                               "Measure producer throughput (kafka-producer-perf-test.sh)."),
    "consumer-perf-test": Tool("odradek.cli.consumer_perf_test",
                               "Measure consumer throughput (kafka-consumer-perf-test.sh)."),
    "connect-standalone": Tool("odradek.cli.connect_standalone",
                               "Run connectors in one process (connect-standalone.sh)."),
    "console": Tool("odradek.cli.web_console",
                    "Serve the web console for a cluster (overview, topics, messages, "
                    "groups)."),
}


def available_tools() -> dict[str, Tool]:
    """The registered tools whose module exists in this build (found without importing it)."""
    return {name: tool for name, tool in TOOLS.items()
            if importlib.util.find_spec(tool.module) is not None}


def version_text() -> str:
    return f"odradek {__version__} (Kafka {KAFKA_VERSION} protocol)"


def usage() -> str:
    tools = available_tools()
    width = max((len(name) for name in tools), default=0) + 2
    lines = [
        "usage: odradek <tool> [args...]",
        "       odradek --help | --version",
        "",
        "Odradek: a Kafka-compatible event streaming platform. "
        "Run a tool without arguments for its usage.",
        "",
        "tools:",
        *(f"  {name:<{width}}{tool.summary}" for name, tool in tools.items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(usage(), file=sys.stderr)
        return 1
    name, tool_args = args[0], args[1:]
    if name in ("-h", "--help", "help"):
        print(usage())
        return 0
    if name in ("--version", "version"):
        print(version_text())
        return 0
    tool = TOOLS.get(name)
    if tool is None:
        print(f"odradek: unknown tool '{name}'\n", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 1
    try:
        module = importlib.import_module(tool.module)
    except ModuleNotFoundError as exc:
        if exc.name != tool.module:
            raise
        print(f"odradek: the '{name}' tool is not available in this build yet.", file=sys.stderr)
        return 1
    return module.main(tool_args)


if __name__ == "__main__":
    sys.exit(main())
