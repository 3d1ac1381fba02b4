"""Transactions: transactional produce against idempotent produce, and read_committed consume
against read_uncommitted, with librdkafka (confluent-kafka) as the client on both sides.

Run: `python -m bench transactions` (writes docs/performance.md) or
`python bench/transactions_bench.py [--quick]` (prints the section only).

One Odradek broker runs as a child process on loopback. Per round, each producer sends the
same N x 100 B keyless records into a topic of its own (6 partitions, acks=all, linger.ms=5):
the idempotent one (`enable.idempotence=true`) timed from the first send until `flush()`
returns; the transactional one commits a transaction every 100 ms (begin, send for 100 ms,
commit, as an application with a 100 ms commit interval does), timed from `begin_transaction`
until the last commit returns. The two run in alternating order and the ratio is taken between
numbers of the same round. Then two consumers read the transactional topic by assignment of
every partition from the beginning, read_committed and read_uncommitted (alternating order),
timed from their first records until they have N; each must see exactly N records (the control
records of the commits are not returned to applications).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # BrokerProcess: a broker on random local ports

import confluent_kafka
from broker_process import BrokerProcess
from confluent_kafka.admin import AdminClient, NewTopic

NAME = "transactions"
PARTITIONS = 6
RECORD_SIZE = 100
TRANSACTION_MS = 100
PRODUCER = {"acks": "all", "linger.ms": 5}


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)


def _send_all(producer: confluent_kafka.Producer, topic: str, n: int, value: bytes,
              failures: list, until: float | None = None) -> int:
    """Sends up to n records (stopping at `until`, a perf_counter time); returns how many."""
    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    produce, poll = producer.produce, producer.poll
    sent = 0
    while sent < n:
        if until is not None and (sent & 255) == 0 and time.perf_counter() >= until:
            break
        try:
            produce(topic, value, on_delivery=delivered)
            sent += 1
        except BufferError:  # local queue full: serve delivery reports, as apps do
            poll(0.01)
    return sent


def produce_idempotent(bootstrap: str, topic: str, n: int) -> float:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         "enable.idempotence": True, **PRODUCER})
    failures: list = []
    started = time.perf_counter()
    _send_all(producer, topic, n, b"i" * RECORD_SIZE, failures)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert remaining == 0 and not failures, f"idempotent: {remaining} left, {failures[:3]}"
    return elapsed


def produce_transactional(bootstrap: str, topic: str, n: int) -> tuple[float, int]:
    """Returns the elapsed time and the number of transactions committed."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
        **PRODUCER})
    producer.init_transactions(30)
    failures: list = []
    value = b"t" * RECORD_SIZE
    sent = transactions = 0
    started = time.perf_counter()
    while sent < n:
        producer.begin_transaction()
        sent += _send_all(producer, topic, n - sent, value, failures,
                          until=time.perf_counter() + TRANSACTION_MS / 1000)
        producer.commit_transaction(60)
        transactions += 1
    elapsed = time.perf_counter() - started
    assert not failures, f"transactional: {failures[:3]}"
    return elapsed, transactions


def consume(bootstrap: str, topic: str, n: int, isolation: str) -> float:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-unused", "isolation.level": isolation,
        "enable.auto.commit": False, "enable.partition.eof": False,
        "fetch.queue.backoff.ms": 0})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    count = 0
    started = None
    deadline = time.monotonic() + 120
    while count < n and time.monotonic() < deadline:
        messages = consumer.consume(num_messages=10_000, timeout=1.0)
        if started is None and messages:
            started = time.perf_counter()
        for message in messages:
            if message.error() is None:
                count += 1
    elapsed = time.perf_counter() - started if started is not None else float("inf")
    # Nothing beyond the N records may arrive (no control record, no duplicate).
    extra = sum(1 for m in consumer.consume(num_messages=1000, timeout=0.5) if m.error() is None)
    consumer.close()
    assert count == n and extra == 0, f"{isolation}: consumed {count} (+{extra}) of {n}"
    return elapsed


def run(quick: bool = False, records: int | None = None) -> str:
    n = records or (100_000 if quick else 1_000_000)
    rounds = 2 if quick else 3
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="odradek-bench-txn-") as tmp:
        broker = BrokerProcess(Path(tmp)).start()
        try:
            for round_ in range(rounds):
                idem_topic, txn_topic = f"idem-{round_}", f"txn-{round_}"
                _create(broker.bootstrap, idem_topic)
                _create(broker.bootstrap, txn_topic)
                if round_ % 2 == 0:
                    idem = produce_idempotent(broker.bootstrap, idem_topic, n)
                    txn, count = produce_transactional(broker.bootstrap, txn_topic, n)
                else:
                    txn, count = produce_transactional(broker.bootstrap, txn_topic, n)
                    idem = produce_idempotent(broker.bootstrap, idem_topic, n)
                order = ["read_committed", "read_uncommitted"]
                if round_ % 2:
                    order.reverse()
                reads = {isolation: consume(broker.bootstrap, txn_topic, n, isolation)
                         for isolation in order}
                row = {"idem": n / idem, "txn": n / txn, "transactions": count,
                       "rc": n / reads["read_committed"], "ru": n / reads["read_uncommitted"]}
                rows.append(row)
                print(f"round {round_}: idempotent {row['idem']:,.0f}/s, transactional "
                      f"{row['txn']:,.0f}/s ({count} transactions), read_committed "
                      f"{row['rc']:,.0f}/s, read_uncommitted {row['ru']:,.0f}/s", flush=True)
        finally:
            broker.stop()
    produce_ratios = [r["txn"] / r["idem"] for r in rows]
    consume_ratios = [r["rc"] / r["ru"] for r in rows]

    def per_round(key: str) -> str:
        return ", ".join(f"{r[key] / 1000:,.0f}k" for r in rows)

    return "\n".join([
        "## Transactions",
        "",
        (f"`python -m bench transactions`{' --quick' if quick else ''}: {n:,} records of "
         f"{RECORD_SIZE} B per side and round, {PARTITIONS} partitions, one broker, "
         "confluent-kafka (librdkafka) producing and consuming; acks=all, linger.ms=5. "
         f"Transactions commit every {TRANSACTION_MS} ms. Records/s per round; ratios are "
         "taken within a round (method in `bench/transactions_bench.py`)."),
        "",
        "| path | records/s per round | ratio per round | median ratio | goal |",
        "|---|---|---|---|---|",
        f"| idempotent produce | {per_round('idem')} | | | |",
        (f"| transactional produce ({TRANSACTION_MS} ms transactions) | {per_round('txn')} | "
         f"{', '.join(f'{x:.2f}' for x in produce_ratios)} | "
         f"{statistics.median(produce_ratios):.2f} | >= 0.8 |"),
        f"| read_uncommitted consume of the transactional topic | {per_round('ru')} | | | |",
        (f"| read_committed consume of the same | {per_round('rc')} | "
         f"{', '.join(f'{x:.2f}' for x in consume_ratios)} | "
         f"{statistics.median(consume_ratios):.2f} | |"),
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    args = parser.parse_args()
    print(run(args.quick, args.records))


if __name__ == "__main__":
    main()
