"""The KRaft tools against 3-node clusters of real processes: `metadata-quorum` on the test
harness's cluster (tests/cluster/quorum_cluster.py) and `odradek cluster-start --nodes 3`.
Each cluster costs seconds, so there are two tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import pytest
from broker_process import ODRADEK, wait_until
from cluster.quorum_cluster import METADATA_VERSION, QuorumCluster, send_request

from odradek.cli import metadata_quorum
from odradek.protocol import messages as m

START_TIMEOUT_S = 60.0  # three Python processes starting on a shared machine


def run_quorum_tool(capsys, *args: str) -> tuple[int, str, str]:
    code = metadata_quorum.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_metadata_quorum_on_a_three_voter_cluster(tmp_path, capsys):
    cluster = QuorumCluster(tmp_path, size=3)
    cluster.format()
    cluster.start()
    try:
        leader_id, epoch = cluster.wait_for_leader(START_TIMEOUT_S)
        follower = next(node for node_id, node in cluster.nodes.items() if node_id != leader_id)
        controllers = ",".join(f"127.0.0.1:{n.controller_port}" for n in cluster.nodes.values())
        # Through a follower's broker listener (it answers NOT_LEADER_OR_FOLLOWER; the tool
        # goes on to the leader) and through the controllers.
        for bootstrap in (["--bootstrap-server", f"127.0.0.1:{follower.port}"],
                          ["--bootstrap-controller", controllers]):
            code, out, err = run_quorum_tool(capsys, *bootstrap, "describe", "--status")
            assert code == 0, err
            lines = out.splitlines()
            assert lines[0] == f"ClusterId:              {cluster.cluster_id}"
            assert lines[1] == f"LeaderId:               {leader_id}"
            assert int(lines[2].split()[1]) >= epoch
            # Kafka 4.0's format of DescribeQuorum v2 (static voters: no directory ids; the
            # endpoints once the leader fills in the v2 `nodes`).
            assert re.fullmatch(r'CurrentVoters:          \[\{"id": 1[^}]*\}, \{"id": 2[^}]*\}, '
                                r'\{"id": 3[^}]*\}\]', lines[6]), lines[6]
            assert '"directoryId"' not in lines[6]
            assert lines[7:] == ["CurrentObservers:       []"]
        def replication() -> list[list[str]]:
            code, out, _ = run_quorum_tool(capsys, "--bootstrap-controller", controllers,
                                           "describe", "--replication")
            assert code == 0
            return [[cell.strip() for cell in line.split("\t")[:-1]]
                    for line in out.splitlines()]

        # The leader counts its own end offset once its append is flushed (as Kafka's
        # LeaderState), and a follower may already have fetched the unflushed records: a lag
        # of -1 for a moment is Kafka's answer too, so look again until it has passed.
        def without_negative_lag() -> list[list[str]] | None:
            rows = replication()
            return rows if all(int(row[3]) >= 0 for row in rows[1:]) else None

        rows = wait_until(without_negative_lag, 10, interval=0.2,
                          message="every voter's lag at 0 or more")
        assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                           "LastCaughtUpTimestamp", "Status"]
        assert rows[1][0] == str(leader_id) and rows[1][6] == "Leader"
        assert sorted(row[0] for row in rows[2:]) == sorted(
            str(node_id) for node_id in cluster.nodes if node_id != leader_id)
        assert {row[6] for row in rows[2:]} == {"Follower"}
        assert {row[1] for row in rows[1:]} == {"AAAAAAAAAAAAAAAAAAAAAA"}  # static voters
    finally:
        cluster.stop()
        cluster.kill_all()


def _free_port_range(count: int) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1."""
    for _attempt in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65000:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    pytest.skip("no range of free ports")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_cluster_start_runs_three_nodes_until_sigterm(tmp_path, capsys):
    base_port = _free_port_range(3)
    controller_base = _free_port_range(3)
    while abs(controller_base - base_port) < 3:
        controller_base = _free_port_range(3)
    output = tmp_path / "cluster-start.out"
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            [*ODRADEK, "cluster-start", "--nodes", "3", "--dir", str(tmp_path / "cluster"),
             "--base-port", str(base_port), "--controller-base-port", str(controller_base)],
            stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        def started() -> str | None:
            text = output.read_text()
            if proc.poll() is not None:
                raise AssertionError(f"cluster-start exited with {proc.returncode}:\n{text}")
            return text if "Press Ctrl-C to stop the cluster." in text else None

        text = wait_until(started, START_TIMEOUT_S + 30, interval=0.2,
                          message="cluster-start to report the cluster up")
        brokers = [f"127.0.0.1:{base_port + i}" for i in range(3)]
        controllers = [f"127.0.0.1:{controller_base + i}" for i in range(3)]
        assert f"Bootstrap servers: {','.join(brokers)}" in text
        assert f"Bootstrap controllers: {','.join(controllers)}" in text
        leader = re.search(r"Quorum leader: node ([123]) \(epoch \d+\)", text)
        assert leader, text
        # The three node processes are up: each listens on its broker and controller ports.
        assert all(_listening(base_port + i) and _listening(controller_base + i)
                   for i in range(3))
        code, out, err = run_quorum_tool(capsys, "--bootstrap-controller", ",".join(controllers),
                                         "describe", "--status")
        assert code == 0, err
        assert re.search(r'^CurrentVoters:          \[\{"id": 1[^}]*\}, \{"id": 2[^}]*\}, '
                         r'\{"id": 3[^}]*\}\]$', out, re.MULTILINE), out
        assert re.search(r"^LeaderId:               [123]$", out, re.MULTILINE)
        def registered_brokers() -> set[int]:
            response = send_request(
                base_port + int(leader[1]) - 1, 3, METADATA_VERSION,
                m.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False))
            return {broker.node_id for broker in response.brokers}

        # Every node's broker registers with the active controller and is unfenced.
        wait_until(lambda: registered_brokers() == {1, 2, 3}, 30,
                   message="all three brokers registered")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    text = output.read_text()
    assert code == 0, text
    assert text.rstrip().endswith("Stopped.")
    # Every node stopped with it.
    assert not any(_listening(base_port + i) or _listening(controller_base + i)
                   for i in range(3))
