"""FindCoordinator for a coordinator type the broker does not run fails fast with Kafka's
non-retriable INVALID_REQUEST (share groups, KIP-932, are not served; unknown types are
refused), never the retriable COORDINATOR_NOT_AVAILABLE that makes clients spin."""

from __future__ import annotations

import time

import pytest
from raw_client import RawClient

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode


@pytest.mark.parametrize("key_type", [2, 3, 99])  # SHARE, then types Kafka 4.0 does not define
def test_unserved_coordinator_types_are_invalid_requests(odradek_broker, key_type):
    with RawClient(odradek_broker.host, odradek_broker.port) as client:
        started = time.monotonic()
        response = client.call(10, 6, m.FindCoordinatorRequest(
            key_type=key_type, coordinator_keys=["a", "b"]))
        elapsed = time.monotonic() - started
    assert [(c.key, c.error_code, c.node_id) for c in response.coordinators] == [
        ("a", ErrorCode.INVALID_REQUEST, -1), ("b", ErrorCode.INVALID_REQUEST, -1)]
    assert not ErrorCode.INVALID_REQUEST.retriable
    assert elapsed < 1.0


def test_transaction_coordinator_is_served(odradek_broker):
    with RawClient(odradek_broker.host, odradek_broker.port) as client:
        deadline = time.monotonic() + 20
        while True:
            response = client.call(10, 6, m.FindCoordinatorRequest(
                key_type=1, coordinator_keys=["txn-id"]))
            (found,) = response.coordinators
            if found.error_code == ErrorCode.NONE or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert found.error_code == ErrorCode.NONE and found.node_id == 1
