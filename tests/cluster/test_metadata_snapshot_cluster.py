"""Metadata snapshots (KIP-630) in a 3-voter cluster of real processes: a voter is killed (-9)
while the other two commit 30,000 metadata records (some 2 MB: several snapshots' worth); with
small snapshot and retention settings the leader snapshots its image and deletes the log before
its snapshots, so the voter, restarted, is behind the leader's log start: it catches up by
FetchSnapshot (its log then starts at the snapshot's end, the snapshot file is in its metadata
log directory) and follows on from there, to the leader's end offset.

The records are cheap to make over real sockets: IncrementalAlterConfigs on the dynamic configs
of broker ids no broker has (no partition log is created, no broker applies them), every value
changed each round, so each op is one ConfigRecord."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from broker_process import wait_until
from quorum_cluster import QuorumCluster, elapsed_since, send_request

from odradek.config.broker import BROKER_CONFIGS
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.raft.snapshot import parse_snapshot_file_name

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 30.0
SETTLE_S = 20.0
RECORDS = 30_000
RESOURCES_PER_REQUEST = 100
INCREMENTAL_ALTER_CONFIGS = 44
RESOURCE_BROKER = 4
OVERRIDES = {
    "metadata.log.segment.bytes": str(256 * 1024),
    "metadata.log.max.record.bytes.between.snapshots": str(512 * 1024),
    "metadata.max.retention.bytes": "0",  # keep only the newest snapshot and the log after it
}
DYNAMIC_KEYS = sorted(name for name, definition in BROKER_CONFIGS.items() if definition.dynamic)


@pytest.fixture
def cluster(tmp_path):
    cluster = QuorumCluster(tmp_path / "cluster", size=3, overrides=OVERRIDES)
    cluster.format()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.kill_all()


def alter_configs_round(port: int, round_: int, first_resource: int) -> int:
    """One IncrementalAlterConfigs of RESOURCES_PER_REQUEST broker resources, every dynamic key
    set to a value of this round; the number of records it commits."""
    R = m.IncrementalAlterConfigsRequest
    resources = [
        R.AlterConfigsResource(resource_type=RESOURCE_BROKER, resource_name=str(resource),
                               configs=[R.AlterableConfig(name=key, config_operation=0,
                                                          value=f"r{round_}")
                                        for key in DYNAMIC_KEYS])
        for resource in range(first_resource, first_resource + RESOURCES_PER_REQUEST)]
    response = send_request(port, INCREMENTAL_ALTER_CONFIGS, 1,
                            R(resources=resources, validate_only=False), timeout=60)
    errors = {r.error_code for r in response.responses}
    assert errors == {ErrorCode.NONE.code}, [ErrorCode.from_code(e) for e in errors]
    return len(resources) * len(DYNAMIC_KEYS)


def metadata_dir(cluster: QuorumCluster, node_id: int) -> Path:
    return cluster.nodes[node_id].workdir / "data" / "__cluster_metadata-0"


def snapshots_on_disk(directory: Path) -> list[tuple[int, int]]:
    found = []
    for path in directory.iterdir():
        parsed = parse_snapshot_file_name(path.name)
        if parsed is not None and parsed[1] == ".checkpoint":
            found.append(tuple(parsed[0]))
    return sorted(found)


def first_segment_offset(directory: Path) -> int:
    return min(int(path.name[:-len(".log")]) for path in directory.glob("*.log"))


def test_a_restarted_voter_catches_up_from_a_snapshot(cluster):
    started = time.monotonic()
    leader_id, _epoch = cluster.wait_for_leader(START_TIMEOUT_S)
    lagging_id = next(n for n in cluster.nodes if n != leader_id)
    lagging = cluster.nodes[lagging_id]
    lagging.kill()
    majority = [n for n in cluster.nodes.values() if n.node_id != lagging_id]
    print(f"\nleader {leader_id}; voter {lagging_id} killed "
          f"({elapsed_since(started):.1f}s)")

    committed = 0
    round_ = 0
    while committed < RECORDS:
        leader_id, _epoch = cluster.wait_for_leader(SETTLE_S, nodes=majority)
        port = cluster.nodes[leader_id].port
        for first in range(1000, 1000 + 10 * RESOURCES_PER_REQUEST, RESOURCES_PER_REQUEST):
            if committed >= RECORDS:
                break
            committed += alter_configs_round(port, round_, first)
        round_ += 1
    print(f"{committed} metadata records committed by the majority "
          f"({elapsed_since(started):.1f}s)")

    leader_dir = metadata_dir(cluster, leader_id)
    wait_until(lambda: snapshots_on_disk(leader_dir), SETTLE_S, message="a leader snapshot")
    leader_view = cluster.nodes[leader_id].describe_quorum()
    assert leader_view is not None and leader_view.high_watermark > RECORDS
    # The leader's log no longer starts at 0: the restarted voter cannot fetch it whole.
    wait_until(lambda: first_segment_offset(leader_dir) > 0, SETTLE_S,
               message="the leader's log truncated before its snapshot")

    lagging.start()
    lagging_dir = metadata_dir(cluster, lagging_id)

    def caught_up() -> bool:
        leader_id, _epoch = cluster.wait_for_leader(SETTLE_S)
        view = cluster.nodes[leader_id].describe_quorum()
        if view is None:
            return False
        return view.voter_end_offsets.get(lagging_id) == view.voter_end_offsets[leader_id]

    wait_until(caught_up, SETTLE_S + START_TIMEOUT_S, interval=0.2,
               message=f"voter {lagging_id} caught up")
    print(f"voter {lagging_id} caught up ({elapsed_since(started):.1f}s)")
    # It got there from a snapshot: one is in its metadata log directory, its log starts at
    # (or after) it, and its node log says it installed it.
    snapshots = snapshots_on_disk(lagging_dir)
    assert snapshots, list(lagging_dir.iterdir())
    assert first_segment_offset(lagging_dir) >= snapshots[0][0] > 0
    assert "installing snapshot" in lagging.log_path.read_text(errors="replace")
    # The same commit index, as the voter itself reports it.
    leader_id, _epoch = cluster.wait_for_leader(SETTLE_S)
    leader_view = cluster.nodes[leader_id].describe_quorum()
    wait_until(lambda: (lagging.describe_quorum() or leader_view).high_watermark
               == cluster.nodes[leader_id].describe_quorum().high_watermark,
               SETTLE_S, message="the same high watermark")
    assert elapsed_since(started) < 120
