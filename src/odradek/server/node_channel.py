"""Requests from this node to other nodes: Raft's to the voters' controller listeners, the
broker lifecycle's to the active controller (on a separate channel, so heartbeats never queue
behind a long-polling Fetch), and the replica fetchers' to a partition leader's inter-broker
listener (one channel per fetcher).

One `odradek.client.connection.Connection` per destination node, to its endpoint (a
`controller.quorum.voters` entry, or for a dynamic quorum what Raft knows: the VotersRecord's
endpoints, a leader named in a Fetch answer, a bootstrap server by its negative id) (Kafka's controllers use the same NetworkClient as its clients). A request goes out at
the version Raft encodes it at (`raft.messages.API_VERSIONS`) and times out after
`controller.quorum.request.timeout.ms`; any failure (refused, reset, timed out) is raised to the
quorum, which tells the Raft client (`handle_send_failure`, retried after
`controller.quorum.retry.backoff.ms`). A node whose connection cannot be opened is not dialled
again before a reconnect backoff (doubling up to a second, like Kafka's
`reconnect.backoff.ms`/`reconnect.backoff.max.ms`), so a dead node costs a connect attempt per
backoff rather than per retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from odradek.client.connection import Connection
from odradek.client.errors import KafkaConnectionError
from odradek.client.security import ClientSecurity
from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.protocol import messages as m
from odradek.raft.messages import API_VERSIONS

log = logging.getLogger("odradek.node.channel")

RECONNECT_BACKOFF_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1000


class NodeChannel:
    def __init__(self, node_id: int,
                 endpoints: Mapping[int, tuple[str, int]] | Callable[[int], tuple[str, int] | None],
                 *, request_timeout_ms: int, clock: Clock = SYSTEM_CLOCK,
                 client_id: str | None = None, security: ClientSecurity | None = None) -> None:
        """`endpoints`: node id -> (host, port), or a function that looks one up (it may learn
        new ones as it goes). `security`: TLS and SASL of the listener the peers are reached
        on (inter-broker or controller)."""
        self.node_id = node_id
        self.security = security
        self.client_id = client_id or f"raft-client-{node_id}"
        if callable(endpoints):
            self.resolve = endpoints
        else:
            fixed = dict(endpoints)
            self.resolve = fixed.get
        self.request_timeout_ms = request_timeout_ms
        self.clock = clock
        self._connections: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._reconnect_at: dict[int, float] = {}  # monotonic seconds
        self._reconnect_backoff_ms: dict[int, int] = {}
        self._closed = False

    async def send(self, destination: int, request: m.Message,
                   api_version: int | None = None) -> m.Message:
        """Sends `request` to node `destination` (at `api_version`, by default the version
        Raft encodes it at) and returns its answer; raises KafkaConnectionError (or a timeout)
        if it cannot be delivered or answered."""
        connection = await self._connection(destination)
        version = API_VERSIONS[type(request)] if api_version is None else api_version
        return await connection.send(request, api_version=version,
                                     timeout_ms=self.request_timeout_ms)

    async def _connection(self, destination: int) -> Connection:
        if self._closed:
            raise KafkaConnectionError("the raft channel is closed")
        existing = self._connections.get(destination)
        if existing is not None and existing.ready:
            return existing
        lock = self._connecting.setdefault(destination, asyncio.Lock())
        async with lock:
            existing = self._connections.get(destination)
            if existing is not None and existing.ready:
                return existing
            if self.clock.monotonic() < self._reconnect_at.get(destination, 0.0):
                raise KafkaConnectionError(f"node {destination}: reconnect backoff")
            endpoint = self.resolve(destination)
            if endpoint is None:
                raise KafkaConnectionError(f"node {destination} has no known endpoint")
            host, port = endpoint
            connection = Connection(host, port, node_id=destination,
                                    client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms,
                                    connect_timeout_ms=self.request_timeout_ms,
                                    ssl_context=self.security.ssl_context if self.security
                                    else None,
                                    sasl=self.security.sasl if self.security else None)
            try:
                await connection.connect()
            except Exception:
                backoff = min(self._reconnect_backoff_ms.get(destination, 0) * 2
                              or RECONNECT_BACKOFF_MS, RECONNECT_BACKOFF_MAX_MS)
                self._reconnect_backoff_ms[destination] = backoff
                self._reconnect_at[destination] = self.clock.monotonic() + backoff / 1000
                raise
            self._reconnect_backoff_ms.pop(destination, None)
            self._reconnect_at.pop(destination, None)
            if existing is not None:
                await existing.close()
            self._connections[destination] = connection
            log.info("node %d: connected to node %d at %s:%d", self.node_id, destination,
                     host, port)
            return connection

    async def close(self) -> None:
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()
