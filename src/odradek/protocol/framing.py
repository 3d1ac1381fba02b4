"""Request/response framing: int32 size prefix, request and response headers, and a sans-I/O
`FrameBuffer` that cuts a byte stream into frames (the h11 way: feed bytes, pull frames).

Header versions follow `request_header_version`/`response_header_version` (ApiVersions
responses always use header v0). Frames passed to the
decode functions are without the size prefix, as `FrameBuffer.next_frame` returns them.
"""

from __future__ import annotations

import struct
from typing import Any

from odradek.protocol.errors import DecodeError, FrameTooLargeError, UnsupportedVersionError
from odradek.protocol.messages import (
    API_BY_KEY,
    Message,
    RequestHeader,
    ResponseHeader,
    request_header_version,
    response_header_version,
)
from odradek.protocol.messages._base import as_view, merge_chunks
from odradek.protocol.primitives import Reader, records_length

__all__ = [
    "FrameBuffer",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_chunks",
    "peek_correlation_id",
]

_SIZE = struct.Struct(">i")
_API_KEY_AND_VERSION = struct.Struct(">hh")
_CORRELATION_ID = struct.Struct(">i")
_API_VERSIONS_KEY = 18


# ------------------------------------------------------------------------------------------------
# requests


def _guess_header_version(api_key: int, api_version: int) -> int:
    """Header version of a request we may not support: known APIs follow their flexible range
    (open ended, so a too-new ApiVersions request still parses as v2); unknown ones v1."""
    try:
        return request_header_version(api_key, api_version)
    except UnsupportedVersionError:
        return 1


def decode_request_header(frame: bytes | memoryview) -> tuple[RequestHeader, Reader]:
    """Parse the request header; returns it and a `Reader` positioned at the body.

    The header is parsed even when the API key or version is unknown (see `decode_request`).
    """
    reader = Reader(as_view(frame))
    if len(reader.buf) < 4:
        raise DecodeError("request frame shorter than its api key and version")
    api_key, api_version = _API_KEY_AND_VERSION.unpack_from(reader.buf, 0)
    header = RequestHeader.read(reader, _guess_header_version(api_key, api_version))
    return header, reader


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, Message]:
    """Decode a whole request frame into (header, request body).

    Raises `UnsupportedVersionError` with the parsed header in ``.header`` when the API key or
    version is unknown, so the broker can still answer; `DecodeError` for malformed bytes.
    Bytes after the body are ignored, as Kafka does.
    """
    header, reader = decode_request_header(frame)
    spec = API_BY_KEY.get(header.request_api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown api key {header.request_api_key}", header=header)
    if not spec.supports(header.request_api_version):
        raise UnsupportedVersionError(
            f"{spec.name} v{header.request_api_version} is not supported "
            f"(versions {spec.min_version}-{spec.max_version})",
            header=header,
        )
    return header, spec.request.read(reader, header.request_api_version)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    request: Message,
) -> bytes:
    """A complete request frame: size prefix, header, body."""
    header = RequestHeader(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = bytearray(4)
    header.write_to(out, [], request_header_version(api_key, api_version))
    chunks: list[Any] = []
    request.write_to(out, chunks, api_version)
    if chunks:  # large records were kept out of `out`; `out` holds the tail
        chunks.append(out)
        return _join_with_size(chunks)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# ------------------------------------------------------------------------------------------------
# responses


def _response_start(api_key: int, api_version: int, correlation_id: int) -> bytearray:
    """Size placeholder + response header."""
    out = bytearray(4)
    out += _CORRELATION_ID.pack(correlation_id)
    if response_header_version(api_key, api_version) >= 1:
        out.append(0)  # empty tagged-field section
    return out


def encode_response(
    api_key: int, api_version: int, correlation_id: int, response: Message
) -> bytes:
    """A complete response frame: size prefix, the right response header, body."""
    chunks = encode_response_chunks(api_key, api_version, correlation_id, response)
    if len(chunks) == 1:
        return chunks[0]
    try:
        return b"".join(chunks)
    except TypeError:
        raise TypeError("a records value is not a buffer; use encode_response_chunks()") from None


def encode_response_chunks(
    api_key: int, api_version: int, correlation_id: int, response: Message
) -> list[Any]:
    """The response frame as a list of bytes objects and pass-through records objects (file
    regions for sendfile); the size prefix counts every chunk's length (``len()``)."""
    out = _response_start(api_key, api_version, correlation_id)
    chunks: list[Any] = []
    response.write_to(out, chunks, api_version)
    if not chunks:
        _SIZE.pack_into(out, 0, len(out) - 4)
        return [bytes(out)]
    chunks.append(out)
    total = sum(records_length(chunk) for chunk in chunks) - 4
    first = chunks[0] = bytearray(chunks[0])
    _SIZE.pack_into(first, 0, total)
    return merge_chunks(chunks)


def decode_response(
    frame: bytes | memoryview, api_key: int, api_version: int
) -> tuple[int, Message]:
    """Decode a response frame (without size prefix) to (correlation_id, response body)."""
    spec = API_BY_KEY.get(api_key)
    if spec is None or not spec.supports(api_version):
        raise UnsupportedVersionError(f"api key {api_key} v{api_version} is not supported")
    reader = Reader(as_view(frame))
    header = ResponseHeader.read(reader, response_header_version(api_key, api_version))
    return header.correlation_id, spec.response.read(reader, api_version)


def peek_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id of a response frame (its first four bytes), without decoding it."""
    if len(frame) < 4:
        raise DecodeError("response frame shorter than a correlation id")
    return _CORRELATION_ID.unpack_from(frame, 0)[0]


# ------------------------------------------------------------------------------------------------
# stream splitting


class FrameBuffer:
    """Splits a byte stream into size-prefixed frames, without doing any I/O.

    ``feed(data)`` appends received bytes; ``next_frame()`` returns the next complete frame
    (without its size prefix) or None when more bytes are needed. A declared size that is
    negative or above `max_frame_size` raises `FrameTooLargeError` before anything is buffered
    for it; the stream cannot be resynchronised after that and the connection should close.

    Small frames come back as ``bytes``. A large frame is received straight into a buffer of
    its own size and comes back as a read-only memoryview over it: no regrowing of a shared
    buffer, no copy on the way out, and records decoded from it stay zero-copy slices.
    """

    __slots__ = ("_buffer", "_filled", "_large", "_start", "max_frame_size")

    # Frames from this size on get a buffer of their own.
    _LARGE_FRAME = 1 << 16
    # Compact the shared buffer once this many consumed bytes sit at its front.
    _COMPACT_THRESHOLD = 1 << 16

    def __init__(self, max_frame_size: int) -> None:
        if max_frame_size < 0:
            raise ValueError("max_frame_size must not be negative")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()  # bytes not yet returned (from `_start` on)
        self._start = 0
        self._large: bytearray | None = None  # a large frame being received
        self._filled = 0  # bytes of `_large` received so far

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        large = self._large
        if large is not None and self._filled < len(large):
            view = as_view(data)
            take = min(len(large) - self._filled, len(view))
            large[self._filled : self._filled + take] = view[:take]
            self._filled += take
            data = view[take:]
        if len(data):
            self._buffer += data

    def receive_buffer(self) -> memoryview | None:
        """Where the rest of the large frame being received may be written directly (for a
        `BufferedProtocol.get_buffer`: the bytes skip `feed`'s copy), or None when no large
        frame is under way. Report what was written there with `received`."""
        large = self._large
        if large is None or self._filled >= len(large):
            return None
        return memoryview(large)[self._filled :]

    def received(self, nbytes: int) -> None:
        """`nbytes` were written at the front of the last `receive_buffer()`."""
        self._filled += nbytes

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        pending = self._filled + 4 if self._large is not None else 0
        return pending + len(self._buffer) - self._start

    def next_frame(self) -> bytes | memoryview | None:
        large = self._large
        if large is not None:
            if self._filled < len(large):
                return None
            self._large = None
            return memoryview(large).toreadonly()
        buffer = self._buffer
        start = self._start
        if len(buffer) - start < 4:
            return None
        (size,) = _SIZE.unpack_from(buffer, start)
        if size < 0 or size > self.max_frame_size:
            raise FrameTooLargeError(
                f"frame of {size} bytes declared, the limit is {self.max_frame_size}"
            )
        end = start + 4 + size
        if end > len(buffer):
            if size >= self._LARGE_FRAME:  # receive the rest straight into its own buffer
                large = self._large = bytearray(size)
                with memoryview(buffer) as view:
                    self._filled = len(buffer) - start - 4
                    large[: self._filled] = view[start + 4 :]
                buffer.clear()
                self._start = 0
            return None
        with memoryview(buffer) as view:
            frame = view[start + 4 : end].tobytes()
        if end == len(buffer):
            buffer.clear()
            self._start = 0
        elif end >= self._COMPACT_THRESHOLD:
            del buffer[:end]
            self._start = 0
        else:
            self._start = end
        return frame

    def frames(self) -> list[bytes | memoryview]:
        """Every complete frame currently buffered."""
        result = []
        while (frame := self.next_frame()) is not None:
            result.append(frame)
        return result


def _join_with_size(chunks: list[Any]) -> bytes:
    """Join request chunks whose first element starts with the size placeholder."""
    first = bytearray(chunks[0])
    total = sum(records_length(chunk) for chunk in chunks) - 4
    _SIZE.pack_into(first, 0, total)
    chunks[0] = first
    try:
        return b"".join(chunks)
    except TypeError:
        raise TypeError("a records value is not a buffer") from None
