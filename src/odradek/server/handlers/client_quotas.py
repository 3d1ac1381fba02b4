"""DescribeClientQuotas (API 48) and AlterClientQuotas (API 49).

Describe answers from the broker's metadata image (Kafka's ClientQuotasImage.describe): each
filter component names an entity type and matches it exactly (a name), as the default entity
(MATCH_TYPE_DEFAULT) or as any name (MATCH_TYPE_SPECIFIED); `strict` keeps only entities made
of exactly the filtered types. Alter is carried out by the active controller (forwarded there
like the other admin writes) as ClientQuotaRecords.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from odradek.controller.client_quota_control import CLIENT_ID, IP, USER, Entity
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.controller.quorum_controller import QuorumController
    from odradek.metadata.cache import MetadataCache
    from odradek.server.network import RequestContext

MATCH_TYPE_EXACT = 0
MATCH_TYPE_DEFAULT = 1
MATCH_TYPE_SPECIFIED = 2


def describe_client_quotas(quotas: Mapping[Entity, Mapping[str, float]], components,
                           strict: bool) -> list[tuple[Entity, Mapping[str, float]]]:
    """The entities a DescribeClientQuotas filter matches, with their quotas; raises
    KafkaError (INVALID_REQUEST, UNSUPPORTED_VERSION) for a filter Kafka refuses."""
    exact: dict[str, str | None] = {}
    any_name: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in any_name:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (USER, CLIENT_ID, IP):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if component.match_type == MATCH_TYPE_EXACT:
            if component.match is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Request specified "
                                 "MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = component.match
        elif component.match_type == MATCH_TYPE_DEFAULT:
            if component.match is not None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Request specified "
                                 "MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif component.match_type == MATCH_TYPE_SPECIFIED:
            if component.match is not None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Request specified "
                                 "MATCH_TYPE_SPECIFIED, but also specified a match string.")
            any_name.add(kind)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unknown match type {component.match_type}")
    filtered = set(exact) | any_name
    if IP in filtered and (USER in filtered or CLIENT_ID in filtered):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component "
                         "combination. IP filter component should not be used with user or "
                         "clientId filter component.")
    if not filtered:
        # No component: every entity, unless strict (an entity of no type matches nothing).
        return [] if strict else list(quotas.items())
    out = []
    for entity, values in quotas.items():
        names = dict(entity)
        if any(kind not in names or names[kind] != name for kind, name in exact.items()):
            continue
        if any(kind not in names for kind in any_name):
            continue
        if strict and len(names) != len(filtered):
            continue
        out.append((entity, values))
    return out


class ClientQuotaApis:
    def __init__(self, cache: MetadataCache, controller: QuorumController) -> None:
        self.cache = cache
        self.controller = controller

    def describe_client_quotas(self, ctx: RequestContext, req: m.DescribeClientQuotasRequest):
        R = m.DescribeClientQuotasResponse
        try:
            matches = describe_client_quotas(self.cache.image.client_quotas, req.components,
                                             req.strict)
        except KafkaError as exc:
            return R(throttle_time_ms=0, error_code=exc.code, error_message=exc.message,
                     entries=None)
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=[
            R.EntryData(
                entity=[R.EntityData(entity_type=kind, entity_name=name)
                        for kind, name in entity],
                values=[R.ValueData(key=key, value=value)
                        for key, value in sorted(values.items())])
            for entity, values in sorted(matches, key=lambda item: repr(item[0]))])

    async def alter_client_quotas(self, ctx: RequestContext, req: m.AlterClientQuotasRequest):
        R = m.AlterClientQuotasResponse
        results = await self.controller.alter_client_quotas(req.entries, req.validate_only)
        return R(throttle_time_ms=0, entries=[
            R.EntryData(error_code=result.error, error_message=result.message,
                        entity=[R.EntityData(entity_type=e.entity_type,
                                             entity_name=e.entity_name)
                                for e in entry.entity])
            for entry, result in results])
