"""`odradek console-consumer`: Kafka's kafka-console-consumer.sh.

Prints records of a topic with Kafka 3.8's ConsoleConsumer options and its
DefaultMessageFormatter (``--property print.key=true print.timestamp=true ...``). At the end
(``--max-messages`` reached, ``--timeout-ms`` passed, or Ctrl-C) it prints ``Processed a total
of N messages`` on stderr, as Kafka does.

With ``--group`` (or ``group.id`` in ``--consumer-property`` / ``--consumer.config``) the tool
joins that consumer group: it subscribes to ``--topic`` (or the ``--include`` pattern), starts at
the group's committed offsets (else per ``auto.offset.reset``) and commits as it goes (auto
commit, and on exit), as Kafka's does. Without a group it reads by assignment: every partition
of the matching topics, starting per ``auto.offset.reset`` (latest, or earliest with
``--from-beginning``), which is what Kafka's throwaway ``console-consumer-N`` group does,
without leaving a group behind.
"""

from __future__ import annotations

import logging
import re
import struct
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, BinaryIO

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    load_properties_file,
    parse_key_value,
    run,
)
from odradek.client import (
    Consumer,
    ConsumerRecord,
    KafkaConfigError,
    KafkaError,
    TopicPartition,
)
from odradek.protocol.records import TimestampType

log = logging.getLogger("org.apache.kafka.tools.consumer.ConsoleConsumer")

FORMATTERS = ("kafka.tools.DefaultMessageFormatter",
              "org.apache.kafka.tools.consumer.DefaultMessageFormatter")
_PROPERTY_HELP = (
    "The properties to initialize the message formatter. Default properties include: \n"
    " print.timestamp=true|false\n print.key=true|false\n print.offset=true|false\n"
    " print.partition=true|false\n print.headers=true|false\n print.value=true|false\n"
    " key.separator=<key.separator>\n line.separator=<line.separator>\n"
    " headers.separator=<line.separator>\n null.literal=<null.literal>\n"
    " key.deserializer=<key.deserializer>\n value.deserializer=<value.deserializer>\n"
    " header.deserializer=<header.deserializer>\n\nUsers can also pass in customized "
    "properties for their formatter; more specifically, users can pass in properties keyed "
    "with 'key.deserializer.', 'value.deserializer.' and 'headers.deserializer.' prefixes to "
    "configure their deserializers.")

OPTIONS = [
    Option("bootstrap-server", "REQUIRED: The server(s) to connect to.", "server to connect to"),
    Option("consumer-property", "A mechanism to pass user-defined properties in the form "
           "key=value to the consumer.", "consumer_prop"),
    Option("consumer.config", "Consumer config properties file. Note that [consumer-property] "
           "takes precedence over this config.", "config file"),
    Option("enable-systest-events", "Log lifecycle events of the consumer in addition to "
           "logging consumed messages. (This is specific for system tests.)"),
    Option("formatter", "The name of a class to use for formatting kafka messages for "
           "display.", "class", default=FORMATTERS[0]),
    Option("formatter-config", "Config properties file to initialize the message formatter. "
           "Note that [property] takes precedence over this config.", "config file"),
    Option("from-beginning", "If the consumer does not already have an established offset to "
           "consume from, start with the earliest message present in the log rather than the "
           "latest message."),
    Option("group", "The consumer group id of the consumer.", "consumer group id"),
    Option("include", "Regular expression specifying list of topics to include for "
           "consumption.", "Java regex (String)"),
    Option("isolation-level", "Set to read_committed in order to filter out transactional "
           "messages which are not committed. Set to read_uncommitted to read all messages.",
           default="read_uncommitted"),
    Option("key-deserializer", "The name of the class to use for deserializing keys.",
           "deserializer for key"),
    Option("max-messages", "The maximum number of messages to consume before exiting. If not "
           "set, consumption is continual.", "num_messages", int),
    Option("offset", "The offset to consume from (a non-negative number), or 'earliest' which "
           "means from beginning, or 'latest' which means from end", "consume offset",
           default="latest"),
    Option("partition", "The partition to consume from. Consumption starts from the end of the "
           "partition unless '--offset' is specified.", "partition", int),
    Option("property", _PROPERTY_HELP, "prop"),
    Option("skip-message-on-error", "If there is an error when processing a message, skip it "
           "instead of halt."),
    Option("timeout-ms", "If specified, exit if no message is available for consumption for "
           "the specified interval.", "timeout_ms", int, type_name="Long"),
    Option("topic", "The topic to consume on.", "topic"),
    Option("value-deserializer", "The name of the class to use for deserializing values.",
           "deserializer for values"),
    Option("whitelist", "DEPRECATED, use --include instead; ignored if --include specified. "
           "Regular expression specifying list of topics to include for consumption.",
           "Java regex (String)"),
]
PARSER = OptionParser(OPTIONS, "This tool helps to read data from Kafka topics and outputs it "
                               "to standard output.")


# ------------------------------------------------------------------------------------------
# deserializers (the Java classes the formatter may be given, by name)


def _java_string(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _signed(fmt: str) -> Callable[[bytes], str]:
    size = struct.calcsize(fmt)

    def decode(data: bytes) -> str:
        if len(data) != size:
            raise ValueError(f"Size of data received by deserializer is not {size}")
        value = struct.unpack(fmt, data)[0]
        return repr(value) if isinstance(value, float) else str(value)

    return decode


_DESERIALIZERS: dict[str, Callable[[bytes], str]] = {
    "StringDeserializer": _java_string,
    "ByteArrayDeserializer": _java_string,
    "BytesDeserializer": _java_string,
    "ByteBufferDeserializer": _java_string,
    "IntegerDeserializer": _signed(">i"),
    "LongDeserializer": _signed(">q"),
    "ShortDeserializer": _signed(">h"),
    "DoubleDeserializer": _signed(">d"),
    "FloatDeserializer": _signed(">f"),
    "UUIDDeserializer": lambda data: str(uuid.UUID(data.decode("utf-8"))),
    "VoidDeserializer": lambda data: "null",
}


def deserializer_for(class_name: str | None) -> Callable[[bytes], str] | None:
    if not class_name:
        return None
    simple = class_name.rsplit(".", 1)[-1]
    found = _DESERIALIZERS.get(simple)
    if found is None:
        raise ValueError(f"Unable to instantiate a deserializer from {class_name}")
    return found


class DefaultMessageFormatter:
    """Kafka's DefaultMessageFormatter."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str, default: bool) -> bool:
            return props[name].strip().lower() == "true" if name in props else default

        self.print_timestamp = flag("print.timestamp", False)
        self.print_key = flag("print.key", False)
        self.print_value = flag("print.value", True)
        self.print_partition = flag("print.partition", False)
        self.print_offset = flag("print.offset", False)
        self.print_headers = flag("print.headers", False)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()
        self.key_deserializer = deserializer_for(props.get("key.deserializer"))
        self.value_deserializer = deserializer_for(props.get("value.deserializer"))
        self.headers_deserializer = deserializer_for(props.get("headers.deserializer"))

    def _bytes(self, data: bytes | None, deserializer: Callable[[bytes], str] | None) -> bytes:
        data = self.null_literal if data is None else data
        return data if deserializer is None else deserializer(data).encode("utf-8")

    def format(self, record: ConsumerRecord) -> bytes:
        out = bytearray()
        columns = [self.print_timestamp, self.print_partition, self.print_offset,
                   self.print_headers, self.print_key, self.print_value]

        def separator(index: int) -> None:
            # A column separator when any later column is printed, else the line separator.
            out.extend(self.key_separator if any(columns[index + 1:]) else self.line_separator)

        if self.print_timestamp:
            if record.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
                out += b"NO_TIMESTAMP"
            else:
                name = "CreateTime" if record.timestamp_type == TimestampType.CREATE_TIME else \
                    "LogAppendTime"
                out += f"{name}:{record.timestamp}".encode()
            separator(0)
        if self.print_partition:
            out += f"Partition:{record.partition}".encode()
            separator(1)
        if self.print_offset:
            out += f"Offset:{record.offset}".encode()
            separator(2)
        if self.print_headers:
            if not record.headers:
                out += b"NO_HEADERS"
            else:
                out += self.headers_separator.join(
                    name.encode("utf-8", "surrogateescape") + b":" +
                    self._bytes(value, self.headers_deserializer)
                    for name, value in record.headers)
            separator(3)
        if self.print_key:
            out += self._bytes(record.key, self.key_deserializer)
            separator(4)
        if self.print_value:
            out += self._bytes(record.value, self.value_deserializer)
            out += self.line_separator
        return bytes(out)


# ------------------------------------------------------------------------------------------
# options


def _offset_arg(options: ParsedOptions) -> int | str:
    """'earliest', 'latest' or an offset, from --offset / --from-beginning."""
    if options.has("offset"):
        text = str(options.value("offset"))
        if text.lower() in ("earliest", "latest"):
            return text.lower()
        try:
            offset = int(text)
        except ValueError:
            offset = -1
        if offset < 0:
            PARSER.fail(f"The provided offset value '{text}' is incorrect. Valid values are "
                        "'earliest', 'latest', or a non-negative long.")
        return offset
    return "earliest" if options.has("from-beginning") else "latest"


def check_args(options: ParsedOptions) -> None:
    include = options.has("include") or options.has("whitelist")
    if options.has("topic") == include:
        PARSER.fail("Exactly one of whitelist/include/topic is required.")
    if options.has("partition"):
        if not options.has("topic"):
            PARSER.fail("The topic is required when partition is specified.")
        if options.has("from-beginning") and options.has("offset"):
            PARSER.fail("Options from-beginning and offset cannot be specified together.")
    elif options.has("offset"):
        PARSER.fail("The partition is required when offset is specified.")
    PARSER.require(options, "bootstrap-server")


def consumer_props(options: ParsedOptions) -> tuple[dict[str, Any], str | None]:
    """The consumer's properties and the group id given (if any), as ConsoleConsumerOptions
    builds them."""
    from_file: dict[str, str] = {}
    if options.has("consumer.config"):
        from_file = load_properties_file(options.value("consumer.config"))
    extra = parse_key_value(options.all("consumer-property"))
    groups = {g for g in (options.value("group"), from_file.get("group.id"),
                          extra.get("group.id")) if g is not None}
    if len(groups) > 1:
        PARSER.fail("The group ids provided in different places (directly using '--group', "
                    "via '--consumer-property', or via '--consumer.config') do not match. "
                    "Detected group ids: " + ", ".join(f"'{g}'" for g in sorted(groups)))
    if groups and options.has("partition"):
        PARSER.fail("Options group and partition cannot be specified together.")
    props: dict[str, Any] = {**from_file, **extra}
    reset = props.get("auto.offset.reset")
    if reset is not None:
        if options.has("from-beginning") and reset != "earliest":
            print(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset="
                  f"{reset}', please remove one option", file=sys.stderr)
            raise SystemExit(1)
    else:
        props["auto.offset.reset"] = "earliest" if options.has("from-beginning") else "latest"
    props["bootstrap.servers"] = options.value("bootstrap-server")
    props.setdefault("client.id", "console-consumer")
    if options.has("isolation-level") or "isolation.level" not in props:
        props["isolation.level"] = options.value("isolation-level")
    group = groups.pop() if groups else None
    if group is None:
        props.pop("enable.auto.commit", None)  # reading by assignment (see the module doc)
    else:
        props["group.id"] = group
    return props, group


def formatter_props(options: ParsedOptions) -> dict[str, str]:
    props: dict[str, str] = {}
    if options.has("formatter-config"):
        props.update(load_properties_file(options.value("formatter-config")))
    if options.value("key-deserializer"):
        props["key.deserializer"] = options.value("key-deserializer")
    if options.value("value-deserializer"):
        props["value.deserializer"] = options.value("value-deserializer")
    props.update(parse_key_value(options.all("property")))
    return props


# ------------------------------------------------------------------------------------------
# running


def subscribe(consumer: Consumer, options: ParsedOptions) -> None:
    """Join the group for the topic or the include pattern (Kafka's ConsumerWrapper)."""
    topic = options.value("topic")
    if topic is not None:
        consumer.subscribe([topic])
    else:
        consumer.subscribe(re.compile(options.value("include") or options.value("whitelist")))


def assign(consumer: Consumer, options: ParsedOptions, offset: int | str) -> None:
    """Assign the partitions to read and position them (Kafka's ConsumerWrapper)."""
    topic = options.value("topic")
    if options.has("partition"):
        tp = TopicPartition(topic, options.value("partition"))
        consumer.assign([tp])
        if offset == "earliest":
            consumer.seek_to_beginning([tp])
        elif offset == "latest":
            consumer.seek_to_end([tp])
        else:
            consumer.seek(tp, int(offset))
        return
    if topic is not None:
        partitions = consumer.partitions_for(topic)
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        return
    pattern = re.compile(options.value("include") or options.value("whitelist"))
    topics = consumer.list_topics()
    consumer.assign([TopicPartition(name, p) for name, parts in sorted(topics.items())
                     if pattern.fullmatch(name) for p in parts])


class Progress:
    """Records printed so far (read after an interruption, too)."""

    count = 0


def process(consumer: Consumer, formatter: DefaultMessageFormatter, output: BinaryIO,
            max_messages: int, timeout_ms: int | None, skip_on_error: bool,
            progress: Progress, reassign: Callable[[], None] | None) -> None:
    """Print records until `max_messages` (-1: forever) or `timeout_ms` without records
    (TimeoutError). `reassign` looks the partitions up again while there are none (reading
    by assignment; None for a group member, whose polls join the group)."""
    poll_timeout = timeout_ms if timeout_ms is not None else 1000
    last_record = time.monotonic()
    while max_messages < 0 or progress.count < max_messages:
        if reassign is not None and not consumer.assignment():
            # No matching partitions yet: look again until some appear.
            if timeout_ms is not None and (time.monotonic() - last_record) * 1000 > timeout_ms:
                raise TimeoutError
            time.sleep(min(0.5, poll_timeout / 1000))
            reassign()
            continue
        limit = None if max_messages < 0 else max_messages - progress.count
        records = consumer.poll(poll_timeout, max_records=limit)
        if not records:
            if timeout_ms is not None and (time.monotonic() - last_record) * 1000 > timeout_ms:
                raise TimeoutError
            continue
        last_record = time.monotonic()
        for record in records:
            progress.count += 1
            try:
                output.write(formatter.format(record))
            except Exception:
                if not skip_on_error:
                    raise
                log.exception("Error processing message, skipping this message: ")
        output.flush()


def execute(options: ParsedOptions) -> int:
    check_args(options)
    offset = _offset_arg(options)
    if options.value("formatter") not in FORMATTERS:
        PARSER.fail(f"{options.value('formatter')}: only the DefaultMessageFormatter is "
                    "available")
    try:
        formatter = DefaultMessageFormatter(formatter_props(options))
    except ValueError as exc:
        PARSER.fail(str(exc))
    try:
        props, group = consumer_props(options)
    except SystemExit as exc:
        return int(exc.code or 0)
    max_messages = options.value("max-messages")
    timeout_ms = options.value("timeout-ms")
    if timeout_ms is not None and timeout_ms < 0:
        timeout_ms = None
    progress = Progress()
    code = 0
    consumer: Consumer | None = None
    try:
        consumer = Consumer(props)
        if group is None:
            assign(consumer, options, offset)
        else:
            subscribe(consumer, options)
        process(consumer, formatter, sys.stdout.buffer,
                -1 if max_messages is None else max_messages, timeout_ms,
                options.has("skip-message-on-error"), progress,
                None if group is not None else lambda: assign(consumer, options, offset))
    except KeyboardInterrupt:
        code = 130
    except TimeoutError:
        log.error("Error processing message, terminating consumer process: "
                  "org.apache.kafka.common.errors.TimeoutException")
    except (KafkaError, KafkaConfigError, FileNotFoundError) as exc:
        log.error("Error processing message, terminating consumer process: %s", exc)
        code = 1 if isinstance(exc, (KafkaConfigError, FileNotFoundError)) else 0
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except KeyboardInterrupt:
                code = 130
        print(f"Processed a total of {progress.count} messages", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
