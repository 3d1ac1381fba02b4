"""SaslHandshake and SaslAuthenticate on listeners without SASL.

Odradek's listeners are PLAINTEXT. Kafka answers both requests on such a listener with
ILLEGAL_SASL_STATE, so a client configured for SASL gets a clear authentication error instead of
a connection that keeps closing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.server.network import RequestContext


def sasl_handshake(ctx: RequestContext, req: m.SaslHandshakeRequest):
    return m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


def sasl_authenticate(ctx: RequestContext, req: m.SaslAuthenticateRequest):
    return m.SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"")
