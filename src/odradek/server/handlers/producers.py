"""DescribeProducers (API 61): the active producers of partitions hosted here (Kafka's
ReplicaManager.activeProducerState), as `kafka-transactions.sh describe-producers` and
`odradek transactions describe-producers` show them. A follower answers too: the tool may ask
a given replica (`--broker-id`); by default clients ask the leader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.server.network import RequestContext
    from odradek.server.replica_manager import ReplicaManager


class ProducerStateApis:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    def active_producers(self, topic: str, index: int
                         ) -> m.DescribeProducersResponse.PartitionResponse:
        R = m.DescribeProducersResponse
        partition, error = self.replica_manager.get_partition(topic, index)
        if partition is None:
            # UNKNOWN_TOPIC_OR_PARTITION when the metadata has no such partition,
            # NOT_LEADER_OR_FOLLOWER when it exists but has no replica here.
            return R.PartitionResponse(partition_index=index, error_code=error)
        return R.PartitionResponse(
            partition_index=index, error_code=ErrorCode.NONE,
            active_producers=[
                R.ProducerState(producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                                last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
                                coordinator_epoch=p.coordinator_epoch,
                                current_txn_start_offset=p.current_txn_start_offset)
                for p in partition.log.active_producers()])

    async def describe_producers(self, ctx: RequestContext, req: m.DescribeProducersRequest):
        R = m.DescribeProducersResponse
        readable = ctx.authorized_names(AclOperation.READ, ResourceType.TOPIC,
                                        (topic.name for topic in req.topics))
        return R(topics=[
            R.TopicResponse(name=topic.name, partitions=[
                self.active_producers(topic.name, index) if topic.name in readable
                else R.PartitionResponse(partition_index=index,
                                         error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for index in topic.partition_indexes])
            for topic in req.topics])
