"""The group coordinator across the commit boundary: what it answers, and what it shows, while
its writes to __consumer_offsets are appended but not committed yet (Kafka's classic
GroupCoordinator semantics)."""

from __future__ import annotations

import asyncio

from group_harness import Harness, assignment, run, settle

from odradek.coordinator import TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import iter_batches, iter_records


def last_group_value(log) -> m.GroupMetadataValue | None:
    data = log.read_records(log.log_start_offset, 1 << 24)
    values = [r.value for pos, header in iter_batches(data)
              for r in iter_records(data, pos, header)
              if m.decode_consumer_offsets_key(r.key)[1] == 2]
    return m.decode_consumer_offsets_value(values[-1], 2)[0] if values[-1] else None


async def stable_group(h: Harness):
    a = await h.join_new(client_id="a")
    await h.sync(a, assignments={a.member_id: assignment(("t", 0))})
    return a


def test_offset_commit_answers_after_the_commit_and_only_then_shows_the_offsets(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        h.hold_commits = True
        commit = asyncio.create_task(h.commit("g", {("t", 0): 10}))
        await settle()
        assert h.held_commits == 1 and not commit.done()
        assert h.committed("g") == {}  # appended, not committed: OffsetFetch does not see it
        h.release_commits()
        assert await commit == {("t", 0): ErrorCode.NONE}
        assert h.committed("g") == {("t", 0): 10}
        await h.close()

    run(scenario())


def test_commits_in_flight_are_applied_in_order_and_keep_the_group_alive(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        h.hold_commits = True
        first = asyncio.create_task(h.commit("simple", {("t", 0): 1}))
        second = asyncio.create_task(h.commit("simple", {("t", 0): 2}))
        await settle()
        # A group whose only offsets are in flight neither expires nor dies.
        assert await h.coordinator.expire_offsets(h.time_ms() + 10**12) == 0
        assert h.coordinator.describe_group("simple")[1].state == "Empty"
        h.release_commits()
        assert await first == await second == {("t", 0): ErrorCode.NONE}
        assert h.committed("simple") == {("t", 0): 2}
        await h.close()

    run(scenario())


def test_offsets_deleted_while_their_commit_is_in_flight_stay_deleted(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        await h.commit("simple", {("t", 0): 1})
        h.hold_commits = True
        commit = asyncio.create_task(h.commit("simple", {("t", 0): 2}))
        await settle()
        delete = asyncio.create_task(h.coordinator.delete_offsets(
            "simple", [TopicPartition("t", 0)]))
        await settle()
        assert h.committed("simple") == {}  # gone at once
        h.release_commits()
        assert await commit == {("t", 0): ErrorCode.NONE}
        assert await delete == (ErrorCode.NONE, {TopicPartition("t", 0): ErrorCode.NONE})
        # The commit landed before the tombstone: it is not applied, in memory or on reload.
        assert h.committed("simple") == {}
        await h.coordinator.close()
        h2 = Harness(tmp_path)
        h2.logs = h.logs
        await h2.start()
        assert h2.committed("simple") == {}
        await h2.close()

    run(scenario())


def test_sync_group_assignment_takes_effect_once_committed(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        b_task = asyncio.create_task(h.join_new(client_id="b"))
        await settle()
        a = await h.join(member_id=a.member_id, client_id="a")
        b = await b_task
        h.hold_commits = True
        plan = {a.member_id: assignment(("t", 0)), b.member_id: assignment(("t", 1))}
        b_sync = asyncio.create_task(h.sync(b))
        a_sync = asyncio.create_task(h.sync(a, assignments=plan))
        await settle()
        assert h.held_commits == 1 and not a_sync.done() and not b_sync.done()
        assert h.state() == "CompletingRebalance"
        h.release_commits()
        assert (await a_sync).assignment == assignment(("t", 0))
        assert (await b_sync).assignment == assignment(("t", 1))
        assert h.state() == "Stable"
        assert last_group_value(h.logs[0]).generation == a.generation_id
        await h.close()

    run(scenario())


def test_sync_group_write_completing_after_the_group_moved_on_changes_nothing(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        h.hold_commits = True
        a_sync = asyncio.create_task(h.sync(a, assignments={a.member_id: assignment(("t", 0))}))
        await settle()
        # A new member joins while the assignment is being written: the group rebalances.
        b_task = asyncio.create_task(h.join_new(client_id="b"))
        await settle()
        assert h.state() == "PreparingRebalance"
        assert (await a_sync).error == ErrorCode.REBALANCE_IN_PROGRESS
        h.release_commits()
        await settle()
        group = h.manager.get_group("g")
        assert h.state() == "PreparingRebalance"
        assert group.members[a.member_id].assignment == b""
        h.hold_commits = False
        a = await h.join(member_id=a.member_id, client_id="a")
        b = await b_task
        assert a.generation_id == b.generation_id == 2
        await h.close()

    run(scenario())


def test_sync_group_write_failing_rebalances_the_group(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        h.hold_commits = True
        a_sync = asyncio.create_task(h.sync(a, assignments={a.member_id: assignment(("t", 0))}))
        await settle()
        h.release_commits(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        assert (await a_sync).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert h.state() == "PreparingRebalance"
        await h.close()

    run(scenario())


def test_static_member_restart_is_answered_once_its_member_id_is_committed(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join(client_id="a", instance="ia")
        await h.sync(a, instance="ia")
        h.hold_commits = True
        restarted = asyncio.create_task(h.join(client_id="a", instance="ia"))
        await settle()
        assert h.held_commits == 1 and not restarted.done()
        h.release_commits()
        a2 = await restarted
        assert a2.error == ErrorCode.NONE and a2.member_id != a.member_id
        assert a2.generation_id == a.generation_id and h.state() == "Stable"
        # A failed write reverts the member id: the previous incarnation stays the member.
        h.append_error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        failed = await h.join(client_id="a", instance="ia")
        assert failed.error == ErrorCode.NOT_COORDINATOR
        assert h.heartbeat(a2, instance="ia") == ErrorCode.NONE
        await h.close()

    run(scenario())


def test_resigning_between_append_and_commit_answers_not_coordinator(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        await stable_group(h)
        h.hold_commits = True
        commit = asyncio.create_task(h.commit("simple", {("t", 0): 1}))
        await settle()
        h.coordinator.resign(0)
        assert await commit == {("t", 0): ErrorCode.NOT_COORDINATOR}
        h.release_commits()
        await settle()
        assert h.manager.get_group("simple") is None
        await h.close()

    run(scenario())


def test_the_join_completing_with_no_members_stores_the_empty_generation(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await stable_group(h)
        h.coordinator.leave_group("g", [(a.member_id, None)])
        await settle()
        assert h.state() == "Empty"
        stored = last_group_value(h.logs[0])
        assert (stored.generation, stored.members) == (2, [])
        await h.close()

    run(scenario())
