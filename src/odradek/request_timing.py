"""Where a request's time goes, as Kafka's request metrics split it.

A request's total time is its queue time (arrival to the start of its handling: it waited
behind earlier requests of its connection), local time (the handler working), remote time
(waiting for something else: replicas to acknowledge an acks=all produce, data for a fetch's
long poll, a coordinator's write to commit) and response send time. The network layer starts a
`RequestTiming` for each request and makes it current (a context variable, so it follows the
request into whatever awaits it); the places that wait for something remote wrap the wait in
`waiting_remotely()`, which adds to the current request's remote time. No request current (a
background task waiting): nothing is recorded.

This module has no dependencies, so the layers that wait (the commit boundary, purgatories)
can mark their waits without knowing the network layer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class RequestTiming:
    arrived_ns: int  # the request's frame was read off the socket
    started_ns: int = 0  # its handling began
    remote_ns: int = 0  # time spent waiting remotely during handling


CURRENT_REQUEST: ContextVar[RequestTiming | None] = ContextVar("current_request", default=None)


@contextmanager
def waiting_remotely() -> Iterator[None]:
    timing = CURRENT_REQUEST.get()
    if timing is None:
        yield
        return
    started = time.monotonic_ns()
    try:
        yield
    finally:
        timing.remote_ns += time.monotonic_ns() - started
