"""The checker: a pure function from a history (see history.py) to a report of anomalies, in
the manner of Jepsen's Kafka queue checker.

What counts as an anomaly (each makes `Report.ok` false):
- lost: a value the producer saw acknowledged that no final (full, from offset 0) read returned;
- duplicate: one value stored at two (partition, offset) positions (across every read);
- inconsistent offset: one (partition, offset) holding two values, across every read and ack;
- acked offset mismatch: a value acknowledged at (p, X) but read at another position;
- unexpected: a value read that no producer ever sent;
- skipped / backwards poll: within one consumer session and partition, each poll must return
  exactly the next offset (no compaction, no transactions here, so a partition read from its
  start is contiguous: no control batches leave gaps);
- no final read, or a final read that did not reach its targets (the loss check is then unsound:
  reported as `final_read_incomplete`).

Not anomalies, reported for information: records the client failed (indeterminate: a failed
record that was in fact stored is `failed_but_read`, which Kafka allows), and the unavailability
windows: the longest time between consecutive acknowledgements while the producer was trying,
of each partition (what a client writing to it saw) and of the whole topic (no ack anywhere).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Position = tuple[int, int]  # (partition, offset)


@dataclass(frozen=True)
class PollAnomaly:
    session: str
    partition: int
    previous: int | None  # the offset polled before (None: the session's first of it)
    offset: int
    kind: str  # "skip" or "backwards"


@dataclass(frozen=True)
class Window:
    """A stretch of the run with no acknowledgement (seconds since the run began) of one
    partition, or of any (partition None)."""

    start: float
    end: float
    partition: int | None = None

    @property
    def length(self) -> float:
        return self.end - self.start


@dataclass
class Report:
    attempted: int = 0
    acked: int = 0
    failed: int = 0
    read_values: int = 0  # distinct values any session read
    final_read_values: int = 0
    lost: list[tuple[str, Position]] = field(default_factory=list)
    duplicates: dict[str, list[Position]] = field(default_factory=dict)
    inconsistent_offsets: dict[Position, list[str]] = field(default_factory=dict)
    acked_offset_mismatch: list[tuple[str, Position, list[Position]]] = field(
        default_factory=list)
    # acknowledged without an offset (librdkafka's "persisted, offset unknown") yet read in
    # another partition
    acked_offset_mismatch_partitions: list[tuple[str, int, list[Position]]] = field(
        default_factory=list)
    acked_without_offset: int = 0
    unexpected: list[str] = field(default_factory=list)
    poll_anomalies: list[PollAnomaly] = field(default_factory=list)
    final_read_incomplete: list[str] = field(default_factory=list)  # reasons
    failed_but_read: list[str] = field(default_factory=list)
    unavailability: list[Window] = field(default_factory=list)  # any partition; longest first
    partition_unavailability: dict[int, list[Window]] = field(default_factory=dict)
    client_errors: int = 0
    nemesis: list[dict[str, Any]] = field(default_factory=list)

    @property
    def skipped_polls(self) -> list[PollAnomaly]:
        return [a for a in self.poll_anomalies if a.kind == "skip"]

    @property
    def backwards_polls(self) -> list[PollAnomaly]:
        return [a for a in self.poll_anomalies if a.kind == "backwards"]

    @property
    def longest_unavailability(self) -> Window | None:
        """The longest a partition went without an ack while written to (the whole topic's
        longest when the history does not say which partition a record was sent to)."""
        longest = [windows[0] for windows in self.partition_unavailability.values() if windows]
        if longest:
            return max(longest, key=lambda w: w.length)
        return self.unavailability[0] if self.unavailability else None

    @property
    def anomalies(self) -> dict[str, int]:
        """Each kind of anomaly and how many were found (zero ones included)."""
        return {
            "lost": len(self.lost),
            "duplicates": len(self.duplicates),
            "inconsistent_offsets": len(self.inconsistent_offsets),
            "acked_offset_mismatch": (len(self.acked_offset_mismatch)
                                      + len(self.acked_offset_mismatch_partitions)),
            "unexpected": len(self.unexpected),
            "skipped_polls": len(self.skipped_polls),
            "backwards_polls": len(self.backwards_polls),
            "final_read_incomplete": len(self.final_read_incomplete),
        }

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self, examples: int = 5) -> str:
        longest = self.longest_unavailability
        lines = [
            (f"attempted {self.attempted}, acked {self.acked} ({self.acked_without_offset} "
             f"without an offset), failed {self.failed} "
             f"(of which read anyway: {len(self.failed_but_read)}), distinct values read "
             f"{self.read_values}, by the final read {self.final_read_values}"),
            "anomalies: " + ", ".join(f"{k} {v}" for k, v in self.anomalies.items()),
            "longest unavailability: " + (
                f"{longest.length:.2f}s (t={longest.start:.2f}..{longest.end:.2f}"
                + ("" if longest.partition is None else f", partition {longest.partition}")
                + ")" if longest else "none"),
        ]
        if self.partition_unavailability:
            lines.append("longest per partition: " + ", ".join(
                f"{p}: {ws[0].length:.2f}s@{ws[0].start:.1f}"
                for p, ws in sorted(self.partition_unavailability.items()) if ws))
        if self.unavailability:
            lines.append("longest with no ack on any partition: " + ", ".join(
                f"{w.length:.2f}s@{w.start:.1f}" for w in self.unavailability[:examples]))
        if self.nemesis:
            lines.append("faults: " + "; ".join(
                f"t={e['t']:.1f} {e['action']} {e.get('node', '')}".rstrip()
                for e in self.nemesis))
        if self.client_errors:
            lines.append(f"client errors reported: {self.client_errors}")
        for name, found in (("lost", self.lost), ("duplicates", list(self.duplicates.items())),
                            ("inconsistent", list(self.inconsistent_offsets.items())),
                            ("acked offset mismatch", self.acked_offset_mismatch),
                            ("unexpected", self.unexpected),
                            ("poll anomalies", self.poll_anomalies),
                            ("final read incomplete", self.final_read_incomplete)):
            if found:
                lines.append(f"  {name}, e.g.: {found[:examples]}")
        lines.append("OK: no anomalies" if self.ok else "FAILED: anomalies found")
        return "\n".join(lines)


def check(events: Iterable[dict[str, Any]], top_windows: int = 5) -> Report:
    report = Report()
    invoked: set[str] = set()
    acked_at: dict[str, Position] = {}
    acked_without_offset: dict[str, int] = {}  # value -> partition
    failed: set[str] = set()
    # every position each value was seen at (reads and acks), and every value each position held
    read_positions: dict[str, set[Position]] = defaultdict(set)
    values_at: dict[Position, set[str]] = defaultdict(set)
    final_sessions: set[str] = set()
    session_start: dict[str, int] = {}
    final_values: set[str] = set()
    last_polled: dict[tuple[str, int], int] = {}
    # per partition (and None: any), for the unavailability windows
    first_invoke: dict[int | None, float] = {}
    ack_times: dict[int | None, list[float]] = defaultdict(list)
    completion_times: dict[int | None, list[float]] = defaultdict(list)

    for event in sorted(events, key=lambda e: e["t"]):
        kind = event["type"]
        if kind == "invoke":
            invoked.add(event["value"])
            report.attempted += 1
            for key in {None, event.get("partition")}:
                first_invoke.setdefault(key, event["t"])
        elif kind == "ack":
            if event["offset"] is None:
                # librdkafka acknowledges a record whose request's outcome it could not learn
                # but that a later acknowledged batch of its idempotent sequence proves
                # written, without an offset: it must still be read once, somewhere in its
                # partition.
                acked_without_offset[event["value"]] = event["partition"]
                report.acked_without_offset += 1
            else:
                position = (event["partition"], event["offset"])
                acked_at[event["value"]] = position
                values_at[position].add(event["value"])
            for key in (None, event["partition"]):
                ack_times[key].append(event["t"])
                completion_times[key].append(event["t"])
        elif kind == "fail":
            failed.add(event["value"])
            for key in {None, event.get("partition")}:
                completion_times[key].append(event["t"])
        elif kind == "session":
            session_start[event["session"]] = event.get("start", 0)
            if event.get("final"):
                final_sessions.add(event["session"])
        elif kind == "session-end":
            if event["session"] in final_sessions and not event.get("complete"):
                report.final_read_incomplete.append(
                    f"{event['session']} stopped at {event.get('positions')} short of "
                    f"{event.get('targets')}")
        elif kind == "poll":
            session, partition, offset = event["session"], event["partition"], event["offset"]
            value = event["value"]
            read_positions[value].add((partition, offset))
            values_at[(partition, offset)].add(value)
            if session in final_sessions:
                final_values.add(value)
            previous = last_polled.get((session, partition))
            expected = session_start.get(session, 0) if previous is None else previous + 1
            if offset != expected:
                report.poll_anomalies.append(PollAnomaly(
                    session, partition, previous, offset,
                    "backwards" if previous is not None and offset <= previous else "skip"))
            last_polled[(session, partition)] = offset
        elif kind == "client-error":
            report.client_errors += 1
        elif kind == "nemesis":
            report.nemesis.append(event)

    report.acked = len(acked_at) + len(acked_without_offset.keys() - acked_at.keys())
    report.failed = len(failed - acked_at.keys() - acked_without_offset.keys())
    report.read_values = len(read_positions)
    report.final_read_values = len(final_values)
    if not final_sessions:
        report.final_read_incomplete.append("no final read in the history")
    # Without a final read nothing can be called lost (that is reported as incomplete).
    report.lost = sorted(((value, position) for value, position in acked_at.items()
                          if final_sessions and value not in final_values),
                         key=lambda item: item[1])
    report.lost += sorted(((value, (partition, -1))
                           for value, partition in acked_without_offset.items()
                           if final_sessions and value not in final_values
                           and value not in acked_at),
                          key=lambda item: item[1])
    # Acknowledged without an offset: read in another partition is as wrong as a moved offset.
    report.acked_offset_mismatch_partitions = sorted(
        (value, partition, sorted(read_positions[value]))
        for value, partition in acked_without_offset.items()
        if any(p != partition for p, _ in read_positions[value]))
    report.duplicates = {value: sorted(positions)
                         for value, positions in read_positions.items() if len(positions) > 1}
    report.inconsistent_offsets = {position: sorted(values)
                                   for position, values in sorted(values_at.items())
                                   if len(values) > 1}
    report.acked_offset_mismatch = [
        (value, position, sorted(read_positions[value] - {position}))
        for value, position in sorted(acked_at.items(), key=lambda item: item[1])
        if read_positions[value] - {position}]
    report.unexpected = sorted(read_positions.keys() - invoked)
    report.failed_but_read = sorted((failed - acked_at.keys() - acked_without_offset.keys())
                                    & read_positions.keys())
    for key, started in first_invoke.items():
        windows = unavailability_windows(started, ack_times[key], completion_times[key],
                                         top_windows, key)
        if key is None:
            report.unavailability = windows
        else:
            report.partition_unavailability[key] = windows
    return report


def unavailability_windows(first_invoke: float | None, ack_times: list[float],
                           completion_times: list[float], top: int,
                           partition: int | None = None) -> list[Window]:
    """The longest stretches without an acknowledgement while the producer was trying: from
    its first send to the first ack, between consecutive acks, and from the last ack to the
    last record it gave up on (if it gave up on any after that ack)."""
    if first_invoke is None:
        return []
    points = [first_invoke, *sorted(ack_times)]
    last_completion = max(completion_times, default=first_invoke)
    if last_completion > points[-1]:
        points.append(last_completion)
    windows = [Window(a, b, partition) for a, b in itertools.pairwise(points) if b > a]
    windows.sort(key=lambda w: w.length, reverse=True)
    return windows[:top]
