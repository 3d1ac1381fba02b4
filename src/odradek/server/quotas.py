"""Byte-rate quotas measured as Kafka measures them: a rate over a window of samples.

`Rate` is Kafka's `Rate` over a `SampledStat`: `samples` windows of `window_ms` each; the rate
is the sum of the live samples over the time they span, padded to at least `samples - 1` full
windows so that one burst right after a quiet period (or at start) does not read as a spike.

`ReplicationQuota` is Kafka's ReplicationQuotaManager, one per side of replication:
- the leader side (`leader.replication.throttled.rate`, the partitions of
  `leader.replication.throttled.replicas` whose entry names this broker) limits what this
  broker sends to followers of those partitions that are out of the ISR;
- the follower side (`follower.replication.throttled.rate`, `follower.replication.throttled.
  replicas`) limits what this broker fetches for its out-of-ISR replicas of those partitions.

A partition is throttled when the topic's list holds `partition:broker` for this broker (or is
`*`); the bound is the broker's dynamic config (per broker over the cluster default) or else
its static one. While the measured rate exceeds the bound, throttled partitions are left out;
every throttled byte moved counts, in sync or not, as Kafka counts it."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.metadata.image import RESOURCE_TOPIC, MetadataImage

UNLIMITED = 2**63 - 1  # Kafka's Long.MAX_VALUE: the quota is off

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


class Rate:
    """Units per second over the last `samples` windows of `window_ms` (Kafka's Rate); the
    measure of replication throttling and of client quotas (`server.client_quotas`)."""

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = max(1, samples)
        self.window_ms = max(1, window_ms)
        self._windows: deque[list] = deque()  # [start ms, total], oldest first

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        windows = self._windows
        if not windows or now_ms - windows[-1][0] >= self.window_ms:
            windows.append([now_ms, 0])
            if len(windows) > self.samples:
                windows.popleft()
        windows[-1][1] += value

    def measure(self, now_ms: int) -> float:
        self._purge(now_ms)
        if not self._windows:
            return 0.0
        total = sum(value for _start, value in self._windows)
        return total * 1000 / self.window_size_ms(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is measured over (Kafka's Rate.windowSize): from the oldest live
        sample to now, padded to `samples - 1` full windows, at least 1 ms."""
        self._purge(now_ms)
        elapsed = now_ms - self._windows[0][0] if self._windows else 0
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def _purge(self, now_ms: int) -> None:
        span = self.samples * self.window_ms
        while self._windows and now_ms - self._windows[0][0] >= span:
            self._windows.popleft()


# A topic's throttled partitions on this broker: every one (`*`) or these.
ALL_PARTITIONS: frozenset[int] = frozenset({-1})


def throttled_partitions(value: str, broker_id: int) -> frozenset[int]:
    """The partitions a `*.replication.throttled.replicas` value throttles on `broker_id`
    (Kafka's parseThrottledPartitions): `*`, or the `partition:broker` entries naming it.
    Malformed entries (the controller validates, an old image may not be) count for nothing."""
    value = value.strip()
    if value == "*":
        return ALL_PARTITIONS
    partitions = set()
    for entry in value.split(","):
        partition, _, broker = entry.strip().partition(":")
        try:
            if int(broker) == broker_id:
                partitions.add(int(partition))
        except ValueError:
            continue
    return frozenset(partitions)


class ReplicationQuota:
    """One side of replication throttling on one broker (Kafka's ReplicationQuotaManager)."""

    def __init__(self, broker_id: int, rate_config: str, replicas_config: str,
                 static_rate: int = UNLIMITED, *, samples: int = 11, window_ms: int = 1000,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker_id = broker_id
        self.rate_config = rate_config
        self.replicas_config = replicas_config
        self.static_rate = static_rate
        self.bound = static_rate
        self.clock = clock
        self.rate = Rate(samples, window_ms)
        self._throttled: dict[str, frozenset[int]] = {}
        self._configs: Mapping[object, object] | None = None

    def apply_image(self, image: MetadataImage) -> None:
        if image.configs is self._configs:
            return
        self._configs = image.configs
        dynamic = image.broker_config(self.broker_id).get(self.rate_config)
        try:
            self.bound = int(dynamic) if dynamic is not None else self.static_rate
        except ValueError:
            self.bound = self.static_rate
        throttled = {}
        for (kind, topic), configs in image.configs.items():
            value = configs.get(self.replicas_config) if kind == RESOURCE_TOPIC else None
            if value:
                partitions = throttled_partitions(value, self.broker_id)
                if partitions:
                    throttled[topic] = partitions
        self._throttled = throttled

    def is_throttled(self, topic: str, partition: int) -> bool:
        partitions = self._throttled.get(topic)
        return partitions is not None and (partitions is ALL_PARTITIONS
                                           or partition in partitions)

    def is_quota_exceeded(self) -> bool:
        return (self.bound != UNLIMITED
                and self.rate.measure(self._now_ms()) > self.bound)

    def record(self, nbytes: int) -> None:
        if nbytes > 0:
            self.rate.record(nbytes, self._now_ms())

    def _now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)


class TokenBucket:
    """Kafka's TokenBucket (KIP-599), the measure of controller mutation quotas: credits refill
    at `quota` per second up to a burst of `quota x samples x window`, each mutation spends
    its partitions; the quota is exceeded while the credits are below zero."""

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.burst_windows_s = max(1, samples) * max(1, window_ms) / 1000
        self.tokens: float | None = None  # full at first use
        self.last_ms = 0

    def _refill(self, quota: float, now_ms: int) -> None:
        burst = quota * self.burst_windows_s
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * max(0, now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms

    def measure(self, quota: float, now_ms: int) -> float:
        self._refill(quota, now_ms)
        return self.tokens  # type: ignore[return-value]

    def record(self, quota: float, value: float, now_ms: int) -> None:
        self._refill(quota, now_ms)
        self.tokens = min(quota * self.burst_windows_s, self.tokens - value)  # type: ignore[operator]

    def throttle_time_ms(self, quota: float, now_ms: int) -> int:
        """How long until the credits are back at zero (Kafka: -tokens / quota)."""
        tokens = self.measure(quota, now_ms)
        return round(-tokens / quota * 1000) if tokens < 0 else 0
