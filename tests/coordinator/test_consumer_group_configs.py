"""GROUP config resources on the coordinator: a group's `consumer.session.timeout.ms` and
`consumer.heartbeat.interval.ms` (its ConfigRecords in the metadata image) replace the broker's
for that group only, read at each heartbeat as Kafka's GroupConfigManager."""

from __future__ import annotations

from odradek.coordinator.consumer_group_coordinator import HeartbeatRequest
from odradek.protocol.errors import ErrorCode
from tests.coordinator.group_harness import Harness, run
from tests.coordinator.test_consumer_group_protocol import TOPICS


def _join(h: Harness, group: str, member_id: str):
    return h.coordinator.consumer_groups.heartbeat(HeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"], owned={}))


def test_group_config_overrides_session_timeout_and_heartbeat_interval(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        h.coordinator.consumer_groups.topics = lambda: TOPICS
        configs = {"short": {"consumer.session.timeout.ms": "10000",
                             "consumer.heartbeat.interval.ms": "2000"}}
        h.coordinator.consumer_groups.group_configs = lambda group: configs.get(group, {})
        try:
            short = await _join(h, "short", "a")
            other = await _join(h, "other", "b")
            assert short.error == other.error == ErrorCode.NONE
            assert short.heartbeat_interval_ms == 2000
            assert other.heartbeat_interval_ms == 5000  # the broker's
            short_group = h.manager.get_group("short").consumer
            other_group = h.manager.get_group("other").consumer
            # Past the group's own 10 s session timeout: its member is gone, the other stays.
            await h.advance(10_001)
            for _ in range(50):
                if not short_group.members:
                    break
                await h.advance(1)
            assert not short_group.members
            assert list(other_group.members) == ["b"]
            # The config changes: the next heartbeat gets the new interval.
            configs["other"] = {"consumer.heartbeat.interval.ms": "3000"}
            again = await h.coordinator.consumer_groups.heartbeat(HeartbeatRequest(
                group_id="other", member_id="b", member_epoch=other.member_epoch, owned=None))
            assert again.error == ErrorCode.NONE and again.heartbeat_interval_ms == 3000
        finally:
            await h.close()

    run(scenario())
