"""Mixed groups and online upgrade/downgrade between classic and consumer groups (Kafka 4.0,
group.consumer.migration.policy): a consumer-protocol member joining a classic group converts
it; classic members are served inside the consumer group (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) with the server-side assignment; the last consumer-protocol member leaving turns it
back into a classic group; a reload of `__consumer_offsets` keeps each state. On a ManualClock
with a real offsets-partition log."""

from __future__ import annotations

import asyncio
import dataclasses

from odradek.coordinator import OffsetAndMetadata, TopicPartition
from odradek.coordinator.group import decode_consumer_protocol
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from tests.coordinator.group_harness import assignment, run, with_generation
from tests.coordinator.test_consumer_group_protocol import T, _harness, _hb


def _partitions(data: bytes) -> set[int]:
    decoded = decode_consumer_protocol(m.ConsumerProtocolAssignment, data)
    return {p for t in decoded.assigned_partitions for p in t.partitions}


async def _classic_member(h):
    """A classic member alone in group g with all six partitions of t (generation 1)."""
    join = asyncio.ensure_future(h.join_new("g"))
    joined = await h.advance_until(join)
    assert joined.error == ErrorCode.NONE and joined.generation_id == 1
    synced = await h.sync(joined, assignments={
        joined.member_id: assignment(*(("t", p) for p in range(6)))})
    assert synced.error == ErrorCode.NONE
    return joined


async def _rejoin_classic(h, joined):
    """What a classic consumer does after REBALANCE_IN_PROGRESS: JoinGroup, SyncGroup."""
    again = await h.join("g", joined.member_id)
    assert again.error == ErrorCode.NONE, again
    synced = await h.sync(again)
    return again, synced


def test_upgrade_mixed_group_and_downgrade_survive_reloads(tmp_path):
    async def scenario():
        h = await _harness(tmp_path)
        try:
            classic = await _classic_member(h)
            # A consumer-protocol member joins: the classic group becomes a consumer group
            # holding the classic member in an epoch equal to its generation.
            b = await _hb(h, "b", 0)
            assert b.error == ErrorCode.NONE
            group = h.manager.get_group("g")
            cg = group.consumer
            assert cg is not None and set(cg.members) == {classic.member_id, "b"}
            member = cg.members[classic.member_id]
            assert member.uses_classic and member.member_epoch == 1
            assert cg.group_epoch == 2
            # b waits for partitions the classic member still holds.
            assert dict(b.assignment) == {}
            # The classic member learns of the rebalance from its heartbeat and rejoins; it
            # keeps three partitions and gives up three (revoked with its rejoin).
            assert h.heartbeat(classic) == ErrorCode.REBALANCE_IN_PROGRESS
            again, synced = await _rejoin_classic(h, classic)
            assert synced.error == ErrorCode.NONE and again.generation_id == 2
            kept = _partitions(synced.assignment)
            assert len(kept) == 3 and kept < set(range(6))
            assert h.heartbeat(again) == ErrorCode.NONE
            b = await _hb(h, "b", b.member_epoch, owned={})
            assert dict(b.assignment) == {T: frozenset(set(range(6)) - kept)}
            assert cg.state().value == "Stable"
            _, groups = h.coordinator.list_groups()
            assert [(g.group_id, g.group_type) for g in groups] == [("g", "consumer")]
            described = h.coordinator.consumer_groups.describe(["g"])[0]
            assert sorted(d.member.uses_classic for d in described.members) == [False, True]
            # A commit of the classic member in its generation (= its member epoch) works.
            ok = await h.commit("g", {("t", min(kept)): 3}, member_id=again.member_id,
                                generation=again.generation_id)
            assert set(ok.values()) == {ErrorCode.NONE}
            stale = await h.commit("g", {("t", min(kept)): 4}, member_id=again.member_id,
                                   generation=again.generation_id - 1)
            assert set(stale.values()) == {ErrorCode.ILLEGAL_GENERATION}
            # Older clients commit with OffsetCommit < v9: fine for a classic member.
            old = await h.coordinator.commit_offsets(
                "g", again.member_id, None, again.generation_id,
                {TopicPartition("t", min(kept)): OffsetAndMetadata(3)}, api_version=8)
            assert set(old.values()) == {ErrorCode.NONE}

            # Reload: the mixed group comes back as it was.
            h.coordinator.resign(0)
            await h.coordinator.elect(0, h.logs[0])
            reloaded = h.manager.get_group("g").consumer
            assert reloaded is not None
            assert {mid: (mm.member_epoch, dict(mm.assigned), mm.uses_classic)
                    for mid, mm in reloaded.members.items()} == \
                {mid: (mm.member_epoch, dict(mm.assigned), mm.uses_classic)
                 for mid, mm in cg.members.items()}
            assert reloaded.members[again.member_id].classic.session_timeout_ms == 10_000

            # b leaves: only the classic member is left, the group is downgraded to a
            # classic group that rebalances; the member rejoins classically and leads.
            left = await _hb(h, "b", -1)
            assert left.error == ErrorCode.NONE
            downgraded = h.manager.get_group("g")
            assert downgraded.consumer is None
            assert downgraded.state.value == "PreparingRebalance"
            assert h.heartbeat(again) == ErrorCode.REBALANCE_IN_PROGRESS
            join = asyncio.ensure_future(h.join("g", again.member_id))
            rejoined = await h.advance_until(join)
            assert rejoined.error == ErrorCode.NONE
            assert rejoined.leader_id == again.member_id
            synced = await h.sync(rejoined, assignments={
                rejoined.member_id: assignment(*(("t", p) for p in range(6)))})
            assert synced.error == ErrorCode.NONE and h.state() == "Stable"
            assert h.committed("g") == {("t", min(kept)): 3}

            # Reload: a classic group again.
            h.coordinator.resign(0)
            await h.coordinator.elect(0, h.logs[0])
            final = h.manager.get_group("g")
            assert final.consumer is None and list(final.members) == [rejoined.member_id]
            assert h.committed("g") == {("t", min(kept)): 3}
        finally:
            await h.close()

    run(scenario())


def test_classic_member_errors_in_a_consumer_group(tmp_path):
    async def scenario():
        h = await _harness(tmp_path)
        try:
            classic = await _classic_member(h)
            b = await _hb(h, "b", 0)
            assert b.error == ErrorCode.NONE
            # A stale generation, an unknown member, a consumer-protocol member on the
            # classic APIs: Kafka's errors.
            assert h.heartbeat(with_generation(classic, 7)) == ErrorCode.ILLEGAL_GENERATION
            unknown = dataclasses.replace(classic, member_id="nobody")
            assert h.heartbeat(unknown) == ErrorCode.UNKNOWN_MEMBER_ID
            consumer_member = dataclasses.replace(classic, member_id="b")
            assert h.heartbeat(consumer_member) == ErrorCode.UNKNOWN_MEMBER_ID
            synced = await h.sync(with_generation(classic, 7))
            assert synced.error == ErrorCode.ILLEGAL_GENERATION
            # Before rejoining, SyncGroup in its old epoch says the group rebalances.
            synced = await h.sync(classic)
            assert synced.error == ErrorCode.REBALANCE_IN_PROGRESS
            # A second classic member joins the mixed group (a new member id first).
            second = await h.join_new("g")
            assert second.error == ErrorCode.NONE and second.leader_id == ""
            assert second.members == []
            # LeaveGroup of the classic members: the group stays a consumer group (b is a
            # consumer-protocol member).
            error, errors = await h.coordinator.leave_group_members(
                "g", [(classic.member_id, None), (second.member_id, None), ("nobody", None)])
            assert error == ErrorCode.NONE
            assert errors == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
            cg = h.manager.get_group("g").consumer
            assert cg is not None and list(cg.members) == ["b"]
        finally:
            await h.close()

    run(scenario())


def test_session_expiry_of_the_last_consumer_member_downgrades(tmp_path):
    """The consumer-protocol member fenced by its session: the group goes back to classic, as
    when it leaves."""
    async def scenario():
        h = await _harness(tmp_path)
        try:
            classic = await _classic_member(h)
            assert (await _hb(h, "b", 0)).error == ErrorCode.NONE
            again, _ = await _rejoin_classic(h, classic)
            # Only the classic member keeps heartbeating (its session is 10 s, b's 45 s).
            for _ in range(20):
                await h.advance(2_500)
                if h.manager.get_group("g").consumer is None:
                    break
                assert h.heartbeat(again) == ErrorCode.NONE
            group = h.manager.get_group("g")
            assert group.consumer is None and list(group.members) == [again.member_id]
            assert group.state.value == "PreparingRebalance"
        finally:
            await h.close()

    run(scenario())

