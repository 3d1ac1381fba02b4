"""Client quotas enforced as Kafka's ClientQuotaManager (produce and fetch byte rates) and
ClientRequestQuotaManager (request handler time).

Resolution (Kafka's DefaultQuotaCallback): for one quota key, the first of these entities that
sets it bounds the client, and the entity's level decides who shares the measured rate:

    /config/users/<user>/clients/<client-id>      per (user, client-id)
    /config/users/<user>/clients/<default>        per (user, client-id)
    /config/users/<user>                          per user (all its client ids together)
    /config/users/<default>/clients/<client-id>   per (user, client-id)
    /config/users/<default>/clients/<default>     per (user, client-id)
    /config/users/<default>                       per user
    /config/clients/<client-id>                   per client-id (all users together)
    /config/clients/<default>                     per client-id

The user is the principal's name (`User:alice` -> `alice`; unauthenticated: `ANONYMOUS`).
Resolutions are cached per (user, client-id) and dropped when the image's quotas change, so a
request costs a dict lookup and a `Rate.record`; a key no entity sets costs one attribute test.

Throttling: a value is recorded, then the rate over `quota.window.num` windows of
`quota.window.size.seconds` is measured; above the bound the client is throttled for
`(rate - bound) / bound * window` ms (Kafka's QuotaUtils.throttleTime; for request time bounded
by one window). The broker answers at once with `throttle_time_ms` and does not read from the
connection until the throttle ends (KIP-219, `server.network.Connection.throttle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.controller.client_quota_control import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
)
from odradek.metadata.image import MetadataImage
from odradek.server.quotas import Rate
from odradek.server.request_metrics import FETCH_KEY, is_follower_fetch

PRODUCE_KEY = 0
# Never throttled by request time (Kafka exempts the connection setup and cluster actions):
# SaslHandshake, ApiVersions, SaslAuthenticate, WriteTxnMarkers.
REQUEST_QUOTA_EXEMPT = frozenset({17, 18, 36, 27})
# Kafka's nanosToPercentage: handler time as a percentage of one second.
NANOS_TO_PERCENTAGE = 100 / 1_000_000_000
# Rates of clients gone quiet are dropped once this many are kept (Kafka expires a client's
# sensors after an hour without use).
MAX_TRACKED = 10_000

Entity = tuple[tuple[str, str | None], ...]


def user_of(principal: str) -> str:
    """The user a principal's quotas are looked up by: its name (`User:alice` -> `alice`)."""
    return principal.partition(":")[2] or principal


def _levels(user: str, client_id: str) -> list[tuple[Entity, tuple[str, str]]]:
    """The entities to look at, in Kafka's precedence order, each with whose rate it bounds
    (a (user, client-id) pair, '' for a side that is shared)."""
    return [
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ]


def resolve_quota(quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str,
                  client_id: str) -> tuple[float, tuple[str, str]] | None:
    """(bound, who shares the measured rate) for one client and quota key, or None when no
    entity sets that key for it."""
    for entity, sensor in _levels(user, client_id):
        values = quotas.get(entity)
        if values is not None:
            bound = values.get(key)
            if bound is not None:
                return bound, sensor
    return None


def throttle_time_ms(rate: Rate, bound: float, now_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: how long the client must wait for its rate over the
    window to come back to the bound."""
    measured = rate.measure(now_ms)
    if measured <= bound:
        return 0
    return int((measured - bound) / bound * rate.window_size_ms(now_ms))


class ClientQuotaManager:
    """One quota key's bounds and measured rates."""

    def __init__(self, key: str, *, samples: int = 11, window_ms: int = 1000,
                 max_throttle_ms: int | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms
        self.clock = clock
        self.enabled = False  # some entity sets this key
        self._quotas: Mapping[Entity, Mapping[str, float]] = {}
        self._resolved: dict[tuple[str, str], tuple[float, tuple[str, str]] | None] = {}
        self._rates: dict[tuple[str, str], Rate] = {}

    def update(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        if quotas is self._quotas:
            return
        self._quotas = quotas
        self.enabled = any(self.key in values for values in quotas.values())
        self._resolved = {}

    def quota(self, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        pair = (user, client_id)
        try:
            return self._resolved[pair]
        except KeyError:
            pass
        if len(self._resolved) >= MAX_TRACKED:
            self._resolved.clear()
        resolved = self._resolved[pair] = resolve_quota(self._quotas, self.key, user,
                                                        client_id)
        return resolved

    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float,
                                   now_ms: int | None = None) -> int:
        """Records `value` against the client's quota; the throttle time it now owes."""
        if not self.enabled:
            return 0
        quota = self.quota(user, client_id)
        if quota is None:
            return 0
        bound, sensor = quota
        if now_ms is None:
            now_ms = int(self.clock.monotonic() * 1000)
        rate = self._rates.get(sensor)
        if rate is None:
            if len(self._rates) >= MAX_TRACKED:
                self._expire(now_ms)
            rate = self._rates[sensor] = Rate(self.samples, self.window_ms)
        rate.record(value, now_ms)
        throttle = throttle_time_ms(rate, bound, now_ms)
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return throttle

    def unrecord(self, user: str, client_id: str, value: float,
                 now_ms: int | None = None) -> None:
        """Takes back a recorded value (a throttled fetch answers without its data)."""
        quota = self.quota(user, client_id) if self.enabled else None
        rate = self._rates.get(quota[1]) if quota is not None else None
        if rate is not None:
            rate.record(-value, now_ms if now_ms is not None
                        else int(self.clock.monotonic() * 1000))

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may take without being throttled for sure (Kafka's
        getMaxValueInQuotaWindow: bound x (samples - 1) windows); None: no bound."""
        quota = self.quota(user, client_id) if self.enabled else None
        if quota is None:
            return None
        return quota[0] * (self.samples - 1) * self.window_ms / 1000

    def _expire(self, now_ms: int) -> None:
        for sensor, rate in list(self._rates.items()):
            if rate.measure(now_ms) == 0:
                del self._rates[sensor]


class ClientQuotas:
    """The broker's client quotas: produce and fetch byte rates, request time."""

    def __init__(self, *, samples: int = 11, window_s: int = 1,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        window_ms = window_s * 1000
        self.clock = clock
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=samples,
                                          window_ms=window_ms, clock=clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples=samples,
                                        window_ms=window_ms, clock=clock)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples=samples,
                                          window_ms=window_ms, max_throttle_ms=window_ms,
                                          clock=clock)
        self.enabled = False

    def apply_image(self, image: MetadataImage) -> None:
        quotas = image.client_quotas
        for manager in (self.produce, self.fetch, self.request):
            manager.update(quotas)
        # Controller mutation quotas are counted on the active controller
        # (`server.controller_mutation_quota`); here only their throttle time is honoured.
        mutations = any(CONTROLLER_MUTATION_RATE in values for values in quotas.values())
        self.enabled = (self.produce.enabled or self.fetch.enabled or self.request.enabled
                        or mutations)

    def fetch_max_bytes(self, principal: str, client_id: str | None) -> float | None:
        """The cap a consumer's quota puts on one fetch (None: no cap)."""
        if not self.fetch.enabled:
            return None
        return self.fetch.max_value_in_window(user_of(principal), client_id or "")

    def throttle(self, api_key: int, principal: str, client_id: str | None, request: Any,
                 response: Any, request_bytes: int, handler_ns: int) -> tuple[int, Any]:
        """After a request was handled: records what it cost and returns (throttle time,
        the response to send). A throttled consumer fetch is answered without its data, as
        Kafka does, and its bytes are not counted."""
        user, client = user_of(principal), client_id or ""
        now_ms = int(self.clock.monotonic() * 1000)
        request_throttle = 0
        if api_key == PRODUCE_KEY:
            bandwidth = self.produce.record_and_get_throttle_ms(user, client, request_bytes,
                                                                now_ms)
            if request.acks != 0:  # acks=0 is exempt from the request quota
                request_throttle = self.request.record_and_get_throttle_ms(
                    user, client, handler_ns * NANOS_TO_PERCENTAGE, now_ms)
            return max(bandwidth, request_throttle), response
        if api_key not in REQUEST_QUOTA_EXEMPT and not _from_follower(api_key, request):
            request_throttle = self.request.record_and_get_throttle_ms(
                user, client, handler_ns * NANOS_TO_PERCENTAGE, now_ms)
        if api_key != FETCH_KEY or response is None or _from_follower(api_key, request):
            return request_throttle, response
        size = fetch_response_bytes(response)
        bandwidth = self.fetch.record_and_get_throttle_ms(user, client, size, now_ms)
        throttle = max(bandwidth, request_throttle)
        if throttle > 0:
            self.fetch.unrecord(user, client, size, now_ms)
            response = type(response)(error_code=response.error_code,
                                      session_id=response.session_id, responses=[],
                                      node_endpoints=response.node_endpoints)
        return throttle, response


def _from_follower(api_key: int, request: Any) -> bool:
    return api_key == FETCH_KEY and is_follower_fetch(request)


def fetch_response_bytes(response: Any) -> int:
    """The record bytes of a fetch response (what the consumer quota counts: its size is
    dominated by them)."""
    total = 0
    for topic in response.responses:
        for partition in topic.partitions:
            records = partition.records
            if records is not None:
                total += len(records)
    return total
