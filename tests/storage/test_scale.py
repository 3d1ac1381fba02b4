"""Scale: append and random-read cost stays flat as the log grows (~200 MB here; the
multi-GB run is in bench/storage_bench.py)."""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import pytest
from storage_helpers import make_batch

from odradek.storage import Log, LogConfig

BATCH_VALUE = 16 * 1024
RECORDS = 4  # ~64 KiB batches
TOTAL_BYTES = 200 * 1024 * 1024


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_append_and_read_latency_flat_from_empty_to_200_mb(tmp_path: Path) -> None:
    config = LogConfig.from_props({"segment.bytes": 16 * 1024 * 1024})
    log = Log(tmp_path / "big-0", config)
    batch = make_batch(RECORDS, value_size=BATCH_VALUE)
    appends = TOTAL_BYTES // len(batch)
    windows = 5
    per_window = appends // windows
    rng = random.Random(7)
    append_medians = []
    read_medians = []
    try:
        for _ in range(windows):
            append_times = []
            for _ in range(per_window):
                started = time.perf_counter()
                log.append_as_leader(batch, 0)
                append_times.append(time.perf_counter() - started)
            log.update_high_watermark(log.log_end_offset)
            read_times = []
            for _ in range(300):
                offset = rng.randrange(0, log.log_end_offset)
                started = time.perf_counter()
                region = log.read(offset, 1 << 20)
                read_times.append(time.perf_counter() - started)
                assert region.first_batch_offset <= offset < region.first_batch_offset + RECORDS
            append_medians.append(statistics.median(append_times))
            read_medians.append(statistics.median(read_times))
        assert log.size_in_bytes >= TOTAL_BYTES * 0.95
        assert len(log.segments) >= 12
    finally:
        log.close()
    print("append medians (us):", [round(m * 1e6) for m in append_medians])
    print("read medians (us):", [round(m * 1e6) for m in read_medians])
    # Flat: the last window is not much slower than the first (generous for CI noise).
    assert append_medians[-1] < 3 * append_medians[0] + 100e-6
    assert read_medians[-1] < 3 * read_medians[0] + 100e-6
