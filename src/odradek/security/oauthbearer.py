"""SASL/OAUTHBEARER (RFC 7628) with unsecured JWS tokens (`alg: none`), as Kafka's default
handlers (OAuthBearerUnsecuredValidatorCallbackHandler on the broker, the unsecured login
module on clients): for development and tests, not for production (anyone can make a token).

A bad token is answered, as RFC 7628 and Kafka do, with an error challenge
(`{"status":"invalid_token"}`); the client acknowledges it with %x01 and the exchange fails with
that message.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from odradek.security.scram import SaslFailure

OAUTHBEARER = "OAUTHBEARER"
_CONTROL_A = b"\x01"
_CLIENT_RESPONSE = re.compile(rb"n,(a=([^,]*))?,\x01((?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")
_AUTH = re.compile(r"([\w]+)[ ]+([-_.a-zA-Z0-9]+)")


def _b64url_json(part: str) -> dict[str, Any]:
    padded = part + "=" * (-len(part) % 4)
    try:
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"Unsecured JWS part is not base64url JSON: {exc}") from None
    return value if isinstance(value, dict) else {"": value}  # not an object: no claims


def _b64url(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def unsecured_token(principal: str, *, lifetime_s: float = 3600, scope: list[str] | None = None,
                    principal_claim: str = "sub", now_s: float | None = None) -> str:
    """An unsecured JWS (`header.claims.` with no signature), as Kafka's unsecured login
    module and librdkafka's `enable.sasl.oauthbearer.unsecure.jwt` make them."""
    now = time.time() if now_s is None else now_s
    claims: dict[str, Any] = {principal_claim: principal, "iat": now, "exp": now + lifetime_s}
    if scope:
        claims["scope"] = scope
    return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."


def client_initial_response(token: str, authorization_id: str = "") -> bytes:
    gs2 = f"n,a={authorization_id}," if authorization_id else "n,,"
    return gs2.encode() + b"\x01auth=Bearer " + token.encode() + b"\x01\x01"


class UnsecuredValidator:
    """Kafka's unsecured validator: `unsecuredValidatorPrincipalClaimName` (sub),
    `unsecuredValidatorScopeClaimName` (scope), `unsecuredValidatorRequiredScope`
    (space separated), `unsecuredValidatorAllowableClockSkewMs` (0), from the JAAS options."""

    def __init__(self, options: Mapping[str, str] | None = None,
                 now_ms: Callable[[], float] = lambda: time.time() * 1000) -> None:
        options = options or {}
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName") or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName") or "scope"
        self.required_scope = (options.get("unsecuredValidatorRequiredScope") or "").split()
        self.skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs") or 0)
        self.now_ms = now_ms

    def validate(self, token: str) -> tuple[str, float]:
        """(principal, expiration in epoch ms); ValueError(log message, status, scope)."""
        parts = token.split(".")
        if len(parts) != 3:
            raise _invalid("Unsecured JWS compact serializations must have 3 dot-separated "
                           "Base64URL-encoded values")
        try:
            header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        if header.get("alg") != "none":
            raise _invalid("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise _invalid("Unsecured JWS must not contain a digital signature")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise _invalid(f"Required claim missing or not a string: {self.principal_claim}")
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            raise _invalid("Required claim missing or not a number: exp")
        iat = claims.get("iat")
        if iat is not None and (not isinstance(iat, (int, float)) or isinstance(iat, bool)):
            raise _invalid("Claim is not a number: iat")
        now = self.now_ms()
        if iat is not None and iat * 1000 > now + self.skew_ms:
            raise _invalid(f"The Issued At value ({iat} seconds) was after the indicated time "
                           f"({now:.0f} ms) plus allowable clock skew ({self.skew_ms} ms)")
        if now - self.skew_ms >= exp * 1000:
            raise _invalid(f"The indicated time ({now:.0f} ms) minus allowable clock skew "
                           f"({self.skew_ms} ms) was on or after the Expiration Time value "
                           f"({exp} seconds)")
        if iat is not None and exp <= iat:
            raise _invalid(f"The Expiration Time time ({exp} seconds) was not after the Issued "
                           f"At time ({iat} seconds)")
        if self.required_scope:
            scope = claims.get(self.scope_claim) or []
            scopes = scope.split() if isinstance(scope, str) else list(scope)
            missing = [item for item in self.required_scope if item not in scopes]
            if missing:
                error = ValueError(f"The provided scope ({scopes}) was missing a required "
                                   f"scope ({missing[0]})")
                error.status, error.scope = "insufficient_scope", " ".join(self.required_scope)  # type: ignore[attr-defined]
                raise error
        return principal, exp * 1000


def _invalid(message: str) -> ValueError:
    error = ValueError(message)
    error.status, error.scope = "invalid_token", None  # type: ignore[attr-defined]
    return error


class OAuthBearerServer:
    """The broker's side of one OAUTHBEARER exchange (Kafka's OAuthBearerSaslServer)."""

    def __init__(self, validator: UnsecuredValidator) -> None:
        self.validator = validator
        self.username: str | None = None
        self.expires_at_ms: float | None = None  # the token's expiry: the session's limit
        self.complete = False
        self._error: str | None = None  # the error challenge sent, awaiting the client's %x01
        self._detail = ""

    def evaluate(self, token: bytes) -> bytes:
        if token == _CONTROL_A and self._error is not None:
            raise SaslFailure(f"OAUTHBEARER token refused: {self._detail}", self._error)
        self._error = None
        if self.complete:
            raise SaslFailure("Authentication exchange already completed")
        match = _CLIENT_RESPONSE.fullmatch(token)
        if match is None:
            raise SaslFailure("Invalid OAUTHBEARER client first message")
        authorization_id = (match.group(2) or b"").decode(errors="replace")
        pairs = dict(item.split(b"=", 1) for item in match.group(3).split(b"\x01") if item)
        auth = _AUTH.fullmatch(pairs.get(b"auth", b"").decode(errors="replace"))
        if auth is None or auth.group(1).lower() != "bearer":
            raise SaslFailure("Invalid OAUTHBEARER client first message: no Bearer token")
        try:
            principal, expires_at_ms = self.validator.validate(auth.group(2))
        except ValueError as exc:
            status, scope = getattr(exc, "status", "invalid_token"), getattr(exc, "scope", None)
            body = f'{{"status":"{status}"'
            if scope is not None:
                body += f', "scope":"{scope}"'
            self._error = body + "}"
            self._detail = str(exc)
            return self._error.encode()
        if authorization_id and authorization_id != principal:
            message = (f"Authentication failed: Client requested an authorization id "
                       f"({authorization_id}) that is different from the token's principal "
                       f"name ({principal})")
            raise SaslFailure(message, message)
        self.username = principal
        self.expires_at_ms = expires_at_ms
        self.complete = True
        return b""
