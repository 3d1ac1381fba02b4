"""One TCP connection to a broker: framing, pipelining, timeouts, ApiVersions negotiation.

Many requests may be in flight at once. Kafka brokers answer a connection's requests in the
order they arrived, so responses are matched to the oldest outstanding request, and the
correlation id is checked against it (a mismatch means the stream is broken and closes the
connection). A request that gets no answer within its timeout closes the connection, failing
everything else in flight on it with a retriable `KafkaConnectionError`, as Kafka's client does:
later responses could otherwise be matched to the wrong request.

The connection is an asyncio Protocol (no reader task): bytes go through the sans-I/O
`FrameBuffer`, and responses are decoded and handed to their waiters in ``data_received``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import socket
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek import __version__
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError
from odradek.protocol import framing
from odradek.protocol.errors import ErrorCode, KafkaError, ProtocolError
from odradek.protocol.messages import (
    API_BY_KEY,
    ApiVersionsRequest,
    ApiVersionsResponse,
    Message,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from odradek.security.oauthbearer import client_initial_response, unsecured_token
from odradek.security.scram import SaslFailure, ScramClient, plain_client_token

__all__ = ["CLIENT_SOFTWARE_NAME", "Connection"]

if TYPE_CHECKING:
    from odradek.client.security import SaslCredentials

log = logging.getLogger("odradek.client.connection")

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
CLIENT_SOFTWARE_NAME = "odradek-python"
# Largest response frame accepted; Kafka's client has no limit of its own, this one only
# guards against a peer that is not a Kafka broker (e.g. an HTTP server answering).
DEFAULT_MAX_RESPONSE_SIZE = 1 << 30
_CLOSE_WAIT_S = 1.0


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    api_version: int
    future: asyncio.Future[Message]  # cancelled when the caller stopped waiting


class _Protocol(asyncio.Protocol):
    """Forwards transport events to the `Connection` (kept off its public surface)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def data_received(self, data: bytes) -> None:
        self.connection._on_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection._on_connection_lost(exc)

    def pause_writing(self) -> None:
        self.connection._write_paused = True

    def resume_writing(self) -> None:
        self.connection._write_paused = False
        self.connection._wake_writers(None)


class Connection:
    """A connection to one broker. Create with `Connection.open(...)` (or construct, then
    `await connect()`); send with `await send(request)`; `await close()` when done."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int | None = None,
        client_id: str | None = None,
        request_timeout_ms: float = 30_000,
        connect_timeout_ms: float = 10_000,
        max_in_flight: int | None = None,
        max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.host = host
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        #: api key -> (min version, max version) the broker supports, after `connect`.
        self.api_versions: dict[int, tuple[int, int]] = {}
        #: The broker's whole ApiVersions response (features), after `connect`.
        self.api_versions_response: ApiVersionsResponse | None = None
        #: monotonic time of the last request sent or response received
        self.last_used = time.monotonic()
        #: monotonic time until which the broker throttles this connection (KIP-219: it
        #: answered with throttle_time_ms and reads nothing more from us until then)
        self.throttled_until = 0.0
        self._frames = framing.FrameBuffer(max_response_size)
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._slots = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        self._correlation_id = 0
        self._transport: asyncio.Transport | None = None
        self._write_paused = False
        self._write_waiters: list[asyncio.Future[None]] = []
        self._close_error: KafkaError | None = None
        self._closed = asyncio.Event()
        self._ready = False
        self._not_reauthenticating = asyncio.Event()
        self._not_reauthenticating.set()
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(cls, host: str, port: int, **options: Any) -> Connection:
        """Connect and negotiate API versions; raises `KafkaConnectionError` on failure."""
        connection = cls(host, port, **options)
        await connection.connect()
        return connection

    def __repr__(self) -> str:
        state = "ready" if self.ready else "closed" if self.closed else "connecting"
        return f"<Connection node={self.node_id} {self.host}:{self.port} {state}>"

    @property
    def describe(self) -> str:
        node = "-1" if self.node_id is None else str(self.node_id)
        return f"node {node} ({self.host}:{self.port})"

    @property
    def ready(self) -> bool:
        """Connected, versions negotiated, not closed."""
        return self._ready and not self.closed

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._in_flight)

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                transport, _ = await loop.create_connection(
                    lambda: _Protocol(self), self.host, self.port, ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context is not None else None,
                )
        except (OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else str(exc)
            self._closed.set()
            raise KafkaConnectionError(f"Connection to {self.describe} failed: {reason}") from exc
        self._transport = transport  # type: ignore[assignment]
        self._set_socket_options()
        try:
            await self._negotiate_api_versions()
        except BaseException as exc:
            self._abort(KafkaConnectionError(f"ApiVersions negotiation with {self.describe} "
                                             f"failed: {exc}"))
            raise
        if self.sasl is not None:
            try:
                await self._authenticate(self.sasl)
            except BaseException as exc:
                error = exc if isinstance(exc, KafkaError) else KafkaConnectionError(
                    f"SASL authentication with {self.describe} failed: {exc}")
                self._abort(error)  # type: ignore[arg-type]
                raise
        self._ready = True

    async def _authenticate(self, sasl: SaslCredentials) -> None:
        """SaslHandshake v1, then SaslAuthenticate rounds (PLAIN: one; SCRAM: two). When the
        broker gives the session a lifetime (KIP-368), re-authenticate before it ends."""
        async def call(request: Message, api_key: int, min_version: int = 0) -> Any:
            # Straight to the wire: during a re-authentication `send` holds other requests.
            version = self.pick_version(api_key, min_version=min_version)
            return await self._send(request, api_key, version, None, True)

        handshake = await call(SaslHandshakeRequest(mechanism=sasl.mechanism),
                               SASL_HANDSHAKE_KEY, min_version=1)
        if handshake.error_code != ErrorCode.NONE:
            raise KafkaError(handshake.error_code,
                             f"SASL mechanism {sasl.mechanism} is not enabled on "
                             f"{self.describe} (it offers {handshake.mechanisms})")
        lifetime_ms = 0

        async def exchange(token: bytes) -> bytes:
            nonlocal lifetime_ms
            response = await call(SaslAuthenticateRequest(auth_bytes=token),
                                  SASL_AUTHENTICATE_KEY)
            if response.error_code != ErrorCode.NONE:
                raise KafkaError(response.error_code, response.error_message)
            lifetime_ms = response.session_lifetime_ms or 0
            return bytes(response.auth_bytes or b"")

        try:
            if sasl.mechanism == "PLAIN":
                await exchange(plain_client_token(sasl.username, sasl.password))
            elif sasl.mechanism == "OAUTHBEARER":
                challenge = await exchange(client_initial_response(unsecured_token(sasl.username)))
                if challenge:  # the broker refused the token: acknowledge, then it fails
                    await exchange(b"\x01")
                    raise SaslFailure(f"OAUTHBEARER token refused: {challenge.decode()}")
            else:
                client = ScramClient(sasl.mechanism, sasl.username, sasl.password)
                server_first = await exchange(client.first())
                client.verify(await exchange(client.final(server_first)))
        except SaslFailure as exc:
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None
        if lifetime_ms > 0:
            # Kafka's client: at a random point between 85% and 95% of the lifetime.
            delay_s = lifetime_ms / 1000 * random.uniform(0.85, 0.95)
            self._reauth_timer = asyncio.get_running_loop().call_later(
                delay_s, self._start_reauthentication, sasl)

    def _start_reauthentication(self, sasl: SaslCredentials) -> None:
        self._reauth_timer = None
        if not self.closed:
            self._reauth_task = asyncio.get_running_loop().create_task(self._reauthenticate(sasl))

    async def _reauthenticate(self, sasl: SaslCredentials) -> None:
        self._not_reauthenticating.clear()
        try:
            await self._authenticate(sasl)
            log.debug("re-authenticated with %s", self.describe)
        except Exception as exc:  # noqa: BLE001 - any failure ends the connection
            self._abort(KafkaConnectionError(
                f"Re-authentication with {self.describe} failed: {exc}"))
        finally:
            self._not_reauthenticating.set()

    def _set_socket_options(self) -> None:
        sock = self._transport.get_extra_info("socket") if self._transport else None
        if sock is None:
            return
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        except OSError:  # best effort: buffer sizes are hints
            log.debug("could not set socket options on %s", self.describe, exc_info=True)

    async def close(self) -> None:
        """Close the connection; requests still in flight fail with KafkaConnectionError."""
        if self.closed:
            return
        transport = self._transport
        self._fail_all(KafkaConnectionError(f"Connection to {self.describe} closed by the client"))
        if transport is not None:
            transport.close()  # flushes what is buffered, then connection_lost
            try:
                async with asyncio.timeout(_CLOSE_WAIT_S):
                    await self._closed.wait()
            except TimeoutError:
                transport.abort()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # ------------------------------------------------------------------------------ versions

    async def _negotiate_api_versions(self) -> None:
        """Send the newest ApiVersions we know; on UNSUPPORTED_VERSION the broker's v0 answer
        names its own ApiVersions range, and we retry once at the best common version."""
        spec = API_BY_KEY[API_VERSIONS_KEY]
        request = ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=__version__
        )
        version = spec.max_version
        while True:
            response: ApiVersionsResponse = await self.send(request, api_version=version)
            if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
                ranges = {key.api_key: key.max_version for key in response.api_keys}
                fallback = min(spec.max_version, ranges.get(API_VERSIONS_KEY, 0))
                if fallback >= version:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                     f"{self.describe} rejected ApiVersions v{version}")
                version = fallback
                continue
            if response.error_code != ErrorCode.NONE:
                raise KafkaError(response.error_code)
            self.api_versions = {
                key.api_key: (key.min_version, key.max_version) for key in response.api_keys
            }
            self.api_versions_response = response
            return

    def supports(self, api_key: int, version: int | None = None) -> bool:
        """Whether both sides support `api_key` (at `version`, when given)."""
        try:
            high = self.pick_version(api_key)
        except KafkaError:
            return False
        return version is None or (self._common_range(api_key)[0] <= version <= high)

    def _common_range(self, api_key: int) -> tuple[int, int]:
        spec = API_BY_KEY[api_key]
        broker_low, broker_high = self.api_versions.get(api_key, (0, -1))
        return max(spec.min_version, broker_low), min(spec.max_version, broker_high)

    def pick_version(
        self, api_key: int, min_version: int | None = None, max_version: int | None = None
    ) -> int:
        """The highest version of `api_key` both this client and the broker support, within
        [min_version, max_version] when given; KafkaError(UNSUPPORTED_VERSION) if none."""
        spec = API_BY_KEY.get(api_key)
        if spec is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"unknown api key {api_key}")
        if api_key not in self.api_versions:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"The broker {self.describe} does not support {spec.name}")
        low, high = self._common_range(api_key)
        if min_version is not None:
            low = max(low, min_version)
        if max_version is not None:
            high = min(high, max_version)
        if low > high:
            broker_low, broker_high = self.api_versions[api_key]
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"The broker {self.describe} supports {spec.name} versions "
                f"{broker_low}-{broker_high}, none of which this call can use",
            )
        return high

    # ------------------------------------------------------------------------------ requests

    async def send(
        self,
        request: Message,
        *,
        api_version: int | None = None,
        timeout_ms: float | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Send `request` and wait for its response (decoded at the version sent).

        `api_version` defaults to `pick_version`. `timeout_ms` defaults to the connection's
        request timeout; when it passes, the connection is closed and `KafkaTimeoutError`
        raised. With ``expect_response=False`` (Produce with acks=0) nothing is awaited and
        None returned.
        """
        api_key = request.API_KEY
        if api_key is None:
            raise TypeError(f"{type(request).__name__} is not a request")
        if api_version is None:
            api_version = self.pick_version(api_key)
        self._check_open()
        if not self._not_reauthenticating.is_set():
            # KIP-368: no request may reach the broker in the middle of a re-authentication.
            await self._not_reauthenticating.wait()
            self._check_open()
        if self._slots is not None:
            await self._slots.acquire()
        try:
            delay = self.throttled_until - time.monotonic()
            if delay > 0:
                # As Kafka's clients: nothing goes to a broker that throttles us until the
                # throttle time it gave is over (it would not read it anyway).
                await asyncio.sleep(delay)
                self._check_open()
            return await self._send(request, api_key, api_version, timeout_ms, expect_response)
        finally:
            if self._slots is not None:
                self._slots.release()

    async def _send(
        self,
        request: Message,
        api_key: int,
        api_version: int,
        timeout_ms: float | None,
        expect_response: bool,
    ) -> Any:
        self._check_open()
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        frame = framing.encode_request(api_key, api_version, correlation_id, self.client_id,
                                       request)
        future: asyncio.Future[Message] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._in_flight.append(_InFlight(correlation_id, api_key, api_version, future))
        # Enqueueing and writing happen without a suspension point in between, so frames go
        # out in the order of `_in_flight`.
        self._transport.write(frame)  # type: ignore[union-attr]
        self.last_used = time.monotonic()
        if self._write_paused:
            try:
                await self._wait_writable()
            except BaseException:
                if future is not None:
                    _discard(future)
                raise
        if future is None:
            return None
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        try:
            async with asyncio.timeout(timeout / 1000):
                # Cancelling this await (timeout, or the caller cancelled) cancels `future`;
                # its response, when it comes, is then read and dropped.
                return await future
        except TimeoutError:
            name = API_BY_KEY[api_key].name
            self._abort(KafkaConnectionError(
                f"Disconnected from {self.describe}: {name} request (correlation id "
                f"{correlation_id}) got no response within {timeout:g} ms"))
            raise KafkaTimeoutError(
                f"{name} request to {self.describe} timed out after {timeout:g} ms") from None

    def _check_open(self) -> None:
        if self.closed or self._transport is None:
            raise self._close_error or KafkaConnectionError(
                f"Connection to {self.describe} is not open")

    async def _wait_writable(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._write_waiters.append(waiter)
        await waiter

    def _wake_writers(self, error: BaseException | None) -> None:
        waiters, self._write_waiters = self._write_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    # ------------------------------------------------------------------------------ responses

    def _on_data(self, data: bytes) -> None:
        self.last_used = time.monotonic()
        try:
            self._frames.feed(data)
            while (frame := self._frames.next_frame()) is not None:
                self._on_frame(frame)
        except ProtocolError as exc:
            self._abort(KafkaConnectionError(f"Invalid response from {self.describe}: {exc}"))

    def _on_frame(self, frame: bytes | memoryview) -> None:
        if not self._in_flight:
            raise ProtocolError("a response arrived with no request in flight")
        entry = self._in_flight.popleft()
        correlation_id = framing.peek_correlation_id(frame)
        if correlation_id != entry.correlation_id:
            self._in_flight.appendleft(entry)  # fail it with the others
            raise ProtocolError(f"Correlation id for response ({correlation_id}) does not "
                                f"match request ({entry.correlation_id})")
        future = entry.future
        if future.done():
            return  # the caller stopped waiting
        try:
            response = self._decode(frame, entry)
        except ProtocolError as exc:
            future.set_exception(KafkaConnectionError(
                f"Invalid {API_BY_KEY[entry.api_key].name} response from {self.describe}: {exc}"))
            raise
        throttle_ms = getattr(response, "throttle_time_ms", 0)
        if throttle_ms and throttle_ms > 0:
            self.throttled_until = max(self.throttled_until,
                                       time.monotonic() + throttle_ms / 1000)
        future.set_result(response)

    @staticmethod
    def _decode(frame: bytes | memoryview, entry: _InFlight) -> Message:
        try:
            return framing.decode_response(frame, entry.api_key, entry.api_version)[1]
        except ProtocolError:
            # A broker that does not know our ApiVersions version answers at v0 (KIP-511).
            if entry.api_key != API_VERSIONS_KEY or entry.api_version == 0:
                raise
            return framing.decode_response(frame, API_VERSIONS_KEY, 0)[1]

    # ------------------------------------------------------------------------------ failure

    def _fail_all(self, error: KafkaError) -> None:
        """Mark the connection failed with `error` and fail every waiter (idempotent)."""
        if self._close_error is None:
            self._close_error = error
        self._ready = False
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        self._not_reauthenticating.set()  # waiting senders see the connection closed
        in_flight, self._in_flight = self._in_flight, collections.deque()
        for entry in in_flight:
            if not entry.future.done():
                entry.future.set_exception(self._close_error)
        self._wake_writers(self._close_error)

    def _abort(self, error: KafkaError) -> None:
        """Drop the connection at once (the stream can no longer be trusted)."""
        if self._close_error is None:
            log.info("%s", error.message)
        self._fail_all(error)
        if self._transport is not None:
            self._transport.abort()
        self._closed.set()

    def _on_connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self._fail_all(KafkaConnectionError(
            f"Connection to {self.describe} was closed by the peer{reason}"))
        self._closed.set()


def _discard(future: asyncio.Future[Any]) -> None:
    """Give up on `future` without an unretrieved-exception warning."""
    if not future.done():
        future.cancel()
    elif not future.cancelled():
        future.exception()
