"""ACLs in the admin client (Kafka's Admin createAcls, describeAcls and deleteAcls), mixed into
`AdminClient`. Bindings and filters are `odradek.security.acl`'s (Kafka's AclBinding and
AclBindingFilter)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.client.errors import error_from_code
from odradek.protocol import messages as m
from odradek.protocol.errors import KafkaError
from odradek.security.acl import AclBinding, AclBindingFilter, binding

if TYPE_CHECKING:
    from odradek.client.cluster import Cluster
    from odradek.client.retry import Deadline

__all__ = ["AclAdmin"]


def _filter_fields(acl_filter: AclBindingFilter) -> dict:
    return {"resource_type_filter": acl_filter.resource_type,
            "resource_name_filter": acl_filter.resource_name,
            "pattern_type_filter": acl_filter.pattern_type,
            "principal_filter": acl_filter.principal, "host_filter": acl_filter.host,
            "operation": acl_filter.operation, "permission_type": acl_filter.permission}


class AclAdmin:
    cluster: Cluster

    async def create_acls(self, bindings: Iterable[AclBinding], *,
                          timeout_ms: float | None = None, raise_errors: bool = True,
                          ) -> list[tuple[AclBinding, KafkaError | None]]:
        """CreateAcls: each binding with None (created, or there already) or its error
        (the first raised when `raise_errors`)."""
        bindings = list(bindings)
        Request = m.CreateAclsRequest
        request = Request(creations=[Request.AclCreation(
            resource_type=b.resource_type, resource_name=b.resource_name,
            resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host,
            operation=b.operation, permission_type=b.permission) for b in bindings])

        async def attempt(deadline: Deadline) -> list[tuple[AclBinding, KafkaError | None]]:
            response = await self.cluster.send_to_any(request, deadline)
            return [(b, error_from_code(r.error_code, r.error_message))
                    for b, r in zip(bindings, response.results, strict=True)]

        results = await self.cluster.call("createAcls", attempt, timeout_ms=timeout_ms)
        if raise_errors:
            for _binding, error in results:
                if error is not None:
                    raise error
        return results

    async def describe_acls(self, acl_filter: AclBindingFilter, *,
                            timeout_ms: float | None = None) -> list[AclBinding]:
        """DescribeAcls: the bindings the filter matches (its error is raised)."""
        request = m.DescribeAclsRequest(**_filter_fields(acl_filter))

        async def attempt(deadline: Deadline) -> list[AclBinding]:
            response = await self.cluster.send_to_any(request, deadline, raise_error=True)
            return [binding(resource.resource_type, resource.resource_name,
                            resource.pattern_type, acl.principal, acl.host, acl.operation,
                            acl.permission_type)
                    for resource in response.resources for acl in resource.acls]

        return await self.cluster.call("describeAcls", attempt, timeout_ms=timeout_ms)

    async def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                          timeout_ms: float | None = None, raise_errors: bool = True,
                          ) -> list[tuple[AclBindingFilter, list[AclBinding] | KafkaError]]:
        """DeleteAcls: each filter with the bindings it deleted, or its error (the first
        raised when `raise_errors`)."""
        filters = list(filters)
        Request = m.DeleteAclsRequest
        request = Request(filters=[Request.DeleteAclsFilter(**_filter_fields(f))
                                   for f in filters])

        async def attempt(deadline: Deadline):
            response = await self.cluster.send_to_any(request, deadline)
            out: list[tuple[AclBindingFilter, list[AclBinding] | KafkaError]] = []
            for acl_filter, result in zip(filters, response.filter_results, strict=True):
                error = error_from_code(result.error_code, result.error_message)
                out.append((acl_filter, error if error is not None else [
                    binding(a.resource_type, a.resource_name, a.pattern_type, a.principal,
                            a.host, a.operation, a.permission_type)
                    for a in result.matching_acls]))
            return out

        results = await self.cluster.call("deleteAcls", attempt, timeout_ms=timeout_ms)
        if raise_errors:
            for _filter, value in results:
                if isinstance(value, KafkaError):
                    raise value
        return results
