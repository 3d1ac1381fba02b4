"""Streams-style jobs on Spark over Odradek: a windowed count with a watermark and a
stream-table join against a compacted topic, each run twice from its checkpoint."""

from __future__ import annotations

import json

from spark_helpers import consume_all, create_topics, produce

from odradek.spark.jobs import stream_table_join, windowed

QUERY_TIMEOUT_S = 120
BASE_TS = 1_700_000_000_000  # a multiple of the 10 s window


def run(query) -> None:
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish in time"
    assert query.exception() is None, query.exception()


def windows(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    """(key, window start in s from BASE_TS) -> count, from the output topic."""
    result = {}
    for record in consume_all(bootstrap, topic, 1):
        value = json.loads(record.value())
        assert value["window_end"] - value["window_start"] == 10_000
        window = ((record.key().decode(), (value["window_start"] - BASE_TS) // 1000))
        assert window not in result, f"window {window} written twice"
        result[window] = value["count"]
    return result


def test_windowed_count_with_watermark(spark, odradek_broker, tmp_path):
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"clicks": 1, "clicks-per-window": 1})

    def clicks(events):  # (key, seconds after BASE_TS)
        produce(bootstrap, "clicks", [(0, key.encode(), b"click", None, BASE_TS + 1000 * s)
                                      for key, s in events])

    def start():
        return windowed.start(spark, bootstrap, str(tmp_path / "checkpoint"), "clicks",
                              "clicks-per-window", window="10 seconds", watermark="5 seconds",
                              available_now=True)

    clicks([("a", 1), ("a", 2), ("a", 3), ("b", 4), ("a", 12), ("b", 15), ("b", 18),
            ("a", 25), ("c", 61)])
    run(start())
    # The watermark is 61 - 5 = 56 s: windows ending by then are final; [60, 70) is open.
    assert windows(bootstrap, "clicks-per-window") == {
        ("a", 0): 3, ("b", 0): 1, ("a", 10): 1, ("b", 10): 2, ("a", 20): 1}

    # A click older than the watermark is dropped; a click at 100 s closes [60, 70).
    clicks([("a", 5), ("b", 64), ("a", 100)])
    run(start())
    assert windows(bootstrap, "clicks-per-window") == {
        ("a", 0): 3, ("b", 0): 1, ("a", 10): 1, ("b", 10): 2, ("a", 20): 1,
        ("c", 60): 1, ("b", 60): 1}


def test_stream_table_join_sees_the_table_of_each_micro_batch(spark, odradek_broker, tmp_path):
    bootstrap = odradek_broker.bootstrap
    create_topics(bootstrap, {"page-views": 2, "user-regions": 2, "regional-views": 1})
    produce(bootstrap, "user-regions", [
        (0, b"u1", b"eu"), (1, b"u2", b"us"), (0, b"u3", b"eu"), (0, b"u3", b"asia"),
        (1, b"u4", b"us"), (1, b"u4", None)])  # u3 moved; u4 deleted (tombstone)

    def views(pairs):
        produce(bootstrap, "page-views", [(i % 2, user.encode(), page.encode())
                                          for i, (user, page) in enumerate(pairs)])

    def start():
        return stream_table_join.start(spark, bootstrap, str(tmp_path / "checkpoint"),
                                       "page-views", "user-regions", "regional-views",
                                       available_now=True)

    def output():
        return sorted((r.key().decode(), json.loads(r.value())["value"],
                       json.loads(r.value())["table"])
                      for r in consume_all(bootstrap, "regional-views", 1))

    views([("u1", "/home"), ("u2", "/a"), ("u3", "/b"), ("u4", "/c"), ("u5", "/d")])
    run(start())
    first = [("u1", "/home", "eu"), ("u2", "/a", "us"), ("u3", "/b", "asia"),
             ("u4", "/c", None), ("u5", "/d", None)]
    assert output() == first

    produce(bootstrap, "user-regions", [(0, b"u1", b"apac"), (1, b"u5", b"us")])
    views([("u1", "/again"), ("u5", "/e")])
    run(start())
    assert output() == sorted(first + [("u1", "/again", "apac"), ("u5", "/e", "us")])
