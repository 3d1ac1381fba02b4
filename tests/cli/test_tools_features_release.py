"""Release versions and feature levels end to end, as Kafka 4.0's tools: `storage format
--release-version / --feature` decides the levels a cluster starts with (the bootstrap file the
first active controller writes), `features version-mapping` / `feature-dependencies` print
Kafka's lines, `features upgrade|downgrade --release-version` moves every feature, and a
feature level whose dependency does not hold is refused."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest
from broker_process import ODRADEK, BrokerProcess

from odradek.cli import features
from odradek.cli import storage as storage_tool
from odradek.cli.common import ToolError
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from tests.server.raw_client import RawClient

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = features.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def finalized(capsys, node) -> dict[str, str]:
    code, out, err = run(capsys, "--bootstrap-server", node.bootstrap, "describe")
    assert code == 0, err
    return dict(re.findall(r"Feature: (\S+)\t.*\tFinalizedVersionLevel: (\S+)\t", out))


@pytest.fixture(scope="module")
def node_at_3_9(tmp_path_factory):
    """A node formatted with --release-version 3.9 --feature transaction.version=1."""
    broker = BrokerProcess(tmp_path_factory.mktemp("release"))
    formatted = subprocess.run(
        [*ODRADEK, "storage", "format", "-t", CLUSTER_ID, "-c", str(broker.config_path),
         "--release-version", "3.9", "--feature", "transaction.version=1"],
        check=False, capture_output=True, text=True, timeout=60)
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout == f"Formatting {broker.data_dir} with metadata.version 3.9-IV0.\n"
    broker.start()
    yield broker
    broker.stop()


def test_version_mapping_and_feature_dependencies(capsys):
    bootstrap = ("--bootstrap-server", "127.0.0.1:1")  # not contacted
    assert run(capsys, *bootstrap, "version-mapping") == (0, (
        "metadata.version=25 (4.0-IV3)\nkraft.version=1\ntransaction.version=1\n"
        "group.version=1\n"), "")
    assert run(capsys, *bootstrap, "version-mapping", "--release-version", "3.9-IV0") == (0, (
        "metadata.version=21 (3.9-IV0)\nkraft.version=1\ntransaction.version=0\n"
        "group.version=0\n"), "")
    assert run(capsys, *bootstrap, "feature-dependencies", "--feature", "kraft.version=1",
               "--feature", "group.version=1", "--feature", "metadata.version=22") == (0, (
        "kraft.version=1 requires:\n    metadata.version=21 (3.9-IV0)\n"
        "group.version=1 has no dependencies.\n"
        "metadata.version=22 (4.0-IV0) has no dependencies.\n"), "")
    assert run(capsys, *bootstrap, "feature-dependencies", "--feature", "group.version=2") == (
        1, "", "No feature:group.version with feature level 2\n")
    assert run(capsys, *bootstrap, "feature-dependencies", "--feature", "x.version=1") == (
        1, "", "Unknown feature: x.version\n")
    assert run(capsys, *bootstrap, "upgrade", "--release-version", "4.0", "--feature",
               "group.version=1") == (
        1, "", "Can not specify `release-version` with other feature flags.\n")


def test_format_levels():
    version, levels = storage_tool.format_feature_levels(None, [], False)
    assert (version, levels) == ("4.0-IV3", {"metadata.version": 25, "kraft.version": 0,
                                             "transaction.version": 1, "group.version": 1})
    dynamic = storage_tool.format_feature_levels("3.9-IV0", ["group.version=1"], True)[1]
    assert dynamic == {"metadata.version": 21, "kraft.version": 1, "transaction.version": 0,
                       "group.version": 1}
    assert [(r.name, r.feature_level) for r in storage_tool.feature_level_records(dynamic)] == [
        ("metadata.version", 21), ("kraft.version", 1), ("group.version", 1)]
    assert [(r.name, r.feature_level) for r in storage_tool.feature_level_records(levels)] == [
        ("metadata.version", 25), ("transaction.version", 1), ("group.version", 1)]
    refusals = {
        ("3.8-IV0", (), True):
            "kraft.version could not be set to 1 because it depends on metadata.version level 21",
        ("3.9-IV0", ("kraft.version=1",), False):
            "Cannot set kraft.version to 1 unless controller.quorum.voters is empty",
        ("4.0-IV3", ("metadata.version=22",), False):
            "Use --release-version instead of --feature metadata.version=X",
        (None, ("share.version=1",), False):
            "Unsupported feature: share.version. Supported features are: group.version, "
            "kraft.version, transaction.version",
        (None, ("group.version=3",), False): "No feature:group.version with feature level 3",
        ("3.0-IV1", (), False): "Unsupported metadata.version 3.0-IV1: the minimum is 3.3-IV3.",
    }
    for (version, feature_args, dynamic), message in refusals.items():
        with pytest.raises(ToolError, match=re.escape(message)):
            storage_tool.format_feature_levels(version, list(feature_args), dynamic)


def test_format_release_version_is_the_clusters_bootstrap(node_at_3_9, capsys):
    assert finalized(capsys, node_at_3_9) == {
        "group.version": "0", "kraft.version": "0", "metadata.version": "3.9-IV0",
        "transaction.version": "1"}


def consumer_group_heartbeat(node) -> int:
    """The error code of a ConsumerGroupHeartbeat joining a fresh group."""
    with RawClient(node.host, node.port) as client:
        found = client.call(10, 4, m.FindCoordinatorRequest(key_type=0,
                                                            coordinator_keys=["kip848"]))
        assert found.coordinators[0].error_code == ErrorCode.NONE
        return client.call(68, 0, m.ConsumerGroupHeartbeatRequest(
            group_id="kip848", member_id=uuid.uuid4().hex, member_epoch=0,
            rebalance_timeout_ms=30000, subscribed_topic_names=["t"],
            topic_partitions=[])).error_code


def test_consumer_protocol_refused_below_group_version_1(node_at_3_9):
    """Kafka 4.0: without group.version 1 the consumer protocol is not enabled, and its
    requests get the non-retriable UNSUPPORTED_VERSION."""
    assert consumer_group_heartbeat(node_at_3_9) == ErrorCode.UNSUPPORTED_VERSION


def test_dependency_refused_then_release_upgrade(node_at_3_9, capsys):
    bootstrap = ("--bootstrap-server", node_at_3_9.bootstrap)
    # A dry run of the whole release: every feature that has a level above 0 for 4.0-IV3.
    assert run(capsys, *bootstrap, "upgrade", "--release-version", "4.0-IV3", "--dry-run") == (
        0, ("group.version can be upgraded to 1.\nkraft.version can be upgraded to 1.\n"
           "metadata.version can be upgraded to 25.\n"
           "transaction.version can be upgraded to 1.\n"), "")
    assert finalized(capsys, node_at_3_9)["metadata.version"] == "3.9-IV0"
    assert run(capsys, *bootstrap, "upgrade", "--release-version", "4.0") == (
        0, ("group.version was upgraded to 1.\nkraft.version was upgraded to 1.\n"
           "metadata.version was upgraded to 25.\ntransaction.version was upgraded to 1.\n"), "")
    assert finalized(capsys, node_at_3_9) == {
        "group.version": "1", "kraft.version": "1", "metadata.version": "4.0-IV3",
        "transaction.version": "1"}
    assert consumer_group_heartbeat(node_at_3_9) == ErrorCode.NONE
    # metadata.version cannot drop below what kraft.version 1 needs in the same request.
    code, out, err = run(capsys, *bootstrap, "downgrade", "--metadata", "3.8",
                         "--feature", "kraft.version=1", "--dry-run")
    assert code == 1 and err == "2 out of 2 operation(s) failed.\n"
    assert out.splitlines()[0] == (
        "Can not downgrade kraft.version to 1. Invalid update version 1 for feature "
        "kraft.version. kraft.version could not be set to 1 because it depends on "
        "metadata.version level 21")
