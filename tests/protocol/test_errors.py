"""The error-code table and the protocol exception hierarchy."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import (
    CorruptRecordError,
    DecodeError,
    ErrorCode,
    FrameTooLargeError,
    KafkaError,
    ProtocolError,
    UnsupportedVersionError,
)


def test_codes_are_unique_and_contiguous_through_kafka_3_8() -> None:
    codes = [member.value for member in ErrorCode]
    assert len(codes) == len(set(codes))
    # Kafka 3.8 defines every code from -1 to 120 (TRANSACTION_ABORTABLE) without gaps.
    assert set(range(-1, 121)) <= set(codes)
    assert len(ErrorCode.__members__) == len(codes)  # no aliases


@pytest.mark.parametrize(
    ("code", "name", "retriable"),
    [
        (-1, "UNKNOWN_SERVER_ERROR", False),
        (0, "NONE", False),
        (1, "OFFSET_OUT_OF_RANGE", False),
        (2, "CORRUPT_MESSAGE", True),
        (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
        (5, "LEADER_NOT_AVAILABLE", True),
        (6, "NOT_LEADER_OR_FOLLOWER", True),
        (7, "REQUEST_TIMED_OUT", True),
        (8, "BROKER_NOT_AVAILABLE", False),
        (9, "REPLICA_NOT_AVAILABLE", True),
        (10, "MESSAGE_TOO_LARGE", False),
        (14, "COORDINATOR_LOAD_IN_PROGRESS", True),
        (15, "COORDINATOR_NOT_AVAILABLE", True),
        (16, "NOT_COORDINATOR", True),
        (19, "NOT_ENOUGH_REPLICAS", True),
        (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
        (22, "ILLEGAL_GENERATION", False),
        (25, "UNKNOWN_MEMBER_ID", False),
        (27, "REBALANCE_IN_PROGRESS", False),
        (29, "TOPIC_AUTHORIZATION_FAILED", False),
        (35, "UNSUPPORTED_VERSION", False),
        (36, "TOPIC_ALREADY_EXISTS", False),
        (41, "NOT_CONTROLLER", True),
        (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
        (47, "INVALID_PRODUCER_EPOCH", False),
        (51, "CONCURRENT_TRANSACTIONS", True),
        (56, "KAFKA_STORAGE_ERROR", True),
        (58, "SASL_AUTHENTICATION_FAILED", False),
        (59, "UNKNOWN_PRODUCER_ID", False),
        (70, "FETCH_SESSION_ID_NOT_FOUND", True),
        (74, "FENCED_LEADER_EPOCH", True),
        (75, "UNKNOWN_LEADER_EPOCH", True),
        (76, "UNSUPPORTED_COMPRESSION_TYPE", False),
        (78, "OFFSET_NOT_AVAILABLE", True),
        (79, "MEMBER_ID_REQUIRED", False),
        (87, "INVALID_RECORD", False),
        (88, "UNSTABLE_OFFSET_COMMIT", True),
        (89, "THROTTLING_QUOTA_EXCEEDED", True),
        (90, "PRODUCER_FENCED", False),
        (100, "UNKNOWN_TOPIC_ID", True),
        (103, "INCONSISTENT_TOPIC_ID", True),
        (106, "FETCH_SESSION_TOPIC_ID_ERROR", True),
        (110, "FENCED_MEMBER_EPOCH", False),
        (113, "STALE_MEMBER_EPOCH", False),
        (119, "INVALID_REGISTRATION", False),
        (120, "TRANSACTION_ABORTABLE", False),
    ],
)
def test_known_codes(code: int, name: str, retriable: bool) -> None:
    member = ErrorCode(code)
    assert member.name == name
    assert member.retriable is retriable
    assert ErrorCode[name] == code
    assert ErrorCode.from_code(code) is member


def test_every_error_has_a_message_except_none() -> None:
    assert ErrorCode.NONE.message == ""
    for member in ErrorCode:
        if member is not ErrorCode.NONE:
            assert member.message and member.message.endswith("."), member


def test_from_code_maps_unknown_codes_without_raising() -> None:
    for unknown in (-2, 999, 32767, -32768):
        assert ErrorCode.from_code(unknown) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_error_code_is_an_int_on_the_wire() -> None:
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert int(ErrorCode.INVALID_RECORD) + 1 == 88
    assert ErrorCode.UNSUPPORTED_VERSION.code == 35


def test_kafka_error_carries_code_and_retriable() -> None:
    error = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert error.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert error.retriable
    assert error.message == ErrorCode.NOT_LEADER_OR_FOLLOWER.message
    assert "NOT_LEADER_OR_FOLLOWER" in str(error)

    detailed = KafkaError(87, "record 3 has no key")
    assert detailed.code is ErrorCode.INVALID_RECORD
    assert not detailed.retriable
    assert detailed.message == "record 3 has no key"
    assert "record 3 has no key" in str(detailed)

    assert KafkaError(12345).code is ErrorCode.UNKNOWN_SERVER_ERROR


def test_exception_hierarchy() -> None:
    assert issubclass(DecodeError, ProtocolError)
    assert issubclass(CorruptRecordError, DecodeError)
    assert issubclass(UnsupportedVersionError, ProtocolError)
    assert issubclass(FrameTooLargeError, ProtocolError)
    error = UnsupportedVersionError("ApiVersions v99", header=("header",))
    assert error.header == ("header",)
    assert UnsupportedVersionError("x").header is None
