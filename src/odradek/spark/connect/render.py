"""Connect values as Java's ``String.valueOf`` prints them, as Spark column expressions.

FileStreamSink writes ``String.valueOf(record.value())`` per line and StringConverter
serializes ``value.toString()``; this is that text:

* strings as they are; integers and booleans as Java prints them; floats and doubles as
  ``Float/Double.toString`` (Spark's cast to string follows them);
* a Struct ``Struct{name=value,...}`` without its null fields; a map ``{k=v, k2=v2}`` (a
  schemaless JSON object in its JSON order; Kafka's HashMap order is unspecified); a list
  ``[a, b]``; null ``null``;
* Timestamp / Date / Time as ``java.util.Date.toString()`` in UTC.

One deliberate difference: bytes print as their UTF-8 text, where Java prints the array's
identity (``[B@6d06d69c``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructType,
    VariantType,
)

from odradek.spark.connect.schema import DATE_NAME, TIME_NAME, TIMESTAMP_NAME, ConnectSchema

if TYPE_CHECKING:
    from pyspark.sql import Column

_JAVA_DATE_FORMAT = "EEE MMM dd HH:mm:ss 'UTC' yyyy"


def java_string(column: Column, schema: ConnectSchema | None, data_type: DataType) -> Column:
    """`column` as Java's toString; "null" for null."""
    return F.coalesce(_render(column, schema, data_type), F.lit("null"))


def _render(column: Column, schema: ConnectSchema | None, data_type: DataType) -> Column:
    """The text of `column`, null where it is null."""
    logical = schema.logical if schema is not None else None
    if logical == TIMESTAMP_NAME or logical == TIME_NAME:
        return F.date_format(_utc(F.timestamp_millis(column)), _JAVA_DATE_FORMAT)
    if logical == DATE_NAME:
        return F.date_format(_utc(F.timestamp_seconds(column.cast("long") * 86400)),
                             _JAVA_DATE_FORMAT)
    if isinstance(data_type, StringType):
        return column
    if isinstance(data_type, BinaryType):
        return F.decode(column, "UTF-8")
    if isinstance(data_type, VariantType):
        return F.to_json(column)
    if isinstance(data_type, StructType):
        if schema is not None and schema.type == "struct":
            parts = [F.when(column[f.name].isNotNull(),
                            F.concat(F.lit(f"{f.name}="),
                                     _render(column[f.name], schema.field(f.name), f.dataType)))
                     for f in data_type.fields]
            body = F.concat_ws(",", *parts) if parts else F.lit("")
            return F.when(column.isNotNull(), F.concat(F.lit("Struct{"), body, F.lit("}")))
        entries = [F.concat(F.lit(f"{f.name}="), java_string(column[f.name], None, f.dataType))
                   for f in data_type.fields]
        body = F.concat_ws(", ", *entries) if entries else F.lit("")
        return F.when(column.isNotNull(), F.concat(F.lit("{"), body, F.lit("}")))
    if isinstance(data_type, ArrayType):
        items = schema.items if schema is not None else None
        rendered = F.transform(column, lambda x: java_string(x, items, data_type.elementType))
        return F.concat(F.lit("["), F.array_join(rendered, ", "), F.lit("]"))
    if isinstance(data_type, MapType):
        keys = schema.keys if schema is not None else None
        values = schema.values if schema is not None else None
        rendered = F.transform(F.map_entries(column), lambda e: F.concat(
            java_string(e["key"], keys, data_type.keyType), F.lit("="),
            java_string(e["value"], values, data_type.valueType)))
        return F.concat(F.lit("{"), F.array_join(rendered, ", "), F.lit("}"))
    return column.cast("string")


def _utc(timestamp: Column) -> Column:
    """A timestamp whose session-time-zone wall clock is its UTC wall clock."""
    return F.to_utc_timestamp(timestamp, F.current_timezone())
