"""`odradek topics`: Kafka's kafka-topics.sh (create, list, describe, alter, delete topics).

Options, checks, output and error messages follow Kafka 3.8's TopicCommand, so scripts written
for kafka-topics.sh work unchanged:

* results go to stdout (``Created topic t.``, the topic list, descriptions); errors print
  ``Error while executing topic command : <message>`` on stdout and exit 1;
* usage problems print the message and the option table on stderr and exit 1;
* ``--describe`` prints topics and configs in the order Kafka's Java admin client yields them
  (the iteration order of Java HashMaps, reproduced by `java_hashmap_order`), and the ELR columns
  Kafka 3.7+ prints.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import Option, OptionParser, ParsedOptions, UsageError, admin_props
from odradek.client import (
    AdminClient,
    ConfigEntry,
    ConfigResource,
    KafkaError,
    NewPartitions,
    NewTopic,
    TopicDescription,
    TopicPartitionInfo,
)
from odradek.client.admin import DEFAULT_PARTITION_LIMIT
from odradek.protocol.errors import ErrorCode
from odradek.protocol.ids import kafka_str_to_uuid, uuid_to_kafka_str
from odradek.protocol.java import java_hashmap_order
from odradek.protocol.messages import ZERO_UUID

log = logging.getLogger("odradek.cli.topics")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
SHORT_MAX = 32767

_CONFIGS_TOOL_HINT = " (the kafka-configs CLI supports altering topic configs with a " \
                     "--bootstrap-server option)"


class CommandError(Exception):
    """A failure reported as ``Error while executing topic command : <message>``."""


class HelpOrVersion(Exception):
    """--help or --version: print and exit 0."""

    def __init__(self, text: str, stream: Any) -> None:
        super().__init__(text)
        self.text = text
        self.stream = stream


# ------------------------------------------------------------------------------------------
# options (joptsimple style, parsed by tool_options)


def _config_names() -> list[str]:
    from odradek.config.topic import TOPIC_CONFIGS

    return sorted(TOPIC_CONFIGS)


OPTIONS: list[Option] = [
    Option("alter", "Alter the number of partitions and the replica assignment of a topic. "
           "Topic configs are altered with the configs tool" + _CONFIGS_TOOL_HINT + "."),
    Option("at-min-isr-partitions", "With --describe, only show partitions whose ISR size "
           "equals the configured min.insync.replicas."),
    Option("bootstrap-server", "REQUIRED: The Kafka server to connect to.",
           "server to connect to"),
    Option("command-config", "Property file with configs for the admin client.",
           "command config property file"),
    Option("config", "A topic config override for the topic being created, as name=value. "
           "Valid names:\n{configs}\nOnly with --create" + _CONFIGS_TOOL_HINT + ".",
           "name=value"),
    Option("create", "Create a new topic."),
    Option("delete", "Delete a topic."),
    Option("describe", "List details for the given topics."),
    Option("exclude-internal", "Leave out internal topics (__consumer_offsets, "
           "__transaction_state) when listing or describing; they are shown by default."),
    Option("if-exists", "With --alter, --delete or --describe, only act if the topic "
           "exists."),
    Option("if-not-exists", "With --create, do not fail when the topic already exists."),
    Option("list", "List all available topics."),
    Option("partition-size-limit-per-response", "The most partitions one "
           "DescribeTopicPartitions response may hold.",
           "maximum number of partitions per response", int),
    Option("partitions", "The number of partitions of the topic being created or altered "
           "(WARNING: adding partitions to a topic with keyed records changes which "
           "partition a key maps to). The cluster default when not given with --create.",
           "# of partitions", int),
    Option("replica-assignment", "Manual partition-to-broker assignments for the topic "
           "being created or altered.",
           "broker_id_for_part1_replica1 : broker_id_for_part1_replica2 , "
           "broker_id_for_part2_replica1 : broker_id_for_part2_replica2 , ..."),
    Option("replication-factor", "The replication factor of each partition of the topic "
           "being created. The cluster default when not given.",
           "replication factor", int),
    Option("topic", "The topic to create, alter, describe or delete. Except with --create "
           "it is a regular expression; escape regex symbols with '\\', e.g. "
           "\"test\\.topic\".", "topic"),
    Option("topic-id", "The topic id to describe.", "topic-id"),
    Option("topics-with-overrides", "With --describe, only show topics that have "
           "overridden configs."),
    Option("unavailable-partitions", "With --describe, only show partitions whose leader "
           "is not available."),
    Option("under-min-isr-partitions", "With --describe, only show partitions whose ISR "
           "is smaller than the configured min.insync.replicas."),
    Option("under-replicated-partitions", "With --describe, only show under-replicated "
           "partitions."),
]
OPTION_BY_NAME = {spec.name: spec for spec in OPTIONS}
ACTIONS = ("create", "list", "alter", "describe", "delete")
REPORT_OPTIONS = ("under-replicated-partitions", "under-min-isr-partitions",
                  "at-min-isr-partitions", "unavailable-partitions")


@cache
def _parser() -> OptionParser:
    configs = "\n".join(f"\t{name}" for name in _config_names())
    options = [replace(o, help=o.help.format(configs=configs)) for o in OPTIONS]
    return OptionParser(options, "This tool helps to create, delete, describe, or change a topic.",
                        version_help="Display the version.")


def parse_options(argv: Sequence[str]) -> ParsedOptions:
    """Kafka's TopicCommand reports a joptsimple error like a failed command."""
    try:
        return _parser().parse(argv)
    except UsageError as exc:
        raise CommandError(str(exc)) from None


def usage_text() -> str:
    """The option table in joptsimple's layout."""
    return _parser().usage()


def check_args(options: ParsedOptions, argv: Sequence[str]) -> None:
    """Kafka's TopicCommandOptions.checkArgs: raise UsageError/CommandError/HelpOrVersion."""
    if not argv:
        raise UsageError("Create, delete, describe, or change a topic.")
    if options.has("help"):
        raise HelpOrVersion(f"{_parser().description}\n{usage_text()}", sys.stdout)
    if options.has("version"):
        from odradek.cli.main import version_text

        raise HelpOrVersion(version_text(), sys.stdout)
    if sum(options.has(action) for action in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, "
                         "--create, --alter or --delete")
    if not options.has("bootstrap-server"):
        raise CommandError("--bootstrap-server must be specified")
    if options.has("describe") and options.has("if-exists"):
        if not options.has("topic") and not options.has("topic-id"):
            raise UsageError("--topic or --topic-id is required to describe a topic")
        if options.has("topic") and options.has("topic-id"):
            print("Only topic id will be used when both --topic and --topic-id are specified "
                  "and topicId is not Uuid.ZERO_UUID")
    if not options.has("list") and not options.has("describe") and not options.has("topic"):
        raise UsageError(f'Missing required argument "{OPTION_BY_NAME["topic"]}"')
    if options.has("alter"):
        if options.has("config"):
            raise UsageError('Option combination "[bootstrap-server, config]" can\'t be used '
                             f'with option "[alter]"{_CONFIGS_TOOL_HINT}')
        if not options.has("partitions"):
            raise UsageError(f'Missing required argument "{OPTION_BY_NAME["partitions"]}"')
    _check_invalid_combinations(options)


def _others(*allowed: str, extra: Iterable[str] = ()) -> list[str]:
    """The actions other than `allowed`, plus `extra` options."""
    return [action for action in ("alter", "create", "describe", "list", "delete")
            if action not in allowed] + list(extra)


_INVALID_WITH: list[tuple[str, list[str]]] = [
    ("config", _others("alter", "create")),
    ("partitions", _others("alter", "create")),
    ("replication-factor", _others("create")),
    ("replica-assignment", _others("alter", "create")),
    *((report, _others("describe", extra=["topics-with-overrides"])) for report in REPORT_OPTIONS),
    ("topics-with-overrides", _others("describe", extra=REPORT_OPTIONS)),
    ("if-exists", _others("alter", "delete", "describe")),
    ("if-not-exists", _others("create")),
    ("exclude-internal", _others("list", "describe")),
]


def _check_invalid_combinations(options: ParsedOptions) -> None:
    def check(used: str, invalid: Iterable[str]) -> None:
        if not options.has(used):
            return
        for other in invalid:
            if options.has(other):
                raise UsageError(f'Option "{OPTION_BY_NAME[used]}" can\'t be used with option '
                                 f'"{OPTION_BY_NAME[other]}"')

    for used, invalid in _INVALID_WITH:
        check(used, invalid)
    if options.has("create"):
        check("replica-assignment", ["partitions", "replication-factor"])


# ------------------------------------------------------------------------------------------
# Java's iteration order


def admin_client_topic_order(names: Sequence[str]) -> list[str]:
    """The order of Admin.describeTopics(names).allTopicNames(): a HashMap sized for the
    names, copied, then collected into another HashMap of that size."""
    order = java_hashmap_order(names, initial_capacity=len(names))
    order = java_hashmap_order(order, copy=True)
    return java_hashmap_order(order, initial_capacity=len(names))


# ------------------------------------------------------------------------------------------
# the commands


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def has_collision_chars(topic: str) -> bool:
    return "." in topic or "_" in topic


def _optional(text: str | None) -> str:
    """How Kafka 3.8 formats the topic in 'does not exist' (a Java Optional's toString)."""
    return f"Optional[{text}]" if text is not None else "Optional.empty"


class IncludeList:
    """Kafka's TopicFilter.IncludeList: a regex (commas mean '|') matched against whole names."""

    def __init__(self, raw: str) -> None:
        regex = raw.strip().replace(",", "|").replace(" ", "")
        regex = re.sub(r"""^["']+""", "", regex)
        regex = re.sub(r"""["']+$""", "", regex)
        try:
            self.pattern = re.compile(regex)
        except re.error:
            raise CommandError(f"{regex} is an invalid regex.") from None

    def allows(self, topic: str, exclude_internal: bool) -> bool:
        return bool(self.pattern.fullmatch(topic)) and not (exclude_internal and is_internal(topic))


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``0:1,1:2`` -> {0: [0, 1], 1: [1, 2]} with Kafka's checks."""
    assignment: dict[int, list[int]] = {}
    for index, partition in enumerate(text.split(",")):
        try:
            brokers = [int(broker.strip()) for broker in partition.split(":")]
        except ValueError as exc:
            raise CommandError(f'For input string: "{_bad_int(partition)}"') from exc
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise CommandError("Partition replica lists may not contain duplicate entries: "
                               + ",".join(map(str, duplicates)))
        assignment[index] = brokers
        if len(brokers) != len(assignment[0]):
            raise CommandError(f"Partition {index} has different replication factor: "
                               f"[{', '.join(map(str, brokers))}]")
    return assignment


def _bad_int(partition: str) -> str:
    for part in partition.split(":"):
        try:
            int(part.strip())
        except ValueError:
            return part.strip()
    return partition


def parse_topic_configs(items: Iterable[str]) -> dict[str, str]:
    pairs = [re.split(r"\s*=\s*", item) for item in items]
    # Java's split drops trailing empty strings: "a=" is one element.
    pairs = [pair[:-1] if len(pair) > 1 and pair[-1] == "" else pair for pair in pairs]
    if not all(len(pair) == 2 for pair in pairs):
        raise CommandError('requirement failed: Invalid topic config: all configs to be added '
                           'must be in the format "key=val".')
    configs = {key.strip(): value.strip() for key, value in pairs}
    from odradek.config.topic import validate_topic_props

    try:
        validate_topic_props(configs)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return configs


class TopicService:
    """The commands, on an `AdminClient`, printing to `out`."""

    def __init__(self, admin: AdminClient, out: Any) -> None:
        self.admin = admin
        self.out = out

    def print(self, text: str = "") -> None:
        print(text, file=self.out)

    async def topics(self, regex: str | None, exclude_internal: bool) -> list[str]:
        listings = await self.admin.list_topics(include_internal=not exclude_internal)
        names = sorted(listings)
        if regex is not None:
            include = IncludeList(regex)
            return [name for name in names if include.allows(name, exclude_internal)]
        return [name for name in names if not (exclude_internal and is_internal(name))]

    @staticmethod
    def ensure_topic_exists(found: list[str], requested: str | None, required: bool) -> None:
        if requested and required and not found:
            raise CommandError(f"Topic '{_optional(requested)}' does not exist as expected")

    async def create(self, options: ParsedOptions) -> None:
        name = options.value("topic")
        if has_collision_chars(name):
            self.print("WARNING: Due to limitations in metric names, topics with a period ('.') "
                       "or underscore ('_') could collide. To avoid issues it is best to use "
                       "either, but not both.")
        partitions = options.value("partitions")
        replication_factor = options.value("replication-factor")
        assignment_text = options.value("replica-assignment")
        assignment = parse_replica_assignment(assignment_text) if assignment_text else None
        configs = parse_topic_configs(options.all("config"))
        if replication_factor is not None and not 1 <= replication_factor <= SHORT_MAX:
            raise CommandError(f"The replication factor must be between 1 and {SHORT_MAX} "
                               "inclusive")
        if partitions is not None and partitions < 1:
            raise CommandError("The partitions must be greater than 0")
        topic = NewTopic(
            name,
            num_partitions=-1 if partitions is None else partitions,
            replication_factor=-1 if replication_factor is None else replication_factor,
            replica_assignment=assignment,
            configs=configs,
        )
        try:
            await self.admin.create_topics([topic])
        except KafkaError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS and options.has("if-not-exists"):
                return
            raise
        self.print(f"Created topic {name}.")

    async def list(self, options: ParsedOptions) -> None:
        self.print("\n".join(await self.topics(options.value("topic"),
                                               options.has("exclude-internal"))))

    async def alter(self, options: ParsedOptions) -> None:
        requested = options.value("topic")
        topics = await self.topics(requested, options.has("exclude-internal"))
        self.ensure_topic_exists(topics, requested, not options.has("if-exists"))
        if not topics:
            return
        assignment_text = options.value("replica-assignment")
        assignment = parse_replica_assignment(assignment_text) if assignment_text else None
        count = options.value("partitions")
        new_partitions: dict[str, NewPartitions] = {}
        if assignment is not None:
            descriptions = await self.admin.describe_topics(topics)
            for name in topics:
                existing = len(descriptions[name].partitions)  # type: ignore[union-attr]
                new = [brokers for index, brokers in assignment.items() if index >= existing]
                new_partitions[name] = NewPartitions(count, new)
        else:
            new_partitions = {name: NewPartitions(count) for name in topics}
        await self.admin.create_partitions(new_partitions)

    async def delete(self, options: ParsedOptions) -> None:
        requested = options.value("topic")
        topics = await self.topics(requested, options.has("exclude-internal"))
        self.ensure_topic_exists(topics, requested, not options.has("if-exists"))
        if topics:
            await self.admin.delete_topics(topics)

    async def describe(self, options: ParsedOptions) -> None:
        exclude_internal = options.has("exclude-internal")
        topic_id_text = options.value("topic-id")
        topic_id = kafka_str_to_uuid(topic_id_text) if topic_id_text else None
        if topic_id is not None and topic_id != ZERO_UUID:
            listings = await self.admin.list_topics(include_internal=not exclude_internal)
            topics = [name for name, listing in listings.items() if listing.topic_id == topic_id]
            if not topics and not options.has("if-exists"):
                raise CommandError(
                    f"TopicId '{uuid_to_kafka_str(topic_id)}' does not exist as expected")
        else:
            requested = options.value("topic")
            topics = await self.topics(requested, exclude_internal)
            self.ensure_topic_exists(topics, requested, not options.has("if-exists"))
        if not topics:
            return
        limit = options.value("partition-size-limit-per-response")
        described = await self.admin.describe_topics(
            topics, partition_limit=limit or DEFAULT_PARTITION_LIMIT)
        configs = await self.admin.describe_configs([ConfigResource.topic(t) for t in topics])
        live_brokers = {node.id for node in (await self.admin.describe_cluster()).nodes}
        report = DescribeReport(options, live_brokers)
        for name in admin_client_topic_order(topics):
            description = described[name]
            assert isinstance(description, TopicDescription)
            config = configs[ConfigResource.topic(name)]
            assert isinstance(config, dict)
            for line in report.lines(description, config):
                self.print(line)


class DescribeReport:
    """Which lines `--describe` prints for a topic (Kafka's DescribeOptions)."""

    def __init__(self, options: ParsedOptions, live_brokers: set[int]) -> None:
        self.options = options
        self.live_brokers = live_brokers
        self.describe_configs = not any(options.has(report) for report in REPORT_OPTIONS)
        self.describe_partitions = not options.has("topics-with-overrides")

    def lines(self, topic: TopicDescription, config: dict[str, ConfigEntry]) -> list[str]:
        entries = [config[name] for name in
                   java_hashmap_order(list(config), initial_capacity=len(config))]
        partitions = sorted(topic.partitions, key=lambda p: p.partition)
        lines = []
        if self.describe_configs and partitions:
            overridden = [entry for entry in entries if not entry.is_default]
            if not self.options.has("topics-with-overrides") or overridden:
                lines.append(topic_line(topic, overridden))
        if self.describe_partitions:
            min_isr = _min_isr(config)
            lines.extend(partition_line(topic.name, partition) for partition in partitions
                         if self.shows(partition, min_isr))
        return lines

    def shows(self, partition: TopicPartitionInfo, min_isr: int) -> bool:
        options = self.options
        has_leader = partition.leader is not None
        return (
            self.describe_configs
            or (options.has("under-replicated-partitions")
                and len(partition.replicas) - len(partition.isr) > 0)
            or (options.has("unavailable-partitions")
                and (not has_leader or partition.leader not in self.live_brokers))
            or (options.has("under-min-isr-partitions")
                and (not has_leader or len(partition.isr) < min_isr))
            or (options.has("at-min-isr-partitions") and len(partition.isr) == min_isr)
        )


def _min_isr(config: dict[str, ConfigEntry]) -> int:
    entry = config.get("min.insync.replicas")
    try:
        return int(entry.value) if entry is not None and entry.value is not None else 1
    except ValueError:
        return 1


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(node) for node in ids)


def topic_line(topic: TopicDescription, overridden: list[ConfigEntry]) -> str:
    configs = ",".join(f"{entry.name}={entry.value}" for entry in overridden)
    parts = [f"Topic: {topic.name}"]
    if topic.topic_id != ZERO_UUID:
        parts.append(f"TopicId: {topic.topic_id_str}")
    first = min(topic.partitions, key=lambda p: p.partition)
    parts += [f"PartitionCount: {len(topic.partitions)}",
              f"ReplicationFactor: {len(first.replicas)}",
              f"Configs: {configs}"]
    return "\t".join(parts)


def partition_line(topic: str, partition: TopicPartitionInfo) -> str:
    leader = "none" if partition.leader is None else str(partition.leader)
    elr = "N/A" if partition.elr is None else _ids(partition.elr)
    last_known_elr = "N/A" if partition.last_known_elr is None else _ids(partition.last_known_elr)
    return (f"\tTopic: {topic}\tPartition: {partition.partition}\tLeader: {leader}"
            f"\tReplicas: {_ids(partition.replicas)}\tIsr: {_ids(partition.isr)}"
            f"\tElr: {elr}\tLastKnownElr: {last_known_elr}")


# ------------------------------------------------------------------------------------------
# entry point


def admin_config(options: ParsedOptions) -> dict[str, Any]:
    from odradek.config import ConfigError

    try:
        return admin_props(options, options.value("bootstrap-server"))
    except (FileNotFoundError, ConfigError) as exc:
        raise CommandError(str(exc)) from None


async def execute(options: ParsedOptions, out: Any) -> None:
    async with AdminClient(admin_config(options)) as admin:
        service = TopicService(admin, out)
        if options.has("create"):
            await service.create(options)
        elif options.has("alter"):
            await service.alter(options)
        elif options.has("list"):
            await service.list(options)
        elif options.has("describe"):
            await service.describe(options)
        elif options.has("delete"):
            await service.delete(options)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    configure_logging()
    try:
        options = parse_options(args)
        check_args(options, args)
        asyncio.run(execute(options, sys.stdout))
        return 0
    except HelpOrVersion as done:
        print(done.text, file=done.stream)
        return 0
    except UsageError as exc:
        print(exc, file=sys.stderr)
        print(usage_text(), file=sys.stderr)
        return 1
    except (CommandError, KafkaError, ValueError) as exc:
        if isinstance(exc, KafkaError):
            message, detail = exc.message, str(exc)  # detail: "TOPIC_ALREADY_EXISTS: ..."
        else:
            message = str(exc)
            detail = f"{type(exc).__name__}: {message}"
        print(f"Error while executing topic command : {message}")
        log.error("%s", detail)
        return 1


if __name__ == "__main__":
    sys.exit(main())
