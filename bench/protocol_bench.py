"""Protocol hot paths: decode+validate a 1 MiB Produce request, encode a 1 MiB Fetch response.

What the broker does per request, without sockets: split the frame (FrameBuffer), decode the
header and body (records stay a memoryview of the frame), validate the batch without
decompressing (CRC32C over 1 MiB); and for a fetch, encode the response around a 1 MiB records
buffer. Reported as operations/s and MiB/s, best of several repeats.
"""

from __future__ import annotations

import struct
import timeit

from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.records import build_batch
from odradek.storage.config import LogConfig
from odradek.storage.validator import validate_as_leader, validate_produce_request_records

NAME = "protocol"
MIB = 1024 * 1024
# A topic that takes the 1 MiB batch (with its record overhead it is over the 1048588 default).
TOPIC_CONFIG = LogConfig.from_props({"max.message.bytes": 2 * MIB})


def _produce_frame(record_size: int, total: int) -> bytes:
    count = total // record_size
    batch = build_batch([(1_700_000_000_000, None, b"x" * (record_size - 8)) for _ in range(count)],
                        producer_id=-1)
    request = m.ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
        m.ProduceRequest.TopicProduceData(name="bench", partition_data=[
            m.ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    return framing.encode_request(0, 9, 1, "bench", request)


SOCKET_READ = 64 * 1024  # what one socket read typically hands the protocol


def _decode_validate(frame: bytes) -> int:
    buffer = framing.FrameBuffer(100 * MIB)
    view = memoryview(frame)
    body = None
    for start in range(0, len(frame), SOCKET_READ):
        buffer.feed(view[start:start + SOCKET_READ])
        body = body or buffer.next_frame()
    header, request = framing.decode_request(body)
    records = request.topic_data[0].partition_data[0].records
    # The broker's checks before the append: the produce handler's, then the log's.
    validate_produce_request_records(records, header.request_api_version)
    validate_as_leader(records, TOPIC_CONFIG, now_ms=1_700_000_000_000)
    return len(records)


def _fetch_response(records: bytes) -> m.FetchResponse:
    R = m.FetchResponse
    return R(session_id=0, responses=[R.FetchableTopicResponse(topic="bench", partitions=[
        R.PartitionData(partition_index=0, high_watermark=1000, last_stable_offset=1000,
                        log_start_offset=0, aborted_transactions=None, records=records)])])


class _FileRegion:
    """Stands for the storage layer's file region: not a buffer, so the encoder passes it
    through as its own chunk (the broker then sendfiles it)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def _best(fn, repeat: int, number: int) -> float:
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number


def run(quick: bool = False) -> str:
    repeat, number = (3, 5) if quick else (7, 30)
    rows = []
    for record_size in (100, 1000):
        frame = _produce_frame(record_size, MIB)
        seconds = _best(lambda frame=frame: _decode_validate(frame), repeat, number)
        rows.append((f"decode + validate Produce v9, 1 MiB batch of {record_size} B records",
                     seconds))
    records = _produce_frame(1000, MIB)[-MIB:]  # any 1 MiB of bytes: the encoder copies them
    response = _fetch_response(records)
    seconds = _best(lambda: framing.encode_response(1, 16, 1, response), repeat, number)
    rows.append(("encode Fetch v16 response holding 1 MiB of records (copied)", seconds))
    region = _FileRegion(MIB)
    region_response = _fetch_response(region)  # type: ignore[arg-type]
    chunks = framing.encode_response_chunks(1, 16, 1, region_response)
    assert any(chunk is region for chunk in chunks)  # passed through, not copied
    seconds = _best(lambda: framing.encode_response_chunks(1, 16, 1, region_response), repeat,
                    number)
    rows.append(("encode Fetch v16 response chunks around a 1 MiB file region (sendfile path)",
                 seconds))
    # Sanity: the encoded response decodes to the same records.
    encoded = framing.encode_response(1, 16, 1, response)
    (size,) = struct.unpack_from(">i", encoded)
    _corr, decoded = framing.decode_response(encoded[4:4 + size], 1, 16)
    assert bytes(decoded.responses[0].partitions[0].records) == records

    lines = [
        "## Protocol codec (sans-I/O hot paths)",
        "",
        "Method: `python -m bench protocol`; `timeit`, best of "
        f"{repeat} repeats x {number} calls, one process, no sockets. Decode = FrameBuffer split "
        "(fed in 64 KiB reads, as from a socket) + header + body decode (records stay a memoryview of the frame) + "
        "`validate_produce_request_records` + `validate_as_leader` (the broker's checks before the "
        "append: CRC32C of the whole batch, no decompression).",
        "",
        "| operation | per op | ops/s | MiB/s |",
        "|---|---|---|---|",
    ]
    for label, seconds in rows:
        lines.append(f"| {label} | {seconds * 1e6:.1f} us | {1 / seconds:,.0f} | "
                     f"{1 / seconds:,.0f} |")
    return "\n".join(lines) + "\n"
