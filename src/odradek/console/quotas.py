"""The client quotas page: every quota (DescribeClientQuotas), set one after a review step and
remove one after confirmation (AlterClientQuotas), as `odradek configs --entity-type
users/clients --alter` does.

An entity is a user and/or a client id, each named or the default one; in parameters a name
is `user` / `client_id` and the default is `user_default=1` / `client_id_default=1`.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from odradek.cli.configs import CLIENT_QUOTA_KEYS
from odradek.client.admin_quotas import ClientQuotaAlteration, ClientQuotaEntity
from odradek.console.app import (
    SERVICE,
    BadParameter,
    choice_param,
    prepares_write,
    render,
    require_confirmed,
    review_unless_confirmed,
)
from odradek.console.service import PAGE_TIMEOUT_MS

#: (entity type, the parameter naming it) in the order the page shows them.
ENTITY_TYPES = (("user", "user"), ("client-id", "client_id"))


def parse_entity(params: Any) -> ClientQuotaEntity:
    entries: dict[str, str | None] = {}
    for entity_type, param in ENTITY_TYPES:
        if params.get(f"{param}_default") == "1":
            entries[entity_type] = None
        elif name := params.get(param, "").strip():
            entries[entity_type] = name
    if not entries:
        raise BadParameter("name a user or a client id (or check its default)")
    return ClientQuotaEntity.of(entries)


def entity_params(entity: ClientQuotaEntity) -> dict[str, str]:
    names = entity.as_dict()
    params = {}
    for entity_type, param in ENTITY_TYPES:
        if entity_type in names:
            name = names[entity_type]
            params.update({f"{param}_default": "1"} if name is None else {param: name})
    return params


def describe_entity(entity: ClientQuotaEntity) -> str:
    """E.g. `user 'alice', the default client-id`."""
    names = entity.as_dict()
    return ", ".join("the default " + kind if names[kind] is None else f"{kind} '{names[kind]}'"
                     for kind, _param in ENTITY_TYPES if kind in names)


def parse_value(params: Any) -> float:
    raw = params.get("value", "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise BadParameter(f"value must be a number, not {raw!r}") from None
    if not math.isfinite(value):
        raise BadParameter("value must be a finite number")
    return value


async def quotas(request: web.Request) -> web.Response:
    described = await request.app[SERVICE].admin.describe_client_quotas(
        timeout_ms=PAGE_TIMEOUT_MS)
    rows = sorted(((describe_entity(entity), key, value,
                    urlencode({**entity_params(entity), "key": key}))
                   for entity, values in described.items() for key, value in values.items()),
                  key=lambda row: (row[0], row[1]))
    return render(request, "quotas.html", rows=rows, keys=CLIENT_QUOTA_KEYS,
                  changed=request.query.get("changed") == "1")


async def set_quota(request: web.Request) -> web.Response:
    form = await request.post()
    entity = parse_entity(form)
    key = choice_param(form, "key", CLIENT_QUOTA_KEYS, "")
    value = parse_value(form)
    review = review_unless_confirmed(request, form, "quota_confirm.html", action="set",
                                     entity=describe_entity(entity),
                                     params=entity_params(entity), key=key, value=value)
    if review is not None:
        return review
    await request.app[SERVICE].admin.alter_client_quotas(
        [ClientQuotaAlteration(entity, {key: value})], timeout_ms=PAGE_TIMEOUT_MS)
    raise web.HTTPSeeOther("/quotas?changed=1")


@prepares_write
async def remove_quota_form(request: web.Request) -> web.Response:
    entity = parse_entity(request.query)
    key = choice_param(request.query, "key", CLIENT_QUOTA_KEYS, "")
    return render(request, "quota_confirm.html", action="remove",
                  entity=describe_entity(entity), params=entity_params(entity), key=key,
                  value=None)


async def remove_quota(request: web.Request) -> web.Response:
    form = await request.post()
    entity = parse_entity(form)
    key = choice_param(form, "key", CLIENT_QUOTA_KEYS, "")
    require_confirmed(form, "confirm the removal")
    await request.app[SERVICE].admin.alter_client_quotas(
        [ClientQuotaAlteration(entity, {key: None})], timeout_ms=PAGE_TIMEOUT_MS)
    raise web.HTTPSeeOther("/quotas?changed=1")


def setup(app: web.Application) -> None:
    app.add_routes([
        web.get("/quotas", quotas),
        web.post("/quotas/set", set_quota),
        web.get("/quotas/remove", remove_quota_form),
        web.post("/quotas/remove", remove_quota),
    ])
