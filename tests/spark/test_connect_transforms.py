"""Connect converters and single message transforms, as Spark column expressions, against the
values Kafka's documentation and Kafka's code give (no broker: the same pipeline functions the
connector queries use, over batch DataFrames in the shared local SparkSession)."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pytest

from odradek.spark.connect.connectors import serialize, sink_frames, sink_lines, source_records
from odradek.spark.connect.converters import create_converter
from odradek.spark.connect.errors import ConnectConfigError
from odradek.spark.connect.transforms import apply_chain, parse_transforms
from odradek.spark.schema import HEADERS_TYPE

JSON = "org.apache.kafka.connect.json.JsonConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
T = "org.apache.kafka.connect.transforms."
P = "org.apache.kafka.connect.transforms.predicates."
READ_AT = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
READ_AT_MS = 1704164645678


def converters(key=JSON, value=JSON, schemas=True):
    props = {"key.converter": key, "value.converter": value,
             "key.converter.schemas.enable": str(schemas).lower(),
             "value.converter.schemas.enable": str(schemas).lower()}
    return create_converter("key.converter", props), create_converter("value.converter", props)


def run_source(spark, lines, transforms=None, topic="connect-test", **converter_args):
    """FileStreamSource records for `lines`: [(key, value, topic)] with bytes decoded."""
    df = spark.createDataFrame([(line, READ_AT) for line in lines],
                               "value string, timestamp timestamp")
    key_converter, value_converter = converters(**converter_args)
    steps = tuple(parse_transforms(transforms or {}))
    out = source_records(df, topic, steps, key_converter, value_converter)
    return [(_text(r.key), _text(r.value), r.topic) for r in out.collect()]


def kafka_records(spark, records):
    """Rows as the "odradek" source gives them: (key, value, topic[, headers])."""
    rows = []
    for offset, (key, value, topic, *rest) in enumerate(records):
        headers = rest[0] if rest else None
        rows.append((_bytes(key), _bytes(value), topic, 0, offset, READ_AT, 0, headers))
    schema = ("key binary, value binary, topic string, partition int, offset long, "
              f"timestamp timestamp, timestampType int, headers {HEADERS_TYPE.simpleString()}")
    return spark.createDataFrame(rows, schema)


def run_records(spark, records, transforms, **converter_args):
    """Kafka records -> converters -> transforms -> converters: [(key, value, topic)]."""
    key_converter, value_converter = converters(**converter_args)
    steps = tuple(parse_transforms(transforms))
    frames = sink_frames(kafka_records(spark, records), key_converter, value_converter,
                         decode_key=True)
    out = serialize(apply_chain(frames, steps), key_converter, value_converter)
    return sorted(((_text(r.key), _text(r.value), r.topic) for r in out.collect()),
                  key=lambda r: (r[2], str(r[0]), str(r[1])))


def envelope(schema, payload):
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"))


def struct_schema(*fields, optional=False, **extra):
    return {"type": "struct", "fields": [dict(type=t, optional=o, field=n) for n, t, o in fields],
            "optional": optional, **extra}


def _text(value):
    return None if value is None else bytes(value).decode()


def _bytes(value):
    return value.encode() if isinstance(value, str) else value


def values(rows):
    return [json.loads(value) for _key, value, _topic in rows]


# ------------------------------------------------------------------------------ converters


def test_json_envelope_of_a_file_line_is_kafkas(spark):
    rows = run_source(spark, ["foo", 'a "quoted" line\twith é', ""])
    assert rows == [
        (None, '{"schema":{"type":"string","optional":false},"payload":"foo"}', "connect-test"),
        (None, '{"schema":{"type":"string","optional":false},'
               '"payload":"a \\"quoted\\" line\\twith é"}', "connect-test"),
        (None, '{"schema":{"type":"string","optional":false},"payload":""}', "connect-test"),
    ]
    assert run_source(spark, ["foo"], schemas=False) == [(None, '"foo"', "connect-test")]
    assert run_source(spark, ["foo"], value=STRING) == [(None, "foo", "connect-test")]
    assert run_source(spark, ["foo"], key=BYTES, value=STRING) == [(None, "foo", "connect-test")]
    with pytest.raises(Exception, match="Invalid schema type for ByteArrayConverter: STRING"):
        run_source(spark, ["foo"], value=BYTES)


def test_file_sink_lines_are_the_values_as_java_prints_them(spark):
    point = struct_schema(("x", "int32", False), ("label", "string", True),
                          ("ok", "boolean", True))
    records = [
        (None, envelope({"type": "string", "optional": False}, "a line"), "t"),
        (None, envelope(point, {"x": 7, "label": None, "ok": True}), "t"),
        (None, envelope({"type": "array", "items": {"type": "float64", "optional": False},
                         "optional": False}, [1.5, 1e10]), "t"),
        (None, '{"schema":null,"payload":"schemaless"}', "t"),
        (None, None, "t"),
        (None, envelope({"type": "int64", "optional": False, "version": 1,
                         "name": "org.apache.kafka.connect.data.Timestamp"}, READ_AT_MS), "t"),
    ]
    key_converter, value_converter = converters()
    lines = sink_lines(kafka_records(spark, records), (), key_converter, value_converter)
    assert [r.line for r in lines.collect()] == [
        "a line", "Struct{x=7,ok=true}", "[1.5, 1.0E10]", "schemaless", "null",
        "Tue Jan 02 03:04:05 UTC 2024"]  # java.util.Date.toString()

    plain = [(None, '{"line":"foo","n":1,"f":2.5}', "t"), (None, '"bar"', "t"),
             (None, "[1,2]", "t"), (None, "null", "t")]
    key_converter, value_converter = converters(schemas=False)
    lines = sink_lines(kafka_records(spark, plain), (), key_converter, value_converter)
    # a schemaless object is a HashMap in Kafka: its toString follows the hash buckets
    assert [r.line for r in lines.collect()] == ["{line=foo, f=2.5, n=1}", "bar", "[1, 2]",
                                                "null"]


def test_json_converter_refuses_plain_json_when_schemas_are_enabled(spark):
    key_converter, value_converter = converters()
    with pytest.raises(ValueError, match='requires "schema" and "payload" fields'):
        sink_lines(kafka_records(spark, [(None, '{"line":"foo"}', "t")]), (),
                   key_converter, value_converter)


# ------------------------------------------------------------------------------ transforms


def test_hoist_then_insert_static_field_kafka_docs_example(spark):
    # docs/connect.html "Transformations": HoistField$Value + InsertField$Value, schemaless JSON
    transforms = {"transforms": "MakeMap, InsertSource",
                  "transforms.MakeMap.type": T + "HoistField$Value",
                  "transforms.MakeMap.field": "line",
                  "transforms.InsertSource.type": T + "InsertField$Value",
                  "transforms.InsertSource.static.field": "data_source",
                  "transforms.InsertSource.static.value": "test-file-source"}
    lines = ["foo", "bar", "hello world"]
    rows = run_source(spark, lines, transforms, schemas=False)
    assert [value for _k, value, _t in rows] == [
        '{"line":"foo","data_source":"test-file-source"}',
        '{"line":"bar","data_source":"test-file-source"}',
        '{"line":"hello world","data_source":"test-file-source"}']
    # with schemas: HoistField's required struct, InsertField's optional string field
    rows = run_source(spark, ["foo"], transforms)
    assert rows[0][1] == (
        '{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"line"},'
        '{"type":"string","optional":true,"field":"data_source"}],"optional":false},'
        '"payload":{"line":"foo","data_source":"test-file-source"}}')


def test_insert_field_topic_timestamp_partition_offset(spark):
    transforms = {"transforms": "Hoist,Insert",
                  "transforms.Hoist.type": T + "HoistField$Value",
                  "transforms.Hoist.field": "line",
                  "transforms.Insert.type": T + "InsertField$Value",
                  "transforms.Insert.topic.field": "topic!",
                  "transforms.Insert.timestamp.field": "ts"}
    [(_key, value, _topic)] = run_source(spark, ["foo"], transforms)
    assert json.loads(value) == {
        "schema": struct_schema(("line", "string", False), ("topic", "string", False)) | {
            "fields": [{"type": "string", "optional": False, "field": "line"},
                       {"type": "string", "optional": False, "field": "topic"},
                       {"type": "int64", "optional": True,
                        "name": "org.apache.kafka.connect.data.Timestamp", "version": 1,
                        "field": "ts"}]},
        "payload": {"line": "foo", "topic": "connect-test", "ts": READ_AT_MS}}

    sink = {"transforms": "Insert", "transforms.Insert.type": T + "InsertField$Value",
            "transforms.Insert.partition.field": "p", "transforms.Insert.offset.field": "o"}
    rows = run_records(spark, [(None, '{"a":1}', "t"), (None, '{"a":2}', "t")], sink,
                       schemas=False)
    assert values(rows) == [{"a": 1, "p": 0, "o": 0}, {"a": 2, "p": 0, "o": 1}]

    with pytest.raises(Exception, match="Offset insertion is only supported for sink connectors"):
        run_source(spark, ["foo"], {**transforms, "transforms.Insert.offset.field": "o"})
    # Kafka's task fails on a value InsertField cannot take (a line has a string schema)
    with pytest.raises(Exception, match=r"Only Struct objects supported for \[field insertion\]"
                                        r", found: java.lang.String"):
        run_source(spark, ["foo"], {"transforms": "I", "transforms.I.type": T + "InsertField$Value",
                                    "transforms.I.static.field": "s"}, schemas=False)


def test_replace_field_exclude_include_renames(spark):
    schema = struct_schema(("foo", "int32", False), ("bar", "string", False),
                           ("c3", "boolean", True), name="com.example.Rec")
    record = (None, envelope(schema, {"foo": 22, "bar": "baz", "c3": True}), "t")
    renames = {"transforms": "RenameField", "transforms.RenameField.type": T + "ReplaceField$Value",
               "transforms.RenameField.renames": "foo:c1,bar:c2"}
    [(_k, value, _t)] = run_records(spark, [record], renames)
    assert json.loads(value) == {
        "schema": struct_schema(("c1", "int32", False), ("c2", "string", False),
                                ("c3", "boolean", True), name="com.example.Rec"),
        "payload": {"c1": 22, "c2": "baz", "c3": True}}

    exclude = {"transforms": "R", "transforms.R.type": T + "ReplaceField$Value",
               "transforms.R.exclude": "bar", "transforms.R.include": "foo,bar"}
    assert values(run_records(spark, [record], exclude))[0]["payload"] == {"foo": 22}
    schemaless = [(None, '{"foo":22,"bar":"baz","c3":true}', "t")]
    renames_exclude = {**renames, "transforms.RenameField.exclude": "c3"}
    assert values(run_records(spark, schemaless, renames_exclude, schemas=False)) == [
        {"c1": 22, "c2": "baz"}]
    with pytest.raises(ConnectConfigError, match="Invalid rename mapping: foo"):
        parse_transforms({**renames, "transforms.RenameField.renames": "foo"})


def test_mask_field_null_values_and_replacement(spark):
    schema = struct_schema(("id", "int32", False), ("ssn", "string", False),
                           ("active", "boolean", False), ("score", "float64", True),
                           ("tags", "array", True))
    schema["fields"][4] = {"type": "array", "items": {"type": "string", "optional": False},
                           "optional": True, "field": "tags"}
    record = (None, envelope(schema, {"id": 42, "ssn": "123-45-6789", "active": True,
                                      "score": 9.5, "tags": ["a"]}), "t")
    mask = {"transforms": "M", "transforms.M.type": T + "MaskField$Value",
            "transforms.M.fields": "id,ssn,active,score,tags"}
    assert values(run_records(spark, [record], mask))[0]["payload"] == {
        "id": 0, "ssn": "", "active": False, "score": 0.0, "tags": []}
    replace = {**mask, "transforms.M.fields": "ssn", "transforms.M.replacement": "***-**-****"}
    assert values(run_records(spark, [record], replace))[0]["payload"]["ssn"] == "***-**-****"
    numeric = {**mask, "transforms.M.fields": "id,score", "transforms.M.replacement": "100"}
    payload = values(run_records(spark, [record], numeric))[0]["payload"]
    assert (payload["id"], payload["score"]) == (100, 100.0)
    schemaless = [(None, '{"a":{"x":1},"b":[1,2],"c":"s","d":7}', "t")]
    masked = {**mask, "transforms.M.fields": "a,b,c,d,e"}  # e absent: put as null
    assert values(run_records(spark, schemaless, masked, schemas=False)) == [
        {"a": {}, "b": [], "c": "", "d": 0, "e": None}]
    with pytest.raises(Exception, match="Cannot mask value of type class java.lang.Boolean with "
                                        "custom replacement"):
        run_records(spark, [record], {**numeric, "transforms.M.fields": "active"})


def test_cast_fields_and_whole_value(spark):
    # Confluent's Cast reference: spec ID:string,score:float64
    schema = struct_schema(("ID", "int32", False), ("score", "int32", True))
    record = (None, envelope(schema, {"ID": 46920, "score": 4761}), "t")
    cast = {"transforms": "Cast", "transforms.Cast.type": T + "Cast$Value",
            "transforms.Cast.spec": "ID:string,score:float64"}
    assert values(run_records(spark, [record], cast)) == [{
        "schema": struct_schema(("ID", "string", False), ("score", "float64", True)),
        "payload": {"ID": "46920", "score": 4761.0}}]
    # the whole value: Java's Double.toString (the docs' "63521704.02" is illustrative)
    whole = {**cast, "transforms.Cast.spec": "string"}
    double = (None, envelope({"type": "float64", "optional": False}, 63521704.02), "t")
    assert values(run_records(spark, [double], whole))[0]["payload"] == "6.352170402E7"
    # Java's conversions: narrowing wraps, doubles truncate, parseBoolean, bytes to base64
    mixed = struct_schema(("big", "int64", False), ("d", "float64", False),
                          ("flag", "string", False), ("raw", "bytes", False), ("n", "int32", False))
    record = (None, envelope(mixed, {"big": 300, "d": -7.9, "flag": "TRUE",
                                     "raw": base64.b64encode(b"\x00\xffhi").decode(), "n": 0}), "t")
    spec = {**cast, "transforms.Cast.spec": "big:int8,d:int16,flag:boolean,raw:string,n:boolean"}
    assert values(run_records(spark, [record], spec))[0]["payload"] == {
        "big": 44, "d": -7, "flag": True, "raw": "AP9oaQ==", "n": False}
    # schemaless, whole key
    key_cast = {"transforms": "C", "transforms.C.type": T + "Cast$Key",
                "transforms.C.spec": "int32"}
    assert run_records(spark, [("12", '"v"', "t")], key_cast, schemas=False) == [
        ("12", '"v"', "t")]
    assert run_records(spark, [('"12"', '"v"', "t")], key_cast, schemas=False) == [
        ("12", '"v"', "t")]
    with pytest.raises(ConnectConfigError, match="does not support casting to BYTES"):
        parse_transforms({**cast, "transforms.Cast.spec": "bytes"})


def test_regex_and_timestamp_routers(spark):
    regex = {"transforms": "dropPrefix", "transforms.dropPrefix.type": T + "RegexRouter",
             "transforms.dropPrefix.regex": "soe-(.*)", "transforms.dropPrefix.replacement": "$1"}
    assert [t for _k, _v, t in run_source(spark, ["x"], regex, topic="soe-Order")] == ["Order"]
    assert [t for _k, _v, t in run_source(spark, ["x"], regex, topic="Order-soe-x")] == [
        "Order-soe-x"]  # the whole name must match
    prefix = {**regex, "transforms.dropPrefix.regex": ".*",
              "transforms.dropPrefix.replacement": "prefix_$0"}
    assert [t for _k, _v, t in run_source(spark, ["x"], prefix, topic="a")] == ["prefix_a"]

    router = {"transforms": "TR", "transforms.TR.type": T + "TimestampRouter"}
    assert [t for _k, _v, t in run_source(spark, ["x"], router)] == ["connect-test-20240102"]
    custom = {**router, "transforms.TR.topic.format": "${timestamp}/${topic}",
              "transforms.TR.timestamp.format": "yyyy-MM-dd'T'HH"}
    assert [t for _k, _v, t in run_source(spark, ["x"], custom)] == ["2024-01-02T03/connect-test"]


def test_filter_with_predicates_kafka_docs_example(spark):
    # docs/connect.html "Predicates": drop topic foo; ExtractField$Key except on topic bar
    props = {"transforms": "Filter,Extract",
             "transforms.Filter.type": T + "Filter", "transforms.Filter.predicate": "IsFoo",
             "transforms.Extract.type": T + "ExtractField$Key",
             "transforms.Extract.field": "other_field",
             "transforms.Extract.predicate": "IsBar", "transforms.Extract.negate": "true",
             "predicates": "IsFoo,IsBar",
             "predicates.IsFoo.type": P + "TopicNameMatches", "predicates.IsFoo.pattern": "foo",
             "predicates.IsBar.type": P + "TopicNameMatches", "predicates.IsBar.pattern": "bar"}
    key = '{"other_field":"k"}'
    records = [(key, '"v1"', "foo"), (key, '"v2"', "bar"), (key, '"v3"', "baz")]
    assert run_records(spark, records, props, schemas=False) == [
        ('{"other_field":"k"}', '"v2"', "bar"), ('"k"', '"v3"', "baz")]

    tombstones = {"transforms": "F", "transforms.F.type": T + "Filter",
                  "transforms.F.predicate": "T", "predicates": "T",
                  "predicates.T.type": P + "RecordIsTombstone"}
    assert run_records(spark, [(None, None, "t"), (None, '"x"', "t")], tombstones,
                       schemas=False) == [(None, '"x"', "t")]
    header = {"transforms": "F", "transforms.F.type": T + "Filter", "transforms.F.predicate": "H",
              "transforms.F.negate": "true", "predicates": "H",
              "predicates.H.type": P + "HasHeaderKey", "predicates.H.name": "keep"}
    records = [(None, '"a"', "t", [("keep", b"1")]), (None, '"b"', "t", [("other", b"1")]),
               (None, '"c"', "t")]
    assert run_records(spark, records, header, schemas=False) == [(None, '"a"', "t")]


def test_predicate_splits_records_whose_schema_changes(spark):
    props = {"transforms": "Hoist", "transforms.Hoist.type": T + "HoistField$Value",
             "transforms.Hoist.field": "line", "transforms.Hoist.predicate": "IsOrders",
             "predicates": "IsOrders", "predicates.IsOrders.type": P + "TopicNameMatches",
             "predicates.IsOrders.pattern": "orders.*"}
    records = [(None, '"a"', "orders-eu"), (None, '"b"', "audit")]
    assert run_records(spark, records, props, schemas=False) == [
        (None, '"b"', "audit"), (None, '{"line":"a"}', "orders-eu")]


def test_extract_field_and_value_to_key(spark):
    schema = struct_schema(("id", "int64", False), ("name", "string", True))
    record = (None, envelope(schema, {"id": 42, "name": "foo"}), "t")
    extract = {"transforms": "E", "transforms.E.type": T + "ExtractField$Value",
               "transforms.E.field": "id"}
    assert values(run_records(spark, [record], extract)) == [
        {"schema": {"type": "int64", "optional": False}, "payload": 42}]
    # ValueToKey then ExtractField$Key: the usual way to key records by a value field
    to_key = {"transforms": "createKey,extractInt",
              "transforms.createKey.type": T + "ValueToKey",
              "transforms.createKey.fields": "id",
              "transforms.extractInt.type": T + "ExtractField$Key",
              "transforms.extractInt.field": "id"}
    [(key, value, _t)] = run_records(spark, [record], to_key)
    assert json.loads(key) == {"schema": {"type": "int64", "optional": False}, "payload": 42}
    assert json.loads(value)["payload"] == {"id": 42, "name": "foo"}
    struct_key = {"transforms": "K", "transforms.K.type": T + "ValueToKey",
                  "transforms.K.fields": "name,id"}
    [(key, _v, _t)] = run_records(spark, [record], struct_key)
    assert json.loads(key) == {"schema": struct_schema(("name", "string", True),
                                                       ("id", "int64", False)),
                               "payload": {"name": "foo", "id": 42}}
    nested = (None, '{"a":{"b":{"c":7}}}', "t")
    v2 = {**extract, "transforms.E.field": "a.b.c", "transforms.E.field.syntax.version": "V2"}
    assert run_records(spark, [nested], v2, schemas=False) == [(None, "7", "t")]


def test_transform_config_errors_use_kafkas_words():
    with pytest.raises(ConnectConfigError, match="Class org.example.Nope could not be found"):
        parse_transforms({"transforms": "x", "transforms.x.type": "org.example.Nope"})
    with pytest.raises(ConnectConfigError, match='"transforms.x.type"'):
        parse_transforms({"transforms": "x"})
    with pytest.raises(ConnectConfigError, match="transforms.x.fields"):
        parse_transforms({"transforms": "x", "transforms.x.type": T + "MaskField$Value"})
    with pytest.raises(ConnectConfigError, match="predicate"):
        parse_transforms({"transforms": "x", "transforms.x.type": T + "Filter",
                          "transforms.x.predicate": "missing"})
