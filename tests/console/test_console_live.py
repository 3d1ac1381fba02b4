"""The console's live tail and its lag and throughput charts, against a real broker (with its
Prometheus metrics on) and a real `odradek console` process sampling every 300 ms, driven in
headless Chromium (fixtures in conftest.py): records produced after the live page opened
appear on it, escaped and bounded; the group page's lag chart shows the committed lag; the
throughput charts move with produced records. Without a browser: a closed stream closes its
consumer, a shutdown ends open streams, and the sampler's rates and lags are exact under an
injected clock.

One broker, one console and one browser for the module (CI time)."""

from __future__ import annotations

import asyncio
import concurrent.futures

import aiohttp
import pytest
from aiohttp import web
from broker_process import BrokerProcess, free_port
from console_process import CHROMIUM, ConsoleProcess

from odradek.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from odradek.clock import ManualClock
from odradek.console.app import TEMPLATES, make_app
from odradek.console.charts import NOT_SAMPLED
from odradek.console.live import LIVE_TAILS
from odradek.console.sampler import SAMPLER, Sampler
from odradek.console.service import ConsoleService

LIVE_TOPIC = "ticks"  # 2 partitions, tailed live
LAG_TOPIC = "backlog"  # GROUP lags on it
RATE_TOPIC = "metered"  # throughput
IDLE_TOPIC = "idle"  # no records: a rate of 0
GROUP = "lagging"
BACKLOG, COMMITTED = 10, 4
XSS = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"
SAMPLE_MS = 300

browser_test = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: install Debian's chromium (`make chromium`) to run the "
           "console's browser tests")


def produce(bootstrap: str, topic: str, values: list[bytes], *, partitions: int = 1,
            key: bytes | None = None, headers: list[tuple[str, bytes]] | None = None) -> None:
    """Sends `values` round-robin over `partitions`, and waits for every acknowledgement."""
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        futures = [producer.send(topic, value, key=key, partition=i % partitions,
                                 headers=headers or [])
                   for i, value in enumerate(values)]
        for future in futures:
            future.get(30)


@pytest.fixture(scope="module")
def metrics_url():
    return f"http://127.0.0.1:{free_port()}/metrics"


@pytest.fixture(scope="module")
def broker(tmp_path_factory, metrics_url):
    listener = metrics_url.removesuffix("/metrics")
    broker = BrokerProcess(tmp_path_factory.mktemp("live-broker"),
                           {"metrics.prometheus.listener": listener}).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def seeded(broker):
    """The topics; records already in LIVE_TOPIC (the live tail must not show them); GROUP
    committed COMMITTED of BACKLOG records of LAG_TOPIC."""
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(LIVE_TOPIC, 2, 1), NewTopic(LAG_TOPIC, 1, 1),
                             NewTopic(RATE_TOPIC, 1, 1), NewTopic(IDLE_TOPIC, 1, 1)])
    produce(broker.bootstrap, LIVE_TOPIC, [b"old-0", b"old-1"], partitions=2)
    produce(broker.bootstrap, LAG_TOPIC, [b"%d" % i for i in range(BACKLOG)])
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                   "enable.auto.commit": False}) as consumer:
        consumer.assign([TopicPartition(LAG_TOPIC, 0)])
        consumer.commit({TopicPartition(LAG_TOPIC, 0): COMMITTED})
    return broker


@pytest.fixture(scope="module")
def console(seeded, metrics_url, tmp_path_factory):
    process = ConsoleProcess(tmp_path_factory.mktemp("live-console"), seeded.bootstrap,
                             "--sample-interval-ms", str(SAMPLE_MS), "--metrics-url",
                             metrics_url)
    yield process.url
    process.stop()


def run_async(scenario):
    """asyncio.run(scenario()) in a thread of its own: Playwright's sync API keeps an event
    loop running in the test's thread while the module's browser is open."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, scenario()).result(timeout=120)


def wait_for_series(page, chart: str, series: str, *, positive: bool = False) -> dict:
    """Waits (bounded by the page's default timeout) until `chart` (refreshed by the page
    itself) draws `series` (with a maximum above 0 when `positive`); its data attributes."""
    selector = f'#{chart} polyline.series[data-series="{series}"]'
    page.wait_for_function(
        """([selector, positive]) => {
             const line = document.querySelector(selector);
             return line !== null && (!positive || Number(line.dataset.max) > 0);
           }""", arg=[selector, positive])
    line = page.locator(selector)
    return {"last": float(line.get_attribute("data-last")),
            "max": float(line.get_attribute("data-max"))}


@browser_test
def test_live_tail_shows_new_records_escaped_and_bounded(console, seeded, page, shots):
    page.goto(console + f"/topic/live?name={LIVE_TOPIC}&rows=4")
    page.wait_for_selector("#live-status[data-state=live]")  # positions at the end are known
    ticks = [f"tick-{i}".encode() for i in range(6)]
    produce(seeded.bootstrap, LIVE_TOPIC, ticks, partitions=2, key=b"k")
    # markup everywhere a record has text, produced last to partition 0
    produce(seeded.bootstrap, LIVE_TOPIC, [XSS.encode()], key=XSS.encode(),
            headers=[(XSS, XSS.encode())])
    page.wait_for_function("document.getElementById('live-count').textContent === '7'")
    rows = page.locator("#live-records tbody tr").all_inner_texts()
    assert len(rows) == 4  # the page keeps its last `rows`
    assert not any("old-" in row for row in rows)  # from the end: nothing produced before
    # XSS is partition 0's last record: at most partition 1's three come after it
    markup_rows = [row for row in rows if XSS in row]
    assert len(markup_rows) == 1 and markup_rows[0].count(XSS) == 4  # key, value, header
    partitions = page.locator("#live-records tbody td:first-child").all_inner_texts()
    assert {p.strip() for p in partitions} <= {"0", "1"}
    assert page.locator("#live-records td.ts").first.inner_text().endswith("Z")
    assert page.locator("#live-records script, #live-records img").count() == 0
    assert page.evaluate("window.__xss") is None
    shots(page, "live-tail")

    page.click("#live-pause")  # the page closes its stream
    assert page.locator("#live-status").get_attribute("data-state") == "paused"


@browser_test
def test_group_lag_chart(console, page, shots):
    page.goto(console + f"/group?id={GROUP}")
    total = wait_for_series(page, "lag-chart", "total")
    assert total == {"last": BACKLOG - COMMITTED, "max": BACKLOG - COMMITTED}
    assert page.locator("#lag-chart .y-label").text_content() == "messages behind"
    assert page.locator("#lag-chart .x-label").text_content() == "time (UTC)"
    assert page.locator("#lag-chart .x-tick").count() == 4
    shots(page, "group-lag-chart")


@browser_test
def test_throughput_charts(console, seeded, page, shots):
    page.goto(console + f"/topic?name={RATE_TOPIC}")
    assert page.locator("#throughput-chart .y-label").text_content() == "messages/s"
    produce(seeded.bootstrap, RATE_TOPIC, [b"x" * 100] * 200)
    assert wait_for_series(page, "throughput-chart", "messages in", positive=True)["max"] > 0
    assert wait_for_series(page, "bytes-chart", "bytes in", positive=True)["max"] > 100
    shots(page, "topic-throughput")

    page.goto(console + "/")
    assert wait_for_series(page, "throughput-chart", RATE_TOPIC, positive=True)["max"] > 0
    assert wait_for_series(page, "throughput-chart", IDLE_TOPIC)["max"] == 0
    wait_for_series(page, "bytes-chart", RATE_TOPIC, positive=True)
    shots(page, "overview-throughput")


def test_closing_the_stream_closes_its_consumer(seeded):
    """The browser going away ends the server's stream and closes its consumer; a console
    shutting down ends the streams still open, promptly."""

    async def read_until_ready(response: aiohttp.ClientResponse) -> None:
        async with asyncio.timeout(20):
            while (line := await response.content.readline()) != b"event: ready\n":
                assert line, "the stream ended before it was ready"

    async def wait_closed(tails: set, tail) -> None:
        async with asyncio.timeout(10):
            while tails or not tail.closed:
                await asyncio.sleep(0.05)

    async def scenario() -> None:
        app = make_app({"bootstrap.servers": seeded.bootstrap}, sample_interval_ms=60_000)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        tails = app[LIVE_TAILS]
        stopped = False
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(base + "/topic/live/stream?name=no-such-topic") as missing:
                    assert missing.status == 404
                assert not tails

                response = await http.get(base + f"/topic/live/stream?name={LIVE_TOPIC}")
                assert response.headers["Content-Type"] == "text/event-stream"
                await read_until_ready(response)
                (tail,) = tails
                assert not tail.closed
                response.close()  # the browser goes away
                await wait_closed(tails, tail)

                response = await http.get(base + f"/topic/live/stream?name={LIVE_TOPIC}"
                                                 "&partition=1")
                await read_until_ready(response)
                (tail,) = tails
                loop = asyncio.get_running_loop()
                started = loop.time()
                await runner.cleanup()
                stopped = True
                assert tail.closed and not tails
                assert loop.time() - started < 5
                response.close()
        finally:
            if not stopped:
                await runner.cleanup()

    run_async(scenario)


def test_sampler_rates_and_lag(seeded, metrics_url):
    """Two samples 2 s apart on an injected clock: messages/s is the log end's growth over
    them, bytes/s comes from the broker's counters, lag is log end minus committed."""
    records = 40

    async def scenario() -> Sampler:
        clock = ManualClock()
        service = ConsoleService({"bootstrap.servers": seeded.bootstrap})
        sampler = Sampler(service, 1000, [metrics_url], clock=clock)
        try:
            async with aiohttp.ClientSession() as http:
                await sampler.sample(http)
                await asyncio.to_thread(produce, seeded.bootstrap, RATE_TOPIC,
                                        [b"y" * 50] * records)
                clock.advance(2000)
                await sampler.sample(http)
        finally:
            await service.close()
        return sampler

    sampler = run_async(scenario)
    assert sampler.samples == 2
    (_, rate), = sampler.messages_in.get(RATE_TOPIC)  # a rate needs two samples
    assert rate == records / 2
    assert sampler.messages_in.get(IDLE_TOPIC)[-1][1] == 0
    (_, bytes_in), = sampler.bytes_in.get(RATE_TOPIC)
    assert bytes_in >= records * 50 / 2  # the batches hold at least the values
    assert sampler.group_lag.get(GROUP)[-1][1] == BACKLOG - COMMITTED
    assert sampler.group_topic_lag[GROUP].get(LAG_TOPIC)[-1][1] == BACKLOG - COMMITTED


def test_no_sampling_while_users_log_in(seeded):
    """With SASL the console has no clients of its own: no sampler, and the pages say so
    instead of charting."""

    async def scenario() -> None:
        app = make_app({"bootstrap.servers": seeded.bootstrap,
                        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            assert SAMPLER not in app
            assert app[TEMPLATES].globals["chart"]("lag", GROUP) == NOT_SAMPLED
            assert app[TEMPLATES].globals["chart"]("bytes") == ""
        finally:
            await runner.cleanup()

    run_async(scenario)
