"""`odradek consumer-groups`: Kafka's kafka-consumer-groups.sh (list, describe and delete
groups, reset and delete committed offsets).

Options, checks and output follow Kafka 3.8's ConsumerGroupCommand, so scripts written for
kafka-consumer-groups.sh work unchanged:

* tables go to stdout with Kafka's column widths (``--describe`` offsets, ``--members``,
  ``--state``; ``--reset-offsets`` plans; ``--delete-offsets`` statuses), in Kafka's row order
  (rows come out of Java HashMaps keyed by TopicPartition: `java_hashmap_order` reproduces it);
* notes and errors go to stderr as Kafka prints them (``\\nError: <message>``, ``Consumer group
  'g' has no active members.``);
* usage problems print the message and the option table on stderr and exit 1.

One deliberate difference: a failed command exits with 1 (Kafka's tool prints the error and
exits 0).
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import logging
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import Option, OptionParser, ParsedOptions, UsageError, admin_props
from odradek.client import AdminClient, KafkaError, OffsetSpec, TopicPartition
from odradek.client.admin_groups import GroupDescription, OffsetAndMetadata, group_state
from odradek.protocol.errors import ErrorCode
from odradek.protocol.java import java_hashmap_order, topic_partition_hashcode

log = logging.getLogger("odradek.cli.consumer_groups")

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE
DEFAULT_TIMEOUT_MS = 5000
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")
RESET_SCENARIOS = ("to-offset", "to-datetime", "by-duration", "to-earliest", "to-latest",
                   "to-current", "shift-by", "from-file")
GROUP_SCOPES = ("group", "all-groups")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")

_NO_EXECUTE_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In a future major "
    "release, the default behavior of this command will be to prompt the user before executing "
    "the reset rather than doing a dry run. You should add the --dry-run option explicitly if "
    "you are scripting this command and want to keep the current default behavior without "
    "prompting.")


class CommandError(Exception):
    """A failure printed as ``\\nError: <message>`` on stderr; exit code 1."""


class HelpOrVersion(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


# ------------------------------------------------------------------------------------------
# options (joptsimple style, parsed by tool_options)


OPTIONS: list[Option] = [
    Option("all-groups", "Apply to all consumer groups."),
    Option("all-topics", "Consider all topics assigned to a group in the `reset-offsets` "
           "process."),
    Option("bootstrap-server", "REQUIRED: The server(s) to connect to.",
           "server to connect to"),
    Option("by-duration", "Reset offsets to offset by duration from current timestamp. "
           "Format: 'PnDTnHnMnS'", "duration"),
    Option("command-config", "Property file containing configs to be passed to Admin "
           "Client and Consumer.", "command config property file"),
    Option("delete", "Pass in groups to delete topic partition offsets and ownership "
           "information over the entire consumer group. For instance --group g1 --group "
           "g2"),
    Option("delete-offsets", "Delete offsets of consumer group. Supports one consumer "
           "group at the time, and multiple topics."),
    Option("describe", "Describe consumer group and list offset lag (number of messages "
           "not yet processed) related to given group."),
    Option("dry-run", "Only show results without executing changes on Consumer Groups. "
           "Supported operations: reset-offsets."),
    Option("execute", "Execute operation. Supported operations: reset-offsets."),
    Option("export", "Export operation execution to a CSV file. Supported operations: "
           "reset-offsets."),
    Option("from-file", "Reset offsets to values defined in CSV file.",
           "path to CSV file"),
    Option("group", "The consumer group we wish to act on.", "consumer group"),
    Option("list", "List all consumer groups."),
    Option("members", "Describe members of the group. This option may be used with "
           "'--describe' and '--bootstrap-server' options only. Example: "
           "--bootstrap-server localhost:9092 --describe --group group1 --members"),
    Option("offsets", "Describe the group and list all topic partitions in the group "
           "along with their offset lag. This is the default sub-action of and may be used "
           "with '--describe' and '--bootstrap-server' options only. Example: "
           "--bootstrap-server localhost:9092 --describe --group group1 --offsets"),
    Option("reset-offsets", "Reset offsets of consumer group. Supports one consumer group "
           "at the time, and instances should be inactive. Has 2 execution options: "
           "--dry-run (the default) to plan which offsets to reset, and --execute to update "
           "the offsets. Additionally, the --export option is used to export the results to "
           "a CSV format. You must choose one of the following reset specifications: "
           "--to-datetime, --by-duration, --to-earliest, --to-latest, --shift-by, "
           "--from-file, --to-current, --to-offset. To define the scope use --all-topics or "
           "--topic. One scope must be selected, unless you use '--from-file'."),
    Option("shift-by", "Reset offsets shifting current offset by 'n', where 'n' can be "
           "positive or negative.", "number-of-offsets", int, type_name="Long"),
    Option("state", "When specified with '--describe', includes the state of the group. "
           "Example: --bootstrap-server localhost:9092 --describe --group group1 --state. "
           "When specified with '--list', it displays the state of all groups. It can also "
           "be used to list groups with specific states. Example: --bootstrap-server "
           "localhost:9092 --list --state stable,empty. This option may be used with "
           "'--describe', '--list' and '--bootstrap-server' options only.",
           optional_argument=True),
    Option("timeout", "The timeout that can be set for some use cases. For example, it can "
           "be used when describing the group to specify the maximum amount of time in "
           "milliseconds to wait before the group stabilizes (when the group is just "
           "created, or is going through some changes). (default: 5000)",
           "timeout (ms)", int, type_name="Long"),
    Option("to-current", "Reset offsets to current offset."),
    Option("to-datetime", "Reset offsets to offset from datetime. Format: "
           "'YYYY-MM-DDTHH:mm:SS.sss'", "datetime"),
    Option("to-earliest", "Reset offsets to earliest offset."),
    Option("to-latest", "Reset offsets to latest offset."),
    Option("to-offset", "Reset offsets to a specific offset.", "offset", int, type_name="Long"),
    Option("topic", "The topic whose consumer group information should be deleted or "
           "topic whose should be included in the reset offset process. In "
           "`reset-offsets` case, partitions can be specified using this format: "
           "`topic1:0,1,2`, where 0,1,2 are the partition to be included in the process. "
           "Reset-offsets also supports multiple topic inputs.", "topic"),
    Option("type", "When specified with '--list', it displays the types of all the "
           "groups. It can also be used to list groups with specific types. Example: "
           "--bootstrap-server localhost:9092 --list --type classic,consumer. This option "
           "may be used with the '--list' option only.",
           optional_argument=True),
    Option("verbose", "Provide additional information, if any, when describing the group. "
           "This option may be used with '--offsets'/'--members'/'--state' and "
           "'--bootstrap-server' options only. Example: --bootstrap-server localhost:9092 "
           "--describe --group group1 --members --verbose"),
]
PARSER = OptionParser(OPTIONS, "This tool helps to list all consumer groups, describe a consumer "
                      "group, delete consumer group info, or reset consumer group offsets.")


def parse_options(argv: Sequence[str]) -> ParsedOptions:
    return PARSER.parse(argv)


def usage_text() -> str:
    """The option table in joptsimple's layout."""
    return PARSER.usage()


def _names(*names: str) -> str:
    return ", ".join(f"--{name}" for name in names)


def check_args(options: ParsedOptions, argv: Sequence[str], err: TextIO) -> None:
    """Kafka's ConsumerGroupCommandOptions.checkArgs (and the action check of main)."""
    if not argv:
        raise UsageError("List all consumer groups, describe a consumer group, delete consumer "
                         "group info, or reset consumer group offsets.")
    if options.has("help"):
        raise HelpOrVersion(f"{PARSER.description}\n{usage_text()}")
    if options.has("version"):
        from odradek.cli.main import version_text

        raise HelpOrVersion(version_text())
    if sum(options.has(action) for action in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, "
                         "--delete, --reset-offsets, --delete-offsets")
    if not options.has("bootstrap-server"):
        raise UsageError('Missing required argument "[bootstrap-server]"')
    has_group = options.has("group") or options.has("all-groups")
    if options.has("delete") and options.has("topic"):
        raise UsageError(f"Option --delete takes one of these options: {_names(*GROUP_SCOPES)}")
    if options.has("describe"):
        if not has_group:
            raise UsageError("Option --describe takes one of these options: "
                             f"{_names(*GROUP_SCOPES)}")
        if sum(options.has(o) for o in ("members", "offsets", "state")) > 1:
            raise UsageError("Option --describe takes at most one of these options: "
                             f"{_names('members', 'offsets', 'state')}")
        if options.has("state") and options.value("state") is not None:
            raise UsageError("Option --describe does not take a value for --state")
    if options.has("delete") and not has_group:
        raise UsageError(f"Option --delete takes one of these options: {_names(*GROUP_SCOPES)}")
    if options.has("delete-offsets") and not (options.has("group") and options.has("topic")):
        raise UsageError("Option --delete-offsets takes the following options: "
                         f"{_names('group', 'topic')}")
    if options.has("reset-offsets"):
        if options.has("dry-run") and options.has("execute"):
            raise UsageError("Option --reset-offsets only accepts one of --execute and --dry-run")
        if not options.has("dry-run") and not options.has("execute"):
            print(_NO_EXECUTE_WARNING, file=err)
        if not has_group:
            raise UsageError("Option --reset-offsets takes one of these options: "
                             f"{_names(*GROUP_SCOPES)}")
        scenarios = [s for s in RESET_SCENARIOS if options.has(s)]
        if len(scenarios) > 1:
            raise UsageError(f'Option "[{scenarios[0]}]" can\'t be used with option '
                             f'"[{scenarios[1]}]"')
    if options.has("group") and options.has("all-groups"):
        raise UsageError('Option "[group]" can\'t be used with option "[all-groups]"')
    if options.has("group") and options.has("list"):
        raise UsageError('Option "[group]" can\'t be used with option "[list]"')
    if options.has("topic") and (options.has("list") or options.has("describe")):
        other = "list" if options.has("list") else "describe"
        raise UsageError(f'Option "[topic]" can\'t be used with option "[{other}]"')
    if options.has("type") and not options.has("list"):
        raise UsageError("Option --type may be used with the --list option only")
    for report in ("members", "offsets"):
        if options.has(report) and not options.has("describe"):
            raise UsageError(f"Option --{report} may be used with --describe only")


# ------------------------------------------------------------------------------------------
# Java's iteration orders


def _tp_order(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    return java_hashmap_order(partitions, topic_partition_hashcode)


def _string_order(names: Iterable[str]) -> list[str]:
    return java_hashmap_order(names)


_EXCEPTION_NAMES = {
    ErrorCode.NON_EMPTY_GROUP: "GroupNotEmptyException",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionException",
    ErrorCode.REQUEST_TIMED_OUT: "TimeoutException",
}


def java_exception_text(error: KafkaError) -> str:
    """How Kafka's tool shows an admin failure: `<exception class>: <message>`."""
    name = _EXCEPTION_NAMES.get(error.code) or \
        "".join(word.capitalize() for word in error.code.name.split("_")) + "Exception"
    return f"org.apache.kafka.common.errors.{name}: {error.message}"


# ------------------------------------------------------------------------------------------
# parsing helpers


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """java.time.Duration.parse ('PnDTnHnMn.nS') in milliseconds."""
    match = _DURATION.fullmatch(text)
    if match is None or match.group(3) == "T" or not any(match.group(i) for i in (2, 4, 5, 6)):
        raise CommandError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    millis = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60
              + int(seconds or 0)) * 1000
    if fraction:
        fraction_ms = int((fraction + "000")[:3])
        millis += -fraction_ms if (seconds or "").startswith("-") else fraction_ms
    return -millis if sign == "-" else millis


def parse_datetime_ms(text: str) -> int:
    """Kafka's Utils.getDateTime: 'yyyy-MM-ddTHH:mm:ss[.SSS]' with an optional zone (Z,
    +hh:mm, +hhmm, +hh); UTC when none is given."""
    _date, sep, time_part = text.partition("T")
    if not sep:
        raise CommandError(f"Error parsing timestamp. It does not contain a 'T' according to "
                           f"ISO8601 format: {text}")
    if not any(c in time_part for c in "+-Z"):
        text += "Z"
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?"
                         r"(Z|[+-]\d{2}(?::?\d{2})?)", text)
    if match is None:
        raise CommandError(f'Unparseable date: "{text}"')
    base, fraction, zone = match.groups()
    if zone == "Z":
        zone = "+00:00"
    elif len(zone) == 3:
        zone += ":00"
    elif ":" not in zone:
        zone = f"{zone[:3]}:{zone[3:]}"
    try:
        moment = dt.datetime.fromisoformat(base + zone)
    except ValueError:
        raise CommandError(f'Unparseable date: "{text}"') from None
    millis = int((fraction or ".0")[1:].ljust(3, "0"))
    return int(moment.timestamp()) * 1000 + millis


def parse_topic_with_partitions(arg: str) -> list[TopicPartition]:
    """`topic:0,1,2` -> its partitions (Kafka's parseTopicsWithPartitions)."""
    topic, _, partitions = arg.partition(":")
    try:
        return [TopicPartition(topic, int(p)) for p in partitions.split(",")]
    except ValueError:
        raise CommandError(f"Invalid topic partition format: {arg}") from None


def parse_reset_plan(text: str, single_group: str | None,
                     ) -> dict[str, dict[TopicPartition, int]]:
    """The CSV of `--export`: `topic,partition,offset` (one group) or with the group first."""
    plan: dict[str, dict[TopicPartition, int]] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row or not "".join(row).strip():
            continue
        try:
            if single_group is not None:
                topic, partition, offset = row
                group = single_group
            else:
                group, topic, partition, offset = row
            plan.setdefault(group, {})[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise CommandError(f"Invalid reset plan line: {','.join(row)}") from None
    return plan


def _pad(text: Any, width: int) -> str:
    return f"{text!s:<{width}}"


# ------------------------------------------------------------------------------------------
# the commands


@dataclass
class PartitionRow:
    group: str
    topic: str | None
    partition: int | None
    offset: int | None
    log_end_offset: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset


def _show(value: Any) -> str:
    return MISSING if value is None else str(value)


class ConsumerGroupService:
    """The commands, on an `AdminClient`; tables to `out`, notes and errors to `err`."""

    def __init__(self, admin: AdminClient, options: ParsedOptions, out: TextIO,
                 err: TextIO) -> None:
        self.admin = admin
        self.options = options
        self.out = out
        self.err = err
        self.timeout_ms = options.value("timeout") or DEFAULT_TIMEOUT_MS

    def write(self, text: str) -> None:
        self.out.write(text)

    def print_error(self, message: str) -> None:
        print(f"\nError: {message}", file=self.err)

    async def group_ids(self) -> list[str]:
        if self.options.has("all-groups"):
            return [g.group_id for g in await self.admin.list_groups(timeout_ms=self.timeout_ms)]
        return list(dict.fromkeys(self.options.all("group")))

    # -- --list
    async def list_groups(self) -> None:
        include_type = self.options.has("type")
        include_state = self.options.has("state")
        if not include_type and not include_state:
            for group in await self.admin.list_groups(timeout_ms=self.timeout_ms):
                self.write(f"{group.group_id}\n")
            return
        states = self._filter_values("state", {s.lower(): s for s in GROUP_STATES})
        types = self._filter_values("type", {"classic": "Classic", "consumer": "Consumer"})
        groups = await self.admin.list_groups(states=states, types=types,
                                              timeout_ms=self.timeout_ms)
        width = max([15, *(len(g.group_id) for g in groups)]) + 10
        columns: list[tuple[str, Callable[[Any], str]]] = [("GROUP", lambda g: g.group_id)]
        if include_type:
            columns.append(("TYPE", lambda g: (g.type or "unknown").capitalize()))
        if include_state:
            columns.append(("STATE", lambda g: g.state or "Unknown"))

        def line(values: list[str]) -> str:
            return _pad(values[0], width) + "".join(f" {_pad(v, 20)}" for v in values[1:])

        self.write(line([name for name, _ in columns]) + "\n")
        for group in groups:
            self.write(line([extract(group) for _, extract in columns]) + "\n")

    def _filter_values(self, option: str, known: dict[str, str]) -> list[str]:
        raw = self.options.value(option)
        if raw is None or not raw.strip():
            return []
        values = []
        for item in raw.split(","):
            value = known.get(item.strip().lower())
            if value is None:
                raise UsageError(f"Invalid {option} list '{raw}'. Valid {option}s are: "
                                 f"{', '.join(known.values())}")
            values.append(value)
        return values

    # -- --describe
    async def describe_groups(self) -> None:
        group_ids = await self.group_ids()
        described = await self.admin.describe_groups(group_ids, timeout_ms=self.timeout_ms)
        verbose = self.options.has("verbose")
        for group_id in sorted(described):
            description = described[group_id]
            assert isinstance(description, GroupDescription)
            if self.options.has("members"):
                self._print_members(description, verbose)
            elif self.options.has("state") and not self.options.has("offsets"):
                self._print_state(description)
            else:
                self._print_offsets(group_id, description,
                                    await self._offset_rows(group_id, description))

    def _should_print_member_state(self, group_id: str, state: str, rows: int) -> bool:
        """Kafka's shouldPrintMemberState: notes on stderr; True when a table follows."""
        if state == "Dead":
            self.print_error(f"Consumer group '{group_id}' does not exist.")
            return False
        if state == "Empty":
            print(f"\nConsumer group '{group_id}' has no active members.", file=self.err)
        elif state in REBALANCING:
            print(f"\nWarning: Consumer group '{group_id}' is rebalancing.", file=self.err)
        return rows > 0

    async def _log_end_offsets(self, partitions: Iterable[TopicPartition],
                               ) -> dict[TopicPartition, int | None]:
        return await self._list_offsets(partitions, OffsetSpec.latest())

    async def _list_offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec,
                            ) -> dict[TopicPartition, int | None]:
        wanted = list(dict.fromkeys(partitions))
        if not wanted:
            return {}
        results = await self.admin.list_offsets(dict.fromkeys(wanted, spec),
                                                timeout_ms=self.timeout_ms, raise_errors=False)
        return {tp: None if isinstance(info, KafkaError) or info.offset < 0 else info.offset
                for tp, info in results.items()}

    async def _offset_rows(self, group_id: str, group: GroupDescription) -> list[PartitionRow]:
        """Kafka's collectGroupsOffsets: members by assignment size, then the committed
        partitions no member owns."""
        committed = await self.admin.list_consumer_group_offsets(group_id,
                                                                 timeout_ms=self.timeout_ms)
        rows: list[PartitionRow] = []
        assigned: set[TopicPartition] = set()
        members = sorted((m for m in group.members if m.assignment),
                         key=lambda m: len(m.assignment), reverse=True)
        for member in members:
            assigned.update(member.assignment)
            rows += await self._describe_partitions(group_id, member.assignment, committed,
                                                    member.member_id, member.host,
                                                    member.client_id)
        unassigned = [tp for tp in _tp_order(committed) if tp not in assigned]
        if unassigned:
            rows += await self._describe_partitions(group_id, unassigned, committed, MISSING,
                                                    MISSING, MISSING)
        return rows

    async def _describe_partitions(self, group_id: str, partitions: Iterable[TopicPartition],
                                   committed: dict[TopicPartition, OffsetAndMetadata],
                                   consumer_id: str, host: str,
                                   client_id: str) -> list[PartitionRow]:
        ordered = _tp_order(sorted(partitions, key=lambda tp: (tp.partition, tp.topic)))
        ends = await self._log_end_offsets(ordered)
        return [PartitionRow(group_id, tp.topic, tp.partition,
                             committed[tp].offset if tp in committed else None, ends.get(tp),
                             consumer_id, host, client_id)
                for tp in ordered]

    def _print_offsets(self, group_id: str, group: GroupDescription,
                       rows: list[PartitionRow]) -> None:
        if not self._should_print_member_state(group_id, group.state, len(rows)):
            return
        group_width = max([15, *(len(r.group) for r in rows)])
        topic_width = max([15, *(len(_show(r.topic)) for r in rows)])
        consumer_width = max([15, *(len(r.consumer_id) for r in rows)])
        host_width = max([15, *(len(r.host) for r in rows)])

        def line(values: Sequence[Any]) -> str:
            widths = (group_width, topic_width, 10, 15, 15, 15, consumer_width, host_width)
            return "\n" + " ".join(_pad(v, w) for v, w in zip(values, widths)) \
                + f" {values[-1]}"

        self.write(line(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                         "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]))
        for r in rows:
            self.write(line([r.group, _show(r.topic), _show(r.partition), _show(r.offset),
                             _show(r.log_end_offset), _show(r.lag), r.consumer_id, r.host,
                             r.client_id]))
        self.write("\n\n")

    def _print_members(self, group: GroupDescription, verbose: bool) -> None:
        members = group.members
        if not self._should_print_member_state(group.group_id, group.state, len(members)):
            return
        widths = {
            "group": max([15, len(group.group_id)]),
            "consumer": max([15, *(len(m.member_id) for m in members)]),
            "instance": max([17, *(len(m.group_instance_id or "") for m in members)]),
            "host": max([15, *(len(m.host) for m in members)]),
            "client": max([15, *(len(m.client_id) for m in members)]),
        }
        with_instance = any(m.group_instance_id for m in members)

        def line(group_id: str, consumer: str, instance: str, host: str, client: str,
                 partitions: Any) -> str:
            cells = [_pad(group_id, widths["group"]), _pad(consumer, widths["consumer"])]
            if with_instance:
                cells.append(_pad(instance, widths["instance"]))
            cells += [_pad(host, widths["host"]), _pad(client, widths["client"]),
                      _pad(partitions, 15)]
            return " ".join(cells) + " "

        # Kafka 4.0 (KIP-1099): --verbose shows each member's epoch and assignment and the
        # group's target assignment epoch and the member's target ("-" for classic groups).
        current_width = max([20, *(len(_assignment_text(m.assignment)) for m in members)])

        def epochs(current_epoch: Any, current: str, target_epoch: Any, target: str) -> str:
            return f"{_pad(current_epoch, 15)} {_pad(current, current_width)} " \
                f"{_pad(target_epoch, 15)} {target}"

        header = line("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                      "#PARTITIONS")
        if verbose:
            header += epochs("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                             "TARGET-ASSIGNMENT")
        self.write("\n" + header + "\n")
        consumer_group = group.type == "consumer"
        for member in members:
            text = line(group.group_id, member.member_id, member.group_instance_id or "",
                        member.host, member.client_id, len(member.assignment))
            if verbose:
                text += epochs(
                    _show(member.member_epoch), _assignment_text(member.assignment),
                    _show(group.target_assignment_epoch),
                    _assignment_text(member.target_assignment) if consumer_group else MISSING)
            self.write(text + "\n")

    def _print_state(self, group: GroupDescription) -> None:
        if not self._should_print_member_state(group.group_id, group.state, 1):
            return
        node = group.coordinator
        coordinator = f"{node.host}:{node.port} ({node.id})"
        width = max(25, len(coordinator))

        verbose = self.options.has("verbose")

        def line(*values: Any) -> str:
            text = (f"\n{_pad(values[0], width)} {_pad(values[1], 25)} {_pad(values[2], 20)} "
                    f"{_pad(values[3], 15)} ")
            if verbose:  # Kafka 4.0 (KIP-1099): the group's epochs
                text += f"{_pad(values[5], 15)} {_pad(values[6], 25)} "
            return text + f"{values[4]}"

        self.write(line("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS",
                        "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"))
        self.write(line(group.group_id, coordinator, group.protocol, group.state,
                        len(group.members), _show(group.group_epoch),
                        _show(group.target_assignment_epoch)) + "\n")

    # -- --delete
    async def delete_groups(self) -> bool:
        group_ids = await self.group_ids()
        results = await self.admin.delete_groups(group_ids, timeout_ms=self.timeout_ms,
                                                 raise_errors=False)
        deleted = _string_order(g for g, error in results.items() if error is None)
        failed = {g: error for g, error in results.items() if error is not None}
        if not failed:
            names = "', '".join(deleted)
            self.write(f"Deletion of requested consumer groups ('{names}') was successful.\n")
            return True
        self.print_error("Deletion of some consumer groups failed:")
        for group_id in _string_order(failed):
            self.write(f"* Group '{group_id}' could not be deleted due to: "
                       f"java.util.concurrent.ExecutionException: "
                       f"{java_exception_text(failed[group_id])}\n")
        if deleted:
            names = "', '".join(deleted)
            self.write(f"\nThese consumer groups were deleted successfully: '{names}'\n")
        return False

    # -- --delete-offsets
    async def delete_offsets(self) -> bool:
        group_id = self.options.value("group")
        topics = self.options.all("topic")
        results: dict[TopicPartition, KafkaError | None] = {}
        partitions: list[TopicPartition] = []
        for arg in topics:
            if ":" in arg:
                partitions += parse_topic_with_partitions(arg)
        plain = [t for t in dict.fromkeys(topics) if ":" not in t]
        if plain:
            described = await self.admin.describe_topics(plain, timeout_ms=self.timeout_ms,
                                                         raise_errors=False)
            for name, description in described.items():
                if isinstance(description, KafkaError):
                    results[TopicPartition(name, -1)] = description
                else:
                    partitions += [TopicPartition(name, p.partition)
                                   for p in description.partitions]
        top_level = ErrorCode.NONE
        try:
            deleted = await self.admin.delete_consumer_group_offsets(
                group_id, partitions, timeout_ms=self.timeout_ms, raise_errors=False)
            results.update(deleted)
            first = next((e for e in deleted.values() if e is not None), None)
            if first is not None:
                top_level = first.code
        except KafkaError as exc:
            top_level = exc.code
            results.update(dict.fromkeys(partitions, exc))
        messages = {
            ErrorCode.INVALID_GROUP_ID: f"'{group_id}' is not valid.",
            ErrorCode.GROUP_ID_NOT_FOUND: f"'{group_id}' does not exist.",
            ErrorCode.GROUP_AUTHORIZATION_FAILED: f"Access to '{group_id}' is not authorized.",
            ErrorCode.NON_EMPTY_GROUP: f"Deleting offsets of a consumer group '{group_id}' is "
                                       "forbidden if the group is not empty.",
        }
        partition_level = (ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                           ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                           ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if top_level == ErrorCode.NONE:
            self.write(f"Request succeed for deleting offsets with topic {', '.join(topics)} "
                       f"group {group_id}\n")
        elif top_level in messages:
            self.print_error(messages[top_level])
        elif top_level in partition_level:
            self.print_error("Encounter some partition level error, see the follow-up details:")
        else:
            self.print_error(f"Encounter some unknown error: {top_level.name}")

        def line(*values: Any) -> str:
            return f"\n{_pad(values[0], 30)} {_pad(values[1], 15)} {_pad(values[2], 15)}"

        self.write(line("TOPIC", "PARTITION", "STATUS"))
        for tp in sorted(results, key=lambda tp: tp.topic + str(tp.partition)):
            error = results[tp]
            status = "Successful" if error is None else \
                f"Error: :java.util.concurrent.ExecutionException: {java_exception_text(error)}"
            self.write(line(tp.topic, tp.partition if tp.partition >= 0 else "Not Provided",
                            status))
        self.write("\n")
        return top_level == ErrorCode.NONE

    # -- --reset-offsets
    async def reset_offsets(self) -> dict[str, dict[TopicPartition, int]]:
        group_ids = await self.group_ids()
        described = await self.admin.describe_groups(group_ids, timeout_ms=self.timeout_ms,
                                                     raise_errors=False)
        execute = self.options.has("execute") and not self.options.has("dry-run")
        result: dict[str, dict[TopicPartition, int]] = {}
        for group_id in _string_order(described):
            # As Kafka 4.0's tool: a group that does not exist is reset like an inactive one.
            state = group_state(described[group_id])
            if state not in ("Empty", "Dead"):
                self.print_error(f"Assignments can only be reset if the group '{group_id}' is "
                                 f"inactive, but the current state is {state}.")
                result[group_id] = {}
                continue
            partitions = await self._partitions_to_reset(group_id)
            prepared = await self._prepare_offsets(group_id, partitions)
            if execute and prepared:
                await self.admin.alter_consumer_group_offsets(
                    group_id, prepared, timeout_ms=self.timeout_ms)
            result[group_id] = prepared
        return result

    async def _partitions_to_reset(self, group_id: str) -> list[TopicPartition]:
        if self.options.has("all-topics"):
            return list(await self.admin.list_consumer_group_offsets(
                group_id, timeout_ms=self.timeout_ms))
        if self.options.has("topic"):
            specified: list[TopicPartition] = []
            plain = []
            for arg in self.options.all("topic"):
                if ":" in arg:
                    specified += parse_topic_with_partitions(arg)
                else:
                    plain.append(arg)
            if plain:
                described = await self.admin.describe_topics(plain, timeout_ms=self.timeout_ms)
                for name, description in described.items():
                    specified += [TopicPartition(name, p.partition)
                                  for p in description.partitions]  # type: ignore[union-attr]
            return specified
        if not self.options.has("from-file"):
            raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
        return []

    async def _prepare_offsets(self, group_id: str, partitions: list[TopicPartition],
                               ) -> dict[TopicPartition, int]:
        """Kafka's prepareOffsetsToReset: the new offset of each partition."""
        options = self.options
        if options.has("to-offset"):
            return await self._in_range(dict.fromkeys(partitions, options.value("to-offset")))
        if options.has("to-earliest"):
            return self._require(await self._list_offsets(partitions, OffsetSpec.earliest()),
                                 partitions, "starting offset")
        if options.has("to-latest"):
            return self._require(await self._log_end_offsets(partitions), partitions,
                                 "ending offset")
        if options.has("shift-by"):
            committed = await self.admin.list_consumer_group_offsets(group_id,
                                                                     timeout_ms=self.timeout_ms)
            requested = {}
            for tp in partitions:
                if tp not in committed:
                    raise UsageError(f"Cannot shift offset for partition {tp} since there is "
                                     "no current committed offset")
                requested[tp] = committed[tp].offset + options.value("shift-by")
            return await self._in_range(requested)
        if options.has("to-datetime"):
            return await self._by_timestamp(partitions,
                                            parse_datetime_ms(options.value("to-datetime")))
        if options.has("by-duration"):
            now_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
            return await self._by_timestamp(
                partitions, now_ms - parse_duration_ms(options.value("by-duration")))
        if options.has("from-file"):
            plan = self._reset_plan().get(group_id)
            if plan is None:
                self.print_error(f"No reset plan for group {group_id} found")
                return {}
            return await self._in_range(plan)
        if options.has("to-current"):
            committed = await self.admin.list_consumer_group_offsets(group_id,
                                                                     timeout_ms=self.timeout_ms)
            with_commit = {tp: committed[tp].offset for tp in partitions if tp in committed}
            without = [tp for tp in partitions if tp not in committed]
            with_commit.update(self._require(await self._log_end_offsets(without), without,
                                             "ending offset"))
            return with_commit
        raise UsageError("Option '[reset-offsets]' requires one of the following scenarios: "
                         f"[{', '.join(RESET_SCENARIOS)}]")

    def _reset_plan(self) -> dict[str, dict[TopicPartition, int]]:
        path = self.options.value("from-file")
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise CommandError(f"{path} ({exc.strerror})") from None
        groups = self.options.all("group")
        return parse_reset_plan(text, groups[0] if len(groups) == 1 else None)

    @staticmethod
    def _require(offsets: dict[TopicPartition, int | None], partitions: list[TopicPartition],
                 what: str) -> dict[TopicPartition, int]:
        out = {}
        for tp in partitions:
            offset = offsets.get(tp)
            if offset is None:
                raise UsageError(f"Error getting {what} of topic partition: {tp}")
            out[tp] = offset
        return out

    async def _by_timestamp(self, partitions: list[TopicPartition],
                            timestamp_ms: int) -> dict[TopicPartition, int]:
        """The first offset at or after the timestamp; the log end where there is none."""
        found = await self._list_offsets(partitions, OffsetSpec.for_timestamp(max(0,
                                                                                  timestamp_ms)))
        missing = [tp for tp in partitions if found.get(tp) is None]
        found.update(await self._log_end_offsets(missing))
        return self._require(found, partitions, "offset by timestamp")

    async def _in_range(self, requested: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Kafka's checkOffsetsRange: clamp to [log start, log end]."""
        starts = await self._list_offsets(requested, OffsetSpec.earliest())
        ends = await self._log_end_offsets(requested)
        out = {}
        for tp, offset in requested.items():
            end, start = ends.get(tp), starts.get(tp)
            if end is None:
                raise CommandError(f"Unexpected non-existing offset value for topic partition "
                                   f"{tp}")
            if offset > end:
                log.warning("New offset (%d) is higher than latest offset for topic partition "
                            "%s. Value will be set to %d", offset, tp, end)
                offset = end
            elif start is not None and offset < start:
                log.warning("New offset (%d) is lower than earliest offset for topic partition "
                            "%s. Value will be set to %d", offset, tp, start)
                offset = start
            out[tp] = offset
        return out

    def print_reset_plan(self, plan: dict[str, dict[TopicPartition, int]]) -> None:
        def line(*values: Any) -> str:
            return (f"\n{_pad(values[0], 30)} {_pad(values[1], 30)} {_pad(values[2], 10)} "
                    f"{_pad(values[3], 15)}")

        if plan:
            self.write(line("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
        for group_id, offsets in plan.items():
            for tp in _tp_order(offsets):
                self.write(line(group_id, tp.topic, tp.partition, offsets[tp]))
        self.write("\n")

    def export_reset_plan(self, plan: dict[str, dict[TopicPartition, int]]) -> str:
        single = len(self.options.all("group")) == 1
        lines = []
        for group_id, offsets in plan.items():
            for tp in _tp_order(offsets):
                prefix = "" if single else f"{group_id},"
                lines.append(f"{prefix}{tp.topic},{tp.partition},{offsets[tp]}\n")
        return "".join(lines)


def _assignment_text(assignment: Sequence[TopicPartition]) -> str:
    if not assignment:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(sorted(f"{topic}({','.join(map(str, sorted(parts)))})"
                            for topic, parts in by_topic.items()))


# ------------------------------------------------------------------------------------------
# entry point


def admin_config(options: ParsedOptions) -> dict[str, Any]:
    from odradek.config import ConfigError

    try:
        return admin_props(options, options.value("bootstrap-server"))
    except (FileNotFoundError, ConfigError) as exc:
        raise CommandError(str(exc)) from None


async def execute(options: ParsedOptions, out: TextIO, err: TextIO) -> bool:
    """Runs the action; False when it reported a failure."""
    async with AdminClient(admin_config(options)) as admin:
        service = ConsumerGroupService(admin, options, out, err)
        if options.has("list"):
            await service.list_groups()
        elif options.has("describe"):
            await service.describe_groups()
        elif options.has("delete"):
            return await service.delete_groups()
        elif options.has("reset-offsets"):
            plan = await service.reset_offsets()
            if options.has("export"):
                out.write(service.export_reset_plan(plan) + "\n")
            else:
                service.print_reset_plan(plan)
        elif options.has("delete-offsets"):
            return await service.delete_offsets()
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    configure_logging()
    out, err = sys.stdout, sys.stderr
    try:
        options = parse_options(args)
        check_args(options, args, err)
        return 0 if asyncio.run(execute(options, out, err)) else 1
    except HelpOrVersion as done:
        print(done.text, file=out)
        return 0
    except UsageError as exc:
        print(exc, file=err)
        print(usage_text(), file=err)
        return 1
    except CommandError as exc:
        print(f"\nError: {exc}", file=err)
        return 1
    except KafkaError as exc:
        print(f"\nError: Executing consumer group command failed due to "
              f"{java_exception_text(exc)}", file=err)
        return 1


if __name__ == "__main__":
    sys.exit(main())
