"""The "odradek" Spark data source: batch and streaming readers (the writers are in `sink`).

Spark calls the readers' planning methods on the driver (in Python planner processes) and
`read` on executors, each with a pickled copy of the reader. Planning works like Spark's Kafka
source: resolve the subscription to partitions, look up offsets with the admin client, and cut
the offset ranges into input partitions (one per partition range, more with
``minPartitions``). Streaming offsets are Spark's JSON ``{"topic": {"partition": offset}}``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from odradek.spark.fetch import FetchSettings, read_range, report_data_loss
from odradek.spark.offset_reader import OffsetReader
from odradek.spark.offsets import (
    OffsetDict,
    OffsetRange,
    PartitionOffsets,
    offsets_from_dict,
    offsets_to_dict,
    rate_limit,
    split_ranges,
)
from odradek.spark.options import SourceOptions, parse_source_options
from odradek.spark.schema import arrow_schema, source_schema


class OffsetRangePartition(InputPartition):
    """One task's work: an offset range of one topic partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


class _RangeReading:
    """What both readers share: options, the driver's offset reader, reading on executors."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.fetch_settings = FetchSettings.from_options(options)
        self.offset_reader = OffsetReader(options)

    def input_partitions(self, start: PartitionOffsets,
                         end: PartitionOffsets) -> list[OffsetRangePartition]:
        ranges = [OffsetRange(tp, start[tp], until) for tp, until in end.items()]
        pieces = split_ranges(ranges, self.options.min_partitions,
                              self.options.max_records_per_partition)
        return [OffsetRangePartition(piece) for piece in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            return iter(())  # Spark's placeholder partition when there is nothing to read
        return read_range(self.fetch_settings, partition.offset_range,
                          arrow_schema(self.schema))


class OdradekBatchReader(_RangeReading, DataSourceReader):
    """``spark.read.format("odradek")``: startingOffsets (default earliest) to endingOffsets
    (default latest), resolved once when the query is planned."""

    def partitions(self) -> list[InputPartition]:  # type: ignore[override]
        reader = self.offset_reader
        try:
            tps = reader.partitions()
            assert self.options.ending is not None
            start = reader.resolve(self.options.starting, tps)
            end = reader.resolve(self.options.ending, tps)
        finally:
            reader.close()
        for tp, until in end.items():
            if until < start[tp]:
                raise ValueError(f"The ending offset {until} of {tp} is before its starting "
                                 f"offset {start[tp]}")
        return list(self.input_partitions(start, end))


class OdradekStreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("odradek")``, Spark's KafkaMicroBatchStream.

    * initialOffset: startingOffsets (default latest) for the partitions subscribed now.
    * latestOffset: the partitions' end offsets, cut by ``maxOffsetsPerTrigger`` when the
      engine passes that limit; partitions that appeared since `start` begin at earliest.
      After prepareForTriggerAvailableNow the end offsets stay those of that moment.
    * partitions: one input partition per non-empty partition range (``minPartitions``
      splits); a partition that vanished or moved backwards is data loss.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self._available_now_end: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None

    def initialOffset(self) -> OffsetDict:
        reader = self.offset_reader
        return offsets_to_dict(reader.resolve(self.options.starting, reader.partitions()))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        reader = self.offset_reader
        self._available_now_end = reader.latest(reader.partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> OffsetDict:
        start_offsets = offsets_from_dict(start)
        if self._available_now_end is not None:
            end = dict(self._available_now_end)
        else:
            end = self.offset_reader.latest(self.offset_reader.partitions())
        self._latest = end
        if isinstance(limit, ReadMaxRows):
            begin = self._with_new_partitions(start_offsets, end, report=False)
            end = rate_limit(limit.max_rows, begin, end)
        return offsets_to_dict(end)

    def reportLatestOffset(self) -> OffsetDict | None:
        return None if self._latest is None else offsets_to_dict(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]
                   ) -> Sequence[InputPartition]:
        start_offsets = offsets_from_dict(start)
        end_offsets = offsets_from_dict(end)
        fail = self.options.fail_on_data_loss
        for tp in sorted(set(start_offsets) - set(end_offsets)):
            report_data_loss(f"{tp} is gone.", fail)
        begin = self._with_new_partitions(start_offsets, end_offsets, report=True)
        readable: PartitionOffsets = {}
        for tp, until in end_offsets.items():
            if until < begin[tp]:
                report_data_loss(f"Partition {tp}'s offset was changed from {begin[tp]} to "
                                 f"{until}.", fail)
                continue
            readable[tp] = until
        return self.input_partitions(begin, readable)

    def _with_new_partitions(self, start: PartitionOffsets, end: PartitionOffsets, *,
                             report: bool) -> PartitionOffsets:
        """`start`, plus the earliest offsets of partitions only `end` has (they appeared
        after the query started, so all their records are new; `report` a partition whose
        first records are already gone)."""
        new = [tp for tp in end if tp not in start]
        begin = dict(start)
        begin.update(self.offset_reader.earliest(new))
        for tp in new if report else ():
            if begin[tp] != 0:
                report_data_loss(f"Added partition {tp} starts from {begin[tp]} instead of 0.",
                                 self.options.fail_on_data_loss)
        return begin

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the source keeps its position in Spark's checkpoint only."""

    def stop(self) -> None:
        self.offset_reader.close()


class OdradekDataSource(DataSource):
    """Format ``"odradek"``: Spark's Kafka connector options and schema over Odradek (or any
    Kafka-compatible broker)."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> StructType:
        return source_schema(_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        return OdradekBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return OdradekStreamReader(parse_source_options(self.options, streaming=True), schema)

    def _check_schema(self, schema: StructType) -> None:
        if schema != self.schema():
            raise ValueError("Kafka source has a fixed schema and cannot be set with a custom one")

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from odradek.spark.sink import OdradekBatchWriter

        return OdradekBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from odradek.spark.sink import OdradekStreamWriter

        return OdradekStreamWriter(self.options, schema, overwrite)


def _include_headers(options: Any) -> bool:
    value = {str(k).lower(): str(v) for k, v in options.items()}.get("includeheaders", "false")
    return value.strip().lower() == "true"

