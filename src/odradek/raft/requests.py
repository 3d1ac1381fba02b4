"""One in-flight request per peer, with a timeout and a backoff after a failure (Kafka's
RequestManager and ConnectionState).

A response counts only if it answers the request in flight to that peer (same correlation id):
a late answer to a request that timed out, or one sent before a state change, is dropped, as a
real connection would drop it after the timeout closed it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Connection:
    inflight_correlation_id: int | None = None
    inflight_deadline_ms: int = 0
    backoff_until_ms: int = 0


class RequestManager:
    def __init__(self, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._connections: dict[int, _Connection] = {}
        self._next_correlation_id = 0

    def _get(self, node_id: int) -> _Connection:
        return self._connections.setdefault(node_id, _Connection())

    def is_ready(self, node_id: int, now_ms: int) -> bool:
        """Nothing in flight (or it timed out) and not backing off."""
        connection = self._get(node_id)
        if connection.inflight_correlation_id is not None:
            if now_ms < connection.inflight_deadline_ms:
                return False
            # Timed out: the request failed; back off before the next one.
            connection.inflight_correlation_id = None
            connection.backoff_until_ms = connection.inflight_deadline_ms + self.retry_backoff_ms
        return now_ms >= connection.backoff_until_ms

    def on_send(self, node_id: int, now_ms: int) -> int:
        """Records a request sent now; returns its correlation id."""
        self._next_correlation_id += 1
        connection = self._get(node_id)
        connection.inflight_correlation_id = self._next_correlation_id
        connection.inflight_deadline_ms = now_ms + self.request_timeout_ms
        return self._next_correlation_id

    def on_response(self, node_id: int, correlation_id: int | None) -> bool:
        """Whether the response answers the request in flight (then the peer is ready)."""
        connection = self._connections.get(node_id)
        if connection is None or connection.inflight_correlation_id is None:
            return False
        if correlation_id is not None and correlation_id != connection.inflight_correlation_id:
            return False
        connection.inflight_correlation_id = None
        return True

    def on_failure(self, node_id: int, correlation_id: int | None, now_ms: int) -> None:
        """The request could not be sent or answered (connection refused, closed)."""
        connection = self._connections.get(node_id)
        if connection is None or connection.inflight_correlation_id is None:
            return
        if correlation_id is not None and correlation_id != connection.inflight_correlation_id:
            return
        connection.inflight_correlation_id = None
        connection.backoff_until_ms = now_ms + self.retry_backoff_ms

    def back_off(self, node_id: int, now_ms: int) -> None:
        """An answer that says "not now" (an error): wait before asking again."""
        self._get(node_id).backoff_until_ms = now_ms + self.retry_backoff_ms

    def reset_all(self) -> None:
        """Forget every in-flight request (a state change: their answers no longer apply)."""
        for connection in self._connections.values():
            connection.inflight_correlation_id = None
            connection.backoff_until_ms = 0

    def next_deadline_ms(self, now_ms: int) -> int | None:
        """When a request times out or a backoff ends, whichever is next (after now)."""
        deadlines = []
        for connection in self._connections.values():
            if connection.inflight_correlation_id is not None:
                deadlines.append(connection.inflight_deadline_ms)
            elif connection.backoff_until_ms > now_ms:
                deadlines.append(connection.backoff_until_ms)
        return min(deadlines) if deadlines else None
