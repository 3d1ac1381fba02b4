"""LogManager: loading, placement, checkpoints, clean shutdown, deletion, retention, scale."""

from __future__ import annotations

import resource
import uuid
from pathlib import Path

import pytest
from storage_helpers import FakeClock, check_log_consistency, make_batch

from odradek.storage import LogConfig, LogManager
from odradek.storage.checkpoint import OffsetCheckpointFile, PartitionMetadataFile

SMALL = LogConfig.from_props({"segment.bytes": 2000, "file.delete.delay.ms": 1000})


def fill(manager: LogManager, topic: str, partition: int, batches: int = 10) -> None:
    log = manager.get_or_create_log(topic, partition)
    for _ in range(batches):
        log.append_as_leader(make_batch(2, value_size=200), leader_epoch=1)
    log.update_high_watermark(log.log_end_offset)


def test_new_logs_go_to_the_dir_with_fewest_partitions(tmp_path: Path,
                                                       clock: FakeClock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    with LogManager(dirs, SMALL, clock=clock) as manager:
        for partition in range(5):
            manager.get_or_create_log("t", partition)
        counts = [len(list(d.glob("t-*"))) for d in dirs]
        assert sorted(counts) == [2, 3]
        assert manager.log_dir_of("t", 0) == dirs[0].resolve()
        assert manager.log_dir_of("t", 1) == dirs[1].resolve()
        assert manager.get_log("t", 0) is manager.get_or_create_log("t", 0)
        assert manager.get_log("missing", 0) is None


def test_second_manager_cannot_lock_the_same_dir(tmp_path: Path) -> None:
    with LogManager([tmp_path], SMALL), pytest.raises(RuntimeError, match="in use"):
        LogManager([tmp_path], SMALL)


def test_close_writes_checkpoints_and_clean_marker(tmp_path: Path, clock: FakeClock) -> None:
    topic_id = uuid.uuid4()
    manager = LogManager([tmp_path], SMALL, clock=clock)
    log = manager.get_or_create_log("orders", 0, topic_id=topic_id)
    fill(manager, "orders", 0)
    fill(manager, "my-topic-with-dashes", 3)
    log.update_high_watermark(12)
    manager.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {
        ("orders", 0): 20, ("my-topic-with-dashes", 3): 20}
    assert OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read() == {
        ("orders", 0): 12, ("my-topic-with-dashes", 3): 20}
    assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read()[
        ("orders", 0)] == 0
    assert PartitionMetadataFile(tmp_path / "orders-0" / "partition.metadata").read() == topic_id
    assert (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n1 0\n"

    reopened = LogManager([tmp_path], SMALL, clock=clock)
    try:
        assert not (tmp_path / ".kafka_cleanshutdown").exists()  # removed once loaded
        log = reopened.get_log("orders", 0)
        assert log is not None and log.log_end_offset == 20 and log.high_watermark == 12
        assert log.topic_id == topic_id
        assert reopened.get_log("my-topic-with-dashes", 3) is not None
        with pytest.raises(Exception, match="INCONSISTENT_TOPIC_ID"):
            reopened.get_or_create_log("orders", 0, topic_id=uuid.uuid4())
    finally:
        reopened.close()


def test_unclean_start_recovers_from_the_checkpointed_recovery_point(
        tmp_path: Path, clock: FakeClock) -> None:
    manager = LogManager([tmp_path], SMALL, clock=clock)
    fill(manager, "t", 0, batches=20)
    manager.get_log("t", 0).flush(10)
    manager.checkpoint_all()
    # Crash: no close. The torn tail of the active segment must go.
    active = manager.get_log("t", 0).active_segment.log_path
    with open(active, "ab") as handle:
        handle.write(b"\x00\x00\x00\x00\x00\x00\x00\x63\x00\x00\x10\x00garbage")
    for fd in manager._lock_files:  # the crashed process's locks die with it
        import os
        os.close(fd)
    recovered = LogManager([tmp_path], SMALL, clock=clock)
    try:
        log = recovered.get_log("t", 0)
        assert log.recovery_point == 10  # not advanced by recovery itself
        assert log.log_end_offset == 40
        check_log_consistency(log)
    finally:
        recovered.close()


def test_delete_log_renames_then_removes_after_delay(tmp_path: Path, clock: FakeClock) -> None:
    with LogManager([tmp_path], SMALL, clock=clock) as manager:
        fill(manager, "gone", 0)
        log = manager.get_log("gone", 0)
        region = log.read(0, 1 << 20)
        assert manager.delete_log("gone", 0)
        assert manager.get_log("gone", 0) is None
        renamed = [p for p in tmp_path.iterdir() if p.name.endswith("-delete")]
        assert len(renamed) == 1 and renamed[0].name.startswith("gone-0.")
        assert len(region.read_bytes()) == len(region) > 0  # in-flight read still works
        with pytest.raises(Exception, match="KAFKA_STORAGE_ERROR"):
            log.append_as_leader(make_batch(1), 1)
        manager.tick(clock.now + 999)
        assert renamed[0].exists()
        manager.tick(clock.now + 1000)
        assert not renamed[0].exists()
        assert not manager.delete_log("gone", 0)
        # A re-created partition starts empty.
        assert manager.get_or_create_log("gone", 0).log_end_offset == 0


def test_leftover_delete_dirs_are_removed_at_start(tmp_path: Path) -> None:
    leftover = tmp_path / f"x-0.{uuid.uuid4().hex}-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"")
    with LogManager([tmp_path], SMALL):
        assert not leftover.exists()


def test_retention_and_time_flush_run_from_tick(tmp_path: Path, clock: FakeClock) -> None:
    config = LogConfig.from_props({"segment.bytes": 2000, "retention.ms": 60_000,
                                   "flush.ms": 1000})
    with LogManager([tmp_path], config, clock=clock, retention_check_interval_ms=300_000,
                    flush_start_offset_checkpoint_interval_ms=1) as manager:
        log = manager.get_or_create_log("t", 0)
        for _ in range(20):
            log.append_as_leader(make_batch(2, timestamp=clock.now - 120_000, value_size=200), 1)
        log.update_high_watermark(log.log_end_offset)
        clock.advance(1000)
        manager.tick()
        assert log.recovery_point == log.log_end_offset  # flush.ms elapsed
        assert log.log_start_offset == 0  # retention not due yet
        clock.advance(300_000)
        manager.tick()
        assert log.log_start_offset == log.log_end_offset  # everything expired
        assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read()[
            ("t", 0)] == log.log_start_offset


def test_describe_log_dirs(tmp_path: Path, clock: FakeClock) -> None:
    with LogManager([tmp_path / "d1", tmp_path / "d2"], SMALL, clock=clock) as manager:
        fill(manager, "t", 0)
        fill(manager, "t", 1, batches=3)
        infos = manager.describe_log_dirs()
        assert [Path(i.path).name for i in infos] == ["d1", "d2"]
        sizes = {(p.topic, p.partition): p.size for info in infos for p in info.partitions}
        assert sizes == {("t", 0): manager.get_log("t", 0).size_in_bytes,
                         ("t", 1): manager.get_log("t", 1).size_in_bytes}
        assert all(info.total_bytes > 0 and info.usable_bytes > 0 for info in infos)


def test_topic_config_updates_reach_open_logs(tmp_path: Path) -> None:
    with LogManager([tmp_path], SMALL) as manager:
        log = manager.get_or_create_log("t", 0)
        manager.update_topic_config("t", LogConfig.from_props({"retention.ms": "5"}))
        assert log.config.retention_ms == 5
        assert manager.get_or_create_log("t", 1).config.retention_ms == 5


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_thousand_partitions_open_at_once(tmp_path: Path) -> None:
    """Idle partitions cost one descriptor (the active segment file) and no index mapping."""
    config = LogConfig.from_props({"segment.bytes": 1500})
    partitions = 2000
    with LogManager([tmp_path], config, recovery_threads_per_data_dir=2) as manager:
        for partition in range(partitions):
            log = manager.get_or_create_log("wide", partition)
            log.append_as_leader(make_batch(1, value_size=20), 0)
        assert len(manager.all_logs()) == partitions
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    with LogManager([tmp_path], config, recovery_threads_per_data_dir=2) as manager:
        assert len(manager.all_logs()) == partitions
        for partition in range(0, partitions, 97):
            log = manager.get_log("wide", partition)
            log.append_as_leader(make_batch(1, value_size=20), 0)
            log.update_high_watermark(log.log_end_offset)
            assert log.read(0, 1000).first_batch_offset == 0
        open_fds = len(list(Path("/proc/self/fd").iterdir()))
        assert open_fds < min(limit, 3 * partitions)
