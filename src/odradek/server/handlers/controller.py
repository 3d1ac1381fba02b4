"""The controller's own APIs for brokers, served on controller listeners (Kafka's
ControllerApis): BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition and
UnregisterBroker.

Each one is carried out by the `QuorumController`; a node that is not the active controller
answers NOT_CONTROLLER, and the broker asks again wherever the quorum says the leader is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.controller.cluster_control import BrokerRegistrationRequest
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation

if TYPE_CHECKING:
    from odradek.controller.quorum_controller import QuorumController
    from odradek.server.network import RequestContext


def require_cluster_action(ctx: RequestContext | None) -> None:
    """Inter-node APIs need CLUSTER_ACTION on the cluster (brokers' principals are super users
    or granted it); a call from this process (no context) is trusted."""
    if ctx is not None and not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


class ControllerApis:
    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller

    async def broker_registration(self, ctx: RequestContext,
                                  req: m.BrokerRegistrationRequest):
        R = m.BrokerRegistrationResponse
        request = BrokerRegistrationRequest(
            broker_id=req.broker_id, cluster_id=req.cluster_id,
            incarnation_id=req.incarnation_id,
            endpoints=[(listener.name, listener.host, listener.port, listener.security_protocol)
                       for listener in req.listeners],
            features={f.name: (f.min_supported_version, f.max_supported_version)
                      for f in req.features},
            rack=req.rack)
        try:
            require_cluster_action(ctx)
            epoch = await self.controller.register_broker(request)
        except KafkaError as exc:
            return R(error_code=exc.code, broker_epoch=-1)
        return R(error_code=ErrorCode.NONE, broker_epoch=epoch)

    async def broker_heartbeat(self, ctx: RequestContext, req: m.BrokerHeartbeatRequest):
        R = m.BrokerHeartbeatResponse
        try:
            require_cluster_action(ctx)
            reply = await self.controller.broker_heartbeat(
                req.broker_id, req.broker_epoch, req.current_metadata_offset,
                want_fence=req.want_fence, want_shutdown=req.want_shut_down)
        except KafkaError as exc:
            return R(error_code=exc.code, is_caught_up=False, is_fenced=True,
                     should_shut_down=False)
        return R(error_code=ErrorCode.NONE, is_caught_up=reply.is_caught_up,
                 is_fenced=reply.is_fenced, should_shut_down=reply.should_shut_down)

    async def allocate_producer_ids(self, ctx: RequestContext,
                                    req: m.AllocateProducerIdsRequest):
        R = m.AllocateProducerIdsResponse
        try:
            require_cluster_action(ctx)
            start, length = await self.controller.allocate_producer_ids(req.broker_id,
                                                                        req.broker_epoch)
        except KafkaError as exc:
            return R(error_code=exc.code, producer_id_start=-1, producer_id_len=0)
        return R(error_code=ErrorCode.NONE, producer_id_start=start, producer_id_len=length)

    async def alter_partition(self, ctx: RequestContext, req: m.AlterPartitionRequest):
        """A partition leader's ISR change (see `QuorumController.alter_partition`); a node
        that is not the active controller answers NOT_CONTROLLER at the top level."""
        version = ctx.api_version if ctx is not None else _local_alter_partition_version(req)
        try:
            require_cluster_action(ctx)
            return await self.controller.alter_partition(req, version)
        except KafkaError as exc:
            return m.AlterPartitionResponse(error_code=exc.code)

    async def unregister_broker(self, ctx: RequestContext, req: m.UnregisterBrokerRequest):
        """An operator's UnregisterBroker (e.g. a broker removed for good): ALTER on the
        cluster, as Kafka's ControllerApis; the active controller carries it out."""
        R = m.UnregisterBrokerResponse
        try:
            if ctx is not None and not ctx.authorize_cluster(AclOperation.ALTER):
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                 "Cluster authorization failed.")
            await self.controller.unregister_broker(req.broker_id)
        except KafkaError as exc:
            return R(error_code=exc.code, error_message=exc.message)
        return R(error_code=ErrorCode.NONE, error_message=None)

    def local_handler(self, request: m.Message):
        """The handler of a request this node sends to itself as the active controller."""
        return {
            m.BrokerRegistrationRequest: self.broker_registration,
            m.BrokerHeartbeatRequest: self.broker_heartbeat,
            m.AllocateProducerIdsRequest: self.allocate_producer_ids,
            m.AlterPartitionRequest: self.alter_partition,
        }[type(request)]


def _local_alter_partition_version(req: m.AlterPartitionRequest) -> int:
    """The version an in-process AlterPartition (this node is the active controller) is read
    as: v3 (the ISR with broker epochs) unless the sender filled only the v2 `new_isr`."""
    for topic in req.topics:
        for partition in topic.partitions:
            if partition.new_isr and not partition.new_isr_with_epochs:
                return 2
    return 3
