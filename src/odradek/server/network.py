"""The broker's network layer: listeners, connections, framing, response ordering, sendfile.

One asyncio Protocol per connection splits the byte stream into frames (sans-I/O FrameBuffer)
and one worker task per connection handles them in arrival order, so responses leave in request
order as Kafka clients require. Like Kafka's muted channels, a connection has one request in
processing at a time; reading pauses when too many frames queue up.

TLS listeners complete each handshake before the connection starts (`_TlsAcceptor`); file
regions go through TLS in large chunks instead of sendfile. On SASL listeners the connection
takes only the authentication requests until its `SaslSession` completes, then carries the
principal on every request's context (see `server.authentication`).

Client quotas (`server.client_quotas`): after a request is handled its cost is recorded; a
client over its quota gets its answer at once with `throttle_time_ms`, and its connection is
then muted (not read, its queued requests not processed) until the throttle ends (KIP-219).
Connection limits (`server.connection_quotas`) are checked as each connection is made.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.protocol import framing
from odradek.protocol.errors import (
    DecodeError,
    FrameTooLargeError,
    ProtocolError,
    UnsupportedVersionError,
)
from odradek.request_timing import CURRENT_REQUEST, RequestTiming
from odradek.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    all_operations_bitfield,
)
from odradek.security.principal import certificate_principal
from odradek.server import request_log
from odradek.server.authentication import ListenerSecurity, SaslSession
from odradek.server.request_metrics import RequestMetrics

if TYPE_CHECKING:
    from odradek.security.authorizer import StandardAuthorizer

log = logging.getLogger("odradek.network")

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
MAX_QUEUED_FRAMES = 64
SENDFILE_COPY_CHUNK = 256 * 1024
# Over TLS file regions are read and written in chunks this large (no sendfile through TLS).
TLS_READ_CHUNK = 1024 * 1024
# A TLS connection's reused receive buffer (frames smaller than FrameBuffer's large-frame size
# and the starts of large ones pass through it).
TLS_RECEIVE_BUFFER = 256 * 1024
WRITE_HIGH_WATER = 64 * 1024


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about one request besides its body."""

    header: Any
    connection: Connection
    listener: str
    received_ns: int
    principal: str = "User:ANONYMOUS"
    # The client's address when it is not this connection's peer (a request a broker
    # forwarded in an Envelope names its client's).
    client_address: str | None = None

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def client_host(self) -> str:
        return self.client_address if self.client_address is not None \
            else self.connection.peer_host

    # -- authorization (the one place handlers ask; no authorizer: everything is allowed)
    @property
    def authorizer(self) -> StandardAuthorizer | None:
        connection = self.connection  # None: a request made up inside this process
        return connection.server.authorizer if connection is not None else None

    def authorize(self, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name)

    def authorize_cluster(self, operation: AclOperation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorize_topic(self, operation: AclOperation, name: str) -> bool:
        return self.authorize(operation, ResourceType.TOPIC, name)

    def authorized_names(self, operation: AclOperation, resource_type: ResourceType,
                         names: Iterable[str]) -> set[str]:
        """The names among `names` the principal may do `operation` on."""
        authorizer = self.authorizer
        if authorizer is None:
            return set(names)
        principal, host = self.principal, self.client_host
        return {name for name in set(names)
                if authorizer.authorize(principal, host, operation, resource_type, name)}

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bitfield of a resource for this principal (every
        supported operation when there is no authorizer)."""
        authorizer = self.authorizer
        if authorizer is None:
            return all_operations_bitfield(resource_type)
        return authorizer.authorized_operations(self.principal, self.client_host,
                                                resource_type, name)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on some resource of the type."""
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize_any(
            self.principal, self.client_host, operation, resource_type)


# A dispatcher returns the response object, or None when no response is due (acks=0 produce),
# or an awaitable of either. Raising ConnectionCloseRequest closes the connection.
Dispatcher = Callable[[RequestContext, Any], Any]
UnsupportedVersionResponder = Callable[[Any], Any]


class ConnectionCloseRequest(Exception):
    """A handler's way to say: close this connection without answering (Kafka's behaviour for
    requests it cannot make sense of). `response`: the answer it would have sent, whose error
    codes still count (Kafka's closeConnection with the errors of a failed acks=0 produce)."""

    def __init__(self, message: str, response: Any = None) -> None:
        super().__init__(message)
        self.response = response


class Connection(asyncio.BaseProtocol):
    """A plaintext connection: the event loop hands it received bytes (`data_received`).
    (Not an `asyncio.Protocol` subclass so that `TlsConnection` can be a pure
    `BufferedProtocol`, which is what makes the SSL layer use its buffers.)"""

    def __init__(self, server: NetworkServer, listener: ListenerConfig) -> None:
        self.server = server
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        security = listener.security
        # SASL listeners: the exchange's state; the principal once authenticated.
        self.sasl = security.new_session() if security is not None else None
        self.principal = "User:ANONYMOUS"
        self.frames = framing.FrameBuffer(
            security.max_receive_size if self.sasl is not None else server.max_request_size)
        self.queue: deque[Any] = deque()
        self.wakeup = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        self.reading_paused = False
        self.closing = False
        self.peer_host = ""
        self.peer_port = 0
        self.last_active = time.monotonic()
        self.handling = False  # a request is being processed (e.g. a fetch long poll)
        self.worker: asyncio.Task | None = None
        self.sock_fd = -1
        self.sendfile_ok = False
        self.id = ""
        self.throttled_until = 0.0  # monotonic seconds: muted until then (client quotas)
        self.counted = False  # holds a slot of the connection limits

    # -- asyncio.Protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=0)
        peer = transport.get_extra_info("peername") or ("", 0)
        self.peer_host, self.peer_port = peer[0], peer[1]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            self.sock_fd = sock.fileno()
        # sendfile needs the raw socket: never under TLS.
        self.sendfile_ok = (
            self.sock_fd >= 0
            and transport.get_extra_info("sslcontext") is None
            and self.server.sendfile_enabled
        )
        self.id = f"{self.listener.name}-{self.peer_host}:{self.peer_port}"
        limits = self.server.connection_quotas
        if limits is not None:
            refusal = limits.on_connect(self.listener.name, self.peer_host)
            if isinstance(refusal, str):
                # Kafka closes a connection over a limit at once, keeping the others going.
                log.info("closing %s: %s", self.id, refusal)
                self.close()
                return
            self.counted = True
            if refusal is not None:  # over the creation rate: held unread for a while
                log.debug("holding %s for %.3fs: %s", self.id, refusal[1], refusal[0])
                self.throttled_until = time.monotonic() + refusal[1]
        security = self.listener.security
        if security is not None and security.security_protocol == "SSL":
            try:
                self.principal = certificate_principal(transport.get_extra_info("peercert"),
                                                       security.principal_mapper)
            except ValueError as exc:  # no ssl.principal.mapping.rules rule applies
                log.info("closing %s: %s", self.id, exc)
                self.close()
                return
        self.server.connections.add(self)
        self.worker = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        self.frames.feed(data)
        self._take_frames()

    def _take_frames(self) -> None:
        """Queue the frames completed by the bytes just received."""
        self.last_active = time.monotonic()
        arrived = time.monotonic_ns()
        try:
            while (frame := self.frames.next_frame()) is not None:
                self.queue.append((frame, arrived))
        except FrameTooLargeError as exc:
            log.warning("closing %s: %s", self.id, exc)
            self.close()
            return
        except ProtocolError as exc:
            log.warning("closing %s: bad framing: %s", self.id, exc)
            self.close()
            return
        if self.queue:
            self.wakeup.set()
            if len(self.queue) >= MAX_QUEUED_FRAMES and not self.reading_paused:
                self.reading_paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool | None:
        # Half-closed by the client: finish what was queued, then close. (TLS has no half
        # close: its transport closes whatever this returns.)
        self.queue.append(None)
        self.wakeup.set()
        return self.listener.ssl_context is None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.counted:
            self.counted = False
            self.server.connection_quotas.on_disconnect(self.listener.name, self.peer_host)
        self.writable.set()
        self.server.connections.discard(self)
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # -- request processing
    def close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    async def _run(self) -> None:
        try:
            if self.throttled_until:
                await self._sit_out_throttle()
            while not self.closing:
                if not self.queue:
                    self.wakeup.clear()
                    await self.wakeup.wait()
                    continue
                item = self.queue.popleft()
                if item is None:
                    self.close()
                    return
                if self.reading_paused and len(self.queue) < MAX_QUEUED_FRAMES // 2:
                    self.reading_paused = False
                    self.transport.resume_reading()  # type: ignore[union-attr]
                self.handling = True
                try:
                    await self._handle(*item)
                finally:
                    self.handling = False
                self.last_active = time.monotonic()
                if self.throttled_until:
                    await self._sit_out_throttle()
        except asyncio.CancelledError:
            pass
        except ConnectionError:
            self.close()
        except Exception:
            log.exception("unexpected error on connection %s; closing it", self.id)
            self.close()

    async def _handle(self, frame: Any, arrived_ns: int) -> None:
        received = time.monotonic_ns()
        if self.sasl is not None and self.sasl.raw_tokens and \
                self.sasl.state == self.sasl.AUTHENTICATE:
            await self._handle_raw_token(frame)
            return
        try:
            header, request = framing.decode_request(frame)
        except UnsupportedVersionError as exc:
            header = getattr(exc, "header", None)
            if header is not None and header.request_api_key == API_VERSIONS_KEY:
                # Clients probe with their newest ApiVersions; answer v0 so they retry lower.
                response = self.server.unsupported_version_response(header)
                self.server.request_metrics.count_errors(API_VERSIONS_KEY, 0, response)
                await self._write(framing.encode_response(
                    API_VERSIONS_KEY, 0, header.correlation_id, response))
                return
            log.info("closing %s: %s", self.id, exc)
            request_log.closed(self.id, self.principal, f"unsupported request: {exc}", header)
            self.close()
            return
        except DecodeError as exc:
            log.info("closing %s: malformed request: %s", self.id, exc)
            request_log.closed(self.id, self.principal, f"malformed request: {exc}")
            self.close()
            return
        sasl = self.sasl
        if sasl is not None and sasl.complete:
            if sasl.expired():
                log.info("closing %s: its SASL session expired (connections.max.reauth.ms) "
                         "without re-authentication", self.id)
                request_log.closed(self.id, self.principal, "SASL session expired", header)
                self.close()
                return
            if header.request_api_key == SASL_HANDSHAKE_KEY and sasl.begin_reauthentication():
                log.debug("%s: re-authentication of %s begins", self.id, sasl.principal)
        if sasl is not None and not sasl.complete:
            if not sasl.accepts(header.request_api_key):
                log.info("closing %s: unexpected request %d during SASL %s (state %s)", self.id,
                         header.request_api_key, "handshake" if sasl.mechanism is None
                         else "authentication", sasl.state)
                request_log.closed(self.id, self.principal, "request out of SASL order", header)
                self.close()
                return
            if header.request_api_key == API_VERSIONS_KEY:
                sasl.on_api_versions()
        ctx = RequestContext(header, self, self.listener.name, received, self.principal)
        timing = RequestTiming(arrived_ns, received)
        CURRENT_REQUEST.set(timing)  # this connection's task: remote waits add to it
        quotas = self.server.client_quotas
        if quotas is not None and (not quotas.enabled
                                   or self.listener.name in self.server.unquoted_listeners):
            quotas = None
        try:
            if quotas is not None and quotas.request.enabled:
                response, handler_ns = await _timed_dispatch(self.server.dispatcher, ctx,
                                                             request)
            else:
                handler_ns = 0
                response = self.server.dispatcher(ctx, request)
                if isinstance(response, Awaitable):
                    response = await response
        except ConnectionCloseRequest as exc:
            if exc.response is not None:
                self.server.request_metrics.count_errors(
                    header.request_api_key, header.request_api_version, exc.response)
            log.info("closing %s: %s", self.id, exc)
            request_log.closed(self.id, self.principal, str(exc), header)
            self.close()
            return
        if quotas is not None:
            response = self._apply_quotas(quotas, header, request, response, len(frame),
                                          handler_ns)
        if response is None or self.closing:
            return
        api_key, version = header.request_api_key, header.request_api_version
        self.server.request_metrics.count_errors(api_key, version, response)
        local_done = time.monotonic_ns()
        if response.HAS_RECORDS:  # fetch: records may be file regions to sendfile
            chunks = framing.encode_response_chunks(api_key, version, header.correlation_id, response)
            await self._write_chunks(chunks)
        else:
            await self._write(framing.encode_response(api_key, version, header.correlation_id, response))
        self.server.request_metrics.record(api_key, version, timing, local_done, self.id,
                                           header.client_id, request)
        if request_log.enabled():
            request_log.completed(header, self.id, self.listener.name,
                                  self.listener.security_protocol, self.principal,
                                  self.peer_host, timing.arrived_ns)
        if sasl is not None:
            self._after_sasl_step(sasl)

    def _apply_quotas(self, quotas: Any, header: Any, request: Any, response: Any,
                      request_bytes: int, handler_ns: int) -> Any:
        throttle_ms, response = quotas.throttle(
            header.request_api_key, self.principal, header.client_id, request, response,
            request_bytes, handler_ns)
        # An answer may come throttled already: a controller mutation quota, counted on the
        # active controller (here, or where the request was forwarded).
        own_ms = getattr(response, "throttle_time_ms", 0) if response is not None else 0
        if throttle_ms > own_ms:
            if hasattr(response, "throttle_time_ms"):
                response.throttle_time_ms = throttle_ms
        else:
            throttle_ms = own_ms
        if throttle_ms > 0:
            self.throttle(throttle_ms)
        return response

    def throttle(self, throttle_ms: int) -> None:
        """Mute this connection for `throttle_ms` once the current answer is sent."""
        self.throttled_until = max(self.throttled_until,
                                   time.monotonic() + throttle_ms / 1000)

    async def _sit_out_throttle(self) -> None:
        """KIP-219: no reading and no processing while throttled (the answer went out)."""
        remaining = self.throttled_until - time.monotonic()
        self.throttled_until = 0.0
        if remaining <= 0 or self.closing:
            return
        paused_here = not self.reading_paused
        if paused_here:
            self.reading_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
        try:
            await asyncio.sleep(remaining)
        finally:
            if paused_here and not self.closing and len(self.queue) < MAX_QUEUED_FRAMES:
                self.reading_paused = False
                self.transport.resume_reading()  # type: ignore[union-attr]

    def _after_sasl_step(self, sasl: SaslSession) -> bool:
        """After a response during authentication: close on failure (the answer is written
        first, as Kafka sends it before closing), lift the pre-authentication frame limit on
        success. False when the connection closes."""
        if sasl.failed:
            log.info("Failed authentication with %s (%s)", self.id, sasl.failure)
            self.close()
            return False
        if sasl.complete and sasl.principal != self.principal:
            self.principal = sasl.principal
            self.frames.max_frame_size = self.server.max_request_size
            log.debug("%s authenticated as %s (%s)", self.id, sasl.principal, sasl.mechanism)
        return True

    async def _handle_raw_token(self, frame: Any) -> None:
        """A bare SASL token (after SaslHandshake v0), answered with a bare token; a failed
        exchange just closes the connection (v0 has no way to say why)."""
        sasl = self.sasl
        assert sasl is not None
        answer, _error = sasl.evaluate(bytes(frame))
        if answer is not None:
            await self._write(len(answer).to_bytes(4, "big") + answer)
        self._after_sasl_step(sasl)

    async def _write(self, data: bytes) -> None:
        if self.closing:
            raise ConnectionError("connection closed")
        self.transport.write(data)  # type: ignore[union-attr]
        if not self.writable.is_set():
            await self.writable.wait()

    async def _write_chunks(self, chunks: list[Any]) -> None:
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                await self._write(chunk)  # type: ignore[arg-type]
            else:
                await self._send_region(chunk)

    async def _send_region(self, region: Any) -> None:
        """Send a file region: zero-copy sendfile while the socket takes it, copying through
        the transport's buffer only while the socket is full."""
        length = len(region)
        if length == 0:
            return
        if not self.sendfile_ok:
            await self._copy_region(region)
            return
        file_fd = region.file.fileno()
        offset = region.position
        end = offset + length
        transport = self.transport
        while offset < end:
            if self.closing:
                raise ConnectionError("connection closed")
            if transport.get_write_buffer_size() == 0:  # type: ignore[union-attr]
                try:
                    sent = os.sendfile(self.sock_fd, file_fd, offset, end - offset)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError as exc:
                    raise ConnectionError(str(exc)) from exc
                if sent > 0:
                    offset += sent
                    continue
            chunk = os.pread(file_fd, min(SENDFILE_COPY_CHUNK, end - offset), offset)
            if not chunk:
                raise ConnectionError("file region shorter than expected")
            offset += len(chunk)
            await self._write(chunk)

    async def _copy_region(self, region: Any) -> None:
        """A file region through the transport (TLS): read and written in large chunks."""
        file_fd = region.file.fileno()
        offset, end = region.position, region.position + len(region)
        while offset < end:
            chunk = os.pread(file_fd, min(TLS_READ_CHUNK, end - offset), offset)
            if not chunk:
                raise ConnectionError("file region shorter than expected")
            offset += len(chunk)
            await self._write(chunk)


class TlsConnection(Connection, asyncio.BufferedProtocol):
    """A connection on a TLS listener. As a `BufferedProtocol` it has the SSL layer decrypt
    straight into its buffers (`SSLObject.read(n, buffer)`): the rest of a large frame (a
    produce request) lands in that frame's own buffer, anything else in one reused scratch
    buffer. Clients such as librdkafka send each slice of a request as its own ~2 KB TLS
    record; read as `data_received` bytes every record would cost a 256 KiB allocation and a
    join in the SSL layer and another copy here."""

    def __init__(self, server: NetworkServer, listener: ListenerConfig) -> None:
        super().__init__(server, listener)
        self._scratch = memoryview(bytearray(TLS_RECEIVE_BUFFER))
        self._into_frame = False  # the last buffer handed out was the large frame's

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self.frames.receive_buffer()
        self._into_frame = view is not None
        return view if view is not None else self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_frame:
            self.frames.received(nbytes)
        else:
            self.frames.feed(self._scratch[:nbytes])
        self._take_frames()


class _TimedSteps:
    """Drives a coroutine and adds up the time spent running it, leaving out the time it
    waits (a purgatory, another connection's turn): the request's handler time, as Kafka's
    request quota counts thread time rather than latency."""

    __slots__ = ("coroutine", "nanos")

    def __init__(self, coroutine: Any) -> None:
        self.coroutine = coroutine
        self.nanos = 0

    def __await__(self) -> Any:
        steps = self.coroutine.__await__()
        send: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = steps.throw(error) if error is not None else steps.send(send)
            except StopIteration as done:
                self.nanos += time.perf_counter_ns() - started
                return done.value
            except BaseException:
                self.nanos += time.perf_counter_ns() - started
                raise
            self.nanos += time.perf_counter_ns() - started
            try:
                send, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001 - e.g. cancellation: the handler's
                send, error = None, exc


async def _timed_dispatch(dispatcher: Dispatcher, ctx: RequestContext,
                          request: Any) -> tuple[Any, int]:
    """(the response, the handler's running time in ns)."""
    started = time.perf_counter_ns()
    response = dispatcher(ctx, request)
    nanos = time.perf_counter_ns() - started
    if isinstance(response, Awaitable):
        if asyncio.iscoroutine(response):
            timed = _TimedSteps(response)
            response = await timed
            nanos += timed.nanos
        else:
            response = await response
    return response, nanos


@dataclass
class ListenerConfig:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"
    # TLS context and SASL settings (None: plaintext without authentication)
    security: ListenerSecurity | None = None

    @property
    def ssl_context(self) -> Any:
        return self.security.ssl_context if self.security is not None else None


@dataclass
class NetworkServer:
    """All listeners of one broker process."""

    dispatcher: Dispatcher
    unsupported_version_response: UnsupportedVersionResponder
    max_request_size: int = 104857600
    idle_timeout_ms: int = 600000
    sendfile_enabled: bool = True
    ssl_handshake_timeout_s: float = 60.0
    connections: set[Connection] = field(default_factory=set)
    servers: list[asyncio.base_events.Server] = field(default_factory=list)
    bound_ports: dict[str, int] = field(default_factory=dict)
    request_metrics: RequestMetrics = field(default_factory=RequestMetrics)
    # Client quotas (`server.client_quotas.ClientQuotas`) and connection limits
    # (`server.connection_quotas.ConnectionQuotas`); none on a listener in unquoted_listeners.
    client_quotas: Any = None
    connection_quotas: Any = None
    unquoted_listeners: frozenset[str] = frozenset()
    # authorizer.class.name's authorizer (None: every request is allowed), read by each
    # request's context
    authorizer: StandardAuthorizer | None = None
    _reaper: asyncio.Task | None = None

    async def start(self, listeners: list[ListenerConfig]) -> None:
        loop = asyncio.get_running_loop()
        for listener in listeners:
            if listener.ssl_context is not None:
                acceptor = _TlsAcceptor(self, listener)
                self.servers.append(acceptor)  # type: ignore[arg-type]
                self.bound_ports[listener.name] = acceptor.port
                continue
            server = await loop.create_server(
                lambda listener=listener: Connection(self, listener),
                host=listener.host or None,
                port=listener.port,
                reuse_address=True,
                backlog=1024,
            )
            self.servers.append(server)
            self.bound_ports[listener.name] = server.sockets[0].getsockname()[1]
        if self._reaper is None:  # listeners may open in steps (a node's controller first)
            self._reaper = loop.create_task(self._reap_idle())

    async def _reap_idle(self) -> None:
        idle_s = self.idle_timeout_ms / 1000
        interval = max(0.05, min(idle_s / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            cutoff = time.monotonic() - idle_s
            for conn in list(self.connections):
                # A connection waiting on its own request (a long poll) is not idle.
                if conn.last_active < cutoff and not conn.queue and not conn.handling:
                    log.debug("closing idle connection %s", conn.id)
                    conn.close()

    async def stop(self, grace_s: float = 5.0) -> None:
        for server in self.servers:
            server.close()
        if self._reaper is not None:
            self._reaper.cancel()
        # Let requests already being handled finish, within the grace period.
        deadline = time.monotonic() + grace_s
        for conn in list(self.connections):
            conn.queue.append(None)
            conn.wakeup.set()
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.close()
        for server in self.servers:
            await server.wait_closed()


class _TlsAcceptor:
    """A TLS listener: accepts connections and completes each one's handshake before its
    `Connection` starts, so that a failed handshake is logged at INFO as Kafka logs it
    ("Failed authentication with ... (SSL handshake failed)") rather than dropped silently
    by the event loop's server."""

    def __init__(self, server: NetworkServer, listener: ListenerConfig) -> None:
        self.server = server
        self.listener = listener
        self.sock = _listening_socket(listener.host, listener.port)
        self.port = self.sock.getsockname()[1]
        self._handshakes: set[asyncio.Task[None]] = set()
        self._task = asyncio.get_running_loop().create_task(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(self.sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # e.g. out of file descriptors: keep serving the others
                log.warning("listener %s: accept failed: %s", self.listener.name, exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._handshake(conn, address))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, conn: socket.socket, address: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(
                lambda: TlsConnection(self.server, self.listener), conn,
                ssl=self.listener.ssl_context,
                # A handshake that stalls is an idle connection too (Kafka's selector closes
                # any channel idle for connections.max.idle.ms, in handshake or not).
                ssl_handshake_timeout=min(self.server.ssl_handshake_timeout_s,
                                          self.server.idle_timeout_ms / 1000))
        except asyncio.CancelledError:
            conn.close()
            raise
        except (OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else (
                str(exc) or type(exc).__name__)
            peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else address
            log.info("Failed authentication with %s-%s (SSL handshake failed: %s)",
                     self.listener.name, peer, reason)
            conn.close()

    def close(self) -> None:
        self._task.cancel()
        for task in list(self._handshakes):
            task.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(self._task, *self._handshakes, return_exceptions=True)


def _listening_socket(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket on `host` (every interface when empty)."""
    if host:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=1024)
    elif socket.has_dualstack_ipv6():
        sock = socket.create_server(("", port), family=socket.AF_INET6, backlog=1024,
                                    dualstack_ipv6=True)
    else:
        sock = socket.create_server(("", port), backlog=1024)
    sock.setblocking(False)
    return sock
