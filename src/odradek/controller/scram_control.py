"""AlterUserScramCredentials on the controller (Kafka's ScramControlManager): per user, an
error or the records that delete and upsert the user's credentials.

The request carries salted passwords (the client salts and hashes); the controller keeps only
what SCRAM's server side needs (salt, stored key, server key, iterations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from odradek.controller.controller import OpResult
from odradek.metadata.image import MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    credential_from_salted_password,
)

DUPLICATE_MESSAGE = "A user credential cannot be altered twice in the same request"


def _check_name_and_mechanism(name: str, mechanism: int) -> OpResult | None:
    if not name:
        return OpResult.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in MECHANISM_NAMES:
        return OpResult.fail(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


def alter_user_scram_credentials(
        image: MetadataImage, deletions: Sequence[Any], upsertions: Sequence[Any],
) -> tuple[dict[str, OpResult], list[Any]]:
    """(user -> result; the records of the users that succeed). As Kafka, a user may be named
    once per request (a second alteration of the same user, whatever the mechanism, fails the
    user with DUPLICATE_RESOURCE); results list deletions, then upsertions, then failures."""
    to_delete: dict[str, Any] = {}
    to_upsert: dict[str, Any] = {}
    errors: dict[str, OpResult] = {}
    for deletion in deletions:
        name = deletion.name
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None:
            errors[name] = OpResult.fail(ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE)
            continue
        error = _check_name_and_mechanism(name, deletion.mechanism)
        if error is None and deletion.mechanism not in image.scram_credentials.get(name, {}):
            error = OpResult.fail(ErrorCode.RESOURCE_NOT_FOUND,
                                  "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[name] = error
        else:
            to_delete[name] = deletion
    for upsertion in upsertions:
        name = upsertion.name
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            errors[name] = OpResult.fail(ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE)
            continue
        error = _check_name_and_mechanism(name, upsertion.mechanism)
        if error is None and upsertion.iterations < MIN_ITERATIONS:
            error = OpResult.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif error is None and upsertion.iterations > MAX_ITERATIONS:
            error = OpResult.fail(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if error is not None:
            errors[name] = error
        else:
            to_upsert[name] = upsertion
    results: dict[str, OpResult] = {}
    records: list[Any] = []
    for name, deletion in to_delete.items():
        results[name] = OpResult()
        records.append(m.RemoveUserScramCredentialRecord(name=name,
                                                         mechanism=deletion.mechanism))
    for name, upsertion in to_upsert.items():
        credential = credential_from_salted_password(
            MECHANISM_NAMES[upsertion.mechanism], bytes(upsertion.salted_password),
            bytes(upsertion.salt), upsertion.iterations)
        results[name] = OpResult()
        records.append(m.UserScramCredentialRecord(
            name=name, mechanism=upsertion.mechanism, salt=credential.salt,
            stored_key=credential.stored_key, server_key=credential.server_key,
            iterations=credential.iterations))
    results.update(errors)
    return results, records
