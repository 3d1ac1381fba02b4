"""KIP-392 replica selectors (Kafka's LeaderSelector and RackAwareReplicaSelector)."""

from __future__ import annotations

import pytest

from odradek.config.broker import LEADER_SELECTOR, RACK_AWARE_SELECTOR
from odradek.server.config import ConfigError, KafkaConfig
from odradek.server.replica_selector import (
    LeaderSelector,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)

LEADER = ReplicaView(1, "r1", 100, 0)


def test_rack_aware_prefers_the_leader_in_the_clients_rack():
    replicas = [LEADER, ReplicaView(2, "r1", 100, 0)]
    assert RackAwareReplicaSelector().select("r1", LEADER, replicas) == LEADER


def test_rack_aware_picks_the_most_caught_up_replica_of_the_rack():
    behind = ReplicaView(2, "r2", 90, 0)
    ahead_but_stale = ReplicaView(3, "r2", 100, 500)
    ahead_and_fresh = ReplicaView(4, "r2", 100, 10)
    replicas = [LEADER, behind, ahead_but_stale, ahead_and_fresh]
    assert RackAwareReplicaSelector().select("r2", LEADER, replicas) == ahead_and_fresh


def test_rack_aware_falls_back_to_the_leader():
    replicas = [LEADER, ReplicaView(2, "r2", 100, 0)]
    selector = RackAwareReplicaSelector()
    assert selector.select("r3", LEADER, replicas) == LEADER  # no replica in that rack
    assert selector.select("", LEADER, replicas) == LEADER  # no client.rack


def test_the_leader_selector_and_the_config():
    replicas = [LEADER, ReplicaView(2, "r2", 100, 0)]
    assert LeaderSelector().select("r2", LEADER, replicas) == LEADER
    assert isinstance(replica_selector(RACK_AWARE_SELECTOR), RackAwareReplicaSelector)
    assert isinstance(replica_selector(LEADER_SELECTOR), LeaderSelector)
    assert replica_selector(None) is None
    with pytest.raises(ConfigError, match="replica.selector.class"):
        KafkaConfig({"process.roles": "broker,controller", "node.id": "1",
                     "replica.selector.class": "com.example.Mine"})
