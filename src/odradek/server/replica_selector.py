"""Fetch from the closest replica (KIP-392): which replica a consumer should read from.

`replica.selector.class` names one of Kafka's two selectors:
- `org.apache.kafka.common.replica.LeaderSelector`: always the leader (as no selector);
- `org.apache.kafka.common.replica.RackAwareReplicaSelector`: a replica in the consumer's rack
  (`client.rack`, Fetch v11+ `rack_id`): the leader if it is there, else the most caught-up
  one there (highest log end, then most recently caught up); the leader when no replica
  shares the consumer's rack.

The leader offers only itself and the in-sync followers that already hold the fetch offset
(Kafka's findPreferredReadReplica); the fetch response then names the chosen follower in
`preferred_read_replica` instead of carrying data, and the consumer fetches from it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from odradek.config.broker import LEADER_SELECTOR, RACK_AWARE_SELECTOR


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A replica a consumer could read from (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(self, client_rack: str, leader: ReplicaView,
               replicas: Iterable[ReplicaView]) -> ReplicaView: ...


class LeaderSelector:
    def select(self, client_rack: str, leader: ReplicaView,
               replicas: Iterable[ReplicaView]) -> ReplicaView:
        return leader


class RackAwareReplicaSelector:
    def select(self, client_rack: str, leader: ReplicaView,
               replicas: Iterable[ReplicaView]) -> ReplicaView:
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset,
                                             -r.time_since_last_caught_up_ms))


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector `replica.selector.class` names (the config allows only these two); None
    when unset (leader only)."""
    if class_name == RACK_AWARE_SELECTOR:
        return RackAwareReplicaSelector()
    if class_name == LEADER_SELECTOR:
        return LeaderSelector()
    return None
