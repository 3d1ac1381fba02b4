"""The newest committed metadata image a node knows, and the components that follow it.

Kafka's MetadataCache plus its metadata publishers: whatever replays the metadata log (today
the local quorum, later a follower or observer of the controller quorum) publishes each new
image here; request handlers read `image`, and the subscribers (the replica manager, the group
coordinator's leadership follower...) are told in subscription order.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.metadata.image import MetadataImage

Publisher = Callable[[MetadataImage], None]


class MetadataCache:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._subscribers: list[Publisher] = []

    def subscribe(self, subscriber: Publisher) -> None:
        self._subscribers.append(subscriber)

    def publish(self, image: MetadataImage) -> None:
        self.image = image
        for subscriber in self._subscribers:
            subscriber(image)
