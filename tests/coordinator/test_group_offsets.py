"""Committed offsets: commit rules, fetch, persistence in __consumer_offsets, reload,
expiration, OffsetDelete and DeleteGroups."""

from __future__ import annotations

import asyncio
import dataclasses

from group_harness import TEST_CONFIG, Harness, assignment, eventually, run, settle

from odradek.coordinator import OffsetAndMetadata, TopicPartition
from odradek.coordinator.records import LoadedPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import iter_batches, iter_records

RETENTION_MS = TEST_CONFIG.offsets_retention_ms


def stored_records(log) -> list[tuple[bytes, bytes | None]]:
    data = log.read_records(log.log_start_offset, 1 << 24)
    return [(r.key, r.value) for pos, header in iter_batches(data)
            for r in iter_records(data, pos, header)]


def test_simple_commits_and_fetch(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        result = await h.commit("tool", {("t", 0): 10, ("t", 1): 20}, metadata="note")
        assert set(result.values()) == {ErrorCode.NONE}
        error, offsets = h.coordinator.fetch_offsets(
            "tool", [TopicPartition("t", 0), TopicPartition("t", 5)])
        assert error == ErrorCode.NONE
        assert offsets[TopicPartition("t", 0)].offset == 10
        assert offsets[TopicPartition("t", 0)].metadata == "note"
        assert offsets[TopicPartition("t", 5)] is None  # nothing committed
        assert h.committed("tool") == {("t", 0): 10, ("t", 1): 20}
        assert h.coordinator.fetch_offsets("unknown", None) == (ErrorCode.NONE, {})
        # The empty group id is valid for offsets (old consumers used it).
        assert await h.commit("", {("t", 0): 1}) == {("t", 0): ErrorCode.NONE}
        too_big = await h.commit("tool", {("t", 0): 11}, metadata="x" * 5000)
        assert too_big == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE}
        assert h.committed("tool")[("t", 0)] == 10
        await h.close()

    run(scenario())


def test_member_commit_rules(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        # A commit naming a generation for a group that does not exist comes from a stale
        # member.
        assert await h.commit("g", {("t", 0): 1}, member_id="m", generation=3) == {
            ("t", 0): ErrorCode.ILLEGAL_GENERATION}
        a = await h.join_new(client_id="a")
        assert await h.commit("g", {("t", 0): 1}, member_id=a.member_id,
                        generation=a.generation_id) == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
        await h.sync(a)
        ok = await h.commit("g", {("t", 0): 1}, member_id=a.member_id, generation=a.generation_id)
        assert ok == {("t", 0): ErrorCode.NONE}
        assert await h.commit("g", {("t", 0): 2}, member_id=a.member_id, generation=9) == {
            ("t", 0): ErrorCode.ILLEGAL_GENERATION}
        assert await h.commit("g", {("t", 0): 2}, member_id="intruder", generation=1) == {
            ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        # Outside the group (generation -1) only an Empty group takes commits.
        assert await h.commit("g", {("t", 0): 2}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        h.coordinator.leave_group("g", [(a.member_id, None)])
        await eventually(lambda: h.state() == "Empty")
        assert await h.commit("g", {("t", 0): 2}) == {("t", 0): ErrorCode.NONE}
        assert h.committed("g") == {("t", 0): 2}
        await h.close()

    run(scenario())


def test_records_use_the_versions_kafka_3_8_writes(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        await h.sync(a, assignments={a.member_id: assignment(("t", 0))})
        await h.commit("g", {("t", 0): 42}, member_id=a.member_id, generation=1)
        now = h.time_ms()
        await h.coordinator.commit_offsets("old", "", None, -1, {TopicPartition("t", 1): (
            OffsetAndMetadata(7, commit_timestamp=now, expire_timestamp=now + 1000))})
        records = stored_records(h.logs[0])
        by_kind = {}
        for key, value in records:
            parsed_key, key_version = m.decode_consumer_offsets_key(key)
            value_version = int.from_bytes(value[:2], "big")
            by_kind.setdefault((type(parsed_key).__name__, key_version), set()).add(
                value_version)
        assert by_kind == {("GroupMetadataKey", 2): {3}, ("OffsetCommitKey", 1): {1, 3}}
        group_value = [m.decode_consumer_offsets_value(v, 2)[0] for k, v in records
                       if m.decode_consumer_offsets_key(k)[1] == 2][-1]
        (member,) = group_value.members
        assert (group_value.generation, group_value.protocol, group_value.leader) == (
            1, "range", a.member_id)
        assert member.assignment == assignment(("t", 0)) and member.client_host == "/127.0.0.1"
        await h.close()

    run(scenario())


def test_offsets_and_groups_survive_a_reload(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a", session_ms=200)
        await h.sync(a, assignments={a.member_id: assignment(("t", 0))})
        await h.commit("g", {("t", 0): 5}, member_id=a.member_id, generation=1)
        await h.commit("g", {("t", 0): 6, ("t", 1): 1}, member_id=a.member_id, generation=1)
        await h.commit("simple", {("u", 0): 9})
        await h.commit("deleted", {("u", 0): 1})
        assert await h.coordinator.delete_groups(["deleted"]) == {"deleted": ErrorCode.NONE}
        await h.coordinator.close()

        # A new coordinator replays the same log: last value per key, tombstones delete.
        h2 = Harness(tmp_path)
        h2.logs = h.logs
        await h2.start()
        assert h2.committed("g") == {("t", 0): 6, ("t", 1): 1}
        assert h2.committed("simple") == {("u", 0): 9}
        assert h2.coordinator.describe_group("deleted")[1].state == "Dead"
        group = h2.manager.get_group("g")
        assert group.state.value == "Stable" and group.generation_id == 1
        assert group.members[a.member_id].assignment == assignment(("t", 0))
        # The loaded member still has to heartbeat: it does not, so it expires.
        await h2.advance(200)
        await eventually(lambda: h2.state() == "Empty", timeout=3)
        await h2.close()

    run(scenario())


def test_replay_keeps_the_last_value_per_key():
    loaded = LoadedPartition()
    key = m.encode_versioned(m.OffsetCommitKey(group="g", topic="t", partition=0), 1)

    def value(offset: int) -> bytes:
        return m.encode_versioned(m.OffsetCommitValue(offset=offset, commit_timestamp=1), 3)

    group_key = m.encode_versioned(m.GroupMetadataKey(group="g"), 2)
    group_value = m.encode_versioned(m.GroupMetadataValue(protocol_type="consumer",
                                                          generation=4, members=[]), 3)
    for k, v in [(key, value(1)), (key, value(2)), (group_key, group_value), (key, None),
                 (key, value(3)), (b"\x00\x05garbage", b"x"), (None, b"y")]:
        loaded.apply(k, v)
    assert loaded.offsets["g"][TopicPartition("t", 0)].offset == 3
    group = loaded.build_group("g", now_ms=0)
    assert group.state.value == "Empty" and group.generation_id == 4
    assert group.protocol_type == "consumer"
    assert loaded.skipped == 2
    loaded.apply(group_key, None)
    assert "g" not in loaded.groups and "g" in loaded.group_ids()  # offsets keep it alive


def test_offsets_of_an_empty_group_expire_after_the_retention(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        await h.sync(a)
        await h.commit("g", {("t", 0): 5}, member_id=a.member_id, generation=1)
        assert await h.coordinator.expire_offsets(h.time_ms() + 2 * RETENTION_MS) == 0  # Stable
        h.coordinator.leave_group("g", [(a.member_id, None)])
        await eventually(lambda: h.state() == "Empty")
        now = h.time_ms()
        assert await h.coordinator.expire_offsets(now + RETENTION_MS // 2) == 0
        assert await h.coordinator.expire_offsets(now + RETENTION_MS + 1000) == 1
        assert h.coordinator.describe_group("g")[1].state == "Dead"
        # Tombstones were written: a reload finds nothing.
        records = stored_records(h.logs[0])
        assert records[-1][1] is None and records[-2][1] is None
        await h.coordinator.close()
        h2 = Harness(tmp_path)
        h2.logs = h.logs
        await h2.start()
        assert h2.committed("g") == {}
        await h2.close()

    run(scenario())


def test_expiry_of_simple_groups_stable_groups_and_explicit_expire_times(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        await h.commit("simple", {("t", 0): 1})
        now = h.time_ms()
        # OffsetCommit v2-v4 retention: an explicit expire timestamp wins.
        await h.coordinator.commit_offsets("simple", "", None, -1, {TopicPartition("t", 1): (
            OffsetAndMetadata(2, commit_timestamp=now, expire_timestamp=now + 1000))})
        assert await h.coordinator.expire_offsets(now + 2000) == 1
        assert h.committed("simple") == {("t", 0): 1}
        # A Stable consumer group keeps the offsets of topics it subscribes to.
        a = await h.join_new(client_id="a", topics=["t"])
        await h.sync(a)
        await h.commit("g", {("t", 0): 1, ("gone", 0): 1}, member_id=a.member_id, generation=1)
        h.heartbeat(a)
        assert await h.coordinator.expire_offsets(h.time_ms() + RETENTION_MS + 1) == 2
        assert h.committed("g") == {("t", 0): 1}
        assert h.committed("simple") == {}
        await h.close()

    run(scenario())


def test_delete_groups(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a")
        await h.sync(a)
        await h.commit("empty", {("t", 0): 1})
        results = await h.coordinator.delete_groups(["g", "empty", "missing"])
        assert results == {"g": ErrorCode.NON_EMPTY_GROUP, "empty": ErrorCode.NONE,
                           "missing": ErrorCode.GROUP_ID_NOT_FOUND}
        assert h.committed("empty") == {}
        _, groups = h.coordinator.list_groups()
        assert [g.group_id for g in groups] == ["g"]
        await h.close()

    run(scenario())


def test_offset_delete(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        a = await h.join_new(client_id="a", topics=["t1"])
        await h.sync(a)
        await h.commit("g", {("t1", 0): 1, ("t2", 0): 2}, member_id=a.member_id, generation=1)
        error, results = await h.coordinator.delete_offsets(
            "g", [TopicPartition("t1", 0), TopicPartition("t2", 0)])
        assert error == ErrorCode.NONE
        assert results == {TopicPartition("t1", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                           TopicPartition("t2", 0): ErrorCode.NONE}
        assert h.committed("g") == {("t1", 0): 1}
        assert (await h.coordinator.delete_offsets("missing", [TopicPartition("t1", 0)]))[0] == \
            ErrorCode.GROUP_ID_NOT_FOUND
        # Deleting the last offset of an Empty group removes the group.
        await h.commit("simple", {("t1", 0): 1})
        assert await h.coordinator.delete_offsets("simple", [TopicPartition("t1", 0)]) == (
            ErrorCode.NONE, {TopicPartition("t1", 0): ErrorCode.NONE})
        assert h.coordinator.describe_group("simple")[1].state == "Dead"
        # Deleted topics take their offsets along.
        assert h.coordinator.remove_offsets_of_topics({"t1"}) == 1
        assert h.committed("g") == {}
        await h.close()

    run(scenario())


def test_commits_are_rejected_while_the_partition_loads(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        h.coordinator.start()
        h.manager.loading.add(0)
        assert await h.commit("g", {("t", 0): 1}) == {
            ("t", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
        assert h.coordinator.list_groups()[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        h.manager.loading.clear()
        await h.coordinator.elect(0, h.logs[0])
        assert await h.commit("g", {("t", 0): 1}) == {("t", 0): ErrorCode.NONE}
        await asyncio.sleep(0)
        await h.close()

    run(scenario())


def test_failed_appends_map_to_coordinator_errors(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        h.append_error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await h.commit("g", {("t", 0): 1}) == {("t", 0): ErrorCode.NOT_COORDINATOR}
        assert h.committed("g") == {}  # nothing applied that was not stored
        h.append_error = ErrorCode.RECORD_LIST_TOO_LARGE
        assert await h.commit("g", {("t", 0): 1}) == {
            ("t", 0): ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
        # An append that succeeds but does not commit in time applies nothing either.
        h.append_error = None
        h.hold_commits = True
        commit = asyncio.create_task(h.commit("g", {("t", 0): 1}))
        await settle()
        assert h.release_commits(ErrorCode.REQUEST_TIMED_OUT) == 1
        assert await commit == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert h.committed("g") == {}
        await h.close()

    run(scenario())


def test_config_from_broker_properties():
    from odradek.coordinator import GroupConfig

    values = {"group.min.session.timeout.ms": "100", "group.max.session.timeout.ms": "900",
              "group.initial.rebalance.delay.ms": "5", "group.max.size": "7",
              "offsets.retention.minutes": "2", "offsets.retention.check.interval.ms": "1000",
              "offset.metadata.max.bytes": "10"}
    config = GroupConfig.from_properties(values.__getitem__)
    assert dataclasses.astuple(config)[:7] == (100, 900, 5, 7, 120_000, 1000, 10)
    # group.consumer.* not given: Kafka's defaults
    assert (config.consumer.session_timeout_ms, config.consumer.heartbeat_interval_ms,
            config.consumer.assignors) == (45000, 5000, ("uniform", "range"))
