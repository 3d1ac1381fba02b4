"""Per-API request latency histograms, split as Kafka's RequestMetrics split a request's time:
RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs, ResponseSendTimeMs and TotalTimeMs (see
`odradek.request_timing` for what each part is).

A histogram is a fixed array of counters over geometric buckets (each bound 1.25 times the
previous, from 10 us to about 2 minutes), so recording is one `bisect` and one add, and
percentiles are read off the counts with at most 25% relative error -- plenty to tell a 5 ms
request from a 50 ms one. A request that took longer than `slow_ms` besides its remote wait is
logged with its split (`request.slow.log.ms`), so a tail can be attributed to waiting behind
another request of its connection, to the handler, or to a slow client."""

from __future__ import annotations

import bisect
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.messages import API_BY_KEY
from odradek.protocol.messages._base import Struct
from odradek.request_timing import RequestTiming

log = logging.getLogger("odradek.request.slow")


FETCH_KEY = 1
# Kafka times every Fetch twice: as "Fetch" and as "FetchConsumer" or "FetchFollower" (its
# RequestMetrics names), so dashboards can tell consumers' fetches from replication. Two keys
# no API uses stand for them here.
FETCH_CONSUMER_KEY = -1
FETCH_FOLLOWER_KEY = -2
_PSEUDO_NAMES = {FETCH_CONSUMER_KEY: "FetchConsumer", FETCH_FOLLOWER_KEY: "FetchFollower"}


def api_name(api_key: int) -> str:
    spec = API_BY_KEY.get(api_key)
    if spec is not None:
        return spec.name
    return _PSEUDO_NAMES.get(api_key, f"api-{api_key}")


def is_follower_fetch(request: Any) -> bool:
    """A Fetch from a replica (replica_state.replica_id from v15, replica_id before), not from a
    consumer."""
    replica_state = getattr(request, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state is not None and \
        replica_state.replica_id >= 0 else request.replica_id
    return replica_id >= 0

# -- Error codes in responses (Kafka's ErrorsPerSec meters) -----------------------------------
#
# Kafka counts a response's `errorCounts()`: every error code it carries, NONE included (one per
# partition of a Produce or Fetch, the top-level one of a Fetch besides). Here that is every
# `error_code` field of the response tree (other `..._error_code` fields, e.g. CreateTopics'
# `topic_config_error_code`, are not in Kafka's counts either). The response object the handler
# built is walked before it is encoded -- nothing is decoded -- along a plan made once per
# struct class from its field types, which visits only the lists and structs that can hold an
# error code (a Fetch partition's records, aborted transactions and leader hints are skipped).

ErrorPlan = tuple[bool, tuple[tuple[str, bool, "ErrorPlan"], ...]]
_PLANS: dict[tuple[type, int], ErrorPlan] = {}
_NO_ERRORS: ErrorPlan = (False, ())
_LIST_OF = re.compile(r"^list\[(\w+)\]")
_STRUCT = re.compile(r"^(\w+)")
# Top-level error codes Kafka's errorCounts() leaves out (MetadataResponse counts its topics'
# and partitions' only).
_TOP_LEVEL_NOT_COUNTED = frozenset({"MetadataResponse"})


def _field_struct(cls: type, annotation: str) -> tuple[type, bool] | None:
    """(the Struct class a field holds, whether it is a list of them), None for plain fields."""
    annotation = annotation.strip()
    listed = _LIST_OF.match(annotation)
    named = listed or _STRUCT.match(annotation)
    target = getattr(sys.modules[cls.__module__], named.group(1), None) if named else None
    if isinstance(target, type) and issubclass(target, Struct):
        return target, listed is not None
    return None


def error_plan(cls: type, version: int) -> ErrorPlan:
    """Where a struct class's error codes are at a version: whether it has `error_code`, and
    the fields (name, is a list, the field's plan) leading to more."""
    key = (cls, version)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    _PLANS[key] = _NO_ERRORS  # a recursive type (none today) stops here
    # The generated classes' annotations are strings (`from __future__ import annotations`):
    # `list[PartitionProduceResponse] | None`, read without evaluating them.
    annotations = cls.__init__.__annotations__  # type: ignore[misc]
    versions = cls._FIELD_VERSIONS  # type: ignore[attr-defined]

    def present(name: str) -> bool:
        low, high = versions.get(name, (0, None))
        return low <= version and (high is None or version <= high)

    children = []
    for name in cls._FIELDS:  # type: ignore[attr-defined]
        annotation = annotations.get(name)
        if not isinstance(annotation, str) or not present(name):
            continue
        held = _field_struct(cls, annotation)
        if held is not None:
            child = error_plan(held[0], version)
            if child[0] or child[1]:
                children.append((name, held[1], child))
    counted = "error_code" in cls._FIELDS and present("error_code") and \
        cls.__name__ not in _TOP_LEVEL_NOT_COUNTED  # type: ignore[attr-defined]
    plan = (counted, tuple(children))
    _PLANS[key] = plan
    return plan


def _count_errors(struct: Any, plan: ErrorPlan, counts: dict[int, int]) -> None:
    if plan[0]:
        code = struct.error_code
        counts[code] = counts.get(code, 0) + 1
    for name, is_list, child in plan[1]:
        value = getattr(struct, name)
        if not is_list:
            if value is not None:
                _count_errors(value, child, counts)
        elif child[0] and not child[1]:
            # The common leaf (a Produce's or Fetch's partitions): no call per item.
            get = counts.get
            for item in value:
                code = item.error_code
                counts[code] = get(code, 0) + 1
        else:
            for item in value:
                _count_errors(item, child, counts)


_FIRST_BOUND_NS = 10_000
_GROWTH = 1.25
BOUNDS_NS: list[int] = []
_bound = float(_FIRST_BOUND_NS)
while _bound < 120e9:
    BOUNDS_NS.append(int(_bound))
    _bound *= _GROWTH
del _bound

PARTS = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseSendTimeMs",
         "TotalTimeMs")


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_NS) + 1))
    count: int = 0
    sum_ns: int = 0
    max_ns: int = 0

    def record(self, nanos: int) -> None:
        self.counts[bisect.bisect_left(BOUNDS_NS, nanos)] += 1
        self.count += 1
        self.sum_ns += nanos
        self.max_ns = max(self.max_ns, nanos)

    def percentile_ms(self, fraction: float) -> float:
        """The upper bound of the bucket holding the `fraction` quantile (the max above the
        last bound)."""
        if self.count == 0:
            return 0.0
        rank = fraction * self.count
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank and count:
                bound = BOUNDS_NS[index] if index < len(BOUNDS_NS) else self.max_ns
                return min(bound, self.max_ns) / 1e6
        return self.max_ns / 1e6


class RequestMetrics:
    """The histograms of every API seen, by API key and part, and the requests answered by API
    key and version (Kafka's RequestsPerSec meter is tagged with both)."""

    def __init__(self, slow_ms: float = 0.0) -> None:
        self.slow_ns = int(slow_ms * 1e6)  # 0: no slow-request log
        self.by_api: dict[int, tuple[Histogram, ...]] = {}
        self.by_version: dict[tuple[int, int], int] = {}
        # {api key: {error code: responses' error codes counted}} (ErrorsPerSec).
        self.errors: dict[int, dict[int, int]] = {}

    def count_errors(self, api_key: int, api_version: int, response: Any) -> None:
        """Count the error codes of a response about to be sent, as Kafka's
        `RequestChannel.updateErrorMetrics` counts `errorCounts()`."""
        counts = self.errors.get(api_key)
        if counts is None:
            counts = self.errors[api_key] = {}
        _count_errors(response, error_plan(type(response), api_version), counts)

    def record(self, api_key: int, api_version: int, timing: RequestTiming, local_done_ns: int,
               connection_id: str, client_id: str | None, request: Any = None) -> None:
        now = time.monotonic_ns()
        queue = timing.started_ns - timing.arrived_ns
        handling = local_done_ns - timing.started_ns
        remote = min(timing.remote_ns, handling)
        send = now - local_done_ns
        total = now - timing.arrived_ns
        parts = (queue, handling - remote, remote, send, total)
        self._count(api_key, api_version, parts)
        if api_key == FETCH_KEY and request is not None:
            self._count(FETCH_FOLLOWER_KEY if is_follower_fetch(request) else FETCH_CONSUMER_KEY,
                        api_version, parts)
        # Waiting on purpose (a long poll, acks=all) is not slowness.
        if self.slow_ns and total - remote > self.slow_ns:
            log.info("slow request: %s v%d from %s (client %s): total %.1f ms = queue %.1f + "
                     "local %.1f + remote %.1f + send %.1f", api_name(api_key), api_version,
                     connection_id, client_id, total / 1e6, queue / 1e6,
                     (handling - remote) / 1e6, remote / 1e6, send / 1e6)

    def _count(self, api_key: int, api_version: int, parts: tuple[int, ...]) -> None:
        histograms = self.by_api.get(api_key)
        if histograms is None:
            histograms = self.by_api[api_key] = tuple(Histogram() for _ in PARTS)
        for histogram, nanos in zip(histograms, parts, strict=True):
            histogram.record(nanos)
        # A tuple key and an int add: the version label is formatted at scrape time only.
        key = (api_key, api_version)
        self.by_version[key] = self.by_version.get(key, 0) + 1

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """{api name: {part: {count, p50, p99, p999, max (ms)}}}."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for api_key, histograms in sorted(self.by_api.items()):
            out[api_name(api_key)] = {
                part: {"count": h.count, "p50": h.percentile_ms(0.5),
                       "p99": h.percentile_ms(0.99), "p999": h.percentile_ms(0.999),
                       "max": h.max_ns / 1e6}
                for part, h in zip(PARTS, histograms, strict=True)}
        return out
