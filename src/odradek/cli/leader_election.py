"""`odradek leader-election`: Kafka's kafka-leader-election.sh (LeaderElectionCommand, 3.8).

    odradek leader-election --bootstrap-server HOST:PORT --election-type preferred|unclean
        (--all-topic-partitions | --topic T --partition P | --path-to-json-file F)
        [--admin.config FILE]

sends one ElectLeaders request (any broker forwards it to the active controller) and prints, as
Kafka does, on stdout::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: The preferred leader is not available.

each line only when it has partitions (in the order of Kafka's HashSets), so an
``--all-topic-partitions`` run with nothing to elect prints nothing and exits 0. When some
partition failed, the tool ends with ``N replica(s) could not be elected`` and exit code 1.

Failures are reported the way Kafka's ``mainNoExit`` reports the exception that ends the tool:
its message, then the head of its stack trace (``<class>: <message>``), on stderr; exit code 1.
That holds for argument problems too (``Missing required option(s): election-type``, ``One and
only one of the following options is required: topic, all-topic-partitions,
path-to-json-file``), except that no arguments or ``--help`` print the usage (exit 1).
``--election-type`` and ``--partition`` are converted when the tool reads them, after the
checks, as joptsimple does: ``Cannot parse argument 'x' of option election-type``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.kraft_client import KraftClient
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    UsageError,
    java_error,
)
from odradek.client.cluster import RetryState
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError
from odradek.client.retry import Deadline
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.java import java_hashmap_order, topic_partition_hashcode

ELECT_LEADERS = 43
#: Kafka's ElectionType, by wire value.
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
#: LeaderElectionCommand's own timeouts (it overrides the admin config's).
DEFAULT_API_TIMEOUT_MS = 30_000
REQUEST_TIMEOUT_MS = 15_000

ADMIN_COMMAND_FAILED = "org.apache.kafka.server.common.AdminCommandFailedException"
ADMIN_OPERATION = "org.apache.kafka.server.common.AdminOperationException"
RUNTIME_EXCEPTION = "java.lang.RuntimeException"
JSON_MAPPING = "com.fasterxml.jackson.databind.JsonMappingException"

OPTIONS = [
    Option("bootstrap-server", "A hostname and port for the broker to connect to, in the form "
           "host:port. Multiple comma separated URLs can be given. REQUIRED.", "host:port"),
    Option("admin.config", "Configuration properties files to pass to the admin client",
           "config file"),
    Option("path-to-json-file", "The JSON file with the list  of partition for which leader "
           "elections should be performed. This is an example format. \n{\"partitions\":\n"
           "\t[{\"topic\": \"foo\", \"partition\": 1},\n\t {\"topic\": \"foobar\", "
           "\"partition\": 2}]\n}\nNot allowed if --all-topic-partitions or --topic flags are "
           "specified.", "Path to JSON file"),
    Option("topic", "Name of topic for which to perform an election. Not allowed if "
           "--path-to-json-file or --all-topic-partitions is specified.", "topic name"),
    # Converted when read (after the checks), like joptsimple's typed options.
    Option("partition", "Partition id for which to perform an election. REQUIRED if --topic is "
           "specified.", "partition id", type_name="Integer"),
    Option("all-topic-partitions", "Perform election on all of the eligible topic partitions "
           "based on the type of election (see the --election-type flag). Not allowed if "
           "--topic or --path-to-json-file is specified."),
    Option("election-type", "Type of election to attempt. Possible values are \"preferred\" "
           "for preferred leader election or \"unclean\" for unclean leader election. If "
           "preferred election is selection, the election is only performed if the current "
           "leader is not the preferred leader for the topic partition. If unclean election is "
           "selected, the election is only performed if there are no leader for the topic "
           "partition. REQUIRED.", "election type", type_name="[PREFERRED,UNCLEAN]"),
]
DESCRIPTION = ("This tool attempts to elect a new leader for a set of topic partitions. The type "
               "of elections supported are preferred replicas and unclean replicas.")
PARSER = OptionParser(OPTIONS, DESCRIPTION)
#: The options of which exactly one says which partitions to elect, in Kafka's order.
SELECTORS = ("topic", "all-topic-partitions", "path-to-json-file")

TopicPartition = tuple[str, int]


class JavaFailure(Exception):
    """The Java exception that ends Kafka's tool: its class and message."""

    def __init__(self, java_class: str, message: str) -> None:
        super().__init__(message)
        self.java_class = java_class
        self.message = message


def _wrapped(java_class: str, message: str) -> JavaFailure:
    """A checked exception Kafka rethrows as ``new RuntimeException(e)`` (whose message is the
    cause's ``toString()``)."""
    return JavaFailure(RUNTIME_EXCEPTION, f"{java_class}: {message}")


def _java_error_text(error: KafkaError) -> str:
    """The Java exception Kafka's admin client makes of an error code, as Throwable.toString
    prints it (the authorization codes' classes are not named after the codes)."""
    authorization = {ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
                     ErrorCode.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException"}
    if error.code in authorization:
        return f"org.apache.kafka.common.errors.{authorization[error.code]}: {error.message}"
    return java_error(error)


def _tp_text(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _hash_order(tps: Sequence[TopicPartition]) -> list[TopicPartition]:
    """The iteration order of a Java HashSet/HashMap of these TopicPartitions."""
    return java_hashmap_order(tps, topic_partition_hashcode)


# ------------------------------------------------------------------------------------------
# arguments


def _joptsimple_class(message: str) -> str:
    """The joptsimple exception behind one of tool_options' parse messages."""
    if message.endswith(("is not a recognized option", "is ambiguous")):
        return "joptsimple.UnrecognizedOptionException"
    if message.endswith("requires an argument"):
        return "joptsimple.OptionMissingRequiredArgumentException"
    if message.endswith("does not take an argument"):
        return "joptsimple.UnexpectedArgumentException"
    return "joptsimple.OptionException"


def _single(options: ParsedOptions, name: str) -> Any:
    """joptsimple's valueOf: the option's one value (None when absent)."""
    values = options.values.get(name, [])
    if len(values) > 1:
        raise JavaFailure("joptsimple.MultipleArgumentsForOptionException",
                          f"Found multiple arguments for option {name}, but you asked for "
                          f"only one")
    return values[0] if values else None


def _conversion_error(name: str, text: str) -> JavaFailure:
    return JavaFailure("joptsimple.OptionArgumentConversionException",
                       f"Cannot parse argument '{text}' of option {name}")


def validate(options: ParsedOptions) -> None:
    """Kafka's LeaderElectionCommandOptions.validate."""
    missing = [name for name in ("bootstrap-server", "election-type") if not options.has(name)]
    if missing:
        raise JavaFailure(ADMIN_COMMAND_FAILED,
                          f"Missing required option(s): {', '.join(missing)}")
    if sum(options.has(name) for name in SELECTORS) != 1:
        raise JavaFailure(ADMIN_COMMAND_FAILED, "One and only one of the following options is "
                                                f"required: {', '.join(SELECTORS)}")
    if options.has("topic") and not options.has("partition"):
        raise JavaFailure(ADMIN_COMMAND_FAILED, "Missing required option(s): partition")
    if not options.has("topic") and options.has("partition"):
        raise JavaFailure(ADMIN_COMMAND_FAILED, "Option partition is only allowed if topic is used")


def election_type_of(options: ParsedOptions) -> str:
    """The election type's name; joptsimple's EnumConverter ignores case."""
    text = _single(options, "election-type")
    name = text.upper()
    if name not in ELECTION_TYPES:
        raise _conversion_error("election-type", text)
    return name


def partition_of(options: ParsedOptions) -> int | None:
    text = _single(options, "partition")
    if text is None:
        return None
    # Integer.valueOf: an optional sign and digits, nothing else (no blanks, no '_').
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(1 << 31) <= int(text) < (1 << 31):
        raise _conversion_error("partition", text)
    return int(text)


# ------------------------------------------------------------------------------------------
# the JSON file


def _jackson_text(value: Any) -> str:
    """A JSON value as Jackson's JsonNode.toString prints it (compact)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _mapping_error(message: str) -> JavaFailure:
    # Kafka wraps the JsonMappingException in a RuntimeException.
    return _wrapped(JSON_MAPPING, message)


def _decode_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and \
            -(1 << 31) <= value < (1 << 31):
        return value
    raise _mapping_error(f"Expected `Integer` value, received {_jackson_text(value)}")


def _decode_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _mapping_error(f"Expected `String` value, received {_jackson_text(value)}")


def _field(entry: dict[str, Any], name: str) -> Any:
    if name not in entry:
        raise _mapping_error(f"No such field exists: `{name}`")
    return entry[name]


def parse_election_json(text: str) -> list[TopicPartition]:
    """Kafka's parseReplicaElectionData: the partitions of ``{"partitions": [{"topic": "t",
    "partition": 0}, ...]}`` (duplicates refused), in the order of Kafka's HashSet."""
    stripped = text.lstrip()
    if not text:
        raise JavaFailure(ADMIN_OPERATION, "Replica election data is empty")
    if not stripped:
        # Jackson reads blank input as a missing node, which prints as nothing.
        raise _mapping_error("Expected JSON object, received ")
    try:
        # Jackson reads the first value and ignores what follows it.
        document, _end = json.JSONDecoder().raw_decode(stripped)
    except ValueError:
        raise JavaFailure(ADMIN_OPERATION, "Replica election data is empty") from None
    if not isinstance(document, dict):
        raise _mapping_error(f"Expected JSON object, received {_jackson_text(document)}")
    if "partitions" not in document:
        raise JavaFailure(ADMIN_OPERATION, 'Replica election data is missing "partitions" field')
    entries = document["partitions"]
    if not isinstance(entries, list):
        raise _mapping_error(f"Expected JSON array, received {_jackson_text(entries)}")
    partitions: list[TopicPartition] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise _mapping_error(f"Expected JSON object, received {_jackson_text(entry)}")
        topic = _decode_str(_field(entry, "topic"))
        partitions.append((topic, _decode_int(_field(entry, "partition"))))
    duplicates = _hash_order(list(dict.fromkeys(
        tp for tp in partitions if partitions.count(tp) > 1)))
    if duplicates:
        shown = ", ".join(_tp_text(tp) for tp in duplicates)
        raise JavaFailure(ADMIN_OPERATION,
                          f"Replica election data contains duplicate partitions: [{shown}]")
    return _hash_order(partitions)


def read_election_json(path: str) -> list[TopicPartition]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _wrapped("java.nio.file.NoSuchFileException", path) from None
    except OSError as exc:
        raise _wrapped("java.io.IOException", f"{path}: {exc.strerror}") from None
    return parse_election_json(text)


def load_admin_config(path: str) -> dict[str, str]:
    """Kafka's Utils.loadProps (Files.newInputStream: a missing file is NoSuchFileException)."""
    from odradek.config import ConfigError, load_properties

    if not Path(path).exists():
        raise JavaFailure("java.nio.file.NoSuchFileException", path)
    try:
        return load_properties(path)
    except ConfigError as exc:
        raise JavaFailure("java.io.IOException", str(exc)) from None


# ------------------------------------------------------------------------------------------
# the request


@dataclass(frozen=True)
class ElectionOutcome:
    """Per partition: None when elected, else the KafkaError (ELECTION_NOT_NEEDED included)."""

    results: dict[TopicPartition, KafkaError | None]


def _request(election_type: str, partitions: list[TopicPartition] | None, version: int,
             timeout_ms: int) -> m.ElectLeadersRequest:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions or ():
        topics.setdefault(topic, []).append(partition)
    T = m.ElectLeadersRequest.TopicPartitions
    return m.ElectLeadersRequest(
        election_type=ELECTION_TYPES[election_type],
        topic_partitions=(None if partitions is None else
                          [T(topic=topic, partitions=ids) for topic, ids in topics.items()]),
        timeout_ms=timeout_ms)


async def elect_leaders(client: KraftClient, election_type: str,
                        partitions: list[TopicPartition] | None) -> ElectionOutcome:
    """Kafka's Admin.electLeaders: one ElectLeaders to any broker (it forwards the request to
    the active controller), retried while no controller can answer, within the call's
    ``default.api.timeout.ms``."""
    cluster = client.cluster
    deadline = cluster.deadline()
    state = RetryState(cluster, deadline, "electLeaders")
    while True:
        try:
            return await _elect_once(client, election_type, partitions, deadline)
        except KafkaError as error:
            if not (isinstance(error, KafkaConnectionError)
                    or error.code in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT)):
                raise
            await state.backoff(error)


async def _elect_once(client: KraftClient, election_type: str,
                      partitions: list[TopicPartition] | None,
                      deadline: Deadline) -> ElectionOutcome:
    connection = await client.connection(deadline.remaining_ms())
    if not connection.supports(ELECT_LEADERS):
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "The node does not support ELECT_LEADERS")
    version = connection.pick_version(ELECT_LEADERS)
    if version == 0 and election_type != "PREFERRED":
        # Version 0 has no election type: Kafka's request builder refuses to send it.
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                         "API Version 0 only supports electing the preferred replica")
    request = _request(election_type, partitions, version, int(deadline.remaining_ms()))
    response = await connection.send(request, api_version=version,
                                     timeout_ms=client.cluster.request_timeout(deadline))
    if response.error_code:
        raise KafkaError(response.error_code)
    results: dict[TopicPartition, KafkaError | None] = {}
    for topic in response.replica_election_results:
        for partition in topic.partition_result:
            results[(topic.topic, partition.partition_id)] = (
                None if partition.error_code == 0
                else KafkaError(partition.error_code, partition.error_message))
    return ElectionOutcome(results)


# ------------------------------------------------------------------------------------------
# output


def report(election_type: str, outcome: ElectionOutcome, out: Any) -> None:
    """Kafka's electLeaders output; raises the AdminCommandFailedException when some failed."""
    ordered = _hash_order(list(outcome.results))
    succeeded = _hash_order([tp for tp in ordered if outcome.results[tp] is None])
    noop = _hash_order([tp for tp in ordered if (error := outcome.results[tp]) is not None
                        and error.code == ErrorCode.ELECTION_NOT_NEEDED])
    failed = _hash_order([tp for tp in ordered if (error := outcome.results[tp]) is not None
                          and error.code != ErrorCode.ELECTION_NOT_NEEDED])
    if succeeded:
        print(f"Successfully completed leader election ({election_type}) for partitions "
              f"{', '.join(_tp_text(tp) for tp in succeeded)}", file=out)
    if noop:
        print(f"Valid replica already elected for partitions "
              f"{', '.join(_tp_text(tp) for tp in noop)}", file=out)
    if failed:
        for tp in failed:
            print(f"Error completing leader election ({election_type}) for partition: "
                  f"{_tp_text(tp)}: {_java_error_text(outcome.results[tp])}", file=out)
        raise JavaFailure(ADMIN_COMMAND_FAILED, f"{len(failed)} replica(s) could not be elected")


# ------------------------------------------------------------------------------------------
# main


def execute(options: ParsedOptions) -> int:
    validate(options)
    election_type = election_type_of(options)
    json_path = _single(options, "path-to-json-file")
    partitions = read_election_json(json_path) if json_path is not None else None
    topic = _single(options, "topic")
    partition = partition_of(options)
    if partitions is None and topic is not None and partition is not None:
        partitions = [(topic, partition)]
    # None: --all-topic-partitions (the controller picks the partitions needing an election).

    config_path = _single(options, "admin.config")
    props: dict[str, Any] = load_admin_config(config_path) if config_path is not None else {}
    props["bootstrap.servers"] = _single(options, "bootstrap-server")
    props["default.api.timeout.ms"] = str(DEFAULT_API_TIMEOUT_MS)
    props["request.timeout.ms"] = str(REQUEST_TIMEOUT_MS)

    async def run_election() -> ElectionOutcome:
        client = KraftClient(props)
        try:
            return await elect_leaders(client, election_type, partitions)
        finally:
            await client.close()

    try:
        outcome = asyncio.run(run_election())
    except KafkaTimeoutError as exc:
        message = "Timeout waiting for election results"
        print(message)
        raise JavaFailure(ADMIN_COMMAND_FAILED, message) from exc
    except KafkaError as exc:
        if exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            message = "Not authorized to perform leader election"
            print(message)
            raise JavaFailure(ADMIN_COMMAND_FAILED, message) from exc
        raise _wrapped("java.util.concurrent.ExecutionException", _java_error_text(exc)) from exc
    report(election_type, outcome, sys.stdout)
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    args = sys.argv[1:] if argv is None else argv
    try:
        try:
            options = PARSER.parse(args)
        except UsageError as exc:
            # joptsimple fails while Kafka builds its options: the exception ends the tool.
            raise JavaFailure(_joptsimple_class(str(exc)), str(exc)) from None
        if not args or options.has("help"):  # Kafka's printUsageAndExit
            print(DESCRIPTION, file=sys.stderr)
            print(PARSER.usage(), file=sys.stderr)
            return 1
        if options.has("version"):
            from odradek.cli.main import version_text

            print(version_text())
            return 0
        return execute(options)
    except JavaFailure as failure:
        # Kafka's mainNoExit: the message, then the stack trace (its first line here).
        print(failure.message, file=sys.stderr)
        print(f"{failure.java_class}: {failure.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
