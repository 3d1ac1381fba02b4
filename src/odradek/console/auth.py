"""Logging in to the console when the cluster's listener needs SASL.

The console holds no credentials of its own then: a user logs in with a user name and password
(the mechanism is the console's `sasl.mechanism`), and the console opens that user's own
clients with them, so the broker authenticates and authorizes every page as that user (its
ACLs decide what the user sees and may change). The clients live in a server-side session
named by a random cookie (the password is never in the cookie, nor in a log); a session idle
for `session_timeout_s` ends, as does logout.

Pages keep reading `request.app[SERVICE]`: with login on, that is a `SessionServices` that
hands each call to the service of the session the request came with (a context variable set
by `authenticate` for the request's task), so every page, including ones added later, runs as
its user without knowing about sessions.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

from aiohttp import web

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.config.types import Password
from odradek.console.app import USER, not_a_cluster_write, render
from odradek.console.service import PAGE_TIMEOUT_MS, ConsoleService
from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

COOKIE = "odradek_console_session"
DEFAULT_SESSION_TIMEOUT_S = 30 * 60
#: Sessions kept at most; the least recently used one ends first (each holds connections).
MAX_SESSIONS = 256
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
#: The mechanisms a user logs in with by password (OAUTHBEARER's unsecured tokens have none).
LOGIN_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: The console's own credentials, if its config has any, never stand in for a user's.
CREDENTIAL_KEYS = ("sasl.username", "sasl.password", "sasl.jaas.config")
#: Pages a visitor without a session may see.
PUBLIC_PATHS = frozenset({"/login"})

_current: contextvars.ContextVar[Session] = contextvars.ContextVar("console_session")


def login_required(client_config: Mapping[str, Any]) -> bool:
    return str(client_config.get("security.protocol") or "").upper() in SASL_PROTOCOLS


def config_error(client_config: Mapping[str, Any]) -> str | None:
    """Why users could not log in with this config, or None."""
    if not login_required(client_config):
        return None
    mechanism = str(client_config.get("sasl.mechanism") or "GSSAPI").upper()
    if mechanism not in LOGIN_MECHANISMS:
        return (f"users log in to the console with {', '.join(LOGIN_MECHANISMS)}, not "
                f"sasl.mechanism {mechanism}")
    return None


@dataclass
class Session:
    session_id: str
    username: str
    service: ConsoleService
    last_used: float


class SessionServices:
    """Stands in for the app's one `ConsoleService` when users log in: every attribute is the
    current request's session's service's."""

    def __getattr__(self, name: str) -> Any:
        try:
            session = _current.get()
        except LookupError:
            raise RuntimeError("no console session in this request") from None
        return getattr(session.service, name)


class SessionStore:
    """The logged-in users' sessions, by id; idle ones expire on `clock`."""

    def __init__(self, client_config: Mapping[str, Any], *,
                 timeout_s: float = DEFAULT_SESSION_TIMEOUT_S, clock: Clock = SYSTEM_CLOCK,
                 open_service: Callable[[dict[str, Any]], ConsoleService] = ConsoleService
                 ) -> None:
        self.client_config = {k: v for k, v in client_config.items()
                              if k not in CREDENTIAL_KEYS}
        self.mechanism = str(self.client_config.get("sasl.mechanism") or "GSSAPI").upper()
        self.timeout_s = timeout_s
        self.clock = clock
        self.open_service = open_service
        self.sessions: dict[str, Session] = {}

    async def login(self, username: str, password: str) -> Session:
        """Opens the user's clients and proves the credentials with one request; raises the
        broker's KafkaError (SASL_AUTHENTICATION_FAILED for a wrong password)."""
        service = self.open_service({**self.client_config, "sasl.username": username,
                                     "sasl.password": Password(password)})
        try:
            await service.admin.describe_cluster(timeout_ms=PAGE_TIMEOUT_MS)
        except BaseException:
            await service.close()
            raise
        await self.expire()
        while len(self.sessions) >= MAX_SESSIONS:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used)
            await self.end(oldest.session_id)
        session = Session(secrets.token_urlsafe(32), username, service, self.clock.monotonic())
        self.sessions[session.session_id] = session
        return session

    async def get(self, session_id: str | None) -> Session | None:
        """The live session of that id (its idle time restarts), or None."""
        await self.expire()
        session = self.sessions.get(session_id or "")
        if session is not None:
            session.last_used = self.clock.monotonic()
        return session

    async def expire(self) -> None:
        now = self.clock.monotonic()
        for session in [s for s in self.sessions.values()
                        if now - s.last_used >= self.timeout_s]:
            log.info("console session of %r expired", session.username)
            await self.end(session.session_id)

    async def end(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            await session.service.close()

    async def close(self) -> None:
        for session_id in list(self.sessions):
            await self.end(session_id)


STORE: web.AppKey[SessionStore] = web.AppKey("sessions", SessionStore)


def _local_target(target: str) -> str:
    """Where to go after logging in: a path on this console only (no open redirect)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@web.middleware
async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
    store = request.app[STORE]
    session = await store.get(request.cookies.get(COOKIE))
    if session is None:
        if request.path in PUBLIC_PATHS:
            return await handler(request)
        target = request.path_qs if request.method in ("GET", "HEAD") else "/"
        raise web.HTTPSeeOther(f"/login?next={quote(target, safe='')}")
    request[USER] = session.username
    _current.set(session)
    return await handler(request)


async def login_form(request: web.Request) -> web.Response:
    return render(request, "login.html", mechanism=request.app[STORE].mechanism,
                  next=_local_target(request.query.get("next", "/")), username="", error=None)


async def login_submit(request: web.Request) -> web.Response:
    form = await request.post()
    username = str(form.get("username", "")).strip()
    password = str(form.get("password", ""))
    target = _local_target(str(form.get("next", "/")))
    store = request.app[STORE]
    if not username or not password:
        return render(request, "login.html", status=400, mechanism=store.mechanism,
                      next=target, username=username, error="user name and password required")
    try:
        session = await store.login(username, password)
    except KafkaError as exc:
        # the user name and Kafka's error only: never the password
        log.warning("console login of %r failed: %s", username, exc.code.name)
        status = 401 if exc.code == ErrorCode.SASL_AUTHENTICATION_FAILED else 502
        return render(request, "login.html", status=status, mechanism=store.mechanism,
                      next=target, username=username,
                      error=f"{exc.code.name}: {exc.message or ''}")
    log.info("console login of %r", username)
    old = request.cookies.get(COOKIE)
    if old:
        await store.end(old)
    response = web.HTTPSeeOther(target)
    response.set_cookie(COOKIE, session.session_id, httponly=True, samesite="Strict",
                        path="/", secure=request.secure)
    raise response


async def logout(request: web.Request) -> web.Response:
    session_id = request.cookies.get(COOKIE)
    if session_id:
        await request.app[STORE].end(session_id)
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE, path="/")
    raise response


def setup(app: web.Application, client_config: Mapping[str, Any], service_key: web.AppKey,
          *, session_timeout_s: float | None = None) -> bool:
    """With a SASL listener: sessions, the login routes, and `app[service_key]` resolving to
    the request's session's service. Returns whether login is on (else nothing changes)."""
    if not login_required(client_config):
        return False
    store = SessionStore(client_config,
                         timeout_s=session_timeout_s or DEFAULT_SESSION_TIMEOUT_S)
    app[STORE] = store
    app[service_key] = cast(ConsoleService, SessionServices())
    app.middlewares.append(authenticate)

    async def end_sessions(app: web.Application) -> None:
        await store.close()

    app.on_cleanup.append(end_sessions)
    app.add_routes([web.get("/login", login_form),
                    web.post("/login", not_a_cluster_write(login_submit)),
                    web.post("/logout", not_a_cluster_write(logout))])
    return True
