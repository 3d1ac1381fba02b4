"""GroupApis called directly: FindCoordinator (which creates __consumer_offsets on first use),
OffsetCommit and OffsetFetch, against the real group coordinator following the
`__consumer_offsets` partitions that the real replica manager hosts (no network)."""

from __future__ import annotations

import pytest
from handler_services import BROKER_PORT, HOST, NODE_ID, HandlerNode, run_with_node, until

from odradek.controller.controller import TopicSpec
from odradek.coordinator import OFFSETS_TOPIC
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.server.handlers.groups import COORDINATOR_TYPE_GROUP, COORDINATOR_TYPE_TRANSACTION

OC = m.OffsetCommitRequest
OF = m.OffsetFetchRequest
GROUP = "payments"
OFFSETS_PARTITIONS = 4  # offsets.topic.num.partitions in handler_services


async def create_topic(node: HandlerNode, name: str, partitions: int) -> None:
    (result,) = await node.controller.create_topics([TopicSpec(name, num_partitions=partitions)])
    assert result.error == ErrorCode.NONE, result.message


async def coordinator_ready(node: HandlerNode, group_id: str) -> None:
    """Finds the group's coordinator (creating __consumer_offsets) and waits until it has
    loaded the group's offsets partition, as a client retrying on
    COORDINATOR_LOAD_IN_PROGRESS would."""
    resp = await node.call(node.group_apis.find_coordinator, m.FindCoordinatorRequest(
        key=group_id, key_type=COORDINATOR_TYPE_GROUP), 3)
    assert resp.error_code == ErrorCode.NONE
    manager = node.group_coordinator.manager
    await until(lambda: manager.coordinator_error(group_id) == ErrorCode.NONE,
                f"the coordinator of {group_id} to load its partition")


def commit_request(group_id: str, offsets: dict[tuple[str, int], int],
                   metadata: str = "", leader_epoch: int = -1) -> m.OffsetCommitRequest:
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(OC.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset,
            committed_leader_epoch=leader_epoch, committed_metadata=metadata))
    # generation -1 and no member id: a commit to a group without members (assign mode).
    return OC(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
              retention_time_ms=-1,
              topics=[OC.OffsetCommitRequestTopic(name=t, partitions=ps)
                      for t, ps in by_topic.items()])


def commit_errors(resp: m.OffsetCommitResponse) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


# -- FindCoordinator


@pytest.mark.parametrize("version", [0, 1, 3])
def test_find_coordinator_creates_the_offsets_topic_on_first_use(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        assert OFFSETS_TOPIC not in node.cache.image.topics_by_name
        resp = await node.call(node.group_apis.find_coordinator,
                               m.FindCoordinatorRequest(key=GROUP), version)
        # Odradek answers at once (Kafka says COORDINATOR_NOT_AVAILABLE while the topic it
        # just asked for is created; here the create returns once committed).
        assert resp.error_code == ErrorCode.NONE
        assert (resp.node_id, resp.host, resp.port) == (NODE_ID, HOST, BROKER_PORT)
        topic = node.cache.image.topics_by_name[OFFSETS_TOPIC]
        assert topic.internal
        assert sorted(topic.partitions) == list(range(OFFSETS_PARTITIONS))
        assert node.cache.image.topic_config(OFFSETS_TOPIC)["cleanup.policy"] == "compact"
        # The second lookup finds the topic there and creates nothing.
        offset = node.quorum.high_watermark
        again = await node.call(node.group_apis.find_coordinator,
                                m.FindCoordinatorRequest(key="another-group"), version)
        assert (again.error_code, again.node_id) == (ErrorCode.NONE, NODE_ID)
        assert node.quorum.high_watermark == offset

    run_with_node(tmp_path, scenario)


def test_find_coordinator_unknown_key_type_is_invalid(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.group_apis.find_coordinator,
                               m.FindCoordinatorRequest(key="x", key_type=5), 3)
        assert resp.error_code == ErrorCode.INVALID_REQUEST

    run_with_node(tmp_path, scenario)


def test_find_coordinator_v4_batches_keys(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        resp = await node.call(node.group_apis.find_coordinator, m.FindCoordinatorRequest(
            key_type=COORDINATOR_TYPE_GROUP, coordinator_keys=["g1", "g2", "g3"]), 4)
        assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == [
            (key, ErrorCode.NONE, NODE_ID, HOST, BROKER_PORT) for key in ("g1", "g2", "g3")]
        txn = await node.call(node.group_apis.find_coordinator, m.FindCoordinatorRequest(
            key_type=COORDINATOR_TYPE_TRANSACTION, coordinator_keys=["t1", "t2"]), 5)
        assert [(c.key, c.error_code, c.node_id) for c in txn.coordinators] == [
            ("t1", ErrorCode.NONE, NODE_ID), ("t2", ErrorCode.NONE, NODE_ID)]

    run_with_node(tmp_path, scenario, {"transaction.state.log.num.partitions": "2"})


# -- OffsetCommit / OffsetFetch


@pytest.mark.parametrize("version", [2, 8])
def test_offset_commit_to_an_unknown_partition(tmp_path, version):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", partitions=2)
        await coordinator_ready(node, GROUP)
        resp = await node.call(node.group_apis.offset_commit, commit_request(
            GROUP, {("orders", 0): 10, ("orders", 5): 1, ("absent", 0): 1}), version)
        assert commit_errors(resp) == {
            ("orders", 0): ErrorCode.NONE,
            ("orders", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("absent", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }

    run_with_node(tmp_path, scenario)


def test_offset_commit_before_the_offsets_topic_exists_is_not_coordinator(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", partitions=1)
        resp = await node.call(node.group_apis.offset_commit,
                               commit_request(GROUP, {("orders", 0): 3}), 8)
        assert commit_errors(resp) == {("orders", 0): ErrorCode.NOT_COORDINATOR}

    run_with_node(tmp_path, scenario)


@pytest.mark.parametrize(("commit_version", "fetch_version"), [(2, 1), (6, 5), (8, 7), (9, 9)])
def test_offset_commit_then_fetch(tmp_path, commit_version, fetch_version):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", partitions=3)
        await coordinator_ready(node, GROUP)
        commit = await node.call(node.group_apis.offset_commit, commit_request(
            GROUP, {("orders", 0): 42, ("orders", 2): 7}, metadata="checkpoint",
            leader_epoch=3), commit_version)
        assert set(commit_errors(commit).values()) == {ErrorCode.NONE}
        # What the commit wrote is in the group's offsets partition, below its high watermark.
        partition = node.group_coordinator.manager.partition_for(GROUP)
        (offsets_log,) = [p.log for p in node.replica_manager.partitions_of([OFFSETS_TOPIC])
                          if p.index == partition]
        assert offsets_log.high_watermark > 0

        wanted = [("orders", [0, 1, 2])]
        expected = {0: (42, "checkpoint"), 1: (-1, ""), 2: (7, "checkpoint")}
        epoch_kept = commit_version >= 6 and fetch_version >= 5
        if fetch_version >= 8:
            resp = await node.call(node.group_apis.offset_fetch, OF(groups=[
                OF.OffsetFetchRequestGroup(group_id=GROUP, topics=[
                    OF.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                    for t, ps in wanted])]), fetch_version)
            (group,) = resp.groups
            assert (group.group_id, group.error_code) == (GROUP, ErrorCode.NONE)
            topics = group.topics
        else:
            resp = await node.call(node.group_apis.offset_fetch, OF(group_id=GROUP, topics=[
                OF.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in wanted]),
                fetch_version)
            if fetch_version >= 2:
                assert resp.error_code == ErrorCode.NONE
            topics = resp.topics
        (topic,) = topics
        assert topic.name == "orders"
        fetched = {p.partition_index: (p.committed_offset, p.metadata) for p in topic.partitions}
        assert fetched == expected
        if fetch_version >= 5:
            epochs = {p.partition_index: p.committed_leader_epoch for p in topic.partitions}
            assert epochs == {0: 3 if epoch_kept else -1, 1: -1, 2: 3 if epoch_kept else -1}

    run_with_node(tmp_path, scenario)


def test_offset_fetch_of_all_partitions_of_a_group(tmp_path):
    async def scenario(node: HandlerNode) -> None:
        await create_topic(node, "orders", partitions=2)
        await create_topic(node, "refunds", partitions=1)
        await coordinator_ready(node, GROUP)
        await node.call(node.group_apis.offset_commit, commit_request(
            GROUP, {("orders", 1): 5, ("refunds", 0): 9}), 8)
        # v2+: null topics asks for every partition the group has an offset for.
        resp = await node.call(node.group_apis.offset_fetch, OF(group_id=GROUP, topics=None), 7)
        fetched = {(t.name, p.partition_index): p.committed_offset
                   for t in resp.topics for p in t.partitions}
        assert fetched == {("orders", 1): 5, ("refunds", 0): 9}
        # A group with no offsets: nothing, and no error.
        await coordinator_ready(node, "payments-2")
        empty = await node.call(node.group_apis.offset_fetch, OF(groups=[
            OF.OffsetFetchRequestGroup(group_id="payments-2", topics=None)]), 8)
        assert [(g.group_id, g.error_code, g.topics) for g in empty.groups] == [
            ("payments-2", ErrorCode.NONE, [])]

    run_with_node(tmp_path, scenario)
