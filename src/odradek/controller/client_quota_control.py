"""AlterClientQuotas on the controller (Kafka's ClientQuotaControlManager): per entity, an
error or the ClientQuotaRecords that set and remove its quota keys.

An entity is a set of (entity type, name) pairs: `user`, `client-id` (alone or together) or
`ip` (alone); a None name is the `<default>` entity of that type. User and client-id entities
take the byte-rate, request and controller-mutation quotas; ip entities take only
`connection_creation_rate`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Any

from odradek.controller.controller import OpResult
from odradek.metadata.image import MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# key -> Kafka's QuotaConfigs type: whole numbers ("long") or any double
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long",
                    REQUEST_PERCENTAGE: "double", CONTROLLER_MUTATION_RATE: "double"}
IP_KEYS = {CONNECTION_CREATION_RATE: "int"}

# An entity as the image keys it: its (type, name) pairs, sorted.
Entity = tuple[tuple[str, str | None], ...]


def entity_key(pairs: Sequence[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def entity_string(entity: Entity) -> str:
    """Kafka's ClientQuotaEntity toString, used in error messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(
        f"{kind}={name}" for kind, name in entity) + "})"


def _valid_ip_entity(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:  # Kafka takes a resolvable host name too (InetAddress.getByName)
        socket.getaddrinfo(name, None)
        return True
    except OSError:
        return False


def _validate_entity(pairs: Sequence[tuple[str, str | None]]) -> tuple[OpResult | None,
                                                                      dict[str, str] | None]:
    """(error, None) or (None, the config keys the entity takes)."""
    if not pairs:
        return OpResult.fail(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"), None
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            return OpResult.fail(ErrorCode.INVALID_REQUEST, "Invalid empty client quota "
                                 f"entity, duplicate entity entry {kind}"), None
        if kind not in ENTITY_TYPES:
            return OpResult.fail(ErrorCode.INVALID_REQUEST,
                                 f"Unhandled client quota entity type: {kind}"), None
        if name is not None and name == "":
            return OpResult.fail(ErrorCode.INVALID_REQUEST,
                                 f"Empty {kind} not supported"), None
        seen[kind] = name
    if IP in seen:
        if len(seen) > 1:
            return OpResult.fail(ErrorCode.INVALID_REQUEST,
                                 "Invalid empty client quota entity"), None
        if not _valid_ip_entity(seen[IP]):
            return OpResult.fail(ErrorCode.INVALID_REQUEST,
                                 f"{seen[IP]} is not a valid IP or resolvable host."), None
        return None, IP_KEYS
    return None, USER_CLIENT_KEYS


def _validate_value(keys: dict[str, str], key: str, value: float) -> OpResult | None:
    kind = keys.get(key)
    if kind is None:
        return OpResult.fail(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if kind in ("long", "int"):
        epsilon = 1e-6
        if abs(int(value + epsilon) - value) > epsilon:
            type_name = "Long" if kind == "long" else "Integer"
            return OpResult.fail(ErrorCode.INVALID_REQUEST,
                                 f"Configuration {key} must be a {type_name} value")
    return None


def alter_client_quotas(image: MetadataImage, entries: Sequence[Any]
                        ) -> tuple[list[tuple[Any, OpResult]], list[Any]]:
    """(each request entry with its result, in request order; the records of the entries that
    succeed). An entity named twice fails the second time; a key named twice in one entry
    fails the entry; an entry with any invalid key changes nothing."""
    results: list[tuple[Any, OpResult]] = []
    records: list[Any] = []
    seen: set[Entity] = set()
    for entry in entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        entity = entity_key(pairs)
        if entity in seen:
            results.append((entry, OpResult.fail(
                ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity_string(entity)}")))
            continue
        seen.add(entity)
        error, keys = _validate_entity(pairs)
        alterations: dict[str, float | None] = {}
        for op in entry.ops:
            if error is not None:
                break
            if op.key in alterations:
                error = OpResult.fail(ErrorCode.INVALID_REQUEST,
                                      f"Duplicate quota key {op.key} not updating quota for "
                                      f"this entity {entity_string(entity)}")
                break
            alterations[op.key] = None if op.remove else op.value
            if not op.remove:
                error = _validate_value(keys, op.key, op.value)  # type: ignore[arg-type]
        if error is not None:
            results.append((entry, error))
            continue
        current = image.client_quotas.get(entity, {})
        record_entity = [m.ClientQuotaRecord.EntityData(entity_type=kind, entity_name=name)
                         for kind, name in entity]
        for key, value in alterations.items():
            if value is None:
                if key in current:
                    records.append(m.ClientQuotaRecord(entity=list(record_entity), key=key,
                                                       value=0.0, remove=True))
            elif current.get(key) != value:  # only changed values are written, as Kafka
                records.append(m.ClientQuotaRecord(entity=list(record_entity), key=key,
                                                   value=value, remove=False))
        results.append((entry, OpResult()))
    return results, records
