"""Broker configuration: properties parsing, defaults, validation, KRaft rules, embedded config."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.server.config import (
    BROKER_CONFIGS,
    ConfigError,
    ConfigSource,
    Endpoint,
    KafkaConfig,
    Password,
    QuorumVoter,
    UpdateMode,
    embedded_default_config,
    embedded_default_properties,
    load_properties,
    parse_bootstrap_servers,
    parse_override,
    parse_properties,
    parse_quorum_voters,
)
from odradek.storage import config as storage_config
from odradek.storage.config import ConfigType

REPO = Path(__file__).resolve().parents[2]

COMBINED = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@localhost:9093",
    "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
}


def config(**overrides: str) -> KafkaConfig:
    props = dict(COMBINED)
    for key, value in overrides.items():
        name = key.replace("_", ".")
        if value is None:
            props.pop(name, None)
        else:
            props[name] = value
    return KafkaConfig(props)


def with_props(**props: str | None) -> dict[str, str]:
    result = dict(COMBINED)
    for key, value in props.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def error_of(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        KafkaConfig(props)
    return str(info.value)


# --- Java properties syntax ---------------------------------------------------------------------


class TestPropertiesParsing:
    def test_separators_and_whitespace(self):
        text = "a=1\nb = 2\nc:3\nd : 4\ne 5\n  f\t=\t6\ng   =   7  \nh\n"
        assert parse_properties(text) == {
            "a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7  ", "h": ""}

    def test_only_the_first_separator_splits(self):
        assert parse_properties("url=http://x:1/a=b\nk::v\nk2 = = v") == {
            "url": "http://x:1/a=b", "k": ":v", "k2": "= v"}

    def test_comments_and_blank_lines(self):
        text = ("# comment\n! bang comment\n   # indented comment\n\n   \n"
                "key=value # not a comment\n")
        assert parse_properties(text) == {"key": "value # not a comment"}

    def test_comment_ending_in_backslash_does_not_continue(self):
        assert parse_properties("# comment \\\nkey=value") == {"key": "value"}

    def test_line_continuation(self):
        text = "list=a,\\\n    b,\\\n\tc\nnext=1"
        assert parse_properties(text) == {"list": "a,b,c", "next": "1"}

    def test_even_backslashes_do_not_continue(self):
        assert parse_properties("path=C:\\\\\nnext=1") == {"path": "C:\\", "next": "1"}

    def test_continuation_at_end_of_file_and_blank_continuation(self):
        assert parse_properties("a=1\\") == {"a": "1"}
        assert parse_properties("a=1\\\n\nb=2") == {"a": "1", "b": "2"}

    def test_continued_line_starting_with_hash_is_not_a_comment(self):
        assert parse_properties("a=1\\\n#2") == {"a": "1#2"}

    def test_escapes(self):
        text = "tab=a\\tb\nnl=a\\nb\nuni=caf\\u00e9\nother=\\q\\\\\nkey\\ with\\ space=v\n" \
               "a\\=b=c\nx\\:y:z"
        assert parse_properties(text) == {
            "tab": "a\tb", "nl": "a\nb", "uni": "café", "other": "q\\",
            "key with space": "v", "a=b": "c", "x:y": "z"}

    def test_malformed_unicode_escape(self):
        with pytest.raises(ConfigError, match="Malformed"):
            parse_properties("a=\\u12g4")

    def test_line_endings_and_duplicates(self):
        assert parse_properties("a=1\r\nb=2\rc=3\na=4") == {"a": "4", "b": "2", "c": "3"}

    def test_load_properties_file(self, tmp_path):
        path = tmp_path / "s.properties"
        path.write_bytes("name=caf\xe9\n".encode("latin-1"))  # not UTF-8: Java's Latin-1
        assert load_properties(path) == {"name": "café"}
        path.write_text("name=café\n", encoding="utf-8")
        assert load_properties(path) == {"name": "café"}
        with pytest.raises(ConfigError, match="does not exist"):
            load_properties(tmp_path / "missing.properties")

    def test_parse_override(self):
        assert parse_override("log.dirs=/a=b") == ("log.dirs", "/a=b")
        assert parse_override("empty=") == ("empty", "")
        for bad in ("noequals", "=value"):
            with pytest.raises(ConfigError, match="expected property=value"):
                parse_override(bad)


# --- defaults and typed access -----------------------------------------------------------------


class TestDefaults:
    def test_kafka_defaults(self):
        c = config()
        expected = {
            "num.partitions": 1, "default.replication.factor": 1, "min.insync.replicas": 1,
            "socket.request.max.bytes": 104857600, "connections.max.idle.ms": 600000,
            "auto.create.topics.enable": True, "delete.topic.enable": True,
            "message.max.bytes": 1048588, "fetch.max.bytes": 57671680,
            "replica.fetch.max.bytes": 1048576, "offsets.topic.num.partitions": 50,
            "offsets.topic.replication.factor": 3, "offsets.retention.minutes": 10080,
            "transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2,
            "group.initial.rebalance.delay.ms": 3000, "group.min.session.timeout.ms": 6000,
            "group.max.session.timeout.ms": 1800000, "num.network.threads": 3,
            "num.io.threads": 8, "queued.max.requests": 500, "log.retention.hours": 168,
            "log.retention.ms": None, "log.retention.minutes": None,
            "log.segment.bytes": 1073741824, "log.retention.check.interval.ms": 300000,
            "log.roll.hours": 168, "log.cleanup.policy": ["delete"], "log.cleaner.enable": True,
            "log.index.size.max.bytes": 10485760, "log.index.interval.bytes": 4096,
            "log.message.timestamp.type": "CreateTime", "log.segment.delete.delay.ms": 60000,
            "compression.type": "producer", "replica.lag.time.max.ms": 30000,
            "unclean.leader.election.enable": False, "auto.leader.rebalance.enable": True,
            "group.coordinator.rebalance.protocols": ["classic", "consumer"],  # Kafka 4.0
            "metadata.log.segment.bytes": 1073741824, "metadata.max.retention.ms": 604800000,
            "max.connections": 2**31 - 1, "log.flush.interval.ms": None,
            "log.flush.scheduler.interval.ms": 2**63 - 1, "broker.rack": None,
            "log.dir": "/tmp/kafka-logs", "listeners": COMBINED["listeners"],
        }
        for name, value in expected.items():
            assert c.get(name) == value, name

    def test_listeners_default_is_kafkas(self):
        assert BROKER_CONFIGS["listeners"].default == "PLAINTEXT://:9092"

    def test_typed_accessors(self):
        c = config()
        assert c.node_id == 1
        assert c.process_roles == {"broker", "controller"}
        assert c.is_broker and c.is_controller and c.is_combined
        assert c.controller_listener_names == ["CONTROLLER"]
        assert c.log_dirs == ["/data/a"]
        assert c.metadata_log_dir == "/data/a"
        assert c.quorum_voters == {1: QuorumVoter(1, "localhost", 9093)}
        assert c.inter_broker_listener_name == "PLAINTEXT"
        assert c.inter_broker_security_protocol == "PLAINTEXT"

    def test_log_dirs_wins_over_log_dir(self):
        assert config(log_dirs=" /a , /b,, ").log_dirs == ["/a", "/b"]
        assert config(log_dirs=None, log_dir="/only").log_dirs == ["/only"]
        assert config(log_dirs=None).log_dirs == ["/tmp/kafka-logs"]
        both = KafkaConfig(with_props(**{"log.dir": "/ignored", "log.dirs": "/x"}))
        assert both.log_dirs == ["/x"]
        assert config(log_dirs="/x,/y", metadata_log_dir="/meta").metadata_log_dir == "/meta"
        assert config(log_dirs="/x,/y").metadata_log_dir == "/x"

    def test_retention_precedence(self):
        assert config().log_retention_ms == 168 * 3_600_000
        assert KafkaConfig(with_props(**{"log.retention.hours": "1"})).log_retention_ms == 3_600_000
        both = KafkaConfig(with_props(**{"log.retention.hours": "1", "log.retention.minutes": "2"}))
        assert both.log_retention_ms == 120_000
        all_three = KafkaConfig(with_props(**{"log.retention.ms": "5",
                                              "log.retention.minutes": "2"}))
        assert all_three.log_retention_ms == 5
        assert KafkaConfig(with_props(**{"log.retention.hours": "-1"})).log_retention_ms == -1
        assert "log.retention.ms must be unlimited (-1)" in error_of(
            with_props(**{"log.retention.ms": "0"}))

    def test_roll_precedence(self):
        assert config().log_roll_ms == 168 * 3_600_000
        rolled = KafkaConfig(with_props(**{"log.roll.hours": "2", "log.roll.ms": "1000"}))
        assert rolled.log_roll_ms == 1000

    def test_originals_values_and_unknown_get(self):
        c = KafkaConfig(with_props(**{"custom.thing": "x"}), log_unused=False)
        assert c.originals["custom.thing"] == "x"
        assert c.get("custom.thing") == "x"
        assert c.values()["num.partitions"] == 1
        assert "custom.thing" not in c.values()
        with pytest.raises(KeyError):
            c.get("no.such.key")

    def test_typed_values_are_accepted(self):
        c = KafkaConfig({**COMBINED, "node.id": 1, "auto.create.topics.enable": False,
                         "process.roles": ["broker", "controller"]})
        assert c.node_id == 1 and c.get("auto.create.topics.enable") is False

    def test_log_config_for_storage(self):
        log_config = KafkaConfig(with_props(**{"log.segment.bytes": "1048576",
                                               "log.retention.hours": "2"})).log_config()
        assert log_config.segment_bytes == 1048576
        assert log_config.retention_ms == 2 * 3_600_000


class TestOverrides:
    def test_from_file_with_overrides(self, tmp_path):
        path = tmp_path / "server.properties"
        path.write_text("\n".join(f"{k}={v}" for k, v in COMBINED.items()) + "\nnum.partitions=3\n")
        c = KafkaConfig.from_file(path, {"num.partitions": "7", "log.dirs": "/over"})
        assert c.get("num.partitions") == 7
        assert c.log_dirs == ["/over"]
        assert c.originals["num.partitions"] == "7"
        assert KafkaConfig.from_file(path).get("num.partitions") == 3

    def test_broker_id_and_node_id_stand_in_for_each_other(self):
        from_broker_id = KafkaConfig(with_props(**{"node.id": None, "broker.id": "1"}))
        assert from_broker_id.node_id == 1
        assert config().get("broker.id") == 1
        assert "You must set `node.id` to the same value as `broker.id`." == error_of(
            with_props(**{"broker.id": "2"}))


# --- invalid values ----------------------------------------------------------------------------


class TestInvalidValues:
    @pytest.mark.parametrize("key, value, message", [
        ("node.id", "abc", "Invalid value abc for configuration node.id: Not a number of type INT"),
        ("node.id", "1.5", "Invalid value 1.5 for configuration node.id: Not a number of type INT"),
        ("num.partitions", "2147483648",
         "Invalid value 2147483648 for configuration num.partitions: Not a number of type INT"),
        ("offsets.topic.replication.factor", "40000",
         "Invalid value 40000 for configuration offsets.topic.replication.factor: "
         "Not a number of type SHORT"),
        ("connections.max.idle.ms", "1e3",
         "Invalid value 1e3 for configuration connections.max.idle.ms: Not a number of type LONG"),
        ("num.io.threads", "0",
         "Invalid value 0 for configuration num.io.threads: Value must be at least 1"),
        ("auto.create.topics.enable", "yes",
         "Invalid value yes for configuration auto.create.topics.enable: "
         "Expected value to be either true or false"),
        ("process.roles", "broker,zookeeper",
         "Invalid value zookeeper for configuration process.roles: "
         "String must be one of: broker, controller"),
        ("log.cleaner.io.buffer.load.factor", "high",
         "Invalid value high for configuration log.cleaner.io.buffer.load.factor: "
         "Not a number of type DOUBLE"),
        ("log.segment.bytes", "1048575",
         "Invalid value 1048575 for configuration log.segment.bytes: Value must be at least "
         "1048576"),
        ("compression.type", "brotli",
         "Invalid value brotli for configuration compression.type: String must be one of:"),
        ("log.roll.hours", "0",
         "Invalid value 0 for configuration log.roll.hours: Value must be at least 1"),
    ])
    def test_message_names_key_value_and_expectation(self, key, value, message):
        assert error_of(with_props(**{key: value})).startswith(message)

    def test_values_are_trimmed(self):
        c = KafkaConfig(with_props(**{"num.partitions": "  4 ", "auto.create.topics.enable":
                                      " FALSE "}))
        assert c.get("num.partitions") == 4
        assert c.get("auto.create.topics.enable") is False

    def test_config_error_is_a_value_error(self):
        assert issubclass(ConfigError, ValueError)


class TestUnknownKeys:
    def test_unknown_keys_warn_in_kafkas_words(self, caplog):
        with caplog.at_level(logging.WARNING, logger="odradek.server.config"):
            c = KafkaConfig(with_props(**{"zookeeper.connect": "zk:2181", "a.b": "1",
                                          "listener.name.plaintext.ssl.keystore.location": "/k"}))
        assert c.unused_keys == ["a.b", "zookeeper.connect"]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == ["These configurations '[a.b, zookeeper.connect]' were supplied but "
                            "are not used yet."]
        assert c.originals_with_prefix("listener.name.plaintext.") == {
            "ssl.keystore.location": "/k"}

    def test_known_keys_do_not_warn(self, caplog):
        with caplog.at_level(logging.WARNING, logger="odradek.server.config"):
            embedded_default_config()
        assert not [r for r in caplog.records if "not used" in r.getMessage()]


# --- the table ---------------------------------------------------------------------------------


class TestConfigTable:
    def test_log_keys_come_from_the_storage_table(self):
        for topic in storage_config.TOPIC_CONFIGS.values():
            for position, synonym in enumerate(topic.broker_synonyms):
                definition = BROKER_CONFIGS[synonym]
                assert definition.topic_config == topic.name
                expected_mode = UpdateMode.CLUSTER_WIDE if position == 0 else UpdateMode.READ_ONLY
                assert definition.update_mode == expected_mode, synonym

    def test_unit_variants(self):
        assert BROKER_CONFIGS["log.retention.ms"].type == ConfigType.LONG
        assert BROKER_CONFIGS["log.retention.hours"].type == ConfigType.INT
        assert BROKER_CONFIGS["log.retention.minutes"].default is None

    def test_every_definition_is_complete(self):
        for name, definition in BROKER_CONFIGS.items():
            assert definition.name == name
            assert definition.doc
            default = definition.default
            if default is not None:  # defaults parse as their own type
                assert definition.parse(default) == default or definition.sensitive, name

    def test_brief_keys_are_defined(self):
        for name in ("process.roles", "node.id", "controller.quorum.voters",
                     "controller.quorum.bootstrap.servers", "controller.listener.names",
                     "listeners", "advertised.listeners", "listener.security.protocol.map",
                     "inter.broker.listener.name", "log.dirs", "log.dir", "metadata.log.dir",
                     "log.flush.offset.checkpoint.interval.ms", "log.message.timestamp.type",
                     "group.max.size", "max.connections.per.ip", "ssl.keystore.location",
                     "sasl.enabled.mechanisms", "metadata.log.segment.bytes", "broker.rack"):
            assert name in BROKER_CONFIGS, name


# --- listeners, voters -------------------------------------------------------------------------


class TestListeners:
    def test_parsing(self):
        c = config(listeners="plaintext://:9092,CONTROLLER://[::1]:9093",
                   advertised_listeners="PLAINTEXT://broker1:9092")
        assert c.listeners == [Endpoint("PLAINTEXT", None, 9092, "PLAINTEXT"),
                               Endpoint("CONTROLLER", "::1", 9093, "PLAINTEXT")]
        assert str(c.listeners[1]) == "CONTROLLER://[::1]:9093"
        assert c.controller_listeners == [c.listeners[1]]
        assert c.advertised_listeners == [Endpoint("PLAINTEXT", "broker1", 9092, "PLAINTEXT")]
        assert c.listeners[0].security_protocol_id == 0

    def test_advertised_defaults_to_non_controller_listeners(self):
        c = config()
        assert c.advertised_listeners == [Endpoint("PLAINTEXT", "localhost", 9092, "PLAINTEXT")]

    def test_custom_listener_names_need_the_map(self):
        props = with_props(listeners="INTERNAL://:9092,CONTROLLER://:9093",
                           **{"inter.broker.listener.name": "INTERNAL"})
        assert "No security protocol defined for listener INTERNAL" in error_of(props)
        props["listener.security.protocol.map"] = "INTERNAL:SSL,CONTROLLER:PLAINTEXT"
        c = KafkaConfig(props)
        assert c.listeners[0].security_protocol == "SSL"
        assert c.inter_broker_security_protocol == "SSL"

    def test_explicit_map_must_name_the_controller_listener(self):
        props = with_props(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"})
        assert "No security protocol defined for listener CONTROLLER" in error_of(props)

    def test_bad_map_and_bad_listener(self):
        assert "Invalid security protocol `TLS`" in error_of(
            with_props(**{"listener.security.protocol.map": "PLAINTEXT:TLS"}))
        assert "Unable to parse localhost:9092 to a broker endpoint" in error_of(
            with_props(listeners="localhost:9092,CONTROLLER://:9093"))

    def test_duplicate_names_and_ports(self):
        assert "Each listener must have a different name" in error_of(
            with_props(listeners="PLAINTEXT://:9092,PLAINTEXT://:9094,CONTROLLER://:9093"))
        assert "Each listener must have a different port" in error_of(
            with_props(listeners="PLAINTEXT://:9092,CONTROLLER://:9092"))
        dual_stack = with_props(
            listeners="PLAINTEXT://127.0.0.1:9092,INTERNAL://[::1]:9092,CONTROLLER://:9093",
            **{"listener.security.protocol.map":
               "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"})
        assert len(KafkaConfig(dual_stack).listeners) == 3

    def test_ssl_listener_disables_the_implicit_controller_mapping(self):
        # Kafka adds CONTROLLER:PLAINTEXT only when no SSL/SASL listener is in use.
        assert "No security protocol defined for listener CONTROLLER" in error_of(
            with_props(listeners="PLAINTEXT://:9092,SSL://:9094,CONTROLLER://:9093"))

    def test_advertised_rules(self):
        assert "must not contain KRaft controller listeners" in error_of(
            with_props(**{"advertised.listeners": "PLAINTEXT://h:9092,CONTROLLER://h:9093"}))
        assert "nonroutable meta-address 0.0.0.0" in error_of(
            with_props(listeners="PLAINTEXT://0.0.0.0:9092,CONTROLLER://:9093"))
        assert "inter.broker.listener.name must be a listener name defined in " \
               "advertised.listeners" in error_of(
                   with_props(**{"inter.broker.listener.name": "CONTROLLER"}))
        assert "Only one of inter.broker.listener.name and security.inter.broker.protocol" in \
            error_of(with_props(**{"inter.broker.listener.name": "PLAINTEXT",
                                   "security.inter.broker.protocol": "PLAINTEXT"}))


class TestQuorumVoters:
    def test_parse(self):
        voters = parse_quorum_voters(["1@a:9093", "2@10.0.0.2:9093", "3@[::1]:9095"])
        assert voters == {1: QuorumVoter(1, "a", 9093), 2: QuorumVoter(2, "10.0.0.2", 9093),
                          3: QuorumVoter(3, "::1", 9095)}
        assert list(voters) == [1, 2, 3]

    @pytest.mark.parametrize("entry, message", [
        ("localhost:9093", "Each entry should be in the form `{id}@{host}:{port}`"),
        ("1@2@h:1", "Each entry should be in the form `{id}@{host}:{port}`"),
        ("x@localhost:9093", "Failed to parse voter ID as an integer from x"),
        ("1@localhost", "Failed to parse host name from entry 1@localhost"),
        ("1@:9093", "Failed to parse host name from entry 1@:9093"),
        ("1@0.0.0.0:9093", "Host string (0.0.0.0) is not routeable"),
    ])
    def test_errors(self, entry, message):
        with pytest.raises(ConfigError) as info:
            parse_quorum_voters([entry])
        assert message in str(info.value)

    def test_duplicate_voter(self):
        with pytest.raises(ConfigError, match="Duplicate voter id 1"):
            parse_quorum_voters(["1@a:1", "1@b:2"])

    def test_voters_in_config(self):
        c = config(controller_quorum_voters="1@c1:9093, 2@c2:9093,3@c3:9093")
        assert sorted(c.quorum_voters) == [1, 2, 3]
        assert "Failed to parse voter ID" in error_of(
            with_props(**{"controller.quorum.voters": "one@c1:9093"}))

    def test_bootstrap_servers(self):
        assert parse_bootstrap_servers(["c1:9093", "[::1]:9094"]) == [("c1", 9093), ("::1", 9094)]
        with pytest.raises(ConfigError, match="Failed to parse host name or port"):
            parse_bootstrap_servers(["c1"])


# --- KRaft combinations ------------------------------------------------------------------------


BROKER_ONLY = {
    "process.roles": "broker",
    "node.id": "4",
    "controller.quorum.voters": "1@c1:9093",
    "listeners": "PLAINTEXT://:9092",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data",
}
CONTROLLER_ONLY = {
    "process.roles": "controller",
    "node.id": "1",
    "controller.quorum.voters": "1@c1:9093",
    "listeners": "CONTROLLER://:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data",
}


class TestKRaftValidation:
    def test_process_roles_required(self):
        assert "Missing configuration `process.roles`" in error_of(
            with_props(**{"process.roles": None}))
        assert "Duplicate role names found in `process.roles`" in error_of(
            with_props(**{"process.roles": "broker,broker"}))

    def test_node_id_required(self):
        assert error_of(with_props(**{"node.id": None})) == (
            "Missing configuration `node.id` which is required when `process.roles` is defined "
            "(i.e. when running in KRaft mode).")

    def test_controller_needs_controller_listener(self):
        assert "controller.listener.names must contain at least one value appearing in the " \
               "'listeners' configuration" in error_of(
                   with_props(listeners="PLAINTEXT://:9092",
                              **{"controller.listener.names": None}))
        assert "No security protocol defined for listener CONTROLLER" in error_of(
            with_props(**{"controller.listener.names": None}))
        assert "controller.listener.names must only contain values appearing in the " \
               "'listeners'" in error_of(
                   with_props(**{"controller.listener.names": "CONTROLLER,OTHER",
                                 "listener.security.protocol.map":
                                     "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,OTHER:PLAINTEXT"}))

    def test_controller_must_be_a_voter(self):
        assert error_of(with_props(**{"controller.quorum.voters": "2@c2:9093"})) == (
            "If process.roles contains the 'controller' role, the node id 1 must be included in "
            "the set of voters controller.quorum.voters={2}")

    def test_voters_or_bootstrap_servers_required(self):
        assert "controller.quorum.voters must contain a parseable set of voters" in error_of(
            with_props(**{"controller.quorum.voters": None}))
        dynamic = KafkaConfig(with_props(**{"controller.quorum.voters": None,
                                            "controller.quorum.bootstrap.servers": "c1:9093"}))
        assert dynamic.quorum_voters == {}
        assert dynamic.quorum_bootstrap_servers == [("c1", 9093)]

    def test_broker_only(self):
        c = KafkaConfig(BROKER_ONLY)
        assert c.is_broker and not c.is_controller
        assert c.listener_security_protocol_map["CONTROLLER"] == "PLAINTEXT"
        assert c.controller_listeners == []
        assert "must not be included in the set of voters" in error_of(
            {**BROKER_ONLY, "node.id": "1"})
        assert "must not contain a value appearing in the 'listeners'" in error_of(
            {**BROKER_ONLY, "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"})
        assert "must contain at least one value when running KRaft with just the broker role" in \
            error_of({k: v for k, v in BROKER_ONLY.items() if k != "controller.listener.names"})

    def test_controller_only(self):
        c = KafkaConfig(CONTROLLER_ONLY)
        assert c.is_controller and not c.is_broker
        assert c.advertised_listeners == []
        assert "The advertised.listeners config must be empty when process.roles=controller" == \
            error_of({**CONTROLLER_ONLY, "advertised.listeners": "CONTROLLER://c1:9093"})
        assert "must only contain KRaft controller listeners" in error_of(
            {**CONTROLLER_ONLY, "listeners": "CONTROLLER://:9093,PLAINTEXT://:9092"})

    def test_other_kafka_checks(self):
        assert "replica.fetch.wait.max.ms should always be less than or equal to " \
               "replica.lag.time.max.ms" in error_of(
                   with_props(**{"replica.fetch.wait.max.ms": "20000",
                                 "replica.lag.time.max.ms": "10000"}))
        assert "Disabling the 'CLASSIC' protocol is not supported." == error_of(
            with_props(**{"group.coordinator.rebalance.protocols": "consumer"}))
        assert "max.connections.per.ip can be set to zero only if" in error_of(
            with_props(**{"max.connections.per.ip": "0"}))

    def test_sasl_inter_broker_mechanism_must_be_enabled(self):
        sasl = with_props(listeners="SASL_PLAINTEXT://:9092,CONTROLLER://:9093",
                          **{"listener.security.protocol.map":
                             "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                             "security.inter.broker.protocol": "SASL_PLAINTEXT",
                             "sasl.enabled.mechanisms": "PLAIN"})
        assert "sasl.mechanism.inter.broker.protocol must be included in " \
               "sasl.enabled.mechanisms" in error_of(sasl)
        sasl["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
        assert KafkaConfig(sasl).inter_broker_security_protocol == "SASL_PLAINTEXT"


# --- DescribeConfigs view ----------------------------------------------------------------------


class TestDescribe:
    def test_sources_sensitivity_and_synonyms(self):
        c = KafkaConfig(with_props(**{"log.retention.hours": "24",
                                      "ssl.keystore.password": "secret"}))
        entries = {e.name: e for e in c.describe(["num.partitions", "log.retention.hours",
                                                  "log.retention.ms", "ssl.keystore.password",
                                                  "listeners", "no.such.config"])}
        assert set(entries) == {"num.partitions", "log.retention.hours", "log.retention.ms",
                                "ssl.keystore.password", "listeners"}
        assert entries["num.partitions"].source == ConfigSource.DEFAULT_CONFIG
        assert entries["num.partitions"].value == "1"
        assert entries["num.partitions"].is_read_only
        hours = entries["log.retention.hours"]
        assert (hours.source, hours.value, hours.config_type) == (
            ConfigSource.STATIC_BROKER_CONFIG, "24", ConfigType.INT)
        millis = entries["log.retention.ms"]
        assert millis.value is None and not millis.is_read_only
        assert [(s.name, s.value, s.source) for s in millis.synonyms] == [
            ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
        secret = entries["ssl.keystore.password"]
        assert secret.is_sensitive and secret.value is None
        assert entries["listeners"].value == COMBINED["listeners"]

    def test_passwords_never_print(self):
        c = KafkaConfig(with_props(**{"ssl.key.password": "secret"}))
        value = c.get("ssl.key.password")
        assert isinstance(value, Password) and value.value == "secret"
        assert "secret" not in repr(c) and "secret" not in str(value)

    def test_is_dynamic(self):
        assert KafkaConfig.is_dynamic("log.retention.ms")
        assert KafkaConfig.is_dynamic("listeners")
        assert not KafkaConfig.is_dynamic("log.retention.hours")
        assert not KafkaConfig.is_dynamic("node.id")
        assert not KafkaConfig.is_dynamic("no.such.config")

    def test_describe_all(self):
        entries = config().describe()
        assert len(entries) == len(BROKER_CONFIGS)


# --- embedded defaults -------------------------------------------------------------------------


class TestEmbeddedDefaults:
    def test_single_node_combined(self):
        c = embedded_default_config()
        assert c.process_roles == {"broker", "controller"}
        assert c.node_id == 1
        assert c.quorum_voters == {1: QuorumVoter(1, "localhost", 9093)}
        assert [str(e) for e in c.listeners] == ["PLAINTEXT://localhost:9092",
                                                 "CONTROLLER://localhost:9093"]
        assert [str(e) for e in c.advertised_listeners] == ["PLAINTEXT://localhost:9092"]
        assert c.controller_listener_names == ["CONTROLLER"]
        assert c.listener_security_protocol_map == {
            "CONTROLLER": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT", "SSL": "SSL",
            "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}
        assert c.log_dirs == ["./odradek-data"]
        assert c.get("offsets.topic.replication.factor") == 1
        assert c.get("transaction.state.log.replication.factor") == 1
        assert c.get("transaction.state.log.min.isr") == 1
        assert c.get("group.initial.rebalance.delay.ms") == 0
        assert c.unused_keys == []

    def test_data_dir_and_overrides(self):
        c = embedded_default_config("/srv/data", overrides={"num.partitions": "3"})
        assert c.log_dirs == ["/srv/data"]
        assert c.get("num.partitions") == 3

    def test_example_file_matches_embedded_defaults(self):
        assert load_properties(REPO / "config" / "server.properties") == \
            embedded_default_properties()
