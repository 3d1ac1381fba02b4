"""Fuzzing the decoders: random bytes and mutated valid frames must only ever raise protocol
errors, never hang and never allocate much more than the frame itself."""

from __future__ import annotations

import struct
import tracemalloc
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol import framing
from odradek.protocol.errors import DecodeError, FrameTooLargeError, UnsupportedVersionError
from odradek.protocol.messages import (
    API_BY_KEY,
    ApiVersionsRequest,
    CreateTopicsRequest,
    FetchRequest,
    JoinGroupRequest,
    MetadataRequest,
    OffsetCommitRequest,
    ProduceRequest,
)

FUZZ = settings(
    max_examples=1000,
    deadline=2000,  # milliseconds; a hang or a quadratic blow-up fails the example
    suppress_health_check=[HealthCheck.too_slow],
)


def rich_requests() -> list[tuple[int, int, object]]:
    """(api_key, version, request) with nested arrays, strings, records and tagged fields."""
    records = bytes(range(200))
    produce = ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=f"topic-{t}",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=i, records=records) for i in range(2)
                ],
            )
            for t in range(2)
        ],
    )
    topics = [MetadataRequest.MetadataRequestTopic(name=f"t{i}") for i in range(3)]
    metadata_v4 = MetadataRequest(topics=topics)
    metadata = MetadataRequest(topics=topics, include_topic_authorized_operations=True)
    fetch = FetchRequest(
        cluster_id="cluster",
        max_wait_ms=500,
        min_bytes=1,
        session_id=3,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                topic_id=uuid.UUID(int=12345),
                partitions=[
                    FetchRequest.FetchPartition(partition=p, fetch_offset=100 * p) for p in range(3)
                ],
            )
        ],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic="old", partitions=[1, 2])],
        rack_id="rack",
    )
    follower_fetch = FetchRequest(
        replica_state=FetchRequest.ReplicaState(replica_id=1, replica_epoch=2),
        topics=fetch.topics,
    )
    create = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name="new",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    CreateTopicsRequest.CreatableReplicaAssignment(
                        partition_index=0, broker_ids=[1, 2, 3]
                    )
                ],
                # "Createable" (sic) is the upstream struct name
                configs=[CreateTopicsRequest.CreatableTopicConfig(name="k", value=None)],
            )
        ],
        timeout_ms=5,
    )
    join = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10,
        member_id="m",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
    )
    commit = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5, committed_metadata="meta"
                    )
                ],
            )
        ],
    )
    api_versions = ApiVersionsRequest(
        client_software_name="fuzz", client_software_version="1", unknown_tagged_fields={9: b"x"}
    )
    rich = [
        (0, 3, produce), (0, 8, produce), (0, 9, produce), (0, 11, produce),
        (3, 4, metadata_v4), (3, 9, metadata), (3, 12, metadata),
        (1, 11, fetch), (1, 12, fetch), (1, 13, fetch), (1, 16, fetch), (1, 15, follower_fetch),
        (19, 4, create), (19, 7, create),
        (11, 5, join), (11, 9, join),
        (8, 7, commit), (8, 9, commit),
        (18, 2, api_versions), (18, 3, api_versions),
    ]  # fmt: skip
    defaults = [
        (spec.api_key, version, spec.request())
        for spec in API_BY_KEY.values()
        for version in {spec.min_version, spec.max_version}
    ]
    return rich + defaults


CORPUS = [
    framing.encode_request(key, version, 1234, "fuzzer", request)[4:]
    for key, version, request in rich_requests()
]


def decode_or_refuse(frame: bytes | memoryview) -> None:
    """decode_request succeeds, or raises DecodeError; UnsupportedVersionError only for an api
    key or version that really is unknown (the broker answers those). Anything else escapes
    and fails the test."""
    try:
        framing.decode_request(frame)
    except DecodeError:
        pass
    except UnsupportedVersionError as error:
        header = error.header
        assert header is not None, "UnsupportedVersionError without the parsed header"
        spec = API_BY_KEY.get(header.request_api_key)
        assert spec is None or not spec.supports(header.request_api_version), (
            f"api key {header.request_api_key} v{header.request_api_version} is supported"
        )


def decode_with_memory_bound(frame: bytes) -> None:
    """decode_request may only refuse with the errors above, within a memory budget."""
    tracemalloc.start()
    try:
        decode_or_refuse(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # decoded objects cost far more than their bytes (a 4-byte int32 becomes a 28-byte int
    # plus a list slot), but never more than this
    assert peak <= 200 * len(frame) + 256 * 1024, f"peak {peak} for a {len(frame)}-byte frame"


def test_corpus_decodes() -> None:
    for frame in CORPUS:
        header, request = framing.decode_request(frame)
        assert header.correlation_id == 1234
        assert header.client_id == "fuzzer"
        assert request is not None


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes(data: bytes) -> None:
    decode_with_memory_bound(data)


@FUZZ
@given(st.binary(min_size=4, max_size=64))
def test_random_bytes_after_a_known_header(data: bytes) -> None:
    # a valid api key and version, so the body decoders (not just the header) see the noise
    keys = sorted(API_BY_KEY)
    spec = API_BY_KEY[keys[data[0] % len(keys)]]
    key = spec.api_key
    version = spec.min_version + data[1] % (spec.max_version - spec.min_version + 1)
    frame = struct.pack(">hhi", key, version, 1) + data[2:]
    decode_with_memory_bound(frame)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
    st.tuples(
        st.just("int32"), st.integers(min_value=0), st.sampled_from([-2, -1, 2**31 - 1, 2**24])
    ),
    st.tuples(st.just("int16"), st.integers(min_value=0), st.sampled_from([-2, -1, 0x7FFF])),
    st.tuples(
        st.just("varint"), st.integers(min_value=0), st.sampled_from([0x7F, 2**31, 2**35 - 1])
    ),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.integers(0, 255)),
)


def mutate(frame: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(frame)
    for kind, position, value in mutations:
        if not data:
            break
        at = position % len(data)
        if kind == "flip":
            data[at] ^= 1 << value
        elif kind == "truncate":
            del data[at:]
        elif kind == "int32":
            data[at : at + 4] = struct.pack(">i", value)
        elif kind == "int16":
            data[at : at + 2] = struct.pack(">h", value)
        elif kind == "varint":  # an inflated unsigned varint (lengths, counts, tags)
            encoded = bytearray()
            while value >= 0x80:
                encoded.append((value & 0x7F) | 0x80)
                value >>= 7
            encoded.append(value)
            data[at : at + 1] = encoded
        else:
            data.insert(at, value)
    return bytes(data)


@FUZZ
@given(st.sampled_from(CORPUS), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_frames(frame: bytes, mutations: list[tuple[str, int, int]]) -> None:
    decode_with_memory_bound(mutate(frame, mutations))


LARGE_FRAME = st.integers(min_value=60_000, max_value=100_000).map(lambda size: b"\x07" * size)


@FUZZ
@given(
    st.lists(st.one_of(st.sampled_from(CORPUS), LARGE_FRAME), max_size=4),
    st.binary(max_size=64),
    st.lists(
        st.one_of(st.integers(min_value=1, max_value=300), st.integers(1, 100_000)),
        min_size=1,
        max_size=50,
    ),
)
def test_frame_buffer_on_arbitrary_streams(
    frames: list[bytes], garbage: bytes, cuts: list[int]
) -> None:
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames) + garbage
    buffer = framing.FrameBuffer(max_frame_size=90_000)
    received: list[bytes] = []
    position = 0
    failed = False
    for cut in cuts * (len(stream) // sum(cuts) + 1):
        buffer.feed(stream[position : position + cut])
        position += cut
        try:
            while (frame := buffer.next_frame()) is not None:
                assert len(frame) <= 90_000
                received.append(bytes(frame))
        except FrameTooLargeError:  # the only way a size prefix can be refused
            failed = True
            break
        if position >= len(stream):
            break
    assert received[: len(frames)] == frames[: len(received)]
    if not failed:
        assert len(received) >= len(frames)
    for frame in received:
        decode_or_refuse(frame)


# ------------------------------------------------------------------------------------------------
# targeted: length claims far beyond the frame fail fast, without allocating


@pytest.mark.parametrize(
    "frame",
    [
        # Metadata v4: topics array claiming 2^31-1 elements
        struct.pack(">hhih", 3, 4, 1, -1) + struct.pack(">i", 2**31 - 1) + b"\x00" * 16,
        # Metadata v12: compact topics array claiming 2^31 elements
        struct.pack(">hhih", 3, 12, 1, -1) + b"\x00" + b"\x80\x80\x80\x80\x08" + b"\x00" * 16,
        # Produce v3: records claiming 2 GiB
        struct.pack(">hhih", 0, 3, 1, -1)
        + struct.pack(">hhii", -1, 1, 1000, 1)
        + b"\x00\x01t"
        + struct.pack(">iii", 1, 0, 2**31 - 1),
        # ApiVersions v3: tagged-field count of 2^32-1
        struct.pack(">hhih", 18, 3, 1, -1) + b"\x00" + b"\x01\x01" + b"\xff\xff\xff\xff\x0f",
        # Metadata v1: string length 32767 with 3 bytes present
        struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">ih", 1, 0x7FFF) + b"abc",
    ],
)
def test_huge_length_claims_fail_fast(frame: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            framing.decode_request(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
