"""Load generators for the quota tests and bench: a confluent-kafka producer or consumer
running flat out in a thread, recording when each byte arrived and the throttle times the
broker reported (librdkafka's statistics); and a sampler of what the broker itself accepted."""

from __future__ import annotations

import bisect
import json
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer
from server.raw_client import RawClient

from odradek.protocol import messages as m

RECORD = b"q" * 1000


@dataclass
class Load:
    """Bytes over time of one client, and the throttle times it was told."""

    events: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, cumulative)
    throttle_max_ms: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None

    def add(self, nbytes: int) -> None:
        total = self.events[-1][1] if self.events else 0
        self.events.append((time.monotonic(), total + nbytes))

    def on_stats(self, raw: str) -> None:
        for broker in json.loads(raw)["brokers"].values():
            self.throttle_max_ms = max(self.throttle_max_ms,
                                       broker.get("throttle", {}).get("max", 0))

    def bytes_at(self, when: float) -> int:
        index = bisect.bisect_right(self.events, (when, float("inf")))
        return self.events[index - 1][1] if index else 0

    def rate(self, start: float, end: float) -> float:
        """Bytes per second between two monotonic times."""
        return (self.bytes_at(end) - self.bytes_at(start)) / (end - start)

    def finish(self, timeout: float = 60) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)
        if self.error is not None:
            raise self.error


def _run(load: Load, body) -> Load:
    def guarded() -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - handed to the test by finish()
            load.error = exc
    load.thread = threading.Thread(target=guarded, daemon=True)
    load.thread.start()
    return load


def produce_flat_out(bootstrap: str, topic: str, client_id: str) -> Load:
    load = Load()

    def body() -> None:
        producer = Producer({
            "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
            # Small batches: the rate is measured in steps of one produce request.
            "batch.size": 64 * 1024, "queue.buffering.max.kbytes": 2048,
            "statistics.interval.ms": 500, "stats_cb": load.on_stats})

        def delivered(err, msg) -> None:
            if err is None:
                load.add(len(msg.value()))
        while not load.stop.is_set():
            try:
                producer.produce(topic, RECORD, callback=delivered)
            except BufferError:
                producer.poll(0.005)
                continue
            producer.poll(0)
        producer.flush(30)
    return _run(load, body)


def consume_flat_out(bootstrap: str, topic: str, client_id: str) -> Load:
    load = Load()

    def body() -> None:
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "client.id": client_id,
            "group.id": f"g-{client_id}", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "max.partition.fetch.bytes": 128 * 1024,
            "statistics.interval.ms": 500, "stats_cb": load.on_stats})
        consumer.subscribe([topic])
        try:
            while not load.stop.is_set():
                for message in consumer.consume(1000, timeout=0.2):
                    if message.error() is None:
                        load.add(len(message.value()))
        finally:
            consumer.close()
    return _run(load, body)


def accepted_by_broker(host: str, port: int, topic: str, interval: float = 0.1) -> Load:
    """The bytes of RECORD values the broker has appended to partition 0 of `topic`, sampled
    from its log end offset. A producer's delivery callbacks can run late and in bursts on a
    loaded machine (the client's thread waits for the CPU), which moves bytes from one side of
    a measuring window's edge to the other; the log end offset is the broker's own count, taken
    one round trip after the time recorded for it."""
    load = Load()
    L = m.ListOffsetsRequest

    def body() -> None:
        with RawClient(host, port) as client:
            while not load.stop.is_set():
                response = client.call(2, 7, L(replica_id=-1, isolation_level=0, topics=[
                    L.ListOffsetsTopic(name=topic, partitions=[
                        L.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
                when = time.monotonic()
                load.events.append((when, response.topics[0].partitions[0].offset * len(RECORD)))
                load.stop.wait(interval)
    return _run(load, body)


def alter_quota(client: RawClient, entity: list[tuple[str, str | None]], **values) -> None:
    """Sets (a number) or removes (None) quota keys of one entity; raises on an error."""
    A = m.AlterClientQuotasRequest
    response = client.call(49, 1, A(entries=[A.EntryData(
        entity=[A.EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
        ops=[A.OpData(key=key, value=float(value or 0), remove=value is None)
             for key, value in values.items()])]))
    errors = [(e.error_code, e.error_message) for e in response.entries if e.error_code]
    assert not errors, errors


def produce_flat_out_odradek(bootstrap: str, topic: str, client_id: str) -> Load:
    """The same with Odradek's own producer (which holds back while a broker throttles it)."""
    from odradek.client import Producer as OdradekProducer
    load = Load()

    def body() -> None:
        with OdradekProducer({"bootstrap.servers": bootstrap, "client.id": client_id,
                              "linger.ms": 5, "batch.size": 64 * 1024,
                              "buffer.memory": 2 * 1024 * 1024}) as producer:
            def delivered(metadata, error) -> None:
                if error is None:
                    load.add(len(RECORD))
            while not load.stop.is_set():
                producer.send(topic, RECORD, callback=delivered)
            # What is still queued is not measured: failed at once rather than sent at the quota.
            producer.close(0)
    return _run(load, body)
