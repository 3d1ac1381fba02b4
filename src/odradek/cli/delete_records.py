"""`odradek delete-records`: Kafka's kafka-delete-records.sh (DeleteRecordsCommand).

``--offset-json-file`` holds Kafka's format::

    {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}

(offset -1 means the high watermark). The output is Kafka's: ``Executing records delete
operation``, ``Records delete operation completed:``, then ``partition: foo-1
low_watermark: 1`` (tab-separated) or ``partition: foo-1  error: <exception>`` per partition,
sorted by topic and partition.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    admin_props,
    java_error,
    read_text_file,
    run,
)
from odradek.client import AdminClient, KafkaConfigError, KafkaError, TopicPartition

OPTIONS = [
    Option("bootstrap-server", "REQUIRED: The server to connect to.",
           "server(s) to use for bootstrapping"),
    Option("command-config", "A property file containing configs to be passed to Admin "
           "Client.", "command config property file path"),
    Option("offset-json-file", "REQUIRED: The JSON file with offset per partition. The format "
           "to use is:\n{\"partitions\":\n  [{\"topic\": \"foo\", \"partition\": 1, \"offset\": "
           "1}],\n \"version\":1\n}", "Offset json file path"),
]
PARSER = OptionParser(OPTIONS, "This tool helps to delete records of the given partitions down "
                               "to the specified offset.")


class AdminOperationError(Exception):
    """Kafka's AdminOperationException / AdminCommandFailedException."""

    def __init__(self, message: str, java_class: str) -> None:
        super().__init__(message)
        self.java_class = java_class


def _admin_error(message: str) -> AdminOperationError:
    return AdminOperationError(message, "org.apache.kafka.server.common.AdminOperationException")


def _field(entry: dict[str, Any], name: str, kind: type) -> Any:
    if name not in entry:
        raise _admin_error(f"No such field exists: `{name}`")
    value = entry[name]
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise _admin_error(f"Failed to decode {name}: {value!r} is not a number")
    if kind is str and not isinstance(value, str):
        raise _admin_error(f"Failed to decode {name}: {value!r} is not a string")
    return value


def parse_offset_json(text: str) -> list[tuple[TopicPartition, int]]:
    """(partition, offset) pairs in file order, duplicates kept."""
    try:
        document = json.loads(text)
    except ValueError:
        raise _admin_error("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise _admin_error("The input string is not a valid JSON object")
    version = document.get("version", 1)
    if version != 1:
        raise _admin_error(f"Not supported version field value {version}")
    partitions = document.get("partitions")
    if partitions is None:
        raise _admin_error("Missing partitions field")
    if not isinstance(partitions, list):
        raise _admin_error("Failed to decode partitions: not an array")
    return [(TopicPartition(_field(p, "topic", str), _field(p, "partition", int)),
             _field(p, "offset", int)) for p in partitions]


async def delete(options: ParsedOptions, out: Any) -> None:
    entries = parse_offset_json(read_text_file(options.value("offset-json-file")))
    seen: set[TopicPartition] = set()
    duplicates: list[TopicPartition] = []
    for tp, _offset in entries:
        if tp in seen and tp not in duplicates:
            duplicates.append(tp)
        seen.add(tp)
    if duplicates:
        raise AdminOperationError(
            "Offset json file contains duplicate topic partitions: "
            + ",".join(str(tp) for tp in duplicates),
            "org.apache.kafka.server.common.AdminCommandFailedException")
    wanted = dict(entries)
    async with AdminClient(admin_props(options, options.value("bootstrap-server"))) as admin:
        print("Executing records delete operation", file=out)
        results = await admin.delete_records(wanted, raise_errors=False)
        print("Records delete operation completed:", file=out)
    for tp in sorted(results):
        result = results[tp]
        if isinstance(result, KafkaError):
            print(f"partition: {tp}\terror: {java_error(result)}", file=out)
        else:
            print(f"partition: {tp}\tlow_watermark: {result.low_watermark}", file=out)


def execute(options: ParsedOptions) -> int:
    PARSER.require(options, "bootstrap-server", "offset-json-file")
    try:
        asyncio.run(delete(options, sys.stdout))
    except AdminOperationError as exc:
        print(f'Exception in thread "main" {exc.java_class}: {exc}', file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f'Exception in thread "main" java.nio.file.NoSuchFileException: {exc}',
              file=sys.stderr)
        return 1
    except (KafkaError, KafkaConfigError) as exc:
        print(f'Exception in thread "main" {exc}', file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
