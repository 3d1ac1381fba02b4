"""An average and a maximum over the recent past, as Kafka's metrics compute a sensor's `-avg` and
`-max` (`SampledStat`: `metrics.num.samples` = 2 windows of `metrics.sample.window.ms` = 30 s;
a window older than all of them no longer counts; NaN when nothing was recorded in them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

SAMPLE_WINDOW_MS = 30_000
NUM_SAMPLES = 2


@dataclass(slots=True)
class _Sample:
    start_ms: int
    count: int = 0
    total: float = 0.0
    max: float = -math.inf


class WindowedStat:
    """record(value, now_ms) and the avg/max of the values of the last windows. The caller
    passes the time (its injected clock), so nothing here reads a clock."""

    __slots__ = ("_samples", "num_samples", "window_ms")

    def __init__(self, window_ms: int = SAMPLE_WINDOW_MS, num_samples: int = NUM_SAMPLES) -> None:
        self.window_ms = window_ms
        self.num_samples = num_samples
        self._samples: list[_Sample] = []

    def record(self, value: float, now_ms: int) -> None:
        samples = self._samples
        if not samples or now_ms - samples[-1].start_ms >= self.window_ms:
            samples.append(_Sample(now_ms))
            if len(samples) > self.num_samples:
                del samples[0]
        sample = samples[-1]
        sample.count += 1
        sample.total += value
        sample.max = max(sample.max, value)

    def _current(self, now_ms: int) -> list[_Sample]:
        horizon = now_ms - self.window_ms * self.num_samples
        return [s for s in self._samples if s.start_ms > horizon and s.count]

    def avg(self, now_ms: int) -> float:
        samples = self._current(now_ms)
        count = sum(s.count for s in samples)
        return sum(s.total for s in samples) / count if count else math.nan

    def max(self, now_ms: int) -> float:
        samples = self._current(now_ms)
        return max(s.max for s in samples) if samples else math.nan
