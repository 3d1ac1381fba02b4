"""Kafka's StandardAuthorizer over the metadata image's ACL bindings (no network).

`authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer` turns it on;
`super.users` (semicolon-separated principals) are allowed everything;
`allow.everyone.if.no.acl.found` decides for a resource no ACL names at all.

A decision: super user -> allowed; otherwise the ACLs that apply to the resource (literal on
its name, literal `*`, prefixed on a prefix of its name) are read; a DENY that matches the
principal (or `User:*`), host (or `*`) and operation (or ALL) denies; else a matching ALLOW
allows (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS); else,
with no ACL on the resource at all, `allow.everyone.if.no.acl.found`, and denied otherwise.

Lookups are per request and per topic on the produce/fetch path: the bindings are indexed by
(resource type, name) once per image (the index is rebuilt only when the image's ACLs change),
and decisions are memoised per index.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from odradek.config.broker import AUTHORIZER_CLASSES, STANDARD_AUTHORIZER
from odradek.security.acl import (
    CLUSTER_NAME,
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    operations_bitfield,
)

log = logging.getLogger("odradek.authorizer")

_MAX_MEMOISED = 65536


def parse_super_users(value: str | None) -> frozenset[str]:
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class AclIndex:
    """The bindings of one image, by (resource type, name) for literal patterns and by
    (resource type, prefix) for prefixed ones."""

    def __init__(self, acls: Iterable[AclBinding]) -> None:
        self.literal: dict[tuple[int, str], list[AclBinding]] = {}
        self.prefixed: dict[tuple[int, str], list[AclBinding]] = {}
        self.prefix_lengths: dict[int, list[int]] = {}
        self.by_type: dict[int, list[AclBinding]] = {}
        for acl in acls:
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == PatternType.PREFIXED:
                self.prefixed.setdefault(key, []).append(acl)
                lengths = self.prefix_lengths.setdefault(acl.resource_type, [])
                if len(acl.resource_name) not in lengths:
                    lengths.append(len(acl.resource_name))
            else:
                self.literal.setdefault(key, []).append(acl)
            self.by_type.setdefault(acl.resource_type, []).append(acl)
        self.decisions: dict[tuple, bool] = {}

    def applicable(self, resource_type: int, name: str) -> list[AclBinding]:
        """Every ACL whose pattern covers the resource."""
        found: list[AclBinding] = []
        literal = self.literal
        found.extend(literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            found.extend(literal.get((resource_type, WILDCARD_RESOURCE), ()))
        for length in self.prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                found.extend(self.prefixed.get((resource_type, name[:length]), ()))
        return found


def _operation_matches(acl: AclBinding, operation: AclOperation) -> bool:
    if acl.operation == AclOperation.ALL or acl.operation == operation:
        return True
    if acl.permission != PermissionType.ALLOW:
        return False  # implications widen ALLOWs only
    if operation == AclOperation.DESCRIBE:
        return acl.operation in IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return acl.operation in IMPLIES_DESCRIBE_CONFIGS
    return False


def _entry_matches(acl: AclBinding, principal: str, host: str) -> bool:
    return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD_HOST)


class StandardAuthorizer:
    """Decisions over the ACLs of the current metadata image (`acls()` returns them as a
    mapping id -> AclBinding; a new mapping object means they changed)."""

    def __init__(self, acls: Callable[[], Mapping[Any, AclBinding]], *,
                 super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._acls = acls
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._indexed: Mapping[Any, AclBinding] | None = None
        self._index = AclIndex(())

    @classmethod
    def from_config(cls, config: Any, acls: Callable[[], Mapping[Any, AclBinding]],
                    ) -> StandardAuthorizer | None:
        """The authorizer `authorizer.class.name` names, or None when it is empty."""
        name = (config.get("authorizer.class.name") or "").strip()
        if not name:
            return None
        if name not in AUTHORIZER_CLASSES:
            raise ValueError(f"authorizer.class.name {name!r} is not supported; "
                             f"use {STANDARD_AUTHORIZER}")
        return cls(acls, super_users=parse_super_users(config.get("super.users")),
                   allow_everyone_if_no_acl_found=bool(
                       config.get("allow.everyone.if.no.acl.found")))

    def index(self) -> AclIndex:
        acls = self._acls()
        if acls is not self._indexed:
            self._index = AclIndex(acls.values())
            self._indexed = acls
        return self._index

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        index = self.index()
        key = (principal, host, operation, resource_type, name)
        decision = index.decisions.get(key)
        if decision is None:
            decision = self._decide(index, principal, host, operation, resource_type, name)
            if len(index.decisions) >= _MAX_MEMOISED:
                index.decisions.clear()
            index.decisions[key] = decision
        return decision

    def _decide(self, index: AclIndex, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        applicable = index.applicable(resource_type, name)
        if not applicable:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for acl in applicable:
            if not _entry_matches(acl, principal, host) or not _operation_matches(acl, operation):
                continue
            if acl.permission == PermissionType.DENY:
                return False
            allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:
        return operations_bitfield(
            op for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, op, resource_type, name))

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on some resource of the type (Kafka's
        Authorizer.authorizeByResourceType, used for idempotent producers' WRITE on any
        topic): an ALLOW, literal or prefixed, not wholly covered by a DENY."""
        # A name no ACL is likely to name: super users and allow.everyone.if.no.acl.found
        # (with no wildcard/prefix ACL over it) pass as in Kafka.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        index = self.index()
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        allowed: list[AclBinding] = []
        for acl in index.by_type.get(resource_type, ()):
            if not _entry_matches(acl, principal, host) or \
                    acl.operation not in (operation, AclOperation.ALL):
                continue
            if acl.permission == PermissionType.DENY:
                if acl.pattern_type == PatternType.PREFIXED:
                    denied_prefixes.append(acl.resource_name)
                elif acl.resource_name == WILDCARD_RESOURCE:
                    return False
                else:
                    denied_literal.add(acl.resource_name)
            else:
                allowed.append(acl)
        for acl in allowed:
            if any(acl.resource_name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and acl.resource_name in denied_literal:
                continue
            return True
        return False

    def authorize_cluster(self, principal: str, host: str, operation: AclOperation) -> bool:
        return self.authorize(principal, host, operation, ResourceType.CLUSTER, CLUSTER_NAME)
