"""Writer process for test_crash.py: appends batches to one log until it is SIGKILLed.

After each `append_as_leader` returns, prints `seq first_offset last_offset` and flushes stdout:
that line is the acknowledgement. Odradek's durability contract for a process crash matches
Kafka's default (flush.messages/flush.ms unset): an append is acknowledged once it is in the OS
page cache, so a SIGKILL of the broker loses nothing acknowledged; only power loss can lose the
unflushed tail, which replication covers.

Usage: crash_writer.py LOG_DIR SEED PREALLOCATE(0|1)
"""

from __future__ import annotations

import hashlib
import random
import sys
import time

from odradek.protocol.records import Compression
from odradek.protocol.records.builder import RecordBatchBuilder
from odradek.storage import LogConfig, LogManager

TOPIC = "crash"
CONFIG = {"segment.bytes": 200_000, "index.interval.bytes": 512, "segment.index.bytes": 4096,
          "retention.ms": -1, "flush.ms": 50}


def record_value(seq: int, index: int, size: int) -> bytes:
    """Deterministic payload, so the checker can verify content, not just offsets."""
    seed = hashlib.sha256(b"%d/%d" % (seq, index)).digest()
    return (seed * (size // len(seed) + 1))[:size]


def batch_for(seq: int, rng: random.Random) -> bytes:
    compression = rng.choice([Compression.NONE] * 3 + [Compression.LZ4, Compression.ZSTD])
    builder = RecordBatchBuilder(compression=compression)
    now = int(time.time() * 1000)
    for index in range(rng.randint(1, 20)):
        builder.append(now, b"%d/%d" % (seq, index), record_value(seq, index,
                                                                  rng.randint(1, 3000)))
    return builder.build()


def main() -> None:
    log_dir, seed, preallocate = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    config = LogConfig.from_props({**CONFIG, "preallocate": preallocate})
    manager = LogManager([log_dir], config, flush_checkpoint_interval_ms=100,
                         high_watermark_checkpoint_interval_ms=100)
    log = manager.get_or_create_log(TOPIC, 0)
    rng = random.Random(seed)
    seq = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    out = sys.stdout
    out.write(f"ready {log.log_end_offset}\n")
    out.flush()
    last_tick = time.monotonic()
    while True:
        info = log.append_as_leader(batch_for(seq, rng), leader_epoch=seed % 1000)
        log.update_high_watermark(log.log_end_offset)
        out.write(f"{seq} {info.first_offset} {info.last_offset}\n")
        out.flush()
        seq += 1
        if time.monotonic() - last_tick > 0.05:
            manager.tick()  # flushes (flush.ms) and checkpoints, like the broker's scheduler
            last_tick = time.monotonic()


if __name__ == "__main__":
    main()
