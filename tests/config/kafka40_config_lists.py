"""Kafka 4.0's config lists kept next to the config tests (kafka40_topic_configs.txt,
kafka40_broker_configs.txt: tab-separated rows, `#` comments), and the smallest broker
properties a KafkaConfig accepts, for the config tests to build on."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
TOPIC_CONFIGS_LIST = HERE / "kafka40_topic_configs.txt"
BROKER_CONFIGS_LIST = HERE / "kafka40_broker_configs.txt"

# A combined broker and controller: what KafkaConfig needs before any other key.
MINIMAL_BROKER_PROPS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@localhost:9093",
    "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data",
}


def rows(path: Path) -> list[list[str]]:
    """The tab-separated fields of every row, comments and blank lines left out."""
    return [line.split("\t") for line in path.read_text().splitlines()
            if line and not line.startswith("#")]


def kafka40_topic_configs() -> dict[str, dict[str, str]]:
    """{name: {type, default ("" for the empty list), valid, server_default}}."""
    return {name: {"type": ctype, "default": "" if default == '""' else default,
                   "valid": valid, "server_default": server_default}
            for name, ctype, default, valid, server_default in rows(TOPIC_CONFIGS_LIST)}


def kafka40_update_modes() -> dict[str, str]:
    """{broker config name: read-only | per-broker | cluster-wide}."""
    return {name: mode for name, mode in rows(BROKER_CONFIGS_LIST)}
