"""New-leader hints in Produce and Fetch answers (KIP-951).

A client that sends to a broker that no longer leads a partition (NOT_LEADER_OR_FOLLOWER, or
FENCED_LEADER_EPOCH for a stale epoch) learns the current leader and its epoch in the same
answer (`CurrentLeader`, Produce v10+ and Fetch v16+), and that leader's address on the
listener it used (`NodeEndpoints`), so it moves at once instead of refreshing its metadata.
"""

from __future__ import annotations

from typing import Any

from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import ErrorCode

MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


class LeaderHints:
    """Collects the hints of one answer; `image` is the broker's current metadata."""

    def __init__(self, image: MetadataImage | None, listener: str) -> None:
        self.image = image
        self.listener = listener
        self._leaders: set[int] = set()

    def current_leader(self, topic: str | None, partition: int,
                       error: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) for a partition answered with `error`, if it moved."""
        if error not in MOVED or self.image is None or topic is None:
            return None
        topic_image = self.image.topics_by_name.get(topic)
        registration = topic_image.partitions.get(partition) if topic_image else None
        if registration is None or registration.leader < 0:
            return None
        self._leaders.add(registration.leader)
        return registration.leader, registration.leader_epoch

    def node_endpoints(self, node_endpoint: type) -> list[Any]:
        """The named leaders' endpoints on this listener, as the answer's NodeEndpoint type."""
        out = []
        brokers = self.image.brokers if self.image is not None else {}
        for broker_id in sorted(self._leaders):
            registration = brokers.get(broker_id)
            endpoint = registration.endpoint(self.listener) if registration else None
            if endpoint is not None:
                out.append(node_endpoint(node_id=broker_id, host=endpoint.host or "",
                                         port=endpoint.port, rack=registration.rack))
        return out
