"""Odradek's pure-Python client against confluent-kafka (librdkafka) on the same broker.

Run: `python -m bench client` (writes docs/performance.md) or
`python bench/client_bench.py [--quick]` (prints the section only).

One Odradek broker runs as a child process on loopback. Each producer sends the same N x 100 B
keyless records into a topic of its own (6 partitions), timed from the first send until
`flush()` returns (every record acknowledged). Each consumer then reads the same topic (the
one confluent-kafka wrote) by assignment of every partition from the beginning, timed from
the first records received until it has N records, touching every record's value. The two
clients run one after the other in alternating order, twice, and the best run of each is kept;
the ratio is taken between numbers of the same run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # BrokerProcess: a broker on random local ports

import confluent_kafka
from broker_process import BrokerProcess

from odradek.client import Admin, Consumer, NewTopic, Producer, TopicPartition

NAME = "client"
PARTITIONS = 6
RECORD_SIZE = 100
ROUNDS = 2

#: librdkafka 2.x pauses a partition's fetching for fetch.queue.backoff.ms (1 s) once its queue
#: holds queued.min.messages (100k): with 1M records that pause, not decoding, bounds its rate
LIBRDKAFKA_NO_QUEUE_BACKOFF = {"fetch.queue.backoff.ms": 0}

#: the same batching for both clients (librdkafka's defaults, set on Odradek's producer too)
EQUAL_PRODUCER = {"acks": "all", "linger.ms": "5", "batch.size": "1000000"}

#: records per call: librdkafka's consume(num_messages=...) and Odradek's max.poll.records
CONSUME_BATCH = 10_000
#: the same records per call for Odradek's poll as the confluent-kafka loop asks for
EQUAL_CONSUMER = {"max.poll.records": CONSUME_BATCH}


@dataclass
class Results:
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, metric: str, value: str, notes: str = "") -> None:
        self.rows.append((metric, value, notes))
        print(f"  {metric}: {value} {notes}", flush=True)


def produce_confluent(bootstrap: str, topic: str, n: int, settings: dict[str, str]) -> float:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **settings})
    value = b"c" * RECORD_SIZE
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # local queue full: serve delivery reports, as apps do
                poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert remaining == 0 and not failures, f"confluent-kafka: {remaining} left, {failures[:3]}"
    return elapsed


def produce_odradek(bootstrap: str, topic: str, n: int, settings: dict[str, str]) -> float:
    value = b"o" * RECORD_SIZE
    with Producer({"bootstrap.servers": bootstrap, **settings}) as producer:
        producer.partitions_for(topic)  # metadata first, as librdkafka has it at start
        send = producer.send
        started = time.perf_counter()
        for _ in range(n):
            future = send(topic, value)
        producer.flush(120)
        elapsed = time.perf_counter() - started
        assert future.result(0).offset >= 0  # the last record was acknowledged
        metrics = producer.metrics()
    errors = metrics.get("record-error-total", 0)
    assert not errors, f"odradek producer: {errors} record errors"
    return elapsed


def consume_confluent(bootstrap: str, topic: str, n: int,
                      settings: dict[str, object] | None = None) -> float:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-unused",
        "enable.auto.commit": False, "enable.partition.eof": False, **(settings or {})})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    count = size = 0
    deadline = time.monotonic() + 120
    started = None
    while count < n and time.monotonic() < deadline:
        messages = consumer.consume(num_messages=CONSUME_BATCH, timeout=1.0)
        if started is None and messages:
            started = time.perf_counter()  # from the first records: startup is not throughput
        for message in messages:
            if message.error() is None:
                count += 1
                size += len(message.value())
    elapsed = time.perf_counter() - started
    consumer.close()
    assert count == n and size == n * RECORD_SIZE, f"confluent-kafka consumed {count} of {n}"
    return elapsed


def consume_odradek(bootstrap: str, topic: str, n: int,
                    settings: dict[str, object] | None = None) -> float:
    count = size = 0
    deadline = time.monotonic() + 120
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                   **(settings or {})}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        started = None
        while count < n and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=1000)
            if started is None and records:
                started = time.perf_counter()
            for record in records:
                count += 1
                size += len(record.value)
        elapsed = time.perf_counter() - started
    assert count == n and size == n * RECORD_SIZE, f"odradek consumed {count} of {n}"
    return elapsed


def run(quick: bool = False) -> str:
    n = 100_000 if quick else 1_000_000
    results = Results()
    best: dict[str, float] = {}
    ratios: dict[str, list[float]] = {"produce-default": [], "produce-equal": [], "consume": [],
                                      "consume-tuned": [], "consume-equal": []}
    with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
        broker = BrokerProcess(Path(tmp), {"num.partitions": str(PARTITIONS)}).start()
        try:
            with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
                admin.create_topics([NewTopic(f"{who}-{r}-{kind}", PARTITIONS, 1)
                                     for who in ("ck", "od") for r in range(ROUNDS)
                                     for kind in ("default", "equal")])
            for r in range(ROUNDS):
                # alternate who goes first, so page cache and broker warm-up favour neither
                order = ("ck", "od") if r % 2 == 0 else ("od", "ck")
                times: dict[str, float] = {}
                for who in order:
                    for kind in ("default", "equal"):
                        topic = f"{who}-{r}-{kind}"
                        if who == "ck":
                            settings = {} if kind == "default" else EQUAL_PRODUCER
                            times[f"ck-{kind}"] = produce_confluent(broker.bootstrap, topic, n,
                                                                    settings)
                        else:
                            settings = {} if kind == "default" else EQUAL_PRODUCER
                            times[f"od-{kind}"] = produce_odradek(broker.bootstrap, topic, n,
                                                                  settings)
                source = f"ck-{r}-equal"
                for who in order:
                    consume = consume_confluent if who == "ck" else consume_odradek
                    times[f"{who}-consume"] = consume(broker.bootstrap, source, n)
                    if who == "ck":
                        times["ck-consume-tuned"] = consume_confluent(
                            broker.bootstrap, source, n, LIBRDKAFKA_NO_QUEUE_BACKOFF)
                    else:
                        times["od-consume-equal"] = consume_odradek(broker.bootstrap, source, n,
                                                                    EQUAL_CONSUMER)
                print(f"  round {r}: " + ", ".join(f"{k} {n / v:,.0f}/s"
                                                  for k, v in times.items()), flush=True)
                for key, seconds in times.items():
                    best[key] = min(best.get(key, seconds), seconds)
                ratios["produce-default"].append(times["ck-default"] / times["od-default"])
                ratios["produce-equal"].append(times["ck-equal"] / times["od-equal"])
                ratios["consume"].append(times["ck-consume"] / times["od-consume"])
                ratios["consume-tuned"].append(times["ck-consume-tuned"] / times["od-consume"])
                ratios["consume-equal"].append(times["ck-consume-tuned"]
                                               / times["od-consume-equal"])
        finally:
            broker.stop()

    def rate(key: str) -> str:
        per_s = n / best[key]
        return f"{per_s:,.0f} records/s ({per_s * RECORD_SIZE / 2**20:.1f} MiB/s)"

    def ratio(key: str) -> str:
        return ", ".join(f"{x:.2f}" for x in ratios[key])

    results.add("confluent-kafka produce, librdkafka defaults", rate("ck-default"),
                "linger.ms=5, batch.size=1000000, acks=all, no idempotence")
    results.add("odradek produce, Kafka defaults", rate("od-default"),
                "linger.ms=0, batch.size=16384, acks=all, idempotent")
    results.add("odradek / confluent-kafka, each with its defaults", ratio("produce-default"),
                "per round")
    results.add("confluent-kafka produce, linger.ms=5 batch.size=1000000", rate("ck-equal"), "")
    results.add("odradek produce, linger.ms=5 batch.size=1000000", rate("od-equal"),
                "idempotent (Kafka's default)")
    results.add("odradek / confluent-kafka, same batching", ratio("produce-equal"),
                "per round; goal >= 0.5")
    results.add(f"confluent-kafka consume (consume({CONSUME_BATCH}), value touched)",
                rate("ck-consume"), "librdkafka defaults")
    results.add("odradek consume (poll, value touched)", rate("od-consume"),
                "Kafka defaults: max.poll.records=500")
    results.add("confluent-kafka consume, fetch.queue.backoff.ms=0", rate("ck-consume-tuned"),
                "librdkafka without its 1 s fetch pause when a partition queue holds 100k")
    results.add(f"odradek consume, max.poll.records={CONSUME_BATCH}", rate("od-consume-equal"),
                f"as many records per call as the consume({CONSUME_BATCH}) loop")
    results.add("odradek / confluent-kafka, consume, both defaults", ratio("consume"), "per round")
    results.add("odradek (defaults) / confluent-kafka (fetch.queue.backoff.ms=0), consume",
                ratio("consume-tuned"), "per round")
    results.add(f"odradek / confluent-kafka, consume, {CONSUME_BATCH} records per call, "
                "fetch.queue.backoff.ms=0", ratio("consume-equal"),
                "per round; goal >= 1.0 (against librdkafka's best)")
    return render(results, n)


def render(results: Results, n: int) -> str:
    lines = [
        "## Client: Odradek's pure-Python client versus confluent-kafka (librdkafka)",
        "",
        (f"Method: `python -m bench client`. One broker child process on loopback (both "
         f"clients and the broker share the machine's 2 cores). Each producer sends {n:,} x "
         f"{RECORD_SIZE} B keyless records into its own {PARTITIONS}-partition topic, timed "
         "from the first send to the end of `flush()`, once with each client's defaults and "
         "once with the same batching. Each consumer reads the topic confluent-kafka wrote by "
         "assignment of all partitions from the beginning, timed from the first records "
         f"received (startup excluded) to the {n:,}th record, reading every value: "
         f"confluent-kafka with `consume({CONSUME_BATCH})`, with its defaults and with "
         "`fetch.queue.backoff.ms=0` (librdkafka 2.x otherwise pauses fetching for 1 s when a "
         "partition queue holds 100k messages); Odradek with `poll()`, with Kafka's "
         f"`max.poll.records=500` and with {CONSUME_BATCH} (as many records per call as the "
         f"confluent-kafka loop). {ROUNDS} rounds with alternating order; rates are each "
         "client's best round, ratios are per round (confluent-kafka time / Odradek time: "
         "above 1.0 means Odradek is faster)."),
        "",
        "| measurement | result | notes |",
        "|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in results.rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(run(quick=parser.parse_args().quick))


if __name__ == "__main__":
    main()
