"""A standalone Connect worker (Kafka's ConnectStandalone) running its connectors as Spark
streaming queries in one local SparkSession.

Worker settings, with Kafka's names: ``bootstrap.servers`` (default localhost:9092),
``key.converter`` / ``value.converter`` (required) and their prefixed settings,
``offset.storage.file.filename`` (required; the Spark checkpoints of the connectors live in
the directory ``<file>.checkpoints/<connector name>``), ``producer.<name>`` / ``consumer.<name>``
(client settings of source / sink connectors). ``plugin.path`` is ignored: the connectors and
transforms are built in. Odradek's own: ``odradek.trigger.interval.ms`` (default 1000: how
often a connector looks for new data) and ``spark.<name>`` (Spark settings, e.g.
``spark.master``).

Connector settings: ``name``, ``connector.class`` (FileStreamSource / FileStreamSink, short or
full class names), ``tasks.max``, ``key.converter`` / ``value.converter`` overrides,
``transforms`` / ``predicates``, and the connector's own (``file``, ``topic``, ``batch.size``;
``file``, ``topics``, ``topics.regex``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from odradek.spark.connect.connectors import (
    ConnectorQuery,
    ConnectorSettings,
    FileStreamSinkQuery,
    FileStreamSourceQuery,
)
from odradek.spark.connect.converters import create_converter
from odradek.spark.connect.errors import ConnectConfigError, invalid_value, missing
from odradek.spark.connect.file_source import DEFAULT_BATCH_SIZE, FileStreamDataSource
from odradek.spark.connect.transforms import parse_list, parse_transforms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("org.apache.kafka.connect.cli.ConnectStandalone")

SOURCE_CLASSES = ("org.apache.kafka.connect.file.FileStreamSourceConnector",
                  "FileStreamSourceConnector", "FileStreamSource")
SINK_CLASSES = ("org.apache.kafka.connect.file.FileStreamSinkConnector",
                "FileStreamSinkConnector", "FileStreamSink")

#: client settings the "odradek" source/sink refuse (Spark's Kafka connector reasons)
_REFUSED_CLIENT_SETTINGS = {
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
    "auto.offset.reset", "enable.auto.commit", "interceptor.classes", "group.id",
}
DEFAULT_TRIGGER_INTERVAL_MS = 1000


def _int(props: dict[str, str], name: str, default: int, minimum: int | None = None) -> int:
    text = props.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise invalid_value(name, text, "Not a number of type INT") from None
    if minimum is not None and value < minimum:
        raise invalid_value(name, value, f"Value must be at least {minimum}")
    return value


def _client_options(props: dict[str, str], prefix: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"kafka.{name[len(prefix):]}", value) for name, value in sorted(props.items())
                 if name.startswith(prefix) and name[len(prefix):] not in _REFUSED_CLIENT_SETTINGS)


class StandaloneWorker:
    """Validates the configs when built; `start` starts every connector's query."""

    def __init__(self, worker_props: dict[str, str],
                 connector_props: list[dict[str, str]]) -> None:
        self.worker_props = worker_props
        self.bootstrap_servers = ",".join(
            parse_list(worker_props.get("bootstrap.servers", "localhost:9092")))
        offsets_file = worker_props.get("offset.storage.file.filename")
        if not offsets_file:
            raise missing("offset.storage.file.filename",
                          "File to store offset data in")
        self.checkpoint_root = Path(offsets_file + ".checkpoints")
        self.trigger_interval_ms = _int(worker_props, "odradek.trigger.interval.ms",
                                        DEFAULT_TRIGGER_INTERVAL_MS, 10)
        for name in ("key.converter", "value.converter"):
            if name not in worker_props:
                raise missing(name, "Converter class used to convert between Kafka Connect "
                                    "format and the serialized form that is written to Kafka.")
        if worker_props.get("plugin.path", "").strip():
            log.warning("plugin.path is ignored: Odradek's connectors and transforms are built "
                        "in (FileStreamSource, FileStreamSink and Kafka's transforms)")
        self.spark_conf = {k: v for k, v in worker_props.items() if k.startswith("spark.")}
        self.connectors: list[ConnectorQuery] = []
        names: set[str] = set()
        for props in connector_props:
            connector = self._connector(props)
            if connector.name in names:
                raise ConnectConfigError(f"Connector {connector.name} already exists")
            names.add(connector.name)
            self.connectors.append(connector)
        self.spark: SparkSession | None = None
        self.start_failures: dict[str, str] = {}

    def _connector(self, props: dict[str, str]) -> ConnectorQuery:
        name = props.get("name", "").strip()
        if not name:
            raise ConnectConfigError("Connector config "
                                     f"{_format_props(props)} contains no connector name")
        class_name = props.get("connector.class", "").strip()
        if not class_name:
            raise ConnectConfigError(f"Connector config {_format_props(props)} contains no "
                                     "connector type")
        _int(props, "tasks.max", 1, 1)
        tolerance = props.get("errors.tolerance", "none").strip().lower()
        if tolerance not in ("none", "all"):
            raise invalid_value("errors.tolerance", tolerance, "String must be one of: none, all")
        if tolerance == "all":
            log.warning("%s: errors.tolerance=all is not supported; errors fail the connector",
                        name)
        # a converter the connector names is configured by the connector's settings only
        key_converter = create_converter(
            "key.converter", props if "key.converter" in props else self.worker_props)
        value_converter = create_converter(
            "value.converter", props if "value.converter" in props else self.worker_props)
        transforms = tuple(parse_transforms(props, warn=log.warning))
        checkpoint = str(self.checkpoint_root / quote(name, safe=""))
        if class_name in SOURCE_CLASSES:
            settings = ConnectorSettings(
                name, self.bootstrap_servers, key_converter, value_converter, transforms,
                checkpoint, self.trigger_interval_ms,
                _client_options(self.worker_props, "producer."))
            file = os.path.abspath(props["file"]) if props.get("file") else ""
            if not file:
                raise ConnectConfigError(
                    f"{name}: FileStreamSource without 'file' reads stdin, which a Spark query "
                    "cannot; set 'file'")
            topic = props.get("topic", "").strip()
            if not topic:
                raise missing("topic", "The topic to publish data to")
            if "," in topic:
                raise ConnectConfigError("'topic' in FileStreamSourceConnector configuration "
                                         "requires definition of a single topic")
            batch_size = _int(props, "batch.size", DEFAULT_BATCH_SIZE, 1)
            return FileStreamSourceQuery(settings, file, topic, batch_size)
        if class_name in SINK_CLASSES:
            settings = ConnectorSettings(
                name, self.bootstrap_servers, key_converter, value_converter, transforms,
                checkpoint, self.trigger_interval_ms,
                _client_options(self.worker_props, "consumer."))
            topics = parse_list(props.get("topics"))
            regex = props.get("topics.regex", "").strip() or None
            if topics and regex:
                raise ConnectConfigError("topics and topics.regex are mutually exclusive "
                                         "options, but both are set.")
            if not topics and not regex:
                raise ConnectConfigError("Must configure one of topics or topics.regex")
            sink_file = os.path.abspath(props["file"]) if props.get("file") else None
            return FileStreamSinkQuery(settings, sink_file, topics, regex)
        available = ", ".join((SOURCE_CLASSES[0], SINK_CLASSES[0]))
        raise ConnectConfigError(
            f"Failed to find any class that implements Connector and which name matches "
            f"{class_name}; available connectors are: {available}")

    def start(self, spark: SparkSession | None = None) -> None:
        """Start every connector (in `spark`, or a new local session)."""
        if spark is None:
            from odradek.spark.session import local_session

            master = self.spark_conf.get("spark.master", "local[2]")
            spark = local_session("odradek-connect", master=master, conf=self.spark_conf)
        self.spark = spark
        spark.dataSource.register(FileStreamDataSource)
        for connector in self.connectors:
            try:
                connector.start(spark)
            except Exception as exc:  # like a Kafka worker: this connector fails, others run
                self.start_failures[connector.name] = str(exc)
                continue
            log.info("Created connector %s (%s)", connector.name, connector.kind)

    def failures(self) -> dict[str, str]:
        """Connectors that could not start or whose query failed, with the error."""
        running = {c.name: error for c in self.connectors if (error := c.failure()) is not None}
        return {**self.start_failures, **running}

    def stop(self) -> None:
        for connector in self.connectors:
            try:
                connector.stop()
            except Exception as exc:  # a query that failed while stopping: nothing to keep
                log.debug("stopping %s: %s", connector.name, exc)
            log.info("Stopped connector %s", connector.name)


def _format_props(props: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in props.items()) + "}"
