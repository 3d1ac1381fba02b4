"""OffsetFetch for one group, shared by the consumer's coordinator and the admin client: the
request at a negotiated version and the committed offsets of its response."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from odradek.client.errors import raise_for
from odradek.client.subscription import OffsetAndMetadata
from odradek.client.types import TopicPartition
from odradek.protocol import messages as m

__all__ = ["MULTI_GROUP_VERSION", "committed_offsets", "offset_fetch_request"]

#: OffsetFetch v8+ names groups in a list
MULTI_GROUP_VERSION = 8
#: require_stable (KIP-447) exists from v7
_REQUIRE_STABLE_VERSION = 7


def offset_fetch_request(group_id: str, topics: Mapping[str, Sequence[int]] | None,
                         require_stable: bool, version: int,
                         member: tuple[str, int] | None = None) -> m.OffsetFetchRequest:
    """The request for `topics` ({name: partitions}; None: every committed partition).
    `member`: (member id, member epoch) of a consumer-protocol member (v9+, KIP-848)."""
    stable = require_stable and version >= _REQUIRE_STABLE_VERSION
    if version >= MULTI_GROUP_VERSION:
        Topics = m.OffsetFetchRequest.OffsetFetchRequestTopics
        member_id, member_epoch = member if member is not None and version >= 9 else (None, -1)
        return m.OffsetFetchRequest(require_stable=stable, groups=[
            m.OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=group_id, member_id=member_id, member_epoch=member_epoch,
                topics=None if topics is None else [
                    Topics(name=name, partition_indexes=list(parts))
                    for name, parts in topics.items()])])
    Topic = m.OffsetFetchRequest.OffsetFetchRequestTopic
    return m.OffsetFetchRequest(
        group_id=group_id, require_stable=stable,
        topics=None if topics is None else [
            Topic(name=name, partition_indexes=list(parts)) for name, parts in topics.items()])


def committed_offsets(response: m.OffsetFetchResponse, version: int
                      ) -> dict[TopicPartition, OffsetAndMetadata]:
    """The committed offsets in the response (partitions without one are left out); raises
    the group's or a partition's error."""
    if version >= MULTI_GROUP_VERSION:
        (group,) = response.groups
        raise_for(group.error_code)
        topics = group.topics
    else:
        raise_for(response.error_code)
        topics = response.topics
    found: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in topics:
        for p in topic.partitions:
            raise_for(p.error_code)
            if p.committed_offset >= 0:
                found[TopicPartition(topic.name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, p.metadata or "",
                    p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None)
    return found
