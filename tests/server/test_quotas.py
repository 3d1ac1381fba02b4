"""Replication quotas: Kafka's sampled Rate, the throttled-replicas lists, and the quota
following the metadata image (live throttling: tests/cluster/test_replication_cluster.py)."""

from __future__ import annotations

from odradek.clock import ManualClock
from odradek.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC, MetadataImage
from odradek.server.quotas import (
    ALL_PARTITIONS,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    UNLIMITED,
    Rate,
    ReplicationQuota,
    throttled_partitions,
)


def test_a_first_burst_is_spread_over_the_minimum_windows():
    rate = Rate(samples=11, window_ms=1000)
    rate.record(10_000, now_ms=0)
    # Less than 10 full windows have passed: the elapsed time is padded to 10 s.
    assert rate.measure(0) == 1000.0
    assert rate.measure(5_000) == 1000.0


def test_a_steady_flow_measures_at_its_rate():
    rate = Rate(samples=11, window_ms=1000)
    for tick in range(200):  # 100 units every 100 ms for 20 s: 1000/s
        rate.record(100, now_ms=tick * 100)
    assert 950 <= rate.measure(19_999) <= 1050


def test_old_samples_expire():
    rate = Rate(samples=2, window_ms=1000)
    rate.record(5_000, now_ms=0)
    assert rate.measure(0) == 5000.0  # padded to one window
    assert rate.measure(500) == 5000 / 1.5  # Kafka pads the elapsed time, not to it
    assert rate.measure(2_000) == 0.0  # the sample is older than 2 windows


def test_throttled_replica_lists_name_partitions_per_broker():
    assert throttled_partitions("*", 3) is ALL_PARTITIONS
    assert throttled_partitions("0:1,0:3, 2:3,4:2", 3) == {0, 2}
    assert throttled_partitions("", 3) == frozenset()
    assert throttled_partitions("x:3,1:y,5", 3) == frozenset()  # malformed: nothing


def image(configs: dict) -> MetadataImage:
    return MetadataImage(configs=configs)


def test_the_quota_follows_dynamic_broker_and_topic_configs():
    clock = ManualClock()
    quota = ReplicationQuota(3, FOLLOWER_RATE, FOLLOWER_REPLICAS, samples=2, window_ms=1000,
                             clock=clock)
    quota.apply_image(image({}))
    assert quota.bound == UNLIMITED and not quota.is_throttled("t", 0)
    quota.record(10**9)
    assert not quota.is_quota_exceeded()  # no bound
    quota.apply_image(image({
        (RESOURCE_BROKER, ""): {FOLLOWER_RATE: "5000"},  # the cluster default
        (RESOURCE_BROKER, "3"): {FOLLOWER_RATE: "1000"},  # this broker's: wins
        (RESOURCE_TOPIC, "t"): {FOLLOWER_REPLICAS: "0:3,1:4"},
        (RESOURCE_TOPIC, "u"): {FOLLOWER_REPLICAS: "*"}}))
    assert quota.bound == 1000
    assert quota.is_throttled("t", 0) and not quota.is_throttled("t", 1)
    assert quota.is_throttled("u", 7) and not quota.is_throttled("v", 0)
    assert quota.is_quota_exceeded()  # 10^9 bytes in the last window
    clock.advance(2_000)
    assert not quota.is_quota_exceeded()
    quota.record(900)
    assert not quota.is_quota_exceeded()
    quota.record(200)
    assert quota.is_quota_exceeded()
    # Throttles removed: the static bound (unlimited) again.
    quota.apply_image(image({}))
    assert quota.bound == UNLIMITED and not quota.is_quota_exceeded()
