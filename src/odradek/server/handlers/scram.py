"""DescribeUserScramCredentials (API 50) and AlterUserScramCredentials (API 51).

Describe answers from the broker's metadata image (Kafka's KRaft brokers do); Alter is carried
out by the active controller (forwarded there like the other admin APIs) as records.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation

if TYPE_CHECKING:
    from odradek.controller.quorum_controller import QuorumController
    from odradek.metadata.cache import MetadataCache
    from odradek.server.network import RequestContext


class ScramApis:
    def __init__(self, cache: MetadataCache, controller: QuorumController) -> None:
        self.cache = cache
        self.controller = controller

    def describe_user_scram_credentials(self, ctx: RequestContext,
                                        req: m.DescribeUserScramCredentialsRequest):
        R = m.DescribeUserScramCredentialsResponse
        if not ctx.authorize_cluster(AclOperation.DESCRIBE):
            return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                     error_message=None, results=[])
        credentials = self.cache.image.scram_credentials
        if req.users is None or len(req.users) == 0:  # null or empty: every user
            names = sorted(credentials)
            duplicates: set[str] = set()
        else:
            names = [user.name for user in req.users]
            counts = Counter(names)
            duplicates = {name for name, count in counts.items() if count > 1}
            names = list(dict.fromkeys(names))
        results = []
        for name in names:
            if name in duplicates:
                results.append(R.DescribeUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message="Cannot describe SCRAM credentials for the same user twice "
                                  f"in a single request: {name}", credential_infos=[]))
                continue
            user_credentials = credentials.get(name)
            if not user_credentials:
                results.append(R.DescribeUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=f"Attempt to describe a user credential that does not "
                                  f"exist: {name}", credential_infos=[]))
                continue
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.NONE, error_message=None,
                credential_infos=[R.CredentialInfo(mechanism=mechanism,
                                                   iterations=credential.iterations)
                                  for mechanism, credential in sorted(user_credentials.items())]))
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                 results=results)

    async def alter_user_scram_credentials(self, ctx: RequestContext,
                                           req: m.AlterUserScramCredentialsRequest):
        R = m.AlterUserScramCredentialsResponse
        if not ctx.authorize_cluster(AclOperation.ALTER):
            users = dict.fromkeys(a.name for a in [*req.deletions, *req.upsertions])
            return R(throttle_time_ms=0, results=[
                R.AlterUserScramCredentialsResult(
                    user=user, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    error_message=None) for user in users])
        results = await self.controller.alter_user_scram_credentials(req.deletions,
                                                                     req.upsertions)
        return R(throttle_time_ms=0, results=[
            R.AlterUserScramCredentialsResult(user=user, error_code=result.error,
                                              error_message=result.message)
            for user, result in results.items()])
