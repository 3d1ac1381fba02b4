"""The ACLs pages: list bindings (filtered by principal and resource), add one after a review
step, delete one after confirmation, with the admin client's CreateAcls / DescribeAcls /
DeleteAcls (Kafka's kafka-acls.sh does the same). A binding travels as its seven fields in
query or form parameters, enums by their Kafka names."""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from odradek.console.app import (
    SERVICE,
    BadParameter,
    choice_param,
    error_page,
    prepares_write,
    render,
    require_confirmed,
    review_unless_confirmed,
    str_param,
)
from odradek.console.service import PAGE_TIMEOUT_MS
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    new_binding_error,
)

#: What a new binding may name (UNKNOWN and ANY are filters' words, never a binding's).
RESOURCE_TYPES = tuple(t.name for t in ResourceType if t not in (ResourceType.UNKNOWN,
                                                                  ResourceType.ANY))
PATTERN_TYPES = (PatternType.LITERAL.name, PatternType.PREFIXED.name)
OPERATIONS = tuple(o.name for o in AclOperation if o not in (AclOperation.UNKNOWN,
                                                             AclOperation.ANY))
PERMISSIONS = (PermissionType.ALLOW.name, PermissionType.DENY.name)
FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
          "permission")


def binding_params(acl: AclBinding) -> str:
    """The binding as a query string (the delete link of a row)."""
    return urlencode({"resource_type": acl.resource_type.name,
                      "resource_name": acl.resource_name,
                      "pattern_type": acl.pattern_type.name, "principal": acl.principal,
                      "host": acl.host, "operation": acl.operation.name,
                      "permission": acl.permission.name})


def parse_binding(params: Any) -> AclBinding:
    """A binding from form fields; Kafka's own checks (`new_binding_error`) give the 400."""
    resource_type = ResourceType[choice_param(params, "resource_type", RESOURCE_TYPES,
                                              ResourceType.TOPIC.name)]
    name = params.get("resource_name", "").strip()
    if resource_type == ResourceType.CLUSTER and not name:
        name = CLUSTER_NAME
    acl = AclBinding(
        resource_type, name,
        PatternType[choice_param(params, "pattern_type", PATTERN_TYPES, "LITERAL")],
        str_param(params, "principal"),
        params.get("host", "").strip() or WILDCARD_HOST,
        AclOperation[choice_param(params, "operation", OPERATIONS, "")],
        PermissionType[choice_param(params, "permission", PERMISSIONS, "ALLOW")])
    error = new_binding_error(acl)
    if error is not None:
        raise BadParameter(error)
    return acl


def _exact_filter(acl: AclBinding) -> AclBindingFilter:
    """The filter that matches this one binding and no other."""
    return AclBindingFilter(acl.resource_type, acl.resource_name, acl.pattern_type,
                            acl.principal, acl.host, acl.operation, acl.permission)


def explains_security_disabled(handler: Any) -> Any:
    """SECURITY_DISABLED (a broker without an authorizer) as a page that says so."""
    @functools.wraps(handler)
    async def page(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except KafkaError as exc:
            if exc.code != ErrorCode.SECURITY_DISABLED:
                raise
            return error_page(request, 409, f"{exc.code.name}: {exc.message or ''} (the broker "
                                            "has no authorizer: set authorizer.class.name to "
                                            "use ACLs)")
    return page


@explains_security_disabled
async def acls(request: web.Request) -> web.Response:
    query = request.query
    principal = query.get("principal", "").strip()
    resource_type = choice_param(query, "resource_type", ("ANY", *RESOURCE_TYPES), "ANY")
    resource_name = query.get("resource_name", "").strip()
    acl_filter = AclBindingFilter(ResourceType[resource_type], resource_name or None,
                                  PatternType.ANY, principal or None, None, AclOperation.ANY,
                                  PermissionType.ANY)
    bindings = await request.app[SERVICE].admin.describe_acls(acl_filter,
                                                              timeout_ms=PAGE_TIMEOUT_MS)
    bindings.sort(key=lambda b: (b.resource_type, b.resource_name, b.pattern_type,
                                 b.principal, b.host, b.operation, b.permission))
    return render(request, "acls.html", bindings=bindings, principal=principal,
                  resource_type=resource_type, resource_name=resource_name,
                  resource_types=RESOURCE_TYPES, params=binding_params,
                  created=query.get("created") == "1", deleted=query.get("deleted"))


@prepares_write
async def new_acl_form(request: web.Request) -> web.Response:
    return render(request, "acl_new.html", resource_types=RESOURCE_TYPES,
                  pattern_types=PATTERN_TYPES, operations=OPERATIONS, permissions=PERMISSIONS,
                  form={"principal": request.query.get("principal", ""), "host": "*",
                        "resource_name": ""})


@explains_security_disabled
async def new_acl_submit(request: web.Request) -> web.Response:
    form = await request.post()
    acl = parse_binding(form)
    review = review_unless_confirmed(request, form, "acl_confirm.html", acl=acl,
                                     action="create")
    if review is not None:
        return review
    await request.app[SERVICE].admin.create_acls([acl], timeout_ms=PAGE_TIMEOUT_MS)
    raise web.HTTPSeeOther("/acls?" + urlencode({"principal": acl.principal, "created": "1"}))


@prepares_write
async def delete_acl_form(request: web.Request) -> web.Response:
    return render(request, "acl_confirm.html", acl=parse_binding(request.query),
                  action="delete")


@explains_security_disabled
async def delete_acl_submit(request: web.Request) -> web.Response:
    form = await request.post()
    acl = parse_binding(form)
    require_confirmed(form, "confirm the deletion")
    [(_filter, deleted)] = await request.app[SERVICE].admin.delete_acls(
        [_exact_filter(acl)], timeout_ms=PAGE_TIMEOUT_MS)
    assert not isinstance(deleted, KafkaError)  # raised above
    raise web.HTTPSeeOther("/acls?" + urlencode({"deleted": str(len(deleted))}))


def setup(app: web.Application) -> None:
    app.add_routes([
        web.get("/acls", acls),
        web.get("/acls/new", new_acl_form),
        web.post("/acls/new", new_acl_submit),
        web.get("/acls/delete", delete_acl_form),
        web.post("/acls/delete", delete_acl_submit),
    ])
