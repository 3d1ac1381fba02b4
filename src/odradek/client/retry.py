"""Deadlines and backoff shared by every client (Kafka's ExponentialBackoff, KIP-580)."""

from __future__ import annotations

import random
import time

__all__ = ["Deadline", "ExponentialBackoff"]


class ExponentialBackoff:
    """``initial * multiplier**attempts`` capped at ``maximum``, with +-``jitter`` randomness so
    many clients retrying together spread out."""

    def __init__(
        self, initial_ms: float, maximum_ms: float, multiplier: float = 2.0, jitter: float = 0.2
    ) -> None:
        self.initial_ms = initial_ms
        self.maximum_ms = max(initial_ms, maximum_ms)
        self.multiplier = multiplier
        self.jitter = jitter

    def delay_ms(self, attempts: int) -> float:
        """The wait before retry number ``attempts + 1`` (attempts already failed, from 0)."""
        if self.initial_ms <= 0:
            return 0.0
        base = min(self.initial_ms * self.multiplier ** min(attempts, 64), self.maximum_ms)
        spread = random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0
        return min(base * spread, self.maximum_ms * (1 + self.jitter))


class Deadline:
    """A point in monotonic time; `remaining_ms` never goes below 0."""

    __slots__ = ("at",)

    def __init__(self, timeout_ms: float) -> None:
        self.at = time.monotonic() + timeout_ms / 1000

    def remaining_ms(self) -> float:
        return max(0.0, (self.at - time.monotonic()) * 1000)

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def cap(self, timeout_ms: float) -> float:
        """`timeout_ms`, or what is left of the deadline when that is less."""
        return min(timeout_ms, self.remaining_ms())
