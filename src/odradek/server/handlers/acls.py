"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31).

DescribeAcls is answered from this node's metadata image; CreateAcls and DeleteAcls are carried
out by the active controller (forwarded there like the other admin writes) as
AccessControlEntryRecord / RemoveAccessControlEntryRecord records. Without an authorizer each
answers SECURITY_DISABLED, as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclBindingFilter, AclOperation, binding

if TYPE_CHECKING:
    from odradek.controller.quorum_controller import QuorumController
    from odradek.metadata.cache import MetadataCache
    from odradek.server.network import RequestContext

SECURITY_DISABLED_MESSAGE = "No Authorizer is configured."
CLUSTER_DENIED_MESSAGE = "Cluster authorization failed."


class AclApis:
    def __init__(self, cache: MetadataCache, controller: QuorumController) -> None:
        self.cache = cache
        self.controller = controller

    async def create_acls(self, ctx: RequestContext, req: m.CreateAclsRequest):
        R = m.CreateAclsResponse

        def all_fail(error: ErrorCode, message: str):
            return R(throttle_time_ms=0, results=[
                R.AclCreationResult(error_code=error, error_message=message)
                for _ in req.creations])

        if ctx.authorizer is None:
            return all_fail(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
        if not ctx.authorize_cluster(AclOperation.ALTER):
            return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED_MESSAGE)
        bindings = [binding(c.resource_type, c.resource_name, c.resource_pattern_type,
                            c.principal, c.host, c.operation, c.permission_type)
                    for c in req.creations]
        results = await self.controller.create_acls(bindings)
        return R(throttle_time_ms=0, results=[
            R.AclCreationResult(error_code=r.error, error_message=r.message) for r in results])

    def describe_acls(self, ctx: RequestContext, req: m.DescribeAclsRequest):
        R = m.DescribeAclsResponse
        if ctx.authorizer is None:
            return R(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                     error_message=SECURITY_DISABLED_MESSAGE, resources=[])
        if not ctx.authorize_cluster(AclOperation.DESCRIBE):
            return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                     error_message=CLUSTER_DENIED_MESSAGE, resources=[])
        acl_filter = AclBindingFilter.from_wire(req)
        error = acl_filter.error()
        if error is not None:
            return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                     error_message=error, resources=[])
        by_resource: dict[tuple, list] = {}
        for acl in self.cache.image.acls.values():
            if acl_filter.matches(acl):
                by_resource.setdefault(
                    (acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                    R.AclDescription(principal=acl.principal, host=acl.host,
                                     operation=acl.operation, permission_type=acl.permission))
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=[
            R.DescribeAclsResource(resource_type=kind, resource_name=name, pattern_type=pattern,
                                   acls=acls)
            for (kind, name, pattern), acls in sorted(by_resource.items())])

    async def delete_acls(self, ctx: RequestContext, req: m.DeleteAclsRequest):
        R = m.DeleteAclsResponse

        def all_fail(error: ErrorCode, message: str):
            return R(throttle_time_ms=0, filter_results=[
                R.DeleteAclsFilterResult(error_code=error, error_message=message,
                                         matching_acls=[])
                for _ in req.filters])

        if ctx.authorizer is None:
            return all_fail(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
        if not ctx.authorize_cluster(AclOperation.ALTER):
            return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED_MESSAGE)
        results = await self.controller.delete_acls(
            [AclBindingFilter.from_wire(f) for f in req.filters])
        return R(throttle_time_ms=0, filter_results=[
            R.DeleteAclsFilterResult(
                error_code=result.error, error_message=result.message,
                matching_acls=[R.DeleteAclsMatchingAcl(
                    error_code=ErrorCode.NONE, error_message=None,
                    resource_type=acl.resource_type, resource_name=acl.resource_name,
                    pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
                    operation=acl.operation, permission_type=acl.permission)
                    for acl in removed])
            for result, removed in results])
