"""Request/response framing and the `FrameBuffer` stream splitter."""

from __future__ import annotations

import struct

import pytest

from odradek.protocol import framing
from odradek.protocol.errors import DecodeError, FrameTooLargeError, UnsupportedVersionError
from odradek.protocol.messages import (
    API_BY_KEY,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    HeartbeatRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    RequestHeader,
)


class FileRegion:
    """Stands in for the storage layer's sendfile region: has a length, is not a buffer."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


def size_prefix(frame: bytes) -> int:
    return struct.unpack_from(">i", frame)[0]


# ------------------------------------------------------------------------------------------------
# requests


def test_request_header_v1_bytes() -> None:
    frame = framing.encode_request(3, 8, 0x0A0B0C0D, "me", MetadataRequest(topics=None))
    body = MetadataRequest(topics=None).encode(8)
    header = bytes.fromhex("000300080a0b0c0d0002") + b"me"
    assert frame == struct.pack(">i", len(header) + len(body)) + header + body


def test_request_header_v2_keeps_a_classic_client_id() -> None:
    frame = framing.encode_request(3, 12, 1, "me", MetadataRequest(topics=None))
    assert frame[4:17] == bytes.fromhex("0003000c000000010002") + b"me" + b"\x00"
    header, request = framing.decode_request(frame[4:])
    assert header == RequestHeader(
        request_api_key=3, request_api_version=12, correlation_id=1, client_id="me"
    )
    assert request == MetadataRequest(topics=None)


def test_null_client_id() -> None:
    frame = framing.encode_request(12, 4, 9, None, HeartbeatRequest(group_id="g"))
    header, _ = framing.decode_request(frame[4:])
    assert header.client_id is None
    assert frame[12:14] == b"\xff\xff"


def test_every_api_frames_at_every_version() -> None:
    for spec in API_BY_KEY.values():
        for version in range(spec.min_version, spec.max_version + 1):
            frame = framing.encode_request(spec.api_key, version, 77, "c", spec.request())
            assert size_prefix(frame) == len(frame) - 4
            header, request = framing.decode_request(memoryview(frame)[4:])
            assert header.request_api_key == spec.api_key
            assert header.request_api_version == version and header.correlation_id == 77
            assert request == spec.request()
            response_frame = framing.encode_response(spec.api_key, version, 78, spec.response())
            assert size_prefix(response_frame) == len(response_frame) - 4
            assert framing.peek_correlation_id(response_frame[4:]) == 78
            assert framing.decode_response(response_frame[4:], spec.api_key, version) == (
                78,
                spec.response(),
            )


def test_trailing_bytes_after_a_request_body_are_ignored() -> None:
    frame = framing.encode_request(18, 3, 1, "c", ApiVersionsRequest())
    header, request = framing.decode_request(frame[4:] + b"extra")
    assert header.correlation_id == 1 and request == ApiVersionsRequest()


def test_decode_request_header_returns_a_reader_at_the_body() -> None:
    request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    frame = framing.encode_request(18, 3, 1, "c", request)
    header, reader = framing.decode_request_header(frame[4:])
    assert header.request_api_version == 3
    assert ApiVersionsRequest.read(reader, 3) == request and reader.at_end()


def test_unsupported_api_versions_version_still_yields_the_header() -> None:
    # a client from the future: ApiVersions v9, header v2 (flexible), body we cannot know
    frame = bytes.fromhex("001200090000002a0003") + b"cli" + b"\x00" + b"\x99future"
    with pytest.raises(UnsupportedVersionError) as caught:
        framing.decode_request(frame)
    header = caught.value.header
    assert (header.request_api_key, header.request_api_version) == (18, 9)
    assert header.correlation_id == 42 and header.client_id == "cli"
    # the broker answers with a v0 response (header v0) carrying UNSUPPORTED_VERSION
    answer = ApiVersionsResponse(
        error_code=35,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)],
    )
    reply = framing.encode_response(18, 0, header.correlation_id, answer)
    assert reply == bytes.fromhex("000000100000002a002300000001001200000003")


def test_unknown_api_key_and_version_carry_the_header() -> None:
    frame = bytes.fromhex("03e70000000000050001") + b"c"
    with pytest.raises(UnsupportedVersionError) as caught:
        framing.decode_request(frame)
    assert caught.value.header.request_api_key == 999
    assert caught.value.header.correlation_id == 5
    frame = bytes.fromhex("0003fffe000000060001") + b"c"
    with pytest.raises(UnsupportedVersionError) as caught:
        framing.decode_request(frame)
    assert caught.value.header.request_api_version == -2


@pytest.mark.parametrize(
    "frame",
    [b"", b"\x00\x03", bytes.fromhex("0003000c00000001"), bytes.fromhex("0003000c0000000100ff")],
)
def test_garbage_requests_raise_decode_error(frame: bytes) -> None:
    with pytest.raises(DecodeError):
        framing.decode_request(frame)


def test_produce_request_with_a_large_records_buffer() -> None:
    records = memoryview(bytes(range(256)) * 4096)
    request = ProduceRequest(
        acks=1,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(records=records)]
            )
        ],
    )
    for version in (3, 8, 9, 11):
        frame = framing.encode_request(0, version, 3, "c", request)
        assert size_prefix(frame) == len(frame) - 4
        _, decoded = framing.decode_request(frame[4:])
        assert decoded == request


# ------------------------------------------------------------------------------------------------
# responses


def test_response_header_v1_has_a_tagged_field_section() -> None:
    frame = framing.encode_response(3, 12, 7, MetadataResponse())
    assert frame[4:9] == bytes.fromhex("0000000700")
    assert framing.decode_response(frame[4:], 3, 12) == (7, MetadataResponse())
    frame_v8 = framing.encode_response(3, 8, 7, MetadataResponse())
    assert frame_v8[4:8] == bytes.fromhex("00000007") and frame_v8[8:12] == bytes(4)


def test_response_header_tagged_fields_are_skipped() -> None:
    body = MetadataResponse().encode(12)
    frame = bytes.fromhex("00000007010502abcd") + body
    assert framing.decode_response(frame, 3, 12) == (7, MetadataResponse())


def test_decode_response_errors() -> None:
    with pytest.raises(DecodeError):
        framing.decode_response(b"\x00\x00", 3, 12)
    with pytest.raises(UnsupportedVersionError):
        framing.decode_response(b"\x00\x00\x00\x01", 3, 14)
    with pytest.raises(UnsupportedVersionError):
        framing.decode_response(b"\x00\x00\x00\x01", 999, 0)
    with pytest.raises(DecodeError):
        framing.peek_correlation_id(b"\x00")


def fetch_response(records: object) -> FetchResponse:
    partition = FetchResponse.PartitionData(partition_index=0, high_watermark=10, records=records)
    return FetchResponse(
        responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[partition])]
    )


def test_fetch_response_chunks_pass_file_regions_through() -> None:
    region_a, region_b = FileRegion(b"A" * 5000), FileRegion(b"B" * 7)
    response = fetch_response(region_a)
    response.responses[0].partitions.append(
        FetchResponse.PartitionData(partition_index=1, records=region_b)
    )
    for version in (4, 11, 12, 16):
        chunks = framing.encode_response_chunks(1, version, 9, response)
        tail = [bytes] if version >= 12 else []  # tagged-field sections after the last records
        assert [type(chunk) for chunk in chunks] == [bytes, FileRegion, bytes, FileRegion, *tail]
        assert chunks[1] is region_a and chunks[3] is region_b
        total = sum(len(chunk) for chunk in chunks)
        assert size_prefix(chunks[0]) == total - 4
        # what the socket would carry, decoded back
        wire = b"".join(c.data if isinstance(c, FileRegion) else c for c in chunks)
        correlation_id, decoded = framing.decode_response(wire[4:], 1, version)
        assert correlation_id == 9
        assert [p.records for p in decoded.responses[0].partitions] == [region_a.data, b"B" * 7]
        with pytest.raises(TypeError, match="encode_response_chunks"):
            framing.encode_response(1, version, 9, response)


def test_fetch_response_chunks_join_buffers() -> None:
    response = fetch_response(memoryview(b"r" * 100_000))
    chunks = framing.encode_response_chunks(1, 12, 1, response)
    assert len(chunks) == 1 and type(chunks[0]) is bytes
    assert chunks[0] == framing.encode_response(1, 12, 1, response)
    assert response.encode_chunks(12) == [response.encode(12)]
    region = FileRegion(b"x")
    assert fetch_response(region).encode_chunks(12)[1] is region


# ------------------------------------------------------------------------------------------------
# FrameBuffer


def frames_of(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(body)) + body for body in bodies)


def test_frame_buffer_splits_a_stream_fed_byte_by_byte() -> None:
    bodies = [b"", b"a", b"hello world", bytes(300)]
    stream = frames_of(*bodies)
    buffer = framing.FrameBuffer(1024)
    received = []
    for index in range(len(stream)):
        buffer.feed(stream[index : index + 1])
        while (frame := buffer.next_frame()) is not None:
            received.append(bytes(frame))
    assert received == bodies
    assert buffer.buffered == 0 and buffer.next_frame() is None


def test_frame_buffer_many_frames_in_one_feed() -> None:
    bodies = [bytes([i]) * (i * 1000) for i in range(100)]
    buffer = framing.FrameBuffer(1 << 20)
    buffer.feed(memoryview(frames_of(*bodies) + b"\x00\x00"))
    assert [bytes(frame) for frame in buffer.frames()] == bodies
    assert buffer.buffered == 2
    buffer.feed(b"\x00\x01z")
    assert buffer.next_frame() == b"z"


def test_frame_buffer_limits() -> None:
    buffer = framing.FrameBuffer(10)
    buffer.feed(frames_of(b"0123456789"))
    assert buffer.next_frame() == b"0123456789"
    buffer.feed(struct.pack(">i", 11))
    with pytest.raises(FrameTooLargeError):
        buffer.next_frame()
    negative = framing.FrameBuffer(10)
    negative.feed(struct.pack(">i", -1))
    with pytest.raises(FrameTooLargeError):
        negative.next_frame()
    huge = framing.FrameBuffer(100 * 1024 * 1024)
    huge.feed(b"\x7f\xff\xff\xff")
    with pytest.raises(FrameTooLargeError):
        huge.next_frame()


def test_frame_buffer_feeds_requests_to_decode_request() -> None:
    requests = [
        framing.encode_request(18, 3, i, "c", ApiVersionsRequest(client_software_name=f"n{i}"))
        for i in range(5)
    ]
    buffer = framing.FrameBuffer(1 << 16)
    buffer.feed(b"".join(requests))
    decoded = [framing.decode_request(frame) for frame in buffer.frames()]
    assert [h.correlation_id for h, _ in decoded] == list(range(5))
    assert [r.client_software_name for _, r in decoded] == [f"n{i}" for i in range(5)]


def test_frame_buffer_large_frames_get_their_own_buffer() -> None:
    large_a, large_b = bytes(range(256)) * 600, b"L" * 70_000  # above the 64 KiB threshold
    bodies = [b"s1", large_a, b"s2", b"", large_b, b"s3"]
    stream = frames_of(*bodies)
    for chunk_size in (1000, 4096, 65536, 200_000, len(stream)):
        buffer = framing.FrameBuffer(1 << 20)
        received = []
        for offset in range(0, len(stream), chunk_size):
            buffer.feed(memoryview(stream)[offset : offset + chunk_size])
            received.extend(buffer.frames())
        assert [bytes(frame) for frame in received] == bodies, chunk_size
        assert buffer.buffered == 0
        if chunk_size < len(large_a):
            large = received[1]
            assert type(large) is memoryview and large.readonly


def test_frame_buffer_receives_large_frames_in_place() -> None:
    """A BufferedProtocol's way (TlsConnection): the rest of a large frame is written straight
    into the buffer `receive_buffer` hands out; everything else is fed."""
    large_a, large_b = bytes(range(256)) * 600, b"L" * 70_000
    bodies = [b"s1", large_a, b"s2", large_b, b"s3"]
    stream = memoryview(frames_of(*bodies))
    for chunk_size in (1000, 65536, 200_000):
        buffer = framing.FrameBuffer(1 << 20)
        received, offset, in_place = [], 0, 0
        while offset < len(stream):
            target = buffer.receive_buffer()
            chunk = stream[offset : offset + chunk_size]
            if target is None:
                buffer.feed(chunk)
                taken = len(chunk)
            else:
                taken = min(len(target), len(chunk))
                target[:taken] = chunk[:taken]
                buffer.received(taken)
                in_place += taken
            offset += taken
            received.extend(buffer.frames())
        assert [bytes(frame) for frame in received] == bodies, chunk_size
        assert buffer.buffered == 0 and buffer.receive_buffer() is None
        assert in_place > len(large_a) + len(large_b) - 2 * chunk_size, chunk_size


def test_frame_buffer_large_request_decodes_zero_copy() -> None:
    records = b"R" * 300_000
    request = ProduceRequest(
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(records=records)]
            )
        ]
    )
    stream = framing.encode_request(0, 9, 5, "c", request)
    buffer = framing.FrameBuffer(1 << 20)
    frames = []
    for offset in range(0, len(stream), 65536):
        buffer.feed(stream[offset : offset + 65536])
        frames.extend(buffer.frames())
    (frame,) = frames
    _, decoded = framing.decode_request(frame)
    decoded_records = decoded.topic_data[0].partition_data[0].records
    assert decoded_records == records and decoded_records.obj is frame.obj
    assert buffer.buffered == 0
