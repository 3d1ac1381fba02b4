"""Cluster: bootstrap, metadata cache and refresh rules, connection pool, retries; against
scripted peers on loopback (the client's own logic)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from fake_broker import FakeBroker, metadata_response, requested_topics, run

from odradek.client import (
    ADMIN_CONFIG,
    Cluster,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TopicPartition,
)
from odradek.protocol.errors import ErrorCode

METADATA = 3


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def make_cluster(bootstrap: str, **overrides) -> Cluster:
    config = {"bootstrap.servers": bootstrap, "retry.backoff.ms": 10,
              "retry.backoff.max.ms": 50, "reconnect.backoff.ms": 10,
              "reconnect.backoff.max.ms": 50, **overrides}
    return Cluster(ADMIN_CONFIG.parse(config))


class TopicTable:
    """A fake broker's metadata: topic -> {partition: leader}; answers Metadata requests."""

    def __init__(self, broker_ids: list[int], topics: dict[str, dict[int, int]]) -> None:
        self.broker_ids = broker_ids
        self.topics = topics
        self.addresses: dict[int, tuple[str, int]] = {}

    def __call__(self, header, request):
        if header.request_api_key != METADATA:
            return None
        brokers = [(i, *self.addresses[i]) for i in self.broker_ids]
        return metadata_response(brokers, self.topics, requested=requested_topics(request))


def test_bootstrap_skips_unreachable_servers_and_learns_the_brokers():
    async def scenario():
        table = TopicTable([1], {"events": {0: 1, 1: 1}})
        async with FakeBroker(table) as broker:
            table.addresses[1] = (broker.host, broker.port)
            cluster = make_cluster(f"127.0.0.1:{closed_port()},{broker.address}")
            try:
                response = await cluster.refresh_metadata(["events"])
                assert [t.name for t in response.topics] == ["events"]
                metadata = cluster.metadata
                assert metadata.cluster_id == "fake-cluster"
                assert set(metadata.brokers) == {1} and metadata.controller_id == 1
                assert metadata.leader(TopicPartition("events", 1)) == 1
                assert metadata.partition(TopicPartition("events", 2)) is None
                connection = await cluster.connection(1)
                assert connection.node_id == 1 and connection.ready
            finally:
                await cluster.close()

    run(scenario())


def test_leaders_refresh_when_unknown_and_report_missing_topics():
    async def scenario():
        table = TopicTable([1], {})
        async with FakeBroker(table) as broker:
            table.addresses[1] = (broker.host, broker.port)
            cluster = make_cluster(broker.address)
            try:
                deadline = cluster.deadline(5_000)
                leaders = await cluster.leaders([TopicPartition("late", 0)], deadline)
                error = leaders[TopicPartition("late", 0)]
                assert isinstance(error, KafkaError)
                assert error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                # The topic appears: an unknown leader triggers a refresh.
                table.topics["late"] = {0: 1}
                before = len(broker.requests_of(METADATA))
                leaders = await cluster.leaders([TopicPartition("late", 0)], deadline)
                assert leaders == {TopicPartition("late", 0): 1}
                assert len(broker.requests_of(METADATA)) == before + 1
                # Known leader, fresh cache: no request.
                await cluster.leaders([TopicPartition("late", 0)], deadline)
                assert len(broker.requests_of(METADATA)) == before + 1
                # A NOT_LEADER_OR_FOLLOWER error marks the cache stale.
                cluster.note_error(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER))
                await cluster.leaders([TopicPartition("late", 0)], deadline)
                assert len(broker.requests_of(METADATA)) == before + 2
                # Errors that say nothing about metadata do not.
                cluster.note_error(KafkaError(ErrorCode.INVALID_CONFIG))
                assert not cluster.metadata_is_stale(["late"])
            finally:
                await cluster.close()

    run(scenario())


def test_metadata_older_than_max_age_is_refreshed():
    async def scenario():
        table = TopicTable([1], {"t": {0: 1}})
        async with FakeBroker(table) as broker:
            table.addresses[1] = (broker.host, broker.port)
            cluster = make_cluster(broker.address, **{"metadata.max.age.ms": 200})
            try:
                await cluster.ensure_metadata(["t"])
                count = len(broker.requests_of(METADATA))
                await cluster.ensure_metadata(["t"])
                assert len(broker.requests_of(METADATA)) == count
                await asyncio.sleep(0.25)
                await cluster.ensure_metadata(["t"])
                assert len(broker.requests_of(METADATA)) == count + 1
            finally:
                await cluster.close()

    run(scenario())


def test_concurrent_refreshes_share_one_request():
    async def scenario():
        table = TopicTable([1], {"t": {0: 1}})

        async def slow(header, request):
            await asyncio.sleep(0.05)
            return table(header, request)

        async with FakeBroker(slow) as broker:
            table.addresses[1] = (broker.host, broker.port)
            cluster = make_cluster(broker.address)
            try:
                await asyncio.gather(*(cluster.refresh_metadata(["t"]) for _ in range(10)))
                assert len(broker.requests_of(METADATA)) == 1
                assert broker.connections == 1
            finally:
                await cluster.close()

    run(scenario())


def test_each_broker_gets_its_own_pooled_connection():
    async def scenario():
        table = TopicTable([1, 2], {"t": {0: 1, 1: 2}})
        async with FakeBroker(table, node_id=1) as one, FakeBroker(table, node_id=2) as two:
            table.addresses = {1: (one.host, one.port), 2: (two.host, two.port)}
            cluster = make_cluster(one.address)
            try:
                await cluster.refresh_metadata(["t"])
                first = await cluster.connection(2)
                again = await cluster.connection(2)
                assert first is again and two.connections == 1
                assert (await cluster.connection(1)).port == one.port
                leaders = await cluster.leaders(
                    [TopicPartition("t", 0), TopicPartition("t", 1)], cluster.deadline(2_000))
                assert leaders == {TopicPartition("t", 0): 1, TopicPartition("t", 1): 2}
            finally:
                await cluster.close()

    run(scenario())


def test_idle_connections_are_closed():
    async def scenario():
        table = TopicTable([1], {})
        async with FakeBroker(table) as broker:
            table.addresses[1] = (broker.host, broker.port)
            cluster = make_cluster(broker.address, **{"connections.max.idle.ms": 100})
            try:
                await cluster.refresh_metadata()
                old = await cluster.connection(1)
                await asyncio.sleep(0.2)
                new = await cluster.connection(1)
                assert new is not old
                await asyncio.wait_for(old.wait_closed(), 2)
                assert broker.connections == 2
            finally:
                await cluster.close()

    run(scenario())


def test_unreachable_cluster_times_out_at_the_deadline():
    async def scenario():
        cluster = make_cluster(f"127.0.0.1:{closed_port()}")
        try:
            started = time.monotonic()

            async def attempt(deadline):
                return await cluster.refresh_metadata(deadline=deadline)

            with pytest.raises(KafkaTimeoutError,
                               match="Timed out waiting for a node assignment. Call: probe") as info:
                await cluster.call("probe", attempt, timeout_ms=500)
            elapsed = time.monotonic() - started
            assert 0.3 < elapsed < 3
            assert isinstance(info.value.__cause__, KafkaConnectionError)
        finally:
            await cluster.close()

    run(scenario())


def test_call_retries_retriable_errors_and_raises_the_others():
    async def scenario():
        cluster = make_cluster("127.0.0.1:9")
        try:
            attempts = []

            async def flaky(deadline):
                attempts.append(time.monotonic())
                if len(attempts) < 3:
                    raise KafkaError(ErrorCode.NOT_CONTROLLER)
                return "done"

            assert await cluster.call("flaky", flaky, timeout_ms=5_000) == "done"
            assert len(attempts) == 3
            assert attempts[2] - attempts[1] >= 0.005  # backed off

            async def broken(deadline):
                attempts.append(0)
                raise KafkaError(ErrorCode.INVALID_CONFIG, "bad value")

            attempts.clear()
            with pytest.raises(KafkaError, match="bad value"):
                await cluster.call("broken", broken, timeout_ms=5_000)
            assert len(attempts) == 1
        finally:
            await cluster.close()

    run(scenario())


def test_retries_setting_limits_attempts():
    async def scenario():
        cluster = make_cluster("127.0.0.1:9", retries=2)
        try:
            attempts = []

            async def always(deadline):
                attempts.append(1)
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "moved")

            with pytest.raises(KafkaError, match="moved"):
                await cluster.call("always", always, timeout_ms=5_000)
            assert len(attempts) == 3  # the first try and 2 retries

            attempts.clear()
            unlimited = make_cluster("127.0.0.1:9")
            try:
                with pytest.raises(KafkaTimeoutError, match=r"callName=always.*NOT_CONTROLLER"):
                    await unlimited.call("always", always, timeout_ms=300)
                assert len(attempts) > 3
            finally:
                await unlimited.close()
        finally:
            await cluster.close()

    run(scenario())
