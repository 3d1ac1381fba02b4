"""A scripted Kafka peer on 127.0.0.1 for connection-layer unit tests of the client.

It speaks real framing (the protocol package's codec) and answers requests one at a time in
arrival order, as a Kafka broker does; tests script the answers with a handler. It exists to
test the client's own logic (pipelining, timeouts, version fallback, failures), not broker
behaviour: admin and CLI tests run against the real broker.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Self

from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, UnsupportedVersionError

#: handler result meaning "send no response to this request"
NO_RESPONSE = object()
#: handler result meaning "close the connection now"
CLOSE = object()

Handler = Callable[[Any, Any], Any]


class FakeBroker:
    def __init__(
        self,
        handler: Handler | None = None,
        *,
        api_versions: dict[int, tuple[int, int]] | None = None,
        node_id: int = 1,
    ) -> None:
        self.handler = handler
        self.node_id = node_id
        #: api key -> (min, max) advertised; default: every API at the codec's full range
        self.api_versions = api_versions or {
            key: (spec.min_version, spec.max_version) for key, spec in m.API_BY_KEY.items()
        }
        #: (header, request) of every request received, in order
        self.requests: list[tuple[Any, Any]] = []
        self.connections = 0
        #: frames received (counted on arrival, before they are answered)
        self.arrived = 0
        self.server: asyncio.Server | None = None
        self.host = "127.0.0.1"
        self.port = 0
        #: correlation id offset added to responses (to simulate a broken peer)
        self.correlation_skew = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in self._writers:
                writer.close()
            await self.server.wait_closed()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def requests_of(self, api_key: int) -> list[tuple[Any, Any]]:
        return [(h, r) for h, r in self.requests if h.request_api_key == api_key]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read frames as they come (counting arrivals) while answering them in order."""
        self.connections += 1
        self._writers.append(writer)
        frames = framing.FrameBuffer(1 << 26)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        answering = asyncio.ensure_future(self._answer_all(queue, writer))
        try:
            try:
                while data := await reader.read(65536):
                    frames.feed(data)
                    while (frame := frames.next_frame()) is not None:
                        self.arrived += 1
                        queue.put_nowait(frame)
            except ConnectionError:
                pass
            queue.put_nowait(None)
            await asyncio.wait([answering], timeout=5)
        except asyncio.CancelledError:
            pass  # the server is closing; not re-raised: asyncio's stream callback would log it
        finally:
            answering.cancel()
            writer.close()

    async def _answer_all(self, queue: asyncio.Queue[bytes | None],
                          writer: asyncio.StreamWriter) -> None:
        while (frame := await queue.get()) is not None:
            try:
                if not await self._answer(frame, writer):
                    writer.close()
                    return
            except ConnectionError:
                return

    async def _answer(self, frame: bytes, writer: asyncio.StreamWriter) -> bool:
        try:
            header, request = framing.decode_request(frame)
        except UnsupportedVersionError as exc:
            header = exc.header
            self.requests.append((header, None))
            if header.request_api_key != 18:
                return False
            low, high = self.api_versions[18]
            response = m.ApiVersionsResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION,
                api_keys=[m.ApiVersionsResponse.ApiVersion(api_key=18, min_version=low,
                                                           max_version=high)])
            writer.write(framing.encode_response(18, 0, header.correlation_id, response))
            return True
        self.requests.append((header, request))
        key, version = header.request_api_key, header.request_api_version
        if key == 18:
            low, high = self.api_versions[18]
            if not low <= version <= high:
                response = m.ApiVersionsResponse(
                    error_code=ErrorCode.UNSUPPORTED_VERSION,
                    api_keys=[m.ApiVersionsResponse.ApiVersion(api_key=18, min_version=low,
                                                               max_version=high)])
                writer.write(framing.encode_response(18, 0, header.correlation_id, response))
                return True
            response = self.api_versions_response()
        else:
            response = self.handler(header, request) if self.handler else None
            if inspect.isawaitable(response):
                response = await response
        if response is CLOSE:
            writer.close()
            return False
        if response is NO_RESPONSE or response is None:
            return True
        writer.write(framing.encode_response(
            key, version, header.correlation_id + self.correlation_skew, response))
        await writer.drain()
        return True

    def api_versions_response(self) -> m.ApiVersionsResponse:
        return m.ApiVersionsResponse(api_keys=[
            m.ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(self.api_versions.items())
        ])


def metadata_response(
    brokers: list[tuple[int, str, int]],
    topics: dict[str, dict[int, int]] | None = None,
    *,
    controller_id: int = 1,
    requested: list[str] | None = None,
) -> m.MetadataResponse:
    """A Metadata response: `topics` maps name -> {partition: leader}; names in `requested`
    that are not in `topics` come back as UNKNOWN_TOPIC_OR_PARTITION."""
    topics = topics or {}
    R = m.MetadataResponse
    out = []
    names = list(topics) if requested is None else requested
    for name in names:
        if name not in topics:
            out.append(R.MetadataResponseTopic(
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
            continue
        out.append(R.MetadataResponseTopic(name=name, partitions=[
            R.MetadataResponsePartition(partition_index=p, leader_id=leader, leader_epoch=0,
                                        replica_nodes=[leader], isr_nodes=[leader])
            for p, leader in sorted(topics[name].items())
        ]))
    return R(
        brokers=[R.MetadataResponseBroker(node_id=i, host=h, port=p) for i, h, p in brokers],
        cluster_id="fake-cluster",
        controller_id=controller_id,
        topics=out,
    )


def requested_topics(request: m.MetadataRequest) -> list[str] | None:
    return None if request.topics is None else [t.name for t in request.topics]


def run(coroutine: Any, timeout: float = 20.0) -> Any:
    """Run a test coroutine on a fresh event loop, failing it after `timeout` seconds."""

    async def bounded() -> Any:
        async with asyncio.timeout(timeout):
            return await coroutine

    return asyncio.run(bounded())
