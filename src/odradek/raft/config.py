"""Raft's settings (Kafka's QuorumConfig) and the names of the metadata partition."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
# Kafka's Uuid.METADATA_TOPIC_ID (most significant bits 0, least significant 1): Fetch v13+
# names the metadata partition by this id.
METADATA_TOPIC_ID = uuid.UUID(int=1)

# Base of the candidate's exponential election backoff (Kafka's RETRY_BACKOFF_BASE_MS).
RETRY_BACKOFF_BASE_MS = 100
# A leader resigns when no majority of voters fetched within fetch timeout times this.
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5
# A leader forgets an observer that has not fetched for this long.
OBSERVER_SESSION_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class RaftConfig:
    """`controller.quorum.*` settings, Kafka's defaults."""

    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # how long the leader parks an empty Fetch (Kafka: 500)
    fetch_max_bytes: int = 8 * 1024 * 1024  # controller.quorum.fetch.max.bytes... per fetch

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
