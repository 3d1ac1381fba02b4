"""Client quotas in the admin client (Kafka's Admin describeClientQuotas and
alterClientQuotas), mixed into `AdminClient`.

An entity is a mapping of entity type (`user`, `client-id`, `ip`) to a name, None naming the
type's default entity (`<default>` in kafka-configs). A filter matches each type exactly, as
its default, or by any name (Kafka's ClientQuotaFilterComponent ofEntity / ofDefaultEntity /
ofEntityType); `strict` keeps only entities of exactly the filtered types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.client.errors import error_from_code
from odradek.protocol import messages as m
from odradek.protocol.errors import KafkaError

if TYPE_CHECKING:
    from odradek.client.cluster import Cluster
    from odradek.client.retry import Deadline

__all__ = ["ClientQuotaAdmin", "ClientQuotaAlteration", "ClientQuotaEntity",
           "ClientQuotaFilter", "ClientQuotaFilterComponent"]

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


@dataclass(frozen=True)
class ClientQuotaEntity:
    """(entity type, name or None for the default) pairs, sorted by type."""

    entries: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, entries: Mapping[str, str | None]) -> ClientQuotaEntity:
        return cls(tuple(sorted(entries.items(), key=lambda item: item[0])))

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """Sets each key to its value; a None value removes the key."""

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, MATCH_EXACT, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, MATCH_DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, MATCH_ANY)


@dataclass(frozen=True)
class ClientQuotaFilter:
    components: tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    @classmethod
    def contains(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Iterable[ClientQuotaFilterComponent]
                      ) -> ClientQuotaFilter:
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> ClientQuotaFilter:
        return cls((), False)


class ClientQuotaAdmin:
    cluster: Cluster

    async def describe_client_quotas(
            self, quota_filter: ClientQuotaFilter | None = None, *,
            timeout_ms: float | None = None) -> dict[ClientQuotaEntity, dict[str, float]]:
        """DescribeClientQuotas: each matching entity with its quotas; raises the broker's
        error for a filter it refuses."""
        quota_filter = quota_filter or ClientQuotaFilter.all()
        Request = m.DescribeClientQuotasRequest
        request = Request(components=[
            Request.ComponentData(entity_type=c.entity_type, match_type=c.match_type,
                                  match=c.match) for c in quota_filter.components],
            strict=quota_filter.strict)

        async def attempt(deadline: Deadline) -> dict[ClientQuotaEntity, dict[str, float]]:
            response = await self.cluster.send_to_any(request, deadline, raise_error=True)
            return {ClientQuotaEntity.of({e.entity_type: e.entity_name for e in entry.entity}):
                    {value.key: value.value for value in entry.values}
                    for entry in response.entries or ()}

        return await self.cluster.call("describeClientQuotas", attempt, timeout_ms=timeout_ms)

    async def alter_client_quotas(
            self, alterations: Iterable[ClientQuotaAlteration], *, validate_only: bool = False,
            timeout_ms: float | None = None, raise_errors: bool = True,
    ) -> dict[ClientQuotaEntity, KafkaError | None]:
        """AlterClientQuotas: entity -> None (done) or its error (raised when
        `raise_errors`)."""
        Request = m.AlterClientQuotasRequest
        request = Request(validate_only=validate_only, entries=[
            Request.EntryData(
                entity=[Request.EntityData(entity_type=kind, entity_name=name)
                        for kind, name in alteration.entity.entries],
                ops=[Request.OpData(key=key, value=0.0 if value is None else float(value),
                                    remove=value is None)
                     for key, value in alteration.ops.items()])
            for alteration in alterations])

        async def attempt(deadline: Deadline) -> dict[ClientQuotaEntity, KafkaError | None]:
            response = await self.cluster.send_to_any(request, deadline)
            return {ClientQuotaEntity.of({e.entity_type: e.entity_name for e in entry.entity}):
                    error_from_code(entry.error_code, entry.error_message)
                    for entry in response.entries}

        results = await self.cluster.call("alterClientQuotas", attempt, timeout_ms=timeout_ms)
        if raise_errors:
            for error in results.values():
                if error is not None:
                    raise error
        return results
