"""SaslHandshake (API 17) and SaslAuthenticate (API 36).

On SASL_PLAINTEXT and SASL_SSL listeners they carry the connection's SASL exchange (see
`server.authentication.SaslSession`). On PLAINTEXT and SSL listeners, and once a connection is
authenticated (re-authentication, KIP-368, is not supported), Kafka answers both with
ILLEGAL_SASL_STATE, so a client configured for SASL gets a clear authentication error instead
of a connection that keeps closing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.server.network import RequestContext


def sasl_handshake(ctx: RequestContext, req: m.SaslHandshakeRequest):
    session = ctx.connection.sasl
    if session is None or session.complete:
        return m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    return session.handshake(req.mechanism, ctx.api_version)


def sasl_authenticate(ctx: RequestContext, req: m.SaslAuthenticateRequest):
    session = ctx.connection.sasl
    if session is None or session.state != session.AUTHENTICATE:
        return m.SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"")
    return session.authenticate(req.auth_bytes)
