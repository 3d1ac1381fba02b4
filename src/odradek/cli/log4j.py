"""Logging configured from a log4j 1.x style properties file, as Kafka's config/log4j.properties:

    log4j.rootLogger=INFO, stdout
    log4j.appender.stdout=org.apache.log4j.ConsoleAppender
    log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
    log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
    log4j.appender.requestAppender=org.apache.log4j.RollingFileAppender
    log4j.appender.requestAppender.File=${kafka.logs.dir}/kafka-request.log
    log4j.appender.requestAppender.MaxFileSize=100MB
    log4j.appender.requestAppender.MaxBackupIndex=10
    log4j.logger.kafka.request.logger=DEBUG, requestAppender
    log4j.additivity.kafka.request.logger=false

Appenders: ConsoleAppender (stdout; `.Target=System.err` for stderr) and the file appenders
(FileAppender, RollingFileAppender, DailyRollingFileAppender), all written by a
`logging.handlers.RotatingFileHandler` (`MaxFileSize`, default 10MB; `MaxBackupIndex`, default
1; a DailyRollingFileAppender rotates by size too). `${kafka.logs.dir}` is `$LOG_DIR`, else
`logs` under the working directory, as kafka-run-class.sh sets it. Levels: TRACE and DEBUG
are DEBUG, WARN is WARNING, FATAL is CRITICAL, OFF disables the logger.

The file is named as Kafka names it, with `KAFKA_LOG4J_OPTS=-Dlog4j.configuration=file:PATH`,
or with `odradek server-start --log4j PATH`.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import sys
from pathlib import Path

from odradek.config.properties import load_properties

_LEVELS = {"ALL": logging.DEBUG, "TRACE": logging.DEBUG, "DEBUG": logging.DEBUG,
           "INFO": logging.INFO, "WARN": logging.WARNING, "ERROR": logging.ERROR,
           "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
_PATTERN = {"d": "%(asctime)s", "p": "%(log4j_level)s", "m": "%(message)s", "c": "%(name)s",
            "t": "%(threadName)s", "n": "", "%": "%%"}
_SIZE = re.compile(r"(\d+)\s*(KB|MB|GB)?", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
_OPTION = re.compile(r"-Dlog4j\.configuration=(?:file:)?(\S+)")


_LOG4J_LEVEL_NAMES = {logging.WARNING: "WARN", logging.CRITICAL: "FATAL"}


class Log4jFormatter(logging.Formatter):
    """PatternLayout's level names: WARN and FATAL where Python says WARNING and CRITICAL."""

    def format(self, record: logging.LogRecord) -> str:
        record.log4j_level = _LOG4J_LEVEL_NAMES.get(record.levelno, record.levelname)
        return super().format(record)


def config_path_from_env(environ: dict[str, str] | None = None) -> str | None:
    """The file KAFKA_LOG4J_OPTS names (`-Dlog4j.configuration=file:PATH`), if any."""
    match = _OPTION.search((environ or os.environ).get("KAFKA_LOG4J_OPTS", ""))
    return match[1] if match else None


def _level(text: str) -> int:
    try:
        return _LEVELS[text.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown log4j level {text!r}") from None


def _format(pattern: str) -> str:
    """log4j's PatternLayout conversion (%d %p %m %c %t %n, with optional {..} and widths)."""
    def convert(match: re.Match[str]) -> str:
        return _PATTERN.get(match[1], match[0])
    return re.sub(r"%-?\d*(?:\.\d+)?([dpmctn%])(?:\{[^}]*\})?", convert, pattern)


def _size(text: str) -> int:
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid log4j file size {text!r}")
    return int(match[1]) * _SIZE_UNITS[match[2].upper() if match[2] else None]


def _expand(text: str) -> str:
    logs_dir = os.environ.get("LOG_DIR") or str(Path.cwd() / "logs")
    return text.replace("${kafka.logs.dir}", logs_dir)


def _handler(name: str, props: dict[str, str]) -> logging.Handler:
    prefix = f"log4j.appender.{name}"
    kind = props.get(prefix, "").rsplit(".", 1)[-1]
    if kind == "ConsoleAppender":
        target = props.get(f"{prefix}.Target", "System.out")
        handler: logging.Handler = logging.StreamHandler(
            sys.stderr if target == "System.err" else sys.stdout)
    elif kind in ("FileAppender", "RollingFileAppender", "DailyRollingFileAppender"):
        path = Path(_expand(props[f"{prefix}.File"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=_size(props.get(f"{prefix}.MaxFileSize", "10MB")),
            backupCount=int(props.get(f"{prefix}.MaxBackupIndex", "1")), encoding="utf-8")
    else:
        raise ValueError(f"unsupported log4j appender {name}: {props.get(prefix)!r}")
    pattern = props.get(f"{prefix}.layout.ConversionPattern", "[%d] %p %m (%c)%n")
    handler.setFormatter(Log4jFormatter(_format(pattern)))
    return handler


def configure(path: str | Path) -> None:
    """Applies a log4j properties file: the root logger's and each named logger's level and
    appenders, and additivity (false: a logger's lines go only to its own appenders)."""
    props = {k: str(v) for k, v in load_properties(path).items()}
    handlers: dict[str, logging.Handler] = {}

    def apply(logger: logging.Logger, spec: str) -> None:
        level, *appenders = [part.strip() for part in spec.split(",")]
        if level:
            logger.setLevel(_level(level))
        for appender in filter(None, appenders):
            if appender not in handlers:
                handlers[appender] = _handler(appender, props)
            logger.addHandler(handlers[appender])

    root_spec = props.get("log4j.rootLogger")
    if root_spec is not None:
        root = logging.getLogger()
        for existing in list(root.handlers):
            root.removeHandler(existing)
        apply(root, root_spec)
    for key, spec in props.items():
        if key.startswith("log4j.logger."):
            apply(logging.getLogger(key[len("log4j.logger."):]), spec)
        elif key.startswith("log4j.additivity."):
            logging.getLogger(key[len("log4j.additivity."):]).propagate = \
                spec.strip().lower() != "false"
