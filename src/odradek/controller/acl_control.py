"""CreateAcls and DeleteAcls on the controller (Kafka's AclControlManager): per creation or
filter, an error or the AccessControlEntryRecord / RemoveAccessControlEntryRecord records.

An ACL that exists already (same pattern and entry) is created successfully without a record,
as in Kafka; a binding named twice in one request is written once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from odradek.controller.controller import OpResult
from odradek.metadata.image import MetadataImage, acl_record
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclBinding, AclBindingFilter, new_binding_error


def create_acls(image: MetadataImage, bindings: Sequence[AclBinding],
                new_id: Callable[[], uuid.UUID] = uuid.uuid4,
                ) -> tuple[list[OpResult], list[Any]]:
    existing = set(image.acls.values())
    results: list[OpResult] = []
    records: list[Any] = []
    for acl in bindings:
        error = new_binding_error(acl)
        if error is not None:
            results.append(OpResult.fail(ErrorCode.INVALID_REQUEST, error))
            continue
        if acl not in existing:
            existing.add(acl)
            records.append(acl_record(new_id(), acl))
        results.append(OpResult())
    return results, records


def delete_acls(image: MetadataImage, filters: Sequence[AclBindingFilter],
                ) -> tuple[list[tuple[OpResult, list[AclBinding]]], list[Any]]:
    """Per filter: its result and the ACLs it deletes (an ACL that several filters match is
    removed once, and listed under the first)."""
    results: list[tuple[OpResult, list[AclBinding]]] = []
    records: list[Any] = []
    removed: set[uuid.UUID] = set()
    for acl_filter in filters:
        error = acl_filter.error()
        if error is not None:
            results.append((OpResult.fail(ErrorCode.INVALID_REQUEST, error), []))
            continue
        matched = []
        for acl_id, acl in image.acls.items():
            if acl_id not in removed and acl_filter.matches(acl):
                removed.add(acl_id)
                matched.append(acl)
                records.append(m.RemoveAccessControlEntryRecord(id=acl_id))
        results.append((OpResult(), matched))
    return results, records
