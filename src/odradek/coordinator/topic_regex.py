"""Subscription regular expressions (ConsumerGroupHeartbeat's SubscribedTopicRegex) with Kafka's
re2j syntax, matched with Python's `re` against whole topic names.

re2j (RE2) has no backtracking constructs: backreferences, lookahead and lookbehind, atomic
groups, conditionals, comments and possessive quantifiers are syntax errors there, so they are
refused here too, with re2j's descriptions (what Kafka puts in its INVALID_REGULAR_EXPRESSION
message). re2j's `(?<name>...)` groups are Python's `(?P<name>...)`. What is left is the syntax
both engines share.
"""

from __future__ import annotations

import functools
import re

#: re2j's PatternSyntaxException descriptions
INVALID_PERL_OP = "invalid or unsupported Perl syntax"
INVALID_ESCAPE = "invalid escape sequence"
BAD_REPEAT_OP = "bad repetition operator"

_QUANTIFIER_ENDS = "*+?}"


class Re2jSyntaxError(ValueError):
    """A regex re2j refuses; `description` is re2j's (getDescription())."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


def _translate(regex: str) -> str:
    """The Python regex for an re2j regex; Re2jSyntaxError for what re2j refuses."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(regex):
        char = regex[i]
        if char == "\\":
            escaped = regex[i + 1:i + 2]
            if not in_class and escaped.isdigit() and escaped != "0":
                raise Re2jSyntaxError(INVALID_ESCAPE)  # a backreference
            out.append(regex[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            out.append(char)
            i += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            # a leading ] (or ^]) is a literal member of the class
            for literal in ("^]", "]", "^"):
                if regex.startswith(literal, i + 1):
                    out.append(literal)
                    i += len(literal)
                    break
            i += 1
            continue
        if char == "(" and regex.startswith("(?", i):
            rest = regex[i + 2:]
            if rest.startswith("<") and not rest.startswith(("<=", "<!")):
                out.append("(?P<")  # a named group, re2j's Java spelling
                i += 3
                continue
            if rest.startswith(("=", "!", "<=", "<!", ">", "(", "#", "P=")):
                raise Re2jSyntaxError(INVALID_PERL_OP)
        if char == "+" and out and out[-1] and out[-1][-1] in _QUANTIFIER_ENDS and \
                not (len(out[-1]) == 2 and out[-1][0] == "\\"):
            raise Re2jSyntaxError(BAD_REPEAT_OP)  # a possessive quantifier
        out.append(char)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def compile_re2j(regex: str) -> re.Pattern[str]:
    """The compiled pattern of an re2j regex. Raises Re2jSyntaxError for what re2j refuses and
    re.error for what neither engine accepts."""
    return re.compile(_translate(regex))


def description(error: Exception) -> str:
    """What Kafka's INVALID_REGULAR_EXPRESSION message says of a refused regex."""
    if isinstance(error, Re2jSyntaxError):
        return error.description
    return str(error)
