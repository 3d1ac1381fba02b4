"""A full disk (a real one: a small tmpfs, tests/small_disk.py): the write that fails gets
KAFKA_STORAGE_ERROR, the log refuses every later write, its directory is reported offline
once, and after the disk is grown a restart recovers every batch written before the failure
and nothing of the one that failed."""

from __future__ import annotations

import pytest
from small_disk import DiskUnavailable, SmallDisk
from storage_helpers import headers_of, make_batch

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.storage import Log
from odradek.storage.config import LogConfig
from odradek.storage.dir_failure import LogDirFailureChannel


@pytest.fixture
def disk(tmp_path):
    disk = SmallDisk(tmp_path / "disk", 1 << 20)
    try:
        disk.mount()
    except DiskUnavailable as error:
        pytest.skip(str(error))
    yield disk
    disk.unmount()


def test_a_full_disk_fails_the_log_and_recovery_keeps_what_was_written(disk):
    failures = LogDirFailureChannel()
    reported: list[tuple[object, int]] = []
    failures.subscribe(lambda directory, error: reported.append((directory, error.errno)))
    config = LogConfig.from_props({"segment.bytes": str(64 << 20)})
    log = Log(disk.path / "events-0", config, dir_failures=failures)
    appended = 0
    with pytest.raises(KafkaError) as failed:
        for _ in range(10_000):  # 10 KB batches into 1 MB: the disk fills well before
            log.append_as_leader(make_batch(10, value_size=1000), leader_epoch=0)
            appended += 10
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert 0 < appended < 10_000
    assert reported == [(disk.path, 28)]  # ENOSPC, reported once
    disk.resize(8 << 20)
    # The log stays failed: the files may hold part of a batch only recovery can judge.
    with pytest.raises(KafkaError) as again:
        log.append_as_leader(make_batch(1), leader_epoch=0)
    assert again.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert len(reported) == 1
    log.close_handlers()

    recovered = Log(disk.path / "events-0", config, had_clean_shutdown=False)
    try:
        assert recovered.log_end_offset == appended
        headers = headers_of(recovered.read_records(0, 64 << 20))
        offsets = [o for h in headers for o in range(h.base_offset, h.last_offset + 1)]
        assert offsets == list(range(appended))
        recovered.append_as_leader(make_batch(1), leader_epoch=1)  # writable again
        assert recovered.log_end_offset == appended + 1
    finally:
        recovered.close()
