"""Expired offsets leave __consumer_offsets: `offsets.retention.minutes` expiry writes
tombstones (as Kafka's GroupMetadataManager.cleanupGroupMetadata), and the log cleaner then
removes the expired commits, and the tombstones themselves after `delete.retention.ms`."""

from __future__ import annotations

from group_harness import Harness, run
from test_group_offsets import RETENTION_MS

from odradek.protocol.records import iter_batches, iter_records
from odradek.storage import Log, LogConfig
from odradek.storage.cleaner import Cleaner, LogToClean, cleanable_offsets

OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 4096,
                        "delete.retention.ms": 86_400_000}


def stored_records(log: Log) -> list[tuple[bytes, bytes | None]]:
    """Every record's (key, value), segment after segment (a read returns one segment's)."""
    records = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_records(offset, 1 << 24)
        batches = list(iter_batches(data))
        if not batches:
            break
        records += [(r.key, r.value) for position, header in batches
                    for r in iter_records(data, position, header) if r.offset >= offset]
        offset = batches[-1][1].next_offset
    return records


def clean(log: Log, now_ms: int) -> None:
    log.roll()  # the active segment is never cleaned
    first_dirty, uncleanable = cleanable_offsets(log, None, now_ms)
    target = LogToClean(("__consumer_offsets", 0), log, first_dirty, uncleanable)
    Cleaner().clean(log, first_dirty, target.first_uncleanable_offset, now_ms)


def test_expired_offsets_are_tombstoned_then_compacted_away(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        h.logs[0].close()
        h.logs[0] = Log(tmp_path / "__consumer_offsets-0",
                        LogConfig.from_props(OFFSETS_TOPIC_CONFIG), clock=h.time_ms)
        await h.start()
        log = h.logs[0]
        partitions = [("t", number) for number in range(10)]
        for round_number in range(20):  # a group that stops committing, and one that goes on
            await h.commit("gone", {tp: round_number for tp in partitions})
        expiry_start = h.time_ms()
        await h.advance(RETENTION_MS // 2)
        await h.commit("live", {tp: 7 for tp in partitions})
        assert await h.coordinator.expire_offsets(expiry_start + RETENTION_MS + 1) == 10
        assert h.committed("gone") == {} and h.committed("live") == {tp: 7 for tp in partitions}
        # Expiry wrote one tombstone per expired offset (key version 1), and one for the
        # group (version 2) which has nothing left.
        tombstones = [key for key, value in stored_records(log) if value is None]
        assert sorted(key[:2] for key in tombstones) == [b"\x00\x01"] * 10 + [b"\x00\x02"]
        size_before = log.size_in_bytes
        # Cleaning: the 200 commits of "gone" go, its tombstones stay for delete.retention.ms
        # so that a reader behind still sees the deletes...
        now = h.time_ms()
        clean(log, now)
        records = stored_records(log)
        assert sorted(value is None for _key, value in records) == [False] * 10 + [True] * 11
        # ...and go with the next cleaning after that.
        clean(log, now + OFFSETS_TOPIC_CONFIG["delete.retention.ms"] + 1)
        records = stored_records(log)
        assert len(records) == 10 and all(value is not None for _key, value in records)
        print(f"__consumer_offsets-0: {size_before} bytes before, {log.size_in_bytes} after")
        assert log.size_in_bytes < size_before / 10
        # A coordinator loading the cleaned partition knows "live" only.
        await h.coordinator.close()
        reloaded = Harness(tmp_path)
        reloaded.logs[0].close()
        reloaded.logs = h.logs
        await reloaded.start()
        assert reloaded.committed("gone") == {}
        assert reloaded.committed("live") == {tp: 7 for tp in partitions}
        await reloaded.close()

    run(scenario())
