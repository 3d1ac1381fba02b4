"""`controller_mutation_rate` quotas (KIP-599, Kafka's ControllerMutationQuotaManager): the
partitions a client creates or deletes per second, through CreateTopics, DeleteTopics and
CreatePartitions, counted on the active controller (where those requests are carried out,
forwarded or not) with a token bucket per quota entity (`quotas.TokenBucket`).

Kafka's two behaviours, by request version:
- strict (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): a topic asked while the
  client's credits are below zero fails with THROTTLING_QUOTA_EXCEEDED and is not carried out;
  one that finds credits left goes through, even if it spends more than is left;
- permissive (older versions): every topic goes through and its partitions are counted.
Either way the answer carries `throttle_time_ms` (until the credits are back at zero) and the
broker that took the client's request mutes the connection for that long. Only topics carried
out count (a topic that fails validation spends nothing).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.controller.client_quota_control import CONTROLLER_MUTATION_RATE
from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import ErrorCode
from odradek.server.client_quotas import ClientQuotaManager, user_of
from odradek.server.quotas import TokenBucket

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
STRICT_FROM_VERSION = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}
THROTTLED_MESSAGE = "The throttling quota has been exceeded."

Handler = Callable[..., Any]


class ControllerMutationQuotas:
    def __init__(self, image: Callable[[], MetadataImage], default_partitions: Callable[[], int],
                 *, samples: int = 11, window_ms: int = 1000,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.image = image
        self.default_partitions = default_partitions
        self.samples, self.window_ms = samples, window_ms
        self.clock = clock
        self.quotas = ClientQuotaManager(CONTROLLER_MUTATION_RATE, samples=samples,
                                         window_ms=window_ms, clock=clock)
        self.buckets: dict[tuple[str, str], TokenBucket] = {}

    def apply_image(self, image: MetadataImage) -> None:
        self.quotas.update(image.client_quotas)

    def wrap(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        """The handler table with CreateTopics, DeleteTopics and CreatePartitions held to the
        quotas (the other handlers as they are)."""
        return {key: self._wrap(key, handler) if key in STRICT_FROM_VERSION else handler
                for key, handler in handlers.items()}

    def _wrap(self, api_key: int, handler: Handler) -> Handler:
        async def limited(ctx: Any, request: Any) -> Any:
            if not self.quotas.enabled:
                return await _call(handler, ctx, request)
            quota = self.quotas.quota(user_of(ctx.principal), ctx.client_id or "")
            if quota is None:
                return await _call(handler, ctx, request)
            bound, sensor = quota
            bucket = self.buckets.get(sensor)
            if bucket is None:
                bucket = self.buckets[sensor] = TokenBucket(self.samples, self.window_ms)
            return await self._limited(api_key, handler, ctx, request, bound, bucket)
        return limited

    async def _limited(self, api_key: int, handler: Handler, ctx: Any, request: Any,
                       bound: float, bucket: TokenBucket) -> Any:
        strict = ctx.api_version >= STRICT_FROM_VERSION[api_key]
        topics = _topics(api_key, ctx.api_version, request)
        now_ms = int(self.clock.monotonic() * 1000)
        throttled: list[Any] = []
        spent: dict[int, float] = {}  # index in the request -> partitions counted
        for index, topic in enumerate(topics):
            if strict and bucket.measure(bound, now_ms) < 0:
                throttled.append(topic)
                continue
            partitions = self._partitions(api_key, topic)
            bucket.record(bound, partitions, now_ms)
            spent[index] = partitions
        if throttled:
            request = copy.copy(request)
            _set_topics(api_key, ctx.api_version, request,
                        [t for t in topics if not any(t is d for d in throttled)])
        response = await _call(handler, ctx, request)
        # Topics that failed spent nothing: give their partitions back.
        failed = _failed_names(api_key, response)
        for index, partitions in spent.items():
            if _name(api_key, ctx.api_version, topics[index]) in failed:
                bucket.record(bound, -partitions, now_ms)
        _add_throttled(api_key, ctx.api_version, response, throttled)
        throttle_ms = bucket.throttle_time_ms(bound, int(self.clock.monotonic() * 1000))
        if throttle_ms > 0:
            response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
        return response

    def _partitions(self, api_key: int, topic: Any) -> int:
        image = self.image()
        if api_key == CREATE_TOPICS:
            if topic.num_partitions > 0:
                return topic.num_partitions
            return len(topic.assignments) or self.default_partitions()
        if api_key == DELETE_TOPICS:
            existing = None
            if isinstance(topic, str):
                existing = image.topic(topic)
            elif getattr(topic, "name", None):
                existing = image.topic(topic.name)
            elif getattr(topic, "topic_id", None) is not None:
                existing = image.topics_by_id.get(topic.topic_id)
            return len(existing.partitions) if existing is not None else 0
        existing = image.topic(topic.name)
        current = len(existing.partitions) if existing is not None else 0
        return max(0, topic.count - current)


async def _call(handler: Handler, ctx: Any, request: Any) -> Any:
    result = handler(ctx, request)
    return await result if inspect.isawaitable(result) else result


def _topics(api_key: int, version: int, request: Any) -> list[Any]:
    if api_key == DELETE_TOPICS:
        return list(request.topic_names) if version < 6 else list(request.topics)
    return list(request.topics)


def _set_topics(api_key: int, version: int, request: Any, topics: list[Any]) -> None:
    if api_key == DELETE_TOPICS and version < 6:
        request.topic_names = topics
    else:
        request.topics = topics


def _name(api_key: int, version: int, topic: Any) -> Any:
    if api_key == DELETE_TOPICS and version < 6:
        return topic
    return topic.name if topic.name is not None else getattr(topic, "topic_id", None)


def _results(api_key: int, response: Any) -> list[Any]:
    if api_key == CREATE_TOPICS:
        return response.topics
    if api_key == DELETE_TOPICS:
        return response.responses
    return response.results


def _failed_names(api_key: int, response: Any) -> set[Any]:
    failed = set()
    for result in _results(api_key, response):
        if result.error_code != ErrorCode.NONE:
            failed.add(result.name)
            if getattr(result, "topic_id", None) is not None:
                failed.add(result.topic_id)
    return failed


def _add_throttled(api_key: int, version: int, response: Any, throttled: list[Any]) -> None:
    if not throttled:
        return
    results = _results(api_key, response)
    result_type = getattr(type(response), {
        CREATE_TOPICS: "CreatableTopicResult", DELETE_TOPICS: "DeletableTopicResult",
        CREATE_PARTITIONS: "CreatePartitionsTopicResult"}[api_key])
    for topic in throttled:
        item = result_type(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                           error_message=THROTTLED_MESSAGE)
        if api_key == DELETE_TOPICS and version < 6:
            item.name = topic
        else:
            item.name = topic.name
            if api_key == DELETE_TOPICS and topic.name is None:
                item.topic_id = topic.topic_id
        if api_key == CREATE_TOPICS:
            item.num_partitions = -1
            item.replication_factor = -1
        results.append(item)
