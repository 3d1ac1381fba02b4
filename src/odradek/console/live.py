"""Live tail: a topic's new records pushed to the browser as they arrive, as server-sent events.

`/topic/live` is the page; its few lines of JavaScript open an `EventSource` on
`/topic/live/stream`, which answers with an endless `text/event-stream`:

* `ready`: the stream's consumer has its positions at the end of the partitions (records
  produced from now on will be shown); data `{"partitions": [...]}`.
* `records`: a batch of new records, decoded as the message browser decodes them; data
  `{"records": [{partition, offset, timestamp, key, value, headers}], "skipped": N}`. A batch
  carries at most the page's row limit (the page keeps no more), `skipped` counts the older
  records of the batch left out.
* `failure`: the stream ended on an error (data `{"message": ...}`); the page stops.

The page inserts every field with `textContent`, never as markup. Each stream holds exactly one
consumer without a group, from the end; it is closed when the browser goes away (the poll loop
sees the connection gone every `POLL_MS`, and a write to it fails), when the console shuts down,
or on an error. At most `MAX_LIVE_STREAMS` streams run at once (more get 503).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from odradek.client import TopicPartition
from odradek.console.app import (
    SERVICE,
    choice_param,
    int_param,
    render,
    str_param,
)
from odradek.console.service import ENCODINGS, PAGE_TIMEOUT_MS, ConsoleService, decode

log = logging.getLogger(__name__)

#: Concurrent live streams of one console (each holds a consumer and its connections).
MAX_LIVE_STREAMS = 16
#: Rows a live page keeps by default and at most.
DEFAULT_LIVE_ROWS = 100
MAX_LIVE_ROWS = 1000
#: How long one poll waits for records: also how soon a vanished browser or a shutdown is seen.
POLL_MS = 500
#: A comment line sent on an idle stream, so proxies keep it open and a dead peer is found.
KEEPALIVE_S = 15.0


class LiveTail:
    """One browser's live stream: one consumer without a group, from the end of `topic`'s
    partitions (all, or just `partition`)."""

    def __init__(self, service: ConsoleService, topic: str, partition: int | None,
                 encoding: str, max_rows: int) -> None:
        self.service = service
        self.topic = topic
        self.partition = partition
        self.encoding = encoding
        self.max_rows = max_rows
        self.partitions: list[TopicPartition] = []
        # "latest": should retention delete the position, carry on from the end
        self.consumer = service.consumer(auto_offset_reset="latest")
        self.closed = False

    async def start(self) -> list[int]:
        """Assigns the partitions at their end and waits until the positions are known, so
        every record produced after this returns is shown."""
        description = (await self.service.admin.describe_topics(
            [self.topic], timeout_ms=PAGE_TIMEOUT_MS))[self.topic]
        numbers = sorted(p.partition for p in description.partitions)
        if self.partition is not None:
            if self.partition not in numbers:
                raise LookupError(f"topic {self.topic} has no partition {self.partition}")
            numbers = [self.partition]
        self.partitions = [TopicPartition(self.topic, p) for p in numbers]
        self.consumer.assign(self.partitions)
        self.consumer.seek_to_end(self.partitions)
        for tp in self.partitions:
            await self.consumer.position(tp, timeout_ms=PAGE_TIMEOUT_MS)
        return numbers

    async def poll(self) -> dict[str, Any] | None:
        """The next batch as the `records` event's data, or None when none came."""
        records = await self.consumer.poll(POLL_MS)
        if not records:
            return None
        shown = records[-self.max_rows:]
        return {
            "records": [{"partition": r.partition, "offset": r.offset,
                         "timestamp": r.timestamp,
                         "key": decode(r.key, self.encoding),
                         "value": decode(r.value, self.encoding),
                         "headers": [[name, decode(value, self.encoding)]
                                     for name, value in r.headers]}
                        for r in shown],
            "skipped": len(records) - len(shown),
        }

    async def close(self) -> None:
        try:
            await self.consumer.close()
        finally:
            self.closed = True


LIVE_TAILS: web.AppKey[set[LiveTail]] = web.AppKey("live_tails", set)
LIVE_STOPPING: web.AppKey[asyncio.Event] = web.AppKey("live_stopping", asyncio.Event)


def _query(request: web.Request) -> tuple[str, int | None, str, int]:
    query = request.query
    name = str_param(query, "name")
    partition = int_param(query, "partition", None, minimum=0)
    encoding = choice_param(query, "encoding", ENCODINGS, "text")
    rows = int_param(query, "rows", DEFAULT_LIVE_ROWS, minimum=1, maximum=MAX_LIVE_ROWS)
    assert rows is not None
    return name, partition, encoding, rows


async def live_page(request: web.Request) -> web.Response:
    name, partition, encoding, rows = _query(request)
    return render(request, "live.html", name=name, partition=partition, encoding=encoding,
                  encodings=ENCODINGS, rows=rows)


def _event(kind: str, data: Any) -> bytes:
    # json.dumps escapes newlines inside strings, so the data is one SSE line
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


async def live_stream(request: web.Request) -> web.StreamResponse:
    name, partition, encoding, rows = _query(request)
    tails = request.app[LIVE_TAILS]
    if len(tails) >= MAX_LIVE_STREAMS:
        raise web.HTTPServiceUnavailable(
            text=f"at most {MAX_LIVE_STREAMS} live streams at once; close one")
    tail = LiveTail(request.app[SERVICE], name, partition, encoding, rows)
    tails.add(tail)
    try:
        # before the response starts, an error (unknown topic or partition) is an error page
        partitions = await tail.start()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(_event("ready", {"partitions": partitions}))
        log.info("live tail of %s partitions %s started", name, partitions)
        await _pump(request, response, tail)
        return response
    finally:
        tails.discard(tail)
        await tail.close()
        log.info("live tail of %s ended; its consumer is closed", name)


async def _pump(request: web.Request, response: web.StreamResponse, tail: LiveTail) -> None:
    """Sends batches until the browser goes away, the console stops or an error."""
    stopping = request.app[LIVE_STOPPING]
    loop = asyncio.get_running_loop()
    last_write = loop.time()
    try:
        while _connected(request) and not stopping.is_set():
            batch = await tail.poll()
            if batch is not None:
                await response.write(_event("records", batch))
                last_write = loop.time()
            elif loop.time() - last_write >= KEEPALIVE_S:
                await response.write(b": keepalive\n\n")
                last_write = loop.time()
    except ConnectionResetError:  # the browser went away mid-write
        pass
    except Exception as exc:  # noqa: BLE001 -- the response has started: tell the page
        log.warning("live tail of %s failed: %s", tail.topic, exc)
        if _connected(request):
            try:
                await response.write(_event("failure", {"message": str(exc)}))
            except ConnectionResetError:
                pass


def setup(app: web.Application) -> None:
    """The live tail's routes, and its end at shutdown (an open stream would otherwise hold
    the server's shutdown until its timeout)."""
    app[LIVE_TAILS] = set()
    app[LIVE_STOPPING] = asyncio.Event()

    async def stop_streams(app: web.Application) -> None:
        app[LIVE_STOPPING].set()

    app.on_shutdown.append(stop_streams)
    app.add_routes([web.get("/topic/live", live_page),
                    web.get("/topic/live/stream", live_stream)])
