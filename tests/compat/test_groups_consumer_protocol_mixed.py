"""KIP-848 groups of mixed clients against a real Odradek broker: Odradek's own consumer with
`group.protocol=consumer` and librdkafka with the same setting in one group (join, cooperative
rebalances on join and leave, commit and resume); bad ConsumerGroupHeartbeats refused with
Kafka's errors and the group unchanged (ConsumerGroupDescribe)."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from broker_process import BrokerProcess
from group_members import (
    KIP848_BROKER_OVERRIDES,
    LibrdkafkaMember,
    OdradekMember,
    create_topic,
    produce_spread,
    wait_for,
)
from kafka import KafkaConsumer

from odradek.client import Connection
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("kip848-mixed"),
                           overrides=KIP848_BROKER_OVERRIDES).start()
    yield broker
    broker.stop()


def _balanced(members, per_member: int, partitions: int) -> bool:
    owned = [m.owned for m in members]
    return all(len(o) == per_member for o in owned) and \
        len(set().union(*owned)) == partitions


def _stop(members) -> None:
    for member in members:
        member.stop.set()
    for member in members:
        if member.is_alive() or member.ident is not None:
            member.join(30)
    assert not any(member.is_alive() for member in members), "a member did not stop"


def test_odradek_and_librdkafka_consumer_protocol_members_share_a_group(broker):
    topic, group = create_topic(broker.bootstrap, 6), f"g-{uuid.uuid4().hex[:6]}"
    produce_spread(broker.bootstrap, topic, 6, 0, 60)
    first = OdradekMember(broker.bootstrap, group, topic)
    second = OdradekMember(broker.bootstrap, group, topic)
    third = LibrdkafkaMember(broker.bootstrap, group, topic)
    members = [first, second, third]
    first.start()
    try:
        wait_for(lambda: len(first.owned) == 6, 30, "the first member owns all six partitions")
        # Two more join: the first member gives up four partitions and keeps two, never
        # revoking the ones it keeps.
        second.start()
        third.start()
        wait_for(lambda: _balanced(members, 2, 6), 60, "three members with two each")
        kept = set(first.owned)
        assert all(not (revoked & kept) for revoked in first.listener.revoked)
        assert not first.listener.lost
        # The second one leaves: the two others take its partitions and keep theirs.
        leaving_owned = set(second.owned)
        kept_first, kept_third = set(first.owned), set(third.owned)
        revoked_before = (len(first.listener.revoked), len(third.revoked))
        second.stop.set()
        second.join(30)
        survivors = [first, third]
        wait_for(lambda: _balanced(survivors, 3, 6), 60, "two members with three each")
        assert kept_first <= first.owned and kept_third <= third.owned
        assert leaving_owned <= first.owned | third.owned
        assert (len(first.listener.revoked), len(third.revoked)) == revoked_before
        assert not first.listener.lost
        # The listener runs per reconciliation (join, give up four, take one more), not
        # per heartbeat.
        assert len(first.listener.assigned) <= 4, first.listener.assigned
        wait_for(lambda: set(first.values) | set(second.values) | set(third.values)
                 == set(range(60)), 60, "every record")
    finally:
        _stop(members)
    # A new member resumes from the committed offsets: only the new records.
    produce_spread(broker.bootstrap, topic, 6, 60, 12)
    resumed = OdradekMember(broker.bootstrap, group, topic)
    resumed.start()
    try:
        wait_for(lambda: len(resumed.values) >= 12, 60, "the records after the commits")
    finally:
        _stop([resumed])
    assert sorted(resumed.values) == list(range(60, 72))


async def _describe(broker, group: str):
    connection = await Connection.open(broker.host, broker.port, client_id="describe")
    try:
        response = await connection.send(m.ConsumerGroupDescribeRequest(group_ids=[group]))
        return response.groups[0]
    finally:
        await connection.close()


def test_classic_and_consumer_protocol_members_coexist(broker):
    """A classic librdkafka member's group is upgraded online when a consumer-protocol member
    joins; both consume their share; when the consumer-protocol member leaves the group is a
    classic group again and the classic member takes everything."""
    topic, group = create_topic(broker.bootstrap, 6), f"mixed-{uuid.uuid4().hex[:6]}"
    produce_spread(broker.bootstrap, topic, 6, 0, 60)
    classic = LibrdkafkaMember(broker.bootstrap, group, topic, protocol="classic")
    classic.start()
    modern = None
    try:
        wait_for(lambda: len(classic.owned) == 6, 60, "the classic member owns all six")
        modern = OdradekMember(broker.bootstrap, group, topic)
        modern.start()
        wait_for(lambda: _balanced([classic, modern], 3, 6), 60, "three partitions each")
        described = asyncio.run(_describe(broker, group))
        assert described.error_code == ErrorCode.NONE
        assert sorted(mm.member_type for mm in described.members) == [0, 1]  # classic, consumer
        wait_for(lambda: set(classic.values) | set(modern.values) == set(range(60)), 60,
                 "every record")
        modern.stop.set()
        modern.join(30)
        wait_for(lambda: len(classic.owned) == 6, 60, "the classic member owns all six again")
        described = asyncio.run(_describe(broker, group))
        assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND  # a classic group again
        produce_spread(broker.bootstrap, topic, 6, 60, 6)
        wait_for(lambda: set(range(60, 66)) <= set(classic.values), 60, "the new records")
    finally:
        _stop([member for member in (classic, modern) if member is not None])


class KafkaPythonMember(threading.Thread):
    """kafka-python (classic protocol, eager range assignor) polling in its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300)
        self.owned: set[int] = set()
        self.values: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            batches = self.consumer.poll(timeout_ms=50)
            for records in batches.values():
                self.values.extend(int(r.value) for r in records)
            if batches:
                self.consumer.commit()
            self.owned = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()


def test_kafka_python_classic_member_in_a_consumer_group(broker):
    """kafka-python (OffsetCommit below v9, eager) joins a consumer group as a classic
    member: it gets its share from the server assignor, commits, and takes everything when
    the consumer-protocol member leaves (downgrade)."""
    topic, group = create_topic(broker.bootstrap, 4), f"kp-{uuid.uuid4().hex[:6]}"
    produce_spread(broker.bootstrap, topic, 4, 0, 40)
    modern = OdradekMember(broker.bootstrap, group, topic)
    modern.start()
    classic = None
    try:
        wait_for(lambda: len(modern.owned) == 4, 30, "the consumer member owns all four")
        classic = KafkaPythonMember(broker.bootstrap, group, topic)
        classic.start()
        wait_for(lambda: _balanced([classic, modern], 2, 4), 60, "two partitions each")
        wait_for(lambda: set(classic.values) | set(modern.values) == set(range(40)), 60,
                 "every record")
        modern.stop.set()
        modern.join(30)
        wait_for(lambda: len(classic.owned) == 4, 60, "kafka-python owns all four")
        produce_spread(broker.bootstrap, topic, 4, 40, 4)
        wait_for(lambda: set(range(40, 44)) <= set(classic.values), 60, "the new records")
    finally:
        _stop([member for member in (classic, modern) if member is not None])


# ------------------------------------------------------------------------------------------
# bad input on the wire


def _heartbeat(group: str, member_id: str, epoch: int, **fields) -> m.ConsumerGroupHeartbeatRequest:
    R = m.ConsumerGroupHeartbeatRequest
    base = {"group_id": group, "member_id": member_id, "member_epoch": epoch}
    if epoch == 0:
        base.update(rebalance_timeout_ms=30_000, topic_partitions=[])
    base.update(fields)
    return R(**base)


def _shape(described) -> tuple:
    return (described.group_state, described.group_epoch, described.assignment_epoch,
            sorted((mm.member_id, mm.member_epoch,
                    tuple(sorted((t.topic_name, tuple(t.partitions))
                                 for t in mm.assignment.topic_partitions)))
                   for mm in described.members))


def test_bad_heartbeats_get_kafkas_errors_and_leave_the_group_unchanged(broker):
    topic, group = create_topic(broker.bootstrap, 3), f"bad-{uuid.uuid4().hex[:6]}"

    async def scenario():
        connection = await Connection.open(broker.host, broker.port, client_id="bad-input")
        try:
            coordinator = await connection.send(m.FindCoordinatorRequest(
                key_type=0, coordinator_keys=[group]))
            assert coordinator.coordinators[0].error_code == ErrorCode.NONE
            member = str(uuid.uuid4())
            joined = await connection.send(_heartbeat(group, member, 0,
                                                      subscribed_topic_names=[topic]))
            assert joined.error_code == ErrorCode.NONE and joined.member_epoch > 0

            async def describe():
                response = await connection.send(m.ConsumerGroupDescribeRequest(
                    group_ids=[group]))
                (described,) = response.groups
                assert described.error_code == ErrorCode.NONE
                return _shape(described)

            before = await describe()
            epoch = joined.member_epoch
            cases = [
                (_heartbeat(group, member, epoch + 7, topic_partitions=[]),
                 ErrorCode.FENCED_MEMBER_EPOCH),
                (_heartbeat(group, str(uuid.uuid4()), 1, topic_partitions=[]),
                 ErrorCode.UNKNOWN_MEMBER_ID),
                (_heartbeat(group, str(uuid.uuid4()), 0, subscribed_topic_regex="(unclosed"),
                 ErrorCode.INVALID_REGULAR_EXPRESSION),
                (_heartbeat(group, str(uuid.uuid4()), 0, subscribed_topic_names=[topic],
                            server_assignor="no-such-assignor"),
                 ErrorCode.UNSUPPORTED_ASSIGNOR),
                # The member itself asking for an unknown assignor changes nothing either.
                (_heartbeat(group, member, epoch, server_assignor="no-such-assignor"),
                 ErrorCode.UNSUPPORTED_ASSIGNOR),
            ]
            for request, expected in cases:
                response = await connection.send(request)
                assert ErrorCode.from_code(response.error_code) == expected, request
                assert response.error_message
                assert await describe() == before
            left = await connection.send(_heartbeat(group, member, -1))
            assert left.error_code == ErrorCode.NONE and left.member_epoch == -1
        finally:
            await connection.close()

    asyncio.run(scenario())


def test_fenced_odradek_member_rejoins_with_epoch_zero(broker):
    """A member whose epoch the coordinator no longer knows (removed meanwhile) loses its
    partitions (on_partitions_lost, no revoke) and rejoins with epoch 0 under its member id."""
    topic, group = create_topic(broker.bootstrap, 2), f"fence-{uuid.uuid4().hex[:6]}"
    member = OdradekMember(broker.bootstrap, group, topic)
    member.start()
    try:
        wait_for(lambda: len(member.owned) == 2, 30, "the member owns both partitions")
        member_id = member.consumer.group_metadata().member_id

        async def remove():
            # Another client leaves in its name: the coordinator forgets the member.
            connection = await Connection.open(broker.host, broker.port, client_id="fencer")
            try:
                response = await connection.send(_heartbeat(group, member_id, -1))
                assert response.error_code == ErrorCode.NONE
            finally:
                await connection.close()

        asyncio.run(remove())
        wait_for(lambda: member.listener.lost, 30, "the partitions lost")
        wait_for(lambda: len(member.owned) == 2, 30, "the member back with both partitions")
        assert member.listener.lost == [{0, 1}]
        assert member.consumer.group_metadata().member_id == member_id
        assert not member.listener.revoked
    finally:
        _stop([member])
