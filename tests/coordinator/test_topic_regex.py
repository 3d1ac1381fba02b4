"""SubscribedTopicRegex with Kafka's re2j syntax: what re2j refuses gets
INVALID_REGULAR_EXPRESSION with re2j's description and the group is unchanged; re2j's named
groups work."""

from __future__ import annotations

import pytest

from odradek.coordinator.consumer_group_coordinator import HeartbeatRequest
from odradek.coordinator.topic_regex import Re2jSyntaxError, compile_re2j
from odradek.protocol.errors import ErrorCode
from tests.coordinator.group_harness import Harness, run
from tests.coordinator.test_consumer_group_protocol import TOPICS, U


@pytest.mark.parametrize("regex, description", [
    ("t(?=x)", "invalid or unsupported Perl syntax"),
    ("t(?!x)", "invalid or unsupported Perl syntax"),
    ("(?<=x)t", "invalid or unsupported Perl syntax"),
    ("(?>t)", "invalid or unsupported Perl syntax"),
    ("(t)\\1", "invalid escape sequence"),
    ("t*+", "bad repetition operator"),
    ("t{1,2}+", "bad repetition operator"),
])
def test_re2j_refusals(regex, description):
    with pytest.raises(Re2jSyntaxError) as refused:
        compile_re2j(regex)
    assert refused.value.description == description


def test_shared_syntax_and_named_groups():
    assert compile_re2j("(?<name>u)").fullmatch("u")
    assert compile_re2j("[+]+|t\\++").fullmatch("t++")
    assert compile_re2j("(?i)T.*?").fullmatch("topic")


def test_heartbeat_with_an_re2j_refused_regex_changes_nothing(tmp_path):
    async def scenario():
        h = await Harness(tmp_path).start()
        h.coordinator.consumer_groups.topics = lambda: TOPICS
        try:
            end = h.logs[0].log_end_offset
            refused = await h.coordinator.consumer_groups.heartbeat(HeartbeatRequest(
                group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=30_000,
                subscribed_topic_regex="(t)\\1", owned={}))
            assert refused.error == ErrorCode.INVALID_REGULAR_EXPRESSION
            assert refused.error_message == ("SubscribedTopicRegex `(t)\\1` is not a valid regular "
                                       "expression: invalid escape sequence.")
            assert h.logs[0].log_end_offset == end and h.manager.get_group("g") is None
            joined = await h.coordinator.consumer_groups.heartbeat(HeartbeatRequest(
                group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=30_000,
                subscribed_topic_regex="(?<name>u)", owned={}))
            assert joined.error == ErrorCode.NONE
            assert dict(joined.assignment) == {U: frozenset(range(3))}
        finally:
            await h.close()

    run(scenario())
