"""Which broker configs are dynamic, as Kafka 4.0's DynamicBrokerConfig has them, and that each
is alterable per broker and cluster-wide on a real broker process, described with Kafka's
read_only flag (DescribeConfigs: read_only = not in DynamicBrokerConfig.AllDynamicConfigs)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigResource, ResourceType
from raw_client import RawClient

from odradek.config import UpdateMode
from odradek.config.broker import BROKER_CONFIGS
from odradek.config.topic import TOPIC_CONFIGS
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

# Kafka's DynamicBrokerConfig, by the set that makes each key dynamic.
SSL_RECONFIGURABLE = {
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates"}
# advertised.listeners is not among them in Kafka 4.0 (its docs list it read-only).
LISTENER_RECONFIGURABLE = {
    "listeners", "listener.security.protocol.map",
    "principal.builder.class", "ssl.protocol", "ssl.provider", "ssl.cipher.suites",
    "ssl.enabled.protocols", "ssl.keystore.type", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm",
    "ssl.secure.random.implementation", "ssl.client.auth", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "max.connections", "max.connection.creation.rate", "num.network.threads"}
CLUSTER_LEVEL_LISTENER = {"max.connections", "max.connection.creation.rate",
                          "num.network.threads"}
PER_BROKER = (SSL_RECONFIGURABLE | LISTENER_RECONFIGURABLE) - CLUSTER_LEVEL_LISTENER
CLUSTER_WIDE = {
    # LogCleaner.ReconfigurableConfigs
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
    # DynamicThreadPool
    "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads",
    "metric.reporters",
    # SocketServer.ReconfigurableConfigs
    "max.connections.per.ip", "max.connections.per.ip.overrides",
    # DynamicProducerStateManagerConfig
    "producer.id.expiration.ms", "transaction.partition.verification.enable",
    # DynamicRemoteLogConfig
    "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
    "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.fetch.max.bytes.per.second", "remote.list.offsets.request.timeout.ms",
    "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.expiration.thread.pool.size", "remote.log.reader.threads",
} | CLUSTER_LEVEL_LISTENER
# DynamicLogConfig: the broker key of each topic config (its first synonym) is cluster-wide.
LOG_DEFAULTS = {d.broker_synonyms[0] for d in TOPIC_CONFIGS.values() if d.broker_synonyms}
# Broker quota configs (DynamicConfig.Broker, set by kafka-configs / reassign-partitions).
QUOTA = {"leader.replication.throttled.rate", "follower.replication.throttled.rate",
         "replica.alter.log.dirs.io.max.bytes.per.second"}


def test_update_modes_are_kafkas():
    modes = {name: d.update_mode for name, d in BROKER_CONFIGS.items()}
    assert {n for n in PER_BROKER | CLUSTER_WIDE if n not in modes} == set(), "not defined"
    wrong = {}
    for name, mode in modes.items():
        if name in PER_BROKER or name in QUOTA:
            expected = UpdateMode.PER_BROKER
        elif name in CLUSTER_WIDE or name in LOG_DEFAULTS:
            expected = UpdateMode.CLUSTER_WIDE
        else:
            expected = UpdateMode.READ_ONLY
        if mode != expected:
            wrong[name] = (mode.value, expected.value)
    assert wrong == {}, "name: (Odradek's, Kafka's)"


@pytest.fixture(scope="module")
def admin(odradek_broker):
    return AdminClient({"bootstrap.servers": odradek_broker.bootstrap})


def _describe(admin, name: str) -> dict[str, object]:
    resource = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([resource])[resource].result(timeout=30)


def _alter(broker, name: str, key: str, value: str | None, op=AlterConfigOpType.SET) -> None:
    """IncrementalAlterConfigs on the wire: librdkafka refuses an empty broker name, which is
    how a cluster-wide default is named."""
    R = m.IncrementalAlterConfigsRequest
    with RawClient(broker.host, broker.port) as client:
        response = client.call(44, 1, R(resources=[R.AlterConfigsResource(
            resource_type=4, resource_name=name,
            configs=[R.AlterableConfig(name=key, config_operation=int(op.value),
                                       value=value)])]))
    (result,) = response.responses
    assert result.error_code == ErrorCode.NONE, result.error_message


def _until(condition, timeout: float = 20.0):
    import time
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_read_only_flags_as_kafka(admin):
    entries = _describe(admin, "1")
    flags = {name: entries[name].is_read_only for name in (
        "advertised.listeners", "listeners", "sasl.kerberos.min.time.before.relogin",
        "log.retention.ms", "log.retention.hours", "log.dirs", "node.id",
        "num.io.threads", "sasl.server.callback.handler.class")}
    assert flags == {"advertised.listeners": True, "listeners": False,
                     "sasl.kerberos.min.time.before.relogin": False,
                     "log.retention.ms": False, "log.retention.hours": True,
                     "log.dirs": True, "node.id": True, "num.io.threads": False,
                     "sasl.server.callback.handler.class": True}


@pytest.mark.parametrize("key, value", [
    ("sasl.kerberos.min.time.before.relogin", "120000"),
    ("sasl.login.refresh.buffer.seconds", "600"),
    ("remote.fetch.max.wait.ms", "700"),
    ("log.cleaner.backoff.ms", "20000"),
])
def test_dynamic_config_alterable_per_broker_and_cluster_wide(odradek_broker, admin, key,
                                                               value):
    from confluent_kafka.admin import ConfigSource as Source

    _alter(odradek_broker, "", key, value)  # cluster-wide default
    _until(lambda: _describe(admin, "1")[key].value == value)
    assert _describe(admin, "1")[key].source == Source.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    per_broker = str(int(value) + 1)
    _alter(odradek_broker, "1", key, per_broker)
    _until(lambda: _describe(admin, "1")[key].value == per_broker)
    assert _describe(admin, "1")[key].source == Source.DYNAMIC_BROKER_CONFIG.value
    _alter(odradek_broker, "1", key, None, AlterConfigOpType.DELETE)
    _alter(odradek_broker, "", key, None, AlterConfigOpType.DELETE)
    _until(lambda: _describe(admin, "1")[key].source == Source.DEFAULT_CONFIG.value)
