"""SCRAM credentials in the admin client (Kafka's Admin describeUserScramCredentials and
alterUserScramCredentials), mixed into `AdminClient`.

The password never leaves the client: an upsertion carries the salt (random unless given) and
the salted password (PBKDF2 over the mechanism's hash), as Kafka's admin client sends them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.client.errors import error_from_code
from odradek.protocol import messages as m
from odradek.protocol.errors import KafkaError
from odradek.security.scram import MECHANISM_IDS, MECHANISM_NAMES, MIN_ITERATIONS, salted_password

if TYPE_CHECKING:
    from odradek.client.cluster import Cluster
    from odradek.client.retry import Deadline

__all__ = ["ScramAdmin", "ScramCredentialInfo", "UserScramCredentialDeletion",
           "UserScramCredentialUpsertion"]


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    user: str
    mechanism: str
    password: str
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = None  # random (32 bytes) when None

    def __repr__(self) -> str:  # never print the password
        return f"UserScramCredentialUpsertion({self.user!r}, {self.mechanism}, {self.iterations})"


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: str


class ScramAdmin:
    cluster: Cluster

    async def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
            *, timeout_ms: float | None = None, raise_errors: bool = True,
    ) -> dict[str, KafkaError | None]:
        """AlterUserScramCredentials: user -> None (done) or the error (raised when
        `raise_errors`). A user may appear once per call (Kafka's rule)."""
        Request = m.AlterUserScramCredentialsRequest
        upsertions, deletions = [], []
        for alteration in alterations:
            mechanism = MECHANISM_IDS.get(alteration.mechanism, 0)
            if isinstance(alteration, UserScramCredentialUpsertion):
                salt = alteration.salt if alteration.salt is not None else os.urandom(32)
                salted = (salted_password(alteration.mechanism, alteration.password, salt,
                                          alteration.iterations) if mechanism else b"")
                upsertions.append(Request.ScramCredentialUpsertion(
                    name=alteration.user, mechanism=mechanism,
                    iterations=alteration.iterations, salt=salt, salted_password=salted))
            else:
                deletions.append(Request.ScramCredentialDeletion(name=alteration.user,
                                                                 mechanism=mechanism))
        request = Request(deletions=deletions, upsertions=upsertions)

        async def attempt(deadline: Deadline) -> dict[str, KafkaError | None]:
            response = await self.cluster.send_to_any(request, deadline)
            return {result.user: error_from_code(result.error_code, result.error_message)
                    for result in response.results}

        results = await self.cluster.call("alterUserScramCredentials", attempt,
                                          timeout_ms=timeout_ms)
        if raise_errors:
            for error in results.values():
                if error is not None:
                    raise error
        return results

    async def describe_user_scram_credentials(
            self, users: Iterable[str] | None = None, *, timeout_ms: float | None = None,
            raise_errors: bool = True,
    ) -> dict[str, list[ScramCredentialInfo] | KafkaError]:
        """DescribeUserScramCredentials: user -> its credentials (all users when `users` is
        None), or the error for that user (raised when `raise_errors`)."""
        Request = m.DescribeUserScramCredentialsRequest
        request = Request(users=None if users is None else [Request.UserName(name=user)
                                                           for user in users])

        async def attempt(deadline: Deadline) -> dict[str, list[ScramCredentialInfo] | KafkaError]:
            response = await self.cluster.send_to_any(request, deadline, raise_error=True)
            out: dict[str, list[ScramCredentialInfo] | KafkaError] = {}
            for result in response.results:
                error = error_from_code(result.error_code, result.error_message)
                out[result.user] = error if error is not None else [
                    ScramCredentialInfo(MECHANISM_NAMES.get(info.mechanism, "UNKNOWN"),
                                        info.iterations)
                    for info in result.credential_infos]
            return out

        results = await self.cluster.call("describeUserScramCredentials", attempt,
                                          timeout_ms=timeout_ms)
        if raise_errors:
            for value in results.values():
                if isinstance(value, KafkaError):
                    raise value
        return results
