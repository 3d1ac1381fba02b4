"""A dynamic controller quorum (KIP-853) of real processes, grown and shrunk with the tools:
`storage format --standalone` / `--no-initial-controllers`, then `metadata-quorum
add-controller` / `remove-controller` and `describe` in Kafka 4.0's format.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

from broker_process import ODRADEK, free_port, wait_until
from cluster.quorum_cluster import HOST, ClusterNode

from odradek.cli import features, metadata_quorum
from odradek.storage.checkpoint import read_meta_properties

START_TIMEOUT_S = 60.0
# Node 1 (the bootstrap server) starts this long after node 2 asks it: node 2 has been through
# many refused connections and retry backoffs by then.
BOOTSTRAP_LATE_S = 2.0
# Once both run, the observer finds the leader within a reconnect backoff (1 s at most) and a
# Fetch; the bound leaves room for a loaded machine, well under the 60 s an observer whose
# retry deadline was dropped used to sleep.
JOIN_TIMEOUT_S = 20.0


def run_tool(capsys, *args: str) -> tuple[int, str, str]:
    code = metadata_quorum.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def dynamic_node(root: Path, node_id: int, bootstrap: str, controller_port: int) -> ClusterNode:
    node = ClusterNode(node_id, root / f"node-{node_id}", free_port(), controller_port)
    node.write_config("", {"controller.quorum.bootstrap.servers": bootstrap})
    return node


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def format_node(node: ClusterNode, cluster_id: str, *flags: str) -> None:
    subprocess.run([*ODRADEK, "storage", "format", "--config", str(node.config_path),
                    "--cluster-id", cluster_id, *flags], check=True, capture_output=True,
                   text=True)


def directory_id(node: ClusterNode) -> str:
    return read_meta_properties(str(node.workdir / "data"))["directory.id"]


def status(capsys, controllers: str, client_config: Path) -> str:
    """`describe --status` (with a short call timeout: it is polled while the quorum forms)."""
    code, out, err = run_tool(capsys, "--bootstrap-controller", controllers,
                              "--command-config", str(client_config), "describe", "--status")
    return out if code == 0 else f"error: {err}"


def voter_text(node: ClusterNode) -> str:
    return (f'{{"id": {node.node_id}, "directoryId": "{directory_id(node)}", "endpoints": '
            f'["CONTROLLER://{HOST}:{node.controller_port}"]}}')


def _with_node_logs(test):
    """On failure, the nodes' log tails go with the error: a timeout alone does not say
    which node stopped or why."""
    def run(tmp_path, capsys):
        try:
            test(tmp_path, capsys)
        except (AssertionError, TimeoutError) as error:
            tails = "".join(f"\n--- {log.parent.name} ---\n"
                            + "\n".join(log.read_text(errors="replace").splitlines()[-60:])
                            for log in sorted(tmp_path.glob("node-*/node.log")))
            raise type(error)(f"{error}{tails}") from error
    run.__name__ = test.__name__
    return run


@_with_node_logs
def test_grow_and_shrink_a_standalone_quorum(tmp_path, capsys):
    short_calls = tmp_path / "short_calls.properties"
    short_calls.write_text("default.api.timeout.ms=5000\n")
    port_1, port_2 = free_port(), free_port()
    bootstrap = f"{HOST}:{port_1}"
    first = dynamic_node(tmp_path, 1, bootstrap, port_1)
    second = dynamic_node(tmp_path, 2, bootstrap, port_2)
    cluster_id = subprocess.run([*ODRADEK, "storage", "random-uuid"], check=True,
                                capture_output=True, text=True).stdout.strip()
    format_node(first, cluster_id, "--standalone")
    format_node(second, cluster_id, "--no-initial-controllers")
    controllers = f"{HOST}:{port_1},{HOST}:{port_2}"
    try:
        # The observer first: it asks its bootstrap server, which refuses connections until
        # node 1 is up (its controller listener opens before it waits for the quorum).
        second.start()
        wait_until(lambda: _accepts(HOST, port_2) or second.check_alive(), START_TIMEOUT_S,
                   interval=0.1, message="node 2's controller listener")
        time.sleep(BOOTSTRAP_LATE_S)  # the scenario: the bootstrap server comes up late
        first.start()
        wait_until(lambda: _accepts(HOST, port_1) or first.check_alive(), START_TIMEOUT_S,
                   interval=0.1, message="node 1's controller listener")
        # Node 1 alone is the quorum; node 2 follows it as an observer.
        def observed() -> bool:
            for node in (first, second):
                node.check_alive()
            return bool(re.search(r'^CurrentObservers:.*"id": 2',
                                  status(capsys, bootstrap, short_calls), re.MULTILINE))
        wait_until(observed, JOIN_TIMEOUT_S, interval=0.5,
                   message="node 2 to observe the quorum")
        out = status(capsys, bootstrap, short_calls)
        assert "LeaderId:               1\n" in out
        # A quorum formatted with --standalone has kraft.version 1 finalized.
        assert features.main(["--bootstrap-server", f"{HOST}:{first.port}", "describe"]) == 0
        described = capsys.readouterr().out
        assert "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t" \
            "FinalizedVersionLevel: 1\t" in described, described
        assert f"CurrentVoters:          [{voter_text(first)}]\n" in out

        # add-controller with node 2's own config, through node 1's controller listener.
        code, out, err = run_tool(capsys, "--bootstrap-controller", bootstrap,
                                  "--command-config", str(second.config_path), "add-controller")
        assert code == 0, err
        assert out == (f"Added controller 2 with directory id {directory_id(second)} and "
                       f"endpoints: CONTROLLER://{HOST}:{port_2}\n")
        wait_until(lambda: f"[{voter_text(first)}, {voter_text(second)}]"
                   in status(capsys, controllers, short_calls), START_TIMEOUT_S, interval=0.5,
                   message="both voters in describe --status")
        code, out, _ = run_tool(capsys, "--bootstrap-controller", controllers, "describe",
                                "--replication")
        rows = [[cell.strip() for cell in line.split("\t")[:-1]] for line in out.splitlines()]
        assert rows[0][:2] == ["NodeId", "DirectoryId"]
        assert {(row[0], row[1]) for row in rows[1:]} == {
            ("1", directory_id(first)), ("2", directory_id(second))}

        # Adding it again: Kafka's DuplicateVoterException.
        code, out, err = run_tool(capsys, "--bootstrap-controller", controllers,
                                  "--command-config", str(second.config_path), "add-controller")
        assert (code, out) == (1, "")
        assert err.startswith("org.apache.kafka.common.errors.DuplicateVoterException: ")

        # remove-controller through a broker listener (forwarded to the active controller).
        code, out, err = run_tool(capsys, "--bootstrap-server", f"{HOST}:{first.port}",
                                  "remove-controller", "--controller-id", "2",
                                  "--controller-directory-id", directory_id(second))
        assert code == 0, err
        assert out == (f"Removed  KRaft controller 2 with directory id "
                       f"{directory_id(second)}\n")
        wait_until(lambda: f"CurrentVoters:          [{voter_text(first)}]\n"
                   in status(capsys, bootstrap, short_calls), START_TIMEOUT_S, interval=0.5,
                   message="node 2 out of the voters")

        # Removing it again: Kafka's VoterNotFoundException.
        code, out, err = run_tool(capsys, "--bootstrap-controller", bootstrap,
                                  "remove-controller", "--controller-id", "2",
                                  "--controller-directory-id", directory_id(second))
        assert (code, out) == (1, "")
        assert err.startswith("org.apache.kafka.common.errors.VoterNotFoundException: ")
    finally:
        for node in (first, second):
            node.stop()
