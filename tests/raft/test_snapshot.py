"""Metadata snapshots (KIP-630) at the Raft level: the file format and its validation, the
stores (a corrupt or partial snapshot is never used), the retention rules (log truncation
before the snapshots), FetchSnapshot's errors, and a lagging follower that catches up from its
leader's snapshot; malformed chunks change nothing."""

from __future__ import annotations

import pytest
from test_client import CLUSTER, Cluster

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import RecordBatchBuilder
from odradek.raft import MemoryRaftLog, StorageRaftLog
from odradek.raft import messages as msg
from odradek.raft.client import CommittedBatch, CommittedSnapshot
from odradek.raft.log import OffsetAndEpoch
from odradek.raft.snapshot import (
    CorruptSnapshotError,
    FileSnapshotStore,
    MemorySnapshotStore,
    SnapshotWriter,
    clean_snapshots,
    encode_snapshot,
    parse_snapshot_file_name,
    read_snapshot,
    snapshot_file_name,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

# -- format


def test_file_names_are_kafkas() -> None:
    snapshot_id = OffsetAndEpoch(1234, 7)
    name = snapshot_file_name(snapshot_id)
    assert name == "00000000000000001234-0000000007.checkpoint"
    assert parse_snapshot_file_name(name) == (snapshot_id, ".checkpoint")
    assert parse_snapshot_file_name(name + ".part") == (snapshot_id, ".checkpoint.part")
    assert parse_snapshot_file_name("00000000000000001234.log") is None
    assert parse_snapshot_file_name("quorum-state") is None


def test_round_trip_header_records_footer() -> None:
    values = [b"value-%d" % i for i in range(10_000)]
    data = encode_snapshot(5, 1_700_000_000_000, values)
    content = read_snapshot(data)
    assert content.values == values
    assert content.last_contained_timestamp == 1_700_000_000_000
    assert content.epoch == 5
    # An empty state is a header and a footer.
    assert read_snapshot(encode_snapshot(1, 0, [])).values == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "no_footer", "trailing", "no_header"])
def test_a_damaged_snapshot_is_refused(damage: str) -> None:
    data = bytearray(encode_snapshot(3, 10, [b"a", b"b", b"c"]))
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        del data[-5:]
    elif damage == "no_footer":
        data = bytearray(encode_snapshot(3, 10, [b"a"])[:-_footer_size()])
    elif damage == "trailing":
        data += b"\0" * 3
    elif damage == "no_header":
        builder = RecordBatchBuilder(partition_leader_epoch=3)
        builder.append(0, None, b"x")
        data = bytearray(builder.build()) + data
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(bytes(data))


def _footer_size() -> int:
    from odradek.raft.snapshot import footer_batch
    return len(footer_batch(1, 3, 10))


# -- stores


def test_file_store_writes_part_then_renames_and_reopens(tmp_path) -> None:
    store = FileSnapshotStore(tmp_path)
    snapshot_id = OffsetAndEpoch(42, 3)
    writer = SnapshotWriter(store.new_writer(snapshot_id), 99)
    writer.append([b"x" * 100, b"y"])
    assert (tmp_path / snapshot_file_name(snapshot_id, ".checkpoint.part")).exists()
    assert store.ids() == []  # nothing visible before freeze
    size = writer.freeze()
    assert sorted(p.name for p in tmp_path.iterdir()) == [snapshot_file_name(snapshot_id)]
    assert store.ids() == [snapshot_id] and store.info(snapshot_id).size == size
    assert store.info(snapshot_id).last_contained_timestamp == 99
    # Chunks as FetchSnapshot reads them.
    whole = store.read_all(snapshot_id)
    assert store.read(snapshot_id, 10, 20) == whole[10:30]
    reopened = FileSnapshotStore(tmp_path)
    assert reopened.ids() == [snapshot_id]
    assert read_snapshot(reopened.read_all(snapshot_id)).values == [b"x" * 100, b"y"]


def test_file_store_ignores_corrupt_and_partial_snapshots(tmp_path) -> None:
    store = FileSnapshotStore(tmp_path)
    for offset in (10, 20):
        writer = SnapshotWriter(store.new_writer(OffsetAndEpoch(offset, 1)), 0)
        writer.append([b"state at %d" % offset])
        writer.freeze()
    newest = tmp_path / snapshot_file_name(OffsetAndEpoch(20, 1))
    data = bytearray(newest.read_bytes())
    data[-10] ^= 0x55
    newest.write_bytes(bytes(data))
    partial = tmp_path / snapshot_file_name(OffsetAndEpoch(30, 1), ".checkpoint.part")
    partial.write_bytes(encode_snapshot(1, 0, [b"half"])[:20])
    reopened = FileSnapshotStore(tmp_path)
    # The corrupt newest one is ignored: the store falls back to the older one.
    assert reopened.ids() == [OffsetAndEpoch(10, 1)]
    assert reopened.latest_id() == OffsetAndEpoch(10, 1)
    assert not partial.exists()


def test_a_download_with_bad_bytes_does_not_freeze(tmp_path) -> None:
    for store in (FileSnapshotStore(tmp_path), MemorySnapshotStore()):
        writer = store.new_writer(OffsetAndEpoch(5, 1))
        data = bytearray(encode_snapshot(1, 0, [b"abc"]))
        data[30] ^= 1
        writer.append(bytes(data))
        with pytest.raises(CorruptSnapshotError):
            writer.freeze()
        assert store.ids() == []
    assert list(tmp_path.iterdir()) == []


# -- retention


def _append(log: MemoryRaftLog, count: int, epoch: int = 1, size: int = 100) -> None:
    for _ in range(count):
        builder = RecordBatchBuilder(partition_leader_epoch=epoch)
        builder.append(0, None, b"v" * size)
        log.append_as_leader(builder.build(), epoch)
    log.update_high_watermark(log.end_offset)


def _snapshot(log: MemoryRaftLog, offset: int, timestamp: int = 0, epoch: int = 1) -> None:
    writer = SnapshotWriter(log.snapshots.new_writer(OffsetAndEpoch(offset, epoch)), timestamp)
    writer.append([b"s" * 50])
    writer.freeze()


def test_retention_by_size_deletes_the_oldest_snapshots_and_the_log_before_the_next() -> None:
    log = MemoryRaftLog()
    _append(log, 30)
    _snapshot(log, 10)
    # One snapshot: nothing moves, whatever the size (Kafka keeps the log until a second).
    assert not clean_snapshots(log, 0, -1, 0)
    assert log.start_offset == 0
    _snapshot(log, 20)
    _snapshot(log, 25)
    assert clean_snapshots(log, 0, -1, 0)
    # The newest is always kept; the log starts at its end; the older ones are gone.
    assert log.snapshots.ids() == [OffsetAndEpoch(25, 1)]
    assert log.start_offset == 25 and log.end_offset == 30
    assert log.last_fetched_epoch == 1
    # Under the limit: nothing is deleted.
    log2 = MemoryRaftLog()
    _append(log2, 30)
    _snapshot(log2, 10)
    _snapshot(log2, 20)
    assert not clean_snapshots(log2, 1 << 30, -1, 0)
    assert log2.start_offset == 0 and len(log2.snapshots.ids()) == 2


def test_retention_by_time_and_never_past_the_high_watermark() -> None:
    log = MemoryRaftLog()
    _append(log, 30)
    _snapshot(log, 10, timestamp=1000)
    _snapshot(log, 20, timestamp=5000)
    assert not clean_snapshots(log, -1, 10_000, now_ms=10_500)  # 9.5 s old: kept
    assert clean_snapshots(log, -1, 10_000, now_ms=11_001)
    assert log.start_offset == 20 and log.snapshots.ids() == [OffsetAndEpoch(20, 1)]
    # A snapshot past the high watermark never moves the log start.
    log3 = MemoryRaftLog()
    _append(log3, 30)
    log3.update_high_watermark(15)
    _snapshot(log3, 10)
    _snapshot(log3, 20)
    assert not clean_snapshots(log3, 0, -1, 0)
    assert log3.start_offset == 0


def test_storage_log_deletes_only_segments_wholly_before_the_log_start(tmp_path) -> None:
    config = LogConfig.from_props({"segment.bytes": 500, "retention.ms": -1,
                                   "retention.bytes": -1})
    storage = Log(tmp_path / "__cluster_metadata-0", config, had_clean_shutdown=False)
    raft_log = StorageRaftLog(storage)
    for _ in range(40):
        builder = RecordBatchBuilder(partition_leader_epoch=2)
        builder.append(0, None, b"v" * 100)
        raft_log.append_as_leader(builder.build(), 2)
    raft_log.update_high_watermark(raft_log.end_offset)
    segments_before = len(storage.segments)
    assert segments_before > 5
    for offset in (15, 33):
        writer = SnapshotWriter(raft_log.snapshots.new_writer(OffsetAndEpoch(offset, 2)), 0)
        writer.append([b"state"])
        writer.freeze()
    assert clean_snapshots(raft_log, 0, -1, 0)
    assert raft_log.start_offset == 33
    # Segments wholly below 33 are gone; the one holding 33 stays.
    assert storage.segments[0].base_offset <= 33 < (
        storage.segments[1].base_offset if len(storage.segments) > 1 else 41)
    assert raft_log.snapshots.ids() == [OffsetAndEpoch(33, 2)]
    storage.close()
    # Reopened: the log starts at its first segment (at or before the snapshot), the snapshot
    # covers what is missing.
    reopened = StorageRaftLog(Log(tmp_path / "__cluster_metadata-0", config,
                                  had_clean_shutdown=False))
    assert 0 < reopened.start_offset <= 33
    assert reopened.snapshots.latest_id() == OffsetAndEpoch(33, 2)
    reopened.log.close()


def test_a_crash_between_install_and_truncation_is_finished_at_open(tmp_path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    storage = Log(directory, had_clean_shutdown=False)
    raft_log = StorageRaftLog(storage)
    builder = RecordBatchBuilder(partition_leader_epoch=1)
    builder.append(0, None, b"old")
    raft_log.append_as_leader(builder.build(), 1)
    writer = raft_log.snapshots.new_writer(OffsetAndEpoch(100, 4))
    writer.append(encode_snapshot(4, 0, [b"state"]))
    writer.freeze()
    storage.close()  # "crash" before truncate_fully_and_start_at
    reopened = StorageRaftLog(Log(directory, had_clean_shutdown=False))
    assert reopened.start_offset == reopened.end_offset == 100
    assert reopened.last_fetched_epoch == 4
    reopened.log.close()


# -- FetchSnapshot between clients


def _leader_with_snapshot(cluster: Cluster, lagging: int) -> tuple[object, OffsetAndEpoch]:
    """Runs until a leader is elected, cuts off `lagging`, commits records; every other node
    snapshots the committed state and truncates its log before it."""
    cluster.run(3000)
    leader = cluster.leader()
    cluster.isolate(lagging)
    for i in range(20):
        leader.append([b"record-%d" % i], cluster.now)
        cluster.run(20)
    committed = leader.high_watermark
    snapshot_id = OffsetAndEpoch(committed, leader.epoch)
    for node_id, client in cluster.clients.items():
        if node_id == lagging:
            continue
        client.take_committed()
        assert client.high_watermark == committed
        for offset in (committed - 5, committed):
            writer = client.create_snapshot(OffsetAndEpoch(offset, leader.epoch), cluster.now)
            writer.append([b"state up to %d" % offset])
            writer.freeze()
        assert clean_snapshots(client.log, 0, -1, cluster.now)
        assert client.log.start_offset == committed
    return leader, snapshot_id


def test_a_lagging_follower_catches_up_from_the_leaders_snapshot() -> None:
    cluster = Cluster(seed=3)
    cluster.run(3000)
    lagging = next(n for n in cluster.clients if not cluster.clients[n].is_leader)
    leader, snapshot_id = _leader_with_snapshot(cluster, lagging)
    follower = cluster.clients[lagging]
    follower.take_committed()
    assert follower.log.end_offset < leader.log.start_offset
    cluster.heal()
    # The cut-off voter stood in later epochs meanwhile: an election follows, which it cannot
    # win (its log is behind); the new leader has the snapshot or is the old one.
    cluster.run(6000)
    leader = cluster.leader()
    after = leader.append([b"after the snapshot"], cluster.now)
    cluster.run(500)
    assert follower.log.start_offset == snapshot_id.offset
    assert follower.log.snapshots.ids() == [snapshot_id]
    assert follower.high_watermark == after + 1 == leader.high_watermark
    handed = follower.take_committed()
    assert isinstance(handed[0], CommittedSnapshot) and handed[0].snapshot_id == snapshot_id
    assert handed[0].read().values == [b"state up to %d" % snapshot_id.offset]
    assert all(isinstance(b, CommittedBatch) for b in handed[1:])
    assert handed[-1].last_offset == after
    assert bytes(follower.log.read(follower.log.start_offset, 1 << 20)) == bytes(
        leader.log.read(follower.log.start_offset, 1 << 20))


def _fetch_snapshot(leader, snapshot_id, position=0, epoch=None, cluster_id=CLUSTER,
                    max_bytes=1 << 20):
    request = msg.fetch_snapshot_request(cluster_id, 99, leader.epoch if epoch is None
                                         else epoch, snapshot_id, position, max_bytes)
    version = msg.API_VERSIONS[m.FetchSnapshotRequest]
    request = m.FetchSnapshotRequest.decode(request.encode(version), version)
    return leader.handle_request(99, request, 0)


def _error(response) -> int:
    if response.error_code:
        return response.error_code
    return response.topics[0].partitions[0].error_code


def test_fetch_snapshot_errors() -> None:
    cluster = Cluster(seed=1)
    cluster.run(3000)
    lagging = next(n for n in cluster.clients if not cluster.clients[n].is_leader)
    leader, snapshot_id = _leader_with_snapshot(cluster, lagging)
    size = leader.log.snapshots.info(snapshot_id).size
    ok = _fetch_snapshot(leader, snapshot_id, position=10, max_bytes=7)
    part = ok.topics[0].partitions[0]
    assert _error(ok) == 0 and part.size == size and part.position == 10
    assert bytes(part.unaligned_records) == leader.log.snapshots.read_all(snapshot_id)[10:17]
    assert _error(_fetch_snapshot(leader, OffsetAndEpoch(snapshot_id.offset, 99))) == \
        ErrorCode.SNAPSHOT_NOT_FOUND.code
    assert _error(_fetch_snapshot(leader, snapshot_id, position=size)) == \
        ErrorCode.POSITION_OUT_OF_RANGE.code
    assert _error(_fetch_snapshot(leader, snapshot_id, position=-1)) == \
        ErrorCode.POSITION_OUT_OF_RANGE.code
    assert _error(_fetch_snapshot(leader, snapshot_id, cluster_id="other")) == \
        ErrorCode.INCONSISTENT_CLUSTER_ID.code
    assert _error(_fetch_snapshot(leader, snapshot_id, epoch=leader.epoch - 1)) == \
        ErrorCode.FENCED_LEADER_EPOCH.code
    assert _error(_fetch_snapshot(leader, snapshot_id, epoch=leader.epoch + 1)) == \
        ErrorCode.UNKNOWN_LEADER_EPOCH.code
    follower = next(c for c in cluster.clients.values() if c is not leader
                    and c.node_id != lagging)
    assert _error(_fetch_snapshot(follower, snapshot_id, epoch=leader.epoch)) == \
        ErrorCode.NOT_LEADER_OR_FOLLOWER.code
    # A Fetch below the leader's log start is answered with the newest snapshot's id.
    fetch = msg.fetch_request(CLUSTER, lagging, leader.epoch, 1, 1, 0, 1 << 20)
    answer = leader.handle_request(lagging, fetch, cluster.now).responses[0].partitions[0]
    assert (answer.snapshot_id.end_offset, answer.snapshot_id.epoch) == snapshot_id
    assert not answer.records


def test_malformed_chunks_change_nothing() -> None:
    cluster = Cluster(seed=2)
    cluster.run(3000)
    lagging = next(n for n in cluster.clients if not cluster.clients[n].is_leader)
    leader, snapshot_id = _leader_with_snapshot(cluster, lagging)
    follower = cluster.clients[lagging]
    follower.take_committed()
    # The follower learns of the snapshot (a Fetch answer), without the network.
    # (Cut off for less than the fetch timeout: it still follows the leader.)
    assert (follower.state_name, follower.leader_id, follower.epoch) == (
        "Follower", leader.node_id, leader.epoch)
    follower.requests.reset_all()
    fetch_answer = msg.fetch_response(ErrorCode.NONE, leader.node_id, leader.epoch,
                                      leader.high_watermark, snapshot_id=snapshot_id)
    correlation = follower.requests.on_send(leader.node_id, cluster.now)
    follower.handle_response(leader.node_id, fetch_answer, cluster.now, correlation)
    assert follower.is_fetching_snapshot
    before = (follower.log.start_offset, follower.log.end_offset, follower.high_watermark)
    data = leader.log.snapshots.read_all(snapshot_id)

    def answer(position, chunk, size=None, snapshot=snapshot_id):
        size = len(data) if size is None else size
        correlation = follower.requests.on_send(leader.node_id, cluster.now)
        response = msg.fetch_snapshot_response(ErrorCode.NONE, leader.node_id, leader.epoch,
                                               snapshot, size, position, chunk)
        follower.handle_response(leader.node_id, response, cluster.now, correlation)

    answer(5, data[5:20])  # wrong position
    answer(0, data, size=len(data) - 1)  # more bytes than the size
    answer(0, data[:10], snapshot=OffsetAndEpoch(snapshot_id.offset + 1, snapshot_id.epoch))
    assert follower._download.writer.size == 0
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    answer(0, bytes(bad[:30]))
    answer(30, bytes(bad[30:]))  # complete, but not a valid snapshot: discarded
    assert not follower.is_fetching_snapshot
    assert follower.log.snapshots.ids() == []
    assert (follower.log.start_offset, follower.log.end_offset,
            follower.high_watermark) == before
    # The follower starts over and gets it whole.
    cluster.heal()
    cluster.run(6000)
    assert follower.log.start_offset == snapshot_id.offset
    assert follower.log.snapshots.read_all(snapshot_id) == data
