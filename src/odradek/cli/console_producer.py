"""`odradek console-producer`: Kafka's kafka-console-producer.sh.

Reads lines from stdin and produces one record per line. Options, defaults and the line format
(``--property parse.key=true key.separator=:``, headers with ``parse.headers``, ``null.marker``,
``ignore.error``) are Kafka 3.8's ConsoleProducer and LineMessageReader; a ``>`` prompt is
printed when stdin and stdout are a terminal. End of input flushes and exits 0; Ctrl-C flushes
what was read and exits 130, as the JVM does after its shutdown hook.
"""

from __future__ import annotations

import io
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    java_error,
    load_properties_file,
    parse_key_value,
    run,
)
from odradek.client import KafkaConfigError, KafkaError, Producer, RecordMetadata

# Kafka's logger names, so the tool's log lines read like the Java tool's.
error_log = logging.getLogger("org.apache.kafka.clients.producer.internals.ErrorLoggingCallback")

READER_CLASSES = ("org.apache.kafka.tools.LineMessageReader", "kafka.tools.LineMessageReader")

OPTIONS = [
    Option("batch-size", "Number of messages to send in a single batch if they are not being "
           "sent synchronously. please note that this option will be replaced if "
           "max-partition-memory-bytes is also set", "size", int, 16384),
    Option("bootstrap-server", "REQUIRED unless --broker-list(deprecated) is specified. The "
           "server(s) to connect to. The broker list string in the form HOST1:PORT1,HOST2:PORT2.",
           "server to connect to"),
    Option("broker-list", "DEPRECATED, use --bootstrap-server instead; ignored if "
           "--bootstrap-server is specified.  The broker list string in the form "
           "HOST1:PORT1,HOST2:PORT2.", "broker-list"),
    Option("compression-codec", "The compression codec: either 'none', 'gzip', 'snappy', "
           "'lz4', or 'zstd'.If specified without value, then it defaults to 'gzip'",
           "compression-codec", optional_argument=True),
    Option("line-reader", "The class name of the class to use for reading lines from standard "
           "in. By default each line is read as a separate message.", "reader_class",
           default=READER_CLASSES[0]),
    Option("max-block-ms", "The max time that the producer will block for during a send "
           "request.", "max block on send", int, 60000, type_name="Long"),
    Option("max-memory-bytes", "The total memory used by the producer to buffer records "
           "waiting to be sent to the server. This is the option to control `buffer.memory` in "
           "producer configs.", "total memory in bytes", int, 33554432, type_name="Long"),
    Option("max-partition-memory-bytes", "The buffer size allocated for a partition. When "
           "records are received which are smaller than this size the producer will attempt "
           "to optimistically group them together until this size is reached. This is the "
           "option to control `batch.size` in producer configs.",
           "memory in bytes per partition", int, 16384),
    Option("message-send-max-retries", "Brokers can fail receiving the message for multiple "
           "reasons, and being unavailable transiently is just one of them. This property "
           "specifies the number of retries before the producer give up and drop this message. "
           "This is the option to control `retries` in producer configs.", None, int, 3),
    Option("metadata-expiry-ms", "The period of time in milliseconds after which we force a "
           "refresh of metadata even if we haven't seen any leadership changes. This is the "
           "option to control `metadata.max.age.ms` in producer configs.",
           "metadata expiration interval", int, 300000, type_name="Long"),
    Option("producer-property", "A mechanism to pass user-defined properties in the form "
           "key=value to the producer. ", "producer_prop"),
    Option("producer.config", "Producer config properties file. Note that [producer-property] "
           "takes precedence over this config.", "config file"),
    Option("property", "A mechanism to pass user-defined properties in the form key=value to "
           "the message reader. This allows custom configuration for a user-defined message "
           "reader.Default properties include:\n parse.key=false\n parse.headers=false\n "
           "ignore.error=false\n key.separator=\\t\n headers.delimiter=\\t\n "
           "headers.separator=,\n headers.key.separator=:\n null.marker=   When set, any fields "
           "(key, value and headers) equal to this will be replaced by null\nDefault parsing "
           "pattern when:\n parse.headers=true and parse.key=true:\n  "
           "\"h1:v1,h2:v2...\\tkey\\tvalue\"\n parse.key=true:\n  \"key\\tvalue\"\n "
           "parse.headers=true:\n  \"h1:v1,h2:v2...\\tvalue\"", "prop"),
    Option("reader-config", "Config properties file for the message reader. Note that "
           "[property] takes precedence over this config.", "config file"),
    Option("request-required-acks", "The required `acks` of the producer requests",
           "request required acks", default="-1"),
    Option("request-timeout-ms", "The ack timeout of the producer requests. Value must be "
           "non-negative and non-zero.", "request timeout ms", int, 1500),
    Option("retry-backoff-ms", "Before each retry, the producer refreshes the metadata of "
           "relevant topics. Since leader election takes a bit of time, this property specifies "
           "the amount of time that the producer waits before refreshing the metadata. This is "
           "the option to control `retry.backoff.ms` in producer configs.", None, int, 100,
           type_name="Long"),
    Option("socket-buffer-size", "The size of the tcp RECV size. This is the option to control "
           "`send.buffer.bytes` in producer configs.", "size", int, 102400),
    Option("sync", "If set message send requests to the brokers are synchronously, one at a "
           "time as they arrive."),
    Option("timeout", "If set and the producer is running in asynchronous mode, this gives the "
           "maximum amount of time a message will queue awaiting sufficient batch size. The "
           "value is given in ms. This is the option to control `linger.ms` in producer "
           "configs.", "timeout_ms", int, 1000, type_name="Long"),
    Option("topic", "REQUIRED: The topic id to produce messages to.", "topic"),
]
PARSER = OptionParser(OPTIONS, "This tool helps to read data from standard input and publish "
                               "it to Kafka.")

# (producer config key, option) pairs merged like Kafka's CommandLineUtils.maybeMergeOptions:
# an explicit option wins, then a value from --producer.config/--producer-property, then the
# option's default.
_MERGED_OPTIONS = [
    ("linger.ms", "timeout"),
    ("acks", "request-required-acks"),
    ("request.timeout.ms", "request-timeout-ms"),
    ("retries", "message-send-max-retries"),
    ("retry.backoff.ms", "retry-backoff-ms"),
    ("send.buffer.bytes", "socket-buffer-size"),
    ("buffer.memory", "max-memory-bytes"),
    ("batch.size", "batch-size"),
    ("batch.size", "max-partition-memory-bytes"),
    ("metadata.max.age.ms", "metadata-expiry-ms"),
    ("max.block.ms", "max-block-ms"),
]


class ReaderError(Exception):
    """Kafka's KafkaException from the line reader."""


@dataclass
class Line:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class LineMessageReader:
    """Kafka's LineMessageReader: one record per line, optional headers and key."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        self.parse_key = flag("parse.key")
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = flag("parse.headers")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = flag("ignore.error")
        self.null_marker = props.get("null.marker")
        self._headers_pattern = re.compile(self.headers_separator)
        self.line_number = 0
        distinct = [("headers.delimiter", self.headers_delimiter, "headers.separator",
                     self.headers_separator),
                    ("headers.delimiter", self.headers_delimiter, "headers.key.separator",
                     self.headers_key_separator),
                    ("headers.separator", self.headers_separator, "headers.key.separator",
                     self.headers_key_separator)]
        for first, first_value, second, second_value in distinct:
            if first_value == second_value:
                raise ReaderError(f"{first} and {second} may not be equal")
        for name, value in [("key.separator", self.key_separator),
                            ("headers.separator", self.headers_separator),
                            ("headers.delimiter", self.headers_delimiter),
                            ("headers.key.separator", self.headers_key_separator)]:
            if value == self.null_marker:
                raise ReaderError(f"null.marker and {name} may not be equal")

    def _parse(self, enabled: bool, line: str, start: int, separator: str, name: str
               ) -> str | None:
        if not enabled:
            return None
        index = line.find(separator, start)
        if index == -1:
            if self.ignore_error:
                return None
            raise ReaderError(f"No {name} found on line number {self.line_number}: '{line}'")
        return line[start:index]

    def _bytes(self, text: str | None) -> bytes | None:
        if text is None or text == self.null_marker:
            return None
        return text.encode("utf-8")

    def parse_line(self, line: str) -> Line:
        headers_text = self._parse(self.parse_headers, line, 0, self.headers_delimiter,
                                   "headers delimiter")
        header_offset = 0 if headers_text is None else len(headers_text) + \
            len(self.headers_delimiter)
        key = self._parse(self.parse_key, line, header_offset, self.key_separator,
                          "key separator")
        key_offset = 0 if key is None else len(key) + len(self.key_separator)
        value = line[header_offset + key_offset:]
        headers = []
        if headers_text is not None and headers_text != self.null_marker:
            headers = [self._header(pair) for pair in self._headers_pattern.split(headers_text)]
        return Line(self._bytes(key), self._bytes(value), headers)

    def _header(self, pair: str) -> tuple[str, bytes | None]:
        index = pair.find(self.headers_key_separator)
        if index == -1:
            if self.ignore_error:
                return pair, None
            raise ReaderError(f"No header key separator found in pair '{pair}' on line number "
                              f"{self.line_number}")
        name = pair[:index]
        if name == self.null_marker:
            raise ReaderError(f"Header keys should not be equal to the null marker "
                              f"'{self.null_marker}' as they can't be null")
        value = pair[index + len(self.headers_key_separator):]
        return name, None if value == self.null_marker else value.encode("utf-8")

    def read(self, stream: BinaryIO, prompt: bool) -> Iterator[Line]:
        text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)
        while True:
            self.line_number += 1
            if prompt:
                print(">", end="", flush=True)
            line = text.readline()
            if not line:
                return
            yield self.parse_line(line.removesuffix("\n"))


def producer_props(options: ParsedOptions, bootstrap: str) -> dict[str, Any]:
    """Kafka's ConsoleProducerConfig.producerProps."""
    props: dict[str, Any] = {}
    if options.has("producer.config"):
        props.update(load_properties_file(options.value("producer.config")))
    props.update(parse_key_value(options.all("producer-property")))
    props["bootstrap.servers"] = bootstrap
    codec = "none"
    if options.has("compression-codec"):
        codec = options.value("compression-codec") or "gzip"
    props["compression.type"] = codec
    props.setdefault("client.id", "console-producer")
    for key, name in _MERGED_OPTIONS:
        if options.has(name) or key not in props:
            props[key] = str(options.value(name))
    return props


def reader_props(options: ParsedOptions) -> dict[str, str]:
    props: dict[str, str] = {}
    if options.has("reader-config"):
        props.update(load_properties_file(options.value("reader-config")))
    props["topic"] = options.value("topic")
    props.update(parse_key_value(options.all("property")))
    return props


def _error_callback(topic: str, line: Line) -> Any:
    def on_completion(metadata: RecordMetadata | None, error: KafkaError | None) -> None:
        if error is not None:
            key = "null" if line.key is None else f"{len(line.key)} bytes"
            value = "null" if line.value is None else f"{len(line.value)} bytes"
            error_log.error("Error when sending message to topic %s with key: %s, value: %s "
                            "with error: %s", topic, key, value, error)

    return on_completion


def execute(options: ParsedOptions) -> int:
    PARSER.require(options, "topic")
    bootstrap = options.value("bootstrap-server") or options.value("broker-list")
    if bootstrap is None:
        PARSER.fail('Missing required argument "[bootstrap-server]"')
    if options.value("line-reader") not in READER_CLASSES:
        print(f"java.lang.ClassNotFoundException: {options.value('line-reader')}",
              file=sys.stderr)
        return 1
    topic = options.value("topic")
    try:
        reader = LineMessageReader(reader_props(options))
        producer = Producer(producer_props(options, bootstrap))
    except (ReaderError, KafkaConfigError, FileNotFoundError) as exc:
        print(f"{_java_name(exc)}: {exc}", file=sys.stderr)
        return 1
    sync = options.has("sync")
    prompt = sys.stdin.isatty() and sys.stdout.isatty()
    code = 0
    try:
        for line in reader.read(sys.stdin.buffer, prompt):
            if sync:
                producer.send(topic, line.value, line.key, headers=line.headers).get()
            else:
                producer.send(topic, line.value, line.key, headers=line.headers,
                              callback=_error_callback(topic, line))
    except KeyboardInterrupt:
        code = 130
    except ReaderError as exc:
        print(f"{_java_name(exc)}: {exc}", file=sys.stderr)
        code = 1
    except KafkaError as exc:
        print(java_error(exc), file=sys.stderr)
        code = 1
    finally:
        try:
            producer.close()
        except KeyboardInterrupt:
            code = 130
    return code


def _java_name(exc: Exception) -> str:
    if isinstance(exc, KafkaConfigError):
        return "org.apache.kafka.common.config.ConfigException"
    if isinstance(exc, FileNotFoundError):
        return "java.nio.file.NoSuchFileException"
    return "org.apache.kafka.common.KafkaException"


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
