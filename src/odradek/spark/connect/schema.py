"""Connect schemas (Kafka's ``org.apache.kafka.connect.data.Schema``) and how they map to Spark.

A Connect record's key and value travel through the Spark pipeline as ordinary columns; the
Connect schema of each is kept beside the DataFrame at plan time (`ConnectSchema`, or None
for schemaless data), because Spark's types cannot say what Connect needs: optionality,
schema names (logical types), versions, docs, parameters.

Values use their *physical* Connect representation as the Spark column, so data read from
Kafka and written back is unchanged: ``Timestamp`` and ``Time`` are int64/int32 milliseconds,
``Date`` is int32 days, ``Decimal`` is the unscaled bytes.

| Connect | Spark |
|---|---|
| int8 / int16 / int32 / int64 | tinyint / smallint / int / bigint |
| float32 / float64 | float / double |
| boolean / string / bytes | boolean / string / binary |
| array / map / struct | array / map / struct |

Schemaless data (schema None) follows JsonConverter's Java types: integers are int64, other
numbers float64, objects (Java ``Map``) are Spark structs, lists are arrays.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from odradek.protocol.java import java_hashmap_order
from odradek.spark.connect.errors import ConnectDataError

PRIMITIVE_TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string",
                   "bytes")
TYPES = (*PRIMITIVE_TYPES, "array", "map", "struct")

TIMESTAMP_NAME = "org.apache.kafka.connect.data.Timestamp"
DATE_NAME = "org.apache.kafka.connect.data.Date"
TIME_NAME = "org.apache.kafka.connect.data.Time"
DECIMAL_NAME = "org.apache.kafka.connect.data.Decimal"

_SPARK_PRIMITIVES: dict[str, DataType] = {
    "int8": ByteType(), "int16": ShortType(), "int32": IntegerType(), "int64": LongType(),
    "float32": FloatType(), "float64": DoubleType(), "boolean": BooleanType(),
    "string": StringType(), "bytes": BinaryType(),
}


@dataclass(frozen=True)
class ConnectSchema:
    """One Connect schema. `default` is the default value as JSON text (kept as given)."""

    type: str
    optional: bool = False
    name: str | None = None
    version: int | None = None
    doc: str | None = None
    parameters: tuple[tuple[str, str], ...] | None = None
    default: str | None = None
    fields: tuple[tuple[str, ConnectSchema], ...] = ()
    items: ConnectSchema | None = None
    keys: ConnectSchema | None = None
    values: ConnectSchema | None = None

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ConnectDataError(f"Unknown schema type: {self.type}")

    # -------------------------------------------------------------- building

    @classmethod
    def struct(cls, fields: Iterable[tuple[str, ConnectSchema]], *, optional: bool = False,
               basics: ConnectSchema | None = None) -> ConnectSchema:
        """A struct schema; `basics` gives name, version, doc and parameters
        (Kafka's SchemaUtil.copySchemaBasics, which leaves optionality out)."""
        fields = tuple(fields)
        names = [name for name, _ in fields]
        for name in names:
            if names.count(name) > 1:
                raise ConnectDataError(
                    f"Cannot create field because of field name duplication {name}")
        if basics is None:
            return cls("struct", optional, fields=fields)
        return cls("struct", optional, basics.name, basics.version, basics.doc,
                   basics.parameters, fields=fields)

    def with_optional(self, optional: bool) -> ConnectSchema:
        return replace(self, optional=optional)

    def with_type(self, type_: str) -> ConnectSchema:
        """The same basics (name, version, doc, parameters, optional) on another primitive
        type, as Cast builds its schemas; the default is dropped."""
        return ConnectSchema(type_, self.optional, self.name, self.version, self.doc,
                             self.parameters)

    def field(self, name: str) -> ConnectSchema | None:
        for field_name, schema in self.fields:
            if field_name == name:
                return schema
        return None

    @property
    def field_names(self) -> list[str]:
        return [name for name, _ in self.fields]

    @property
    def logical(self) -> str | None:
        """The logical type name when it is one Odradek knows (Timestamp, Date, Time, Decimal)."""
        if self.name in (TIMESTAMP_NAME, DATE_NAME, TIME_NAME, DECIMAL_NAME):
            return self.name
        return None

    @property
    def kafka_type(self) -> str:
        """The type as Kafka's Schema.Type prints it (INT32, STRUCT, ...)."""
        return self.type.upper()

    # -------------------------------------------------------------- JSON (JsonConverter)

    def to_json(self) -> dict[str, Any]:
        """JsonConverter.asJsonSchema: the keys in Kafka's order."""
        node: dict[str, Any] = {"type": self.type}
        if self.type == "array":
            assert self.items is not None
            node["items"] = self.items.to_json()
        elif self.type == "map":
            assert self.keys is not None and self.values is not None
            node["keys"] = self.keys.to_json()
            node["values"] = self.values.to_json()
        elif self.type == "struct":
            node["fields"] = [{**schema.to_json(), "field": name} for name, schema in self.fields]
        node["optional"] = self.optional
        if self.name is not None:
            node["name"] = self.name
        if self.version is not None:
            node["version"] = self.version
        if self.doc is not None:
            node["doc"] = self.doc
        if self.parameters is not None:
            node["parameters"] = dict(self.parameters)
        if self.default is not None:
            node["default"] = json.loads(self.default)
        return node

    def json_text(self) -> str:
        """The schema as JsonConverter writes it (compact, non-ASCII kept)."""
        return json_text(self.to_json())

    @classmethod
    def from_json(cls, node: Any) -> ConnectSchema | None:
        """JsonConverter.asConnectSchema; None for a JSON null (schemaless)."""
        if node is None:
            return None
        if not isinstance(node, dict):
            raise ConnectDataError("Schema must be a JSON object or null")
        type_ = node.get("type")
        if not isinstance(type_, str):
            raise ConnectDataError("Schema must contain 'type' field")
        if type_ not in TYPES:
            raise ConnectDataError(f"Unknown schema type: {type_}")
        fields: tuple[tuple[str, ConnectSchema], ...] = ()
        items = keys = values = None
        if type_ == "struct":
            raw_fields = node.get("fields")
            if not isinstance(raw_fields, list):
                raise ConnectDataError("Struct schema's \"fields\" argument is not an array.")
            parsed = []
            for raw in raw_fields:
                name = raw.get("field") if isinstance(raw, dict) else None
                if not isinstance(name, str):
                    raise ConnectDataError("Struct schema's field name not specified properly: "
                                           + json_text(raw))
                field_schema = cls.from_json(raw)
                assert field_schema is not None
                parsed.append((name, field_schema))
            fields = tuple(parsed)
        elif type_ == "array":
            if "items" not in node:
                raise ConnectDataError("Array schema did not specify the element type")
            items = cls.from_json(node["items"])
        elif type_ == "map":
            if "keys" not in node or "values" not in node:
                raise ConnectDataError("Map schema did not specify the key or value type")
            keys, values = cls.from_json(node["keys"]), cls.from_json(node["values"])
        parameters = node.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise ConnectDataError("Schema parameters must be a JSON object")
            parameters = tuple((str(k), str(v)) for k, v in parameters.items())
        version = node.get("version")
        default = node.get("default")
        return cls(
            type_,
            node.get("optional") is True,
            node.get("name") if isinstance(node.get("name"), str) else None,
            int(version) if isinstance(version, int) else None,
            node.get("doc") if isinstance(node.get("doc"), str) else None,
            parameters,
            None if default is None else json_text(default),
            fields, items, keys, values,
        )

    @classmethod
    def parse(cls, text: str) -> ConnectSchema | None:
        return cls.from_json(json.loads(text))

    # -------------------------------------------------------------- Spark

    def spark_type(self) -> DataType:
        """The Spark type holding values of this schema (their physical representation)."""
        if self.type in _SPARK_PRIMITIVES:
            return _SPARK_PRIMITIVES[self.type]
        if self.type == "array":
            assert self.items is not None
            return ArrayType(self.items.spark_type(), containsNull=True)
        if self.type == "map":
            assert self.keys is not None and self.values is not None
            return MapType(self.keys.spark_type(), self.values.spark_type(),
                           valueContainsNull=True)
        return StructType([StructField(name, schema.spark_type(), True)
                           for name, schema in self.fields])


def json_text(value: Any) -> str:
    """JSON as Jackson writes it in Kafka: compact, non-ASCII characters as they are."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


#: Schema.STRING_SCHEMA and friends
STRING_SCHEMA = ConnectSchema("string")
OPTIONAL_STRING_SCHEMA = ConnectSchema("string", True)
OPTIONAL_BYTES_SCHEMA = ConnectSchema("bytes", True)
TIMESTAMP_SCHEMA = ConnectSchema("int64", name=TIMESTAMP_NAME, version=1)


# ------------------------------------------------------------------------------ schemaless data


def connect_type_of(data_type: DataType) -> str | None:
    """The Connect type of a schemaless value held in a Spark column of `data_type`
    (ConnectSchema.schemaType of its Java class); None when Connect has no such type."""
    for type_, spark in _SPARK_PRIMITIVES.items():
        if data_type == spark:
            return type_
    if isinstance(data_type, ArrayType):
        return "array"
    if isinstance(data_type, (MapType, StructType)):
        return "map"
    return None


_JAVA_CLASSES: dict[str, str] = {
    "int8": "java.lang.Byte", "int16": "java.lang.Short", "int32": "java.lang.Integer",
    "int64": "java.lang.Long", "float32": "java.lang.Float", "float64": "java.lang.Double",
    "boolean": "java.lang.Boolean", "string": "java.lang.String", "bytes": "[B",
    "array": "java.util.ArrayList", "map": "java.util.HashMap",
}


def java_class_name(schema: ConnectSchema | None, data_type: DataType) -> str:
    """The Java class a value has in Kafka Connect, for Kafka's error messages."""
    if schema is not None:
        if schema.type == "struct":
            return "org.apache.kafka.connect.data.Struct"
        if schema.logical in (TIMESTAMP_NAME, DATE_NAME, TIME_NAME):
            return "java.util.Date"
        if schema.logical == DECIMAL_NAME:
            return "java.math.BigDecimal"
        return _JAVA_CLASSES.get(schema.type, schema.type)
    type_ = connect_type_of(data_type)
    return _JAVA_CLASSES.get(type_ or "", data_type.simpleString())


# ------------------------------------------------------------------------------ variant schemas


def spark_type_of_variant_schema(text: str, top_keys: list[str] | None = None) -> DataType:
    """The Spark type for schemaless JSON whose ``schema_of_variant`` is `text`, with
    JsonConverter's Java types: integers int64, other numbers float64, objects structs (Java
    maps), nulls strings. Lists mixing types stay variants.

    Object fields are in the iteration order of the HashMap JsonConverter fills, so they print
    and serialize as in Kafka; `top_keys` (the top-level object's keys in document order)
    decides between keys of one hash bucket, elsewhere their sorted order does."""
    parser = _VariantSchemaParser(text)
    data_type = parser.parse_type()
    parser.expect_end()
    if isinstance(data_type, StructType) and top_keys is not None:
        by_name = {f.name: f for f in data_type.fields}
        if set(top_keys) == set(by_name):
            ordered = java_hashmap_order(top_keys)
            data_type = StructType([by_name[name] for name in ordered])
    return data_type


@dataclass
class _VariantSchemaParser:
    text: str
    pos: int = field(default=0)

    def parse_type(self) -> DataType:
        word = self._word()
        if word == "OBJECT":
            self._expect("<")
            fields: list[StructField] = []
            while not self._peek(">"):
                if fields:
                    self._expect(",")
                name = self._name()
                self._expect(":")
                fields.append(StructField(name, self.parse_type(), True))
            self._expect(">")
            ordered = java_hashmap_order([f.name for f in fields])  # sorted names as given
            by_name = {f.name: f for f in fields}
            return StructType([by_name[name] for name in ordered])
        if word == "ARRAY":
            self._expect("<")
            element = self.parse_type()
            self._expect(">")
            return ArrayType(element, containsNull=True)
        if word == "DECIMAL":
            self._expect("(")
            precision = int(self._word())
            self._expect(",")
            scale = int(self._word())
            self._expect(")")
            return LongType() if scale == 0 and precision <= 18 else DoubleType()
        simple: dict[str, DataType] = {
            "BIGINT": LongType(), "INT": LongType(), "SMALLINT": LongType(),
            "TINYINT": LongType(), "DOUBLE": DoubleType(), "FLOAT": DoubleType(),
            "STRING": StringType(), "BOOLEAN": BooleanType(), "VOID": StringType(),
            "VARIANT": VariantType(), "BINARY": BinaryType(), "DATE": StringType(),
            "TIMESTAMP": StringType(), "TIMESTAMP_NTZ": StringType(),
        }
        if word in simple:
            return simple[word]
        raise ConnectDataError(f"Unsupported JSON value type {word} in {self.text!r}")

    def expect_end(self) -> None:
        self._skip_space()
        if self.pos != len(self.text):
            raise ConnectDataError(f"Unexpected text in {self.text!r} at {self.pos}")

    def _skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def _peek(self, token: str) -> bool:
        self._skip_space()
        return self.text.startswith(token, self.pos)

    def _expect(self, token: str) -> None:
        if not self._peek(token):
            raise ConnectDataError(f"Expected {token!r} in {self.text!r} at {self.pos}")
        self.pos += len(token)

    def _word(self) -> str:
        self._skip_space()
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum()
                                             or self.text[self.pos] == "_"):
            self.pos += 1
        if start == self.pos:
            raise ConnectDataError(f"Expected a type in {self.text!r} at {start}")
        return self.text[start:self.pos]

    def _name(self) -> str:
        self._skip_space()
        if not self._peek("`"):
            return self._word()
        self.pos += 1
        out = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "`":
                if self.text.startswith("``", self.pos):
                    out.append("`")
                    self.pos += 2
                    continue
                self.pos += 1
                return "".join(out)
            out.append(char)
            self.pos += 1
        raise ConnectDataError(f"Unterminated name in {self.text!r}")
