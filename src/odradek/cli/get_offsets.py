"""`odradek get-offsets`: Kafka's kafka-get-offsets.sh (GetOffsetShell).

Prints ``topic:partition:offset`` for every partition matching ``--topic`` (a regex) and
``--partitions``, or ``--topic-partitions`` patterns, at ``--time`` (``-1``/``latest``,
``-2``/``earliest``, ``-3``/``max-timestamp``, ``-4``/``earliest-local``,
``-5``/``latest-tiered``, or a timestamp in ms). Lines come sorted by ``topic-partition`` as
text, as Kafka sorts them; partitions without such an offset are left out.
"""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    admin_props,
    java_error,
    run,
)
from odradek.cli.topics import INTERNAL_TOPICS
from odradek.client import AdminClient, KafkaConfigError, KafkaError, TopicPartition

USAGE_TEXT = "An interactive shell for getting topic-partition offsets."
TOPIC_PARTITION_PATTERN = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
INT32_MAX = 2**31 - 1

TIME_NAMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4,
              "latest-tiered": -5}

OPTIONS = [
    Option("bootstrap-server", "REQUIRED. The server(s) to connect to in the form "
           "HOST1:PORT1,HOST2:PORT2.", "HOST1:PORT1,...,HOST3:PORT3"),
    Option("broker-list", "DEPRECATED, use --bootstrap-server instead; ignored if "
           "--bootstrap-server is specified. The server(s) to connect to in the form "
           "HOST1:PORT1,HOST2:PORT2.", "HOST1:PORT1,...,HOST3:PORT3"),
    Option("command-config", "Property file containing configs to be passed to Admin Client.",
           "config file"),
    Option("exclude-internal-topics", "By default, internal topics are included. If specified, "
           "internal topics are excluded."),
    Option("partitions", "Comma separated list of partition ids to get the offsets for. If not "
           "present, all partitions of the authorized topics are queried. Cannot be used if "
           "--topic-partitions is present.", "partition ids"),
    Option("time", "timestamp of the offsets before that. [Note: No offset is returned, if the "
           "timestamp greater than recently committed record timestamp is given.]",
           "<timestamp> / -1 or latest / -2 or earliest / -3 or max-timestamp / -4 or "
           "earliest-local / -5 or latest-tiered", default="latest"),
    Option("topic", "The topic to get the offsets for. It also accepts a regular expression. If "
           "not present, all authorized topics are queried. Cannot be used if "
           "--topic-partitions is present.", "topic"),
    Option("topic-partitions", "Comma separated list of topic-partition patterns to get the "
           "offsets for, with the format of '" + TOPIC_PARTITION_PATTERN.pattern + "'. The "
           "first group is an optional regex for the topic name, if omitted, it matches any "
           "topic name. The section after ':' describes a 'partition' pattern, which can be: a "
           "number, a range in the format of 'NUMBER-NUMBER' (lower inclusive, upper "
           "exclusive), an inclusive lower bound in the format of 'NUMBER-', an exclusive upper "
           "bound in the format of '-NUMBER' or may be omitted to accept all partitions.",
           "topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3"),
]
PARSER = OptionParser(OPTIONS, USAGE_TEXT)


class TerseError(Exception):
    """Reported as ``Error occurred: <message>`` (Kafka's TerseException)."""


@dataclass(frozen=True)
class Rule:
    """A topic regex with a partition filter: [low, high) or a single partition."""

    topic: re.Pattern[str]
    low: int = 0
    high: int = INT32_MAX
    only: int | None = None

    def allows_topic(self, topic: str) -> bool:
        return bool(self.topic.fullmatch(topic))

    def allows(self, tp: TopicPartition) -> bool:
        if not self.allows_topic(tp.topic):
            return False
        if self.only is not None:
            return tp.partition == self.only
        return self.low <= tp.partition < self.high


def _topic_regex(text: str) -> re.Pattern[str]:
    # Kafka's IncludeList: commas mean "or", quotes and spaces are dropped.
    regex = text.strip().replace(",", "|").replace(" ", "").strip("\"'")
    try:
        return re.compile(regex)
    except re.error:
        raise TerseError(f"{regex} is an invalid regex.") from None


def parse_time(text: str) -> int:
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        return int(text)
    except ValueError:
        raise TerseError(f"Malformed time argument {text}. Please use -1 or latest / -2 or "
                         "earliest / -3 or max-timestamp / -4 or earliest-local / -5 or "
                         "latest-tiered, or a specified long format timestamp") from None


def rules_from_patterns(patterns: str) -> list[Rule]:
    rules = []
    for spec in patterns.split(","):
        match = TOPIC_PARTITION_PATTERN.fullmatch(spec)
        if match is None:
            raise TerseError(f"Invalid rule specification: {spec}")
        topic, single, low, high = (g or None for g in match.groups())
        regex = _topic_regex(topic) if topic else re.compile(".*")
        if single is not None:
            rules.append(Rule(regex, only=int(single)))
        else:
            rules.append(Rule(regex, int(low) if low else 0, int(high) if high else INT32_MAX))
    return rules


def rules_from_options(topic: str | None, partitions: str | None) -> list[Rule]:
    regex = _topic_regex(topic) if topic is not None else re.compile(".*")
    if not partitions:
        return [Rule(regex)]
    try:
        ids = {int(p) for p in partitions.split(",")}
    except ValueError:
        raise TerseError("--partitions expects a comma separated list of numeric partition "
                         f"ids, but received: {partitions}") from None
    return [Rule(regex, only=p) for p in sorted(ids)]


async def fetch_offsets(options: ParsedOptions, bootstrap: str) -> dict[TopicPartition, int]:
    if options.has("topic-partitions") and (options.has("topic") or options.has("partitions")):
        raise TerseError("--topic-partitions cannot be used with --topic or --partitions")
    timestamp = parse_time(options.value("time"))
    if options.has("topic-partitions"):
        rules = rules_from_patterns(options.value("topic-partitions"))
    else:
        rules = rules_from_options(options.value("topic"), options.value("partitions"))
    exclude_internal = options.has("exclude-internal-topics")
    props = admin_props(options, bootstrap)
    props["client.id"] = "GetOffsetShell"
    async with AdminClient(props) as admin:
        listed = await admin.list_topics(include_internal=not exclude_internal)
        topics = [name for name in listed
                  if any(rule.allows_topic(name) for rule in rules)
                  and not (exclude_internal and name in INTERNAL_TOPICS)]
        described = await admin.describe_topics(topics) if topics else {}
        partitions = [TopicPartition(name, p.partition)
                      for name, description in described.items()
                      for p in description.partitions]  # type: ignore[union-attr]
        partitions = [tp for tp in partitions if any(rule.allows(tp) for rule in rules)]
        if not partitions:
            raise TerseError("Could not match any topic-partitions with the specified filters")
        results = await admin.list_offsets({tp: timestamp for tp in partitions},
                                           raise_errors=False)
    offsets: dict[TopicPartition, int] = {}
    for tp in partitions:
        result = results[tp]
        if isinstance(result, KafkaError):
            print(f"Skip getting offsets for topic-partition {tp} due to error: "
                  f"{java_error(result)}", file=sys.stderr)
        elif result.offset != -1:
            offsets[tp] = result.offset
    return dict(sorted(offsets.items(), key=lambda item: str(item[0])))


def execute(options: ParsedOptions) -> int:
    bootstrap = options.value("bootstrap-server") or options.value("broker-list")
    if bootstrap is None:
        PARSER.fail('Missing required argument "[bootstrap-server]"')
    try:
        offsets = asyncio.run(fetch_offsets(options, bootstrap))
    except TerseError as exc:
        print(f"Error occurred: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, KafkaConfigError, FileNotFoundError) as exc:
        print(f"Error occurred: {exc}", file=sys.stderr)
        return 1
    for tp, offset in offsets.items():
        print(f"{tp.topic}:{tp.partition}:{offset}")
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
