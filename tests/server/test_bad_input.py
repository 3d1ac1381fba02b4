"""Hostile and broken clients get an error or a closed connection; everyone else is served."""

from __future__ import annotations

import socket
import struct

import pytest
from broker_process import _recv_exact, api_versions_ok

from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode


def _connect(broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=10)
    return s


def _roundtrip(s: socket.socket, api_key: int, version: int, request, corr: int = 7):
    s.sendall(framing.encode_request(api_key, version, corr, "test", request))
    size = struct.unpack(">i", _recv_exact(s, 4))[0]
    return framing.decode_response(_recv_exact(s, size), api_key, version)


def _closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_unknown_api_versions_version_gets_v0_error(odradek_broker):
    with _connect(odradek_broker) as s:
        # ApiVersions v99: header parsed as v2, answered at v0 with UNSUPPORTED_VERSION.
        header = struct.pack(">hhi", 18, 99, 42) + struct.pack(">h", 4) + b"test" + b"\x00"
        body = b"\x00\x00\x00"  # whatever a future version sends
        frame = header + body
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        corr, resp = framing.decode_response(_recv_exact(s, size), 18, 0)
        assert corr == 42
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 3)]
        # The connection stays usable: retry at v3.
        corr, resp = _roundtrip(s, 18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1"))
        assert resp.error_code == 0 and len(resp.api_keys) > 10


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x05\xff\xff\xff\xff\xff",            # truncated header
    b"\x00\x00\x00\x08\x00\x03\x00\x0c\x00\x00\x00\x01",  # metadata v12 with no body
    b"\x00\x00\x00\x06\x00\x63\x00\x00\x00\x01",        # unknown api key 99
    b"\xff\xff\xff\xff",                                # negative size
    b"\x7f\xff\xff\xff",                                # 2 GiB frame claim (over the limit)
])
def test_malformed_frames_close_only_that_connection(odradek_broker, garbage):
    with _connect(odradek_broker) as bystander:
        _roundtrip(bystander, 18, 3, m.ApiVersionsRequest())
        with _connect(odradek_broker) as bad:
            bad.sendall(garbage)
            assert _closed_by_peer(bad)
        # The other client is still served, and new clients are too.
        corr, resp = _roundtrip(bystander, 3, 12, m.MetadataRequest(topics=None), corr=8)
        assert corr == 8 and resp.brokers
    assert api_versions_ok(odradek_broker.host, odradek_broker.port)


def test_bad_crc_is_corrupt_message_and_log_intact(odradek_broker):
    from odradek.protocol.records import build_batch

    topic = "crc-check"
    with _connect(odradek_broker) as s:
        _roundtrip(s, 19, 7, m.CreateTopicsRequest(topics=[
            m.CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1,
                                                 replication_factor=1)]))
        good = build_batch([(1, b"k", b"good")])
        bad = bytearray(build_batch([(1, b"k", b"evil")]))
        bad[-1] ^= 0xFF  # flip a bit inside the CRC-covered records

        def produce(records: bytes):
            req = m.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    m.ProduceRequest.PartitionProduceData(index=0, records=records)])])
            _corr, resp = _roundtrip(s, 0, 9, req)
            return resp.responses[0].partition_responses[0]

        assert produce(good).error_code == 0
        assert produce(bytes(bad)).error_code == ErrorCode.CORRUPT_MESSAGE
        assert produce(good).base_offset == 1  # nothing of the bad batch was appended
