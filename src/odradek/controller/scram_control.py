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


def alter_user_scram_credentials(
        image: MetadataImage, deletions: Sequence[Any], upsertions: Sequence[Any],
) -> tuple[dict[str, OpResult], list[Any]]:
    """(user -> result, in request order; records to commit for the users that succeed)."""
    results: dict[str, OpResult] = {}
    failed: dict[str, OpResult] = {}
    seen: dict[tuple[str, int], int] = {}
    for alteration in [*deletions, *upsertions]:
        results.setdefault(alteration.name, OpResult())
        key = (alteration.name, alteration.mechanism)
        seen[key] = seen.get(key, 0) + 1

    def fail(user: str, code: ErrorCode, message: str) -> None:
        failed.setdefault(user, OpResult.fail(code, message))

    for (user, _mechanism), count in seen.items():
        if count > 1:
            fail(user, ErrorCode.DUPLICATE_RESOURCE,
                 "A user credential cannot be altered twice in the same request")
    for alteration in [*deletions, *upsertions]:
        user = alteration.name
        if not user:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif alteration.mechanism not in MECHANISM_NAMES:
            fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    for upsertion in upsertions:
        if upsertion.mechanism not in MECHANISM_NAMES:
            continue
        if upsertion.iterations < MIN_ITERATIONS:
            fail(upsertion.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif upsertion.iterations > MAX_ITERATIONS:
            fail(upsertion.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    for deletion in deletions:
        existing = image.scram_credentials.get(deletion.name, {})
        if deletion.mechanism in MECHANISM_NAMES and deletion.mechanism not in existing:
            fail(deletion.name, ErrorCode.RESOURCE_NOT_FOUND,
                 "Attempt to delete a user credential that does not exist")
    records: list[Any] = []
    for deletion in deletions:
        if deletion.name not in failed:
            records.append(m.RemoveUserScramCredentialRecord(name=deletion.name,
                                                             mechanism=deletion.mechanism))
    for upsertion in upsertions:
        if upsertion.name in failed:
            continue
        mechanism = MECHANISM_NAMES[upsertion.mechanism]
        credential = credential_from_salted_password(
            mechanism, bytes(upsertion.salted_password), bytes(upsertion.salt),
            upsertion.iterations)
        records.append(m.UserScramCredentialRecord(
            name=upsertion.name, mechanism=upsertion.mechanism, salt=credential.salt,
            stored_key=credential.stored_key, server_key=credential.server_key,
            iterations=credential.iterations))
    results.update(failed)
    return results, records
