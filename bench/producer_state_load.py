"""Startup does not scan the log: the load time of a ~1 GB partition with producer-state
snapshots versus without them (issue 16's must-show).

Builds a partition of idempotent and transactional batches from many producers (commits,
aborts, transactions left open), closes it cleanly, then times opening the Log:
1. as a broker restart does, with the `.snapshot` the clean close wrote: nothing is replayed;
2. with every `.snapshot` deleted: every batch header of every segment is replayed.
Both loads must give the same producer state, last stable offset and txn index.

Not run in CI (it writes ~1 GB). Run:
`PYTHONPATH=src python bench/producer_state_load.py [--size-mb 1024] [--dir /tmp]`
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from odradek.protocol.records import build_batch, build_control_batch
from odradek.storage import Log, LogConfig
from odradek.storage.validator import AppendOrigin

MIB = 1024 * 1024


def build(directory: Path, size_bytes: int, batch_records: int, value_size: int,
          producers: int) -> tuple[int, int]:
    """Writes the partition; returns (batches, bytes)."""
    now = int(time.time() * 1000)
    log = Log(directory, LogConfig.from_props({"segment.bytes": str(128 * MIB)}),
              clock=lambda: now)
    value = b"x" * value_size
    records = [(now, None, value)] * batch_records
    sequences = [0] * producers
    open_txn = [False] * producers
    batches = 0
    while log.size_in_bytes < size_bytes:
        producer = batches % producers
        transactional = producer % 2 == 0  # half transactional, half idempotent only
        log.append_as_leader(build_batch(records, producer_id=producer, producer_epoch=0,
                                         base_sequence=sequences[producer],
                                         is_transactional=transactional), 0)
        sequences[producer] += batch_records
        batches += 1
        if transactional:
            open_txn[producer] = True
            if batches % (producers * 4) < producers:  # now and then the round ends a txn
                log.append_as_leader(build_control_batch(producer, 0, producer % 4 == 0, 0,
                                                         now), 0,
                                     origin=AppendOrigin.COORDINATOR)
                open_txn[producer] = False
    log.maybe_increment_high_watermark(log.log_end_offset)
    size = log.size_in_bytes
    log.close()
    return batches, size


def timed_open(directory: Path, high_watermark: int | None) -> tuple[float, Log]:
    started = time.perf_counter()
    log = Log(directory, high_watermark=high_watermark)
    return time.perf_counter() - started, log


def state_of(log: Log) -> tuple[object, ...]:
    producers = sorted((p.producer_id, p.producer_epoch, p.last_sequence,
                        p.current_txn_start_offset) for p in log.active_producers())
    aborted = [t for s in log.log_segments() for t in s.txn_index.entries]
    return producers, log.last_stable_offset, aborted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--producers", type=int, default=200)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="producer-state-load-", dir=args.dir))
    directory = workdir / "load-0"
    try:
        started = time.perf_counter()
        batches, size = build(directory, args.size_mb * MIB, batch_records=16,
                              value_size=1000, producers=args.producers)
        print(f"built {size / MIB:.0f} MiB, {batches} batches, "
              f"{len(list(directory.glob('*.log')))} segments in "
              f"{time.perf_counter() - started:.1f} s")
        # The high watermark the broker would have checkpointed: the log end.
        probe = Log(directory)
        end = probe.log_end_offset
        probe.close()

        with_snapshot, log = timed_open(directory, end)
        reference = state_of(log)
        log.close()
        for snapshot in directory.glob("*.snapshot"):
            snapshot.unlink()
        without_snapshot, log = timed_open(directory, end)
        rescanned = state_of(log)
        log.close()
        assert rescanned == reference, "the replay and the snapshot disagree"
        producers, lso, aborted = reference
        print(f"{len(producers)} producers ({sum(p[3] >= 0 for p in producers)} with an open "
              f"transaction), LSO {lso} of {end}, {len(aborted)} aborted transactions indexed")
        print(f"open with the clean-close snapshot: {with_snapshot * 1000:.0f} ms")
        print(f"open with the snapshots deleted (full header replay): "
              f"{without_snapshot * 1000:.0f} ms")
        print(f"ratio: {without_snapshot / with_snapshot:.0f}x")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
