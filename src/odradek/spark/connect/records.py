"""Connect records as a Spark DataFrame plus their key and value schemas.

A `RecordFrame` is what a Connect task hands its transformation chain: ``key`` and ``value``
in their Connect form (typed Spark columns, see `schema`), ``topic``, ``partition`` (int,
null for a source record until the producer picks one), ``offset`` (long; sink records only),
``timestamp`` and ``headers`` (array<struct<key:string,value:binary>>). Every row of a frame
has the same key and value schemas; records with different schemas live in different frames.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from odradek.spark.connect.schema import ConnectSchema
from odradek.spark.schema import HEADERS_TYPE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

@dataclass(frozen=True)
class RecordFrame:
    df: DataFrame
    key_schema: ConnectSchema | None
    value_schema: ConnectSchema | None
    #: records read from Kafka (SinkRecord): partition and offset are known
    sink: bool

    def schema_of(self, part: str) -> ConnectSchema | None:
        return self.key_schema if part == "key" else self.value_schema

    def type_of(self, part: str) -> DataType:
        return self.df.schema[part].dataType

    def with_part(self, part: str, column: Column, schema: ConnectSchema | None) -> RecordFrame:
        """The frame with `part` ("key" or "value") replaced."""
        df = self.df.withColumn(part, column)
        if part == "key":
            return replace(self, df=df, key_schema=schema)
        return replace(self, df=df, value_schema=schema)

    def with_df(self, df: DataFrame) -> RecordFrame:
        return replace(self, df=df)

    def same_shape(self, other: RecordFrame) -> bool:
        """True when the two frames can be one (same schemas and Spark types)."""
        return (self.key_schema == other.key_schema and self.value_schema == other.value_schema
                and self.df.schema == other.df.schema and self.sink == other.sink)


def source_frame(lines: DataFrame, topic: str) -> RecordFrame:
    """FileStreamSource's records: no key, the line as a required string value
    (Schema.STRING_SCHEMA), the connector's topic, the time the line was read."""
    from odradek.spark.connect.schema import STRING_SCHEMA

    df = lines.select(
        F.lit(None).cast("binary").alias("key"),  # null for every converter
        F.col("value"),
        F.lit(topic).alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("long").alias("offset"),
        F.col("timestamp"),
        F.lit(None).cast(HEADERS_TYPE).alias("headers"),
    )
    return RecordFrame(df, None, STRING_SCHEMA, sink=False)


def null_of(data_type: DataType) -> Column:
    return F.lit(None).cast(data_type)
