"""Wiring of the coordinators into a broker: the group coordinator's writes go through the
replica manager's commit boundary, and leadership of the `__consumer_offsets` partitions
(followed in the metadata image) loads and unloads its groups."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from odradek.controller.controller import OpResult, TopicSpec
from odradek.coordinator import (
    OFFSETS_TOPIC,
    GroupConfig,
    GroupCoordinator,
    GroupMetadataManager,
)
from odradek.metadata.cache import MetadataCache
from odradek.metadata.image import RESOURCE_GROUP, MetadataImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import Compression
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger("odradek.groups")

#: the controller's CreateTopics
CreateTopics = Callable[[Sequence[TopicSpec]], Awaitable[list[OpResult]]]


def offsets_topic_spec(config: Any) -> TopicSpec:
    """`__consumer_offsets` as Kafka creates it: compacted, sized by the offsets.* configs."""
    return TopicSpec(
        name=OFFSETS_TOPIC,
        num_partitions=int(config.get("offsets.topic.num.partitions")),
        replication_factor=int(config.get("offsets.topic.replication.factor")),
        configs={"cleanup.policy": "compact", "compression.type": "producer",
                 "segment.bytes": str(config.get("offsets.topic.segment.bytes"))},
    )


class OffsetsTopicFollower:
    """Follows the metadata image: elects the coordinator for the offsets partitions this
    broker leads, resigns the others, and drops the offsets of deleted topics."""

    def __init__(self, replica_manager: ReplicaManager, coordinator: GroupCoordinator) -> None:
        self.replica_manager = replica_manager
        self.coordinator = coordinator
        self.led: dict[int, tuple[int, Any]] = {}  # partition -> (leader epoch, log)
        self.topics: set[str] = set()

    def __call__(self, image: MetadataImage) -> None:
        now_led = {
            partition.index: (partition.leader_epoch, partition.log)
            for partition in self.replica_manager.partitions_of([OFFSETS_TOPIC])
            if partition.is_leader
        }
        for index in set(self.led) - set(now_led):
            self.coordinator.resign(index)
        for index, (epoch, log_) in now_led.items():
            previous = self.led.get(index)
            if previous is None or previous[0] != epoch or previous[1] is not log_:
                self.coordinator.elect(index, log_)
        self.led = now_led
        topics = set(image.topics_by_name)
        deleted = self.topics - topics
        self.topics = topics
        if deleted:
            self.coordinator.remove_offsets_of_topics(deleted)


def start_group_coordinator(config: Any, cache: MetadataCache,
                            replica_manager: ReplicaManager) -> GroupCoordinator:
    """Builds the group coordinator, starts it and subscribes it to metadata changes."""

    def num_partitions() -> int:
        topic = cache.image.topics_by_name.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None else \
            int(config.get("offsets.topic.num.partitions"))

    commit_timeout_ms = int(config.get("offsets.commit.timeout.ms"))

    async def append(partition: int, records: bytes) -> int:
        # Resolves once the high watermark passes the batch (raises KafkaError otherwise):
        # the coordinator applies what it wrote only then, knowing where it is in the log.
        result = await replica_manager.append_and_wait(OFFSETS_TOPIC, partition, records,
                                                       commit_timeout_ms)
        return result.first_offset

    manager = GroupMetadataManager(
        append, num_partitions=num_partitions,
        compression=Compression(int(config.get("offsets.topic.compression.codec"))),
        load_buffer_size=int(config.get("offsets.load.buffer.size")))
    def topics() -> dict[str, tuple[Any, int]]:
        return {name: (topic.topic_id, len(topic.partitions))
                for name, topic in cache.image.topics_by_name.items()}

    coordinator = GroupCoordinator(GroupConfig.from_properties(config.get), manager,
                                   topics=topics)
    coordinator.consumer_groups.group_configs = \
        lambda group_id: cache.image.configs.get((RESOURCE_GROUP, group_id), {})
    coordinator.start()
    follower = OffsetsTopicFollower(replica_manager, coordinator)
    follower.topics = set(cache.image.topics_by_name)
    follower(cache.image)
    cache.subscribe(follower)
    return coordinator


class OffsetsTopicCreator:
    """Creates `__consumer_offsets` on first use (FindCoordinator), as Kafka does."""

    def __init__(self, config: Any, cache: MetadataCache, create_topics: CreateTopics) -> None:
        self.config = config
        self.cache = cache
        self.create_topics = create_topics

    async def __call__(self) -> ErrorCode:
        if OFFSETS_TOPIC in self.cache.image.topics_by_name:
            return ErrorCode.NONE
        (result,) = await self.create_topics([offsets_topic_spec(self.config)])
        if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("cannot create %s: %s %s", OFFSETS_TOPIC, result.error.name,
                        result.message)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        log.info("created %s", OFFSETS_TOPIC)
        return ErrorCode.NONE
