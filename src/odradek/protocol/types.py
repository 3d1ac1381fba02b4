"""Value types every layer names the same way (Kafka's `org.apache.kafka.common`).

`TopicPartition` lives here, at the bottom, so the broker (storage, coordinator, server) and the
clients share one definition without importing each other.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    """A partition of a topic; a tuple, so ``("t", 0) == TopicPartition("t", 0)``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"  # Kafka's TopicPartition.toString
