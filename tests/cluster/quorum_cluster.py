"""An N-node Odradek cluster of real processes on 127.0.0.1, for tests (built on the conventions
of tests/broker_process.py: random free ports, one work directory and log file per node).

The first `size` nodes are combined (`process.roles=broker,controller`) and static voters
(`controller.quorum.voters` lists them); `brokers` more nodes are broker-only
(`process.roles=broker`: they follow the quorum as observers). The nodes are formatted with one
cluster id by `odradek storage format`, as an operator would. Requests are raw Kafka protocol over blocking
sockets, so the tests see exactly what a node answers.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_process import ODRADEK, _recv_exact, free_port, wait_until

from odradek.cli.storage import random_uuid
from odradek.protocol import framing
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.raft import messages as raft_messages

HOST = "127.0.0.1"
DESCRIBE_QUORUM_VERSION = 1
CREATE_TOPICS_VERSION = 5
METADATA_VERSION = 12


def send_request(port: int, api_key: int, version: int, request: m.Message,
                 timeout: float = 5.0, host: str = HOST) -> Any:
    """One request on a fresh connection; its decoded response."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(framing.encode_request(api_key, version, 7, "cluster-test", request))
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        correlation_id, response = framing.decode_response(_recv_exact(sock, size), api_key,
                                                           version)
        assert correlation_id == 7
        return response


@dataclass(frozen=True)
class QuorumView:
    """What one node says of the quorum (DescribeQuorum on its controller listener)."""

    node_id: int
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voter_end_offsets: dict[int, int]  # the leader's view of each voter's log end

    @property
    def is_leader(self) -> bool:
        return self.error_code == 0 and self.leader_id == self.node_id


class ClusterNode:
    def __init__(self, node_id: int, workdir: Path, port: int,
                 controller_port: int | None, is_broker: bool = True, host: str = HOST,
                 launch_prefix: tuple[str, ...] = ()) -> None:
        """`controller_port` None: a broker-only node; `is_broker` False: a dedicated
        controller (its `port` is not listened on). `host` is the address it listens on and
        `launch_prefix` goes before its command (tests/faults: `ip netns exec NS`, so each node
        has an address of its own that a network partition can cut off)."""
        self.node_id = node_id
        self.host = host
        self.launch_prefix = launch_prefix
        self.is_broker = is_broker
        self.workdir = workdir
        self.port = port
        self.controller_port = controller_port
        self.config_path = workdir / "server.properties"
        self.log_path = workdir / "node.log"
        self.proc: subprocess.Popen | None = None

    @property
    def is_voter(self) -> bool:
        return self.controller_port is not None

    def write_config(self, voters: str, overrides: dict[str, str]) -> None:
        listeners = [f"PLAINTEXT://{self.host}:{self.port}"] if self.is_broker else []
        if self.is_voter:
            listeners.append(f"CONTROLLER://{self.host}:{self.controller_port}")
        roles = [role for role, has in (("broker", self.is_broker),
                                        ("controller", self.is_voter)) if has]
        props = {
            "process.roles": ",".join(roles),
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.is_broker:
            props["advertised.listeners"] = f"PLAINTEXT://{self.host}:{self.port}"
        props.update(overrides)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [*self.launch_prefix, *ODRADEK, "server-start", str(self.config_path)],
                stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"node {self.node_id} exited with {self.proc.returncode}:\n"
                               f"{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: an unclean crash."""
        if self.running:
            self.proc.kill()  # type: ignore[union-attr]
            self.proc.wait(10)  # type: ignore[union-attr]

    def stop(self, timeout: float = 20) -> None:
        if not self.running:
            return
        self.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout)  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- what the node answers
    def describe_quorum(self, on_broker_listener: bool = False) -> QuorumView | None:
        """DescribeQuorum on the controller listener (or the broker listener); None if the
        node does not answer."""
        port = self.port if on_broker_listener or not self.is_voter else self.controller_port
        try:
            response = send_request(port, 55, DESCRIBE_QUORUM_VERSION,
                                    raft_messages.describe_quorum_request(), timeout=2,
                                    host=self.host)
        except (OSError, ValueError, ConnectionError):
            return None
        if response.error_code != 0 or not response.topics:
            return None
        partition = response.topics[0].partitions[0]
        return QuorumView(self.node_id, partition.error_code, partition.leader_id,
                          partition.leader_epoch, partition.high_watermark,
                          {v.replica_id: v.log_end_offset for v in partition.current_voters})

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = -1,
                     assignments: dict[int, list[int]] | None = None,
                     configs: dict[str, str] | None = None) -> int:
        """CreateTopics on the broker listener; the topic's error code."""
        Config = m.CreateTopicsRequest.CreatableTopicConfig
        Assignment = m.CreateTopicsRequest.CreatableReplicaAssignment
        if assignments:
            partitions = replication_factor = -1
        request = m.CreateTopicsRequest(
            topics=[m.CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=replication_factor,
                assignments=[Assignment(partition_index=p, broker_ids=replicas)
                             for p, replicas in sorted((assignments or {}).items())],
                configs=[Config(name=k, value=v) for k, v in (configs or {}).items()])],
            timeout_ms=10_000, validate_only=False)
        response = send_request(self.port, 19, CREATE_TOPICS_VERSION, request, timeout=15,
                                host=self.host)
        return response.topics[0].error_code

    def metadata(self, topics: list[str] | None = None) -> Any:
        """This node's Metadata answer (brokers, partitions with leader and ISR); None if it
        does not answer."""
        request = m.MetadataRequest(
            topics=None if topics is None else [
                m.MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        try:
            return send_request(self.port, 3, METADATA_VERSION, request, host=self.host)
        except (OSError, ConnectionError):
            return None

    def topic_names(self) -> set[str]:
        """The topics in this node's metadata image (Metadata on its broker listener)."""
        request = m.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False)
        try:
            response = send_request(self.port, 3, METADATA_VERSION, request, host=self.host)
        except (OSError, ConnectionError):
            return set()  # not answering (yet): nothing seen
        return {topic.name for topic in response.topics if topic.error_code == 0}


class QuorumCluster:
    def __init__(self, root: Path, size: int = 3,
                 overrides: dict[str, str] | None = None, brokers: int = 0,
                 dedicated_controllers: bool = False,
                 node_overrides: dict[int, dict[str, str]] | None = None) -> None:
        """`size` voters (ids 1..size: combined nodes, or controllers only), then `brokers`
        broker-only nodes. `node_overrides` adds configs of single nodes (`broker.rack`)."""
        self.nodes = {
            node_id: ClusterNode(node_id, root / f"node-{node_id}", free_port(),
                                 free_port() if node_id <= size else None,
                                 is_broker=node_id > size or not dedicated_controllers)
            for node_id in range(1, size + brokers + 1)
        }
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}"
                          for n in self.nodes.values() if n.is_voter)
        for node in self.nodes.values():
            node.write_config(voters, {**(overrides or {}),
                                       **(node_overrides or {}).get(node.node_id, {})})
        # `odradek storage random-uuid`'s own function: a process start (1-2 s on a loaded
        # machine) per cluster saved; the command itself is tested in tests/cli.
        self.cluster_id = random_uuid()

    def format(self) -> None:
        """`odradek storage format` on every node with the one cluster id, the nodes' formats
        run at once (each is a process start of its own)."""
        formats = [subprocess.Popen([*ODRADEK, "storage", "format", "--config",
                                     str(node.config_path), "--cluster-id", self.cluster_id],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for node in self.nodes.values()]
        for run in formats:
            stdout, stderr = run.communicate(timeout=120)
            if run.returncode != 0:
                raise subprocess.CalledProcessError(run.returncode, run.args, stdout, stderr)

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()

    def stop(self, timeout: float = 6, quorum_gone_grace: float = 2.0) -> None:
        """The end of a test: SIGTERM to every running node at once, then wait (SIGKILL after
        `timeout`). A node a test paused (SIGSTOP) is resumed first: a stopped process cannot
        take SIGTERM.

        Nodes whose controlled shutdowns wait on controllers that are stopping too wait out
        broker.session.timeout.ms (9 s), which nothing at the end of a test needs (every
        cluster test's teardown waited it): once fewer than a majority of the voters run,
        nothing commits any more and what still runs is killed `quorum_gone_grace` seconds
        later; otherwise after `timeout`."""
        running = self.live_nodes()
        for node in running:
            node.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            node.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        majority = sum(node.is_voter for node in self.nodes.values()) // 2 + 1
        deadline = time.monotonic() + timeout
        quorum_gone_at = None
        while any(node.running for node in running):
            now = time.monotonic()
            if quorum_gone_at is None and sum(
                    node.is_voter and node.running for node in self.nodes.values()) < majority:
                quorum_gone_at = now
            if now >= deadline or (quorum_gone_at is not None
                                   and now - quorum_gone_at >= quorum_gone_grace):
                for node in running:
                    node.kill()
                return
            time.sleep(0.05)

    def kill_all(self) -> None:
        for node in self.nodes.values():
            node.kill()

    def live_nodes(self) -> list[ClusterNode]:
        return [node for node in self.nodes.values() if node.running]

    def agreed_leader(self, nodes: list[ClusterNode] | None = None) -> tuple[int, int] | None:
        """(leader id, epoch) if every given node (default: every running one) answers, all
        name the same leader in the same epoch, exactly one of them (that leader) says it
        leads and the others answer as followers (NOT_LEADER_OR_FOLLOWER)."""
        views = []
        voters = [node for node in self.live_nodes() if node.is_voter]
        for node in nodes if nodes is not None else voters:
            node.check_alive()
            view = node.describe_quorum()
            if view is None or view.leader_id < 0:
                return None
            views.append(view)
        if len({(v.leader_id, v.leader_epoch) for v in views}) != 1:
            return None
        leaders = [v for v in views if v.is_leader]
        followers = [v for v in views if not v.is_leader]
        if len(leaders) != 1 or any(
                v.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER.code for v in followers):
            return None
        return views[0].leader_id, views[0].leader_epoch

    def wait_for_leader(self, timeout: float, nodes: list[ClusterNode] | None = None,
                        min_epoch: int = 0) -> tuple[int, int]:
        def elected() -> tuple[int, int] | None:
            agreed = self.agreed_leader(nodes)
            return agreed if agreed is not None and agreed[1] >= min_epoch else None

        return wait_until(elected, timeout, interval=0.05,
                          message=f"an agreed quorum leader (epoch >= {min_epoch})")


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
