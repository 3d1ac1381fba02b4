"""The one Java `.properties` reader (server.properties, meta.properties, client and tool config
files): comments, `=`/`:`/space separators, line continuations and escapes, as
`java.util.Properties.load` reads them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from odradek.config.types import ConfigError

_PROPERTIES_WHITESPACE = " \t\f"
_NATURAL_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _ends_with_odd_backslashes(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _logical_lines(text: str) -> Iterable[str]:
    """Joins continued lines, drops comments and blank lines (java.util.Properties' LineReader)."""
    natural = _NATURAL_LINE_BREAK.split(text)
    index = 0
    while index < len(natural):
        line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue  # a comment never continues, even when it ends with a backslash
        parts = []
        while _ends_with_odd_backslashes(line):
            parts.append(line[:-1])
            if index >= len(natural):
                line = ""
                break
            # Leading whitespace of a continuation line is dropped; a blank one ends the entry.
            line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
            index += 1
        parts.append(line)
        yield "".join(parts)


def _unescape(text: str) -> str:
    """Properties.loadConvert: \\t \\n \\r \\f, \\uXXXX, and \\c -> c for any other c."""
    out = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\":
            out.append(char)
            continue
        if index >= len(text):
            break
        char = text[index]
        index += 1
        if char == "u":
            digits = text[index:index + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError("Malformed \\uxxxx encoding.")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(char, char))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped '=', ':' or whitespace; one separator may follow."""
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    preceding_backslash = False
    for index, char in enumerate(line):
        if char in "=:" and not preceding_backslash:
            key_end, value_start, has_separator = index, index + 1, True
            break
        if char in _PROPERTIES_WHITESPACE and not preceding_backslash:
            key_end, value_start = index, index + 1
            break
        preceding_backslash = char == "\\" and not preceding_backslash
    while value_start < len(line):
        char = line[value_start]
        if char not in _PROPERTIES_WHITESPACE:
            if not has_separator and char in "=:":
                has_separator = True
            else:
                break
        value_start += 1
    return line[:key_end], line[value_start:]


def parse_properties(text: str) -> dict[str, str]:
    """Parses Java `.properties` text like `Properties.load`; a repeated key's last value wins."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        result[_unescape(key)] = _unescape(value)
    return result


def load_properties(path: str | Path) -> dict[str, str]:
    """Reads a `.properties` file (UTF-8; Latin-1, Java's own encoding, when not valid UTF-8)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"Configuration file {path} does not exist") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"Configuration file {path} is a directory") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text)


def parse_override(item: str) -> tuple[str, str]:
    """One `--override key=value` item (split at the first '=')."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"Invalid override '{item}': expected property=value")
    return key.strip(), value

