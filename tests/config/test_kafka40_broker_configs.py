"""Odradek's broker config table against Kafka 4.0's: every key Kafka 4.0 documents and
describes is defined with Kafka's update mode and described with Kafka's read_only flag; the
keys Odradek has beyond them are named here with the reason they stay."""

from __future__ import annotations

from kafka40_config_lists import MINIMAL_BROKER_PROPS, kafka40_update_modes

from odradek.config.broker import BROKER_CONFIGS
from odradek.config.describe import broker_config_entries
from odradek.server.config import KafkaConfig

# Broker keys Odradek defines that Kafka 4.0's list does not show, and why they stay.
ODRADEK_BEYOND_KAFKA40 = {
    # Odradek's own diagnostics (no Kafka equivalent)
    "event.loop.fsync.check", "event.loop.stall.warn.ms", "metrics.prometheus.listener",
    "request.slow.log.ms",
    # StandardAuthorizer's configs: Kafka reads them from the broker properties too
    "allow.everyone.if.no.acl.found", "super.users",
    # Kafka's dynamic-only broker quota configs (DynamicConfig.Broker)
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    # Kafka 4.0 internal keys (defineInternal: defined, not documented)
    "log.initial.task.delay.ms", "producer.id.expiration.check.interval.ms",
}



def test_the_list_is_kafka_4_0s():
    modes = kafka40_update_modes()
    assert len(modes) == 289
    assert set(modes.values()) == {"read-only", "per-broker", "cluster-wide"}


def test_every_kafka40_broker_key_is_defined_and_nothing_else_unexplained():
    defined = set(BROKER_CONFIGS)
    kafka40 = set(kafka40_update_modes())
    assert sorted(kafka40 - defined) == []
    assert sorted(defined - kafka40) == sorted(ODRADEK_BEYOND_KAFKA40)
    assert len(BROKER_CONFIGS) == len(kafka40) + len(ODRADEK_BEYOND_KAFKA40)


def test_update_modes_are_kafka40s():
    wrong = {name: (BROKER_CONFIGS[name].update_mode.value, mode)
             for name, mode in kafka40_update_modes().items()
             if BROKER_CONFIGS[name].update_mode.value != mode}
    assert wrong == {}, "name: (Odradek's, Kafka's)"


def test_every_key_describes_with_kafkas_read_only_flag_and_a_doc():
    entries = {entry.name: entry
               for entry in broker_config_entries(KafkaConfig(MINIMAL_BROKER_PROPS), {}, {})}
    modes = kafka40_update_modes()
    assert set(modes) <= set(entries)
    flags = {name: entries[name].is_read_only for name in modes}
    assert flags == {name: mode == "read-only" for name, mode in modes.items()}
    assert [name for name in modes if not BROKER_CONFIGS[name].doc] == []


def test_no_effect_keys_parse_validate_and_keep_kafkas_defaults():
    config = KafkaConfig({**MINIMAL_BROKER_PROPS, "group.share.max.groups": "20",
                          "remote.log.storage.system.enable": "true",
                          "compression.zstd.level": "-5"})
    values = config.values()
    assert (values["group.share.max.groups"], values["remote.log.storage.system.enable"],
            values["compression.zstd.level"]) == (20, True, -5)
    assert values["compression.gzip.level"] == -1
    assert values["group.consumer.assignors"] == ["uniform", "range"]
    for bad in ({"group.share.max.groups": "101"}, {"compression.gzip.level": "0"},
                {"remote.log.storage.manager.impl.prefix": ""}):
        try:
            KafkaConfig({**MINIMAL_BROKER_PROPS, **bad})
        except ValueError as error:
            assert next(iter(bad)) in str(error)
        else:
            raise AssertionError(f"{bad} accepted")
