"""Kafka Connect's standalone worker on Spark: `odradek connect-standalone`.

Connectors (FileStreamSource, FileStreamSink) run as Spark Structured Streaming queries over
the "odradek" source and sink; converters (JsonConverter, StringConverter,
ByteArrayConverter) and single message transforms are Spark column expressions. See
docs/spark.md, section "Connect".
"""

from odradek.spark.connect.errors import ConnectConfigError, ConnectDataError
from odradek.spark.connect.worker import StandaloneWorker

__all__ = ["ConnectConfigError", "ConnectDataError", "StandaloneWorker"]
