"""Listeners, security protocols, quorum voters and bootstrap servers: the parsing behind
`listeners`, `advertised.listeners`, `listener.security.protocol.map`,
`controller.quorum.voters` and `controller.quorum.bootstrap.servers`, with Kafka's error wording.

`Endpoint` is Kafka's EndPoint: one `NAME://host:port` with its security protocol. It is both
what a listener config parses into and what a broker registration carries in the metadata image
(there the host is the advertised one and the port the bound one).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.config.types import INTEGER_TEXT, ConfigError, csv_list

# SecurityProtocol names and ids (the ids are what broker registrations carry).
SECURITY_PROTOCOLS: dict[str, int] = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
SECURITY_PROTOCOL_NAMES: dict[int, str] = {id_: name for name, id_ in SECURITY_PROTOCOLS.items()}
# Kafka's default, in the order Kafka documents it.
DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP = \
    "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"

_LISTENER_PATTERN = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")
_HOST_PORT_PATTERN = re.compile(r".*?\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """`NAME://host:port` plus the security protocol its listener name maps to."""

    name: str  # the listener name, upper-cased
    host: str | None  # None: an empty host, i.e. bind to all interfaces
    port: int
    security_protocol: str  # a SECURITY_PROTOCOLS name

    @classmethod
    def registered(cls, name: str, host: str, port: int, security_protocol_id: int) -> Endpoint:
        """An endpoint as a broker registration record carries it (the protocol by id)."""
        protocol = SECURITY_PROTOCOL_NAMES.get(security_protocol_id, str(security_protocol_id))
        return cls(name, host, port, protocol)

    @property
    def security_protocol_id(self) -> int:
        return SECURITY_PROTOCOLS[self.security_protocol]

    def __str__(self) -> str:
        host = self.host or ""
        if ":" in host:
            host = f"[{host}]"
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True)
class QuorumVoter:
    """One `controller.quorum.voters` entry, `{id}@{host}:{port}`."""

    node_id: int
    host: str
    port: int


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}; names are upper-cased as Kafka normalises them."""
    result: dict[str, str] = {}
    for entry in csv_list(value):
        name, sep, protocol = entry.partition(":")
        if not sep:
            raise ConfigError("Error parsing configuration property "
                              f"'listener.security.protocol.map': entry '{entry}' is not of the "
                              "form NAME:PROTOCOL")
        protocol = protocol.strip()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid security protocol `{protocol}` defined in "
                              "listener.security.protocol.map")
        result[name.strip().upper()] = protocol
    return result


def parse_endpoints(value: str | None, protocol_map: Mapping[str, str], config_name: str,
                    require_distinct_ports: bool = True) -> list[Endpoint]:
    """Parses a listener list (`listeners`, `advertised.listeners`) the way Kafka does."""
    endpoints: list[Endpoint] = []
    for entry in csv_list(value):
        match = _LISTENER_PATTERN.fullmatch(entry)
        if match is None:
            raise ConfigError(f"Unable to parse {entry} to a broker endpoint "
                              f"(configuration {config_name})")
        name = match.group(1).upper()
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ConfigError(f"No security protocol defined for listener {name} "
                              f"(configuration {config_name}); add it to "
                              "listener.security.protocol.map")
        endpoints.append(Endpoint(name, match.group(2) or None, int(match.group(3)), protocol))
    names = [endpoint.name for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, {config_name}: {value}")
    if require_distinct_ports:
        _check_distinct_ports(endpoints, config_name, value)
    return endpoints


def _ip_version(host: str | None) -> int | None:
    try:
        return ipaddress.ip_address(host or "").version
    except ValueError:
        return None


def _check_distinct_ports(endpoints: list[Endpoint], config_name: str, value: str | None) -> None:
    by_port: dict[int, list[Endpoint]] = {}
    for endpoint in endpoints:
        if endpoint.port != 0:  # port 0 (pick a free port) may repeat
            by_port.setdefault(endpoint.port, []).append(endpoint)
    for same_port in by_port.values():
        if len(same_port) == 1:
            continue
        versions = sorted(str(_ip_version(endpoint.host)) for endpoint in same_port)
        if versions != ["4", "6"]:
            raise ConfigError("Each listener must have a different port unless exactly one "
                              "listener has an IPv4 address and the other IPv6 address, "
                              f"{config_name}: {value}")


def _valid_host(host: str) -> bool:
    return bool(host) and re.fullmatch(r"[0-9a-zA-Z\-%._:]*", host) is not None


def parse_quorum_voters(entries: Iterable[str],
                        require_routable: bool = True) -> dict[int, QuorumVoter]:
    """`controller.quorum.voters` entries -> {node id: voter} (Kafka's parseVoterConnections)."""
    name = "controller.quorum.voters"
    voters: dict[int, QuorumVoter] = {}
    for entry in entries:
        id_and_address = entry.split("@")
        if len(id_and_address) != 2:
            raise ConfigError(f"Invalid configuration value for {name}. Each entry should be in "
                              "the form `{id}@{host}:{port}`.")
        id_text, address = id_and_address
        if not INTEGER_TEXT.fullmatch(id_text.strip()):
            raise ConfigError(f"Failed to parse voter ID as an integer from {id_text}")
        match = _HOST_PORT_PATTERN.fullmatch(address)
        if match is None or not _valid_host(match.group(1)):
            raise ConfigError(f"Failed to parse host name from entry {entry} for the "
                              f"configuration {name}. Each entry should be in the form "
                              "`{id}@{host}:{port}`.")
        host = match.group(1)
        if require_routable and host == "0.0.0.0":
            raise ConfigError(f"Host string ({host}) is not routeable")
        node_id = int(id_text.strip())
        if node_id in voters:
            raise ConfigError(f"Duplicate voter id {node_id} in {name}")
        voters[node_id] = QuorumVoter(node_id, host, int(match.group(2)))
    return voters


def parse_bootstrap_servers(entries: Iterable[str]) -> list[tuple[str, int]]:
    """`controller.quorum.bootstrap.servers` entries -> [(host, port)]."""
    name = "controller.quorum.bootstrap.servers"
    servers = []
    for entry in entries:
        match = _HOST_PORT_PATTERN.fullmatch(entry)
        if match is None or not _valid_host(match.group(1)):
            raise ConfigError(f"Failed to parse host name or port from {entry} for the "
                              f'configuration {name}. Each entry should be in the form '
                              '"{host}:{port}"')
        servers.append((match.group(1), int(match.group(2))))
    return servers


def validate_voters(name: str, value: Any) -> None:
    parse_quorum_voters(value, require_routable=False)


def validate_bootstrap_servers(name: str, value: Any) -> None:
    parse_bootstrap_servers(value)


def validate_security_protocol_map(name: str, value: Any) -> None:
    parse_security_protocol_map(value)

