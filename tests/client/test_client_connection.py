"""Connection: ApiVersions negotiation, pipelining, timeouts and failures, against a scripted
peer on loopback."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from fake_broker import CLOSE, NO_RESPONSE, FakeBroker, run

from odradek.client import Connection, KafkaConnectionError, KafkaError, KafkaTimeoutError
from odradek.client.connection import CLIENT_SOFTWARE_NAME
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

METADATA = 3


def topics_request(*names: str) -> m.MetadataRequest:
    return m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=n)
                                     for n in names])


def echo_topics(header, request):
    """Answer a Metadata request with the topic names it asked for."""
    return m.MetadataResponse(topics=[
        m.MetadataResponse.MetadataResponseTopic(name=t.name) for t in request.topics])


def names_of(response: m.MetadataResponse) -> list[str]:
    return [t.name for t in response.topics]


def test_negotiates_versions_and_picks_the_highest_common_one():
    async def scenario():
        versions = {18: (0, 4), METADATA: (1, 9), 19: (2, 4)}
        async with FakeBroker(echo_topics, api_versions=versions) as broker:
            connection = await Connection.open(broker.host, broker.port, client_id="tester")
            try:
                header, request = broker.requests[0]
                assert header.request_api_key == 18 and header.request_api_version == 4
                assert header.client_id == "tester"
                assert request.client_software_name == CLIENT_SOFTWARE_NAME
                assert connection.api_versions[METADATA] == (1, 9)
                assert connection.pick_version(METADATA) == 9
                assert connection.pick_version(METADATA, max_version=4) == 4
                assert connection.pick_version(19) == 4
                assert connection.supports(METADATA) and not connection.supports(75)
                with pytest.raises(KafkaError) as info:
                    connection.pick_version(75)
                assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
                with pytest.raises(KafkaError):
                    connection.pick_version(METADATA, min_version=10)
                response = await connection.send(topics_request("a"))
                assert names_of(response) == ["a"]
                assert broker.requests[-1][0].request_api_version == 9
            finally:
                await connection.close()

    run(scenario())


def test_api_versions_falls_back_to_the_version_the_broker_names():
    async def scenario():
        versions = {18: (0, 2), METADATA: (0, 12)}
        async with FakeBroker(echo_topics, api_versions=versions) as broker:
            connection = await Connection.open(broker.host, broker.port)
            try:
                sent = [h.request_api_version for h, _ in broker.requests_of(18)]
                assert sent == [4, 2]
                assert connection.ready
                assert connection.api_versions == versions
                assert connection.pick_version(METADATA) == 12
            finally:
                await connection.close()

    run(scenario())


def test_requests_are_pipelined_and_matched_in_order():
    count = 50

    async def scenario():
        async def held(header, request):
            # Answer nothing until every request is on the wire: proves they were pipelined.
            while broker.arrived < count + 1:  # + ApiVersions
                await asyncio.sleep(0.005)
            return echo_topics(header, request)

        async with FakeBroker(held) as broker:
            connection = await Connection.open(broker.host, broker.port)
            try:
                responses = await asyncio.gather(*(
                    connection.send(topics_request(f"topic-{i}")) for i in range(count)))
                assert [names_of(r) for r in responses] == [[f"topic-{i}"] for i in range(count)]
                ids = [h.correlation_id for h, _ in broker.requests_of(METADATA)]
                assert len(set(ids)) == count
                assert connection.in_flight == 0
            finally:
                await connection.close()

    run(scenario())


def test_max_in_flight_bounds_outstanding_requests():
    async def scenario():
        outstanding = 0
        peak = 0

        async def slow(header, request):
            nonlocal outstanding, peak
            # Requests are answered one by one; count those sent but unanswered.
            outstanding = broker.arrived - 1 - answered[0]
            peak = max(peak, outstanding)
            await asyncio.sleep(0.01)
            answered[0] += 1
            return echo_topics(header, request)

        answered = [0]
        async with FakeBroker(slow) as broker:
            connection = await Connection.open(broker.host, broker.port, max_in_flight=2)
            try:
                await asyncio.gather(*(connection.send(topics_request(str(i))) for i in range(10)))
            finally:
                await connection.close()
        assert 1 <= peak <= 2

    run(scenario())


def test_timeout_closes_the_connection_and_fails_other_requests():
    async def scenario():
        async def handler(header, request):
            if names_of_request(request) == ["slow"]:
                await asyncio.sleep(3600)  # a stuck broker: nothing after it is answered either
            return echo_topics(header, request)

        async with FakeBroker(handler) as broker:
            connection = await Connection.open(broker.host, broker.port, request_timeout_ms=300)
            started = time.monotonic()
            slow = asyncio.ensure_future(connection.send(topics_request("slow")))
            # Queued behind "slow": the broker answers in order, so it never gets an answer.
            behind = asyncio.ensure_future(
                connection.send(topics_request("behind"), timeout_ms=5_000))
            with pytest.raises(KafkaTimeoutError):
                await slow
            with pytest.raises(KafkaConnectionError):
                await behind
            elapsed = time.monotonic() - started
            assert 0.25 <= elapsed < 3
            assert connection.closed and not connection.ready
            with pytest.raises(KafkaConnectionError):
                await connection.send(topics_request("after"))

    run(scenario())


def names_of_request(request: m.MetadataRequest) -> list[str]:
    return [t.name for t in request.topics]


def test_requests_without_response_do_not_disturb_matching():
    async def scenario():
        def handler(header, request):
            return NO_RESPONSE if names_of_request(request) == ["fire-and-forget"] else \
                echo_topics(header, request)

        async with FakeBroker(handler) as broker:
            connection = await Connection.open(broker.host, broker.port)
            try:
                assert await connection.send(topics_request("fire-and-forget"),
                                             expect_response=False) is None
                response = await connection.send(topics_request("next"))
                assert names_of(response) == ["next"]
            finally:
                await connection.close()

    run(scenario())


def test_a_cancelled_request_leaves_the_connection_usable():
    async def scenario():
        release = asyncio.Event()

        async def handler(header, request):
            if names_of_request(request) == ["first"]:
                await release.wait()
            return echo_topics(header, request)

        async with FakeBroker(handler) as broker:
            connection = await Connection.open(broker.host, broker.port)
            try:
                first = asyncio.ensure_future(connection.send(topics_request("first")))
                await asyncio.sleep(0.05)
                first.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await first
                release.set()
                response = await connection.send(topics_request("second"))
                assert names_of(response) == ["second"]
                assert connection.ready
            finally:
                await connection.close()

    run(scenario())


def test_a_correlation_id_mismatch_breaks_the_connection():
    async def scenario():
        async with FakeBroker(echo_topics) as broker:
            connection = await Connection.open(broker.host, broker.port)
            broker.correlation_skew = 7
            with pytest.raises(KafkaConnectionError, match="Correlation id"):
                await connection.send(topics_request("x"))
            assert connection.closed

    run(scenario())


def test_peer_closing_fails_requests_in_flight():
    async def scenario():
        async with FakeBroker(lambda h, r: CLOSE) as broker:
            connection = await Connection.open(broker.host, broker.port)
            with pytest.raises(KafkaConnectionError, match="closed by the peer"):
                await connection.send(topics_request("x"))
            await asyncio.wait_for(connection.wait_closed(), 2)
            assert connection.closed

    run(scenario())


def test_close_fails_requests_in_flight():
    async def scenario():
        async with FakeBroker(lambda h, r: NO_RESPONSE) as broker:
            connection = await Connection.open(broker.host, broker.port)
            pending = asyncio.ensure_future(connection.send(topics_request("x")))
            await asyncio.sleep(0.05)
            await connection.close()
            with pytest.raises(KafkaConnectionError, match="closed by the client"):
                await pending

    run(scenario())


def test_connection_refused_is_a_connection_error():
    async def scenario():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        # Nothing listens on `port` now.
        with pytest.raises(KafkaConnectionError, match="failed"):
            await Connection.open("127.0.0.1", port)

    run(scenario())


def test_a_peer_that_never_answers_api_versions_times_out():
    async def scenario():
        async with FakeBroker(api_versions={18: (5, 5)}) as broker:
            # The fake answers ApiVersions only inside its range; (5, 5) with our max 3
            # makes it send the UNSUPPORTED_VERSION answer naming 5, which is no fallback.
            with pytest.raises(KafkaError) as info:
                await Connection.open(broker.host, broker.port, request_timeout_ms=500)
            assert info.value.code == ErrorCode.UNSUPPORTED_VERSION

        silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = silent.sockets[0].getsockname()[1]
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            await Connection.open("127.0.0.1", port, request_timeout_ms=300)
        assert time.monotonic() - started < 3
        silent.close()

    run(scenario())


def test_waits_out_the_brokers_throttle_time_before_the_next_request():
    """KIP-219: an answer with throttle_time_ms makes the connection hold its next request
    for that long (the broker would not read it anyway)."""
    arrivals: list[float] = []

    def throttling(header, request):
        arrivals.append(time.monotonic())
        return m.MetadataResponse(throttle_time_ms=300 if len(arrivals) == 1 else 0,
                                  brokers=[], topics=[])

    async def scenario():
        async with FakeBroker(throttling) as broker:
            connection = await Connection.open(broker.host, broker.port)
            first = await connection.send(topics_request())
            assert first.throttle_time_ms == 300
            await connection.send(topics_request())
            await connection.close()
    run(scenario())
    assert arrivals[1] - arrivals[0] >= 0.29
