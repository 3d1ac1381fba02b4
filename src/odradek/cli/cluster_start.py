"""`odradek cluster-start`: a local N-node cluster in one command (`make run-cluster`).

    odradek cluster-start [--nodes 3] [--dir odradek-cluster] [--base-port 9092]
                          [--controller-base-port BASE+100] [--host 127.0.0.1]

Writes one ``server.properties`` per node under ``DIR/node-<id>/`` (every node combined,
``process.roles=broker,controller``, all of them static voters in ``controller.quorum.voters``),
formats their storage with one cluster id (as ``odradek storage format`` does; a directory
formatted by an earlier run keeps its cluster id and data), starts each node as its own
``odradek server-start`` process (output in ``DIR/node-<id>/server.log``), waits until the nodes
listen and the quorum has a leader, prints how to reach them and stays in the foreground. Ctrl-C
or SIGTERM stops every node (SIGTERM, then SIGKILL after ``--stop-timeout`` seconds).

Node ``i`` (1..N) listens for clients on ``BASE + i - 1`` and for the quorum on
``CONTROLLER_BASE + i - 1``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from odradek.cli.common import ToolArgumentParser, ToolError, configure_logging, run_tool
from odradek.cli.kraft_client import QuorumInfo, run_with_client
from odradek.cli.storage import format_directories, random_uuid
from odradek.protocol.errors import KafkaError
from odradek.server.config import ConfigError, KafkaConfig
from odradek.storage.checkpoint import CorruptCheckpointError, read_meta_properties

DEFAULT_DIR = "odradek-cluster"
DEFAULT_BASE_PORT = 9092
CONTROLLER_PORT_OFFSET = 100


@dataclass
class Node:
    node_id: int
    workdir: Path
    host: str
    port: int
    controller_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def properties(self, voters: str) -> dict[str, str]:
        """A combined node of a static quorum (the config tests/cluster/quorum_cluster.py
        uses), with single-replica internal topics so one node's group coordinator works."""
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
                         f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }


def plan_nodes(count: int, root: Path, host: str, base_port: int,
               controller_base_port: int) -> list[Node]:
    return [Node(i, root / f"node-{i}", host, base_port + i - 1, controller_base_port + i - 1)
            for i in range(1, count + 1)]


def voters_of(nodes: list[Node]) -> str:
    return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in nodes)


def write_configs(nodes: list[Node]) -> None:
    voters = voters_of(nodes)
    for node in nodes:
        node.workdir.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text(
            "# Written by `odradek cluster-start`; rewritten at each start.\n"
            + "".join(f"{key}={value}\n" for key, value in node.properties(voters).items()))


def existing_cluster_id(nodes: list[Node]) -> str | None:
    """The cluster id of a directory an earlier run formatted (kept, with its data)."""
    for node in nodes:
        try:
            meta = read_meta_properties(str(node.data_dir))
        except (CorruptCheckpointError, OSError):
            continue
        if meta is not None and "cluster.id" in meta:
            return meta["cluster.id"]
    return None


def format_storage(nodes: list[Node], out: TextIO) -> str:
    """`odradek storage format` on every node with one cluster id (already formatted
    directories are left as they are)."""
    cluster_id = existing_cluster_id(nodes) or random_uuid()
    for node in nodes:
        try:
            config = KafkaConfig.from_file(node.config_path)
        except ConfigError as exc:
            raise ToolError(str(exc)) from exc
        format_directories(config, cluster_id, out, ignore_formatted=True)
    return cluster_id


def check_ports_free(nodes: list[Node]) -> None:
    for node in nodes:
        for port in (node.port, node.controller_port):
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((node.host, port))
                except OSError as exc:
                    raise ToolError(f"Port {port} on {node.host} is not available ({exc}); "
                                    "choose others with --base-port / "
                                    "--controller-base-port.") from None


def start_node(node: Node) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(node.log_path, "ab") as log_file:
        # Its own session: Ctrl-C reaches only this process, which stops the nodes in order.
        node.process = subprocess.Popen(
            [sys.executable, "-m", "odradek.cli.main", "server-start", str(node.config_path)],
            stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=node.workdir,
            start_new_session=True)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _log_tail(node: Node, lines: int = 20) -> str:
    try:
        return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until_up(nodes: list[Node], timeout_s: float, stop: threading.Event) -> QuorumInfo:
    """Every node listening on both ports, then a quorum leader (DescribeQuorum on the
    controller listeners); ToolError when a node exits or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    pending = list(nodes)
    while pending:
        for node in nodes:
            if not node.running:
                code = node.process.returncode if node.process else None
                raise ToolError(f"Node {node.node_id} exited with code {code}; the end of "
                                f"{node.log_path}:\n{_log_tail(node)}")
        pending = [n for n in pending
                   if not (_listening(n.host, n.port) and _listening(n.host, n.controller_port))]
        if not pending:
            break
        if time.monotonic() >= deadline:
            raise ToolError(f"Timed out after {timeout_s:.0f}s waiting for node(s) "
                            f"{', '.join(str(n.node_id) for n in pending)} to listen")
        if stop.wait(0.1):
            raise ToolError("Stopped before the cluster was up.")
    props = {"bootstrap.servers": ",".join(f"{n.host}:{n.controller_port}" for n in nodes)}
    remaining_ms = max(1000.0, (deadline - time.monotonic()) * 1000)

    async def describe(client):  # type: ignore[no-untyped-def]
        return await client.describe_quorum(timeout_ms=remaining_ms)

    try:
        return run_with_client(props, True, describe)
    except KafkaError as exc:
        raise ToolError(f"No metadata quorum leader was elected: {exc}") from None


def stop_nodes(nodes: list[Node], timeout_s: float, out: TextIO) -> None:
    """SIGTERM to every running node at once (a graceful shutdown each), then wait; SIGKILL
    what is still running after `timeout_s`."""
    running = [node for node in nodes if node.running]
    for node in running:
        node.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout_s
    for node in running:
        try:
            node.process.wait(max(0.1, deadline - time.monotonic()))  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            print(f"Node {node.node_id} did not stop within {timeout_s:.0f}s; killing it.",
                  file=out)
            node.process.kill()  # type: ignore[union-attr]
            node.process.wait(10)  # type: ignore[union-attr]


def summary(cluster_id: str, nodes: list[Node], root: Path, quorum: QuorumInfo) -> str:
    lines = [(f"Odradek cluster {cluster_id}: {len(nodes)} combined broker+controller "
              f"node(s) in {root}")]
    for node in nodes:
        lines.append(f"  node {node.node_id}: broker {node.host}:{node.port}, controller "
                     f"{node.host}:{node.controller_port}, log {node.log_path}")
    lines += [
        f"Quorum leader: node {quorum.leader_id} (epoch {quorum.leader_epoch})",
        "Bootstrap servers: " + ",".join(f"{n.host}:{n.port}" for n in nodes),
        "Bootstrap controllers: " + ",".join(f"{n.host}:{n.controller_port}" for n in nodes),
        "Press Ctrl-C to stop the cluster.",
    ]
    return "\n".join(lines)


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(
        prog="odradek cluster-start",
        description="Format and run a local cluster of N combined broker+controller nodes, "
                    "each its own process, in the foreground; Ctrl-C stops them all.")
    parser.add_argument("--nodes", type=int, default=3, help="How many nodes (default 3).")
    parser.add_argument("--dir", default=DEFAULT_DIR,
                        help=f"Where the nodes' configs, data and logs go (default "
                             f"{DEFAULT_DIR}); a second run reuses them.")
    parser.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT,
                        help=f"Node i's client (broker) port is BASE + i - 1 (default "
                             f"{DEFAULT_BASE_PORT}).")
    parser.add_argument("--controller-base-port", type=int,
                        help=f"Node i's controller port is this + i - 1 (default: the base "
                             f"port + {CONTROLLER_PORT_OFFSET}).")
    parser.add_argument("--host", default="127.0.0.1",
                        help="The address the nodes listen on and advertise (default "
                             "127.0.0.1).")
    parser.add_argument("--startup-timeout", type=float, default=120.0,
                        help="Seconds to wait for the nodes and a quorum leader (default 120).")
    parser.add_argument("--stop-timeout", type=float, default=30.0,
                        help="Seconds a node gets to stop before it is killed (default 30).")
    return parser


def run_cluster(args: argparse.Namespace, out: TextIO) -> int:
    if args.nodes < 1:
        raise ToolError("--nodes must be at least 1")
    controller_base = (args.controller_base_port if args.controller_base_port is not None
                       else args.base_port + CONTROLLER_PORT_OFFSET)
    root = Path(args.dir).absolute()
    nodes = plan_nodes(args.nodes, root, args.host, args.base_port, controller_base)
    broker_ports = {n.port for n in nodes}
    if any(n.controller_port in broker_ports for n in nodes):
        raise ToolError("The broker and controller port ranges overlap; choose another "
                        "--controller-base-port.")
    check_ports_free(nodes)
    write_configs(nodes)
    cluster_id = format_storage(nodes, out)

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for node in nodes:
            start_node(node)
        print(f"Started {len(nodes)} node(s); waiting for them and a quorum leader...",
              file=out, flush=True)
        quorum = wait_until_up(nodes, args.startup_timeout, stop)
        print(summary(cluster_id, nodes, root, quorum), file=out, flush=True)
        reported: set[int] = set()
        while not stop.wait(0.5):
            for node in nodes:
                if not node.running and node.node_id not in reported:
                    reported.add(node.node_id)
                    print(f"Node {node.node_id} exited with code {node.process.returncode} "
                          f"(see {node.log_path}).", file=out, flush=True)
            if len(reported) == len(nodes):
                print("Every node has exited.", file=out, flush=True)
                return 1
        print("Stopping the cluster...", file=out, flush=True)
        return 0
    finally:
        stop_nodes(nodes, args.stop_timeout, out)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if stop.is_set():
            print("Stopped.", file=out, flush=True)


def main(argv: list[str] | None = None) -> int:
    configure_logging()

    def body(args: list[str]) -> int:
        return run_cluster(build_parser().parse_args(args), sys.stdout)

    return run_tool(body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
