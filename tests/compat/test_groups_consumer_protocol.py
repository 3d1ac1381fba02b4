"""librdkafka (confluent-kafka 2.16) with `group.protocol=consumer` (KIP-848) against a real
Odradek broker: three members share a 6-partition topic two partitions each, one leaves and the
other two take its partitions, commits resume; the time to stabilise after a leave is measured
against the classic protocol with the same clients."""

from __future__ import annotations

import time
import uuid

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, TopicPartition
from group_members import (
    KIP848_BROKER_OVERRIDES,
    LibrdkafkaMember,
    create_topic,
    produce_spread,
    wait_for,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("kip848"),
                           overrides=KIP848_BROKER_OVERRIDES).start()
    yield broker
    broker.stop()


def _balanced(members: list[LibrdkafkaMember], per_member: int) -> bool:
    owned = [m.owned for m in members]
    return all(len(o) == per_member for o in owned) and \
        len(set().union(*owned)) == per_member * len(members)


def _leave_and_measure(bootstrap: str, protocol: str,
                       ) -> tuple[float, list[LibrdkafkaMember], str, str]:
    """Three members balance, one leaves: how long until the two others hold everything.
    On failure every member is stopped (a librdkafka consumer must be closed while its broker
    is up)."""
    topic, group = create_topic(bootstrap, 6), f"g-{uuid.uuid4().hex[:6]}"
    produce_spread(bootstrap, topic, 6, 0, 60)
    members = [LibrdkafkaMember(bootstrap, group, topic, protocol) for _ in range(3)]
    for member in members:
        member.start()
    try:
        wait_for(lambda: _balanced(members, 2), 60, f"three {protocol} members with 2 each")
        started = time.monotonic()
        members[-1].stop.set()
        wait_for(lambda: _balanced(members[:-1], 3), 60, f"two {protocol} members with 3 each")
    except BaseException:
        _stop(members)
        raise
    return time.monotonic() - started, members, topic, group


def _stop(members: list[LibrdkafkaMember]) -> None:
    for member in members:
        member.stop.set()
    for member in members:
        member.join(30)
    assert not any(member.is_alive() for member in members), "a member did not stop"


def test_consumer_protocol_join_leave_commit_resume(broker):
    took, members, topic, group = _leave_and_measure(broker.bootstrap, "consumer")
    try:
        wait_for(lambda: sum(len(m.values) for m in members) >= 60, 60, "every record")
    finally:
        _stop(members)
    print(f"consumer protocol: stable {took:.2f} s after a leave")
    assert sorted(v for m in members for v in m.values) == list(range(60))
    # A new member resumes from the committed offsets: only the new records.
    produce_spread(broker.bootstrap, topic, 6, 60, 12)
    resumed = LibrdkafkaMember(broker.bootstrap, group, topic, "consumer")
    resumed.start()
    try:
        wait_for(lambda: len(resumed.values) >= 12, 60, "the records after the commits")
    finally:
        _stop([resumed])
    assert sorted(resumed.values) == list(range(60, 72))
    # The group's committed offsets, read by a client outside the group (OffsetFetch).
    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = checker.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
    finally:
        checker.close()
    assert sorted(tp.offset for tp in committed) == [12] * 6


def test_leave_stabilises_faster_than_classic(broker):
    kip848, members, _, _ = _leave_and_measure(broker.bootstrap, "consumer")
    _stop(members)
    classic, members, _, _ = _leave_and_measure(broker.bootstrap, "classic")
    _stop(members)
    print(f"stabilise after a leave: consumer protocol {kip848:.2f} s, classic "
          f"cooperative-sticky {classic:.2f} s")
    assert kip848 < 30 and classic < 30
