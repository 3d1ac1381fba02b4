"""A broker whose disk fills up (a real small disk: a tmpfs, tests/small_disk.py) halts, as
Kafka does when its only log directory fails; grown and restarted, it recovers every batch it
acknowledged (acks=1 on one node: acknowledged means appended before the failure)."""

from __future__ import annotations

import time

import pytest
from broker_process import SHORT_BROKER_SESSION, BrokerProcess, wait_until
from server.raw_client import RawClient, batch_offsets, fetch_request, fetched, produce_request
from small_disk import DiskUnavailable, SmallDisk

from odradek.protocol.records import build_batch, iter_batches
from odradek.protocol.records.record import decode_records

TOPIC = "filling"
BATCH = 100
VALUE = 1000


def values(batch_index: int) -> list[bytes]:
    return [b"%d-%d:" % (batch_index, i) + b"x" * VALUE for i in range(BATCH)]


def test_a_full_disk_halts_the_broker_and_a_restart_recovers_every_acked_batch(tmp_path):
    disk = SmallDisk(tmp_path / "data", 24 << 20)
    try:
        disk.mount()
    except DiskUnavailable as error:
        pytest.skip(str(error))
    broker = BrokerProcess(tmp_path, {"log.segment.bytes": str(4 << 20), **SHORT_BROKER_SESSION})
    try:
        broker.start()
        acked: dict[int, int] = {}  # batch index -> base offset
        with RawClient(broker.host, broker.port) as client:
            client.create_topic(TOPIC)
            index = 0
            try:
                while index < 10_000:
                    batch = build_batch([(int(time.time() * 1000), None, v)
                                         for v in values(index)])
                    response = client.call(0, 9, produce_request(TOPIC, 0, batch, acks=1))
                    answer = response.responses[0].partition_responses[0]
                    if answer.error_code == 0:
                        acked[index] = answer.base_offset
                    index += 1
            except (OSError, EOFError, ConnectionError):
                pass  # the broker halted mid-request
        assert acked, "the disk filled before the first batch"
        wait_until(lambda: broker.proc.poll() is not None, 30, message="the broker to halt")
        assert broker.proc.returncode == 1
        # Its one directory holds the metadata log too: Kafka's words for that.
        assert "Shutdown broker because the metadata log directory" in broker.log_tail(200)

        disk.resize(96 << 20)
        broker.start()
        got: dict[int, list[bytes]] = {}
        offset = 0
        with RawClient(broker.host, broker.port) as client:
            while True:
                records = fetched(client.call(1, 12, fetch_request({(TOPIC, 0): offset})))
                data = records[(TOPIC, 0)]
                if not data:
                    break
                for position, header in iter_batches(data):
                    got[header.base_offset] = [r[3] for r in decode_records(data, position,
                                                                            header)]
                offset = batch_offsets(data)[-1][1] + 1
        for index, base_offset in acked.items():
            assert got.get(base_offset) == values(index), f"acked batch {index} lost"
        print(f"\n{len(acked)} batches acked before the disk filled; all recovered")
    finally:
        broker.kill()
        disk.unmount()
