"""ACL vocabulary as Kafka's wire and metadata records carry it: resource types, pattern
types, operations and permission types (their int8 codes), an ACL binding, and a binding filter
(DescribeAcls / DeleteAcls).

Kafka's names and codes (org.apache.kafka.common.resource / acl); the authorizer that reads
bindings is `odradek.security.authorizer`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_Op = AclOperation
#: the operations each resource type supports (Kafka's AclEntry.supportedOperations): what an
#: "authorized operations" bitfield is made of
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
                         _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE),
    ResourceType.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS,
                           _Op.ALTER_CONFIGS, _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (_Op.DESCRIBE,),
    ResourceType.USER: (_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS),
}

#: an ALLOW of any of these also allows DESCRIBE (resp. DESCRIBE_CONFIGS), as in Kafka
IMPLIES_DESCRIBE = frozenset({_Op.READ, _Op.WRITE, _Op.DELETE, _Op.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_Op.ALTER_CONFIGS})


def operations_bitfield(operations) -> int:
    """Kafka's authorized-operations int32: bit `code` set for each operation."""
    bits = 0
    for operation in operations:
        bits |= 1 << int(operation)
    return bits


def all_operations_bitfield(resource_type: ResourceType) -> int:
    """What is reported when there is no authorizer: every supported operation."""
    return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])


def parse_principal(principal: str | None) -> tuple[str, str] | None:
    """(type, name) of `Type:name`, or None when it is not of that form (Kafka's
    SecurityUtils.parseKafkaPrincipal refuses it)."""
    if not principal:
        return None
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        return None
    return kind, name


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def describe(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission.name})")


def _enum_or_unknown(enum_type, code: int):
    try:
        return enum_type(code)
    except ValueError:
        return enum_type.UNKNOWN


def binding(resource_type: int, resource_name: str, pattern_type: int, principal: str,
            host: str, operation: int, permission: int) -> AclBinding:
    """A binding from wire/record codes (codes not known become UNKNOWN)."""
    return AclBinding(_enum_or_unknown(ResourceType, resource_type), resource_name,
                      _enum_or_unknown(PatternType, pattern_type), principal, host,
                      _enum_or_unknown(AclOperation, operation),
                      _enum_or_unknown(PermissionType, permission))


def new_binding_error(acl: AclBinding) -> str | None:
    """Why an ACL may not be created, or None: the broker's checks (Kafka's AclApis: the
    CLUSTER resource's name, an empty name) then the controller's (AclControlManager
    .validateNewAcl), in their order; each failure is INVALID_REQUEST."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid permissionType {acl.permission.name}"
    if parse_principal(acl.principal) is None:
        return f"Could not parse principal from `{acl.principal}` (no colon is present " \
               "separating the principal type from the principal name)"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter: None (null) and ANY match anything; pattern MATCH
    matches the literal, wildcard and prefixed patterns that apply to a named resource."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    @classmethod
    def from_wire(cls, f) -> AclBindingFilter:
        return cls(_enum_or_unknown(ResourceType, f.resource_type_filter), f.resource_name_filter,
                   _enum_or_unknown(PatternType, f.pattern_type_filter), f.principal_filter,
                   f.host_filter, _enum_or_unknown(AclOperation, f.operation),
                   _enum_or_unknown(PermissionType, f.permission_type))

    def error(self) -> str | None:
        """Why the filter is invalid (an UNKNOWN element), or None: Kafka's
        AclControlManager.validateFilter messages, the resource pattern's part first."""
        if ResourceType.UNKNOWN == self.resource_type or PatternType.UNKNOWN == self.pattern_type:
            return "Unknown patternFilter."
        if AclOperation.UNKNOWN == self.operation or PermissionType.UNKNOWN == self.permission:
            return "Unknown entryFilter."
        return None

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        name, pattern = self.resource_name, self.pattern_type
        if pattern == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD_RESOURCE)
            return acl.pattern_type == PatternType.PREFIXED and \
                name.startswith(acl.resource_name)
        if pattern not in (PatternType.ANY, acl.pattern_type):
            return False
        return name is None or name == acl.resource_name

    def matches(self, acl: AclBinding) -> bool:
        return (self._matches_pattern(acl)
                and self.principal in (None, acl.principal)
                and self.host in (None, acl.host)
                and self.operation in (AclOperation.ANY, acl.operation)
                and self.permission in (PermissionType.ANY, acl.permission))


MATCH_ALL = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, None, None,
                             AclOperation.ANY, PermissionType.ANY)
