"""StandardAuthorizer decisions over ACL bindings (no broker): literal, wildcard and prefixed
patterns, DENY over ALLOW, hosts, implied operations, super users, the no-ACL rule, authorized
operations bitfields, Kafka's authorizeByResourceType; the ACL records through the image and
its snapshot records; the controller's CreateAcls/DeleteAcls validation."""

from __future__ import annotations

import uuid

import pytest

from odradek.controller import acl_control
from odradek.metadata.image import EMPTY_IMAGE, image_records, replay_records
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    all_operations_bitfield,
)
from odradek.security.authorizer import StandardAuthorizer, parse_super_users

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, \
    ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation


def acl(resource_type, name, operation, permission=ALLOW, principal="User:alice", host="*",
        pattern=LIT) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*acls: AclBinding, super_users=(), allow_everyone=False) -> StandardAuthorizer:
    bindings = {uuid.uuid4(): a for a in acls}
    return StandardAuthorizer(lambda: bindings, super_users=super_users,
                              allow_everyone_if_no_acl_found=allow_everyone)


def allowed(auth, operation, resource_type, name, principal="User:alice", host="10.0.0.1"):
    return auth.authorize(principal, host, operation, resource_type, name)


def test_literal_wildcard_and_prefixed_patterns():
    auth = authorizer(acl(T, "orders", Op.READ), acl(T, "*", Op.WRITE, principal="User:bob"),
                      acl(T, "logs-", Op.READ, pattern=PRE))
    assert allowed(auth, Op.READ, T, "orders")
    assert not allowed(auth, Op.READ, T, "orders2")
    assert allowed(auth, Op.READ, T, "logs-app")
    assert not allowed(auth, Op.READ, T, "logs")
    assert allowed(auth, Op.WRITE, T, "anything", principal="User:bob")
    assert not allowed(auth, Op.WRITE, T, "orders")
    assert not allowed(auth, Op.READ, G, "orders")  # another resource type


def test_deny_wins_and_hosts():
    auth = authorizer(acl(T, "*", Op.ALL), acl(T, "secret", Op.READ, DENY),
                      acl(T, "pay-", Op.ALL, DENY, host="10.0.0.9", pattern=PRE),
                      acl(T, "shared", Op.READ, DENY, principal="User:*"))
    assert allowed(auth, Op.WRITE, T, "secret")
    assert not allowed(auth, Op.READ, T, "secret")
    assert allowed(auth, Op.READ, T, "pay-eu")
    assert not allowed(auth, Op.READ, T, "pay-eu", host="10.0.0.9")
    assert not allowed(auth, Op.READ, T, "shared")


def test_implied_operations():
    auth = authorizer(acl(T, "a", Op.WRITE), acl(T, "b", Op.ALTER_CONFIGS),
                      acl(T, "c", Op.READ), acl(T, "c", Op.DESCRIBE, DENY))
    assert allowed(auth, Op.DESCRIBE, T, "a")
    assert not allowed(auth, Op.READ, T, "a")
    assert allowed(auth, Op.DESCRIBE_CONFIGS, T, "b")
    assert not allowed(auth, Op.DESCRIBE, T, "b")
    # a DENY of DESCRIBE is not widened and not overridden by an implying ALLOW
    assert not allowed(auth, Op.DESCRIBE, T, "c")
    assert allowed(auth, Op.READ, T, "c")
    # a DENY of READ does not deny DESCRIBE
    deny_read = authorizer(acl(T, "d", Op.ALL), acl(T, "d", Op.READ, DENY))
    assert allowed(deny_read, Op.DESCRIBE, T, "d")


@pytest.mark.parametrize("allow_everyone", [False, True])
def test_no_acl_found_and_super_users(allow_everyone):
    auth = authorizer(acl(T, "guarded", Op.READ, principal="User:bob"),
                      super_users=parse_super_users("User:admin; User:broker"),
                      allow_everyone=allow_everyone)
    assert allowed(auth, Op.READ, T, "open") is allow_everyone
    assert not allowed(auth, Op.READ, T, "guarded")  # ACLs exist: the rule does not apply
    assert allowed(auth, Op.DELETE, T, "guarded", principal="User:admin")
    assert allowed(auth, Op.CLUSTER_ACTION, C, CLUSTER_NAME, principal="User:broker")


def test_decisions_follow_the_image():
    bindings: dict = {}
    auth = StandardAuthorizer(lambda: bindings)
    assert not allowed(auth, Op.READ, T, "t")
    bindings = {uuid.uuid4(): acl(T, "t", Op.READ)}  # a new image: a new mapping
    assert allowed(auth, Op.READ, T, "t")


def test_authorized_operations_bitfield():
    auth = authorizer(acl(T, "t", Op.READ), acl(G, "g", Op.ALL))
    bits = auth.authorized_operations("User:alice", "h", T, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert auth.authorized_operations("User:alice", "h", G, "g") == all_operations_bitfield(G)
    assert all_operations_bitfield(G) == (1 << 3) | (1 << 6) | (1 << 8)


def test_authorize_by_resource_type():
    assert authorizer(acl(T, "x", Op.WRITE)).authorize_any("User:alice", "h", Op.WRITE, T)
    assert authorizer(acl(T, "x-", Op.WRITE, pattern=PRE)).authorize_any(
        "User:alice", "h", Op.WRITE, T)
    assert not authorizer(acl(T, "x", Op.READ)).authorize_any("User:alice", "h", Op.WRITE, T)
    assert not authorizer(acl(T, "x", Op.WRITE), acl(T, "*", Op.WRITE, DENY)).authorize_any(
        "User:alice", "h", Op.WRITE, T)
    assert not authorizer(acl(T, "x-1", Op.WRITE), acl(T, "x-", Op.WRITE, DENY, pattern=PRE)
                          ).authorize_any("User:alice", "h", Op.WRITE, T)
    assert authorizer(allow_everyone=True).authorize_any("User:alice", "h", Op.WRITE, T)


def test_records_image_and_snapshot():
    results, records = acl_control.create_acls(EMPTY_IMAGE, [
        acl(T, "t", Op.READ), acl(T, "t", Op.READ),  # named twice: one record
        acl(C, "other", Op.ALTER),  # CLUSTER must be kafka-cluster
        acl(T, "", Op.READ),
        AclBinding(T, "t", PatternType.MATCH, "User:a", "*", Op.READ, ALLOW),
        AclBinding(T, "t", LIT, "alice", "*", Op.READ, ALLOW),  # no principal type
        AclBinding(T, "t", LIT, "User:a", "*", Op.ANY, ALLOW),
    ])
    assert [r.error for r in results] == [ErrorCode.NONE, ErrorCode.NONE] + \
        [ErrorCode.INVALID_REQUEST] * 5
    assert len(records) == 1
    image = replay_records(records)
    assert list(image.acls.values()) == [acl(T, "t", Op.READ)]
    # an existing ACL: success without a record
    again, more = acl_control.create_acls(image, [acl(T, "t", Op.READ)])
    assert again[0].error == ErrorCode.NONE and more == []
    assert replay_records(image_records(image)).acls == image.acls
    # delete by filter
    image = replay_records(acl_control.create_acls(
        image, [acl(T, "u-", Op.WRITE, pattern=PRE), acl(G, "g", Op.READ)])[1], base=image)
    match_u1 = AclBindingFilter(T, "u-1", PatternType.MATCH, None, None, Op.ANY,
                                PermissionType.ANY)
    deleted, removals = acl_control.delete_acls(image, [match_u1])
    assert [a.resource_name for a in deleted[0][1]] == ["u-"]
    image = replay_records(removals, base=image)
    assert sorted(a.resource_name for a in image.acls.values()) == ["g", "t"]
    bad = AclBindingFilter(T, None, PatternType.UNKNOWN, None, None, Op.ANY, PermissionType.ANY)
    assert acl_control.delete_acls(image, [bad])[0][0][0].error == ErrorCode.INVALID_REQUEST
