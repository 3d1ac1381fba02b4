"""The transaction half of the admin client (Kafka's Admin describeProducers,
describeTransactions, listTransactions and abortTransaction), mixed into `AdminClient`.

* `describe_producers`: DescribeProducers (API 61) to each partition's leader, or to the
  broker named by `broker_id` (any replica).
* `describe_transactions`: DescribeTransactions (API 65) to each transactional id's
  coordinator (FindCoordinator with the TRANSACTION key type).
* `list_transactions`: ListTransactions (API 66) to every broker; each lists the transactional
  ids its coordinator partitions hold.
* `abort_transaction`: WriteTxnMarkers (API 27) with an ABORT marker to the partition's
  leader, for a hanging transaction whose coordinator will never complete it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.client.errors import error_from_code
from odradek.client.retry import Deadline
from odradek.client.transactions import MAX_END_TXN_VERSION, PreparedTransaction
from odradek.client.types import Node, TopicPartition
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.client.cluster import Cluster

__all__ = [
    "AbortTransactionSpec",
    "ProducerState",
    "TransactionAdmin",
    "TransactionDescription",
    "TransactionListing",
]

_COORDINATOR_TYPE_TRANSACTION = 1
_FIND_COORDINATOR_BATCHED = 4
#: errors after which a transactional id's coordinator is looked up again
_COORDINATOR_RETRY = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           ErrorCode.LEADER_NOT_AVAILABLE})


@dataclass(frozen=True)
class ProducerState:
    """An active producer of a partition, as its leader's producer state holds it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    #: None when no transaction marker of this producer was written yet
    coordinator_epoch: int | None
    #: the first offset of its open transaction; None when it has none
    current_transaction_start_offset: int | None


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    #: the coordinator's name for it: Empty, Ongoing, PrepareCommit, PrepareAbort,
    #: CompleteCommit, CompleteAbort, Dead, PrepareEpochFence
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    #: None when no transaction is open
    transaction_start_time_ms: int | None
    topic_partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class AbortTransactionSpec:
    """Which transaction to abort on which partition (Kafka's AbortTransactionSpec)."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


class TransactionAdmin:
    """Needs `AdminClient`'s machinery (`cluster`, `_run`, `_by_leader`, `_fan_out`,
    `_outcome`, `_request`)."""

    cluster: Cluster
    if TYPE_CHECKING:
        _run: Any
        _by_leader: Any
        _fan_out: Any
        _outcome: Any
        _request: Any

    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition],
        *,
        broker_id: int | None = None,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[TopicPartition, list[ProducerState] | KafkaError]:
        """The active producers of each partition, from its leader (or from `broker_id`)."""
        from odradek.client.admin import _LEADER_RETRY

        wanted = {TopicPartition(*tp): None for tp in partitions}
        retry = frozenset() if broker_id is not None else _LEADER_RETRY

        async def send(node: int, group: list[TopicPartition], deadline: Deadline) -> dict:
            connection = await self.cluster.connection(node, deadline)
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in group:
                by_topic[tp.topic].append(tp.partition)
            request = m.DescribeProducersRequest(topics=[
                m.DescribeProducersRequest.TopicRequest(name=name, partition_indexes=indexes)
                for name, indexes in by_topic.items()])
            response = await self._request(connection, request, deadline)
            outcomes: dict[TopicPartition, Any] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    error = error_from_code(p.error_code, p.error_message)
                    outcomes[tp] = self._outcome(error, retry) if error else [
                        ProducerState(
                            s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                            None if s.coordinator_epoch < 0 else s.coordinator_epoch,
                            None if s.current_txn_start_offset < 0
                            else s.current_txn_start_offset)
                        for s in p.active_producers]
            return outcomes

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            if broker_id is not None:
                await self.cluster.ensure_metadata(deadline=deadline)
                groups: dict[int, list[TopicPartition]] = {broker_id: list(pending)}
                outcomes: dict[TopicPartition, Any] = {}
            else:
                groups, outcomes = await self._by_leader(pending, deadline)
            outcomes.update(await self._fan_out(
                groups, lambda node, group: send(node, group, deadline), retry))
            return outcomes

        results = await self._run("describeProducers", wanted, attempt, timeout_ms, retry)
        return _finish(results, raise_errors)

    async def _find_transaction_coordinator(self, transactional_id: str,
                                            deadline: Deadline) -> Node:
        connection = await self.cluster.any_connection(deadline)
        version = connection.pick_version(m.FindCoordinatorRequest.API_KEY)
        batched = version >= _FIND_COORDINATOR_BATCHED
        request = m.FindCoordinatorRequest(key_type=_COORDINATOR_TYPE_TRANSACTION,
                                           coordinator_keys=[transactional_id]) if batched \
            else m.FindCoordinatorRequest(key=transactional_id,
                                          key_type=_COORDINATOR_TYPE_TRANSACTION)
        response = await connection.send(request, api_version=version,
                                         timeout_ms=self.cluster.request_timeout(deadline))
        found = response.coordinators[0] if batched else response
        error = error_from_code(found.error_code, found.error_message)
        if error is not None:
            raise error
        return Node(found.node_id, found.host, found.port)

    async def describe_transactions(
        self,
        transactional_ids: Iterable[str],
        *,
        timeout_ms: float | None = None,
        raise_errors: bool = True,
    ) -> dict[str, TransactionDescription | KafkaError]:
        """The state of each transactional id, from its coordinator
        (TRANSACTIONAL_ID_NOT_FOUND when the coordinator does not know it)."""
        wanted = dict.fromkeys(transactional_ids)

        async def send(node: Node, group: list[str], deadline: Deadline) -> dict:
            connection = await self.cluster.connect_to((node.host, node.port), deadline)
            response = await self._request(
                connection, m.DescribeTransactionsRequest(transactional_ids=group), deadline)
            outcomes: dict[str, Any] = {}
            for state in response.transaction_states:
                error = error_from_code(state.error_code)
                outcomes[state.transactional_id] = \
                    self._outcome(error, _COORDINATOR_RETRY) if error else \
                    TransactionDescription(
                        node.id, state.transaction_state, state.producer_id,
                        state.producer_epoch, state.transaction_timeout_ms,
                        None if state.transaction_start_time_ms < 0
                        else state.transaction_start_time_ms,
                        frozenset(TopicPartition(t.topic, p) for t in state.topics
                                  for p in t.partitions))
            return outcomes

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            ids = list(pending)
            found = await asyncio.gather(
                *(self._find_transaction_coordinator(i, deadline) for i in ids),
                return_exceptions=True)
            groups: dict[Node, list[str]] = defaultdict(list)
            outcomes: dict[str, Any] = {}
            for transactional_id, node in zip(ids, found):
                if isinstance(node, KafkaError):
                    outcomes[transactional_id] = self._outcome(node, _COORDINATOR_RETRY)
                elif isinstance(node, BaseException):
                    raise node
                else:
                    groups[node].append(transactional_id)
            outcomes.update(await self._fan_out(
                groups, lambda node, group: send(node, group, deadline), _COORDINATOR_RETRY))
            return outcomes

        results = await self._run("describeTransactions", wanted, attempt, timeout_ms,
                                  _COORDINATOR_RETRY)
        return _finish(results, raise_errors)

    async def list_transactions_by_broker(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_filter_ms: int = -1,
        timeout_ms: float | None = None,
    ) -> dict[int, list[TransactionListing]]:
        """Every broker's transactions (ListTransactionsResult.allByBrokerId); `states`,
        `producer_ids` and (ListTransactions v1) `duration_filter_ms` filter them."""
        state_filters = list(states)
        producer_id_filters = list(producer_ids)

        async def from_broker(node_id: int, deadline: Deadline) -> list[TransactionListing]:
            connection = await self.cluster.connection(node_id, deadline)
            request = m.ListTransactionsRequest(state_filters=state_filters,
                                                producer_id_filters=producer_id_filters,
                                                duration_filter=duration_filter_ms)
            response = await self._request(connection, request, deadline,
                                           min_version=1 if duration_filter_ms >= 0 else None)
            error = error_from_code(response.error_code)
            if error is not None:
                raise error
            return [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                    for t in response.transaction_states]

        async def attempt(deadline: Deadline) -> dict[int, list[TransactionListing]]:
            metadata = await self.cluster.ensure_metadata(deadline=deadline)
            nodes = sorted(metadata.brokers)
            listings = await asyncio.gather(*(from_broker(node, deadline) for node in nodes))
            return dict(zip(nodes, listings))

        return await self.cluster.call("listTransactions", attempt, timeout_ms=timeout_ms)

    async def list_transactions(self, **filters: Any) -> list[TransactionListing]:
        """Every broker's transactions in one list (ListTransactionsResult.all)."""
        by_broker = await self.list_transactions_by_broker(**filters)
        return [listing for listings in by_broker.values() for listing in listings]

    async def abort_transaction(self, spec: AbortTransactionSpec, *,
                                timeout_ms: float | None = None) -> None:
        """Write an ABORT marker for `spec`'s producer to its partition (on the leader)."""
        tp = spec.topic_partition
        retry = frozenset(_LEADER_MOVED)

        async def send(leader: int, group: list[TopicPartition], deadline: Deadline) -> dict:
            connection = await self.cluster.connection(leader, deadline)
            R = m.WriteTxnMarkersRequest
            request = R(markers=[R.WritableTxnMarker(
                producer_id=spec.producer_id, producer_epoch=spec.producer_epoch,
                transaction_result=False, coordinator_epoch=spec.coordinator_epoch,
                topics=[R.WritableTxnMarkerTopic(name=tp.topic,
                                                 partition_indexes=[tp.partition])])])
            response = await self._request(connection, request, deadline)
            markers = response.markers
            if len(markers) != 1 or markers[0].producer_id != spec.producer_id:
                return {tp: KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                       "WriteTxnMarkers response included unexpected marker "
                                       f"entries: {markers}")}
            codes = [p.error_code for t in markers[0].topics if t.name == tp.topic
                     for p in t.partitions if p.partition_index == tp.partition]
            if len(codes) != 1:
                return {tp: KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                       "WriteTxnMarkers response did not include the "
                                       f"partition {tp}")}
            error = error_from_code(codes[0])
            return {tp: self._outcome(error, retry) if error else None}

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            groups, outcomes = await self._by_leader(pending, deadline)
            outcomes.update(await self._fan_out(
                groups, lambda leader, group: send(leader, group, deadline), retry))
            return outcomes

        results = await self._run("abortTransaction", {tp: None}, attempt, timeout_ms, retry)
        _finish(results, True)


    async def end_transaction(self, prepared: PreparedTransaction, commit: bool, *,
                              timeout_ms: float | None = None) -> None:
        """Commit or abort a transaction its producer handed off (`prepare_transaction`):
        EndTxn to the transactional id's coordinator with the producer's id and epoch.
        Retried while the coordinator moves or is busy with an earlier transaction
        (CONCURRENT_TRANSACTIONS); ending a transaction the coordinator already ended the same
        way at that epoch succeeds (Kafka's EndTxn retry), so a caller may repeat it. Raises
        PRODUCER_FENCED / INVALID_PRODUCER_EPOCH when a newer producer took the id over (which
        aborts the prepared transaction), INVALID_TXN_STATE when it was ended otherwise."""
        if not prepared.started:
            return  # nothing was sent: the coordinator has no transaction to end
        retry = _COORDINATOR_RETRY | {ErrorCode.CONCURRENT_TRANSACTIONS}
        key = prepared.transactional_id

        async def attempt(pending: dict, deadline: Deadline) -> dict:
            node = await self._find_transaction_coordinator(key, deadline)
            connection = await self.cluster.connect_to((node.host, node.port), deadline)
            request = m.EndTxnRequest(transactional_id=key, producer_id=prepared.producer_id,
                                      producer_epoch=prepared.producer_epoch, committed=commit)
            version = min(connection.pick_version(m.EndTxnRequest.API_KEY), MAX_END_TXN_VERSION)
            response = await connection.send(request, api_version=version,
                                             timeout_ms=self.cluster.request_timeout(deadline))
            error = error_from_code(response.error_code)
            return {key: self._outcome(error, retry) if error else None}

        results = await self._run("endTxn", {key: None}, attempt, timeout_ms, retry)
        _finish(results, True)


def _finish(results: dict[Any, Any], raise_errors: bool) -> dict[Any, Any]:
    if raise_errors:
        for value in results.values():
            if isinstance(value, KafkaError):
                raise value
    return results
