"""Which __consumer_offsets partition (hence which broker) coordinates a group."""

from __future__ import annotations

from odradek.clock import ManualClock
from odradek.coordinator import GroupMetadataManager, java_string_hashcode, kafka_abs


def test_java_string_hashcode():
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("abc") == 96354
    assert java_string_hashcode("Aa") == java_string_hashcode("BB") == 2112
    # Java hashes UTF-16 code units: a character outside the BMP counts as two.
    assert java_string_hashcode("\U0001F600") == 31 * 0xD83D + 0xDE00
    assert java_string_hashcode("polygenelubricants") == -(2**31)


def test_partition_for_uses_kafkas_abs_and_the_partition_count():
    assert kafka_abs(-(2**31)) == 0  # Utils.abs, unlike Math.abs, never stays negative
    assert kafka_abs(-5) == 5
    manager = GroupMetadataManager(lambda p, r: None, num_partitions=lambda: 50,
                                   clock=ManualClock(0))
    assert manager.partition_for("polygenelubricants") == 0
    assert manager.partition_for("hello") == 99162322 % 50
    negative = "consumer-group-negative"
    assert java_string_hashcode(negative) < 0
    assert manager.partition_for(negative) == abs(java_string_hashcode(negative)) % 50
