"""A minimal Kafka wire client for broker tests: one blocking socket, explicit frames, so a test
controls exactly what the broker sees (pipelining, long polls, sessions, sizes)."""

from __future__ import annotations

import socket
import struct
import time

from broker_process import _recv_exact

from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.records import build_batch, iter_batches

FETCH_VERSION = 12  # the newest Fetch version that names topics (13+ use topic ids)


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 30) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.next_correlation_id = 1

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, request) -> int:
        """Send one request without waiting; returns its correlation id."""
        corr = self.next_correlation_id
        self.next_correlation_id += 1
        self.sock.sendall(framing.encode_request(api_key, version, corr, "raw-test", request))
        return corr

    def receive(self, api_key: int, version: int):
        """(correlation id, response) of the next response frame."""
        size = struct.unpack(">i", _recv_exact(self.sock, 4))[0]
        return framing.decode_response(_recv_exact(self.sock, size), api_key, version)

    def call(self, api_key: int, version: int, request):
        corr = self.send(api_key, version, request)
        got, response = self.receive(api_key, version)
        assert got == corr
        return response

    def closed_by_peer(self, timeout: float = 10) -> bool:
        """Whether the broker closes this connection within `timeout` seconds."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def no_answer_within(self, seconds: float) -> bool:
        """Whether nothing arrives on this connection for `seconds` (a request held in the
        broker: a delayed produce, a long poll); the connection stays usable."""
        self.sock.settimeout(seconds)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
            return False
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(30)

    # -- typed helpers
    def create_topic(self, name: str, partitions: int = 1) -> None:
        resp = self.call(19, 7, m.CreateTopicsRequest(timeout_ms=10000, topics=[
            m.CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions,
                                                 replication_factor=1)]))
        assert resp.topics[0].error_code == 0, resp.topics[0].error_message

    def produce(self, topic: str, partition: int, values: list[bytes]) -> int:
        """One batch of `values`; returns its base offset."""
        batch = build_batch([(int(time.time() * 1000), None, v) for v in values])
        resp = self.call(0, 9, produce_request(topic, partition, batch))
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0, part.error_message
        return part.base_offset

    def metadata(self, topics: list[str] | None = None, allow_auto_topic_creation: bool = True):
        request = m.MetadataRequest(
            topics=None if topics is None else [m.MetadataRequest.MetadataRequestTopic(name=t)
                                                for t in topics],
            allow_auto_topic_creation=allow_auto_topic_creation)
        return self.call(3, 12, request)


def produce_request(topic: str, partition: int, batch: bytes, acks: int = -1) -> m.ProduceRequest:
    return m.ProduceRequest(acks=acks, timeout_ms=10000, topic_data=[
        m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            m.ProduceRequest.PartitionProduceData(index=partition, records=batch)])])


def fetch_request(partitions: dict[tuple[str, int], int], *, max_wait_ms: int = 0,
                  min_bytes: int = 1, max_bytes: int = 50 * 1024 * 1024,
                  partition_max_bytes: int = 1024 * 1024, session_id: int = 0,
                  session_epoch: int = -1) -> m.FetchRequest:
    """A consumer's Fetch for {(topic, partition): fetch offset}."""
    topics: dict[str, list] = {}
    for (topic, partition), offset in partitions.items():
        topics.setdefault(topic, []).append(m.FetchRequest.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes))
    return m.FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        session_id=session_id, session_epoch=session_epoch,
        topics=[m.FetchRequest.FetchTopic(topic=t, partitions=p) for t, p in topics.items()])


def fetched(response: m.FetchResponse) -> dict[tuple[str, int], bytes]:
    """{(topic, partition): record bytes} of a Fetch response."""
    out = {}
    for topic in response.responses:
        for part in topic.partitions:
            assert part.error_code == 0, (topic.topic, part.partition_index, part.error_code)
            out[(topic.topic, part.partition_index)] = bytes(part.records or b"")
    return out


def batch_offsets(records: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each whole batch in `records`."""
    return [(h.base_offset, h.base_offset + h.last_offset_delta)
            for _pos, h in iter_batches(records)]
