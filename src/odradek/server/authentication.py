"""Authentication on the broker's listeners: TLS and SASL, set up per listener from Kafka's
configs, and the SASL exchange of one connection (Kafka's SaslServerAuthenticator).

Every `ssl.*` / `sasl.*` setting may be overridden for one listener with Kafka's prefix
`listener.name.<listener name in lower case>.`; a mechanism's JAAS config is looked up as
`listener.name.<listener>.<mechanism>.sasl.jaas.config`, then `sasl.jaas.config`.

A SASL connection may send only ApiVersions and SaslHandshake first, then SaslAuthenticate
(or, after a SaslHandshake v0, bare SASL tokens) until authenticated; any other request closes
it, as Kafka does. A failed exchange answers SASL_AUTHENTICATION_FAILED and the connection
closes after that answer. The principal (`User:<name>`) is the connection's from then on.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.client.security import ClientSecurity, SaslCredentials
from odradek.config.types import ConfigError, Password
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.security import jaas, oauthbearer, scram
from odradek.security.principal import ANONYMOUS, SslPrincipalMapper
from odradek.security.tls import client_context, server_context

log = logging.getLogger("odradek.authentication")

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, scram.SCRAM_SHA_256, scram.SCRAM_SHA_512,
                        oauthbearer.OAUTHBEARER)
# Kafka's sasl.server.max.receive.size default: the largest frame before authentication.
SASL_MAX_RECEIVE_SIZE = 524288

SASL_HANDSHAKE_KEY = 17
API_VERSIONS_KEY = 18
SASL_AUTHENTICATE_KEY = 36

#: (user) -> the credential of one SCRAM mechanism, or None
CredentialLookup = Callable[[str], "scram.ScramCredential | None"]


def _plain_value(value: Any) -> Any:
    return value.value if isinstance(value, Password) else value


@dataclass
class ListenerSecurity:
    """What one listener needs to authenticate its connections."""

    name: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)
    sasl_mechanisms: list[str] = field(default_factory=list)
    plain_users: dict[str, str] = field(default_factory=dict)
    # (mechanism name) -> that mechanism's credential lookup
    scram_credentials: Callable[[str], CredentialLookup] | None = None
    max_receive_size: int = SASL_MAX_RECEIVE_SIZE
    # (mechanism) -> connections.max.reauth.ms for it (0: sessions do not expire)
    reauth_ms: Callable[[str], int] = lambda _mechanism: 0
    clock: Callable[[], float] = time.monotonic  # session expiry (tests inject one)
    # OAUTHBEARER: the unsecured validator's JAAS options; the wall clock tokens are checked at
    oauthbearer_options: dict[str, str] = field(default_factory=dict)
    wall_clock_ms: Callable[[], float] = lambda: time.time() * 1000

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def new_session(self) -> SaslSession | None:
        return SaslSession(self, self.clock) if self.uses_sasl else None

    # -- TLS contexts replaced without a restart (dynamic listener configs)
    _current_ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    tls_fingerprint: tuple = field(default=(), repr=False)

    def serve_tls(self, context: ssl.SSLContext, fingerprint: tuple) -> None:
        """Makes `context` the listener's: the server keeps the first context it was given,
        whose SNI callback (called at every handshake, SNI or not) moves each new
        connection onto the current one. Open connections keep theirs."""
        if self.ssl_context is None:
            self.ssl_context = context
            context.sni_callback = self._select_context
        self._current_ssl_context = context
        self.tls_fingerprint = fingerprint

    def _select_context(self, ssl_object: Any, _server_name: str | None,
                        context: ssl.SSLContext) -> None:
        current = self._current_ssl_context
        if current is not None and current is not context:
            ssl_object.context = current


def _tls_client_auth(config: Any, listener_name: str, security_protocol: str,
                     lookup: Callable[[str], Any]) -> str:
    # KIP-684: on SASL_SSL listeners only a listener-prefixed ssl.client.auth applies.
    if security_protocol == "SASL_SSL":
        prefixed = f"listener.name.{listener_name.lower()}.ssl.client.auth"
        return str(config.originals.get(prefixed, "none"))
    return str(lookup("ssl.client.auth") or "none")


def _fingerprint(lookup: Callable[[str], Any], client_auth: str) -> tuple:
    """What a listener's TLS context is made of, with the modification times of its files
    (a store replaced at the same path is reloaded, as Kafka does)."""
    names = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
             "ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
             "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
             "ssl.truststore.certificates", "ssl.enabled.protocols", "ssl.cipher.suites")
    values = tuple(str(_plain_value(lookup(name))) for name in names)
    mtimes = []
    for name in ("ssl.keystore.location", "ssl.truststore.location"):
        path = _plain_value(lookup(name))
        try:
            mtimes.append(os.stat(path).st_mtime_ns if path else None)
        except OSError:
            mtimes.append(None)
    return (*values, client_auth, *mtimes)


def reload_tls(security: ListenerSecurity, config: Any,
               dynamic: Mapping[str, str]) -> bool:
    """Rebuilds a TLS listener's context when its settings (static, then the dynamic
    `listener.name.<listener>.ssl.*` broker configs) or its store files changed; True when
    it did. A store that does not load raises ConfigError and the current context stays."""
    lookup = listener_lookup(config, security.name, dynamic)
    client_auth = _tls_client_auth(config, security.name, security.security_protocol, lookup)
    fingerprint = _fingerprint(lookup, client_auth)
    if fingerprint == security.tls_fingerprint:
        return False
    security.serve_tls(server_context(lookup, client_auth=client_auth), fingerprint)
    return True


def listener_lookup(config: Any, listener_name: str,
                    dynamic: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """`name` -> its value for this listener: `listener.name.<listener>.<name>` (from the
    dynamic broker configs `dynamic`, then the static ones), else the broker-wide value (None
    when unset)."""
    prefix = f"listener.name.{listener_name.lower()}."
    originals = config.originals
    dynamic = dynamic or {}

    def lookup(name: str) -> Any:
        if prefix + name in dynamic:
            return dynamic[prefix + name]
        if prefix + name in originals:
            return originals[prefix + name]
        try:
            return _plain_value(config.get(name))
        except KeyError:
            return None
    return lookup


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return list(value)


def build_listener_security(config: Any, listener_name: str, security_protocol: str,
                            scram_credentials: Callable[[], Mapping[str, Mapping[int, Any]]],
                            dynamic: Mapping[str, str] | None = None) -> ListenerSecurity:
    """A listener's TLS context and SASL settings from the broker config. `scram_credentials`
    returns the current metadata image's credentials (user -> mechanism id -> credential)."""
    lookup = listener_lookup(config, listener_name)
    security = ListenerSecurity(listener_name, security_protocol)
    security.principal_mapper = SslPrincipalMapper(lookup("ssl.principal.mapping.rules"))
    if security.uses_ssl:
        reload_tls(security, config, dynamic or {})
    if security.uses_sasl:
        enabled = _list(lookup("sasl.enabled.mechanisms"))
        unsupported = [name for name in enabled if name not in SUPPORTED_MECHANISMS]
        if unsupported:
            log.warning("listener %s: SASL mechanisms %s are not supported and not offered "
                        "(supported: %s)", listener_name, unsupported,
                        ", ".join(SUPPORTED_MECHANISMS))
        security.sasl_mechanisms = [name for name in enabled if name in SUPPORTED_MECHANISMS]
        if not security.sasl_mechanisms:
            raise ConfigError(f"Listener {listener_name} ({security_protocol}) has no supported "
                              f"SASL mechanism in sasl.enabled.mechanisms {enabled}: enable "
                              f"some of {', '.join(SUPPORTED_MECHANISMS)}")
        if PLAIN in security.sasl_mechanisms:
            text = lookup("plain.sasl.jaas.config") or lookup("sasl.jaas.config")
            if text is None:
                raise ConfigError(f"No JAAS config for SASL/PLAIN on listener {listener_name}: "
                                  f"set listener.name.{listener_name.lower()}.plain."
                                  "sasl.jaas.config (PlainLoginModule with user_<name> options)")
            security.plain_users = jaas.plain_users(str(_plain_value(text)))

        if oauthbearer.OAUTHBEARER in security.sasl_mechanisms:
            text = lookup("oauthbearer.sasl.jaas.config") or lookup("sasl.jaas.config")
            if text is not None:
                security.oauthbearer_options = jaas.jaas_options(str(_plain_value(text)))

        def credentials_of(mechanism: str) -> CredentialLookup:
            mechanism_id = scram.MECHANISM_IDS[mechanism]
            return lambda user: scram_credentials().get(user, {}).get(mechanism_id)
        security.scram_credentials = credentials_of
        try:
            size = int(config.get("sasl.server.max.receive.size"))
        except (KeyError, TypeError, ValueError):
            size = SASL_MAX_RECEIVE_SIZE
        security.max_receive_size = size

        def reauth_ms(mechanism: str) -> int:
            value = lookup(f"{mechanism.lower()}.connections.max.reauth.ms")
            if value is None:
                value = lookup("connections.max.reauth.ms")
            return int(value or 0)
        security.reauth_ms = reauth_ms
    return security


class SaslSession:
    """One connection's SASL exchange (Kafka's SaslServerAuthenticator states)."""

    HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"

    # Kafka's KafkaChannel: at most one re-authentication a second.
    MIN_REAUTH_INTERVAL_S = 1.0

    def __init__(self, security: ListenerSecurity,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.security = security
        self.clock = clock
        self.state = self.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.raw_tokens = False  # after SaslHandshake v0: bare tokens, no request headers
        self.principal = ANONYMOUS
        self._server: Any = None
        self.failure: str | None = None  # for the broker's log, never a password
        # KIP-368: when the session expires (None: never), and the re-authentication state
        self.session_expires_at: float | None = None
        self.reauthenticating = False
        self._last_reauth_start: float | None = None
        self._previous: tuple[str, str] | None = None  # (mechanism, principal)

    def expired(self) -> bool:
        """An authenticated session past its lifetime: Kafka closes the connection at the
        next request."""
        return (self.complete and self.session_expires_at is not None
                and self.clock() >= self.session_expires_at)

    def begin_reauthentication(self) -> bool:
        """A SaslHandshake on an authenticated connection starts re-authentication when the
        session has a lifetime and the last one started a second ago or more (Kafka's
        maybeBeginServerReauthentication); otherwise the handshake is answered
        ILLEGAL_SASL_STATE."""
        if not self.complete or self.session_expires_at is None or self.mechanism is None:
            return False
        now = self.clock()
        if (self._last_reauth_start is not None
                and now - self._last_reauth_start < self.MIN_REAUTH_INTERVAL_S):
            return False
        self._last_reauth_start = now
        self._previous = (self.mechanism, self.principal)
        self.reauthenticating = True
        self.state = self.HANDSHAKE
        self._server = None
        return True

    @property
    def complete(self) -> bool:
        return self.state == self.COMPLETE

    @property
    def failed(self) -> bool:
        return self.state == self.FAILED

    def accepts(self, api_key: int) -> bool:
        """Whether a request of `api_key` may come now (before authentication completes)."""
        if self.state == self.HANDSHAKE_OR_VERSIONS:
            return api_key in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY)
        if self.state == self.HANDSHAKE:
            return api_key == SASL_HANDSHAKE_KEY
        if self.state == self.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE_KEY and not self.raw_tokens
        return self.state == self.COMPLETE

    def on_api_versions(self) -> None:
        if self.state == self.HANDSHAKE_OR_VERSIONS:
            self.state = self.HANDSHAKE

    def handshake(self, mechanism: str, version: int) -> m.SaslHandshakeResponse:
        enabled = list(self.security.sasl_mechanisms)
        if mechanism not in enabled:
            self.state = self.FAILED
            self.failure = f"Unsupported SASL mechanism {mechanism}"
            return m.SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                           mechanisms=enabled)
        self.mechanism = mechanism
        if mechanism == PLAIN:
            self._server = scram.PlainServer(self.security.plain_users)
        elif mechanism == oauthbearer.OAUTHBEARER:
            self._server = oauthbearer.OAuthBearerServer(oauthbearer.UnsecuredValidator(
                self.security.oauthbearer_options, self.security.wall_clock_ms))
        else:
            assert self.security.scram_credentials is not None
            self._server = scram.ScramServer(mechanism,
                                             self.security.scram_credentials(mechanism))
        self.raw_tokens = version == 0
        self.state = self.AUTHENTICATE
        return m.SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)

    def _fail(self, log_message: str, client_message: str) -> tuple[None, str]:
        self.state = self.FAILED
        self.failure = log_message
        return None, client_message

    def evaluate(self, token: bytes) -> tuple[bytes | None, str | None]:
        """(the token to answer, None) or (None, the error message for the client)."""
        what = "re-authentication" if self.reauthenticating else "authentication"
        if self._previous is not None and self._previous[0] != self.mechanism:
            message = (f"SASL mechanism '{self.mechanism}' requested by client is not "
                       f"supported for re-authentication of mechanism '{self._previous[0]}'")
            return self._fail(message, message)
        try:
            answer = self._server.evaluate(token)
        except scram.SaslFailure as exc:
            return self._fail(str(exc), exc.client_message or (
                f"Authentication failed during {what} due to invalid credentials with "
                f"SASL mechanism {self.mechanism}"))
        if self._server.complete:
            principal = f"User:{self._server.username}"
            if self._previous is not None and self._previous[1] != principal:
                old, new = self._previous[1], principal
                message = (f"Cannot change principals during re-authentication from "
                           f"{old.replace(':', '.', 1)}: {new.replace(':', '.', 1)}")
                return self._fail(message, message)
            self.state = self.COMPLETE
            self.principal = principal
            self.reauthenticating = False
            self._previous = None
        return answer, None

    def authenticate(self, auth_bytes: bytes) -> m.SaslAuthenticateResponse:
        answer, error = self.evaluate(bytes(auth_bytes))
        if error is not None:
            return m.SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=error,
                auth_bytes=b"", session_lifetime_ms=0)
        lifetime_ms = 0
        if self.complete:
            lifetime_ms = self._session_lifetime_ms()
            self.session_expires_at = (self.clock() + lifetime_ms / 1000
                                       if lifetime_ms is not None else None)
        return m.SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None,
                                          auth_bytes=answer or b"",
                                          session_lifetime_ms=lifetime_ms or 0)

    def _session_lifetime_ms(self) -> int | None:
        """Kafka's rule: the smaller of connections.max.reauth.ms (when above 0) and the time
        left on the credential (an OAUTHBEARER token's expiry); None when neither applies."""
        max_reauth_ms = self.security.reauth_ms(self.mechanism or "")
        expires_at_ms = getattr(self._server, "expires_at_ms", None)
        if expires_at_ms is None:
            return max_reauth_ms if max_reauth_ms > 0 else None
        left_ms = max(0, int(expires_at_ms - self.security.wall_clock_ms()))
        return min(left_ms, max_reauth_ms) if max_reauth_ms > 0 else left_ms


def peer_client_security(config: Any, listener_name: str | None, security_protocol: str,
                         mechanism: str) -> ClientSecurity:
    """How this node connects to its peers' `listener_name` (the inter-broker listener, or
    the controller listener): TLS with that listener's `ssl.*` settings (its key store as the
    client certificate), SASL with `mechanism` (`sasl.mechanism.inter.broker.protocol` or
    `sasl.mechanism.controller.protocol`) and the `username`/`password` options of that
    listener's JAAS config for the mechanism, as Kafka's brokers log in."""
    if listener_name is None or security_protocol == "PLAINTEXT":
        return ClientSecurity()
    lookup = listener_lookup(config, listener_name)
    ssl_context = client_context(lookup) if security_protocol in ("SSL", "SASL_SSL") else None
    sasl = None
    if security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"SASL mechanism {mechanism} to listener {listener_name} is not "
                              f"supported: set sasl.mechanism.inter.broker.protocol / "
                              f"sasl.mechanism.controller.protocol to one of "
                              f"{', '.join(SUPPORTED_MECHANISMS)}")
        text = lookup(f"{mechanism.lower()}.sasl.jaas.config") or lookup("sasl.jaas.config")
        options = jaas.jaas_options(str(_plain_value(text))) if text else {}
        if mechanism == oauthbearer.OAUTHBEARER:
            username = options.get("unsecuredLoginStringClaim_sub")
            password = ""
        else:
            username, password = options.get("username"), options.get("password")
        if not username or password is None:
            raise ConfigError(f"No credentials for SASL/{mechanism} to listener {listener_name}: "
                              f"set the username and password options of "
                              f"listener.name.{listener_name.lower()}.{mechanism.lower()}."
                              "sasl.jaas.config")
        sasl = SaslCredentials(mechanism, username, password)
    return ClientSecurity(security_protocol, ssl_context, sasl)
