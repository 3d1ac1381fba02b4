"""Metadata snapshots in the metadata quorum: the image as records rebuilds it exactly;
MetadataQuorum writes snapshots of its committed image (byte and time triggers), truncates its
log before them (retention), loads the newest valid one at restart (an older one if the newest
is corrupt); a voter cut off while the others commit catches up from the leader's snapshot, and
its listeners see the snapshot's image."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import MappingProxyType

from test_quorum import WAIT_S, topic_records
from test_quorum_voters import FAST, LocalNetwork, active, until

from odradek.clock import ManualClock
from odradek.config.listeners import Endpoint
from odradek.controller.quorum import METADATA_TOPIC, MetadataQuorum
from odradek.metadata.image import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    image_records,
    replay_records,
)
from odradek.protocol import messages as m
from odradek.raft.snapshot import OffsetAndEpoch, snapshot_file_name
from odradek.storage import Log
from odradek.storage.config import LogConfig

SMALL_SEGMENTS = LogConfig.from_props({"segment.bytes": 2048, "retention.ms": -1,
                                       "retention.bytes": -1})


def open_small_log(directory: Path) -> Log:
    return Log(directory / f"{METADATA_TOPIC}-0", SMALL_SEGMENTS, had_clean_shutdown=False)


def rich_image() -> MetadataImage:
    topic_id, other_id = uuid.uuid4(), uuid.uuid4()

    def frozen(mapping):
        return MappingProxyType(dict(mapping))

    brokers = {
        1: BrokerRegistration(1, uuid.uuid4(), 10, frozen({
            "PLAINTEXT": Endpoint("PLAINTEXT", "h1", 9092, "PLAINTEXT"),
            "SSL": Endpoint("SSL", "h1", 9093, "SSL")}), "rack-a", False, False,
            frozen({"metadata.version": (1, 20)})),
        2: BrokerRegistration(2, uuid.uuid4(), 11, frozen({
            "PLAINTEXT": Endpoint("PLAINTEXT", "h2", 9092, "PLAINTEXT")}), None, True, False),
        3: BrokerRegistration(3, uuid.uuid4(), 12, frozen({
            "PLAINTEXT": Endpoint("PLAINTEXT", "h3", 9092, "PLAINTEXT")}), None, False, True),
    }
    orders = TopicImage("orders", topic_id, frozen({
        0: PartitionRegistration((1, 2, 3), (1, 3), 1, 4, 9),
        1: PartitionRegistration((2, 3, 1), (2,), 2, 1, 2, removing_replicas=(1,),
                                 adding_replicas=(3,), leader_recovery_state=1),
    }))
    empty_topic = TopicImage("__internal", other_id, frozen({
        0: PartitionRegistration((1,), (), -1, 7, 8)}))
    topics = {topic_id: orders, other_id: empty_topic}
    return MetadataImage(
        offset=1234, epoch=5,
        features=frozen({"metadata.version": 20, "kraft.version": 1}),
        brokers=frozen(brokers),
        topics_by_id=frozen(topics),
        topics_by_name=frozen({t.name: t for t in topics.values()}),
        configs=frozen({(RESOURCE_TOPIC, "orders"): frozen({"retention.ms": "1000",
                                                             "cleanup.policy": "compact"}),
                        (RESOURCE_BROKER, ""): frozen({"log.retention.bytes": "5"}),
                        (RESOURCE_BROKER, "2"): frozen({"num.io.threads": "4"})}),
        next_producer_id=5000,
        client_quotas=frozen({(("user", "alice"),): frozen({"producer_byte_rate": 1024.0}),
                              (("client-id", None), ("user", "bob")): frozen(
                                  {"consumer_byte_rate": 2.5, "request_percentage": 50.0})}),
    )


def test_image_records_rebuild_the_image_exactly() -> None:
    image = rich_image()
    records = image_records(image)
    # Through the wire encoding too, as a snapshot stores them.
    decoded = [m.decode_metadata_record(m.encode_metadata_record(r, type(r).MAX_VERSION))[0]
               for r in records]
    rebuilt = replay_records(decoded, image.offset, image.epoch)
    assert rebuilt == image
    assert replay_records(image_records(MetadataImage())) == MetadataImage()


def config_records(count: int, start: int = 0) -> list[m.ConfigRecord]:
    return [m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name="orders",
                           name=f"key-{i % 50}", value=f"value-{i}")
            for i in range(start, start + count)]


def snapshot_files(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / f"{METADATA_TOPIC}-0").glob("*.checkpoint*"))


def test_single_voter_snapshots_truncates_and_restarts_from_the_snapshot(tmp_path):
    async def scenario() -> None:
        quorum = MetadataQuorum(open_small_log(tmp_path), 1, snapshot_max_bytes=4000,
                                retention_bytes=0, retention_ms=-1)
        quorum.load()
        await quorum.become_leader()
        await quorum.append(topic_records("orders"))
        for round_ in range(30):
            await asyncio.wait_for(quorum.append(config_records(20, round_ * 20)), WAIT_S)
        await until(lambda: quorum._snapshotting is None and quorum.snapshots_written >= 2)
        image = quorum.image
        assert quorum.log.log_start_offset > 0
        files = snapshot_files(tmp_path)
        assert files and all(f.endswith(".checkpoint") for f in files)
        await quorum.close()

        reopened = MetadataQuorum(open_small_log(tmp_path), 1)
        loaded = reopened.load()
        assert loaded == image
        assert reopened.log.log_start_offset > 0
        await reopened.become_leader()
        await reopened.append(config_records(1, 10_000))
        assert reopened.image.topic_config("orders")["key-0"] == "value-10000"
        await reopened.close()

    asyncio.run(scenario())


def test_a_snapshot_is_due_after_the_interval(tmp_path):
    async def scenario() -> None:
        clock = ManualClock()
        quorum = MetadataQuorum(open_small_log(tmp_path), 1, clock=clock,
                                snapshot_interval_ms=60_000)
        quorum.load()
        await quorum.become_leader()
        await quorum.append(topic_records("orders"))
        assert snapshot_files(tmp_path) == []
        offset = quorum.image.offset
        clock.advance(59_000)
        await quorum.append([])  # a driver round: not due yet
        assert quorum.snapshots_written == 0
        clock.advance(2_000)  # the driver's timer runs: due, with new records since start
        await until(lambda: quorum.snapshots_written == 1 and quorum._snapshotting is None)
        assert snapshot_files(tmp_path) == [
            snapshot_file_name(OffsetAndEpoch(offset + 1, quorum.image.epoch))]
        await quorum.close()

    asyncio.run(scenario())


def test_a_corrupt_newest_snapshot_falls_back_to_an_older_one(tmp_path):
    async def scenario() -> None:
        quorum = MetadataQuorum(open_small_log(tmp_path), 1, snapshot_max_bytes=3000,
                                retention_bytes=-1, retention_ms=-1)
        quorum.load()
        await quorum.become_leader()
        await quorum.append(topic_records("orders"))
        for round_ in range(20):
            await quorum.append(config_records(20, round_ * 20))
            await until(lambda: quorum._snapshotting is None)
        image = quorum.image
        await quorum.close()
        files = snapshot_files(tmp_path)
        assert len(files) >= 2  # no retention: the log and every snapshot are kept
        newest = tmp_path / f"{METADATA_TOPIC}-0" / files[-1]
        data = bytearray(newest.read_bytes())
        data[len(data) // 2] ^= 0xFF
        newest.write_bytes(bytes(data))
        reopened = MetadataQuorum(open_small_log(tmp_path), 1)
        assert reopened.load() == image  # an older snapshot and the log after it
        await reopened.close()

    asyncio.run(scenario())


def test_a_voter_cut_off_catches_up_from_the_leaders_snapshot(tmp_path):
    async def scenario() -> None:
        network = LocalNetwork()
        nodes: dict[int, MetadataQuorum] = {}
        for node_id in (1, 2, 3):
            quorum = MetadataQuorum(open_small_log(tmp_path / f"node-{node_id}"), node_id,
                                    voters=[1, 2, 3], cluster_id="test-cluster",
                                    raft_config=FAST, send=network.sender(node_id),
                                    snapshot_max_bytes=4000, retention_bytes=0,
                                    retention_ms=-1)
            quorum.load()
            network.nodes[node_id] = nodes[node_id] = quorum
        for quorum in nodes.values():
            quorum.start()
        await until(lambda: len(active(nodes)) == 1)
        (leader_id,) = active(nodes)
        await nodes[leader_id].append(topic_records("orders"))
        lagging_id = next(n for n in nodes if n != leader_id)
        lagging = nodes[lagging_id]
        seen: list[MetadataImage] = []
        lagging.listeners.append(seen.append)
        await until(lambda: "orders" in lagging.image.topics_by_name)
        network.cut_off.add(lagging_id)
        majority = set(nodes) - {lagging_id}
        for round_ in range(40):
            await until(lambda: len(active(nodes, majority)) == 1)
            (leader_id,) = active(nodes, majority)
            await asyncio.wait_for(nodes[leader_id].append(config_records(20, round_ * 20)),
                                   WAIT_S)
        leader = nodes[leader_id]
        await until(lambda: all(nodes[n]._snapshotting is None for n in majority))
        assert leader.log.log_start_offset > lagging.log.log_end_offset
        network.cut_off.clear()
        await until(lambda: lagging.image.offset == leader.image.offset
                    and lagging.log.log_start_offset > 0)
        assert lagging.image.topic_config("orders") == leader.image.topic_config("orders")
        assert lagging.image.topics_by_name.keys() == leader.image.topics_by_name.keys()
        # Its listeners saw the snapshot's image (a jump over what it missed).
        assert any(img.offset + 1 == lagging.log.log_start_offset for img in seen)
        # It follows on from the snapshot.
        await until(lambda: len(active(nodes)) == 1)
        (leader_id,) = active(nodes)
        offset = await asyncio.wait_for(nodes[leader_id].append(config_records(1, 9999)),
                                        WAIT_S)
        await until(lambda: lagging.image.offset >= offset)
        assert lagging.image.topic_config("orders")["key-49"] == \
            nodes[leader_id].image.topic_config("orders")["key-49"]
        for quorum in nodes.values():
            await quorum.close()

    asyncio.run(scenario())
