"""A scripted one-node transactional peer (over `FakeBroker`) for the transactional producer's
state machine and error handling: it answers Metadata, FindCoordinator, InitProducerId,
AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit and EndTxn with just enough
bookkeeping for the client to proceed, and tests queue error codes per API (`fail`) to see
how the client classifies them. Broker semantics are tested against the real broker."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from fake_broker import FakeBroker, metadata_response, requested_topics

from odradek.protocol import messages as m

PRODUCE, METADATA, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 3, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
_TRANSACTIONAL_FLAG = 0x10


class FakeTxnBroker:
    def __init__(self, topics: dict[str, int] | None = None, *,
                 api_versions: dict[int, tuple[int, int]] | None = None) -> None:
        self.topics = topics or {"t": 2}
        self.broker = FakeBroker(self.handle, api_versions=api_versions)
        #: api key -> error codes for its next requests (one per request, whole response)
        self.fail: dict[int, deque[int]] = defaultdict(deque)
        self.producer_id = 4000
        self.epoch = -1
        self.next_offset: dict[tuple[str, int], int] = defaultdict(int)
        #: what the client asked, in order
        self.added: list[list[tuple[str, int]]] = []
        self.end_txns: list[tuple[bool, int, int]] = []
        self.init_requests: list[tuple[int, int]] = []
        self.offset_commits: list[Any] = []
        self.produced: list[tuple[str | None, str, int, int, int, bool]] = []

    async def __aenter__(self) -> FakeTxnBroker:
        await self.broker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.broker.close()

    @property
    def address(self) -> str:
        return self.broker.address

    def requests_of(self, api_key: int) -> list[Any]:
        return [request for _h, request in self.broker.requests_of(api_key)]

    def _error(self, api_key: int) -> int:
        queue = self.fail.get(api_key)
        return queue.popleft() if queue else 0

    def handle(self, header: Any, request: Any) -> Any:
        key, version = header.request_api_key, header.request_api_version
        host, port = self.broker.host, self.broker.port
        if key == METADATA:
            names = requested_topics(request)
            return metadata_response(
                [(1, host, port)],
                {name: dict.fromkeys(range(count), 1) for name, count in self.topics.items()},
                requested=names)
        if key == FIND_COORDINATOR:
            error = self._error(key)
            if version >= 4:
                found = m.FindCoordinatorResponse.Coordinator
                return m.FindCoordinatorResponse(coordinators=[
                    found(key=k, node_id=1, host=host, port=port, error_code=error)
                    for k in request.coordinator_keys])
            return m.FindCoordinatorResponse(error_code=error, node_id=1, host=host, port=port)
        if key == INIT_PRODUCER_ID:
            self.init_requests.append((request.producer_id, request.producer_epoch))
            error = self._error(key)
            if error:
                return m.InitProducerIdResponse(error_code=error, producer_id=-1,
                                                producer_epoch=-1)
            self.epoch += 1
            return m.InitProducerIdResponse(producer_id=self.producer_id,
                                            producer_epoch=self.epoch)
        if key == ADD_PARTITIONS:
            error = self._error(key)
            partitions = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
            if not error:
                self.added.append(partitions)
            R = m.AddPartitionsToTxnResponse
            return R(results_by_topic_v3_and_below=[
                R.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                    R.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                        partition_error_code=error)
                    for p in t.partitions])
                for t in request.v3_and_below_topics])
        if key == ADD_OFFSETS:
            return m.AddOffsetsToTxnResponse(error_code=self._error(key))
        if key == TXN_OFFSET_COMMIT:
            error = self._error(key)
            if not error:
                self.offset_commits.append(request)
            R = m.TxnOffsetCommitResponse
            return R(topics=[R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
                R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                   error_code=error)
                for p in t.partitions]) for t in request.topics])
        if key == END_TXN:
            error = self._error(key)
            if not error:
                self.end_txns.append((request.committed, request.producer_id,
                                      request.producer_epoch))
            return m.EndTxnResponse(error_code=error)
        if key == PRODUCE:
            error = self._error(key)
            R = m.ProduceResponse
            topics = []
            for topic in request.topic_data:
                parts = []
                for p in topic.partition_data:
                    records = bytes(p.records)
                    transactional = bool(records[22] & _TRANSACTIONAL_FLAG)
                    count = int.from_bytes(records[57:61], "big")
                    tp = (topic.name, p.index)
                    base = self.next_offset[tp]
                    if not error:
                        self.next_offset[tp] += count
                        self.produced.append((request.transactional_id, topic.name, p.index,
                                              base, count, transactional))
                    parts.append(R.PartitionProduceResponse(
                        index=p.index, error_code=error, base_offset=-1 if error else base))
                topics.append(R.TopicProduceResponse(name=topic.name,
                                                     partition_responses=parts))
            return R(responses=topics)
        return None
