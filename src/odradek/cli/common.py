"""Helpers shared by the `odradek <tool>` commands: argument parsing that fails like Kafka's
tools (usage on stderr, exit code 1), one-line error reporting and logging setup."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import NoReturn, TextIO

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"  # Kafka's log4j layout


class ToolError(Exception):
    """A failure a tool reports as one line on stderr with exit code 1 (Kafka's TerseFailure)."""


class UsageExit(Exception):
    """Raised instead of exiting, so a tool's `main()` returns the code to its caller."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class ToolArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that fails with exit code 1 on bad arguments (as Kafka's tools do) and
    raises `UsageExit` instead of calling sys.exit."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise UsageExit(1)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message, file=sys.stderr, end="")
        raise UsageExit(status)


def configure_logging(level: int = logging.WARNING, stream: TextIO | None = None) -> None:
    """Kafka-style log lines; a no-op when the process has configured logging already."""
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=stream or sys.stderr)


def run_tool(body: Callable[[list[str]], int], argv: list[str]) -> int:
    """Runs a tool's body and turns `UsageExit` / `ToolError` into exit codes."""
    try:
        return body(argv)
    except UsageExit as exc:
        return exc.code
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
