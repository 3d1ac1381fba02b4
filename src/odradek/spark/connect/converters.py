"""Kafka Connect's converters as Spark column expressions: JsonConverter, StringConverter and
ByteArrayConverter, configured with Kafka's names (``key.converter.schemas.enable``, ...).

Serializing (``fromConnectData``) turns a typed key or value column with its Connect schema
into the record bytes. Deserializing (``toConnectData``) works per micro-batch: the schema of
JSON data travels in every record, so `Converter.group` labels each record with its schema,
the distinct labels of a batch are collected, and `Converter.typed` parses the records of one
label into a typed column.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from odradek.spark.connect.errors import ConnectConfigError, ConnectDataError, invalid_value
from odradek.spark.connect.render import java_string
from odradek.spark.connect.schema import (
    OPTIONAL_BYTES_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    ConnectSchema,
    spark_type_of_variant_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import Column

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
BYTE_ARRAY_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"

#: group label of null data (JsonConverter's SchemaAndValue.NULL)
NULL_GROUP = "N"
_BAD_ENVELOPE_GROUP = "X"
_ENVELOPE_PREFIX = "E:"
_SCHEMALESS_PREFIX = "S:"

ENVELOPE_ERROR = (
    'JsonConverter with schemas.enable requires "schema" and "payload" fields and may not '
    "contain additional fields. If you are trying to deserialize plain JSON data, set "
    "schemas.enable=false in your converter configuration.")


class Converter:
    """One converter instance, for keys or for values."""

    kafka_class = ""

    def __init__(self, settings: dict[str, str], config_name: str) -> None:
        self.settings = settings
        self.config_name = config_name

    def serialize(self, column: Column, schema: ConnectSchema | None,
                  data_type: DataType) -> Column:
        raise NotImplementedError

    def group(self, raw: Column) -> Column:
        """A string labelling the shape of each record's data (one label for most
        converters)."""
        return F.when(raw.isNull(), F.lit(NULL_GROUP)).otherwise(F.lit("V"))

    def typed(self, raw: Column, label: str) -> tuple[Column, ConnectSchema | None]:
        """The Connect data of records labelled `label`, and their schema."""
        raise NotImplementedError


class StringConverter(Converter):
    """Kafka's StringConverter: UTF-8 text both ways (``toString()`` of other data)."""

    kafka_class = STRING_CONVERTER

    def __init__(self, settings: dict[str, str], config_name: str) -> None:
        super().__init__(settings, config_name)
        for name in ("converter.encoding", "serializer.encoding", "deserializer.encoding"):
            encoding = settings.get(name)
            if encoding is not None and encoding.strip().upper().replace("-", "") != "UTF8":
                raise invalid_value(f"{config_name}.{name}", encoding,
                                    "only UTF-8 is supported")

    def serialize(self, column, schema, data_type):
        return F.when(column.isNotNull(), java_string(column, schema, data_type)).cast("binary")

    def typed(self, raw, label):
        if label == NULL_GROUP:
            return F.lit(None).cast("string"), OPTIONAL_STRING_SCHEMA
        return raw.cast("string"), OPTIONAL_STRING_SCHEMA


class ByteArrayConverter(Converter):
    """Kafka's ByteArrayConverter: bytes pass through; other data is refused."""

    kafka_class = BYTE_ARRAY_CONVERTER

    def serialize(self, column, schema, data_type):
        if schema is not None and schema.type != "bytes":
            raise ConnectDataError(
                f"Invalid schema type for ByteArrayConverter: {schema.kafka_type}")
        if not isinstance(data_type, BinaryType):
            raise ConnectDataError("ByteArrayConverter is not compatible with objects of type "
                                   f"{_java_class(data_type)}")
        return column

    def typed(self, raw, label):
        return raw, OPTIONAL_BYTES_SCHEMA


class JsonConverter(Converter):
    """Kafka's JsonConverter. With ``schemas.enable`` (default true) every record is the
    envelope ``{"schema":...,"payload":...}``; without it, plain JSON, read schemaless."""

    kafka_class = JSON_CONVERTER

    def __init__(self, settings: dict[str, str], config_name: str) -> None:
        super().__init__(settings, config_name)
        self.schemas_enabled = parse_bool(settings.get("schemas.enable", "true"),
                                          f"{config_name}.schemas.enable")
        decimal_format = settings.get("decimal.format", "BASE64").strip().upper()
        if decimal_format not in ("BASE64", "NUMERIC"):
            raise invalid_value(f"{config_name}.decimal.format", decimal_format,
                                "String must be one of: BASE64, NUMERIC")

    # ------------------------------------------------------------------ fromConnectData

    def serialize(self, column, schema, data_type):
        payload = json_payload(column, data_type)
        if self.schemas_enabled:
            schema_text = "null" if schema is None else schema.json_text()
            envelope = F.concat(F.lit(f'{{"schema":{schema_text},"payload":'),
                                F.coalesce(payload, F.lit("null")), F.lit("}"))
            text = envelope if schema is not None else F.when(column.isNotNull(), envelope)
        else:
            text = F.coalesce(payload, F.lit("null")) if schema is not None else payload
        return text.cast("binary")

    # ------------------------------------------------------------------ toConnectData

    def group(self, raw):
        text = raw.cast("string")
        if not self.schemas_enabled:
            return F.coalesce(F.when(raw.isNotNull(), _schemaless_label(text, F.parse_json(text))),
                              F.lit(NULL_GROUP))
        keys = F.json_object_keys(text)
        is_envelope = F.coalesce((F.size(keys) == 2) & F.array_contains(keys, "schema")
                                 & F.array_contains(keys, "payload"), F.lit(False))
        envelope = F.from_json(text, StructType([StructField("schema", StringType()),
                                                 StructField("payload", VariantType())]))
        return (F.when(raw.isNull(), F.lit(NULL_GROUP))
                .when(~is_envelope, F.lit(_BAD_ENVELOPE_GROUP))
                .when(envelope["schema"].isNotNull(),
                      F.concat(F.lit(_ENVELOPE_PREFIX), envelope["schema"]))
                .otherwise(F.coalesce(
                    _schemaless_label(F.get_json_object(text, "$.payload"), envelope["payload"]),
                    F.lit(NULL_GROUP))))

    def typed(self, raw, label):
        text = raw.cast("string")
        if label == NULL_GROUP:
            return F.lit(None).cast("string"), None
        if label == _BAD_ENVELOPE_GROUP:
            raise ConnectDataError(ENVELOPE_ERROR)
        if label.startswith(_ENVELOPE_PREFIX):
            schema = ConnectSchema.parse(label[len(_ENVELOPE_PREFIX):])
            assert schema is not None
            _check_json_decodable(schema)
            envelope = StructType([StructField("schema", StringType()),
                                   StructField("payload", schema.spark_type())])
            return F.from_json(text, envelope, {"mode": "FAILFAST"})["payload"], schema
        keys_text, _, variant_schema = label[len(_SCHEMALESS_PREFIX):].partition("\n")
        data_type = spark_type_of_variant_schema(
            variant_schema, json.loads(keys_text) if keys_text else None)
        if self.schemas_enabled:
            envelope = StructType([StructField("schema", StringType()),
                                   StructField("payload", data_type)])
            return F.from_json(text, envelope, {"mode": "FAILFAST"})["payload"], None
        wrapped = F.concat(F.lit('{"p":'), text, F.lit("}"))
        return F.from_json(wrapped, StructType([StructField("p", data_type)]),
                           {"mode": "FAILFAST"})["p"], None


def _schemaless_label(json_text: Column, variant: Column) -> Column:
    """The label of schemaless JSON: its top-level keys in document order (which decide the
    order of its HashMap in Kafka) and its ``schema_of_variant``; null for JSON null."""
    keys = F.coalesce(F.to_json(F.json_object_keys(json_text)), F.lit(""))
    schema = F.schema_of_variant(variant)
    return F.when(schema != F.lit("VOID"),
                  F.concat(F.lit(_SCHEMALESS_PREFIX), keys, F.lit("\n"), schema))


def json_payload(column: Column, data_type: DataType) -> Column:
    """`column` as JSON text (Jackson's, as Kafka writes it; bytes base64), null for null."""
    _check_json_encodable(data_type)
    wrapped = F.to_json(F.struct(column.alias("p")), {"ignoreNullFields": "false"})
    # '{"p":' + payload + '}'
    return F.when(column.isNotNull(), wrapped.substr(F.lit(6), F.length(wrapped) - 6))


def _check_json_encodable(data_type: DataType) -> None:
    if isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise ConnectDataError("Maps with non-string keys are not supported by the JSON "
                                   "converter here (Kafka writes them as arrays of pairs)")
        _check_json_encodable(data_type.valueType)
    elif isinstance(data_type, StructType):
        for field in data_type.fields:
            _check_json_encodable(field.dataType)
    elif hasattr(data_type, "elementType"):
        _check_json_encodable(data_type.elementType)  # type: ignore[attr-defined]


def _check_json_decodable(schema: ConnectSchema) -> None:
    if schema.type == "map":
        assert schema.keys is not None and schema.values is not None
        if schema.keys.type != "string":
            raise ConnectDataError("Maps with non-string keys are not supported by the JSON "
                                   "converter here (Kafka writes them as arrays of pairs)")
        _check_json_decodable(schema.values)
    for _, field_schema in schema.fields:
        _check_json_decodable(field_schema)
    if schema.items is not None:
        _check_json_decodable(schema.items)


def _java_class(data_type: DataType) -> str:
    from odradek.spark.connect.schema import java_class_name

    return "class " + java_class_name(None, data_type)


def parse_bool(value: str, name: str) -> bool:
    """Kafka's BOOLEAN config parsing."""
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise invalid_value(name, value, "Expected value to be either true or false")
    return text == "true"


_CONVERTERS: dict[str, type[Converter]] = {}
for _converter in (JsonConverter, StringConverter, ByteArrayConverter):
    _simple = _converter.kafka_class.rsplit(".", 1)[1]
    _CONVERTERS[_converter.kafka_class] = _converter
    _CONVERTERS[_simple] = _converter                         # simple class name alias
    _CONVERTERS[_simple.removesuffix("Converter")] = _converter  # Kafka's pruned alias


def converter_class_names() -> list[str]:
    return sorted({cls.kafka_class for cls in _CONVERTERS.values()})


def create_converter(config_name: str, props: dict[str, str]) -> Converter:
    """The converter `props[config_name]` names (e.g. "value.converter"), configured with the
    settings prefixed ``<config_name>.``."""
    class_name = props.get(config_name)
    if class_name is None or not class_name.strip():
        raise ConnectConfigError(
            f'Missing required configuration "{config_name}" which has no default value.')
    converter = _CONVERTERS.get(class_name.strip())
    if converter is None:
        raise invalid_value(config_name, class_name.strip(),
                            f"Class {class_name.strip()} could not be found. Supported: "
                            + ", ".join(converter_class_names()))
    prefix = f"{config_name}."
    settings = {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}
    return converter(settings, config_name)
