"""KIP-848 consumer groups on the coordinator: assignors, reconciliation, heartbeats, leaves,
timeouts, bad input and reload, on a ManualClock with real offsets-partition logs."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from odradek.coordinator import JoinRequest
from odradek.coordinator.consumer_assignment import (
    AssignmentSpec,
    range_assign,
    reconcile,
    uniform_assign,
)
from odradek.coordinator.consumer_group import ConsumerMember, MemberState
from odradek.coordinator.consumer_group_coordinator import HeartbeatRequest
from odradek.protocol.errors import ErrorCode
from tests.coordinator.group_harness import Harness, run

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": (T, 6), "u": (U, 3)}


def _spec(members, partitions=None, current=None):
    return AssignmentSpec(subscriptions={mm: frozenset(topics) for mm, topics in members.items()},
                          partitions=partitions or {T: 6}, current=current or {})


def _count(assignment):
    return sum(len(p) for p in assignment.values())


def test_uniform_balances_and_is_sticky():
    first = uniform_assign(_spec({"a": {T}, "b": {T}, "c": {T}}))
    assert sorted(_count(a) for a in first.values()) == [2, 2, 2]
    # c leaves: a and b keep theirs and split c's.
    second = uniform_assign(_spec({"a": {T}, "b": {T}}, current=first))
    assert first["a"][T] <= second["a"][T] and first["b"][T] <= second["b"][T]
    assert second["a"][T] | second["b"][T] == frozenset(range(6))
    assert _count(second["a"]) == _count(second["b"]) == 3


def test_uniform_heterogeneous_subscriptions():
    out = uniform_assign(_spec({"a": {T}, "b": {T, U}}, partitions={T: 6, U: 3}))
    assert out["b"].get(U) == frozenset(range(3))
    assert _count(out["a"]) + _count(out["b"]) == 9
    assert abs(_count(out["a"]) - _count(out["b"])) <= 1


def test_range_assigns_consecutive_ranges_co_partitioned():
    out = range_assign(_spec({"b": {T, U}, "a": {T, U}}, partitions={T: 5, U: 5}))
    assert out["a"] == {T: frozenset({0, 1, 2}), U: frozenset({0, 1, 2})}
    assert out["b"] == {T: frozenset({3, 4}), U: frozenset({3, 4})}


def _held_by(owners):
    return lambda topic_id, p: owners.get((topic_id, p), -1)


def test_reconcile_revokes_before_taking_new_partitions():
    member = ConsumerMember("a", member_epoch=1, assigned={T: frozenset({0, 1, 2})})
    target = {T: frozenset({0, 3})}
    step = reconcile(member, 2, target, _held_by({}), None)
    assert step.state == MemberState.UNREVOKED_PARTITIONS and step.member_epoch == 1
    assert step.assigned == {T: frozenset({0})}
    assert step.pending_revocation == {T: frozenset({1, 2})}
    # Still owning a revoked partition: no progress.
    assert reconcile(step, 2, target, _held_by({}), {T: frozenset({0, 1})}) is step
    # Acknowledged: next epoch, the free partition 3 comes.
    done = reconcile(step, 2, target, _held_by({}), {T: frozenset({0})})
    assert done.state == MemberState.STABLE and done.member_epoch == 2
    assert done.assigned == {T: frozenset({0, 3})}


def test_reconcile_waits_for_unreleased_partitions():
    member = ConsumerMember("b", member_epoch=1, assigned={})
    target = {T: frozenset({1, 2})}
    step = reconcile(member, 2, target, _held_by({(T, 2): 1}), None)
    assert step.state == MemberState.UNRELEASED_PARTITIONS and step.member_epoch == 2
    assert step.assigned == {T: frozenset({1})}
    released = reconcile(step, 2, target, _held_by({}), {T: frozenset({1})})
    assert released.state == MemberState.STABLE and released.assigned == target


# ------------------------------------------------------------------------------------------
# the coordinator


async def _harness(tmp_path) -> Harness:
    harness = await Harness(tmp_path).start()
    harness.coordinator.consumer_groups.topics = lambda: TOPICS
    return harness


def _hb(h: Harness, member_id: str, epoch: int, owned=None, **kwargs):
    fields = {"group_id": "g", "member_id": member_id, "member_epoch": epoch}
    if epoch == 0:
        fields.update(rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], owned={})
    else:
        fields["owned"] = owned
    fields.update(kwargs)
    return h.coordinator.consumer_groups.heartbeat(HeartbeatRequest(**fields))


async def _converge(h: Harness, states: dict[str, tuple[int, dict]], rounds: int = 10):
    """Heartbeats every member (acknowledging what it was given) until nothing changes."""
    for _ in range(rounds):
        changed = False
        for member_id, (epoch, owned) in list(states.items()):
            result = await _hb(h, member_id, epoch, owned)
            assert result.error == ErrorCode.NONE, result
            new = (result.member_epoch, dict(result.assignment) if result.assignment is not None
                   else owned)
            changed |= new != (epoch, owned)
            states[member_id] = new
        if not changed:
            return states
    raise AssertionError(f"did not converge: {states}")


def test_three_members_join_leave_and_reload(tmp_path):
    async def scenario():
        h = await _harness(tmp_path)
        try:
            states = {}
            for member_id in ("a", "b", "c"):
                joined = await _hb(h, member_id, 0)
                assert joined.error == ErrorCode.NONE
                assert joined.heartbeat_interval_ms == 5000
                states[member_id] = (joined.member_epoch, dict(joined.assignment))
            states = await _converge(h, states)
            assert sorted(_count(owned) for _, owned in states.values()) == [2, 2, 2]
            group = h.manager.get_group("g").consumer
            assert group.state().value == "Stable" and group.group_epoch == 3
            # c leaves; a and b take its partitions.
            left = await _hb(h, "c", -1)
            assert left.error == ErrorCode.NONE and left.member_epoch == -1
            del states["c"]
            states = await _converge(h, states)
            assert sorted(_count(owned) for _, owned in states.values()) == [3, 3]
            assert group.state().value == "Stable"
            # A reload replays the records into the same state.
            before = {mid: (mm.member_epoch, dict(mm.assigned)) for mid, mm in
                      group.members.items()}
            h.coordinator.resign(0)
            await h.coordinator.elect(0, h.logs[0])
            reloaded = h.manager.get_group("g").consumer
            assert {mid: (mm.member_epoch, dict(mm.assigned)) for mid, mm in
                    reloaded.members.items()} == before
            assert reloaded.group_epoch == group.group_epoch
            assert reloaded.assignment_epoch == group.assignment_epoch
        finally:
            await h.close()

    run(scenario())


def test_bad_input_leaves_the_group_unchanged(tmp_path):
    async def scenario():
        h = await _harness(tmp_path)
        try:
            joined = await _hb(h, "a", 0)
            epoch = joined.member_epoch
            end = h.logs[0].log_end_offset
            fenced = await _hb(h, "a", epoch + 5, owned={})
            assert fenced.error == ErrorCode.FENCED_MEMBER_EPOCH
            unknown = await _hb(h, "nobody", 3, owned={})
            assert unknown.error == ErrorCode.UNKNOWN_MEMBER_ID
            regex = await _hb(h, "z", 0, subscribed_topic_names=None,
                              subscribed_topic_regex="[")
            assert regex.error == ErrorCode.INVALID_REGULAR_EXPRESSION
            assignor = await _hb(h, "z", 0, server_assignor="nope")
            assert assignor.error == ErrorCode.UNSUPPORTED_ASSIGNOR
            missing = await _hb(h, "z", 0, rebalance_timeout_ms=-1)
            assert missing.error == ErrorCode.INVALID_REQUEST
            assert h.logs[0].log_end_offset == end  # nothing written
            group = h.manager.get_group("g").consumer
            assert list(group.members) == ["a"] and group.members["a"].member_epoch == epoch
        finally:
            await h.close()

    run(scenario())


def test_regex_subscription_and_range_assignor(tmp_path):
    async def scenario():
        h = await _harness(tmp_path)
        try:
            joined = await _hb(h, "a", 0, subscribed_topic_names=None,
                               subscribed_topic_regex="t|u", server_assignor="range")
            assert joined.error == ErrorCode.NONE
            assert dict(joined.assignment) == {T: frozenset(range(6)), U: frozenset(range(3))}
            described = h.coordinator.consumer_groups.describe(["g"])[0]
            assert described.assignor == "range" and described.state == "Stable"
        finally:
            await h.close()

    run(scenario())


def test_static_member_leaves_and_comes_back_and_session_expiry(tmp_path):
    async def scenario():
        h = await _harness(tmp_path)
        try:
            joined = await _hb(h, "s1", 0, instance_id="i")
            assigned = dict(joined.assignment)
            taken = await _hb(h, "s2", 0, instance_id="i")
            assert taken.error == ErrorCode.UNRELEASED_INSTANCE_ID
            left = await _hb(h, "s1", -2, instance_id="i")
            assert left.error == ErrorCode.NONE and left.member_epoch == -2
            back = await _hb(h, "s2", 0, instance_id="i")
            assert back.error == ErrorCode.NONE and dict(back.assignment) == assigned
            assert back.member_epoch == joined.member_epoch
            group = h.manager.get_group("g").consumer
            assert list(group.members) == ["s2"]
            # No heartbeat for a session: fenced out.
            await h.advance(45_001)
            for _ in range(50):
                if not group.members:
                    break
                await h.advance(1)
            assert not group.members and group.state().value == "Empty"
        finally:
            await h.close()

    run(scenario())


def test_offset_commit_with_member_epoch(tmp_path):
    async def scenario():
        h = await _harness(tmp_path)
        try:
            joined = await _hb(h, "a", 0)
            stale = await h.commit("g", {("t", 0): 5}, member_id="a",
                                   generation=joined.member_epoch + 1)
            assert set(stale.values()) == {ErrorCode.STALE_MEMBER_EPOCH}
            ok = await h.commit("g", {("t", 0): 5}, member_id="a",
                                generation=joined.member_epoch)
            assert set(ok.values()) == {ErrorCode.NONE}
            assert h.committed("g") == {("t", 0): 5}
            # OffsetFetch v9+ names the member: its current epoch only (Kafka's
            # validateOffsetFetch); a request naming no member (admin) is served.
            fetch = h.coordinator.fetch_offsets
            assert fetch("g", None, member_id="a", member_epoch=joined.member_epoch)[0] == \
                ErrorCode.NONE
            assert fetch("g", None, member_id="a", member_epoch=joined.member_epoch + 1)[0] == \
                ErrorCode.STALE_MEMBER_EPOCH
            assert fetch("g", None, member_id="nobody", member_epoch=1)[0] == \
                ErrorCode.UNKNOWN_MEMBER_ID
            assert fetch("g", None, member_id=None, member_epoch=-1)[0] == ErrorCode.NONE
            _, groups = h.coordinator.list_groups()
            assert [(g.group_id, g.group_type, g.state) for g in groups] == \
                [("g", "consumer", "Stable")]
            # A classic member of another protocol type cannot join the consumer group.
            other = await h.coordinator.join_group(JoinRequest(
                group_id="g", member_id="", group_instance_id=None, client_id="c",
                client_host="/h", session_timeout_ms=10_000, rebalance_timeout_ms=5_000,
                protocol_type="connect", protocols=[("range", b"")]))
            assert other.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        finally:
            await h.close()

    run(scenario())


def test_classic_group_not_upgraded_when_the_policy_forbids_it(tmp_path):
    """group.consumer.migration.policy=downgrade (or disabled): a consumer member cannot join a
    non-empty classic group (GROUP_ID_NOT_FOUND, as Kafka)."""
    async def scenario():
        h = await _harness(tmp_path)
        h.coordinator.consumer_groups.config = dataclasses.replace(
            h.coordinator.consumer_groups.config, migration_policy="downgrade")
        try:
            join = asyncio.ensure_future(h.join_new("g"))
            await h.advance_until(join)
            result = await _hb(h, "a", 0)
            assert result.error == ErrorCode.GROUP_ID_NOT_FOUND
            assert h.manager.get_group("g").consumer is None
        finally:
            await h.close()

    run(scenario())
