"""The row schema of Spark's Kafka connector, as Spark types and as Arrow types.

Source rows: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` and, with ``includeHeaders``, ``headers
array<struct<key:string,value:binary>>`` (Spark's KafkaRecordToRowConverter).

The Arrow schema is derived with pyspark's own `to_arrow_schema`, because pyspark compares the
schema of every Arrow batch a reader yields with that one, field names and nullability included.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([
    StructField("key", StringType()),
    StructField("value", BinaryType()),
]))


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema pyspark expects for batches of `schema` (timestamps in UTC)."""
    return to_arrow_schema(schema, timezone="UTC")


# ------------------------------------------------------------------------------ sink columns

#: sink column -> the Spark types it may have (Spark's KafkaWriter.validateQuery)
SINK_COLUMN_TYPES: dict[str, tuple[type[DataType], ...]] = {
    "topic": (StringType,),
    "key": (StringType, BinaryType),
    "value": (StringType, BinaryType),
    "partition": (IntegerType,),
}


def validate_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Raise ValueError (Spark's wording) unless `schema` can be written to topics."""
    columns = {field.name.lower(): field.dataType for field in schema.fields}
    if "value" not in columns:
        raise ValueError("Required attribute 'value' not found")
    if "topic" not in columns and topic_option is None:
        raise ValueError("topic option required when no 'topic' attribute is present. "
                         "Use the topic option for setting a topic.")
    for name, allowed in SINK_COLUMN_TYPES.items():
        data_type = columns.get(name)
        if data_type is not None and not isinstance(data_type, allowed):
            wanted = " or ".join(t.typeName() for t in (a() for a in allowed))
            raise ValueError(f"{name} attribute type must be a {wanted}")
    headers = columns.get("headers")
    if headers is not None and not _is_headers_type(headers):
        raise ValueError(f"headers attribute type must be a {HEADERS_TYPE.simpleString()}")


def _is_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = data_type.elementType.fields
    return (
        len(fields) == 2
        and fields[0].name == "key" and isinstance(fields[0].dataType, StringType)
        and fields[1].name == "value" and isinstance(fields[1].dataType, BinaryType)
    )
