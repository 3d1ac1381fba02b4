"""Network namespaces for the nodes of a fault run, so that a network partition can cut one node
off from the others and from the client.

Layout: a bridge in the root namespace holding 10.77.X.254/24 (the client, i.e. the test
process, reaches the nodes through it); per node a namespace with a veth pair whose host end is
a port of the bridge and whose other end carries 10.77.X.<node id>/24. Node-to-node traffic
crosses the bridge too, so setting a node's host-side veth down isolates it from everyone.
(iptables is not installed here; link down needs nothing but iproute2.)

Names carry the creating process's pid (`odf<pid>...`, at most 15 characters as Linux wants
for links), so parallel runs do not clash and a run's leftovers (its process is gone) are
removed by the next one. Needs root; any failure raises NetnsError with the command and its
error, never a skip.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Self

PREFIX = "odf"
_OWNED = re.compile(rf"^{PREFIX}(\d+)(?:n|h|p|br)\d*$")
SUBNET_BASE = "10.77"


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=20)
    except FileNotFoundError as missing:
        raise NetnsError("`ip` (iproute2) is not installed: network namespaces need it") \
            from missing
    if check and done.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` failed ({done.returncode}): "
                         f"{done.stderr.strip()} (network namespaces need root and iproute2)")
    return done


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete namespaces and links of our prefix whose creating process is gone; their names."""
    removed = []
    namespaces = _ip("netns", "list", check=False).stdout.split()
    links = re.findall(r"^\d+: ([^:@\s]+)", _ip("-o", "link", "show", check=False).stdout,
                       flags=re.MULTILINE)
    for name in [n for n in links if _OWNED.match(n)] + [n for n in namespaces
                                                          if _OWNED.match(n)]:
        match = _OWNED.match(name)
        if match and not _pid_alive(int(match.group(1))):
            if name in namespaces:
                _ip("netns", "delete", name, check=False)
            else:
                _ip("link", "delete", name, check=False)
            removed.append(name)
    return removed


def _free_subnet(preferred: int) -> int:
    """A 10.77.X.0/24 no interface of this machine uses (X from 1 to 250)."""
    used = set(re.findall(rf"inet {re.escape(SUBNET_BASE)}\.(\d+)\.",
                          _ip("-o", "-4", "addr", "show", check=False).stdout))
    for step in range(250):
        candidate = (preferred + step) % 250 + 1
        if str(candidate) not in used:
            return candidate
    raise NetnsError(f"no free {SUBNET_BASE}.X.0/24 subnet")


@dataclass
class NodeLink:
    node_id: int
    namespace: str
    host_veth: str  # the bridge port in the root namespace: down = partitioned
    address: str


class NetnsNetwork:
    """The namespaces, bridge and links of one run. Use as a context manager: torn down on exit
    even if the run failed (processes must be stopped first, or their namespace lingers until
    they exit)."""

    def __init__(self, node_ids: list[int]) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.node_ids = node_ids
        self.bridge = f"{self.tag}br"
        self.subnet: int | None = None
        self.links: dict[int, NodeLink] = {}
        self.isolated: set[int] = set()

    @property
    def client_address(self) -> str:
        return f"{SUBNET_BASE}.{self.subnet}.254"

    def address(self, node_id: int) -> str:
        return self.links[node_id].address

    def launch_prefix(self, node_id: int) -> tuple[str, ...]:
        """What a node's command is run under: `ip netns exec` execs the command itself, so the
        child's pid is the node's (kill -9 and SIGSTOP reach it)."""
        return ("ip", "netns", "exec", self.links[node_id].namespace)

    def setup(self) -> NetnsNetwork:
        if os.geteuid() != 0:
            raise NetnsError("network namespaces need root (this process is uid "
                             f"{os.geteuid()})")
        remove_stale()
        self.subnet = _free_subnet(os.getpid() % 250)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.client_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for node_id in self.node_ids:
                link = NodeLink(node_id, f"{self.tag}n{node_id}", f"{self.tag}h{node_id}",
                                f"{SUBNET_BASE}.{self.subnet}.{node_id}")
                self.links[node_id] = link
                peer = f"{self.tag}p{node_id}"
                _ip("netns", "add", link.namespace)
                _ip("-n", link.namespace, "link", "set", "lo", "up")
                _ip("link", "add", link.host_veth, "type", "veth", "peer", "name", peer)
                _ip("link", "set", peer, "netns", link.namespace)
                _ip("link", "set", link.host_veth, "master", self.bridge)
                _ip("link", "set", link.host_veth, "up")
                _ip("-n", link.namespace, "addr", "add", f"{link.address}/24", "dev", peer)
                _ip("-n", link.namespace, "link", "set", peer, "up")
        except BaseException:
            self.teardown()
            raise
        return self

    def isolate(self, node_id: int) -> None:
        """Cut the node off from every other node and from the client."""
        _ip("link", "set", self.links[node_id].host_veth, "down")
        self.isolated.add(node_id)

    def heal(self, node_id: int) -> None:
        _ip("link", "set", self.links[node_id].host_veth, "up")
        self.isolated.discard(node_id)

    def heal_all(self) -> None:
        for node_id in list(self.isolated):
            self.heal(node_id)

    def teardown(self) -> list[str]:
        """Delete everything of this run (best effort, every step tried); the errors met."""
        errors = []
        for link in self.links.values():
            for args in (("link", "delete", link.host_veth), ("netns", "delete", link.namespace)):
                done = _ip(*args, check=False)
                if done.returncode != 0 and "Cannot find" not in done.stderr \
                        and "No such" not in done.stderr:
                    errors.append(f"ip {' '.join(args)}: {done.stderr.strip()}")
        done = _ip("link", "delete", self.bridge, check=False)
        if done.returncode != 0 and "Cannot find" not in done.stderr:
            errors.append(f"ip link delete {self.bridge}: {done.stderr.strip()}")
        self.links.clear()
        self.isolated.clear()
        return errors

    def __enter__(self) -> Self:
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.teardown()
