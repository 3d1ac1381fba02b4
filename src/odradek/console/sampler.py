"""The console's sampler: consumer lag and topic throughput over time, kept in the console's
process for the charts (`charts`).

Every `interval_ms` (default 5 s) one sample asks the cluster, through the console's admin
client, for every topic's log-end offsets (ListOffsets latest), every consumer group's
committed offsets (OffsetFetch) and, when the console was given brokers' metrics URLs, their
Prometheus counters; from these it appends to bounded rings (the last hour, at most
`MAX_POINTS` points per series):

* per topic, messages/s: the growth of the log-end offsets between two samples, summed over
  the partitions seen in both (records appended; transaction markers count too, as in Kafka's
  own offset arithmetic);
* per topic, bytes in/out per second, from `kafka_server_brokertopicmetrics_bytesin_total` and
  `..._bytesout_total` (summed over the given brokers), only with metrics URLs;
* per consumer group, total lag (log end minus committed, over its committed partitions) and
  lag per topic.

A counter that goes down (a topic re-created, a broker restarted) gives no rate for that step.
Series of topics and groups that are gone are dropped. A failed sample is logged and skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from odradek.client import OffsetSpec, TopicPartition
from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.console.service import PAGE_TIMEOUT_MS, ConsoleService

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_INTERVAL_MS = 5_000
#: What the rings keep: an hour, but no more than this many points per series.
HISTORY_MS = 3_600_000
MAX_POINTS = 3_600
#: Groups sampled at most (by id); more would make one sample a request per group too many.
MAX_SAMPLED_GROUPS = 200
#: Group protocol types whose offsets are consumer offsets (empty: a group that only commits).
_CONSUMER_PROTOCOLS = ("consumer", "")
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"

Point = tuple[int, float]  # (time in ms since the epoch, value)


class History:
    """Named series of points, each a bounded ring."""

    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        self.series: dict[str, deque[Point]] = {}

    def add(self, name: str, time_ms: int, value: float) -> None:
        ring = self.series.get(name)
        if ring is None:
            ring = self.series[name] = deque(maxlen=self.max_points)
        ring.append((time_ms, value))

    def retain(self, names: Iterable[str]) -> None:
        """Drops the series not in `names` (their topics or groups are gone)."""
        keep = set(names)
        for name in [n for n in self.series if n not in keep]:
            del self.series[name]

    def get(self, name: str) -> list[Point]:
        return list(self.series.get(name, ()))

    def all(self) -> dict[str, list[Point]]:
        return {name: list(ring) for name, ring in self.series.items()}


class Rates:
    """Per-second rates of monotonic counters, from their successive samples."""

    def __init__(self) -> None:
        self.last: dict[Hashable, tuple[int, float]] = {}

    def rate(self, key: Hashable, time_ms: int, value: float) -> float | None:
        """The counter's rate since its previous sample; None for its first sample or when it
        went down (reset)."""
        previous = self.last.get(key)
        self.last[key] = (time_ms, value)
        if previous is None or time_ms <= previous[0] or value < previous[1]:
            return None
        return (value - previous[1]) * 1000.0 / (time_ms - previous[0])

    def retain(self, keys: Iterable[Hashable]) -> None:
        keep = set(keys)
        for key in [k for k in self.last if k not in keep]:
            del self.last[key]


def topic_rates(rates: Rates, time_ms: int, counters: Mapping[TopicPartition, int]
                ) -> dict[str, float]:
    """Messages/s per topic: the partitions' rates summed, over partitions with a rate (one
    whose lookup failed this time or the last does not skew its topic's sum)."""
    per_topic: dict[str, float] = {}
    for tp, value in counters.items():
        rate = rates.rate(tp, time_ms, value)
        if rate is not None:
            per_topic[tp.topic] = per_topic.get(tp.topic, 0.0) + rate
    return per_topic


def parse_topic_counters(text: str) -> dict[str, dict[str, float]]:
    """`{metric: {topic: value}}` for the bytes in/out counters of a Prometheus text page
    (the samples without a `topic` label are the all-topics totals: left out)."""
    found: dict[str, dict[str, float]] = {BYTES_IN: {}, BYTES_OUT: {}}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            topic = sample.labels.get("topic")
            if sample.name in found and topic:
                found[sample.name][topic] = found[sample.name].get(topic, 0.0) + sample.value
    return found


class Sampler:
    """Samples lag and throughput every `interval_ms` into rings the charts read."""

    def __init__(self, service: ConsoleService, interval_ms: int = DEFAULT_SAMPLE_INTERVAL_MS,
                 metrics_urls: Sequence[str] = (), clock: Clock = SYSTEM_CLOCK) -> None:
        self.service = service
        self.interval_ms = interval_ms
        self.metrics_urls = list(metrics_urls)
        self.clock = clock
        max_points = max(2, min(MAX_POINTS, HISTORY_MS // max(interval_ms, 1)))
        self.messages_in = History(max_points)  # topic -> messages/s
        self.bytes_in = History(max_points)  # topic -> bytes/s (metrics URLs only)
        self.bytes_out = History(max_points)
        self.group_lag = History(max_points)  # group -> total lag
        self.group_topic_lag: dict[str, History] = {}  # group -> topic -> lag
        self._max_points = max_points
        self._offset_rates = Rates()
        self._byte_rates = Rates()
        self.samples = 0  # completed samples (tests wait on it)
        self._failing = False

    async def run(self) -> None:
        """Samples until cancelled, one every interval (a slow sample delays the next)."""
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) \
            if self.metrics_urls else None
        try:
            while True:
                started = self.clock.monotonic()
                try:
                    async with asyncio.timeout(PAGE_TIMEOUT_MS / 1000):
                        await self.sample(http)
                    if self._failing:
                        log.info("console sampling works again")
                        self._failing = False
                except Exception as exc:  # noqa: BLE001 -- the next sample tries again
                    # once per outage at WARN, not every few seconds
                    (log.debug if self._failing else log.warning)(
                        "console sample failed: %r", exc)
                    self._failing = True
                elapsed = self.clock.monotonic() - started
                await self.clock.sleep(max(0.0, self.interval_ms / 1000 - elapsed))
        finally:
            if http is not None:
                await http.close()

    async def sample(self, http: aiohttp.ClientSession | None = None) -> None:
        service = self.service
        topics, listed = await asyncio.gather(
            service.topics(include_internal=False),
            service.admin.list_groups(timeout_ms=PAGE_TIMEOUT_MS))
        groups = sorted(g.group_id for g in listed if g.protocol_type in _CONSUMER_PROTOCOLS)
        if len(groups) > MAX_SAMPLED_GROUPS:
            groups = groups[:MAX_SAMPLED_GROUPS]
        partitions = [TopicPartition(t.name, p) for t in topics for p in range(t.partitions)]
        log_end, committed = await asyncio.gather(
            service._offsets(partitions, OffsetSpec.latest()),
            asyncio.gather(*(service.admin.list_consumer_group_offsets(
                group, timeout_ms=PAGE_TIMEOUT_MS) for group in groups),
                return_exceptions=True))
        # partitions groups commit but not listed (internal topics): their log ends too
        missing = {tp for offsets in committed if isinstance(offsets, dict)
                   for tp in offsets if tp not in log_end}
        if missing:
            log_end.update(await service._offsets(missing, OffsetSpec.latest()))
        counters = None
        if http is not None:
            counters = await self._scrape(http)
        now = self.clock.time_ms()

        names = [t.name for t in topics]
        for topic, rate in topic_rates(self._offset_rates, now,
                                       {tp: log_end[tp] for tp in partitions
                                        if tp in log_end}).items():
            self.messages_in.add(topic, now, rate)
        self._offset_rates.retain(partitions)
        self.messages_in.retain(names)
        if counters is not None:
            for metric, history in ((BYTES_IN, self.bytes_in), (BYTES_OUT, self.bytes_out)):
                for topic in names:
                    # a broker exports a topic's counter from its first byte on: none yet is 0
                    value = counters[metric].get(topic, 0.0)
                    rate = self._byte_rates.rate((metric, topic), now, value)
                    if rate is not None:
                        history.add(topic, now, rate)
                history.retain(names)
            self._byte_rates.retain((metric, topic) for metric in (BYTES_IN, BYTES_OUT)
                                    for topic in names)

        for group, offsets in zip(groups, committed, strict=True):
            if not isinstance(offsets, dict):
                continue  # this group's coordinator did not answer: no point this time
            per_topic: dict[str, int] = {}
            for tp, meta in offsets.items():
                end = log_end.get(tp)
                if end is not None and meta.offset >= 0:
                    per_topic[tp.topic] = per_topic.get(tp.topic, 0) + max(0, end - meta.offset)
            if not per_topic:
                continue
            self.group_lag.add(group, now, sum(per_topic.values()))
            history = self.group_topic_lag.setdefault(group, History(self._max_points))
            for topic, lag in per_topic.items():
                history.add(topic, now, lag)
            history.retain(per_topic)
        self.group_lag.retain(groups)
        for group in [g for g in self.group_topic_lag if g not in self.group_lag.series]:
            del self.group_topic_lag[group]
        self.samples += 1

    async def _scrape(self, http: aiohttp.ClientSession) -> dict[str, dict[str, float]] | None:
        """The bytes counters summed over every metrics URL; None when one failed (a partial
        sum would show as a drop and a jump)."""
        total: dict[str, dict[str, float]] = {BYTES_IN: {}, BYTES_OUT: {}}
        for url in self.metrics_urls:
            try:
                async with http.get(url) as response:
                    response.raise_for_status()
                    text = await response.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.debug("metrics scrape of %s failed: %r", url, exc)
                return None
            for metric, per_topic in parse_topic_counters(text).items():
                for topic, value in per_topic.items():
                    total[metric][topic] = total[metric].get(topic, 0.0) + value
        return total


SAMPLER: web.AppKey[Sampler] = web.AppKey("sampler", Sampler)


def setup(app: web.Application, service_key: web.AppKey[ConsoleService], *,
          interval_ms: int = DEFAULT_SAMPLE_INTERVAL_MS,
          metrics_urls: Sequence[str] = ()) -> None:
    """Runs a sampler over the app's console service (made by an earlier cleanup context)
    while the app runs."""

    async def sampling(app: web.Application):  # type: ignore[no-untyped-def]
        sampler = app[SAMPLER] = Sampler(app[service_key], interval_ms, metrics_urls)
        task = asyncio.create_task(sampler.run(), name="console-sampler")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    app.cleanup_ctx.append(sampling)
