"""Broker configuration: `KafkaConfig`, a parsed and validated `server.properties`.

Names, types, defaults, validation and error wording are Kafka 4.0's (KafkaConfig, ConfigDef),
so a Kafka user's `server.properties` works unchanged. The definitions (`BROKER_CONFIGS`), value
parsing, the `.properties` reader, listener parsing and the DescribeConfigs rendering live in the
shared config model, `odradek.config`; this module adds what only a broker process needs:

- `KafkaConfig` parses and validates a property map (Kafka's checks for KRaft mode), exposes
  typed accessors, and describes itself for DescribeConfigs. Unknown keys are a logged warning,
  invalid values a `ConfigError` naming key, value and expectation.
- `embedded_default_config` is the single-node combined config `make run` uses; the example
  `config/server.properties` holds the same settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from odradek.config.broker import BROKER_CONFIGS, BROKER_ROLE, CONTROLLER_ROLE
from odradek.config.definition import UpdateMode
from odradek.config.describe import ConfigEntry, ConfigSource, describe_static_broker_configs
from odradek.config.listeners import (
    DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP,
    SECURITY_PROTOCOLS,
    Endpoint,
    QuorumVoter,
    parse_bootstrap_servers,
    parse_endpoints,
    parse_quorum_voters,
    parse_security_protocol_map,
)
from odradek.config.properties import load_properties, parse_override, parse_properties
from odradek.config.types import ConfigError, Password, csv_list
from odradek.storage.config import LogConfig

# Re-exported: the broker's config API as callers (cli, tests) have always imported it.
__all__ = [
    "BROKER_CONFIGS",
    "BROKER_ROLE",
    "CONTROLLER_ROLE",
    "DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP",
    "SECURITY_PROTOCOLS",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "Endpoint",
    "KafkaConfig",
    "Password",
    "QuorumVoter",
    "UpdateMode",
    "embedded_default_config",
    "embedded_default_properties",
    "load_properties",
    "parse_bootstrap_servers",
    "parse_override",
    "parse_properties",
    "parse_quorum_voters",
]

log = logging.getLogger("odradek.server.config")

# Keys carrying per-listener overrides (`listener.name.internal.ssl.keystore.location`): stored
# in `originals` and read by prefix, so they are never reported as unused.
_PASS_THROUGH_PREFIXES = ("listener.name.",)
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: what a listener may reload without a restart.
RECONFIGURABLE_SSL_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
})
_ID_SYNONYMS = {"node.id": "broker.id", "broker.id": "node.id"}


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
                self._values[name] = definition.parsed_default()
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
        """Whether Kafka lets `name` change at runtime (per-broker or cluster-wide); a
        listener's key and trust stores change with the listener prefix
        (`listener.name.<listener>.ssl.keystore.location`, ...)."""
        if name.startswith("listener.name."):
            _listener, _dot, setting = name[len("listener.name."):].partition(".")
            return setting in RECONFIGURABLE_SSL_CONFIGS
        definition = BROKER_CONFIGS.get(name)
        return definition is not None and definition.dynamic

    def describe(self, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries: value, source (static broker config vs default), synonyms."""
        return describe_static_broker_configs(self._originals, self._values, names)

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
        return [name.upper() for name in csv_list(self._values["controller.listener.names"])]

    @property
    def listener_security_protocol_map(self) -> dict[str, str]:
        """The effective map (Kafka's effectiveListenerSecurityProtocolMap): when the map is not
        set explicitly and no SSL/SASL is in use, controller listeners map to PLAINTEXT."""
        mapping = parse_security_protocol_map(self._values["listener.security.protocol.map"])
        if self.process_roles and "listener.security.protocol.map" not in self._originals:
            secure = {"SSL", "SASL_SSL", "SASL_PLAINTEXT"}
            listener_names = [entry.split("://", 1)[0].upper()
                              for entry in csv_list(self._values["listeners"])]
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
        return csv_list(value if value is not None else self._values["log.dir"])

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

    def log_config(self) -> LogConfig:
        """Topic defaults for the storage engine, from this broker's `log.*` settings."""
        return LogConfig.from_broker_props(self._originals)

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
