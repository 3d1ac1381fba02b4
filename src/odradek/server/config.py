"""Broker configuration: Kafka's broker config table, `server.properties` parsing, `KafkaConfig`.

Names, types, defaults, validation and error wording are Kafka 3.8's (KafkaConfig, ConfigDef),
so a Kafka user's `server.properties` works unchanged.

- `BROKER_CONFIGS` is the one table of broker config definitions. The broker-level defaults of
  topic configs (`log.segment.bytes`, `log.retention.ms`, ...) are not written here: they are
  derived from the storage engine's topic table (`odradek.storage.config.TOPIC_CONFIGS`) by
  `_log_configs_from_storage`, so every key is defined once.
- `parse_properties` / `load_properties` read Java `.properties` text (comments, `=`/`:`/space
  separators, line continuations, escapes), as `java.util.Properties.load` does.
- `KafkaConfig` parses and validates a property map (Kafka's checks for KRaft mode), exposes
  typed accessors, and describes itself for DescribeConfigs. Unknown keys are a logged warning,
  invalid values a `ConfigError` naming key, value and expectation.
- `embedded_default_config` is the single-node combined config `make run` uses; the example
  `config/server.properties` holds the same settings.
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.storage import config as storage_config
from odradek.storage.config import INT_MAX, LONG_MAX, ConfigType, at_least, format_value, one_of

log = logging.getLogger("odradek.server.config")

SHORT_MAX = 2**15 - 1
_INTEGER_LIMITS = {ConfigType.SHORT: SHORT_MAX, ConfigType.INT: INT_MAX, ConfigType.LONG: LONG_MAX}

# SecurityProtocol names and ids (the ids are what broker registrations carry).
SECURITY_PROTOCOLS: dict[str, int] = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# Kafka's default, in the order Kafka documents it.
DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP = \
    "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"

BROKER_ROLE = "broker"
CONTROLLER_ROLE = "controller"

# Keys carrying per-listener overrides (`listener.name.internal.ssl.keystore.location`): stored
# in `originals` and read by prefix, so they are never reported as unused.
_PASS_THROUGH_PREFIXES = ("listener.name.",)
_ID_SYNONYMS = {"node.id": "broker.id", "broker.id": "node.id"}


class ConfigError(ValueError):
    """An invalid broker configuration; the message names the key, the value and the expectation."""


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class UpdateMode(enum.Enum):
    """Whether a config can change without a restart, as Kafka's docs list it."""

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' ConfigSource values."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class Password:
    """A secret config value; prints as `[hidden]` (Kafka's Password) so logs never show it."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


Validator = Callable[[str, Any], None]


@dataclass(frozen=True)
class BrokerConfigDef:
    """One broker config: what parsing, validation and DescribeConfigs need to know."""

    name: str
    type: ConfigType
    default: Any  # None: no default (unset unless supplied)
    validator: Validator | None
    importance: Importance
    update_mode: UpdateMode
    doc: str
    topic_config: str | None = None  # the topic config this broker key is the default of

    @property
    def sensitive(self) -> bool:
        return self.type == ConfigType.PASSWORD

    def parse(self, value: Any) -> Any:
        """Converts a string (or an already typed value) to this config's type and validates it."""
        parsed = parse_config_value(self.name, self.type, value)
        if parsed is not None and self.validator is not None:
            try:
                self.validator(self.name, parsed)
            except ConfigError:
                raise
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        return parsed


def _java_trim(text: str) -> str:
    # String.trim() drops every char <= U+0020 at both ends, not just Unicode whitespace.
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")


def parse_config_value(name: str, config_type: ConfigType, value: Any) -> Any:
    """Kafka's ConfigDef.parseType: trims strings, then converts; Kafka's error wording."""
    if value is None:
        return None

    def invalid(reason: str) -> ConfigError:
        shown = value.value if isinstance(value, Password) else value
        return ConfigError(f"Invalid value {shown} for configuration {name}: {reason}")

    text = _java_trim(value) if isinstance(value, str) else None
    if config_type == ConfigType.BOOLEAN:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise invalid("Expected value to be either true or false")
    if config_type in _INTEGER_LIMITS:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif text is not None and _INTEGER_TEXT.fullmatch(text):
            number = int(text)
        else:
            raise invalid(f"Not a number of type {config_type.name}")
        limit = _INTEGER_LIMITS[config_type]
        if not -limit - 1 <= number <= limit:
            raise invalid(f"Not a number of type {config_type.name}")
        return number
    if config_type == ConfigType.DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if text is not None and "_" not in text:
            try:
                return float(text)
            except ValueError:
                pass
        raise invalid("Not a number of type DOUBLE")
    if config_type == ConfigType.LIST:
        if isinstance(value, (list, tuple)):
            return [_java_trim(str(item)) for item in value]
        if text is None:
            raise invalid("Expected a comma separated list.")
        return _LIST_SEPARATOR.split(text) if text else []
    if config_type == ConfigType.PASSWORD:
        if isinstance(value, Password):
            return value
        if text is None:
            raise invalid("Expected value to be a string, but it was a " + type(value).__name__)
        return Password(text)
    # STRING and CLASS (a class name: Odradek has no JVM classes to load).
    if text is None:
        raise invalid("Expected value to be a string, but it was a " + type(value).__name__)
    return text


# ---------------------------------------------------------------------------------------------
# Listeners, voters, bootstrap servers
# ---------------------------------------------------------------------------------------------

_LISTENER_PATTERN = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")
_HOST_PORT_PATTERN = re.compile(r".*?\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)")


@dataclass(frozen=True)
class Endpoint:
    """One parsed listener: `NAME://host:port` plus the security protocol its name maps to."""

    name: str  # the listener name, upper-cased
    host: str | None  # None: an empty host, i.e. bind to all interfaces
    port: int
    security_protocol: str

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


def _csv(value: str | None) -> list[str]:
    """Kafka's parseCsvList: split on commas, trim, drop empty entries."""
    if not value:
        return []
    return [item for item in _LIST_SEPARATOR.split(_java_trim(value)) if item]


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}; names are upper-cased as Kafka normalises them."""
    result: dict[str, str] = {}
    for entry in _csv(value):
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
    for entry in _csv(value):
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
        if not _INTEGER_TEXT.fullmatch(id_text.strip()):
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


def _validate_voters(name: str, value: Any) -> None:
    parse_quorum_voters(value, require_routable=False)


def _validate_bootstrap_servers(name: str, value: Any) -> None:
    parse_bootstrap_servers(value)


def _validate_security_protocol_map(name: str, value: Any) -> None:
    parse_security_protocol_map(value)


# ---------------------------------------------------------------------------------------------
# The broker config table
# ---------------------------------------------------------------------------------------------

_B, _S, _I, _SH, _L, _D, _LST, _C, _P = (
    ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG,
    ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS, ConfigType.PASSWORD)
_HIGH, _MEDIUM, _LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_RO, _PB, _CW = UpdateMode.READ_ONLY, UpdateMode.PER_BROKER, UpdateMode.CLUSTER_WIDE

_DEFAULT_PRINCIPAL_BUILDER = \
    "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
_DEFAULT_ASSIGNORS = ["org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                      "org.apache.kafka.coordinator.group.assignor.RangeAssignor"]
_DOUBLE_MAX = 1.7976931348623157e308

# (name, type, default, validator, importance, update mode, doc). Kafka 3.8's defaults.
_BROKER_TABLE: list[tuple[str, ConfigType, Any, Validator | None, Importance, UpdateMode, str]] = [
    # --- KRaft: roles, ids, quorum ---
    ("process.roles", _LST, [], one_of(BROKER_ROLE, CONTROLLER_ROLE), _HIGH, _RO,
     "The roles this process plays: 'broker', 'controller', or 'broker,controller'."),
    ("node.id", _I, -1, None, _HIGH, _RO,
     "The node id of this process; required in KRaft mode."),
    ("broker.id", _I, -1, None, _HIGH, _RO,
     "The broker id of this server; must equal node.id when both are set."),
    ("controller.quorum.voters", _LST, [], _validate_voters, _HIGH, _RO,
     "The static controller quorum: comma-separated `{id}@{host}:{port}` entries."),
    ("controller.quorum.bootstrap.servers", _LST, [], _validate_bootstrap_servers, _HIGH, _RO,
     "Controller endpoints (`{host}:{port}`) used to discover the quorum (dynamic quorum)."),
    ("controller.quorum.election.timeout.ms", _I, 1000, None, _HIGH, _RO,
     "Maximum time without a leader fetch before a voter starts an election."),
    ("controller.quorum.fetch.timeout.ms", _I, 2000, None, _HIGH, _RO,
     "Maximum time without a successful fetch from the leader before becoming a candidate."),
    ("controller.quorum.election.backoff.max.ms", _I, 1000, None, _HIGH, _RO,
     "Maximum backoff before starting a new election."),
    ("controller.quorum.append.linger.ms", _I, 25, None, _MEDIUM, _RO,
     "How long the quorum leader waits for writes to accumulate before flushing."),
    ("controller.quorum.request.timeout.ms", _I, 2000, None, _MEDIUM, _RO,
     "Timeout of quorum requests between controllers."),
    ("controller.quorum.retry.backoff.ms", _I, 20, None, _LOW, _RO,
     "Backoff before retrying a failed quorum request."),
    ("controller.listener.names", _S, None, None, _HIGH, _RO,
     "Comma-separated names of the listeners used by the controller; required in KRaft mode."),
    ("sasl.mechanism.controller.protocol", _S, "GSSAPI", None, _HIGH, _RO,
     "SASL mechanism used to talk to controllers."),
    ("early.start.listeners", _S, None, None, _HIGH, _RO,
     "Listeners that may start before the authorizer has finished initializing."),
    ("broker.heartbeat.interval.ms", _I, 2000, None, _MEDIUM, _RO,
     "Time between broker heartbeats to the controller."),
    ("broker.session.timeout.ms", _I, 9000, None, _MEDIUM, _RO,
     "How long a broker lease lasts without heartbeats."),
    ("initial.broker.registration.timeout.ms", _I, 60000, None, _MEDIUM, _RO,
     "How long a starting broker waits for its registration before exiting."),
    ("metadata.log.dir", _S, None, None, _HIGH, _RO,
     "Directory of the metadata log; the first of log.dirs when unset."),
    ("metadata.log.segment.bytes", _I, 1073741824, at_least(12), _HIGH, _RO,
     "Maximum size of one metadata log segment."),
    ("metadata.log.segment.ms", _L, 604800000, None, _HIGH, _RO,
     "Maximum time before a new metadata log segment is rolled."),
    ("metadata.max.retention.bytes", _L, 104857600, None, _HIGH, _RO,
     "Maximum combined size of the metadata log and snapshots before old ones are deleted."),
    ("metadata.max.retention.ms", _L, 604800000, None, _HIGH, _RO,
     "How long a metadata log segment or snapshot is kept."),
    ("metadata.log.max.record.bytes.between.snapshots", _L, 20971520, at_least(1), _HIGH, _RO,
     "Bytes of metadata log after the latest snapshot that trigger a new snapshot."),
    ("metadata.log.max.snapshot.interval.ms", _L, 3600000, at_least(0), _HIGH, _RO,
     "Maximum time between snapshots when there are new committed records (0 disables)."),
    ("metadata.max.idle.interval.ms", _I, 500, at_least(0), _LOW, _RO,
     "How often the active controller writes no-op records (0 disables)."),
    ("broker.rack", _S, None, None, _MEDIUM, _RO,
     "Rack of the broker, used for rack-aware replica placement."),
    # --- socket server ---
    ("listeners", _S, "PLAINTEXT://:9092", None, _HIGH, _PB,
     "Comma-separated `NAME://host:port` URIs to listen on; an empty host binds all interfaces."),
    ("advertised.listeners", _S, None, None, _HIGH, _PB,
     "Listener addresses published to clients; defaults to the non-controller listeners."),
    ("listener.security.protocol.map", _S, DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP,
     _validate_security_protocol_map, _LOW, _PB,
     "Map of listener names to security protocols, `NAME:PROTOCOL,...`."),
    ("inter.broker.listener.name", _S, None, None, _MEDIUM, _RO,
     "Listener used between brokers; by default the one named after "
     "security.inter.broker.protocol."),
    ("security.inter.broker.protocol", _S, "PLAINTEXT", one_of(*SECURITY_PROTOCOLS), _MEDIUM, _RO,
     "Security protocol between brokers; not to be set together with inter.broker.listener.name."),
    ("num.network.threads", _I, 3, at_least(1), _HIGH, _CW,
     "Threads receiving requests from the network and sending responses."),
    ("num.io.threads", _I, 8, at_least(1), _HIGH, _CW,
     "Threads processing requests, which may include disk I/O."),
    ("background.threads", _I, 10, at_least(1), _HIGH, _CW,
     "Threads for background tasks."),
    ("socket.send.buffer.bytes", _I, 102400, None, _HIGH, _RO,
     "SO_SNDBUF of the socket server sockets; -1 uses the OS default."),
    ("socket.receive.buffer.bytes", _I, 102400, None, _HIGH, _RO,
     "SO_RCVBUF of the socket server sockets; -1 uses the OS default."),
    ("socket.request.max.bytes", _I, 104857600, at_least(1), _HIGH, _RO,
     "Maximum size of a request the socket server accepts."),
    ("socket.listen.backlog.size", _I, 50, at_least(1), _MEDIUM, _RO,
     "Maximum number of pending connections on a listening socket."),
    ("connections.max.idle.ms", _L, 600000, None, _MEDIUM, _RO,
     "Idle connections are closed after this many milliseconds."),
    ("connection.failed.authentication.delay.ms", _I, 100, at_least(0), _LOW, _RO,
     "Delay before closing a connection after failed authentication."),
    ("queued.max.requests", _I, 500, at_least(1), _HIGH, _RO,
     "Queued requests allowed before the network threads stop reading."),
    ("queued.max.request.bytes", _L, -1, None, _MEDIUM, _RO,
     "Queued request bytes allowed before no more requests are read (-1: no limit)."),
    ("max.connections", _I, INT_MAX, at_least(0), _MEDIUM, _CW,
     "Maximum number of connections to the broker at any time."),
    ("max.connections.per.ip", _I, INT_MAX, at_least(0), _MEDIUM, _CW,
     "Maximum number of connections from one IP address."),
    ("max.connections.per.ip.overrides", _S, "", None, _MEDIUM, _CW,
     "Per-IP or hostname overrides of max.connections.per.ip, `host:count,...`."),
    ("max.connection.creation.rate", _I, INT_MAX, at_least(0), _MEDIUM, _CW,
     "Maximum rate of new connections per second."),
    ("request.timeout.ms", _I, 30000, None, _HIGH, _RO,
     "Timeout of requests the broker sends (e.g. to other brokers)."),
    # --- logs (broker-only settings; topic defaults come from the storage table) ---
    ("log.dir", _S, "/tmp/kafka-logs", None, _HIGH, _RO,
     "The directory for log data (used when log.dirs is not set)."),
    ("log.dirs", _S, None, None, _HIGH, _RO,
     "Comma-separated directories for log data; log.dir is used when unset."),
    ("num.partitions", _I, 1, at_least(1), _MEDIUM, _RO,
     "Default number of partitions of a new topic."),
    ("num.recovery.threads.per.data.dir", _I, 1, at_least(1), _HIGH, _CW,
     "Threads per data directory for log recovery at startup and flushing at shutdown."),
    ("auto.create.topics.enable", _B, True, None, _HIGH, _RO,
     "Create a topic automatically when a client asks for metadata of an unknown one."),
    ("log.retention.check.interval.ms", _L, 300000, at_least(1), _MEDIUM, _RO,
     "How often the log manager checks for logs eligible for deletion."),
    ("log.flush.offset.checkpoint.interval.ms", _I, 60000, at_least(0), _HIGH, _RO,
     "How often the recovery point checkpoint is written."),
    ("log.flush.start.offset.checkpoint.interval.ms", _I, 60000, at_least(0), _HIGH, _RO,
     "How often the log start offset checkpoint is written."),
    ("log.cleaner.enable", _B, True, None, _MEDIUM, _RO,
     "Run the log cleaner (needed for compacted topics such as __consumer_offsets)."),
    ("log.cleaner.threads", _I, 1, at_least(0), _MEDIUM, _CW,
     "Number of log cleaner threads."),
    ("log.cleaner.dedupe.buffer.size", _L, 134217728, None, _MEDIUM, _CW,
     "Total memory for the cleaners' key-to-offset maps."),
    ("log.cleaner.io.buffer.size", _I, 524288, at_least(0), _MEDIUM, _CW,
     "Total memory for the cleaners' I/O buffers."),
    ("log.cleaner.io.buffer.load.factor", _D, 0.9, None, _MEDIUM, _CW,
     "Load factor of the cleaner's dedupe map."),
    ("log.cleaner.io.max.bytes.per.second", _D, _DOUBLE_MAX, None, _MEDIUM, _CW,
     "Throttle of the cleaner's combined read and write I/O."),
    ("log.cleaner.backoff.ms", _L, 15000, at_least(0), _MEDIUM, _CW,
     "Sleep time of the cleaner when there is nothing to clean."),
    ("log.initial.task.delay.ms", _L, 30000, at_least(0), _LOW, _RO,
     "Initial delay of the log manager's background tasks (for testing)."),
    ("log.dir.failure.timeout.ms", _L, 30000, at_least(1), _LOW, _RO,
     "How long a broker may fail to report a failed log dir before shutting down."),
    ("log.message.format.version", _S, "3.0-IV1", None, _MEDIUM, _CW,
     "Deprecated and ignored with inter-broker protocol 3.0 or later."),
    ("create.topic.policy.class.name", _C, None, None, _LOW, _RO,
     "Class validating topic creation requests (accepted; not used by Odradek)."),
    ("alter.config.policy.class.name", _C, None, None, _LOW, _RO,
     "Class validating alter-config requests (accepted; not used by Odradek)."),
    # --- replication ---
    ("default.replication.factor", _I, 1, None, _MEDIUM, _RO,
     "Replication factor of automatically created topics."),
    ("replica.lag.time.max.ms", _L, 30000, None, _HIGH, _RO,
     "A follower that has not caught up for this long is removed from the ISR."),
    ("replica.socket.timeout.ms", _I, 30000, None, _HIGH, _RO,
     "Socket timeout of replica fetch requests; at least replica.fetch.wait.max.ms."),
    ("replica.socket.receive.buffer.bytes", _I, 65536, None, _HIGH, _RO,
     "Socket receive buffer of replica fetchers."),
    ("replica.fetch.max.bytes", _I, 1048576, at_least(0), _MEDIUM, _RO,
     "Bytes per partition a follower fetch asks for (not an absolute maximum)."),
    ("replica.fetch.wait.max.ms", _I, 500, None, _MEDIUM, _RO,
     "Maximum wait of a follower fetch; at most replica.lag.time.max.ms."),
    ("replica.fetch.min.bytes", _I, 1, None, _HIGH, _RO,
     "Minimum bytes a follower fetch waits for."),
    ("replica.fetch.response.max.bytes", _I, 10485760, at_least(0), _MEDIUM, _RO,
     "Maximum bytes of a whole follower fetch response."),
    ("replica.fetch.backoff.ms", _I, 1000, at_least(0), _MEDIUM, _RO,
     "Sleep after a replica fetch error."),
    ("num.replica.fetchers", _I, 1, None, _HIGH, _CW,
     "Fetcher threads per source broker."),
    ("replica.high.watermark.checkpoint.interval.ms", _L, 5000, None, _HIGH, _RO,
     "How often the high watermark is checkpointed."),
    ("fetch.purgatory.purge.interval.requests", _I, 1000, None, _MEDIUM, _RO,
     "Purge interval (in requests) of the fetch purgatory."),
    ("producer.purgatory.purge.interval.requests", _I, 1000, None, _MEDIUM, _RO,
     "Purge interval (in requests) of the produce purgatory."),
    ("delete.records.purgatory.purge.interval.requests", _I, 1, None, _MEDIUM, _RO,
     "Purge interval (in requests) of the delete-records purgatory."),
    ("auto.leader.rebalance.enable", _B, True, None, _HIGH, _RO,
     "Move leadership back to preferred replicas in the background."),
    ("leader.imbalance.per.broker.percentage", _I, 10, None, _HIGH, _RO,
     "Leader imbalance per broker (percent) that triggers a rebalance."),
    ("leader.imbalance.check.interval.seconds", _L, 300, at_least(1), _HIGH, _RO,
     "How often the controller checks leader balance."),
    ("replica.selector.class", _S, None, None, _MEDIUM, _RO,
     "ReplicaSelector class choosing the preferred read replica (default: the leader)."),
    ("controlled.shutdown.enable", _B, True, None, _MEDIUM, _RO,
     "Move leadership away before shutting down."),
    ("delete.topic.enable", _B, True, None, _HIGH, _RO,
     "Allow topic deletion; when false, deletions are rejected."),
    ("fetch.max.bytes", _I, 57671680, at_least(1024), _MEDIUM, _RO,
     "Maximum bytes returned for a fetch request."),
    ("max.incremental.fetch.session.cache.slots", _I, 1000, at_least(0), _MEDIUM, _RO,
     "Maximum number of incremental fetch sessions kept."),
    ("inter.broker.protocol.version", _S, "3.8-IV0", None, _MEDIUM, _RO,
     "Deprecated in KRaft mode; the metadata.version is set by `odradek storage format`."),
    # --- group coordinator and offsets ---
    ("group.min.session.timeout.ms", _I, 6000, None, _MEDIUM, _RO,
     "Minimum session timeout a consumer may register."),
    ("group.max.session.timeout.ms", _I, 1800000, None, _MEDIUM, _RO,
     "Maximum session timeout a consumer may register."),
    ("group.initial.rebalance.delay.ms", _I, 3000, None, _MEDIUM, _RO,
     "How long the coordinator waits for more members before the first rebalance of a new group."),
    ("group.max.size", _I, INT_MAX, at_least(1), _MEDIUM, _RO,
     "Maximum number of members of one group."),
    ("group.coordinator.rebalance.protocols", _LST, ["classic"], one_of("classic", "consumer"),
     _MEDIUM, _RO, "Enabled rebalance protocols ('classic' is required)."),
    ("group.coordinator.threads", _I, 1, at_least(1), _MEDIUM, _RO,
     "Threads of the new group coordinator."),
    ("group.consumer.session.timeout.ms", _I, 45000, at_least(1), _MEDIUM, _RO,
     "Session timeout of consumer-protocol members."),
    ("group.consumer.min.session.timeout.ms", _I, 45000, at_least(1), _MEDIUM, _RO,
     "Minimum session timeout of consumer-protocol members."),
    ("group.consumer.max.session.timeout.ms", _I, 60000, at_least(1), _MEDIUM, _RO,
     "Maximum session timeout of consumer-protocol members."),
    ("group.consumer.heartbeat.interval.ms", _I, 5000, at_least(1), _MEDIUM, _RO,
     "Heartbeat interval of consumer-protocol members."),
    ("group.consumer.min.heartbeat.interval.ms", _I, 5000, at_least(1), _MEDIUM, _RO,
     "Minimum heartbeat interval of consumer-protocol members."),
    ("group.consumer.max.heartbeat.interval.ms", _I, 15000, at_least(1), _MEDIUM, _RO,
     "Maximum heartbeat interval of consumer-protocol members."),
    ("group.consumer.max.size", _I, INT_MAX, at_least(1), _MEDIUM, _RO,
     "Maximum number of members of one consumer-protocol group."),
    ("group.consumer.assignors", _LST, _DEFAULT_ASSIGNORS, None, _MEDIUM, _RO,
     "Server-side assignors of consumer-protocol groups; the first is the default."),
    ("offset.metadata.max.bytes", _I, 4096, None, _HIGH, _RO,
     "Maximum size of the metadata string of an offset commit."),
    ("offsets.load.buffer.size", _I, 5242880, at_least(1), _HIGH, _RO,
     "Batch size when loading offsets from the offsets topic."),
    ("offsets.topic.replication.factor", _SH, 3, at_least(1), _HIGH, _RO,
     "Replication factor of __consumer_offsets; creation waits until enough brokers exist."),
    ("offsets.topic.num.partitions", _I, 50, at_least(1), _HIGH, _RO,
     "Number of partitions of __consumer_offsets (do not change after deployment)."),
    ("offsets.topic.segment.bytes", _I, 104857600, at_least(1), _HIGH, _RO,
     "Segment size of __consumer_offsets."),
    ("offsets.topic.compression.codec", _I, 0, None, _HIGH, _RO,
     "Compression codec id for __consumer_offsets (0: none)."),
    ("offsets.retention.minutes", _I, 10080, at_least(1), _HIGH, _RO,
     "How long committed offsets of an empty group are kept."),
    ("offsets.retention.check.interval.ms", _L, 600000, at_least(1), _HIGH, _RO,
     "How often stale offsets are checked for."),
    ("offsets.commit.timeout.ms", _I, 5000, at_least(1), _HIGH, _RO,
     "An offset commit waits this long for the offsets topic replicas."),
    ("offsets.commit.required.acks", _SH, -1, None, _HIGH, _RO,
     "Deprecated: acks needed before an offset commit is accepted."),
    # --- transactions and producer ids ---
    ("transactional.id.expiration.ms", _I, 604800000, at_least(1), _HIGH, _RO,
     "A transactional id without transaction status updates for this long expires."),
    ("transaction.max.timeout.ms", _I, 900000, at_least(1), _HIGH, _RO,
     "Maximum transaction timeout a producer may request."),
    ("transaction.state.log.min.isr", _I, 2, at_least(1), _HIGH, _RO,
     "min.insync.replicas of __transaction_state."),
    ("transaction.state.log.load.buffer.size", _I, 5242880, at_least(1), _HIGH, _RO,
     "Batch size when loading producer ids and transactions from __transaction_state."),
    ("transaction.state.log.replication.factor", _SH, 3, at_least(1), _HIGH, _RO,
     "Replication factor of __transaction_state."),
    ("transaction.state.log.num.partitions", _I, 50, at_least(1), _HIGH, _RO,
     "Number of partitions of __transaction_state."),
    ("transaction.state.log.segment.bytes", _I, 104857600, at_least(1), _HIGH, _RO,
     "Segment size of __transaction_state."),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, 10000, at_least(1),
     _LOW, _RO, "How often timed-out transactions are rolled back."),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", _I, 3600000, at_least(1),
     _LOW, _RO, "How often expired transactional ids are removed."),
    ("transaction.partition.verification.enable", _B, True, None, _LOW, _CW,
     "Verify that a partition was added to the transaction before a transactional write."),
    ("producer.id.expiration.ms", _I, 86400000, at_least(1), _LOW, _CW,
     "How long a producer id's state is kept after its last write."),
    ("producer.id.expiration.check.interval.ms", _I, 600000, at_least(1), _LOW, _RO,
     "How often expired producer ids are removed."),
    # --- quotas and metrics ---
    ("quota.window.num", _I, 11, at_least(1), _LOW, _RO, "Samples kept for client quotas."),
    ("quota.window.size.seconds", _I, 1, at_least(1), _LOW, _RO,
     "Time span of one client quota sample."),
    ("replication.quota.window.num", _I, 11, at_least(1), _LOW, _RO,
     "Samples kept for replication quotas."),
    ("replication.quota.window.size.seconds", _I, 1, at_least(1), _LOW, _RO,
     "Time span of one replication quota sample."),
    ("controller.quota.window.num", _I, 11, at_least(1), _LOW, _RO,
     "Samples kept for controller mutation quotas."),
    ("controller.quota.window.size.seconds", _I, 1, at_least(1), _LOW, _RO,
     "Time span of one controller mutation quota sample."),
    ("metric.reporters", _LST, [], None, _LOW, _CW, "Metric reporter classes."),
    ("metrics.num.samples", _I, 2, at_least(1), _LOW, _RO, "Samples kept to compute metrics."),
    ("metrics.sample.window.ms", _L, 30000, at_least(1), _LOW, _RO,
     "Window of one metrics sample."),
    ("metrics.recording.level", _S, "INFO", one_of("INFO", "DEBUG", "TRACE"), _LOW, _RO,
     "Highest recording level of metrics."),
    # --- security (accepted and stored; TLS and SASL are implemented later) ---
    ("authorizer.class.name", _S, "", None, _LOW, _RO,
     "Authorizer class; empty disables authorization."),
    ("super.users", _S, None, None, _LOW, _RO,
     "Semicolon-separated principals allowed everything (read by the authorizer)."),
    ("allow.everyone.if.no.acl.found", _B, False, None, _LOW, _RO,
     "Whether a resource without ACLs is open to everyone (read by the authorizer)."),
    ("principal.builder.class", _C, _DEFAULT_PRINCIPAL_BUILDER, None, _MEDIUM, _PB,
     "Class building the KafkaPrincipal of a connection."),
    ("ssl.protocol", _S, "TLSv1.3", None, _MEDIUM, _PB, "TLS protocol used to create SSLContexts."),
    ("ssl.enabled.protocols", _LST, ["TLSv1.2", "TLSv1.3"], None, _MEDIUM, _PB,
     "TLS protocols enabled for connections."),
    ("ssl.provider", _S, None, None, _MEDIUM, _PB, "Security provider of the SSL connections."),
    ("ssl.cipher.suites", _LST, [], None, _LOW, _PB, "Enabled cipher suites (empty: all)."),
    ("ssl.keystore.type", _S, "JKS", None, _MEDIUM, _PB, "File format of the key store."),
    ("ssl.keystore.location", _S, None, None, _HIGH, _PB, "Location of the key store file."),
    ("ssl.keystore.password", _P, None, None, _HIGH, _PB, "Password of the key store file."),
    ("ssl.keystore.key", _P, None, None, _HIGH, _PB, "Private key in PEM format."),
    ("ssl.keystore.certificate.chain", _P, None, None, _HIGH, _PB,
     "Certificate chain in PEM format."),
    ("ssl.key.password", _P, None, None, _HIGH, _PB, "Password of the private key."),
    ("ssl.truststore.type", _S, "JKS", None, _MEDIUM, _PB, "File format of the trust store."),
    ("ssl.truststore.location", _S, None, None, _HIGH, _PB, "Location of the trust store file."),
    ("ssl.truststore.password", _P, None, None, _HIGH, _PB, "Password of the trust store file."),
    ("ssl.truststore.certificates", _P, None, None, _HIGH, _PB,
     "Trusted certificates in PEM format."),
    ("ssl.keymanager.algorithm", _S, "SunX509", None, _MEDIUM, _PB, "Key manager algorithm."),
    ("ssl.trustmanager.algorithm", _S, "PKIX", None, _MEDIUM, _PB, "Trust manager algorithm."),
    ("ssl.endpoint.identification.algorithm", _S, "https", None, _LOW, _PB,
     "Endpoint identification algorithm used to validate server host names."),
    ("ssl.secure.random.implementation", _S, None, None, _LOW, _PB,
     "SecureRandom implementation for SSL."),
    ("ssl.client.auth", _S, "none", one_of("required", "requested", "none"), _MEDIUM, _PB,
     "Whether the broker requests or requires client certificates."),
    ("ssl.principal.mapping.rules", _S, "DEFAULT", None, _LOW, _RO,
     "Rules mapping certificate distinguished names to short principal names."),
    ("ssl.engine.factory.class", _C, None, None, _LOW, _PB, "Custom SslEngineFactory class."),
    ("sasl.enabled.mechanisms", _LST, ["GSSAPI"], None, _MEDIUM, _PB,
     "SASL mechanisms enabled in the broker."),
    ("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI", None, _MEDIUM, _PB,
     "SASL mechanism used between brokers."),
    ("sasl.jaas.config", _P, None, None, _MEDIUM, _PB, "JAAS login context for SASL."),
    ("sasl.kerberos.service.name", _S, None, None, _MEDIUM, _PB,
     "Kerberos principal name the broker runs as."),
    ("sasl.server.callback.handler.class", _C, None, None, _MEDIUM, _PB,
     "SASL server callback handler class."),
    ("sasl.login.class", _C, None, None, _MEDIUM, _RO, "Login class for SASL."),
    ("sasl.login.callback.handler.class", _C, None, None, _MEDIUM, _RO,
     "SASL login callback handler class."),
    ("delegation.token.secret.key", _P, None, None, _MEDIUM, _RO,
     "Secret to generate and verify delegation tokens; tokens are disabled when unset."),
    ("delegation.token.max.lifetime.ms", _L, 604800000, at_least(1), _MEDIUM, _RO,
     "Maximum lifetime of a delegation token."),
    ("delegation.token.expiry.time.ms", _L, 86400000, at_least(1), _MEDIUM, _RO,
     "Validity of a delegation token before it must be renewed."),
    ("password.encoder.secret", _P, None, None, _MEDIUM, _RO,
     "Secret encoding dynamically configured passwords."),
]

# Log configs whose broker key is not their topic key's first synonym are read-only in Kafka
# (e.g. log.retention.hours); those given in hours/minutes are INTs with their own range.
_SCALED_SYNONYM_VALIDATORS: dict[str, Validator | None] = {
    "log.roll.hours": at_least(1),
    "log.roll.jitter.hours": at_least(0),
}
_HIGH_IMPORTANCE_LOG_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.retention.ms",
    "log.retention.minutes", "log.retention.hours", "log.retention.bytes", "log.cleanup.policy",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.flush.scheduler.interval.ms",
    "log.index.size.max.bytes", "message.max.bytes", "min.insync.replicas", "compression.type",
    "log.message.timestamp.type",
})


def _log_configs_from_storage() -> list[BrokerConfigDef]:
    """Broker-level defaults of topic configs, derived from the storage engine's topic table.

    `log.segment.bytes` is the broker default of topic config `segment.bytes`, etc. For keys with
    unit variants (`log.retention.ms` > `.minutes` > `.hours`) only the last, coarsest one has a
    default, so an explicitly set finer key always wins, as in Kafka.
    """
    defs = []
    for topic in storage_config.TOPIC_CONFIGS.values():
        chain = topic.broker_synonyms
        for position, synonym in enumerate(chain):
            scaled = synonym in storage_config.BROKER_UNIT_SCALE
            last = position == len(chain) - 1
            default = storage_config.BROKER_DEFAULTS.get(synonym, topic.default) if last else None
            doc = f"Default of topic config `{topic.name}`: {topic.doc}"
            if len(chain) > 1:
                doc += f" Precedence: {' > '.join(chain)}."
            defs.append(BrokerConfigDef(
                name=synonym,
                type=ConfigType.INT if scaled else topic.type,
                default=default,
                validator=_SCALED_SYNONYM_VALIDATORS.get(synonym) if scaled else topic.validator,
                importance=_HIGH if synonym in _HIGH_IMPORTANCE_LOG_KEYS else _MEDIUM,
                update_mode=_CW if position == 0 else _RO,
                doc=doc,
                topic_config=topic.name,
            ))
    return defs


def _build_table() -> dict[str, BrokerConfigDef]:
    defs = [BrokerConfigDef(name, ctype, default, validator, importance, mode, doc)
            for name, ctype, default, validator, importance, mode, doc in _BROKER_TABLE]
    defs += _log_configs_from_storage()
    table: dict[str, BrokerConfigDef] = {}
    for definition in defs:
        if definition.name in table:  # one key, one definition
            raise RuntimeError(f"broker config {definition.name} is defined twice")
        table[definition.name] = definition
    return dict(sorted(table.items()))


BROKER_CONFIGS: dict[str, BrokerConfigDef] = _build_table()

# For each topic-config-backed broker key: all broker keys of that topic config, highest first.
_SYNONYM_CHAINS: dict[str, tuple[str, ...]] = {
    synonym: topic.broker_synonyms
    for topic in storage_config.TOPIC_CONFIGS.values() for synonym in topic.broker_synonyms
}


# ---------------------------------------------------------------------------------------------
# Java .properties text
# ---------------------------------------------------------------------------------------------

_PROPERTIES_WHITESPACE = " \t\f"
_NATURAL_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _ends_with_odd_backslashes(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _logical_lines(text: str) -> Iterable[str]:
    """Joins continued lines, drops comments and blank lines (java.util.Properties' LineReader)."""
    natural = _NATURAL_LINE_BREAK.split(text)
    index = 0
    while index < len(natural):
        line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue  # a comment never continues, even when it ends with a backslash
        parts = []
        while _ends_with_odd_backslashes(line):
            parts.append(line[:-1])
            if index >= len(natural):
                line = ""
                break
            # Leading whitespace of a continuation line is dropped; a blank one ends the entry.
            line = natural[index].lstrip(_PROPERTIES_WHITESPACE)
            index += 1
        parts.append(line)
        yield "".join(parts)


def _unescape(text: str) -> str:
    """Properties.loadConvert: \\t \\n \\r \\f, \\uXXXX, and \\c -> c for any other c."""
    out = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\":
            out.append(char)
            continue
        if index >= len(text):
            break
        char = text[index]
        index += 1
        if char == "u":
            digits = text[index:index + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError("Malformed \\uxxxx encoding.")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(char, char))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped '=', ':' or whitespace; one separator may follow."""
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    preceding_backslash = False
    for index, char in enumerate(line):
        if char in "=:" and not preceding_backslash:
            key_end, value_start, has_separator = index, index + 1, True
            break
        if char in _PROPERTIES_WHITESPACE and not preceding_backslash:
            key_end, value_start = index, index + 1
            break
        preceding_backslash = char == "\\" and not preceding_backslash
    while value_start < len(line):
        char = line[value_start]
        if char not in _PROPERTIES_WHITESPACE:
            if not has_separator and char in "=:":
                has_separator = True
            else:
                break
        value_start += 1
    return line[:key_end], line[value_start:]


def parse_properties(text: str) -> dict[str, str]:
    """Parses Java `.properties` text like `Properties.load`; a repeated key's last value wins."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        result[_unescape(key)] = _unescape(value)
    return result


def load_properties(path: str | Path) -> dict[str, str]:
    """Reads a `.properties` file (UTF-8; Latin-1, Java's own encoding, when not valid UTF-8)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"Configuration file {path} does not exist") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"Configuration file {path} is a directory") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text)


def parse_override(item: str) -> tuple[str, str]:
    """One `--override key=value` item (split at the first '=')."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"Invalid override '{item}': expected property=value")
    return key.strip(), value


# ---------------------------------------------------------------------------------------------
# KafkaConfig
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigDescription:
    """One DescribeConfigs entry of a broker config."""

    name: str
    value: str | None  # None for sensitive or unset configs
    source: ConfigSource
    read_only: bool
    sensitive: bool
    config_type: ConfigType
    documentation: str
    synonyms: tuple[ConfigSynonym, ...]


def _format_for_describe(definition: BrokerConfigDef, value: Any) -> str | None:
    if value is None or definition.sensitive:
        return None
    return format_value(definition.type, value)


class KafkaConfig:
    """A parsed, validated broker configuration (Kafka's KafkaConfig for KRaft mode).

    `props` maps config names to strings (or already typed values). Unknown names are kept in
    `originals` and logged once as unused; invalid values raise `ConfigError`.
    """

    def __init__(self, props: Mapping[str, Any], *, log_unused: bool = True) -> None:
        self._originals: dict[str, Any] = {str(key): value for key, value in props.items()}
        # Supplied values first, so an error names the key the user actually wrote.
        self._values: dict[str, Any] = {
            name: definition.parse(self._originals[name])
            for name, definition in BROKER_CONFIGS.items() if name in self._originals
        }
        for name, definition in BROKER_CONFIGS.items():
            if name in self._values:
                continue
            stand_in = _ID_SYNONYMS.get(name)
            if stand_in in self._values:
                # Kafka's populateSynonyms: node.id and broker.id stand in for each other.
                self._values[name] = self._values[stand_in]
            else:
                self._values[name] = parse_config_value(name, definition.type, definition.default)
        self.unused_keys: list[str] = sorted(
            key for key in self._originals
            if key not in BROKER_CONFIGS and not key.startswith(_PASS_THROUGH_PREFIXES))
        if log_unused and self.unused_keys:
            log.warning("These configurations '[%s]' were supplied but are not used yet.",
                        ", ".join(self.unused_keys))
        self._validate()

    # --- construction ---

    @classmethod
    def from_file(cls, path: str | Path, overrides: Mapping[str, str] | None = None,
                  **kwargs: Any) -> KafkaConfig:
        """A `server.properties` file with `--override` values layered on top."""
        props: dict[str, Any] = dict(load_properties(path))
        props.update(overrides or {})
        return cls(props, **kwargs)

    # --- generic access ---

    @property
    def originals(self) -> dict[str, Any]:
        """Every supplied property (file + overrides), unparsed, including unknown ones."""
        return dict(self._originals)

    def originals_with_prefix(self, prefix: str, strip: bool = True) -> dict[str, Any]:
        return {(key[len(prefix):] if strip else key): value
                for key, value in self._originals.items() if key.startswith(prefix)}

    def get(self, name: str) -> Any:
        """The typed value of a defined config; the raw string of a supplied unknown one."""
        if name in self._values:
            return self._values[name]
        if name in self._originals:
            return self._originals[name]
        raise KeyError(f"Unknown configuration '{name}'")

    def values(self) -> dict[str, Any]:
        """Typed values of every defined broker config (defaults included)."""
        return dict(self._values)

    def is_set(self, name: str) -> bool:
        return name in self._originals

    @staticmethod
    def is_dynamic(name: str) -> bool:
        """Whether Kafka lets `name` change at runtime (per-broker or cluster-wide)."""
        definition = BROKER_CONFIGS.get(name)
        return definition is not None and definition.update_mode != UpdateMode.READ_ONLY

    def describe(self, names: Iterable[str] | None = None) -> list[ConfigDescription]:
        """DescribeConfigs entries: value, source (static broker config vs default), synonyms."""
        selected = BROKER_CONFIGS.keys() if names is None else names
        result = []
        for name in selected:
            definition = BROKER_CONFIGS.get(name)
            if definition is None:
                continue
            source = (ConfigSource.STATIC_BROKER_CONFIG if name in self._originals
                      else ConfigSource.DEFAULT_CONFIG)
            result.append(ConfigDescription(
                name=name,
                value=_format_for_describe(definition, self._values[name]),
                source=source,
                read_only=definition.update_mode == UpdateMode.READ_ONLY,
                sensitive=definition.sensitive,
                config_type=definition.type,
                documentation=definition.doc,
                synonyms=self._synonyms(name),
            ))
        return result

    def _synonyms(self, name: str) -> tuple[ConfigSynonym, ...]:
        synonyms = []
        chain = _SYNONYM_CHAINS.get(name, (name,))
        for member in chain[chain.index(name):]:
            definition = BROKER_CONFIGS[member]
            if member in self._originals:
                synonyms.append(ConfigSynonym(member, _format_for_describe(
                    definition, self._values[member]), ConfigSource.STATIC_BROKER_CONFIG))
        last = BROKER_CONFIGS[chain[-1]]
        if last.default is not None:
            synonyms.append(ConfigSynonym(last.name, _format_for_describe(last, last.default),
                                          ConfigSource.DEFAULT_CONFIG))
        return tuple(synonyms)

    def __repr__(self) -> str:
        set_keys = ", ".join(f"{key}={self._values.get(key, self._originals[key])}"
                             for key in sorted(self._originals))
        return f"KafkaConfig({set_keys})"

    # --- roles and ids ---

    @property
    def process_roles(self) -> frozenset[str]:
        return frozenset(self._values["process.roles"])

    @property
    def is_broker(self) -> bool:
        return BROKER_ROLE in self.process_roles

    @property
    def is_controller(self) -> bool:
        return CONTROLLER_ROLE in self.process_roles

    @property
    def is_combined(self) -> bool:
        return self.is_broker and self.is_controller

    @property
    def node_id(self) -> int:
        return self._values["node.id"]

    @property
    def rack(self) -> str | None:
        return self._values["broker.rack"]

    # --- listeners ---

    @property
    def controller_listener_names(self) -> list[str]:
        return [name.upper() for name in _csv(self._values["controller.listener.names"])]

    @property
    def listener_security_protocol_map(self) -> dict[str, str]:
        """The effective map (Kafka's effectiveListenerSecurityProtocolMap): when the map is not
        set explicitly and no SSL/SASL is in use, controller listeners map to PLAINTEXT."""
        mapping = parse_security_protocol_map(self._values["listener.security.protocol.map"])
        if self.process_roles and "listener.security.protocol.map" not in self._originals:
            secure = {"SSL", "SASL_SSL", "SASL_PLAINTEXT"}
            listener_names = [entry.split("://", 1)[0].upper()
                              for entry in _csv(self._values["listeners"])]
            if not any(name in secure for name in self.controller_listener_names + listener_names):
                for name in self.controller_listener_names:
                    mapping.setdefault(name, "PLAINTEXT")
        return mapping

    @property
    def listeners(self) -> list[Endpoint]:
        return parse_endpoints(self._values["listeners"], self.listener_security_protocol_map,
                               "listeners")

    @property
    def controller_listeners(self) -> list[Endpoint]:
        names = self.controller_listener_names
        return [endpoint for endpoint in self.listeners if endpoint.name in names]

    @property
    def data_plane_listeners(self) -> list[Endpoint]:
        """Listeners serving clients and brokers (all but the controller listeners)."""
        names = self.controller_listener_names
        return [endpoint for endpoint in self.listeners if endpoint.name not in names]

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """`advertised.listeners`, or the non-controller `listeners` when it is not set."""
        advertised = self._values["advertised.listeners"]
        if advertised is not None:
            return parse_endpoints(advertised, self.listener_security_protocol_map,
                                   "advertised.listeners", require_distinct_ports=False)
        return self.data_plane_listeners

    @property
    def inter_broker_listener_name(self) -> str:
        name = self._values["inter.broker.listener.name"]
        if name is not None:
            return name.upper()
        return self._values["security.inter.broker.protocol"]

    @property
    def inter_broker_security_protocol(self) -> str:
        name = self.inter_broker_listener_name
        protocol = self.listener_security_protocol_map.get(name)
        if protocol is None:
            raise ConfigError(f"Listener with name {name} defined in inter.broker.listener.name "
                              "not found in listener.security.protocol.map.")
        return protocol

    # --- quorum ---

    @property
    def quorum_voters(self) -> dict[int, QuorumVoter]:
        return parse_quorum_voters(self._values["controller.quorum.voters"])

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        return parse_bootstrap_servers(self._values["controller.quorum.bootstrap.servers"])

    # --- logs ---

    @property
    def log_dirs(self) -> list[str]:
        """`log.dirs` if set, else `log.dir`; comma-separated, blanks dropped."""
        value = self._values["log.dirs"]
        return _csv(value if value is not None else self._values["log.dir"])

    @property
    def metadata_log_dir(self) -> str:
        value = self._values["metadata.log.dir"]
        if value is not None:
            return value
        return self.log_dirs[0]

    @property
    def log_retention_ms(self) -> int:
        """`log.retention.ms` > `.minutes` > `.hours`; any negative value means no limit (-1)."""
        millis = self._values["log.retention.ms"]
        if millis is None:
            minutes = self._values["log.retention.minutes"]
            millis = (minutes * 60_000 if minutes is not None
                      else self._values["log.retention.hours"] * 3_600_000)
        return -1 if millis < 0 else millis

    @property
    def log_roll_ms(self) -> int:
        millis = self._values["log.roll.ms"]
        return millis if millis is not None else self._values["log.roll.hours"] * 3_600_000

    @property
    def log_roll_jitter_ms(self) -> int:
        millis = self._values["log.roll.jitter.ms"]
        return millis if millis is not None else self._values["log.roll.jitter.hours"] * 3_600_000

    def log_config(self) -> storage_config.LogConfig:
        """Topic defaults for the storage engine, from this broker's `log.*` settings."""
        return storage_config.LogConfig.from_broker_props(self._originals)

    # --- validation (Kafka's KafkaConfig.validateValues, KRaft mode) ---

    def _validate(self) -> None:
        roles = self._values["process.roles"]
        if not roles:
            raise ConfigError("Missing configuration `process.roles`: Odradek runs in KRaft mode "
                              "only; set it to broker, controller or broker,controller.")
        if len(set(roles)) != len(roles):
            raise ConfigError("Duplicate role names found in `process.roles`: "
                              f"[{', '.join(roles)}]")
        if self.node_id < 0:
            raise ConfigError("Missing configuration `node.id` which is required when "
                              "`process.roles` is defined (i.e. when running in KRaft mode).")
        if self._values["broker.id"] != self.node_id:
            raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
        self._validate_log_settings()
        self._validate_replication_settings()
        self._validate_listeners_and_quorum()
        self._validate_connection_settings()
        self._validate_group_settings()

    def _validate_log_settings(self) -> None:
        _require(self.log_roll_ms >= 1, "log.roll.ms must be greater than or equal to 1")
        _require(self.log_roll_jitter_ms >= 0,
                 "log.roll.jitter.ms must be greater than or equal to 0")
        _require(self.log_retention_ms >= 1 or self.log_retention_ms == -1,
                 "log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
        _require(bool(self.log_dirs),
                 "At least one log directory must be defined via log.dirs or log.dir.")
        _require(self._values["log.cleaner.dedupe.buffer.size"]
                 // max(self._values["log.cleaner.threads"], 1) > 1024 * 1024,
                 "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")

    def _validate_replication_settings(self) -> None:
        wait = self._values["replica.fetch.wait.max.ms"]
        _require(wait <= self._values["replica.socket.timeout.ms"],
                 "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms "
                 "to prevent unnecessary socket timeouts")
        _require(wait <= self._values["replica.lag.time.max.ms"],
                 "replica.fetch.wait.max.ms should always be less than or equal to "
                 "replica.lag.time.max.ms to prevent frequent changes in ISR")
        acks = self._values["offsets.commit.required.acks"]
        _require(-1 <= acks <= self._values["offsets.topic.replication.factor"],
                 "offsets.commit.required.acks must be greater or equal -1 and less or equal "
                 "to offsets.topic.replication.factor")

    def _validate_listeners_and_quorum(self) -> None:
        if ("inter.broker.listener.name" in self._originals
                and "security.inter.broker.protocol" in self._originals):
            raise ConfigError("Only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol should be set.")
        listeners = self.listeners
        listener_names = {endpoint.name for endpoint in listeners}
        controller_names = self.controller_listener_names
        controller_listeners = [e for e in listeners if e.name in controller_names]
        advertised = self.advertised_listeners
        advertised_names = {endpoint.name for endpoint in advertised}
        voters = self.quorum_voters
        roles = self.process_roles

        if not voters and not self.quorum_bootstrap_servers:
            raise ConfigError("If using process.roles, either controller.quorum.bootstrap.servers "
                              "must contain the set of bootstrap controllers or "
                              "controller.quorum.voters must contain a parseable set of voters.")
        voter_ids = "{" + ", ".join(str(node_id) for node_id in voters) + "}"
        if roles == {BROKER_ROLE}:
            _require(self.node_id not in voters,
                     f"If process.roles contains just the 'broker' role, the node id "
                     f"{self.node_id} must not be included in the set of voters "
                     f"controller.quorum.voters={voter_ids}")
            _require(bool(controller_names), "controller.listener.names must contain at least one "
                     "value when running KRaft with just the broker role")
            _require(not controller_listeners, "controller.listener.names must not contain a value "
                     "appearing in the 'listeners' configuration when running KRaft with just the "
                     "broker role")
            protocol_map = self.listener_security_protocol_map
            for name in controller_names:
                _require(name in protocol_map,
                         f"Controller listener with name {name} defined in "
                         "controller.listener.names not found in listener.security.protocol.map "
                         "(an explicit security mapping for each controller listener is required "
                         "if listener.security.protocol.map is non-empty, or if there are "
                         "security protocols other than PLAINTEXT in use)")
            if len(controller_names) > 1:
                log.warning("controller.listener.names has multiple entries; only the first will "
                            "be used since process.roles=broker: %s", controller_names)
        if roles == {CONTROLLER_ROLE}:
            _require(self._values["advertised.listeners"] is None,
                     "The advertised.listeners config must be empty when process.roles=controller")
            _require(not self.data_plane_listeners,
                     "The listeners config must only contain KRaft controller listeners from "
                     "controller.listener.names when process.roles=controller")
        if CONTROLLER_ROLE in roles:
            if voters:
                _require(self.node_id in voters,
                         f"If process.roles contains the 'controller' role, the node id "
                         f"{self.node_id} must be included in the set of voters "
                         f"controller.quorum.voters={voter_ids}")
            _require(bool(controller_listeners),
                     "controller.listener.names must contain at least one value appearing in the "
                     "'listeners' configuration when running the KRaft controller role")
            _require(all(name in listener_names for name in controller_names),
                     "controller.listener.names must only contain values appearing in the "
                     "'listeners' configuration when running the KRaft controller role")
        if BROKER_ROLE in roles:
            _require(not advertised_names & set(controller_names),
                     "The advertised.listeners config must not contain KRaft controller listeners "
                     "from controller.listener.names when process.roles contains the broker role "
                     "because Kafka clients that send requests via advertised listeners do not "
                     "send requests to KRaft controllers -- they only send requests to KRaft "
                     "brokers.")
            _require(bool(advertised_names), "There must be at least one advertised listener. "
                     "Perhaps all listeners appear in controller.listener.names?")
            inter_broker = self.inter_broker_listener_name
            _require(inter_broker in advertised_names,
                     f"inter.broker.listener.name must be a listener name defined in "
                     f"advertised.listeners. The valid options based on currently configured "
                     f"listeners are {','.join(sorted(advertised_names))}")
            _require(advertised_names <= listener_names,
                     "advertised.listeners listener names must be equal to or a subset of the ones "
                     f"defined in listeners. Found {','.join(sorted(advertised_names))}. The valid "
                     "options based on the current configuration are "
                     f"{','.join(sorted(listener_names))}")
            # (inter_broker_security_protocol raises when the listener has no protocol.)
            if self.inter_broker_security_protocol.startswith("SASL"):
                _require(self._values["sasl.mechanism.inter.broker.protocol"]
                         in self._values["sasl.enabled.mechanisms"],
                         "sasl.mechanism.inter.broker.protocol must be included in "
                         "sasl.enabled.mechanisms when SASL is used for inter-broker "
                         "communication")
        _require(not any(endpoint.host == "0.0.0.0" for endpoint in advertised),
                 "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                 "Use a routable IP address.")

    def _validate_connection_settings(self) -> None:
        queued_bytes = self._values["queued.max.request.bytes"]
        _require(queued_bytes <= 0 or queued_bytes >= self._values["socket.request.max.bytes"],
                 "queued.max.request.bytes must be larger or equal to socket.request.max.bytes")
        if self._values["max.connections.per.ip"] == 0:
            _require(bool(self._values["max.connections.per.ip.overrides"]),
                     "max.connections.per.ip can be set to zero only if "
                     "max.connections.per.ip.overrides property is set.")
        idle = self._values["connections.max.idle.ms"]
        delay = self._values["connection.failed.authentication.delay.ms"]
        if idle >= 0:
            _require(delay < idle, f"connection.failed.authentication.delay.ms={delay} should "
                     f"always be less than connections.max.idle.ms={idle} to prevent failed "
                     "authentication responses from timing out")

    def _validate_group_settings(self) -> None:
        protocols = {protocol.lower() for protocol in
                     self._values["group.coordinator.rebalance.protocols"]}
        _require("classic" in protocols, "Disabling the 'CLASSIC' protocol is not supported.")
        for prefix, unit in (("group.consumer.", "heartbeat.interval.ms"),
                             ("group.consumer.", "session.timeout.ms")):
            low = self._values[f"{prefix}min.{unit}"]
            high = self._values[f"{prefix}max.{unit}"]
            value = self._values[f"{prefix}{unit}"]
            _require(high >= low, f"{prefix}max.{unit} must be greater than or equals "
                     f"to {prefix}min.{unit}")
            _require(value >= low, f"{prefix}{unit} must be greater than or equals "
                     f"to {prefix}min.{unit}")
            _require(value <= high, f"{prefix}{unit} must be less than or equals "
                     f"to {prefix}max.{unit}")


BrokerConfig = KafkaConfig


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


# ---------------------------------------------------------------------------------------------
# Embedded single-node defaults (`make run`, `odradek server-start` without a file)
# ---------------------------------------------------------------------------------------------

EMBEDDED_DATA_DIR = "./odradek-data"


def embedded_default_properties(data_dir: str = EMBEDDED_DATA_DIR) -> dict[str, str]:
    """A single combined broker+controller node on localhost, like Kafka's
    config/kraft/server.properties but with data in `data_dir` and no initial rebalance delay."""
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@localhost:9093",
        "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "inter.broker.listener.name": "PLAINTEXT",
        "advertised.listeners": "PLAINTEXT://localhost:9092",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map":
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "SASL_SSL:SASL_SSL",
        "num.network.threads": "3",
        "num.io.threads": "8",
        "socket.send.buffer.bytes": "102400",
        "socket.receive.buffer.bytes": "102400",
        "socket.request.max.bytes": "104857600",
        "log.dirs": data_dir,
        "num.partitions": "1",
        "num.recovery.threads.per.data.dir": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.hours": "168",
        "log.segment.bytes": "1073741824",
        "log.retention.check.interval.ms": "300000",
    }


def embedded_default_config(data_dir: str = EMBEDDED_DATA_DIR,
                            overrides: Mapping[str, str] | None = None) -> KafkaConfig:
    props: dict[str, Any] = dict(embedded_default_properties(data_dir))
    props.update(overrides or {})
    return KafkaConfig(props)
