"""Connection limits as Kafka's ConnectionQuotas: `max.connections` (broker-wide),
`max.connections.per.ip` with `max.connections.per.ip.overrides` (`host:count,...`), and
`max.connection.creation.rate` (new connections per second, broker-wide), all dynamic
cluster-wide configs (`odradek configs --entity-type brokers --entity-default`), and the client
quota `connection_creation_rate` of ip entities (`odradek configs --entity-type ips`, an address
or `<default>`): a connection from an address over its rate is closed.

A connection over a count limit is closed at once and the broker keeps serving the others.
Kafka's acceptor stops accepting while `max.connections` is reached (the client waits in the
listen backlog); Odradek's event-loop servers cannot stop accepting, so the connection is
closed instead, as for the per-IP limit. Over the creation rate the new connection is accepted
but not read until the throttle time is over, which is what the client sees of Kafka's delayed
accept. Connections to the controller and inter-broker listeners do not count against the
broker-wide limit and rate, so replication and the quorum are never locked out (Kafka protects
the inter-broker listener the same way).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.config.types import INT_MAX
from odradek.controller.client_quota_control import CONNECTION_CREATION_RATE, IP
from odradek.metadata.image import MetadataImage
from odradek.server.client_quotas import throttle_time_ms
from odradek.server.quotas import Rate

log = logging.getLogger("odradek.network")

MAX_CONNECTIONS = "max.connections"
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES = "max.connections.per.ip.overrides"
MAX_CONNECTION_CREATION_RATE = "max.connection.creation.rate"
DYNAMIC_KEYS = (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP, MAX_CONNECTIONS_PER_IP_OVERRIDES,
                MAX_CONNECTION_CREATION_RATE)


def parse_overrides(value: str) -> dict[str, int]:
    """`host:count,...` -> {ip: count}; host names are resolved once, as Kafka does."""
    overrides: dict[str, int] = {}
    for entry in (value or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, _, count = entry.rpartition(":")
        if not host:
            raise ValueError(f"bad {MAX_CONNECTIONS_PER_IP_OVERRIDES} entry {entry!r}")
        try:
            address = socket.gethostbyname(host)
        except OSError:
            address = host
        overrides[address] = int(count)
        overrides[host] = int(count)
    return overrides


class ConnectionQuotas:
    def __init__(self, static: Mapping[str, object], *, exempt_listeners: frozenset[str] =
                 frozenset(), broker_id: int | None = None, samples: int = 11,
                 window_ms: int = 1000, clock: Clock = SYSTEM_CLOCK) -> None:
        self.static = {key: static.get(key) for key in DYNAMIC_KEYS}
        self.exempt_listeners = exempt_listeners
        self.broker_id = broker_id
        self.clock = clock
        self.creation_rate = Rate(samples, window_ms)
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._configs: object = None
        self._quotas: object = None
        self.samples, self.window_ms = samples, window_ms
        # connection_creation_rate of ip entities: address (None: the default) -> bound
        self.ip_rate_bounds: dict[str | None, float] = {}
        self.ip_rates: dict[str, Rate] = {}
        self._configure(self.static)

    def _configure(self, values: Mapping[str, object]) -> None:
        def number(key: str) -> int:
            value = values.get(key)
            return INT_MAX if value is None or value == "" else int(value)  # type: ignore[arg-type]
        self.max_connections = number(MAX_CONNECTIONS)
        self.max_per_ip = number(MAX_CONNECTIONS_PER_IP)
        self.max_creation_rate = number(MAX_CONNECTION_CREATION_RATE)
        self.overrides = parse_overrides(str(values.get(MAX_CONNECTIONS_PER_IP_OVERRIDES) or ""))

    def apply_image(self, image: MetadataImage) -> None:
        """Dynamic values (per broker over the cluster default) over the static ones."""
        if image.client_quotas is not self._quotas:
            self._quotas = image.client_quotas
            self.ip_rate_bounds = {
                entity[0][1]: values[CONNECTION_CREATION_RATE]
                for entity, values in image.client_quotas.items()
                if len(entity) == 1 and entity[0][0] == IP and CONNECTION_CREATION_RATE in values}
            if not self.ip_rate_bounds:
                self.ip_rates.clear()
        if image.configs is self._configs:
            return
        self._configs = image.configs
        dynamic = image.broker_config(self.broker_id)
        merged = dict(self.static)
        merged.update({key: dynamic[key] for key in DYNAMIC_KEYS if key in dynamic})
        try:
            self._configure(merged)
        except ValueError as exc:  # the controller validates; an odd value keeps the old ones
            log.warning("connection limits unchanged: %s", exc)

    def limit_for(self, host: str) -> int:
        return self.overrides.get(host, self.max_per_ip)

    def on_connect(self, listener: str, host: str) -> tuple[str, float] | str | None:
        """Counts a new connection: None when it may proceed, the reason to close it, or
        (reason, seconds to hold it) when it is over the creation rate."""
        count = self.per_ip.get(host, 0)
        limit = self.limit_for(host)
        if count >= limit:
            return f"Too many connections from {host} (maximum = {limit})"
        exempt = listener in self.exempt_listeners
        if not exempt and self.total >= self.max_connections:
            return f"Too many connections (maximum = {self.max_connections})"
        if self.ip_rate_bounds and not exempt:
            refusal = self._over_ip_rate(host)
            if refusal is not None:
                return refusal
        self.per_ip[host] = count + 1
        if not exempt:
            self.total += 1
            if self.max_creation_rate < INT_MAX:
                now_ms = int(self.clock.monotonic() * 1000)
                self.creation_rate.record(1, now_ms)
                delay_ms = throttle_time_ms(self.creation_rate, self.max_creation_rate, now_ms)
                if delay_ms > 0:
                    reason = ("connection creation rate above "
                              f"{MAX_CONNECTION_CREATION_RATE}={self.max_creation_rate}")
                    return reason, delay_ms / 1000
        return None

    def _over_ip_rate(self, host: str) -> str | None:
        bound = self.ip_rate_bounds.get(host, self.ip_rate_bounds.get(None))
        if bound is None:
            return None
        now_ms = int(self.clock.monotonic() * 1000)
        rate = self.ip_rates.get(host)
        if rate is None:
            if len(self.ip_rates) >= 10_000:  # forget quiet addresses
                self.ip_rates = {ip: r for ip, r in self.ip_rates.items()
                                 if r.measure(now_ms) > 0}
            rate = self.ip_rates[host] = Rate(self.samples, self.window_ms)
        rate.record(1, now_ms)
        if throttle_time_ms(rate, bound, now_ms) > 0:
            return f"connection creation rate from {host} above its quota ({bound:g}/s)"
        return None

    def on_disconnect(self, listener: str, host: str) -> None:
        count = self.per_ip.get(host, 0) - 1
        if count > 0:
            self.per_ip[host] = count
        else:
            self.per_ip.pop(host, None)
        if listener not in self.exempt_listeners:
            self.total -= 1
