"""Kafka's BrokerTopicMetrics counters (MessagesInPerSec, BytesInPerSec, BytesOutPerSec,
ReplicationBytesOutPerSec), kept as plain ints where the data passes already: an append adds
its record count (from the batch headers' offsets) and size, a fetch response the size of the
records it carries. `server.metrics` reports them."""

from __future__ import annotations


class BrokerTopicStats:
    """Kafka's BrokerTopicMetrics counters, per topic and for all topics: messages and bytes
    appended by clients (an append's record count from its batch headers), bytes fetched by
    consumers and by followers."""

    __slots__ = ("all_topics", "by_topic")
    MESSAGES_IN, BYTES_IN, BYTES_OUT, REPLICATION_BYTES_OUT = range(4)

    def __init__(self) -> None:
        self.by_topic: dict[str, list[int]] = {}
        self.all_topics = [0, 0, 0, 0]

    def _counts(self, topic: str) -> list[int]:
        counts = self.by_topic.get(topic)
        if counts is None:
            counts = self.by_topic[topic] = [0, 0, 0, 0]
        return counts

    def record_in(self, topic: str, messages: int, size: int) -> None:
        counts = self._counts(topic)
        counts[0] += messages
        counts[1] += size
        totals = self.all_topics
        totals[0] += messages
        totals[1] += size

    def record_out(self, topic: str, size: int, follower: bool = False) -> None:
        index = self.REPLICATION_BYTES_OUT if follower else self.BYTES_OUT
        self._counts(topic)[index] += size
        self.all_topics[index] += size

    def forget(self, topic: str) -> None:
        """A deleted topic's series go (Kafka removes its BrokerTopicMetrics)."""
        self.by_topic.pop(topic, None)
