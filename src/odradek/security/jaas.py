"""Kafka's JAAS config line syntax (`sasl.jaas.config`), as Kafka's JaasConfig parses it:

    <LoginModuleClass> <required|requisite|sufficient|optional> [key=value ...];

one or more entries, each ended by `;`. Values are quoted (`"..."` or `'...'`, with backslash
escapes) or bare words; `//` and `/* */` comments are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.config.types import ConfigError

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in "-_$.:/@+"


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, value) tokens: 'word', 'quoted', or a one-character symbol."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ConfigError("Invalid JAAS config: unterminated comment")
            i = end + 2
        elif ch in "\"'":
            quote, i, value = ch, i + 1, []
            while True:
                if i >= n:
                    raise ConfigError("Invalid JAAS config: unterminated quoted value")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                    continue
                i += 1
                if c == quote:
                    break
                value.append(c)
            out.append(("quoted", "".join(value)))
        elif _is_word_char(ch):
            start = i
            while i < n and _is_word_char(text[i]):
                i += 1
            out.append(("word", text[start:i]))
        else:
            out.append((ch, ch))
            i += 1
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    """The login modules of a `sasl.jaas.config` value; ConfigError when it is malformed."""
    tokens = _tokens(text or "")
    modules: list[LoginModule] = []
    pos = 0

    def take(kind: str | None = None) -> tuple[str, str]:
        nonlocal pos
        if pos >= len(tokens):
            raise ConfigError("Invalid JAAS config: unexpected end of the value "
                              "(each login module must end with ';')")
        token = tokens[pos]
        if kind is not None and token[0] != kind:
            raise ConfigError(f"Invalid JAAS config: unexpected '{token[1]}'")
        pos += 1
        return token

    while pos < len(tokens):
        name = take("word")[1]
        flag = take("word")[1].lower()
        if flag not in CONTROL_FLAGS:
            raise ConfigError(f"Invalid JAAS config: invalid control flag '{flag}'")
        options: dict[str, str] = {}
        while True:
            kind, value = take()
            if kind == ";":
                break
            if kind != "word":
                raise ConfigError(f"Invalid JAAS config: unexpected '{value}'")
            take("=")
            options[value] = take()[1]
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise ConfigError("Login module not specified in JAAS config")
    return modules


def jaas_options(text: str) -> dict[str, str]:
    """The options of a JAAS value's (first) login module."""
    return dict(parse_jaas_config(text)[0].options)


def plain_users(text: str) -> dict[str, str]:
    """PlainLoginModule's `user_<name>="<password>"` options -> {name: password}."""
    users: dict[str, str] = {}
    for module in parse_jaas_config(text):
        for key, value in module.options.items():
            if key.startswith("user_"):
                users[key[len("user_"):]] = value
    return users
