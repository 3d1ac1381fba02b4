"""Round trips of every generated message at every valid version, driven by the JSON specs.

The value builder below reads the specs itself (independently of the generator): for each
version it sets every field present in that version to a non-default value, encodes, decodes
and compares. Byte-exact tests check a few messages against encodings worked out by hand from
the spec.
"""

from __future__ import annotations

import json
import keyword
import struct
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol import framing
from odradek.protocol.errors import DecodeError, UnsupportedVersionError
from odradek.protocol.messages import (
    ALL_MESSAGES,
    API_BY_KEY,
    API_BY_NAME,
    CONSUMER_OFFSETS_KEY_BY_VERSION,
    MESSAGE_BY_NAME,
    METADATA_RECORD_BY_TYPE,
    ZERO_UUID,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerProtocolSubscription,
    FetchResponse,
    GroupMetadataKey,
    GroupMetadataValue,
    Message,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionRecord,
    ProduceRequest,
    TopicRecord,
    TransactionLogKey,
    TransactionLogValue,
    ZkMigrationStateRecord,
    decode_consumer_offsets_key,
    decode_consumer_offsets_value,
    decode_metadata_record,
    decode_versioned,
    encode_metadata_record,
    encode_versioned,
    request_header_version,
    response_header_version,
)

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "tools" / "kafka-protocol"  # a copy of ../shared/kafka-protocol-4.0 (Kafka 4.0)
GENERATED = REPO / "src" / "odradek" / "protocol" / "messages" / "generated"
# The spec directories the generator reads (the share coordinator's records and the
# quorum-state file's schema are not generated).
SPEC_FILES = sorted(SPECS.glob("messages/*.json")) + [
    path for sub in ("consumer_offsets", "transaction_state", "cluster_metadata")
    for path in sorted(SPECS.glob(f"records/{sub}/*.json"))]
# Specs of APIs Kafka removed (validVersions "none") generate nothing.
SPECS_BY_NAME = {spec["name"]: spec for spec in (json.loads(p.read_text()) for p in SPEC_FILES)
                 if spec["validVersions"] != "none"}

UNKNOWN_TAGS = {100: b"\x01\x02\x03", 7000: b""}


# ------------------------------------------------------------------------------------------------
# reading the specs (independently of tools/gen_protocol.py)


def in_versions(text: str | None, version: int) -> bool:
    if text is None or text == "none":
        return False
    if text.endswith("+"):
        return version >= int(text[:-1])
    if "-" in text:
        low, high = text.split("-")
        return int(low) <= version <= int(high)
    return version == int(text)


def field_versions(f: dict) -> str:
    """A field's versions; a tagged field may give only its taggedVersions."""
    return f.get("versions", f.get("taggedVersions"))


def version_range(text: str) -> range:
    if "-" in text:
        low, high = text.split("-")
        return range(int(low), int(high) + 1)
    return range(int(text), int(text) + 1)


def attr(name: str) -> str:
    out, previous_capital = [], True
    for char in name:
        if char.isupper():
            if not previous_capital:
                out.append("_")
            out.append(char.lower())
            previous_capital = True
        else:
            out.append(char)
            previous_capital = False
    result = "".join(out)
    return result + "_" if keyword.iskeyword(result) else result


def spec_default(f: dict) -> Any:
    """The default a field must have, per the spec's (inconsistent) `default` spellings."""
    ftype, raw = f["type"], f.get("default")
    if ftype.startswith("[]"):
        return None if "default" in f and raw in (None, "null") else []
    if ftype in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        if raw is None:
            return 0
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if ftype == "float64":
        return float(raw or 0)
    if ftype == "bool":
        return raw if isinstance(raw, bool) else str(raw).lower() == "true"
    if ftype == "uuid":
        return ZERO_UUID
    if ftype == "string":
        if "default" in f and raw in (None, "null"):
            return None
        return raw or ""
    if ftype == "bytes":
        return None if raw == "null" else b""
    if ftype == "records":
        return None
    return None if "default" in f and raw in (None, "null") else "STRUCT"


class Builder:
    """Builds instances with a non-default value in every field present at `version`."""

    def __init__(self, spec: dict, version: int, nulls: bool, unknown_tags: bool) -> None:
        self.spec = spec
        self.cls = MESSAGE_BY_NAME[spec["name"]]
        self.version = version
        self.flexible = in_versions(spec["flexibleVersions"], version)
        self.nulls = nulls
        self.unknown_tags = unknown_tags and self.flexible
        self.common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
        self.counter = 0

    def build(self) -> Message:
        return self.cls(**self.kwargs(self.spec["fields"]))

    def kwargs(self, fields: list[dict]) -> dict[str, Any]:
        values = {
            attr(f["name"]): self.value(f)
            for f in fields
            if in_versions(field_versions(f), self.version)
        }
        if self.unknown_tags:
            values["unknown_tagged_fields"] = dict(UNKNOWN_TAGS)
        return values

    def struct_fields(self, f: dict, type_name: str) -> list[dict]:
        return f.get("fields") or self.common[type_name]

    def value(self, f: dict) -> Any:
        self.counter += 1
        ftype = f["type"]
        if self.nulls and in_versions(f.get("nullableVersions"), self.version):
            return None
        if ftype.startswith("[]"):
            element = ftype[2:]
            return [self.element(f, element, index) for index in range(2)]
        return self.scalar(f, ftype, spec_default(f))

    def element(self, f: dict, element: str, index: int) -> Any:
        if element[0].isupper():
            struct_cls = getattr(self.cls, element)
            return struct_cls(**self.kwargs(self.struct_fields(f, element)))
        return self.scalar({"name": f"{f['name']}{index}", "type": element}, element, None)

    def scalar(self, f: dict, ftype: str, default: Any) -> Any:
        n = self.counter
        candidates: dict[str, list[Any]] = {
            "int8": [-3, 7, 100],
            "int16": [-300, 1234, 32767],
            "int32": [-100000, 123456789, -(2**31)],
            "int64": [-(2**40), 2**50 + 3, 2**63 - 1],
            "uint16": [65000, 1, 300],
            "uint32": [4_000_000_000, 5, 70000],
            "float64": [2.5, -1e300, 0.1],
        }
        if ftype in candidates:
            options = [value for value in candidates[ftype] if value != default]
            return options[n % len(options)]
        if ftype == "bool":
            return not default
        if ftype == "uuid":
            return uuid.UUID(int=(n * 0x9E3779B97F4A7C15 + 1) % 2**128)
        if ftype == "string":
            return f"{f['name']}-{n}-é"
        if ftype == "bytes":
            return b"\x00\xffbytes" + bytes([n % 256])
        if ftype == "records":
            return b"RECORDS" * (n % 3 + 1)
        struct_cls = getattr(self.cls, ftype)
        return struct_cls(**self.kwargs(self.struct_fields(f, ftype)))


def message_versions() -> list[tuple[str, int]]:
    return [
        (name, version)
        for name, spec in SPECS_BY_NAME.items()
        for version in version_range(spec["validVersions"])
    ]


MESSAGE_VERSIONS = message_versions()


def roundtrip(message: Message, version: int) -> tuple[Message, bytes]:
    encoded = message.encode(version)
    decoded = type(message).decode(encoded, version)
    assert decoded == message, f"{type(message).__name__} v{version}"
    assert decoded.encode(version) == encoded
    return decoded, encoded


# ------------------------------------------------------------------------------------------------
# round trips over every message and version


def test_every_spec_has_a_class() -> None:
    assert len(SPEC_FILES) == 246
    assert set(SPECS_BY_NAME) == {cls.NAME for cls in ALL_MESSAGES}
    # Kafka 4.0 removed LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown (4-7)
    # and added the share-group and dynamic-quorum APIs (76-87).
    assert len(API_BY_KEY) == 84
    assert not {4, 5, 6, 7} & set(API_BY_KEY) and {80, 81, 82} <= set(API_BY_KEY)


@pytest.mark.parametrize(("name", "version"), MESSAGE_VERSIONS)
def test_roundtrip_full_values(name: str, version: int) -> None:
    spec = SPECS_BY_NAME[name]
    message = Builder(spec, version, nulls=False, unknown_tags=True).build()
    decoded, _ = roundtrip(message, version)
    if in_versions(spec["flexibleVersions"], version):
        assert decoded.unknown_tagged_fields == UNKNOWN_TAGS


@pytest.mark.parametrize(("name", "version"), MESSAGE_VERSIONS)
def test_roundtrip_nulls(name: str, version: int) -> None:
    message = Builder(SPECS_BY_NAME[name], version, nulls=True, unknown_tags=False).build()
    roundtrip(message, version)


@pytest.mark.parametrize(("name", "version"), MESSAGE_VERSIONS)
def test_roundtrip_defaults(name: str, version: int) -> None:
    cls = MESSAGE_BY_NAME[name]
    _, encoded = roundtrip(cls(), version)
    if in_versions(SPECS_BY_NAME[name]["flexibleVersions"], version):
        assert encoded.endswith(b"\x00")  # empty tagged-field section


@pytest.mark.parametrize("name", sorted(SPECS_BY_NAME))
def test_constructor_defaults_follow_the_spec(name: str) -> None:
    spec = SPECS_BY_NAME[name]
    cls = MESSAGE_BY_NAME[name]
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}

    def check(instance: Any, fields: list[dict]) -> None:
        for f in fields:
            value = getattr(instance, attr(f["name"]))
            expected = spec_default(f)
            if expected == "STRUCT":
                type_name = f["type"]
                assert type(value) is getattr(cls, type_name)
                check(value, f.get("fields") or common[type_name])
            else:
                assert value == expected, f"{name}.{f['name']}"
                assert type(value) is type(expected), f"{name}.{f['name']}"
        assert instance.unknown_tagged_fields is None

    check(cls(), spec["fields"])
    # fresh mutable defaults per instance
    first, second = cls(), cls()
    for f in spec["fields"]:
        if spec_default(f) == [] or spec_default(f) == "STRUCT":
            assert getattr(first, attr(f["name"])) is not getattr(second, attr(f["name"]))


@pytest.mark.parametrize(("name", "version"), MESSAGE_VERSIONS)
def test_absent_fields_are_dropped_or_refused(name: str, version: int) -> None:
    spec = SPECS_BY_NAME[name]
    for f in spec["fields"]:
        if in_versions(field_versions(f), version):
            continue
        present = [v for v in version_range(spec["validVersions"]) if in_versions(field_versions(f), v)]
        value = Builder(spec, present[0], False, False).value(f)
        message = MESSAGE_BY_NAME[name](**{attr(f["name"]): value})
        if f.get("ignorable", False):
            decoded = type(message).decode(message.encode(version), version)
            assert decoded == MESSAGE_BY_NAME[name](), f"{f['name']} not dropped"
        else:
            with pytest.raises(ValueError, match=attr(f["name"])):
                message.encode(version)


@pytest.mark.parametrize("cls", ALL_MESSAGES, ids=lambda cls: cls.NAME)
def test_versions_outside_the_valid_range_are_refused(cls: type[Message]) -> None:
    for version in (cls.MIN_VERSION - 1, cls.MAX_VERSION + 1):
        with pytest.raises(UnsupportedVersionError):
            cls().encode(version)
        with pytest.raises(UnsupportedVersionError):
            cls.decode(b"", version)


# ------------------------------------------------------------------------------------------------
# the generated API contract


def test_class_and_attribute_names() -> None:
    response = MetadataResponse(throttle_time_ms=5, cluster_id="c")
    topic = MetadataResponse.MetadataResponseTopic(topic_id=uuid.uuid4(), is_internal=True)
    assert MetadataResponse.MetadataResponseTopic.__qualname__ == (
        "MetadataResponse.MetadataResponseTopic"
    )
    assert ProduceRequest.TopicProduceData and ProduceRequest.PartitionProduceData
    assert topic.is_internal and response.throttle_time_ms == 5
    assert MetadataRequest().allow_auto_topic_creation is True
    assert hasattr(MESSAGE_BY_NAME["InitProducerIdResponse"](), "producer_id")
    assert hasattr(MESSAGE_BY_NAME["BrokerRegistrationRequest"](), "is_migrating_zk_broker")
    assert hasattr(MESSAGE_BY_NAME["ControllerRegistrationRequest"](), "zk_migration_ready")
    assert ZkMigrationStateRecord.NAME == "ZkMigrationStateRecord"
    # commonStructs and structs used by several fields are one nested class each
    cg = MESSAGE_BY_NAME["ConsumerGroupDescribeResponse"]
    member = cg.Member()
    assert type(member.assignment) is type(member.target_assignment) is cg.Assignment
    # nullable struct with null default, non-nullable struct with a fresh instance
    assert MESSAGE_BY_NAME["DescribeTopicPartitionsResponse"]().next_cursor is None
    partition = FetchResponse.PartitionData()
    assert partition.diverging_epoch == FetchResponse.EpochEndOffset(epoch=-1, end_offset=-1)
    assert "MetadataResponseTopic(" in repr(topic)


def test_hex_and_numeric_defaults() -> None:
    fetch = MESSAGE_BY_NAME["FetchRequest"]()
    assert fetch.max_bytes == 0x7FFFFFFF
    assert fetch.replica_id == -1
    assert fetch.isolation_level == 0
    assert MESSAGE_BY_NAME["JoinGroupRequest"]().rebalance_timeout_ms == -1


def test_api_registry() -> None:
    produce = API_BY_KEY[0]
    assert produce is API_BY_NAME["Produce"]
    assert produce.request is ProduceRequest
    assert (produce.min_version, produce.max_version, produce.flexible_min) == (3, 12, 9)
    assert produce.listeners == frozenset({"broker"})
    assert not produce.deprecated_versions
    sasl = API_BY_NAME["SaslHandshake"]
    assert sasl.flexible_min is None and not sasl.is_flexible(1)
    assert API_BY_KEY[52].listeners == frozenset({"controller"})
    assert len(API_BY_NAME) == 84


def test_header_versions() -> None:
    assert request_header_version(0, 8) == 1
    assert request_header_version(0, 9) == 2
    assert request_header_version(80, 0) == 2  # AddRaftVoter: flexible from v0
    assert request_header_version(17, 1) == 1  # never flexible
    assert request_header_version(18, 99) == 2  # too-new ApiVersions still parses
    for version in range(4):
        assert response_header_version(18, version) == 0
    assert response_header_version(3, 8) == 0
    assert response_header_version(3, 9) == 1
    with pytest.raises(UnsupportedVersionError):
        request_header_version(1000, 0)


# ------------------------------------------------------------------------------------------------
# null and empty edge cases


def test_null_and_empty_strings_differ() -> None:
    for version in (8, 9):  # classic and compact
        for cluster_id in (None, ""):
            decoded, _ = roundtrip(MetadataResponse(cluster_id=cluster_id), version)
            assert decoded.cluster_id == cluster_id
            assert type(decoded.cluster_id) is type(cluster_id)


def test_compact_zero_length_is_null_and_one_is_empty() -> None:
    # MetadataResponse v9: throttle, brokers (compact array), cluster_id (compact string), ...
    body = bytes.fromhex("000000000100ffffffff018000000000")
    decoded = MetadataResponse.decode(body, 9)
    assert decoded.cluster_id is None and decoded.brokers == [] and decoded.topics == []
    body = bytes.fromhex("000000000101ffffffff018000000000")
    assert MetadataResponse.decode(body, 9).cluster_id == ""
    # a null non-nullable array is an error
    with pytest.raises(DecodeError):
        MetadataResponse.decode(bytes.fromhex("000000000000ffffffff018000000000"), 9)


def test_null_array_only_where_nullable() -> None:
    for version in (1, 9):
        decoded, _ = roundtrip(MetadataRequest(topics=None), version)
        assert decoded.topics is None
        decoded, _ = roundtrip(MetadataRequest(topics=[]), version)
        assert decoded.topics == []
    with pytest.raises(ValueError):
        MetadataRequest(topics=None).encode(0)  # v0 topics are not nullable
    with pytest.raises(DecodeError):
        MetadataRequest.decode(b"\xff\xff\xff\xff", 0)


def test_null_records_and_bytes() -> None:
    partition = ProduceRequest.PartitionProduceData(index=1, records=None)
    message = ProduceRequest(
        topic_data=[ProduceRequest.TopicProduceData(partition_data=[partition])]
    )
    for version in (3, 9):
        decoded, _ = roundtrip(message, version)
        assert decoded.topic_data[0].partition_data[0].records is None


def test_trailing_bytes_are_an_error_for_decode() -> None:
    with pytest.raises(DecodeError, match="trailing"):
        ApiVersionsRequest.decode(ApiVersionsRequest().encode(3) + b"\x00", 3)


def test_unknown_tagged_fields_preserved_in_nested_structs() -> None:
    topic = MetadataResponse.MetadataResponseTopic(name="t", unknown_tagged_fields={5: b"abc"})
    message = MetadataResponse(topics=[topic], unknown_tagged_fields={1: b"", 300: b"\xff"})
    decoded, _ = roundtrip(message, 12)
    assert decoded.topics[0].unknown_tagged_fields == {5: b"abc"}
    assert decoded.unknown_tagged_fields == {1: b"", 300: b"\xff"}
    # dropped silently where the version has no tagged fields
    assert MetadataResponse.decode(message.encode(8), 8).unknown_tagged_fields is None


def test_known_and_unknown_tags_are_merged_in_ascending_order() -> None:
    response = ApiVersionsResponse(
        finalized_features_epoch=5, zk_migration_ready=True, unknown_tagged_fields={9: b"z", 4: b""}
    )
    encoded = response.encode(3)
    # error, api_keys, throttle, then 4 tagged fields: 1 (epoch), 3 (bool), 4 and 9 (unknown)
    tail = encoded[2 + 1 + 4 :]
    assert tail == bytes.fromhex("0401080000000000000005030101040009017a")
    decoded = ApiVersionsResponse.decode(encoded, 3)
    assert decoded.finalized_features_epoch == 5 and decoded.zk_migration_ready is True
    assert decoded.unknown_tagged_fields == {4: b"", 9: b"z"}
    # an unknown entry that reuses a known tag of this version is ignored
    clash = ApiVersionsResponse(unknown_tagged_fields={1: b"\x00" * 8})
    assert ApiVersionsResponse.decode(clash.encode(3), 3).unknown_tagged_fields is None


def test_tagged_field_with_wrong_size_is_an_error() -> None:
    good = ApiVersionsResponse(finalized_features_epoch=5).encode(3)
    bad = good.replace(bytes.fromhex("0108"), bytes.fromhex("0109")) + b"\x00"
    with pytest.raises(DecodeError):
        ApiVersionsResponse.decode(bad, 3)


def test_nullable_struct_field_markers() -> None:
    cls = MESSAGE_BY_NAME["DescribeTopicPartitionsResponse"]
    null_body = cls().encode(0)
    assert null_body == bytes.fromhex("0000000001ff00")
    cursor = cls(next_cursor=cls.Cursor(topic_name="t", partition_index=3))
    encoded = cursor.encode(0)
    assert encoded == bytes.fromhex("0000000001010274000000030000")
    assert cls.decode(encoded, 0) == cursor
    # tagged nullable struct: payload is an unsigned varint 1 then the struct
    value_cls = MESSAGE_BY_NAME["ConsumerGroupMemberMetadataValue"]
    classic = value_cls.ClassicMemberMetadata(session_timeout_ms=1)
    encoded = value_cls(classic_member_metadata=classic).encode(0)
    assert encoded.endswith(bytes.fromhex("01000701000000010100"))
    assert value_cls.decode(encoded, 0).classic_member_metadata == classic


def test_out_of_range_values_raise_value_error() -> None:
    with pytest.raises(ValueError):
        MetadataResponse(throttle_time_ms=2**31).encode(3)
    with pytest.raises(ValueError):
        MetadataResponse(topics=[MetadataResponse.MetadataResponseTopic(name="x" * 40000)]).encode(
            1
        )
    with pytest.raises(ValueError):
        MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(host=None)]).encode(1)


# ------------------------------------------------------------------------------------------------
# byte-exact encodings checked by hand against the specs


def test_api_versions_request_v3_bytes() -> None:
    request = ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7")
    # compact strings: varint length+1, then UTF-8; then an empty tagged-field section
    expected = b"\x05kcat" + b"\x041.7" + b"\x00"
    assert request.encode(3) == expected
    assert ApiVersionsRequest.decode(expected, 3) == request
    assert ApiVersionsRequest(client_software_name="ignored").encode(2) == b""  # ignorable


def test_metadata_request_v12_bytes() -> None:
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    request = MetadataRequest(
        topics=[
            MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name="orders"),
            MetadataRequest.MetadataRequestTopic(name=None),
        ],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    expected = (
        b"\x03"  # compact array of 2
        + topic_id.bytes
        + b"\x07orders"
        + b"\x00"  # uuid, compact nullable string, tags
        + bytes(16)
        + b"\x00"
        + b"\x00"  # zero uuid, null name, tags
        + b"\x00"  # allow_auto_topic_creation
        + b"\x01"  # include_topic_authorized_operations (IncludeCluster... is 8-10 only)
        + b"\x00"  # tags
    )
    assert request.encode(12) == expected
    assert MetadataRequest.decode(expected, 12) == request


def test_produce_request_v9_records_are_a_slice_of_the_frame() -> None:
    records = bytes(range(256)) * 80  # larger than the inline limit: sent as its own chunk
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.PartitionProduceData(index=2, records=records)],
            )
        ],
    )
    frame = framing.encode_request(0, 9, 42, "client", request)
    body_start = 4 + 2 + 2 + 4 + 2 + len("client") + 1  # size, header v2, empty tags
    expected_body = (
        b"\x00"  # null transactional id
        + struct.pack(">hi", -1, 30000)
        + b"\x02"
        + b"\x02t"  # one topic, name "t"
        + b"\x02"
        + struct.pack(">i", 2)  # one partition, index 2
        + b"\x81\xa0\x01"  # compact records length 20480+1 = 0x5001 as a varint
        + records
        + b"\x00\x00\x00"  # partition, topic, request tagged fields
    )
    assert frame[body_start:] == expected_body
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    view = memoryview(frame)[4:]
    header, decoded = framing.decode_request(view)
    assert header.correlation_id == 42 and header.client_id == "client"
    decoded_records = decoded.topic_data[0].partition_data[0].records
    assert type(decoded_records) is memoryview and decoded_records.obj is frame
    assert decoded_records == records
    assert decoded == request


def test_api_versions_response_v3_uses_header_v0() -> None:
    response = ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)],
        throttle_time_ms=0,
    )
    frame = framing.encode_response(18, 3, 0x01020304, response)
    body = b"\x00\x00" + b"\x02" + struct.pack(">hhh", 18, 0, 3) + b"\x00" + bytes(4) + b"\x00"
    assert frame == struct.pack(">i", 4 + len(body)) + b"\x01\x02\x03\x04" + body
    assert framing.decode_response(frame[4:], 18, 3) == (0x01020304, response)


def test_consumer_protocol_subscription_bytes() -> None:
    subscription = ConsumerProtocolSubscription(topics=["a", "bc"], user_data=None)
    encoded = encode_versioned(subscription, 0)
    assert encoded == bytes.fromhex("00000000000200016100026263ffffffff")
    assert decode_versioned(ConsumerProtocolSubscription, encoded) == (subscription, 0)


# ------------------------------------------------------------------------------------------------
# internal topics


def test_consumer_offsets_records() -> None:
    key = OffsetCommitKey(group="g", topic="t", partition=3)
    key_bytes = encode_versioned(key, 1)
    assert key_bytes == bytes.fromhex("000100016700017400000003")
    assert decode_consumer_offsets_key(key_bytes) == (key, 1)
    value = OffsetCommitValue(offset=10, leader_epoch=4, metadata="m", commit_timestamp=99)
    for version in range(5):
        value_bytes = encode_versioned(
            value
            if version >= 3
            else OffsetCommitValue(offset=10, metadata="m", commit_timestamp=99),
            version,
        )
        decoded, decoded_version = decode_consumer_offsets_value(value_bytes, 1)
        assert decoded_version == version and decoded.offset == 10
    assert decode_consumer_offsets_value(None, 1) is None
    group_key = encode_versioned(GroupMetadataKey(group="g"), 2)
    assert decode_consumer_offsets_key(group_key)[0] == GroupMetadataKey(group="g")
    group_value = GroupMetadataValue(protocol_type="consumer", generation=3, members=[])
    assert decode_consumer_offsets_value(encode_versioned(group_value, 3), 2) == (group_value, 3)
    assert CONSUMER_OFFSETS_KEY_BY_VERSION[0] is OffsetCommitKey
    assert set(CONSUMER_OFFSETS_KEY_BY_VERSION) == set(range(17))  # 4.0: up to the regex key
    with pytest.raises(DecodeError):
        decode_consumer_offsets_key(b"\x00\x63\x00")


def test_transaction_state_records() -> None:
    key = TransactionLogKey(transactional_id="tx")
    assert decode_versioned(TransactionLogKey, encode_versioned(key, 0)) == (key, 0)
    value = TransactionLogValue(
        producer_id=5, producer_epoch=1, transaction_timeout_ms=100, transaction_status=2
    )
    for version in (0, 1):
        assert decode_versioned(TransactionLogValue, encode_versioned(value, version)) == (
            value,
            version,
        )


def test_cluster_metadata_records() -> None:
    topic = TopicRecord(name="orders", topic_id=uuid.UUID(int=7))
    encoded = encode_metadata_record(topic, 0)
    assert encoded == b"\x01\x02\x00" + b"\x07orders" + uuid.UUID(int=7).bytes + b"\x00"
    assert decode_metadata_record(encoded) == (topic, 0)
    partition = PartitionRecord(
        partition_id=1,
        topic_id=uuid.UUID(int=7),
        replicas=[1, 2],
        isr=[1],
        leader=1,
        eligible_leader_replicas=[2],
    )
    for version in range(3):
        expected = (
            partition
            if version == 2
            else PartitionRecord(
                partition_id=1, topic_id=uuid.UUID(int=7), replicas=[1, 2], isr=[1], leader=1
            )
        )
        record, record_version = decode_metadata_record(encode_metadata_record(expected, version))
        assert record == expected and record_version == version
    assert (
        METADATA_RECORD_BY_TYPE[2] is TopicRecord
        and METADATA_RECORD_BY_TYPE[21] is ZkMigrationStateRecord
    )
    assert sorted(METADATA_RECORD_BY_TYPE) == sorted(set(range(29)) - {6, 13, 16})
    with pytest.raises(DecodeError):
        decode_metadata_record(b"\x01\x63\x00")
    with pytest.raises(TypeError):
        encode_metadata_record(OffsetCommitKey(), 0)


# ------------------------------------------------------------------------------------------------
# generator reproducibility


def test_generator_output_is_committed_and_reproducible(tmp_path: Path) -> None:
    for run in ("first", "second"):
        out = tmp_path / run
        subprocess.run(
            [
                sys.executable,
                str(REPO / "tools" / "gen_protocol.py"),
                "--specs",
                str(SPECS),
                "--out",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
    first = {p.name: p.read_bytes() for p in (tmp_path / "first").glob("*.py")}
    second = {p.name: p.read_bytes() for p in (tmp_path / "second").glob("*.py")}
    committed = {p.name: p.read_bytes() for p in GENERATED.glob("*.py")}
    assert first == second
    assert sorted(first) == sorted(committed)
    stale = [name for name in first if first[name] != committed[name]]
    assert not stale, f"generated files out of date, run `make generate`: {stale[:5]}"


# ------------------------------------------------------------------------------------------------
# interoperability: kafka-python (an independent implementation generated from the same kind of
# JSON specs) must read our bytes and write back exactly the same bytes


def kafka_python_messages() -> dict[str, Any]:
    import importlib

    from kafka.protocol.api_message import ApiMessage

    for package in ("admin", "consumer", "metadata", "producer", "sasl"):
        importlib.import_module(f"kafka.protocol.{package}")

    def subclasses(cls: type) -> Any:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    return {
        cls.name: cls
        for cls in subclasses(ApiMessage)
        if getattr(cls, "_class_version", 0) is None and getattr(cls, "_json", None)
    }


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_reads_and_rewrites_our_bytes() -> None:
    checked = 0
    for name, kafka_cls in sorted(kafka_python_messages().items()):
        if name not in SPECS_BY_NAME:
            continue
        for version in version_range(SPECS_BY_NAME[name]["validVersions"]):
            if version > kafka_cls.max_version:
                continue
            for nulls in (False, True):
                message = Builder(SPECS_BY_NAME[name], version, nulls, unknown_tags=False).build()
                if name == "ApiVersionsResponse":
                    message.error_code = 0  # kafka-python reads error responses as v0
                data = message.encode(version)
                theirs = kafka_cls.decode(data, version=version)
                theirs._header = None
                assert theirs.encode(version=version) == data, f"{name} v{version}"
                checked += 1
    assert checked >= 900  # Kafka 4.0 dropped the oldest versions: exactly 900 today


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_request_header_matches_ours() -> None:
    from kafka.protocol.metadata import MetadataRequest as TheirMetadataRequest

    for version in (1, 8, 9, 12):
        theirs = TheirMetadataRequest(topics=None, version=version)
        theirs.with_header(correlation_id=17, client_id="interop")
        ours = framing.encode_request(3, version, 17, "interop", MetadataRequest(topics=None))
        assert theirs.encode(version=version, header=True, framed=True) == ours
