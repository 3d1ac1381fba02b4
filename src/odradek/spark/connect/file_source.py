"""FileStreamSource's reading as a Spark streaming source: format ``"odradek-connect-file"``.

Tails a text file line by line, like Kafka's FileStreamSourceTask: lines end with ``\\n``,
``\\r\\n`` or ``\\r``; a last line without its terminator waits for it (so does a final
``\\r``, which may be the start of ``\\r\\n``); text is UTF-8 (malformed bytes become U+FFFD).
A missing file is waited for.

The offset is the byte position after the last complete line, ``{"file": path, "position":
n}``, so Spark's checkpoint is the connector's offset storage: a restarted query reads what was
appended while it was stopped, and a micro-batch replayed after a failure reads the same bytes
again. A micro-batch takes at most `MAX_BYTES_PER_BATCH` of new complete lines.

Rows: ``value string`` (the line), ``timestamp timestamp`` (when it was read, as Kafka's task
stamps its records with System.currentTimeMillis()).

Options: ``file`` (required), ``batchSize`` (lines per Arrow batch handed to Spark; Kafka's
``batch.size``, default 2000), ``maxBytesPerBatch``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from odradek.spark.schema import arrow_schema

log = logging.getLogger("odradek.spark.connect")

FORMAT = "odradek-connect-file"
DEFAULT_BATCH_SIZE = 2000
MAX_BYTES_PER_BATCH = 64 * 1024 * 1024
#: bytes read at a time on the executor (lines are cut at the last terminator of a chunk)
READ_CHUNK = 4 * 1024 * 1024

SCHEMA = StructType([StructField("value", StringType(), True),
                     StructField("timestamp", TimestampType(), True)])

_NEWLINE = 0x0A


def complete_lines_end(data: bytes, following: int | None) -> int:
    """How many bytes of `data` are complete lines. `following` is the byte after `data` in
    the file (None at the end of the file): a ``\\r`` ending `data` completes a line only when
    it is known not to be followed by ``\\n`` later, or the ``\\n`` is there."""
    end = len(data)
    while end > 0:
        i = max(data.rfind(b"\n", 0, end), data.rfind(b"\r", 0, end))
        if i < 0:
            return 0
        if data[i] == _NEWLINE:
            return i + 1
        next_byte = data[i + 1] if i + 1 < len(data) else following
        if next_byte is None:
            end = i  # "\r" at the end of the file: maybe "\r\n" once more is written
            continue
        return i + 2 if next_byte == _NEWLINE else i + 1
    return 0


def find_end(path: str, start: int, max_bytes: int, size_limit: int | None = None) -> int:
    """The position after the last complete line at most `max_bytes` after `start` (further
    if the first line is longer) and within the first `size_limit` bytes of the file; `start`
    when there is none."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return start
    if size_limit is not None:
        size = min(size, size_limit)
    if size <= start:
        return start
    with open(path, "rb") as file:
        file.seek(start)
        limit = min(size, start + max_bytes)
        data = file.read(limit - start + 1)  # one byte more: what follows a final "\r"
        while True:
            window, rest = data[:limit - start], data[limit - start:]
            end = complete_lines_end(window, rest[0] if rest else None)
            if end > 0 or limit >= size:
                return start + end  # may include the "\n" of a "\r\n" cut by the limit
            # no line end yet within max_bytes: a longer line, read on
            more = file.read(max_bytes)
            data += more
            limit = min(size, limit + max_bytes)


def split_lines(data: bytes) -> pa.Array:
    """The lines of `data` (complete lines, UTF-8) as an Arrow string array."""
    text = data.decode("utf-8", "replace")
    lines = pc.split_pattern_regex(pa.array([text], pa.large_string()), r"\r\n|\r|\n")
    flat = lines.flatten()
    return flat.slice(0, len(flat) - 1).cast(pa.string())  # the empty text after the last end


class FileRange(InputPartition):
    def __init__(self, path: str, start: int, end: int) -> None:
        super().__init__((path, start, end))
        self.path, self.start, self.end = path, start, end


class FileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["file"]
        self.batch_size = int(options.get("batchsize", DEFAULT_BATCH_SIZE))
        self.max_bytes = int(options.get("maxbytesperbatch", MAX_BYTES_PER_BATCH))
        self._warned_missing = False
        self._available_now_size: int | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to the file's size at this moment."""
        try:
            self._available_now_size = os.path.getsize(self.path)
        except FileNotFoundError:
            self._available_now_size = 0

    def initialOffset(self) -> dict:
        return {"file": self.path, "position": 0}

    def _position(self, offset: dict[str, Any]) -> int:
        """Where `offset` says to continue; offsets of another file start this one at 0."""
        if offset.get("file") != self.path:
            return 0
        return int(offset["position"])

    def latestOffset(self, start: dict, limit: Any) -> dict:
        position = self._position(start)
        if not os.path.exists(self.path):
            if not self._warned_missing:
                log.warning("Couldn't find file %s for FileStreamSourceTask, sleeping to wait "
                            "for it to be created", self.path)
                self._warned_missing = True
            return {"file": self.path, "position": position}
        self._warned_missing = False
        end = find_end(self.path, position, self.max_bytes, self._available_now_size)
        return {"file": self.path, "position": end}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = self._position(start), self._position(end)
        if until <= begin:
            return []
        return [FileRange(self.path, begin, until)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FileRange):
            return
        schema = arrow_schema(SCHEMA)
        with open(partition.path, "rb") as file:
            file.seek(partition.start)
            remaining = partition.end - partition.start
            carry = b""
            while remaining > 0:
                chunk = file.read(min(READ_CHUNK, remaining))
                if not chunk:
                    raise OSError(f"{partition.path} is shorter than the position "
                                  f"{partition.end} recorded for it")
                remaining -= len(chunk)
                data = carry + chunk
                # the range ends at a line end; inside it a chunk is cut at its last one
                cut = len(data) if remaining == 0 else complete_lines_end(data, None)
                carry = data[cut:]
                if cut:
                    yield from self._batches(split_lines(data[:cut]), schema)

    def _batches(self, lines: pa.Array, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        stamp_type = schema.field("timestamp").type
        now = pa.scalar(time.time_ns() // 1000, stamp_type)
        for offset in range(0, len(lines), self.batch_size):
            values = lines.slice(offset, self.batch_size)
            stamps = pa.repeat(now, len(values))
            yield pa.RecordBatch.from_arrays([values, stamps], schema=schema)

    def commit(self, end: dict) -> None:
        """Nothing to do: the position lives in Spark's checkpoint."""


class FileStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = {str(k).lower(): str(v) for k, v in self.options.items()}
        if not options.get("file"):
            raise ValueError("option 'file' is required")
        return FileStreamReader(options)
