"""Command-line options the way Kafka's tools parse them (joptsimple), for the client tools.

* ``--name value``, ``--name=value``; unique prefixes of names are accepted; options may repeat
  (``all()`` gives every value); non-option arguments are ignored, as joptsimple does.
* Errors read like joptsimple's (``foo is not a recognized option``, ``Option topic requires an
  argument``) and, like Kafka's ``CommandLineUtils.printUsageAndExit``, usage problems print
  the message and the option table on stderr and exit with code 1. ``--help`` (and no
  arguments at all) does the same with the tool's description; ``--version`` prints the version
  on stdout and exits 0.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "Option",
    "OptionParser",
    "ParsedOptions",
    "ToolExit",
    "UsageError",
    "load_properties_file",
    "parse_key_value",
    "run",
]

_LEFT_WIDTH, _RIGHT_WIDTH = 41, 39
_TYPE_NAMES = {str: "String", int: "Integer", float: "Double"}


class UsageError(Exception):
    """A usage problem: the message, then the option table, on stderr; exit code 1."""


class ToolExit(Exception):
    """Stop the tool with this exit code (after it printed what it had to say)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    #: what the argument is ("server to connect to"); None for a flag without argument
    argument: str | None = None
    type: Callable[[str], Any] = str
    default: Any = None
    #: joptsimple's withOptionalArg: the option may be given without a value
    optional_argument: bool = False
    #: the type name shown in the usage (defaults from `type`)
    type_name: str | None = None

    @property
    def takes_argument(self) -> bool:
        return self.argument is not None or self.optional_argument

    def __str__(self) -> str:
        return f"[{self.name}]"  # how joptsimple names an option in messages


@dataclass
class ParsedOptions:
    values: dict[str, list[Any]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.values

    def value(self, name: str) -> Any:
        values = self.values.get(name)
        return values[-1] if values else self.defaults.get(name)

    def all(self, name: str) -> list[Any]:
        """Every value given (joptsimple's valuesOf: an optional argument left out adds none)."""
        return [value for value in self.values.get(name, []) if value is not None]


class OptionParser:
    def __init__(self, options: Sequence[Option], description: str,
                 version: bool = True, version_help: str = "Display Kafka version.") -> None:
        self.description = description
        extra = [Option("help", "Print usage information.")]
        if version:
            extra.append(Option("version", version_help))
        self.options = sorted([*options, *extra], key=lambda o: o.name)
        self.by_name = {option.name: option for option in self.options}

    def resolve(self, name: str) -> Option:
        option = self.by_name.get(name)
        if option is not None:
            return option
        matches = [o for o in self.options if o.name.startswith(name)] if name else []
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise UsageError(f"Option '{name}' is ambiguous")
        raise UsageError(f"{name} is not a recognized option")

    def parse(self, argv: Sequence[str]) -> ParsedOptions:
        parsed = ParsedOptions(defaults={o.name: o.default for o in self.options
                                         if o.default is not None})
        args = list(argv)
        index = 0
        while index < len(args):
            arg = args[index]
            index += 1
            if arg == "--":
                break
            if not arg.startswith("-") or arg == "-":
                continue
            name, has_value, inline = arg.lstrip("-").partition("=")
            option = self.resolve(name)
            if not option.takes_argument:
                if has_value:
                    raise UsageError(f"Option {option.name} does not take an argument")
                parsed.values.setdefault(option.name, []).append(True)
                continue
            if has_value:
                text: str | None = inline
            elif option.optional_argument:
                # An optional argument is the next word unless that is another option.
                if index < len(args) and not args[index].startswith("-"):
                    text = args[index]
                    index += 1
                else:
                    text = None
            elif index < len(args):
                text = args[index]
                index += 1
            else:
                raise UsageError(f"Option {option.name} requires an argument")
            if text is None:
                value = None
            else:
                try:
                    value = option.type(text)
                except ValueError:
                    raise UsageError(f"Cannot parse argument '{text}' of option "
                                     f"{option.name}") from None
            parsed.values.setdefault(option.name, []).append(value)
        return parsed

    def usage(self) -> str:
        """The option table in joptsimple's layout."""
        lines = [f"{'Option':<{_LEFT_WIDTH}}{'Description':<{_RIGHT_WIDTH}}".rstrip(),
                 f"{'------':<{_LEFT_WIDTH}}{'-----------':<{_RIGHT_WIDTH}}".rstrip()]
        for option in self.options:
            left = f"--{option.name}"
            if option.takes_argument:
                type_name = option.type_name or _TYPE_NAMES.get(option.type, "String")
                described = f"{type_name}: {option.argument}" if option.argument else type_name
                left += f" [{described}]" if option.optional_argument else f" <{described}>"
            description = option.help
            if option.default is not None:
                description += f" (default: {option.default})"
            left_lines = textwrap.wrap(left, _LEFT_WIDTH - 1, subsequent_indent="  ")
            right_lines: list[str] = []
            for paragraph in description.split("\n"):
                if paragraph.startswith("\t"):
                    right_lines.append(paragraph)  # a pre-formatted list entry: not wrapped
                    continue
                right_lines.extend(textwrap.wrap(paragraph, _RIGHT_WIDTH - 2,
                                                 break_on_hyphens=False,
                                                 break_long_words=False) or [""])
            right_lines = right_lines[:1] + ["  " + line for line in right_lines[1:]]
            for row in range(max(len(left_lines), len(right_lines))):
                left_part = left_lines[row] if row < len(left_lines) else ""
                right_part = right_lines[row] if row < len(right_lines) else ""
                lines.append(f"{left_part:<{_LEFT_WIDTH}}{right_part}".rstrip())
        return "\n".join(lines)

    def fail(self, message: str) -> NoReturn:
        """Kafka's printUsageAndExit: message and usage on stderr, exit code 1."""
        raise UsageError(message)

    def parse_or_help(self, argv: Sequence[str]) -> ParsedOptions:
        """Parse; handle ``--help`` / no arguments (usage, exit 1, as Kafka's tools) and
        ``--version`` (exit 0)."""
        options = self.parse(argv)
        if not argv or options.has("help"):
            raise UsageError(self.description)
        if options.has("version"):
            from odradek.cli.main import version_text

            print(version_text())
            raise ToolExit(0)
        return options

    def require(self, options: ParsedOptions, *names: str) -> None:
        for name in names:
            if not options.has(name):
                self.fail(f'Missing required argument "{self.by_name[name]}"')


def parse_key_value(items: Sequence[str]) -> dict[str, str]:
    """Kafka's parseKeyValueArgs: ``k=v`` (the value may hold '='; a missing value is '')."""
    props: dict[str, str] = {}
    for item in items:
        key, _sep, value = item.partition("=")
        props[key] = value
    return props


def load_properties_file(path: str) -> dict[str, str]:
    """A Java properties file, as Kafka's Utils.loadProps reads it."""
    from odradek.config import ConfigError, load_properties

    try:
        return load_properties(path)
    except ConfigError as exc:
        if "does not exist" in str(exc):
            raise FileNotFoundError(f"{path} (No such file or directory)") from None
        raise


def run(parser: OptionParser, body: Callable[[ParsedOptions], int], argv: Sequence[str]) -> int:
    """Parse `argv` and run `body`, turning usage problems into Kafka's output and exit codes."""
    try:
        options = parser.parse_or_help(argv)
        return body(options)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        print(parser.usage(), file=sys.stderr)
        return 1
    except ToolExit as exc:
        return exc.code


def read_text_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} (No such file or directory)") from None


def admin_props(options: ParsedOptions, bootstrap: str,
                config_option: str = "command-config") -> dict[str, Any]:
    """Admin client properties: the ``--command-config`` file, then the bootstrap servers."""
    props: dict[str, Any] = {}
    if options.has(config_option):
        props.update(load_properties_file(options.value(config_option)))
    props["bootstrap.servers"] = bootstrap
    return props


# Kafka's exception class names that do not follow from the error code's name.
_JAVA_EXCEPTIONS = {
    "INVALID_CONFIG": "InvalidConfigurationException",
    "REQUEST_TIMED_OUT": "TimeoutException",
    "NETWORK_EXCEPTION": "NetworkException",
    "UNKNOWN_SERVER_ERROR": "UnknownServerException",
    "CORRUPT_MESSAGE": "CorruptRecordException",
    "MESSAGE_TOO_LARGE": "RecordTooLargeException",
    "INVALID_TOPIC_EXCEPTION": "InvalidTopicException",
}


def java_error(error: Any) -> str:
    """A KafkaError as Java prints the matching exception:
    ``org.apache.kafka.common.errors.OffsetOutOfRangeException: <message>``."""
    name = error.code.name
    simple = _JAVA_EXCEPTIONS.get(name) or \
        "".join(part.capitalize() for part in name.split("_")) + "Exception"
    return f"org.apache.kafka.common.errors.{simple}: {error.message}"
