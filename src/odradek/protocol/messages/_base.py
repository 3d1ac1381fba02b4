"""Base classes of the generated message classes.

The generated modules supply, per message, one encoder and one decoder function per valid
version (straight-line code specialised for that version); this module holds the version
dispatch, the translation of low-level failures into protocol errors, and the generic
``__eq__``/``__repr__`` (not on any hot path).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, Self

from odradek.protocol.errors import DecodeError, UnsupportedVersionError
from odradek.protocol.primitives import DECODE_FAILURES, Reader

__all__ = ["UNSET", "Message", "Struct", "as_view", "merge_chunks"]

_BUFFER_TYPES = (bytes, bytearray, memoryview)


class _Unset:
    """Default of constructor arguments for which None is a legal value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


UNSET: Any = _Unset()


def as_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A one-dimensional byte memoryview over `data` (no copy)."""
    view = data if type(data) is memoryview else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def merge_chunks(chunks: list[Any]) -> list[Any]:
    """Join each run of consecutive buffers into one bytes object; other objects (file
    regions) stay as they are."""
    merged: list[Any] = []
    run: list[Any] = []
    for chunk in chunks:
        if isinstance(chunk, _BUFFER_TYPES):
            if len(chunk):
                run.append(chunk)
        else:
            if run:
                merged.append(run[0] if len(run) == 1 and type(run[0]) is bytes else b"".join(run))
                run = []
            merged.append(chunk)
    if run:
        merged.append(run[0] if len(run) == 1 and type(run[0]) is bytes else b"".join(run))
    return merged


class Struct:
    """A generated struct: slots for its fields plus ``unknown_tagged_fields``."""

    __slots__ = ()
    #: Field attribute names in spec order (without ``unknown_tagged_fields``).
    _FIELDS: ClassVar[tuple[str, ...]] = ()
    _FIELD_VERSIONS: ClassVar[dict[str, tuple[int, int | None]]] = {}

    def fields_at(self, version: int) -> list[str]:
        """The fields this struct has at `version` of its message."""
        out = []
        for name in self._FIELDS:
            low, high = self._FIELD_VERSIONS.get(name, (0, None))
            if low <= version and (high is None or version <= high):
                out.append(name)
        return out
    unknown_tagged_fields: dict[int, bytes] | None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in self._FIELDS:
            if getattr(self, name) != getattr(other, name):
                return False
        return (self.unknown_tagged_fields or None) == (other.unknown_tagged_fields or None)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = [f"{name}={_short_repr(getattr(self, name))}" for name in self._FIELDS]
        if self.unknown_tagged_fields:
            parts.append(f"unknown_tagged_fields={self.unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"


def _short_repr(value: Any) -> str:
    if type(value) is memoryview:
        return f"<memoryview of {value.nbytes} bytes>"
    if isinstance(value, (bytes, bytearray)) and len(value) > 64:
        return f"<{type(value).__name__} of {len(value)} bytes>"
    return repr(value)


class Message(Struct):
    """A top-level spec (request, response, header, data or metadata record)."""

    __slots__ = ()
    NAME: ClassVar[str]
    #: "request", "response", "header", "data" or "metadata".
    SPEC_TYPE: ClassVar[str]
    #: The API key (requests/responses) or record type (metadata records); None otherwise.
    API_KEY: ClassVar[int | None] = None
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    #: First flexible version, None when no version is flexible.
    FLEXIBLE_MIN: ClassVar[int | None]
    #: True when the message has a `records` field somewhere (see `encode_chunks`).
    HAS_RECORDS: ClassVar[bool] = False
    _ENCODERS: ClassVar[tuple[Callable[..., None], ...]]
    _DECODERS: ClassVar[tuple[Callable[[memoryview, int], tuple[Any, int]], ...]]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN

    @classmethod
    def _check_version(cls, version: int) -> int:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise UnsupportedVersionError(
                f"{cls.NAME} supports versions {cls.MIN_VERSION}-{cls.MAX_VERSION}, not {version}"
            )
        return version - cls.MIN_VERSION

    # ------------------------------------------------------------------------------ encoding

    def write_to(self, out: bytearray, chunks: list[Any], version: int) -> None:
        """Append the body at `version` to `out`; see `encode_chunks` for `chunks`."""
        encoder = self._ENCODERS[self._check_version(version)]
        try:
            encoder(out, chunks, self)
        except (struct.error, ValueError) as exc:  # out-of-range or refused values
            raise ValueError(f"{self.NAME} v{version}: {exc}") from exc

    def encode(self, version: int) -> bytes:
        """The body (no header, no size prefix) at `version`."""
        out = bytearray()
        chunks: list[Any] = []
        self.write_to(out, chunks, version)
        if not chunks:
            return bytes(out)
        chunks.append(out)
        try:
            return b"".join(chunks)
        except TypeError:
            raise TypeError(
                f"{self.NAME}: a records value is not a buffer; use encode_chunks()"
            ) from None

    def encode_chunks(self, version: int) -> list[Any]:
        """The body as a list: records values that are not buffers (file regions to be sent
        with sendfile) are elements of their own, everything else is joined into as few bytes
        objects as possible."""
        out = bytearray()
        chunks: list[Any] = []
        self.write_to(out, chunks, version)
        chunks.append(out)
        return merge_chunks(chunks)

    # ------------------------------------------------------------------------------ decoding

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        """Decode a whole body; trailing bytes are an error. `records` fields come back as
        memoryview slices of `data`."""
        decoder = cls._DECODERS[cls._check_version(version)]
        view = as_view(data)
        try:
            message, pos = decoder(view, 0)
        except DECODE_FAILURES as exc:
            raise DecodeError(f"{cls.NAME} v{version}: {exc}") from exc
        if pos != len(view):
            raise DecodeError(f"{cls.NAME} v{version}: {len(view) - pos} trailing bytes")
        return message

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        """Decode from `reader`'s position and advance it; bytes after the body are left."""
        decoder = cls._DECODERS[cls._check_version(version)]
        try:
            message, reader.pos = decoder(reader.buf, reader.pos)
        except DECODE_FAILURES as exc:
            raise DecodeError(f"{cls.NAME} v{version}: {exc}") from exc
        return message
