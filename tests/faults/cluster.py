"""The cluster a fault run works on: tests/cluster/quorum_cluster.py's QuorumCluster (N combined
broker+controller nodes of real `odradek server-start` processes, static voters), either on
loopback with random ports or each node in a network namespace of its own (netns.py) with its
own address, plus what the nemesis needs: pause/resume, kill/restart, isolate/heal, and the
current leader of a partition."""

from __future__ import annotations

import signal
from pathlib import Path

from broker_process import free_port, wait_until
from quorum_cluster import ClusterNode, QuorumCluster
from small_disk import SmallDisk

from faults.netns import NetnsNetwork
from odradek.cli.storage import random_uuid

NETNS_BROKER_PORT = 9092  # every node has an address of its own: fixed ports will do
NETNS_CONTROLLER_PORT = 9093


def distinct_free_ports(count: int) -> list[int]:
    """`count` free loopback ports, no two alike (free_port() alone may hand out one port twice:
    it closes its socket, and the kernel may give the same port to the next call)."""
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return list(ports)


class FaultCluster(QuorumCluster):
    def __init__(self, root: Path, size: int = 3, overrides: dict[str, str] | None = None,
                 network: NetnsNetwork | None = None, disk_bytes: int | None = None) -> None:
        """`network`: a set-up NetnsNetwork holding nodes 1..size (None: loopback).
        `disk_bytes`: each node's log directory on a small disk of its own (tmpfs, root only:
        DiskUnavailable otherwise) that the nemesis can fill."""
        self.network = network
        self.disks: dict[int, SmallDisk] = {}
        self.nodes = {}
        ports = distinct_free_ports(2 * size)
        for node_id in range(1, size + 1):
            if network is None:
                node = ClusterNode(node_id, root / f"node-{node_id}", ports.pop(), ports.pop())
            else:
                node = ClusterNode(node_id, root / f"node-{node_id}", NETNS_BROKER_PORT,
                                   NETNS_CONTROLLER_PORT, host=network.address(node_id),
                                   launch_prefix=network.launch_prefix(node_id))
            self.nodes[node_id] = node
        voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}"
                          for n in self.nodes.values())
        for node in self.nodes.values():
            node.write_config(voters, overrides or {})
        if disk_bytes is not None:
            for node_id, node in self.nodes.items():
                self.disks[node_id] = SmallDisk(node.workdir / "data", disk_bytes).mount()
        self.paused: set[int] = set()
        self.cluster_id = random_uuid()  # as QuorumCluster: no process start for it

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.host}:{n.port}" for n in self.nodes.values())

    def reachable_nodes(self) -> list[ClusterNode]:
        """Running nodes the client can talk to: not paused, not cut off."""
        isolated = self.network.isolated if self.network else set()
        return [n for n in self.live_nodes()
                if n.node_id not in self.paused and n.node_id not in isolated]

    # -- readiness
    def unfenced_brokers(self) -> set[int]:
        for node in self.reachable_nodes():
            response = node.metadata(topics=[])
            if response is not None:
                return {broker.node_id for broker in response.brokers}
        return set()

    def wait_ready(self, timeout: float) -> None:
        """A quorum leader every node agrees on and every broker registered and unfenced."""
        def all_unfenced() -> bool:
            for node in self.nodes.values():
                node.check_alive()  # a node that exited fails the wait at once, with its log
            return self.unfenced_brokers() == set(self.nodes)

        self.wait_for_leader(timeout)
        wait_until(all_unfenced, timeout, interval=0.2,
                   message=f"brokers {sorted(self.nodes)} registered and unfenced")

    def partition_state(self, topic: str, partition: int) -> tuple[int, list[int]] | None:
        """(leader, ISR) of a partition, asked of the reachable nodes in turn (the first that
        names a leader); None when none does."""
        for node in self.reachable_nodes():
            response = node.metadata(topics=[topic])
            if response is None or not response.topics or response.topics[0].error_code:
                continue
            for state in response.topics[0].partitions:
                if state.partition_index == partition and state.leader_id >= 0:
                    return state.leader_id, list(state.isr_nodes)
        return None

    def partition_leader(self, topic: str, partition: int) -> int | None:
        state = self.partition_state(topic, partition)
        return None if state is None else state[0]

    def wait_partitions_ready(self, topic: str, partitions: int, replicas: int,
                              timeout: float) -> None:
        """Every partition has a leader and a full ISR on every node's metadata."""
        def ready() -> bool:
            for node in self.reachable_nodes():
                response = node.metadata(topics=[topic])
                if response is None or response.topics[0].error_code:
                    return False
                states = response.topics[0].partitions
                if len(states) != partitions or any(
                        s.leader_id < 0 or len(s.isr_nodes) < replicas for s in states):
                    return False
            return True

        wait_until(ready, timeout, interval=0.2,
                   message=f"{topic}'s {partitions} partitions led with {replicas} in sync")

    # -- faults
    def pause(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.running:
            node.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.running:
            node.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        self.paused.discard(node_id)

    def isolate(self, node_id: int) -> None:
        if self.network is None:
            raise RuntimeError("a network partition needs the nodes in namespaces (netns)")
        self.network.isolate(node_id)

    def heal(self, node_id: int) -> None:
        assert self.network is not None
        self.network.heal(node_id)

    def fill_disk(self, node_id: int) -> None:
        """The node's disk full: its next write fails and it halts (Kafka's behaviour when its
        only log directory fails)."""
        self.disks[node_id].fill()

    def free_disk(self, node_id: int) -> None:
        """Room again on the node's disk, and the node restarted if it halted meanwhile."""
        self.disks[node_id].free()
        node = self.nodes[node_id]
        if not node.running:
            node.start()

    def unmount_disks(self) -> None:
        for disk in self.disks.values():
            disk.unmount()

    def shutdown(self) -> None:
        """Undo every fault, then stop every node (SIGTERM, SIGKILL if it lingers)."""
        for node_id in list(self.paused):
            self.resume(node_id)
        if self.network is not None:
            self.network.heal_all()
        self.stop()
        self.kill_all()

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"--- node {n.node_id} ({n.log_path}) ---\n{n.log_tail(lines)}"
                         for n in self.nodes.values())
