"""Blocking facades over the async clients: each runs its async core on a private event loop
in a daemon thread, and its methods submit coroutines there and wait for the result.

    class Admin(SyncFacade):
        create_topics = blocking(AdminClient.create_topics)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

__all__ = ["EventLoopThread", "SyncFacade", "blocking"]

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")

_THREAD_JOIN_S = 5.0


class EventLoopThread:
    """An event loop running in its own daemon thread until `close`."""

    def __init__(self, name: str = "odradek-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def run(self, coroutine: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run `coroutine` on the loop and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a blocking client call from its own event loop would deadlock")
        if not self.running:
            coroutine.close()
            raise RuntimeError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except (KeyboardInterrupt, concurrent.futures.TimeoutError):
            future.cancel()
            raise

    def close(self) -> None:
        if self.running:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(_THREAD_JOIN_S)


class SyncFacade(Generic[C]):
    """Owns an async client `self._async` living on a private `EventLoopThread`."""

    _async: C

    def __init__(self, factory: Callable[[], C], thread_name: str) -> None:
        self._loop_thread = EventLoopThread(thread_name)
        # Built on the loop's thread, so whatever it creates belongs to that loop.
        self._async = self._loop_thread.run(_call(factory))

    def _run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        return self._loop_thread.run(coroutine)

    def _close_async(self, close: Callable[[], Awaitable[None]]) -> None:
        if self._loop_thread.running:
            try:
                self._loop_thread.run(_await(close))
            finally:
                self._loop_thread.close()

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        close = getattr(self._async, "close", None)
        if close is None:
            self._loop_thread.close()
        else:
            self._close_async(close)


async def _call(factory: Callable[[], C]) -> C:
    return factory()


async def _await(function: Callable[[], Awaitable[None]]) -> None:
    await function()


def blocking(
    method: Callable[Concatenate[C, P], Awaitable[R]],
) -> Callable[Concatenate[SyncFacade[C], P], R]:
    """A blocking method of a `SyncFacade` that runs the async `method` on its loop."""

    @functools.wraps(method)
    def wrapper(self: SyncFacade[C], *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(method(self._async, *args, **kwargs))  # type: ignore[arg-type]

    return wrapper
