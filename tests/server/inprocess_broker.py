"""A real broker in this test process: real listeners on 127.0.0.1, its own event loop in a
thread, so a test can reach inside it (e.g. hold a partition's high watermark back) while
talking to it over sockets like any client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from broker_process import BrokerProcess

from odradek.cli.server_start import build_config, prepare_storage
from odradek.protocol.errors import ErrorCode
from odradek.server.broker import Broker
from odradek.server.replica_manager import FollowerState

T = TypeVar("T")


class InProcessBroker:
    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        # Same server.properties as the subprocess brokers of the other tests.
        self.props = BrokerProcess(workdir, overrides)
        self.host, self.port = self.props.host, self.props.port
        self.loop = asyncio.new_event_loop()
        self.broker: Broker | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self, timeout: float = 30) -> InProcessBroker:
        config = build_config(str(self.props.config_path), [])
        prepare_storage(config, io.StringIO())
        self.broker = Broker(config)
        self._thread.start()
        self.run(self.broker.start(), timeout)
        return self

    def run(self, coroutine: Any, timeout: float = 30) -> Any:
        """Runs a coroutine on the broker's loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function: Callable[[], T], timeout: float = 30) -> T:
        """Runs `function()` on the broker's loop (where its state may be touched)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                future.set_result(function())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(invoke)
        return future.result(timeout)

    def stop(self, timeout: float = 30) -> None:
        if self.broker is not None:
            self.run(self.broker.stop(), timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        self.loop.close()

    # A simulated follower in a partition's ISR: it holds the high watermark back until it
    # "fetches" (the delayed produce's tests).
    SIMULATED_FOLLOWER = 2

    def hold_back_high_watermark(self, topic: str) -> None:
        """Adds a follower that has fetched nothing to the ISR of `topic`-0."""
        follower = self.SIMULATED_FOLLOWER

        def hold() -> None:
            partition = self.broker.replica_manager.partitions[(topic, 0)]
            partition.replicas = (*partition.replicas, follower)
            partition.isr = (*partition.isr, follower)
            partition.followers[follower] = FollowerState(log_end_offset=0)
        self.call(hold)

    def follower_fetched(self, topic: str, offset: int) -> int:
        """The simulated follower fetches `topic`-0 from `offset` (so it has everything
        below); returns the high watermark."""
        def fetched_up_to() -> int:
            replica_manager = self.broker.replica_manager
            result = replica_manager.read_for_follower(
                topic, 0, self.SIMULATED_FOLLOWER, -1, offset, 0, 1 << 20,
                current_leader_epoch=-1, min_one_batch=True, last_fetched_epoch=-1)
            assert result.error == ErrorCode.NONE
            return replica_manager.partitions[(topic, 0)].log.high_watermark
        return self.call(fetched_up_to)
