"""The quickstart word count as a Spark streaming query over Odradek, resumed from its
checkpoint: the latest count per word always equals the truth (no loss, no double counting)."""

from __future__ import annotations

import random
import re
from collections import Counter

from spark_helpers import consume_all, create_topics, produce

from odradek.spark.jobs import wordcount
from odradek.spark.sink import BATCH_ID_HEADER, QUERY_ID_HEADER

VOCABULARY = ["all", "streams", "lead", "to", "kafka", "hello", "odradek", "spark", "join",
              "Kafka", "STREAMS", "summit"]
QUERY_TIMEOUT_S = 120


def make_lines(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [", ".join(" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 6)))
                      for _ in range(rng.randint(1, 2)))
            for _ in range(count)]


def true_counts(lines: list[str]) -> Counter[str]:
    return Counter(word for line in lines for word in re.split(r"\W+", line.lower()) if word)


def produce_lines(bootstrap: str, topic: str, lines: list[str], partitions: int) -> None:
    produce(bootstrap, topic, [(i % partitions, None, line.encode()) for i, line in
                               enumerate(lines)])


def latest_counts(bootstrap: str, topic: str, partitions: int) -> tuple[dict[str, int], list]:
    """The word counts the output topic holds now (the last record per key wins)."""
    records = consume_all(bootstrap, topic, partitions)
    counts = {}
    for record in sorted(records, key=lambda r: (r.partition(), r.offset())):
        counts[record.key().decode()] = wordcount.decode_count(record.value())
    return counts, records


def run_available_now(spark, bootstrap, checkpoint, topics, **options):
    query = wordcount.start(spark, bootstrap, str(checkpoint), input_topic=topics[0],
                            output_topic=topics[1], available_now=True, **options)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish in time"
    assert query.exception() is None, query.exception()
    return query


def batch_ids(records) -> set[int]:
    return {int(dict(r.headers())[BATCH_ID_HEADER]) for r in records}


def test_word_count_resumes_from_checkpoint(spark, odradek_broker, tmp_path):
    bootstrap = odradek_broker.bootstrap
    topics = ("wc-input", "wc-output")
    create_topics(bootstrap, {topics[0]: 2, topics[1]: 2})
    checkpoint = tmp_path / "checkpoint"
    first, second = make_lines(1, 40), make_lines(2, 25)

    produce_lines(bootstrap, topics[0], first, 2)
    query = run_available_now(spark, bootstrap, checkpoint, topics)
    counts, records = latest_counts(bootstrap, topics[1], 2)
    assert counts == true_counts(first)
    first_batches = batch_ids(records)
    assert {dict(r.headers())[QUERY_ID_HEADER].decode() for r in records} == {str(query.id)}

    produce_lines(bootstrap, topics[0], second, 2)
    resumed = run_available_now(spark, bootstrap, checkpoint, topics)
    assert resumed.id == query.id  # the same query, continued from its checkpoint
    counts, records = latest_counts(bootstrap, topics[1], 2)
    assert counts == true_counts(first + second)
    # The second run wrote only later micro-batches: nothing of the first run was replayed.
    assert min(batch_ids(records) - first_batches) > max(first_batches)
    written_again = [r for r in records if int(dict(r.headers())[BATCH_ID_HEADER]) >
                     max(first_batches)]
    assert {r.key().decode() for r in written_again} == set(true_counts(second))

    # A third run with no new input writes nothing.
    before = len(records)
    run_available_now(spark, bootstrap, checkpoint, topics)
    assert len(latest_counts(bootstrap, topics[1], 2)[1]) == before


def test_word_count_with_max_offsets_per_trigger(spark, odradek_broker, tmp_path):
    """Several micro-batches per run; written through the streaming sink (Complete mode)."""
    bootstrap = odradek_broker.bootstrap
    topics = ("wc-limited-input", "wc-limited-output")
    create_topics(bootstrap, {topics[0]: 3, topics[1]: 1})
    checkpoint = tmp_path / "checkpoint"
    first, second = make_lines(3, 50), make_lines(4, 31)
    limit = 20

    produce_lines(bootstrap, topics[0], first, 3)
    query = run_available_now(spark, bootstrap, checkpoint, topics,
                              max_offsets_per_trigger=limit, output_mode="complete")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == len(first)
    assert len(sizes) >= 3 and max(sizes) <= limit, sizes
    assert latest_counts(bootstrap, topics[1], 1)[0] == true_counts(first)

    produce_lines(bootstrap, topics[0], second, 3)
    query = run_available_now(spark, bootstrap, checkpoint, topics,
                              max_offsets_per_trigger=limit, output_mode="complete")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == len(second) and len(sizes) >= 2 and max(sizes) <= limit, sizes
    assert latest_counts(bootstrap, topics[1], 1)[0] == true_counts(first + second)
