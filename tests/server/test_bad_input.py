"""Hostile and broken clients get an error or a closed connection; everyone else is served."""

from __future__ import annotations

import socket
import struct
import time

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
        assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 4)]
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


def test_produce_checks_of_kafka_run_before_the_append(odradek_broker):
    """ProduceRequest.validateRecords (one v2 batch from produce v3, zstd from v7) in the produce
    handler, keys on a compacted topic in the log's validator; nothing refused is appended."""
    from odradek.protocol.records import Compression, build_batch

    plain, compacted = "checks-plain", "checks-compacted"
    with _connect(odradek_broker) as s:
        _roundtrip(s, 19, 7, m.CreateTopicsRequest(topics=[
            m.CreateTopicsRequest.CreatableTopic(name=plain, num_partitions=1,
                                                 replication_factor=1),
            m.CreateTopicsRequest.CreatableTopic(
                name=compacted, num_partitions=1, replication_factor=1,
                configs=[m.CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy",
                                                                     value="compact")])]))

        def produce(topic: str, records: bytes, version: int = 9):
            req = m.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    m.ProduceRequest.PartitionProduceData(index=0, records=records)])])
            _corr, resp = _roundtrip(s, 0, version, req)
            return resp.responses[0].partition_responses[0]

        keyed = build_batch([(1, b"k", b"v")])
        assert produce(plain, keyed + keyed).error_code == ErrorCode.INVALID_RECORD
        assert produce(plain, b"").error_code == ErrorCode.INVALID_RECORD
        zstd = build_batch([(1, b"k", b"v")], compression=Compression.ZSTD)
        assert produce(plain, zstd, version=6).error_code == \
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert produce(plain, zstd, version=7).base_offset == 0

        no_key = build_batch([(1, b"k", b"v"), (1, None, b"v")])
        assert produce(compacted, no_key).error_code == ErrorCode.INVALID_RECORD
        assert produce(compacted, keyed).base_offset == 0
        assert produce(plain, no_key).base_offset == 1


def _advertised(s: socket.socket) -> dict[int, tuple[int, int]]:
    _corr, resp = _roundtrip(s, 18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                             client_software_version="1"))
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def test_every_api_the_broker_does_not_serve_closes_only_that_connection(odradek_broker):
    """Kafka closes the connection of a request for an API (or version) its listener does not
    enable. Every such request, well formed, gets exactly that: no answer, no hang, and the
    broker keeps serving everyone else."""
    from odradek.protocol.messages import API_BY_KEY

    with _connect(odradek_broker) as bystander:
        advertised = _advertised(bystander)
        requests = [(key, spec.max_version) for key, spec in sorted(API_BY_KEY.items())
                    if key not in advertised]
        # Served APIs at versions below the lowest one served (Kafka 4.0 dropped them too).
        requests += [(key, low - 1) for key, (low, _high) in sorted(advertised.items())
                     if low > API_BY_KEY[key].min_version]
        assert len(requests) > 20  # (fewer as more APIs are served)
        for corr, (key, version) in enumerate(requests, start=100):
            with _connect(odradek_broker) as client:
                client.sendall(framing.encode_request(key, version, corr, "test",
                                                      API_BY_KEY[key].request()))
                assert _closed_by_peer(client), f"api key {key} v{version} was answered"
            _corr, resp = _roundtrip(bystander, 3, 12, m.MetadataRequest(topics=None), corr=corr)
            assert _corr == corr and resp.brokers, f"broker stopped serving after key {key}"


def test_sasl_requests_on_a_plaintext_listener_get_illegal_sasl_state(odradek_broker):
    with _connect(odradek_broker) as s:
        advertised = _advertised(s)
        assert advertised[17] == (0, 1) and advertised[36] == (0, 2)
        _corr, handshake = _roundtrip(s, 17, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.ILLEGAL_SASL_STATE
        _corr, auth = _roundtrip(s, 36, 2, m.SaslAuthenticateRequest(auth_bytes=b"\0u\0p"))
        assert auth.error_code == ErrorCode.ILLEGAL_SASL_STATE
        # The connection stays usable.
        _corr, resp = _roundtrip(s, 3, 12, m.MetadataRequest(topics=None))
        assert resp.brokers[0].port == odradek_broker.port


def test_a_sasl_client_gets_an_authentication_error_not_endless_reconnects(odradek_broker):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list = []
    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "u", "sasl.password": "p",
                         "error_cb": errors.append})
    deadline = time.monotonic() + 20

    def authentication_errors() -> list:
        return [e for e in errors if e.code() == KafkaError._AUTHENTICATION]

    while not authentication_errors() and time.monotonic() < deadline:
        admin.poll(0.2)
    assert authentication_errors(), f"no authentication error reported, only {errors}"
    assert "Request not valid in current SASL state" in authentication_errors()[0].str()


def _controller(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.controller_port), timeout=10)


def test_controller_listener_serves_only_controller_apis(odradek_broker):
    with _controller(odradek_broker) as s:
        # The quorum's APIs (Raft's Fetch, Vote, Begin/EndQuorumEpoch, DescribeQuorum) and the
        # connection-level ones.
        # The brokers' lifecycle (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds) and
        # Envelope (admin requests forwarded by brokers). AlterPartition (partition leaders'
        # ISR changes). KIP-853's AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter. KIP-919's
        # admin APIs (CreateTopics... UnregisterBroker) for `bootstrap.controllers`.
        assert sorted(_advertised(s)) == [1, 17, 18, 19, 20, 29, 30, 31, 32, 33, 36, 37, 43, 44,
                                          45, 46, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
                                          60, 62, 63, 64, 67, 80, 81, 82]
        _corr, cluster = _roundtrip(s, 60, 1, m.DescribeClusterRequest(endpoint_type=2))
        assert cluster.error_code == 0 and cluster.endpoint_type == 2
        assert [(b.broker_id, b.host, b.port) for b in cluster.brokers] == [
            (1, "127.0.0.1", odradek_broker.controller_port)]
        _corr, wrong = _roundtrip(s, 60, 1, m.DescribeClusterRequest(endpoint_type=1))
        assert wrong.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
        assert wrong.error_message == ("The request was sent to an endpoint of type CONTROLLER, "
                                       "but we wanted an endpoint of type BROKER")
        _corr, v0 = _roundtrip(s, 60, 0, m.DescribeClusterRequest())
        assert v0.error_code == ErrorCode.INVALID_REQUEST
        _corr, unknown = _roundtrip(s, 60, 1, m.DescribeClusterRequest(endpoint_type=7))
        assert unknown.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        # A broker API on the controller listener: the connection is closed, as in Kafka.
        s.sendall(framing.encode_request(3, 12, 9, "test", m.MetadataRequest(topics=None)))
        assert _closed_by_peer(s)
    with _connect(odradek_broker) as s:
        _corr, brokers = _roundtrip(s, 60, 1, m.DescribeClusterRequest(endpoint_type=1))
        assert [(b.broker_id, b.port) for b in brokers.brokers] == [(1, odradek_broker.port)]
        _corr, wrong = _roundtrip(s, 60, 1, m.DescribeClusterRequest(endpoint_type=2))
        assert wrong.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
        assert wrong.error_message == ("The request was sent to an endpoint of type BROKER, "
                                       "but we wanted an endpoint of type CONTROLLER")


def test_frame_cut_short_by_the_client_closes_only_that_connection(odradek_broker):
    """A frame whose bytes stop before its declared size, then the client's half-close: the
    broker drops the partial frame and closes; a silent one is left to idle reaping."""
    with _connect(odradek_broker) as bystander:
        with _connect(odradek_broker) as cut:
            frame = framing.encode_request(3, 12, 5, "cut", m.MetadataRequest(topics=None))
            cut.sendall(frame[:len(frame) // 2])
            cut.shutdown(socket.SHUT_WR)
            assert _closed_by_peer(cut)
        _corr, resp = _roundtrip(bystander, 3, 12, m.MetadataRequest(topics=None), corr=11)
        assert _corr == 11 and resp.brokers
