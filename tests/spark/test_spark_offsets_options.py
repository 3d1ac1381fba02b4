"""Offset JSON, range splitting, rate limiting and option parsing (no Spark, no broker)."""

from __future__ import annotations

import json

import pytest

from odradek.client.types import TopicPartition
from odradek.spark.offsets import (
    OffsetRange,
    assignment_from_json,
    offsets_from_dict,
    offsets_from_json,
    offsets_to_dict,
    offsets_to_json,
    rate_limit,
    split_ranges,
)
from odradek.spark.options import (
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    SpecificOffsets,
    SpecificTimestamps,
    parse_sink_options,
    parse_source_options,
)

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_offset_json_round_trip_is_sorted():
    offsets = {TopicPartition("b", 0): 5, TopicPartition("a", 10): -2, TopicPartition("a", 2): 7}
    assert offsets_to_json(offsets) == '{"a":{"2":7,"10":-2},"b":{"0":5}}'
    assert offsets_from_json(offsets_to_json(offsets)) == offsets
    assert offsets_from_dict(json.loads(json.dumps(offsets_to_dict(offsets)))) == offsets


@pytest.mark.parametrize("text", ['{"a": 1}', '{"a": {"0": "x"}}', "[1]", "nope"])
def test_bad_offset_json_is_rejected(text):
    with pytest.raises(ValueError):
        offsets_from_json(text)


def test_assignment_json():
    assert assignment_from_json('{"a":[0,1],"b":[0]}') == [A0, A1, B0]
    with pytest.raises(ValueError, match="Expected e.g."):
        assignment_from_json('{"a": 3}')


def test_split_ranges_drops_empty_and_keeps_enough():
    ranges = [OffsetRange(A0, 0, 10), OffsetRange(A1, 5, 5), OffsetRange(B0, 3, 8)]
    assert split_ranges(ranges) == [OffsetRange(A0, 0, 10), OffsetRange(B0, 3, 8)]
    assert split_ranges(ranges, min_partitions=2) == [OffsetRange(A0, 0, 10),
                                                      OffsetRange(B0, 3, 8)]


def test_split_ranges_by_min_partitions_is_proportional():
    # Spark's KafkaOffsetRangeCalculator: ideal size 150/5 = 30; 100 -> 3 parts, 50 -> 2.
    ranges = [OffsetRange(A0, 0, 100), OffsetRange(B0, 100, 150)]
    pieces = split_ranges(ranges, min_partitions=5)
    assert pieces == [OffsetRange(A0, 0, 33), OffsetRange(A0, 33, 66), OffsetRange(A0, 66, 100),
                      OffsetRange(B0, 100, 125), OffsetRange(B0, 125, 150)]


def test_split_ranges_by_max_records():
    pieces = split_ranges([OffsetRange(A0, 0, 10)], max_records_per_partition=4)
    assert [p.size for p in pieces] == [3, 3, 4]
    assert pieces[0].from_offset == 0 and pieces[-1].until_offset == 10


def test_rate_limit_shares_in_proportion_without_starving():
    start = {A0: 0, A1: 100, B0: 50}
    end = {A0: 1000, A1: 101, B0: 50}
    limited = rate_limit(100, start, end)
    # A0 has 1000 of 1001 waiting: floor(99.9) = 99; A1 gets ceil(0.0999) = 1; B0 has nothing.
    assert limited == {A0: 99, A1: 101, B0: 50}
    assert rate_limit(5000, start, end) == end
    assert rate_limit(10, {A0: 0}, {A0: 0, A1: 7}) == {A0: 0, A1: 7}  # A1: unknown start


def test_source_options_defaults():
    streaming = parse_source_options({**BOOTSTRAP, "subscribe": "a, b,"}, streaming=True)
    assert streaming.subscription.topics == ("a", "b")
    assert streaming.starting == LatestOffsets() and streaming.ending is None
    assert streaming.fail_on_data_loss and not streaming.include_headers
    batch = parse_source_options({**BOOTSTRAP, "subscribe": "a"}, streaming=False)
    assert batch.starting == EarliestOffsets() and batch.ending == LatestOffsets()
    assert not batch.read_committed


def test_source_options_are_case_insensitive_and_typed():
    options = parse_source_options({
        **BOOTSTRAP, "ASSIGN": '{"a":[1]}', "StartingOffsets": '{"a":{"1":-2}}',
        "maxOffsetsPerTrigger": "500", "minPartitions": "4", "failOnDataLoss": "false",
        "includeHeaders": "TRUE", "kafka.isolation.level": "read_committed",
    }, streaming=True)
    assert options.subscription.partitions == (A1,)
    assert options.starting == SpecificOffsets({A1: -2})
    assert (options.max_offsets_per_trigger, options.min_partitions) == (500, 4)
    assert not options.fail_on_data_loss and options.include_headers and options.read_committed
    assert options.client == {"bootstrap.servers": "127.0.0.1:9092",
                              "isolation.level": "read_committed"}


def test_timestamp_options_take_precedence():
    options = parse_source_options({
        **BOOTSTRAP, "subscribe": "a", "startingOffsets": "earliest",
        "startingOffsetsByTimestamp": '{"a":{"0":1000}}'}, streaming=True)
    assert options.starting == SpecificTimestamps({A0: 1000})
    options = parse_source_options({
        **BOOTSTRAP, "subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":1000}}',
        "startingTimestamp": "2000", "endingTimestamp": "3000"}, streaming=False)
    assert (options.starting, options.ending) == (GlobalTimestamp(2000), GlobalTimestamp(3000))


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "a"}, True, "Option 'kafka.bootstrap.servers' must be specified"),
    ({**BOOTSTRAP}, True, "One of the following options must be specified"),
    ({**BOOTSTRAP, "subscribe": "a", "assign": '{"a":[0]}'}, True, "Only one of the following"),
    ({**BOOTSTRAP, "subscribe": " , "}, True, "No topics to subscribe to"),
    ({**BOOTSTRAP, "assign": "a"}, True, "No topicpartitions to assign"),
    ({**BOOTSTRAP, "subscribePattern": "  "}, True, "Pattern to subscribe is empty"),
    ({**BOOTSTRAP, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, True,
     "'auto.offset.reset' is not supported"),
    ({**BOOTSTRAP, "subscribe": "a", "kafka.value.deserializer": "x"}, True,
     "'value.deserializer' is not supported"),
    ({**BOOTSTRAP, "subscribe": "a", "endingOffsets": "latest"}, True,
     "ending offset not valid in streaming queries"),
    ({**BOOTSTRAP, "subscribe": "a", "startingOffsets": "latest"}, False,
     "starting offset can't be latest for batch queries"),
    ({**BOOTSTRAP, "subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False,
     "startingOffsets for a-0 can't be latest"),
    ({**BOOTSTRAP, "subscribe": "a", "endingOffsets": "earliest"}, False,
     "ending offset can't be earliest"),
    ({**BOOTSTRAP, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False,
     "endingOffsets for a-0 can't be earliest"),
    ({**BOOTSTRAP, "subscribe": "a", "minPartitions": "0"}, True,
     "minPartitions option must be a positive integer"),
    ({**BOOTSTRAP, "subscribe": "a", "maxOffsetsPerTrigger": "many"}, True,
     "must be an integer"),
    ({**BOOTSTRAP, "subscribe": "a", "failOnDataLoss": "maybe"}, True, "must be true or false"),
])
def test_invalid_source_options(options, streaming, message):
    with pytest.raises(ValueError, match=message):
        parse_source_options(options, streaming=streaming)


def test_sink_options():
    options = parse_sink_options({**BOOTSTRAP, "topic": " out ", "batchMarker": "false"})
    assert (options.topic, options.batch_marker, options.delivery_guarantee) == (
        "out", False, "at-least-once")
    with pytest.raises(ValueError, match="'key.serializer' is not supported"):
        parse_sink_options({**BOOTSTRAP, "kafka.key.serializer": "x"})
    with pytest.raises(ValueError, match="configuring Kafka producer"):
        parse_sink_options({"topic": "x"})
    with pytest.raises(ValueError, match="deliveryGuarantee"):
        parse_sink_options({**BOOTSTRAP, "deliveryGuarantee": "at-most-once"})
