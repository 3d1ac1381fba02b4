"""A local SparkSession that stays on loopback and small: for tests, examples and pipelines
run on one machine."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: settings for a quiet, offline, small session (no UI, loopback only, few shuffle partitions)
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "512m",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


def local_session(app_name: str = "odradek", master: str = "local[2]",
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession on `master` with `LOCAL_CONF` (+ `conf`), format "odradek" registered.

    Python workers run this interpreter, so they see the same packages as the driver.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Make ``format("odradek")`` available in `spark`."""
    from odradek.spark.source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)
