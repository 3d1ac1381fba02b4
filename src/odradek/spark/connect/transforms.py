"""Kafka Connect's single message transforms and predicates as Spark column expressions.

Configured as in Kafka (``transforms=a,b``, ``transforms.a.type=...InsertField$Value``,
``transforms.a.predicate=p``, ``transforms.a.negate=true``, ``predicates=p``,
``predicates.p.type=...TopicNameMatches``, ...). Each transform rewrites the ``key``,
``value`` or ``topic`` column of a `RecordFrame` and, at plan time, the Connect schema beside
it, the way Kafka's transform rewrites each record and its schema:

InsertField, ReplaceField, MaskField, Cast, HoistField, ExtractField (each ``$Key`` /
``$Value``), ValueToKey, RegexRouter, TimestampRouter, Filter; predicates TopicNameMatches,
HasHeaderKey, RecordIsTombstone.

A transform with a predicate applies to the records matching it: the frame is split on the
predicate and, when the transform changed the schema, the two parts continue as separate
frames. Data a transform cannot handle (e.g. InsertField on a string value) fails the query
at the first such record with Kafka's message, as a Connect task fails; like Kafka's field
transforms, a null key or value (tombstone) passes through.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from odradek.spark.connect.errors import (
    ConnectConfigError,
    ConnectDataError,
    invalid_value,
    missing,
)
from odradek.spark.connect.records import RecordFrame, null_of
from odradek.spark.connect.schema import (
    DATE_NAME,
    DECIMAL_NAME,
    TIME_NAME,
    TIMESTAMP_NAME,
    TIMESTAMP_SCHEMA,
    ConnectSchema,
    connect_type_of,
    java_class_name,
)

if TYPE_CHECKING:
    from pyspark.sql import Column

TRANSFORMS_PACKAGE = "org.apache.kafka.connect.transforms"
PREDICATES_PACKAGE = "org.apache.kafka.connect.transforms.predicates"


class RecordShapeError(ConnectDataError):
    """A transform cannot handle the key or value of these records (a non-null `part`)."""

    def __init__(self, message: str, part: str | None) -> None:
        super().__init__(message)
        self.part = part


# ------------------------------------------------------------------------------ config parsing


def parse_list(value: str | None) -> list[str]:
    """Kafka's LIST config type: comma-separated, whitespace around items trimmed."""
    if value is None or not value.strip():
        return []
    return re.split(r"\s*,\s*", value.strip())


def java_split(text: str, separator: str) -> list[str]:
    """Java's String.split: trailing empty strings removed."""
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class Settings:
    """One transform's or predicate's settings, with its config prefix for error messages."""

    def __init__(self, prefix: str, values: dict[str, str]) -> None:
        self.prefix = prefix
        self.values = values

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def required(self, name: str) -> str:
        value = self.values.get(name)
        if value is None:
            raise missing(self.prefix + name)
        return value

    def non_empty(self, name: str) -> str:
        value = self.required(name)
        if not value:
            raise invalid_value(self.prefix + name, value, "String must be non-empty")
        return value

    def list(self, name: str, *, required: bool = False) -> list[str]:
        if required:
            items = parse_list(self.required(name))
            if not items:
                raise invalid_value(self.prefix + name, "[]", "Empty list")
            return items
        return parse_list(self.values.get(name))

    def regex(self, name: str) -> str:
        pattern = self.non_empty(name)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise invalid_value(self.prefix + name, pattern,
                                f"Invalid regex: {exc}") from None
        return pattern


def whole_match(pattern: str) -> str:
    """A Java regex that matches where `pattern` matches the whole string (Matcher.matches)."""
    return f"^(?:{pattern})\\z"


# ------------------------------------------------------------------------------ helpers


def struct_of(fields: Sequence[tuple[str, Column]]) -> Column:
    return F.struct(*[column.alias(name) for name, column in fields])


def rebuilt(column: Column, fields: Sequence[tuple[str, Column]]) -> Column:
    """A new struct from `fields`, null where `column` is null (a tombstone stays one)."""
    return F.when(column.isNotNull(), struct_of(fields))


def fail_on_value(column: Column, message: str, data_type: DataType) -> Column:
    """A column of `data_type` that fails the query at the first non-null value."""
    return F.when(column.isNull(), null_of(data_type)).otherwise(
        F.raise_error(F.lit(message)).cast(data_type))


def connect_type(schema: ConnectSchema | None, data_type: DataType) -> str | None:
    return schema.type if schema is not None else connect_type_of(data_type)


def struct_parts(frame: RecordFrame, part: str, purpose: str
                 ) -> tuple[Column, ConnectSchema | None, StructType]:
    """The Struct (with a schema) or Map (schemaless) `part`; Kafka's requireStruct /
    requireMap failures otherwise."""
    schema, data_type = frame.schema_of(part), frame.type_of(part)
    if schema is not None:
        if schema.type != "struct":
            raise RecordShapeError(f"Only Struct objects supported for [{purpose}], found: "
                                   f"{java_class_name(schema, data_type)}", part)
    elif not isinstance(data_type, StructType):
        raise RecordShapeError(f"Only Map objects supported in absence of schema for "
                               f"[{purpose}], found: {java_class_name(None, data_type)}", part)
    assert isinstance(data_type, StructType)
    return F.col(part), schema, data_type


def field_columns(column: Column, data_type: StructType) -> list[tuple[str, Column]]:
    return [(f.name, column[f.name]) for f in data_type.fields]


def put_field(fields: list[tuple[str, Column]], name: str, value: Column) -> None:
    """Map.put: replace the entry of `name` in place, or add it at the end."""
    for i, (existing, _) in enumerate(fields):
        if existing == name:
            fields[i] = (name, value)
            return
    fields.append((name, value))


# ------------------------------------------------------------------------------ transforms


class Transformation(ABC):
    """One configured transform. `part` is "key" or "value" for $Key / $Value variants."""

    #: the class name without the package, e.g. "InsertField"
    base_name: ClassVar[str]
    #: True when the transform has $Key / $Value variants
    has_variants: ClassVar[bool] = True

    def __init__(self, settings: Settings, part: str | None) -> None:
        self.settings = settings
        self.part = part

    @abstractmethod
    def apply(self, frame: RecordFrame) -> RecordFrame:
        """The frame with every record transformed (plan-time; raises RecordShapeError for
        records it cannot handle)."""


class InsertField(Transformation):
    """Insert the record's topic, partition, offset (sink records), timestamp and/or a static
    value as fields. ``<name>!`` makes a field required, ``<name>?`` (the default) optional."""

    base_name = "InsertField"
    purpose = "field insertion"

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        self.topic_field = self._spec("topic.field")
        self.partition_field = self._spec("partition.field")
        self.offset_field = self._spec("offset.field")
        self.timestamp_field = self._spec("timestamp.field")
        self.static_field = self._spec("static.field")
        self.static_value = settings.get("static.value")

    def _spec(self, name: str) -> tuple[str, bool] | None:
        spec = self.settings.get(name)
        if spec is None:
            return None
        if spec.endswith("?"):
            return spec[:-1], True
        if spec.endswith("!"):
            return spec[:-1], False
        return spec, True

    def apply(self, frame):
        assert self.part is not None
        column, schema, data_type = struct_parts(frame, self.part, self.purpose)
        fields = field_columns(column, data_type)
        additions: list[tuple[str, Column, ConnectSchema, bool]] = []  # name, value, schema, set
        if self.topic_field:
            name, optional = self.topic_field
            additions.append((name, F.col("topic"), ConnectSchema("string", optional), True))
        if self.partition_field:
            name, optional = self.partition_field
            additions.append((name, F.col("partition"), ConnectSchema("int32", optional),
                              frame.sink))
        if self.offset_field:
            if not frame.sink:
                raise RecordShapeError(
                    "Offset insertion is only supported for sink connectors, record is of "
                    "type: class org.apache.kafka.connect.source.SourceRecord", None)
            name, optional = self.offset_field
            additions.append((name, F.col("offset"), ConnectSchema("int64", optional), True))
        if self.timestamp_field:
            name, optional = self.timestamp_field
            additions.append((name, F.unix_millis(F.col("timestamp")),
                              TIMESTAMP_SCHEMA.with_optional(optional), True))
        if self.static_field:
            name, optional = self.static_field
            static = F.lit(self.static_value).cast("string")
            additions.append((name, static, ConnectSchema("string", optional),
                              self.static_value is not None))
        if schema is None:
            # HashMap.put of the values that exist (a source record has no partition yet)
            for name, value, _schema, present in additions:
                if present:
                    put_field(fields, name, value)
            return frame.with_part(self.part, rebuilt(column, fields), None)
        new_schema = ConnectSchema.struct(
            [*schema.fields, *[(name, s) for name, _v, s, _p in additions]], basics=schema)
        fields += [(name, value if present else null_of(s.spark_type()))
                   for name, value, s, present in additions]
        return frame.with_part(self.part, rebuilt(column, fields), new_schema)


class ReplaceField(Transformation):
    """Keep (``include``), drop (``exclude``, which wins) and rename (``renames``,
    ``old:new,...``) fields."""

    base_name = "ReplaceField"
    purpose = "field replacement"

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        exclude = settings.get("exclude")
        include = settings.get("include")
        self.exclude = set(parse_list(exclude if exclude is not None
                                      else settings.get("blacklist")))
        self.include = set(parse_list(include if include is not None
                                      else settings.get("whitelist")))
        self.renames: dict[str, str] = {}
        mappings = settings.list("renames")
        for mapping in mappings:
            parts = java_split(mapping, ":")
            if len(parts) != 2:
                raise invalid_value(settings.prefix + "renames", "[" + ", ".join(mappings) + "]",
                                    f"Invalid rename mapping: {mapping}")
            self.renames[parts[0]] = parts[1]

    def keeps(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def apply(self, frame):
        assert self.part is not None
        column, schema, data_type = struct_parts(frame, self.part, self.purpose)
        fields: list[tuple[str, Column]] = []
        for name, value in field_columns(column, data_type):
            if self.keeps(name):
                put_field(fields, self.renames.get(name, name), value)
        if schema is None:
            return frame.with_part(self.part, rebuilt(column, fields), None)
        new_schema = ConnectSchema.struct(
            [(self.renames.get(name, name), s) for name, s in schema.fields if self.keeps(name)],
            basics=schema)
        return frame.with_part(self.part, rebuilt(column, fields), new_schema)


def _java_narrow(value: int, bits: int) -> int:
    """Java's narrowing of a long to `bits` bits (two's complement)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_SPARK_NAMES = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
                "float32": "float", "float64": "double", "boolean": "boolean",
                "string": "string"}


class MaskField(Transformation):
    """Replace ``fields`` with the null value of their type (0, false, "", epoch, empty list or
    map) or with ``replacement`` (numeric and string fields)."""

    base_name = "MaskField"
    purpose = "mask fields"

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        self.fields = settings.list("fields", required=True)
        self.replacement = settings.get("replacement")
        if self.replacement is not None and not self.replacement:
            raise invalid_value(settings.prefix + "replacement", "", "String must be non-empty")

    def apply(self, frame):
        assert self.part is not None
        column, schema, data_type = struct_parts(frame, self.part, self.purpose)
        masked = set(self.fields)
        fields = []
        for f in data_type.fields:
            value = column[f.name]
            if f.name in masked:
                field_schema = schema.field(f.name) if schema is not None else None
                value = self._masked(value, field_schema, f.dataType)
            fields.append((f.name, value))
        if schema is None:
            # HashMap.put(field, masked(value.get(field))): absent fields appear as null
            for name in self.fields:
                if name not in data_type.fieldNames():
                    put_field(fields, name, F.lit(None).cast("string"))
        return frame.with_part(self.part, rebuilt(column, fields), schema)

    def _masked(self, value: Column, schema: ConnectSchema | None, data_type: DataType
                ) -> Column:
        logical = schema.logical if schema is not None else None
        type_ = connect_type(schema, data_type)
        java_class = java_class_name(schema, data_type)
        if self.replacement is None:
            if logical in (TIMESTAMP_NAME, DATE_NAME, TIME_NAME):
                mask = F.lit(0).cast(data_type)
            elif logical == DECIMAL_NAME:
                mask = F.lit(b"\x00")
            elif type_ in _INT_BITS or type_ in ("float32", "float64"):
                mask = F.lit(0).cast(data_type)
            elif type_ == "boolean":
                mask = F.lit(False)
            elif type_ == "string":
                mask = F.lit("")
            elif isinstance(data_type, ArrayType):
                mask = F.array().cast(data_type)
            elif isinstance(data_type, MapType):
                mask = F.create_map().cast(data_type)
            elif isinstance(data_type, StructType) and schema is None:
                mask = F.struct()  # an empty HashMap
            else:
                return fail_on_value(value, f"Cannot mask value of type: class {java_class}",
                                     data_type)
        else:
            mask = self._replacement(type_, logical)
            if mask is None:
                return fail_on_value(
                    value, f"Cannot mask value of type class {java_class} with custom "
                    "replacement.", data_type)
            mask = mask.cast(data_type)
        return F.when(value.isNotNull(), mask)

    def _replacement(self, type_: str | None, logical: str | None) -> Column | None:
        text = self.replacement
        assert text is not None
        if logical is not None:
            return None
        if type_ == "string":
            return F.lit(text)
        if type_ in _INT_BITS:
            try:
                number = int(text)
            except ValueError:
                try:
                    number = int(float(text))
                except ValueError:
                    raise ConnectDataError(f"Unable to convert {text} (class java.lang.String)"
                                           " to number") from None
            return F.lit(_java_narrow(number, _INT_BITS[type_]))
        if type_ in ("float32", "float64"):
            try:
                return F.lit(float(text))
            except ValueError:
                raise ConnectDataError(f"Unable to convert {text} (class java.lang.String) to "
                                       "number") from None
        return None


_CAST_OUTPUT = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")
_CAST_INPUT = (*_CAST_OUTPUT, "bytes")
_CAST_INPUT_TEXT = "[INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING, BYTES]"
_CAST_OUTPUT_TEXT = "[INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING]"
_LOGICAL_FORMATS = {TIMESTAMP_NAME: "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", DATE_NAME: "yyyy-MM-dd",
                    TIME_NAME: "HH:mm:ss.SSS'Z'"}


class Cast(Transformation):
    """Cast the whole key/value (``spec=int32``) or fields (``spec=a:int32,b:string``) to
    int8..int64, float32/64, boolean or string, with Java's conversions (narrowing wraps,
    doubles saturate, ``Boolean.parseBoolean``, bytes to base64, dates to ISO 8601)."""

    base_name = "Cast"
    purpose = "cast types"

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        specs = settings.list("spec")
        name = settings.prefix + "spec"
        if not specs:
            raise ConnectConfigError(f"Invalid value [] for configuration {name}: Must specify "
                                     "at least one field to cast.")
        self.whole: str | None = None
        self.casts: dict[str, str] = {}
        for spec in specs:
            parts = java_split(spec, ":")
            if len(parts) > 2:
                raise invalid_value(name, "[" + ", ".join(specs) + "]",
                                    f"Invalid rename mapping: {spec}")
            type_ = parts[-1].strip().lower()
            if type_ not in (*_CAST_INPUT, "array", "map", "struct"):
                raise ConnectConfigError(
                    f"Invalid type found in casting spec: {parts[-1].strip()}")
            if type_ not in _CAST_OUTPUT:
                raise ConnectConfigError(
                    f"Cast transformation does not support casting to {type_.upper()}; "
                    f"supported types are {_CAST_OUTPUT_TEXT}")
            if len(parts) == 1:
                self.whole = type_
            else:
                self.casts[parts[0].strip()] = type_
        if self.whole is not None and len(specs) > 1:
            raise ConnectConfigError("Cast transformations that specify a type to cast the entire "
                                     "value to may ony specify a single cast in their spec")

    def apply(self, frame):
        assert self.part is not None
        schema, data_type = frame.schema_of(self.part), frame.type_of(self.part)
        column = F.col(self.part)
        if self.whole is not None:
            value = cast_value(column, schema, data_type, self.whole)
            new_schema = None if schema is None else schema.with_type(self.whole)
            return frame.with_part(self.part, value, new_schema)
        column, schema, struct_type = struct_parts(frame, self.part, self.purpose)
        fields = []
        for f in struct_type.fields:
            value = column[f.name]
            if f.name in self.casts:
                field_schema = schema.field(f.name) if schema is not None else None
                value = cast_value(value, field_schema, f.dataType, self.casts[f.name])
            fields.append((f.name, value))
        if schema is None:
            for name, type_ in self.casts.items():
                if name not in struct_type.fieldNames():
                    put_field(fields, name, F.lit(None).cast(_SPARK_NAMES[type_]))
            return frame.with_part(self.part, rebuilt(column, fields), None)
        new_schema = ConnectSchema.struct(
            [(name, ConnectSchema(self.casts[name], s.optional) if name in self.casts else s)
             for name, s in schema.fields], optional=schema.optional, basics=schema)
        return frame.with_part(self.part, rebuilt(column, fields), new_schema)


def _double_to_long(value: Column) -> Column:
    """Java's (long) of a double: NaN is 0, out of range saturates."""
    return (F.when(F.isnan(value), F.lit(0).cast("long"))
            .when(value >= F.lit(9.223372036854775807e18), F.lit(2**63 - 1))
            .when(value <= F.lit(-9.223372036854775808e18), F.lit(-(2**63)))
            .otherwise(value.cast("long")))


def _double_to_int(value: Column) -> Column:
    """Java's (int) of a double, widened to long."""
    return (F.when(F.isnan(value), F.lit(0).cast("long"))
            .when(value >= F.lit(2147483647.0), F.lit(2**31 - 1).cast("long"))
            .when(value <= F.lit(-2147483648.0), F.lit(-(2**31)).cast("long"))
            .otherwise(value.cast("long")))


def _wrap(value: Column, bits: int) -> Column:
    """Java's narrowing of a long to `bits` bits."""
    if bits == 64:
        return value
    mask, sign = (1 << bits) - 1, 1 << (bits - 1)
    return value.bitwiseAND(F.lit(mask)).bitwiseXOR(F.lit(sign)) - F.lit(sign)


def cast_value(value: Column, schema: ConnectSchema | None, data_type: DataType,
               target: str) -> Column:
    """Kafka Cast's castValueToType as a column expression (null stays null)."""
    source = connect_type(schema, data_type)
    target_type = _SPARK_NAMES[target]
    if source not in _CAST_INPUT:
        kafka_type = source.upper() if source else data_type.simpleString().upper()
        return fail_on_value(value, f"Cast transformation does not support casting from "
                             f"{kafka_type}; supported types are {_CAST_INPUT_TEXT}",
                             _spark_type(target))
    logical = schema.logical if schema is not None else None
    if logical == DECIMAL_NAME:
        return fail_on_value(value, "Cast of Decimal values is not supported",
                             _spark_type(target))
    java_class = java_class_name(schema, data_type)
    unexpected = f"Unexpected type in Cast transformation: class {java_class}"
    if target == "string":
        if logical in _LOGICAL_FORMATS:
            instant = (F.timestamp_seconds(value.cast("long") * 86400) if logical == DATE_NAME
                       else F.timestamp_millis(value.cast("long")))
            out = F.date_format(F.to_utc_timestamp(instant, F.current_timezone()),
                                _LOGICAL_FORMATS[logical])
        elif source == "bytes":
            out = F.translate(F.base64(value), "\r\n", "")  # Base64.getEncoder(): no line breaks
        else:
            out = value.cast("string")
        return out
    if source == "bytes":
        return fail_on_value(value, unexpected, _spark_type(target))
    if target in _INT_BITS:
        bits = _INT_BITS[target]
        if source in _INT_BITS:
            out = _wrap(value.cast("long"), bits)
        elif source in ("float32", "float64"):
            as_long = (_double_to_long(value.cast("double")) if bits == 64
                       else _double_to_int(value.cast("double")))
            out = _wrap(as_long, bits)
        elif source == "boolean":
            out = F.when(value, F.lit(1)).otherwise(F.lit(0))
        else:
            out = value.cast(target_type)  # Byte/Short/Integer/Long.parseX (errors fail)
        return out.cast(target_type)
    if target in ("float32", "float64"):
        if source == "boolean":
            return F.when(value, F.lit(1.0)).otherwise(F.lit(0.0)).cast(target_type)
        return value.cast(target_type)
    # boolean
    if source in _INT_BITS:
        return value.cast("long") != 0
    if source in ("float32", "float64"):
        return _double_to_long(value.cast("double")) != 0
    if source == "string":
        return F.lower(value) == F.lit("true")
    return value


def _spark_type(connect: str) -> DataType:
    return ConnectSchema(connect).spark_type()


class HoistField(Transformation):
    """Wrap the key/value in a Struct (with a schema) or Map (schemaless) of one ``field``."""

    base_name = "HoistField"

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        self.field = settings.required("field")

    def apply(self, frame):
        assert self.part is not None
        schema = frame.schema_of(self.part)
        value = struct_of([(self.field, F.col(self.part))])
        new_schema = None if schema is None else ConnectSchema.struct([(self.field, schema)])
        return frame.with_part(self.part, value, new_schema)


class ExtractField(Transformation):
    """Replace the key/value with its ``field`` (``field.syntax.version=V2``: a dotted path)."""

    base_name = "ExtractField"
    purpose = "field extraction"

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        self.field = settings.required("field")
        version = (settings.get("field.syntax.version") or "V1").strip().upper()
        if version not in ("V1", "V2"):
            raise invalid_value(settings.prefix + "field.syntax.version", version,
                                "String must be one of: V1, V2")
        self.path = self.field.split(".") if version == "V2" else [self.field]

    def apply(self, frame):
        assert self.part is not None
        column, schema, data_type = struct_parts(frame, self.part, self.purpose)
        field_schema = schema
        current_type: DataType = data_type
        for name in self.path:
            if isinstance(current_type, StructType) and name in current_type.fieldNames():
                current_type = current_type[name].dataType
                column = column[name]
                field_schema = field_schema.field(name) if field_schema is not None else None
            elif schema is not None:
                raise RecordShapeError(f"Unknown field: {self.field}", self.part)
            else:
                return frame.with_part(self.part, F.lit(None).cast("string"), None)
        return frame.with_part(self.part, column, field_schema)


class ValueToKey(Transformation):
    """Replace the key with a Struct/Map of the value's ``fields``."""

    base_name = "ValueToKey"
    has_variants = False
    purpose = "copying fields from value to key"

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        self.fields = settings.list("fields", required=True)

    def apply(self, frame):
        column, schema, data_type = struct_parts(frame, "value", self.purpose)
        names = data_type.fieldNames()
        fields = [(name, column[name] if name in names else F.lit(None).cast("string"))
                  for name in self.fields]
        key_schema = None
        if schema is not None:
            missing_fields = [name for name in self.fields if schema.field(name) is None]
            if missing_fields:
                raise RecordShapeError(f"Field does not exist: {missing_fields[0]}", "value")
            key_schema = ConnectSchema.struct([(name, schema.field(name))  # type: ignore[misc]
                                               for name in self.fields])
        return frame.with_part("key", rebuilt(column, fields), key_schema)


class RegexRouter(Transformation):
    """Rename topics that match ``regex`` as a whole with ``replacement`` ($1, ... groups)."""

    base_name = "RegexRouter"
    has_variants = False

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        self.regex = settings.regex("regex")
        self.replacement = settings.required("replacement")

    def apply(self, frame):
        pattern = whole_match(self.regex)
        topic = F.col("topic")
        routed = F.when(topic.rlike(pattern),
                        F.regexp_replace(topic, pattern, self.replacement)).otherwise(topic)
        return frame.with_df(frame.df.withColumn("topic", routed))


class TimestampRouter(Transformation):
    """Route to ``topic.format`` (default ``${topic}-${timestamp}``) with the record timestamp
    formatted by ``timestamp.format`` (default ``yyyyMMdd``, UTC)."""

    base_name = "TimestampRouter"
    has_variants = False

    def __init__(self, settings: Settings, part: str | None) -> None:
        super().__init__(settings, part)
        self.topic_format = settings.get("topic.format", "${topic}-${timestamp}")
        self.timestamp_format = settings.get("timestamp.format", "yyyyMMdd")

    def apply(self, frame):
        timestamp = F.col("timestamp")
        formatted = F.date_format(F.to_utc_timestamp(timestamp, F.current_timezone()),
                                  str(self.timestamp_format))
        topic = F.replace(F.replace(F.lit(self.topic_format), F.lit("${topic}"), F.col("topic")),
                          F.lit("${timestamp}"), formatted)
        routed = F.when(timestamp.isNotNull(), topic).otherwise(
            F.raise_error(F.concat(F.lit("Timestamp missing on record: topic="),
                                   F.col("topic"))).cast("string"))
        return frame.with_df(frame.df.withColumn("topic", routed))


class Filter(Transformation):
    """Drop the records (all of them, or those its predicate selects)."""

    base_name = "Filter"
    has_variants = False

    def apply(self, frame):
        return frame.with_df(frame.df.where(F.lit(False)))


TRANSFORMS: dict[str, type[Transformation]] = {
    cls.base_name: cls for cls in (InsertField, ReplaceField, MaskField, Cast, HoistField,
                                   ExtractField, ValueToKey, RegexRouter, TimestampRouter,
                                   Filter)
}


# ------------------------------------------------------------------------------ predicates


class Predicate(ABC):
    base_name: ClassVar[str]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @abstractmethod
    def condition(self, frame: RecordFrame) -> Column:
        """True for the records the predicate matches (never null)."""


class TopicNameMatches(Predicate):
    base_name = "TopicNameMatches"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.pattern = settings.regex("pattern")

    def condition(self, frame):
        return F.coalesce(F.col("topic").rlike(whole_match(self.pattern)), F.lit(False))


class HasHeaderKey(Predicate):
    base_name = "HasHeaderKey"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.name = settings.non_empty("name")

    def condition(self, frame):
        return F.coalesce(F.exists(F.col("headers"), lambda h: h["key"] == F.lit(self.name)),
                          F.lit(False))


class RecordIsTombstone(Predicate):
    base_name = "RecordIsTombstone"

    def condition(self, frame):
        return F.col("value").isNull()


PREDICATES: dict[str, type[Predicate]] = {
    cls.base_name: cls for cls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone)
}


# ------------------------------------------------------------------------------ the chain


@dataclass(frozen=True)
class ChainStep:
    alias: str
    transform: Transformation
    predicate: Predicate | None = None
    negate: bool = False

    def apply(self, frame: RecordFrame) -> list[RecordFrame]:
        if self.predicate is None:
            return [_transformed(self.transform, frame)]
        selected = self.predicate.condition(frame)
        if self.negate:
            selected = ~selected
        if isinstance(self.transform, Filter):
            return [frame.with_df(frame.df.where(~selected))]
        applied = _transformed(self.transform, frame.with_df(frame.df.where(selected)))
        skipped = frame.with_df(frame.df.where(~selected))
        if applied.same_shape(skipped):
            return [applied.with_df(applied.df.unionByName(skipped.df))]
        return [applied, skipped]


def _transformed(transform: Transformation, frame: RecordFrame) -> RecordFrame:
    try:
        return transform.apply(frame)
    except RecordShapeError as exc:
        # Kafka fails the task at the first record it cannot transform (nulls pass through)
        passes = F.col(exc.part).isNull() if exc.part else F.lit(False)
        fails = F.when(passes, F.lit(True)).otherwise(F.raise_error(F.lit(str(exc))).isNull())
        return frame.with_df(frame.df.where(fails))


def apply_chain(frames: Sequence[RecordFrame], steps: Sequence[ChainStep]) -> list[RecordFrame]:
    """Every frame through every step, in order."""
    current = list(frames)
    for step in steps:
        current = [out for frame in current for out in step.apply(frame)]
    return current


def _plugin(type_name: str, package: str, known: dict, config_name: str
            ) -> tuple[type, str | None]:
    """The class and variant ("key"/"value"/None) for a configured class name."""
    name = type_name.strip()
    short = name[len(package) + 1:] if name.startswith(package + ".") else name
    base, _, variant = short.partition("$")
    cls = known.get(base)
    if cls is None or (variant and variant not in ("Key", "Value")):
        raise invalid_value(config_name, name, f"Class {name} could not be found.")
    return cls, variant.lower() or None


def parse_transforms(props: dict[str, str],
                     warn: Callable[[str], None] = lambda message: None) -> list[ChainStep]:
    """The connector's transformation chain, from Kafka's ``transforms`` / ``predicates``
    settings."""
    predicates: dict[str, Predicate] = {}
    predicate_aliases = parse_list(props.get("predicates"))
    if len(set(predicate_aliases)) != len(predicate_aliases):
        raise invalid_value("predicates", props["predicates"], "Duplicate alias provided.")
    for alias in predicate_aliases:
        prefix = f"predicates.{alias}."
        type_name = props.get(prefix + "type")
        if type_name is None:
            raise missing(prefix + "type")
        cls, _ = _plugin(type_name, PREDICATES_PACKAGE, PREDICATES, prefix + "type")
        predicates[alias] = cls(Settings(prefix, _sub(props, prefix)))
    steps = []
    aliases = parse_list(props.get("transforms"))
    if len(set(aliases)) != len(aliases):
        raise invalid_value("transforms", props["transforms"], "Duplicate alias provided.")
    for alias in aliases:
        prefix = f"transforms.{alias}."
        type_name = props.get(prefix + "type")
        if type_name is None:
            raise missing(prefix + "type")
        cls, part = _plugin(type_name, TRANSFORMS_PACKAGE, TRANSFORMS, prefix + "type")
        if cls.has_variants and part is None:
            raise invalid_value(prefix + "type", type_name.strip(),
                                f"Class {type_name.strip()} could not be found. Use "
                                f"{cls.base_name}$Key or {cls.base_name}$Value.")
        if not cls.has_variants and part is not None:
            raise invalid_value(prefix + "type", type_name.strip(),
                                f"Class {type_name.strip()} could not be found.")
        settings = _sub(props, prefix)
        predicate = None
        predicate_alias = settings.get("predicate")
        if predicate_alias:
            predicate = predicates.get(predicate_alias)
            if predicate is None:
                raise invalid_value(prefix + "predicate", predicate_alias,
                                    "The predicate is not defined in 'predicates'.")
        negate_text = settings.get("negate", "false")
        if negate_text.strip().lower() not in ("true", "false"):
            raise invalid_value(prefix + "negate", negate_text,
                                "Expected value to be either true or false")
        negate = negate_text.strip().lower() == "true"
        if negate and predicate is None:
            warn(f"{prefix}negate is set but {alias} has no predicate; it is ignored")
        transform_settings = {k: v for k, v in settings.items()
                              if k not in ("type", "predicate", "negate")}
        steps.append(ChainStep(alias, cls(Settings(prefix, transform_settings), part),
                               predicate, negate))
    return steps


def _sub(props: dict[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}
