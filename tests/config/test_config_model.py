"""The shared config model: value types, validators, definitions and the layering rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from odradek.config import (
    INT_MAX,
    LONG_MAX,
    NO_DEFAULT,
    ConfigDef,
    ConfigError,
    ConfigType,
    Password,
    UpdateMode,
    at_least,
    between,
    format_value,
    one_of,
    parse_value,
)
from odradek.config.broker import BROKER_CONFIGS
from odradek.config.listeners import Endpoint
from odradek.config.topic import TOPIC_CONFIGS, parse_topic_props, validate_topic_props

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "odradek" / "config"


class TestParseValue:
    @pytest.mark.parametrize("config_type, text, expected", [
        (ConfigType.BOOLEAN, " TRUE ", True),
        (ConfigType.BOOLEAN, "false", False),
        (ConfigType.INT, " -12 ", -12),
        (ConfigType.INT, "+7", 7),
        (ConfigType.SHORT, "32767", 32767),
        (ConfigType.LONG, str(LONG_MAX), LONG_MAX),
        (ConfigType.DOUBLE, "0.5", 0.5),
        (ConfigType.DOUBLE, "1e3", 1000.0),
        (ConfigType.LIST, " a , b,c ", ["a", "b", "c"]),
        (ConfigType.LIST, "", []),
        (ConfigType.STRING, "\t value \n", "value"),
        (ConfigType.CLASS, "org.example.Thing", "org.example.Thing"),
    ])
    def test_text_is_trimmed_and_converted(self, config_type, text, expected):
        assert parse_value("k", config_type, text) == expected

    def test_typed_values_pass_through(self):
        assert parse_value("k", ConfigType.INT, 5) == 5
        assert parse_value("k", ConfigType.BOOLEAN, False) is False
        assert parse_value("k", ConfigType.LIST, ("a ", " b")) == ["a", "b"]
        assert parse_value("k", ConfigType.DOUBLE, 2) == 2.0
        assert parse_value("k", ConfigType.STRING, None) is None

    @pytest.mark.parametrize("config_type, value, message", [
        (ConfigType.INT, "abc", "Invalid value abc for configuration k: Not a number of type INT"),
        (ConfigType.INT, str(INT_MAX + 1), "Not a number of type INT"),
        (ConfigType.SHORT, "40000", "Not a number of type SHORT"),
        (ConfigType.LONG, "1e3", "Not a number of type LONG"),
        (ConfigType.LONG, "1_000", "Not a number of type LONG"),
        (ConfigType.INT, True, "Not a number of type INT"),
        (ConfigType.DOUBLE, "high", "Not a number of type DOUBLE"),
        (ConfigType.BOOLEAN, "yes", "Expected value to be either true or false"),
        (ConfigType.LIST, 5, "Expected a comma separated list."),
        (ConfigType.STRING, 5, "Expected value to be a string, but it was a int"),
    ])
    def test_errors_use_kafkas_wording(self, config_type, value, message):
        with pytest.raises(ConfigError) as info:
            parse_value("k", config_type, value)
        assert message in str(info.value)

    def test_passwords_hide_their_value(self):
        secret = parse_value("k", ConfigType.PASSWORD, " s3cret ")
        assert isinstance(secret, Password) and secret.value == "s3cret"
        assert str(secret) == repr(secret) == "[hidden]"
        assert secret == Password("s3cret") and hash(secret) == hash(Password("s3cret"))

    def test_format_value(self):
        assert format_value(ConfigType.BOOLEAN, True) == "true"
        assert format_value(ConfigType.LIST, ["compact", "delete"]) == "compact,delete"
        assert format_value(ConfigType.LONG, LONG_MAX) == str(LONG_MAX)
        assert format_value(ConfigType.DOUBLE, 0.5) == "0.5"

    def test_type_ids_are_describe_configs_ids(self):
        assert [t.value for t in ConfigType] == list(range(10))
        assert ConfigType.from_code(5) == ConfigType.LONG
        assert ConfigType.from_code(99) == ConfigType.UNKNOWN

    def test_config_error_is_a_value_error(self):
        assert issubclass(ConfigError, ValueError)


class TestValidators:
    def test_at_least(self):
        at_least(1)("k", 1)
        with pytest.raises(ConfigError, match="Invalid value 0 for configuration k: "
                                              "Value must be at least 1"):
            at_least(1)("k", 0)

    def test_between(self):
        between(0, 1)("k", 0.5)
        with pytest.raises(ConfigError, match="Invalid value 1.5 for configuration k: "
                                              "Value must be no more than 1"):
            between(0, 1)("k", 1.5)
        with pytest.raises(ConfigError, match="Value must be at least 0"):
            between(0, 1)("k", -0.5)

    def test_one_of_checks_each_list_item(self):
        check = one_of("compact", "delete")
        check("k", "delete")
        check("k", ["compact", "delete"])
        with pytest.raises(ConfigError, match="Invalid value forever for configuration k: "
                                              "String must be one of: compact, delete"):
            check("k", ["delete", "forever"])


class TestConfigDef:
    def test_parse_converts_then_validates(self):
        definition = ConfigDef("segment.bytes", ConfigType.INT, 1024, at_least(14))
        assert definition.parse(" 100 ") == 100
        with pytest.raises(ConfigError, match="Value must be at least 14"):
            definition.parse("13")
        assert definition.parse(None) is None  # unset: no validation

    def test_flags(self):
        secret = ConfigDef("ssl.key.password", ConfigType.PASSWORD, None)
        assert secret.sensitive and secret.read_only and not secret.dynamic
        dynamic = ConfigDef("num.io.threads", ConfigType.INT, 8,
                            update_mode=UpdateMode.CLUSTER_WIDE)
        assert dynamic.dynamic and not dynamic.read_only and not dynamic.sensitive
        assert ConfigDef("bootstrap.servers", ConfigType.LIST, NO_DEFAULT).required
        assert not ConfigDef("client.id", ConfigType.STRING, None).required
        assert ConfigDef("segment.bytes", ConfigType.INT, 1).attribute == "segment_bytes"

    def test_parsed_default(self):
        assert ConfigDef("k", ConfigType.LIST, "a,b").parsed_default() == ["a", "b"]
        assert ConfigDef("k", ConfigType.INT, NO_DEFAULT).parsed_default() is None


class TestTables:
    def test_topic_configs_are_dynamic_per_topic_with_valid_defaults(self):
        for definition in TOPIC_CONFIGS.values():
            assert definition.update_mode == UpdateMode.PER_TOPIC
            definition.validate(definition.default)

    def test_broker_synonym_chains(self):
        assert TOPIC_CONFIGS["retention.ms"].broker_synonyms == (
            "log.retention.ms", "log.retention.minutes", "log.retention.hours")
        assert BROKER_CONFIGS["log.retention.ms"].broker_synonyms == (
            "log.retention.minutes", "log.retention.hours")
        assert BROKER_CONFIGS["log.retention.hours"].broker_synonyms == ()
        assert BROKER_CONFIGS["log.retention.hours"].default == 168
        assert BROKER_CONFIGS["log.retention.ms"].default is None
        assert BROKER_CONFIGS["log.segment.bytes"].topic_config == "segment.bytes"

    def test_every_broker_default_is_valid(self):
        for definition in BROKER_CONFIGS.values():
            definition.validate(definition.parsed_default())

    def test_topic_props(self):
        assert parse_topic_props({"segment.bytes": "2048", "cleanup.policy": "compact"}) == {
            "segment.bytes": 2048, "cleanup.policy": ["compact"]}
        with pytest.raises(ConfigError, match="Unknown topic config name: a.b, c"):
            validate_topic_props({"c": "1", "a.b": "2"})
        with pytest.raises(ConfigError, match="Invalid value 13 for configuration "
                                              "segment.bytes: Value must be at least 14"):
            validate_topic_props({"segment.bytes": "13"})


class TestEndpoint:
    def test_listener_and_registered_endpoints_are_one_type(self):
        listener = Endpoint("PLAINTEXT", None, 9092, "PLAINTEXT")
        assert str(listener) == "PLAINTEXT://:9092"
        registered = Endpoint.registered("INTERNAL", "::1", 9093, 1)
        assert registered == Endpoint("INTERNAL", "::1", 9093, "SSL")
        assert registered.security_protocol_id == 1
        assert str(registered) == "INTERNAL://[::1]:9093"


def test_the_package_imports_nothing_else_of_odradek():
    """Storage imports the config model, so it must not import any other Odradek layer."""
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith("odradek"):
                    assert name.startswith("odradek.config"), f"{path.name} imports {name}"
