"""UpdateFeatures sent to a broker-only node (an observer of a 1-voter quorum): it forwards the
request to the active controller, which answers it (its messages name controller 1), and the
new finalized level reaches both nodes' ApiVersions."""

from __future__ import annotations

import pytest
from broker_process import wait_until
from quorum_cluster import QuorumCluster, send_request

from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

START_TIMEOUT_S = 30.0  # two Python processes starting on a shared machine
SETTLE_S = 10.0
CONTROLLER, BROKER = 1, 2
MV = "metadata.version"
UPGRADE, SAFE_DOWNGRADE = 1, 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = QuorumCluster(tmp_path_factory.mktemp("features"), size=1, brokers=1)
    cluster.format()
    cluster.start()
    try:
        cluster.wait_for_leader(START_TIMEOUT_S)
        wait_until(lambda: registered(cluster) == {CONTROLLER, BROKER}, START_TIMEOUT_S,
                   interval=0.2, message="both nodes registered")
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def registered(cluster: QuorumCluster) -> set[int] | None:
    response = cluster.nodes[BROKER].metadata(topics=[])
    return None if response is None else {b.node_id for b in response.brokers}


def update(cluster: QuorumCluster, level: int,
           upgrade_type: int) -> dict[str, tuple[int, str | None]]:
    request = m.UpdateFeaturesRequest(
        timeout_ms=10_000, validate_only=False, feature_updates=[
            m.UpdateFeaturesRequest.FeatureUpdateKey(feature=MV, max_version_level=level,
                                                     upgrade_type=upgrade_type)])
    response = send_request(cluster.nodes[BROKER].port, 57, 1, request, timeout=15)
    assert response.error_code == ErrorCode.NONE
    return {r.feature: (r.error_code, r.error_message) for r in response.results}


def finalized_level(cluster: QuorumCluster, node_id: int) -> int | None:
    response = send_request(cluster.nodes[node_id].port, 18, 3, m.ApiVersionsRequest(
        client_software_name="t", client_software_version="1"))
    return {f.name: f.max_version_level for f in response.finalized_features}.get(MV)


def test_update_features_on_a_broker_is_forwarded_to_the_controller(cluster):
    # The controller's own range check answers, naming itself.
    refusal = ("Invalid update version 26 for feature metadata.version. Local controller 1 "
               "only supports versions 7-25")
    assert update(cluster, 26, UPGRADE) == {MV: (ErrorCode.INVALID_UPDATE_VERSION.code,
                                                 refusal)}
    assert update(cluster, 24, SAFE_DOWNGRADE) == {MV: (ErrorCode.NONE.code, None)}
    for node_id in (CONTROLLER, BROKER):
        wait_until(lambda node_id=node_id: finalized_level(cluster, node_id) == 24, SETTLE_S,
                   interval=0.1, message=f"node {node_id} at metadata.version 24")
    assert update(cluster, 25, UPGRADE) == {MV: (ErrorCode.NONE.code, None)}
    for node_id in (CONTROLLER, BROKER):
        wait_until(lambda node_id=node_id: finalized_level(cluster, node_id) == 25, SETTLE_S,
                   interval=0.1, message=f"node {node_id} at metadata.version 25")
