"""`odradek log-dirs`: Kafka's kafka-log-dirs.sh (LogDirsCommand).

    odradek log-dirs --describe --bootstrap-server HOST:PORT [--topic-list t1,t2]
        [--broker-list 1,2] [--command-config FILE]

asks each broker (all of them by default) for its log directories (DescribeLogDirs) and prints,
as Kafka does::

    Querying brokers for log directories information
    Received log directory information from brokers 1,2,3
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":0,
      "offsetLag":0,"isFuture":false}],"error":null,"logDir":"/data"}]}],"version":1}

(the JSON on one line). Kafka builds the JSON from Java HashMaps, so keys, brokers, directories
and partitions come in HashMap order; this tool reproduces it. ``--topic-list`` keeps only those
topics' partitions. A broker id in ``--broker-list`` that the cluster does not have ends the
tool with ``ERROR: The given brokers do not exist from --broker-list: 7. Current existent
brokers: 1,2,3`` on stderr (exit 1).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    UsageError,
    admin_props,
    run,
)
from odradek.client import AdminClient, KafkaConfigError, KafkaError
from odradek.client.admin_types import LogDirDescription
from odradek.protocol.java import java_hashmap_order, topic_partition_hashcode

OPTIONS = [
    Option("bootstrap-server", "REQUIRED: the server(s) to use for bootstrapping",
           "The server(s) to use for bootstrapping"),
    Option("command-config", "Property file containing configs to be passed to Admin Client.",
           "Admin client property file"),
    Option("describe", "Describe the specified log directories on the specified brokers."),
    Option("topic-list", "The list of topics to be queried in the form \"topic1,topic2,topic3\". "
           "All topics will be queried if no topic list is specified", "Topic list",
           default=""),
    Option("broker-list", "The list of brokers to be queried in the form \"0,1,2\". All brokers "
           "in the cluster will be queried if no broker list is specified", "Broker list",
           default=""),
]
DESCRIPTION = "This tool helps to query log directory usage on the specified brokers."
PARSER = OptionParser(OPTIONS, DESCRIPTION)


class TerseError(Exception):
    """Kafka's TerseException: its message alone on stderr, exit code 1."""


def _split(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


class NumberFormatError(Exception):
    """Java's NumberFormatException from Integer.valueOf."""


def _parse_broker_id(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(1 << 31) <= int(text) < (1 << 31):
        raise NumberFormatError(f'For input string: "{text}"')
    return int(text)


def _int_hash_order(values: set[int]) -> list[int]:
    """A Java HashSet<Integer>'s iteration order (Integer.hashCode is the value)."""
    return java_hashmap_order(sorted(values), lambda v: v)


def _brokers_text(values: set[int]) -> str:
    return ",".join(str(v) for v in _int_hash_order(values))


def _java_class(error: KafkaError) -> str:
    from odradek.cli.tool_options import java_error

    return java_error(error).split(":", 1)[0]


def _ordered(mapping: dict[str, Any]) -> dict[str, Any]:
    """A Java HashMap<String, Object> as Jackson writes it: in HashMap order."""
    return {key: mapping[key] for key in java_hashmap_order(list(mapping))}


def format_as_json(descriptions: dict[int, dict[str, LogDirDescription]],
                   topics: set[str]) -> str:
    """Kafka's LogDirsCommand.formatAsJson, compact as Jackson writes it."""
    brokers = []
    for broker in _int_hash_order(set(descriptions)):
        log_dirs = []
        by_path = descriptions[broker]
        for path in java_hashmap_order(list(by_path)):
            description = by_path[path]
            replicas = {tp: info for tp, info in description.replicas.items()
                        if not topics or tp.topic in topics}
            order = java_hashmap_order([(tp.topic, tp.partition) for tp in replicas],
                                       topic_partition_hashcode)
            by_key = {(tp.topic, tp.partition): (tp, info) for tp, info in replicas.items()}
            partitions = [_ordered({"partition": f"{tp.topic}-{tp.partition}",
                                    "size": info.size, "offsetLag": info.offset_lag,
                                    "isFuture": info.is_future})
                          for tp, info in (by_key[key] for key in order)]
            error = (None if description.error is None
                     else _java_class(description.error))
            log_dirs.append(_ordered({"logDir": path, "error": error,
                                      "partitions": partitions}))
        brokers.append(_ordered({"broker": broker, "logDirs": log_dirs}))
    return json.dumps(_ordered({"version": 1, "brokers": brokers}), separators=(",", ":"),
                      ensure_ascii=False)


async def describe(options: ParsedOptions, out: Any) -> None:
    topics = set(_split(options.value("topic-list")))
    wanted = {_parse_broker_id(text) for text in _split(options.value("broker-list"))}
    props = admin_props(options, options.value("bootstrap-server"))
    props.setdefault("client.id", "log-dirs-tool")
    async with AdminClient(props) as admin:
        cluster = {node.id for node in (await admin.describe_cluster()).nodes}
        existing = (set(wanted) if wanted else set(cluster)) & cluster
        missing = wanted - cluster
        if missing:
            raise TerseError(f"ERROR: The given brokers do not exist from --broker-list: "
                             f"{_brokers_text(missing)}. Current existent brokers: "
                             f"{_brokers_text(cluster)}")
        print("Querying brokers for log directories information", file=out)
        descriptions = await admin.describe_log_dirs(sorted(existing))
    print(f"Received log directory information from brokers {_brokers_text(existing)}",
          file=out)
    print(format_as_json(descriptions, topics), file=out)  # type: ignore[arg-type]


def execute(options: ParsedOptions) -> int:
    PARSER.require(options, "bootstrap-server", "describe")
    try:
        asyncio.run(describe(options, sys.stdout))
    except TerseError as exc:
        print(exc, file=sys.stderr)
        return 1
    except NumberFormatError as exc:
        # Kafka's mainNoExit: the message, then the stack trace (its first line here).
        print(exc, file=sys.stderr)
        print(f"java.lang.NumberFormatException: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, KafkaConfigError, OSError) as exc:
        print(exc, file=sys.stderr)
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


__all__ = ["UsageError", "format_as_json", "main"]

if __name__ == "__main__":
    sys.exit(main())
