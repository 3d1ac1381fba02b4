"""The classic group protocol in the coordinator: joins, rebalances, sessions, static members."""

from __future__ import annotations

import asyncio
import dataclasses

from group_harness import (
    TEST_CONFIG,
    Harness,
    assignment,
    eventually,
    run,
    settle,
    subscription,
)

from odradek.coordinator import GroupState
from odradek.protocol.errors import ErrorCode


def test_first_join_needs_a_member_id_then_forms_generation_one(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        first = await h.join(client_id="consumer-1")
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id.startswith("consumer-1-")
        assert h.state() == "Empty"  # a pending member is not a member yet
        joined = await h.join(member_id=first.member_id, client_id="consumer-1")
        assert joined.error == ErrorCode.NONE
        assert (joined.generation_id, joined.leader_id) == (1, first.member_id)
        assert joined.protocol_type == "consumer" and joined.protocol_name == "range"
        assert [member_id for member_id, _, _ in joined.members] == [first.member_id]
        assert h.state() == "CompletingRebalance"
        synced = await h.sync(joined, assignments={first.member_id: assignment(("t", 0))})
        assert synced.error == ErrorCode.NONE and synced.assignment == assignment(("t", 0))
        assert h.state() == "Stable"
        assert h.heartbeat(joined) == ErrorCode.NONE
        await h.close()

    run(scenario())


def test_second_member_triggers_a_rebalance_and_both_get_the_new_generation(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        await h.sync(a, assignments={a.member_id: assignment(("t", 0), ("t", 1))})
        b_task = asyncio.create_task(h.join_new(client_id="b"))
        await eventually(lambda: h.state() == "PreparingRebalance")
        assert h.heartbeat(a) == ErrorCode.REBALANCE_IN_PROGRESS
        # Commits with the current generation stay allowed while preparing (eager consumers
        # commit before they rejoin).
        assert await h.commit("g", {("t", 0): 5}, member_id=a.member_id,
                              generation=a.generation_id) == {("t", 0): ErrorCode.NONE}
        a2 = await h.join(member_id=a.member_id, client_id="a")
        b = await b_task
        assert a2.generation_id == b.generation_id == 2
        assert a2.leader_id == b.leader_id == a.member_id  # the leader stays the leader
        assert {member for member, _, _ in a2.members} == {a.member_id, b.member_id}
        assert b.members == []
        # The follower's SyncGroup waits for the leader's assignment.
        b_sync = asyncio.create_task(h.sync(b))
        await settle()
        assert not b_sync.done()
        assert await h.commit("g", {("t", 0): 6}, member_id=b.member_id,
                              generation=b.generation_id) == {
            ("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
        a_sync = await h.sync(a2, assignments={a.member_id: assignment(("t", 0)),
                                               b.member_id: assignment(("t", 1))})
        assert a_sync.assignment == assignment(("t", 0))
        assert (await b_sync).assignment == assignment(("t", 1))
        assert h.state() == "Stable"
        await h.close()

    run(scenario())


def test_protocol_chosen_by_votes_among_the_protocols_every_member_supports(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        sub = subscription("t")
        tasks = [asyncio.create_task(h.join_new(client_id=f"c{i}", protocols=protocols))
                 for i, protocols in enumerate([
                     [("range", sub), ("roundrobin", sub), ("sticky", sub)],
                     [("roundrobin", sub), ("range", sub)],
                     [("sticky", sub), ("roundrobin", sub), ("range", sub)],
                 ])]
        results = await asyncio.gather(*tasks)
        final = max(r.generation_id for r in results)
        await eventually(lambda: h.state() == "CompletingRebalance")
        # sticky is not supported by c1; of range and roundrobin, roundrobin gets 2 votes.
        group = h.manager.get_group("g")
        assert group.generation_id >= final and group.protocol_name == "roundrobin"
        # A member supporting none of the group's protocols is turned away.
        rejected = await h.join(client_id="x", protocols=[("cooperative-sticky", sub)])
        assert rejected.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        await h.close()

    run(scenario())


def test_heartbeat_and_sync_errors(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new()
        assert h.coordinator.heartbeat("nope", a.member_id, None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        assert h.coordinator.heartbeat("g", "stranger", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        assert h.coordinator.heartbeat("", "m", None, 1) == ErrorCode.INVALID_GROUP_ID
        wrong_generation = dataclasses.replace(a, generation_id=7)
        assert (await h.sync(wrong_generation)).error == ErrorCode.ILLEGAL_GENERATION
        await h.sync(a)
        assert h.heartbeat(wrong_generation) == ErrorCode.ILLEGAL_GENERATION
        result = await h.join(session_ms=5)  # below group.min.session.timeout.ms
        assert result.error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await h.join(member_id="ghost")).error == ErrorCode.UNKNOWN_MEMBER_ID
        await h.close()

    run(scenario())


def test_member_whose_session_expires_is_removed(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a", session_ms=150)
        await h.sync(a)
        # a stops heartbeating: after its session timeout the group is empty again.
        await h.advance(149)
        assert h.state() == "Stable"
        await h.advance(2)  # (2, not 1: the manual clock's float seconds round at epoch scale)
        await eventually(lambda: h.state() == "Empty", timeout=3)
        group = h.manager.get_group("g")
        assert group.generation_id == 2 and not group.members
        assert h.heartbeat(a) == ErrorCode.UNKNOWN_MEMBER_ID
        await h.close()

    run(scenario())


def test_heartbeats_keep_a_member_alive_and_a_silent_one_is_expelled(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a", session_ms=600)
        await h.sync(a)
        b_task = asyncio.create_task(h.join_new(client_id="b", session_ms=600))
        await eventually(lambda: h.state() == "PreparingRebalance")
        a = await h.join(member_id=a.member_id, client_id="a", session_ms=600)
        b = await b_task
        await asyncio.gather(h.sync(a), h.sync(b))
        # a heartbeats every 100 ms, b is silent: b goes, a stays and must rejoin.
        for _ in range(30):
            await h.advance(100)
            error = h.heartbeat(a)
            if error == ErrorCode.REBALANCE_IN_PROGRESS:
                break
        assert error == ErrorCode.REBALANCE_IN_PROGRESS
        a = await h.join(member_id=a.member_id, client_id="a", session_ms=600)
        assert a.generation_id == 3 and [m for m, _, _ in a.members] == [a.member_id]
        await h.close()

    run(scenario())


def test_leave_group_batch_and_rebalance(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        await h.sync(a)
        b_task = asyncio.create_task(h.join_new(client_id="b"))
        await eventually(lambda: h.state() == "PreparingRebalance")
        a = await h.join(member_id=a.member_id, client_id="a")
        b = await b_task
        await asyncio.gather(h.sync(a), h.sync(b))
        error, members = h.coordinator.leave_group(
            "g", [(b.member_id, None), ("unknown-member", None)], "closing")
        assert (error, members) == (ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID])
        assert h.heartbeat(a) == ErrorCode.REBALANCE_IN_PROGRESS
        a = await h.join(member_id=a.member_id, client_id="a")
        assert a.generation_id == 3 and len(a.members) == 1
        assert h.coordinator.leave_group("nope", [("x", None)]) == (
            ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID])
        await h.close()

    run(scenario())


def test_member_not_rejoining_within_the_rebalance_timeout_is_removed(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a", rebalance_ms=200)
        await h.sync(a)
        started = h.clock.monotonic()
        # a never rejoins: b's join completes when the rebalance timeout ends.
        b = await h.advance_until(h.join_new(client_id="b", rebalance_ms=200))
        waited = h.clock.monotonic() - started
        assert b.generation_id == 2 and [m for m, _, _ in b.members] == [b.member_id]
        assert b.leader_id == b.member_id
        assert 0.15 < waited < 2
        assert h.heartbeat(a) == ErrorCode.UNKNOWN_MEMBER_ID
        await h.close()

    run(scenario())


def test_members_that_do_not_sync_in_time_are_removed(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a", rebalance_ms=200)
        await h.sync(a)
        b_task = asyncio.create_task(h.join_new(client_id="b", rebalance_ms=200))
        await eventually(lambda: h.state() == "PreparingRebalance")
        a = await h.join(member_id=a.member_id, client_id="a", rebalance_ms=200)
        b = await b_task
        await h.sync(a, assignments={a.member_id: assignment(("t", 0))})  # b never syncs
        await h.advance(199)
        assert h.state() == "Stable" and h.manager.get_group("g").has(b.member_id)
        await h.advance(2)
        await eventually(lambda: h.state() == "PreparingRebalance", timeout=3)
        assert not h.manager.get_group("g").has(b.member_id)
        await h.close()

    run(scenario())


def test_initial_rebalance_delay_gathers_the_first_members(tmp_path):
    async def scenario():
        config = dataclasses.replace(TEST_CONFIG, initial_rebalance_delay_ms=300)
        h = await Harness(tmp_path, config).start()
        first = asyncio.create_task(h.join_new(client_id="a"))
        await settle()
        await h.advance(100)
        assert not first.done()  # the delay holds the first member's join
        second = asyncio.create_task(h.join_new(client_id="b"))
        a, b = await h.advance_until(asyncio.gather(first, second))
        assert a.generation_id == b.generation_id == 1
        assert len(a.members if a.members else b.members) == 2
        await h.close()

    run(scenario())


def test_group_max_size(tmp_path):
    async def scenario():
        h = await Harness(tmp_path, dataclasses.replace(TEST_CONFIG, max_size=1)).start()
        a = await h.join_new(client_id="a")
        await h.sync(a)
        b = await h.join_new(client_id="b")
        assert b.error == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert h.heartbeat(a) == ErrorCode.NONE  # no rebalance for the rejected member
        await h.close()

    run(scenario())


def test_static_member_restart_keeps_its_assignment_without_a_rebalance(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join(client_id="a", instance="instance-a")  # static: no MEMBER_ID_REQUIRED
        assert a.error == ErrorCode.NONE and a.member_id.startswith("instance-a-")
        b_task = asyncio.create_task(h.join(client_id="b", instance="instance-b"))
        await eventually(lambda: h.state() == "PreparingRebalance")
        a = await h.join(member_id=a.member_id, client_id="a", instance="instance-a")
        b = await b_task
        plan = {a.member_id: assignment(("t", 0)), b.member_id: assignment(("t", 1))}
        await asyncio.gather(h.sync(a, assignments=plan, instance="instance-a"),
                             h.sync(b, instance="instance-b"))
        generation = a.generation_id
        # b restarts: a new JoinGroup with its instance id and no member id.
        b2 = await h.join(client_id="b", instance="instance-b")
        assert b2.error == ErrorCode.NONE and b2.member_id != b.member_id
        assert b2.generation_id == generation and h.state() == "Stable"
        assert b2.leader_id == a.member_id and b2.members == []
        synced = await h.sync(b2, instance="instance-b")
        assert synced.assignment == assignment(("t", 1))
        assert h.heartbeat(a, instance="instance-a") == ErrorCode.NONE  # no rebalance for a
        # The old incarnation is fenced.
        assert h.heartbeat(b, instance="instance-b") == ErrorCode.FENCED_INSTANCE_ID
        # The leader restarts: older clients are told the old leader id (so they do not
        # assign); v9 clients learn they lead but must skip the assignment (KIP-814).
        a2 = await h.join(client_id="a", instance="instance-a")
        assert a2.leader_id == a.member_id != a2.member_id and a2.members == []
        a3 = await h.join(client_id="a", instance="instance-a", v9=True)
        assert a3.leader_id == a3.member_id and a3.skip_assignment and len(a3.members) == 2
        assert a3.generation_id == generation
        # Static members are removed by instance id (what an admin's LeaveGroup sends).
        assert h.coordinator.leave_group("g", [("", "instance-b")]) == (
            ErrorCode.NONE, [ErrorCode.NONE])
        assert h.state() == "PreparingRebalance"
        await h.close()

    run(scenario())


def test_static_member_rejoin_while_completing_starts_over(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join(client_id="a", instance="ia")
        await h.sync(a, instance="ia")
        b_task = asyncio.create_task(h.join(client_id="b", instance="ib"))
        await eventually(lambda: h.state() == "PreparingRebalance")
        a = await h.join(member_id=a.member_id, client_id="a", instance="ia")
        b = await b_task
        assert h.state() == "CompletingRebalance"
        b_sync = asyncio.create_task(h.sync(b, instance="ib"))  # waits for the leader
        await settle()
        # b restarts before the leader assigned: its old SyncGroup is fenced and the group
        # rebalances, since the leader may be assigning to the old member id.
        restarted = asyncio.create_task(h.join(client_id="b", instance="ib"))
        assert (await b_sync).error == ErrorCode.FENCED_INSTANCE_ID
        await eventually(lambda: h.state() == "PreparingRebalance")
        assert (await h.sync(a, instance="ia")).error == ErrorCode.REBALANCE_IN_PROGRESS
        a = await h.join(member_id=a.member_id, client_id="a", instance="ia")
        b2 = await restarted
        assert b2.error == ErrorCode.NONE and b2.generation_id == a.generation_id == 3
        assert {m for m, _, _ in a.members} == {a.member_id, b2.member_id}
        await h.close()

    run(scenario())


def test_groups_of_partitions_not_led_here(tmp_path):
    async def scenario():
        h = await Harness(tmp_path, partitions=2, owned=[0]).start()
        led = next(g for g in (f"group-{i}" for i in range(50))
                   if h.manager.partition_for(g) == 0)
        other = next(g for g in (f"group-{i}" for i in range(50))
                     if h.manager.partition_for(g) == 1)
        assert (await h.join_new(led)).error == ErrorCode.NONE
        assert (await h.join(other)).error == ErrorCode.NOT_COORDINATOR
        assert h.coordinator.fetch_offsets(other, None)[0] == ErrorCode.NOT_COORDINATOR
        # Resigning answers waiting members and forgets the groups.
        h.coordinator.resign(0)
        assert (await h.join(led)).error == ErrorCode.NOT_COORDINATOR
        await h.close()

    run(scenario())


def test_describe_and_list_groups(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a", topics=["t1", "t2"])
        await h.sync(a, assignments={a.member_id: assignment(("t1", 0))})
        await h.commit("simple", {("t1", 0): 3})
        error, summary = h.coordinator.describe_group("g")
        assert error == ErrorCode.NONE
        assert (summary.state, summary.protocol_type, summary.protocol) == (
            "Stable", "consumer", "range")
        (member,) = summary.members
        assert (member.client_id, member.client_host) == ("a", "/127.0.0.1")
        assert member.metadata == subscription("t1", "t2")
        assert member.assignment == assignment(("t1", 0))
        assert h.coordinator.describe_group("missing")[1].state == "Dead"
        _, groups = h.coordinator.list_groups()
        assert {(g.group_id, g.protocol_type, g.state) for g in groups} == {
            ("g", "consumer", "Stable"), ("simple", "", "Empty")}
        _, empty = h.coordinator.list_groups(["empty"])
        assert [g.group_id for g in empty] == ["simple"]
        await h.close()

    run(scenario())


def test_group_state_parse():
    assert GroupState.parse("stable") is GroupState.STABLE
    assert GroupState.parse("PREPARINGREBALANCE") is GroupState.PREPARING_REBALANCE
    assert GroupState.parse("bogus") is None
