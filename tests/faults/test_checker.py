"""The checker on hand-made histories: a clean one passes, and each anomaly is found (and only
that one) when a history contains it."""

from __future__ import annotations

import json

import pytest

from faults.checker import PollAnomaly, Window, check
from faults.history import History, read_history


class Hist:
    """Builds a history: t advances by 1 per event unless given."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.t = 0.0

    def add(self, type: str, t: float | None = None, **fields) -> Hist:
        self.t = self.t + 1 if t is None else t
        self.events.append({"t": self.t, "type": type, **fields})
        return self

    def write(self, value: str, partition: int, offset: int) -> Hist:
        """One record sent and acknowledged at (partition, offset)."""
        return (self.add("invoke", process="p0", value=value)
                .add("ack", process="p0", value=value, partition=partition, offset=offset))

    def session(self, name: str, reads: list[tuple[int, int, str]], final: bool = True,
                complete: bool = True) -> Hist:
        self.add("session", session=name, final=final, start=0)
        for partition, offset, value in reads:
            self.add("poll", session=name, partition=partition, offset=offset, value=value)
        return self.add("session-end", session=name, complete=complete)


def clean() -> Hist:
    h = Hist()
    for i in range(3):
        h.write(f"p0-{i}", 0, i)
    h.write("p0-3", 1, 0)
    return h


ALL = [(0, 0, "p0-0"), (0, 1, "p0-1"), (0, 2, "p0-2"), (1, 0, "p0-3")]


def only(report, kind: str) -> None:
    """`kind` is the one anomaly the report has."""
    assert {k for k, n in report.anomalies.items() if n} == {kind}, report.summary()
    assert not report.ok


def test_a_clean_history_passes():
    h = clean().session("live-0", ALL[:2], final=False).session("final-0", ALL)
    report = check(h.events)
    assert report.ok, report.summary()
    assert (report.attempted, report.acked, report.failed) == (4, 4, 0)
    assert report.final_read_values == 4
    assert "OK: no anomalies" in report.summary()


def test_a_lost_write():
    h = clean().session("final-0", [r for r in ALL if r[2] != "p0-1"])
    report = check(h.events)
    # the hole at offset 1 is also a skipped poll: both are reported
    assert report.lost == [("p0-1", (0, 1))]
    assert report.skipped_polls == [PollAnomaly("final-0", 0, 0, 2, "skip")]


def test_a_write_read_only_by_a_live_session_is_still_lost():
    """Loss is judged by the final full read: a record once read and later gone is lost."""
    h = clean().session("live-0", ALL, final=False).session("final-0", ALL[:2] + ALL[3:])
    assert check(h.events).lost == [("p0-2", (0, 2))]


def test_a_duplicate():
    h = clean()
    h.add("invoke", process="p0", value="p0-4")
    h.add("ack", process="p0", value="p0-4", partition=0, offset=3)
    h.session("final-0", ALL + [(0, 3, "p0-4"), (0, 4, "p0-2")])
    report = check(h.events)
    assert report.duplicates == {"p0-2": [(0, 2), (0, 4)]}
    # p0-2 was acked at offset 2, so its second copy is also a mismatch
    assert report.acked_offset_mismatch == [("p0-2", (0, 2), [(0, 4)])]
    assert report.anomalies["lost"] == report.anomalies["inconsistent_offsets"] == 0


def test_an_offset_holding_two_values_across_sessions():
    h = clean().add("invoke", process="p0", value="x-1")
    h.session("live-0", [(0, 0, "p0-0"), (0, 1, "x-1")], final=False).session("final-0", ALL)
    report = check(h.events)
    assert report.inconsistent_offsets == {(0, 1): ["p0-1", "x-1"]}
    only(report, "inconsistent_offsets")


def test_an_ack_at_an_offset_that_holds_another_value():
    h = Hist()
    h.write("a", 0, 0).write("b", 0, 0)  # the broker acknowledged two records at offset 0
    h.session("final-0", [(0, 0, "a"), (0, 1, "b")])
    report = check(h.events)
    assert report.inconsistent_offsets == {(0, 0): ["a", "b"]}
    assert report.acked_offset_mismatch == [("b", (0, 0), [(0, 1)])]
    assert report.anomalies["lost"] == 0


def test_an_unexpected_value():
    h = clean().session("final-0", ALL + [(1, 1, "ghost")])
    report = check(h.events)
    assert report.unexpected == ["ghost"]
    only(report, "unexpected")


def test_a_backwards_poll_within_a_session():
    reads = [(0, 0, "p0-0"), (0, 1, "p0-1"), (0, 0, "p0-0"), (0, 1, "p0-1"), (0, 2, "p0-2"),
             (1, 0, "p0-3")]
    report = check(clean().session("final-0", reads).events)
    assert report.backwards_polls == [PollAnomaly("final-0", 0, 1, 0, "backwards")]
    only(report, "backwards_polls")


def test_a_new_session_may_start_over():
    """Each session is checked on its own: a second session reading from 0 is not backwards."""
    h = clean().session("final-0", ALL).session("final-1", ALL)
    assert check(h.events).ok


def test_a_session_not_starting_at_its_start_offset_skipped():
    report = check(clean().session("final-0", ALL[1:]).events)
    assert PollAnomaly("final-0", 0, None, 1, "skip") in report.skipped_polls
    assert report.lost == [("p0-0", (0, 0))]


def test_polls_of_different_partitions_interleave_freely():
    reads = [(1, 0, "p0-3"), (0, 0, "p0-0"), (0, 1, "p0-1"), (0, 2, "p0-2")]
    assert check(clean().session("final-0", reads).events).ok


def test_no_final_read_or_an_incomplete_one_fails():
    report = check(clean().session("live-0", ALL, final=False).events)
    assert report.final_read_incomplete == ["no final read in the history"]
    assert report.lost == []  # nothing can be judged lost without a final read
    report = check(clean().session("final-0", ALL, complete=False).events)
    only(report, "final_read_incomplete")


def test_failed_writes_are_indeterminate_not_anomalies():
    h = clean()
    h.add("invoke", process="p0", value="p0-4").add("invoke", process="p0", value="p0-5")
    h.add("fail", process="p0", value="p0-4", error="timed out")
    h.add("fail", process="p0", value="p0-5", error="timed out")
    h.session("final-0", ALL + [(1, 1, "p0-5")])
    report = check(h.events)
    assert report.ok, report.summary()
    assert (report.failed, report.failed_but_read) == (2, ["p0-5"])


def test_unavailability_is_the_longest_gap_between_acks_while_trying():
    h = Hist()
    h.add("invoke", t=1.0, process="p0", value="a")
    h.add("ack", t=1.5, process="p0", value="a", partition=0, offset=0)
    h.add("invoke", t=2.0, process="p0", value="b")
    h.add("ack", t=9.5, process="p0", value="b", partition=0, offset=1)  # 8 s outage
    h.add("invoke", t=10.0, process="p0", value="c")
    h.add("ack", t=10.2, process="p0", value="c", partition=0, offset=2)
    h.add("invoke", t=11.0, process="p0", value="d")
    h.add("fail", t=14.0, process="p0", value="d", error="timed out")  # 3.8 s, given up
    h.session("final-0", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")])
    report = check(h.events)
    assert report.longest_unavailability == Window(1.5, 9.5)
    assert [round(w.length, 2) for w in report.unavailability] == [8.0, 3.8, 0.7, 0.5]


def test_a_partition_down_while_another_takes_writes_is_unavailable_on_its_own():
    h = Hist()
    offsets = {0: 0, 1: 0}
    for second in range(10):  # one record a second to each partition
        for partition in (0, 1):
            value = f"v{partition}-{second}"
            h.add("invoke", t=second, process="p0", value=value, partition=partition)
            if partition == 0 or second in (0, 9):  # partition 1 acks only at 0 s and at 9 s
                h.add("ack", t=second + 0.1, process="p0", value=value, partition=partition,
                      offset=offsets[partition])
                offsets[partition] += 1
    report = check(h.events)
    assert report.longest_unavailability == Window(0.1, 9.1, partition=1)
    assert report.partition_unavailability[0][0].length == pytest.approx(1.0)
    assert report.unavailability[0].length == pytest.approx(1.0)  # the topic as a whole
    assert "partition 1" in report.summary()


def test_the_summary_names_what_was_found():
    h = clean().add("nemesis", action="kill", node=2)
    h.session("final-0", ALL[:3])
    text = check(h.events).summary()
    assert "lost 1" in text and "FAILED" in text and "kill 2" in text
    assert "p0-3" in text


def test_history_round_trip(tmp_path):
    path = tmp_path / "h.jsonl"
    ticks = iter([10.0, 10.5, 11.25])
    with History(path, clock=lambda: next(ticks)) as history:
        history.record("invoke", process="p0", value="a")
        history.record("ack", process="p0", value="a", partition=0, offset=0)
    with open(path, "a") as torn:  # a run killed mid-write leaves a torn line
        torn.write('{"t": 3, "ty')
    events = read_history(path)
    assert events == history.events == [
        {"t": 0.5, "type": "invoke", "process": "p0", "value": "a"},
        {"t": 1.25, "type": "ack", "process": "p0", "value": "a", "partition": 0, "offset": 0}]
    assert json.loads(path.read_text().splitlines()[0])["type"] == "invoke"


@pytest.mark.parametrize("events", [[], [{"t": 0, "type": "phase", "name": "x"}]])
def test_an_empty_history_is_not_ok(events):
    report = check(events)
    assert not report.ok and report.longest_unavailability is None


def test_an_ack_without_an_offset_must_still_be_read_once_in_its_partition():
    """librdkafka acknowledges a record with no offset when a later acknowledged batch of its
    idempotent sequence proves it written: it is not lost only if read, and read once."""
    from faults.checker import check

    def history(read_partition: int | None) -> list[dict]:
        events = [{"t": 0.0, "type": "session", "session": "final", "final": True, "start": 0},
                  {"t": 0.1, "type": "invoke", "process": "p", "value": "v", "partition": 1},
                  {"t": 0.2, "type": "ack", "process": "p", "value": "v", "partition": 1,
                   "offset": None}]
        if read_partition is not None:
            events.append({"t": 0.3, "type": "poll", "session": "final",
                           "partition": read_partition, "offset": 0, "value": "v"})
        events.append({"t": 0.4, "type": "session-end", "session": "final", "complete": True})
        return events

    report = check(history(1))
    assert report.ok and (report.acked, report.acked_without_offset) == (1, 1)
    assert [value for value, _ in check(history(None)).lost] == ["v"]
    assert check(history(0)).anomalies["acked_offset_mismatch"] == 1
