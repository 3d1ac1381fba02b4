"""A streaming job for the exactly-once kill test: reads SOURCE, upper-cases the values and
writes them to SINK with ``deliveryGuarantee=exactly-once``, AvailableNow, from CHECKPOINT.

    python eos_job.py BOOTSTRAP SOURCE SINK CHECKPOINT [HANG_FLAG]

With HANG_FLAG the sink's driver-side commit, once it has committed the micro-batch's
transactions, writes HANG_FLAG and hangs: Spark never writes the batch to its commit log, and
the test kills the whole process group with SIGKILL there (a crash between the publish and
Spark's commit). Without it the job runs to the end and exits 0.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark import cloudpickle

from odradek.spark import local_session
from odradek.spark.sink import OdradekStreamWriter
from odradek.spark.source import OdradekDataSource

QUERY_TIMEOUT_S = 120


class HangAfterCommit(OdradekStreamWriter):
    def __init__(self, raw_options, schema, overwrite):
        super().__init__(raw_options, schema, overwrite)
        self.flag = Path({k.lower(): v for k, v in raw_options.items()}["hangflag"])

    def commit(self, messages, batchId):
        super().commit(messages, batchId)
        self.flag.write_text(str(batchId))
        time.sleep(3600)  # the test kills the job here


class HangingSink(OdradekDataSource):
    @classmethod
    def name(cls):
        return "odradek-hang-after-commit"

    def streamWriter(self, schema, overwrite):
        return HangAfterCommit(self.options, schema, overwrite)


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file


def main(bootstrap: str, source: str, sink: str, checkpoint: str,
         hang_flag: str | None = None) -> int:
    spark = local_session("odradek-eos-job")
    spark.dataSource.register(HangingSink)
    lines = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load())
    writer = (lines.selectExpr("key", "upper(cast(value as string)) as value")
              .writeStream.format("odradek-hang-after-commit" if hang_flag else "odradek")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("deliveryGuarantee", "exactly-once")
              .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    if hang_flag:
        writer = writer.option("hangFlag", hang_flag)
    query = writer.start()
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    error = query.exception()
    spark.stop()
    return 0 if finished and error is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
