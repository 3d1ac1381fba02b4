"""The workload: librdkafka (confluent-kafka) clients recording what they see in the history.

- ProducerWorker: an idempotent `acks=all` producer sending unique values `<name>-<seq>` at a
  fixed rate, round-robin over the partitions; its delivery callback records every
  acknowledgement (value, partition, offset) and every failure. A fatal client error (e.g. the
  broker lost the producer's sequence state) is recorded, and a new producer takes over so the
  run goes on.
- ConsumerSession: one consumer assigned every partition from offset 0 (no group management,
  no commits, default isolation) recording every (partition, offset, value) it polls; it reads
  until told to stop and then until it has reached its targets (the log end when it was told,
  and every acknowledged offset), within a bounded time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from faults.history import History

# Let the clients find a new leader quickly; a record may wait out outages of this long.
METADATA_REFRESH_MS = 1000
MESSAGE_TIMEOUT_MS = 60_000
# A request to a paused or cut-off broker gets no answer and no reset: give up on it after this
# (librdkafka's defaults, 30 s and 60 s, would hide a failover behind the client's own wait).
REQUEST_TIMEOUT_MS = 5000


def client_logger(path: Path | None) -> logging.Logger:
    """librdkafka's own log lines (connection failures and such: expected under faults) go to
    `path` instead of stderr; errors that matter are recorded in the history by error_cb."""
    logger = logging.getLogger(f"faults.clients.{path}")
    logger.propagate = False
    if path is not None and not logger.handlers:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger


class ProducerWorker(threading.Thread):
    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, rate: float,
                 history: History, extra_config: dict[str, object] | None = None,
                 client_log: Path | None = None) -> None:
        super().__init__(name=f"producer-{name}", daemon=True)
        self.logger = client_logger(client_log)
        self.process = name
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.history = history
        self.extra_config = extra_config or {}
        self._stop_event = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None
        self._fatal = threading.Event()

    def _config(self) -> dict[str, object]:
        return {
            "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
            "socket.connection.setup.timeout.ms": 3000,
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "error_cb": self._on_error,
            "logger": self.logger,
            **({"debug": os.environ["ODRADEK_FAULTS_CLIENT_DEBUG"]}
               if os.environ.get("ODRADEK_FAULTS_CLIENT_DEBUG") else {}),
            **self.extra_config,
        }

    def _on_error(self, error: KafkaError) -> None:
        self.history.record("client-error", process=self.process, error=str(error),
                            fatal=error.fatal())
        if error.fatal():
            self._fatal.set()

    def _on_delivery(self, error: KafkaError | None, message) -> None:
        value = message.value().decode()
        if error is None:
            self.history.record("ack", process=self.process, value=value,
                                partition=message.partition(), offset=message.offset())
        else:
            self.history.record("fail", process=self.process, value=value,
                                partition=message.partition(), error=str(error))

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as error:  # noqa: BLE001 - reported by the scenario
            self.error = error

    def _run(self) -> None:
        producer = Producer(self._config())
        started = time.monotonic()
        while not self._stop_event.is_set():
            if self._fatal.is_set():  # the old producer is unusable: fail its queue, start anew
                producer.flush(5)
                producer = Producer(self._config())
                self._fatal.clear()
                self.history.record("client-error", process=self.process,
                                    error="replaced the producer after a fatal error",
                                    fatal=False)
            value = f"{self.process}-{self.sent}"
            partition = self.sent % self.partitions
            try:
                producer.produce(self.topic, value=value.encode(), partition=partition,
                                 on_delivery=self._on_delivery)
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
                continue
            self.history.record("invoke", process=self.process, value=value,
                                partition=partition)
            self.sent += 1
            producer.poll(0)
            # pace to `rate` records a second (wait for the next slot, serving callbacks)
            next_slot = started + self.sent / self.rate
            while (wait := next_slot - time.monotonic()) > 0 and not self._stop_event.is_set():
                producer.poll(min(wait, 0.05))
        # every record either acknowledged or failed before we stop (bounded by its timeout)
        remaining = producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 10)
        if remaining:
            self.history.record("client-error", process=self.process,
                                error=f"{remaining} records undelivered at exit", fatal=False)


class ConsumerSession(threading.Thread):
    """Reads every partition from offset 0. `targets()` (asked once `finish()` is called) gives
    the offset each partition must be read up to; the session ends when it gets there or
    `deadline_s` after finish()."""

    def __init__(self, session: str, bootstrap: str, topic: str, partitions: int,
                 history: History, final: bool, deadline_s: float = 60.0,
                 targets: Callable[[], dict[int, int]] | None = None,
                 client_log: Path | None = None) -> None:
        super().__init__(name=f"consumer-{session}", daemon=True)
        self.logger = client_logger(client_log)
        self.session = session
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = history
        self.final = final
        self.deadline_s = deadline_s
        self.targets_fn = targets
        self.positions: dict[int, int] = {p: 0 for p in range(partitions)}
        self.values = 0
        self.complete = False
        self.error: BaseException | None = None
        self._finish = threading.Event()

    def finish(self) -> None:
        self._finish.set()

    def _on_error(self, error: KafkaError) -> None:
        self.history.record("client-error", session=self.session, error=str(error),
                            fatal=error.fatal())

    def run(self) -> None:
        try:
            self._run()
        except BaseException as error:  # noqa: BLE001
            self.error = error

    def end_offsets(self, consumer: Consumer) -> dict[int, int]:
        """Each partition's high watermark (-1 where the broker did not answer in time)."""
        ends = {}
        for partition in range(self.partitions):
            try:
                ends[partition] = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=5)[1]
            except Exception:  # noqa: BLE001 - unavailable: the acked targets still apply
                ends[partition] = -1
        return ends

    def _run(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": f"faults-{self.session}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "socket.connection.setup.timeout.ms": 3000,
            "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
            "reconnect.backoff.max.ms": 1000,
            "error_cb": self._on_error,
            "logger": self.logger,
        })
        self.history.record("session", session=self.session, final=self.final, start=0)
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                         for p in range(self.partitions)])
        targets: dict[int, int] | None = None
        deadline = None
        try:
            while True:
                for message in consumer.consume(num_messages=500, timeout=0.2):
                    if message.error():
                        if message.error().code() != KafkaError._PARTITION_EOF:
                            self._on_error(message.error())
                        continue
                    partition, offset = message.partition(), message.offset()
                    self.history.record("poll", session=self.session, partition=partition,
                                        offset=offset, value=message.value().decode())
                    self.positions[partition] = offset + 1
                    self.values += 1
                if self._finish.is_set() and targets is None:
                    ends = self.end_offsets(consumer)
                    asked = self.targets_fn() if self.targets_fn else {}
                    targets = {p: max(ends.get(p, -1), asked.get(p, 0))
                               for p in range(self.partitions)}
                    deadline = time.monotonic() + self.deadline_s
                if targets is not None:
                    if all(self.positions[p] >= end for p, end in targets.items()):
                        self.complete = True
                        break
                    if time.monotonic() >= deadline:  # type: ignore[operator]
                        break
        finally:
            self.history.record("session-end", session=self.session, complete=self.complete,
                                positions=self.positions, targets=targets)
            consumer.close()
