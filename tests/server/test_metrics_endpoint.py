"""The metrics endpoint (`metrics.prometheus.listener`, server/metrics.py): a real broker
scraped over HTTP during a produce/consume load by confluent-kafka, its counters checked
against what the clients sent and read, and Kafka's metric names (as the Prometheus JMX
exporter names them) present."""

from __future__ import annotations

import math
import threading
import time
import urllib.request

import pytest
from broker_process import broker_with_metrics, wait_until
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from raw_client import RawClient

from odradek.config.broker import metrics_listener
from odradek.config.types import ConfigError
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.generated import create_topics_response as ct
from odradek.protocol.messages.generated import metadata_response as md
from odradek.protocol.messages.generated import offset_fetch_response as of
from odradek.protocol.records import build_batch
from odradek.server.request_metrics import RequestMetrics

TOPICS = {"metrics-a": 2, "metrics-b": 1}
MESSAGES = {"metrics-a": 3000, "metrics-b": 1000}

# The names Kafka dashboards and alerts use (docs/operations.md#metrics).
EXPECTED_NAMES = [
    "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_server_brokertopicmetrics_replicationbytesout_total",
    "kafka_network_requestmetrics_requests_total",
    *(f"kafka_network_requestmetrics_{part}" for part in (
        "requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems",
        "totaltimems")),
    "kafka_network_requestmetrics_totaltimems_count_total",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_underminisrpartitioncount",
    "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_controller_kafkacontroller_globalpartitioncount",
    "kafka_log_log_size",
    "kafka_server_delayedoperationpurgatory_purgatorysize",
    "kafka_coordinator_group_groupmetadatamanager_numgroups",
    "kafka_coordinator_group_groupmetadatamanager_numgroupsstable",
    "kafka_server_group_coordinator_metrics_consumer_group_count",
    "kafka_server_raftmetrics_current_leader",
    "kafka_server_raftmetrics_current_epoch",
    "kafka_server_raftmetrics_high_watermark",
    "kafka_server_raftmetrics_current_state",
    "kafka_server_raftmetrics_current_vote",
    "kafka_server_raftmetrics_log_end_offset",
    "kafka_server_raftmetrics_commit_latency_avg",
    "kafka_server_raftmetrics_commit_latency_max",
    "kafka_server_raftmetrics_poll_idle_ratio_avg",
    "kafka_network_requestmetrics_errors_total",
    "kafka_server_replicamanager_isrshrinks_total",
    "kafka_server_replicamanager_isrexpands_total",
    "kafka_server_replicamanager_failedisrupdates_total",
    "kafka_server_socket_server_metrics_connection_count",
    "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
    "kafka_network_socketserver_networkprocessoravgidle_percent",
]


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def by_label(samples, name: str, label: str) -> dict[str, float]:
    return {dict(key)[label]: v for (n, key), v in samples.items()
            if n == name and label in dict(key)}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with broker_with_metrics(tmp_path_factory.mktemp("metrics")) as broker:
        yield broker


def test_counters_follow_a_produce_and_consume_load(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)
                                       for name, partitions in TOPICS.items()]).values():
        future.result(30)
    before = scrape(broker.metrics_url)

    # Scrapes run all along the load, as Prometheus' would.
    scrapes: list[dict] = []
    done = threading.Event()

    def scraper() -> None:
        while not done.wait(0.05):
            scrapes.append(scrape(broker.metrics_url))

    thread = threading.Thread(target=scraper, daemon=True)
    thread.start()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "compression.type": "none"})
    for topic, count in MESSAGES.items():
        for i in range(count):
            producer.produce(topic, value=b"v" * (50 + i % 100), key=str(i).encode())
            if i % 500 == 0:
                producer.poll(0)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metrics-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(list(MESSAGES))
    consumed = {topic: 0 for topic in MESSAGES}

    def consume_all() -> bool:
        for message in consumer.consume(500, timeout=0.5):
            assert message.error() is None, message.error()
            consumed[message.topic()] += 1
        return consumed == MESSAGES

    wait_until(consume_all, 60, interval=0, message="every message consumed")
    consumer.commit(asynchronous=False)
    done.set()
    thread.join(15)
    assert len(scrapes) >= 2

    after = scrape(broker.metrics_url)
    messages_in = "kafka_server_brokertopicmetrics_messagesin_total"
    bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
    bytes_out = "kafka_server_brokertopicmetrics_bytesout_total"
    sizes = by_label(after, "kafka_log_log_size", "topic")
    log_bytes: dict[str, float] = {}
    for (name, labels), size in after.items():
        if name == "kafka_log_log_size":
            topic = dict(labels)["topic"]
            log_bytes[topic] = log_bytes.get(topic, 0) + size
    assert set(MESSAGES) <= set(sizes)
    for topic, count in MESSAGES.items():
        # Every record counted once, from the batch headers.
        assert value(after, messages_in, topic=topic) == count
        # Bytes in: the batches as the producer sent them, which the log stores as they came.
        assert value(after, bytes_in, topic=topic) == log_bytes[topic] > count * 50
        # One consumer read each batch once: the same bytes went out.
        assert value(after, bytes_out, topic=topic) == log_bytes[topic]
    # The all-topics series is the sum of the topics' (the offsets commit counts too).
    for name in (messages_in, bytes_in, bytes_out):
        per_topic = sum(v for (n, labels), v in after.items() if n == name and labels)
        assert value(after, name) == per_topic
        assert value(after, name) - value(before, name) >= sum(
            v for (n, labels), v in after.items()
            if n == name and dict(labels).get("topic") in MESSAGES)

    # Counters never go back between scrapes during the load.
    series = [s.get((messages_in, frozenset({("topic", "metrics-a")})), 0.0) for s in scrapes]
    assert series == sorted(series)

    # Counted per API and version, as Kafka's RequestsPerSec meters are.
    requests: dict[str, float] = {}
    for (name, labels), count in after.items():
        if name == "kafka_network_requestmetrics_requests_total":
            tags = dict(labels)
            assert tags.keys() == {"request", "version"} and tags["version"].isdigit()
            requests[tags["request"]] = requests.get(tags["request"], 0) + count
    assert requests["Produce"] >= 1 and requests["Fetch"] >= 1
    # Every Fetch counted a second time by its source, as Kafka's FetchConsumer/FetchFollower:
    # here only consumers fetch.
    assert requests["FetchConsumer"] == requests["Fetch"] and "FetchFollower" not in requests
    assert requests["Produce"] == value(
        after, "kafka_network_requestmetrics_totaltimems_count_total", request="Produce")
    assert value(after, "kafka_network_requestmetrics_totaltimems",
                 request="Produce", quantile="0.99") > 0
    assert value(after, "kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1


def test_gauges_describe_the_broker(broker):
    samples = scrape(broker.metrics_url)
    names = {name for name, _labels in samples}
    missing = [name for name in EXPECTED_NAMES if name not in names]
    assert not missing
    hosted = value(samples, "kafka_server_replicamanager_partitioncount")
    assert hosted == value(samples, "kafka_server_replicamanager_leadercount")  # one broker
    assert hosted == sum(1 for name, _ in samples if name == "kafka_log_log_size")
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(samples, "kafka_controller_kafkacontroller_activebrokercount") == 1
    assert value(samples, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
    assert value(samples, "kafka_server_raftmetrics_current_leader") == 1
    assert value(samples, "kafka_server_raftmetrics_current_vote") == 1  # the leader: itself
    # The metadata records committed since the start (topics created) were timed; the driver
    # mostly waits.
    commit_avg = value(samples, "kafka_server_raftmetrics_commit_latency_avg")
    assert 0 <= commit_avg <= value(samples, "kafka_server_raftmetrics_commit_latency_max")
    assert 0 <= value(samples, "kafka_server_raftmetrics_poll_idle_ratio_avg") <= 1
    # One broker: no ISR ever changes.
    for name in ("isrshrinks", "isrexpands", "failedisrupdates"):
        assert value(samples, f"kafka_server_replicamanager_{name}_total") == 0
    assert value(samples, "kafka_server_raftmetrics_current_state",
                 current_state="leader") == 1
    assert by_label(samples, "kafka_server_delayedoperationpurgatory_purgatorysize",
                    "delayedOperation").keys() == {"Produce", "Fetch"}
    # This scrape's own connection is HTTP: the broker's listener counts Kafka clients only.
    connections = by_label(samples, "kafka_server_socket_server_metrics_connection_count",
                           "listener")
    assert set(connections) == {"PLAINTEXT", "CONTROLLER"}
    idle = value(samples, "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent")
    assert 0 <= idle <= 1


def test_listener_config_is_checked():
    assert metrics_listener("http://127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert metrics_listener("http://:9404/metrics") == ("", 9404)
    for bad in ("127.0.0.1:9404", "https://host:9404", "http://host", "http://host:x",
                "http://host:9404/other"):
        with pytest.raises(ConfigError):
            metrics_listener(bad)


def test_off_by_default():
    from odradek.config.broker import BROKER_CONFIGS
    assert BROKER_CONFIGS["metrics.prometheus.listener"].default is None


def test_odradek_clients_report_kafka_client_metrics(broker):
    """Odradek's own Producer and Consumer: `metrics()` by Kafka's client metric names, agreeing
    with the broker's counters."""
    from odradek.client import Consumer as OdradekConsumer
    from odradek.client import Producer as OdradekProducer
    from odradek.client.types import TopicPartition

    topic, count = "metrics-odradek-client", 500
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    with OdradekProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20}) as producer:
        for i in range(count):
            producer.send(topic, b"%05d" % i)
        producer.flush(30)
        sent = producer.metrics()
    assert sent["record-send-total"] == count
    assert sent["record-send-rate"] > 0 and sent["request-latency-avg"] > 0

    with OdradekConsumer({"bootstrap.servers": broker.bootstrap,
                          "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        records: list = []
        wait_until(lambda: records.extend(consumer.poll(200)) or len(records) >= count, 30,
                   interval=0, message="the records")
        read = consumer.metrics()
    assert len(records) == count
    assert read["records-consumed-total"] == count
    assert read["records-lag-max"] == 0  # caught up with the high watermark
    assert read["fetch-total"] >= 1 and read["fetch-latency-max"] >= read["fetch-latency-avg"]
    samples = scrape(broker.metrics_url)
    assert read["bytes-consumed-total"] == value(
        samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total",
                 topic=topic) == count


def test_errors_in_responses_are_counted_per_api_and_error(broker):
    """Kafka's ErrorsPerSec: every error code in a response counted, NONE included -- one per
    partition of a Produce, answered or (acks=0) closing the connection -- and a Metadata
    response's partitions and topics only."""
    topic, errors = "metrics-errors", "kafka_network_requestmetrics_errors_total"
    batch = build_batch([(int(time.time() * 1000), None, b"v")])
    with RawClient(broker.host, broker.port) as client:
        client.create_topic(topic, 1)
        before = scrape(broker.metrics_url)
        produce = client.call(0, 9, m.ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[
            m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                m.ProduceRequest.PartitionProduceData(index=index, records=batch)
                for index in (0, 7)])]))
        assert [p.error_code for p in produce.responses[0].partition_responses] == [
            ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        metadata = client.metadata(["metrics-absent"], allow_auto_topic_creation=False)
        assert metadata.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # acks=0: no answer, the connection is closed -- and its errors count all the same.
    with RawClient(broker.host, broker.port) as client:
        client.send(0, 9, m.ProduceRequest(acks=0, timeout_ms=10_000, topic_data=[
            m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                m.ProduceRequest.PartitionProduceData(index=9, records=batch)])]))
        assert client.closed_by_peer()
    after = scrape(broker.metrics_url)

    def moved(request: str, error: str) -> float:
        return after.get((errors, frozenset({("request", request), ("error", error)})), 0) - \
            before.get((errors, frozenset({("request", request), ("error", error)})), 0)

    assert moved("Produce", "NONE") == 1
    assert moved("Produce", "UNKNOWN_TOPIC_OR_PARTITION") == 2
    assert moved("Metadata", "UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert moved("Metadata", "NONE") == 0  # the top-level error code is not counted (Kafka)
    # The topic's creation was answered before: counted in the earlier scrape.
    assert value(before, errors, request="CreateTopics", error="NONE") >= 1
    assert not any(math.isnan(v) for (name, _l), v in after.items() if name == errors)


def test_error_counts_are_kafkas_error_counts():
    """What each response counts, without a broker: the codes present at the response's
    version, a Metadata response's topics and partitions but not its top-level code, and no
    other `..._error_code` field (CreateTopics' topic_config_error_code)."""
    def counted(response, version: int) -> dict[int, int]:
        metrics = RequestMetrics()
        metrics.count_errors(response.API_KEY, version, response)
        return metrics.errors[response.API_KEY]

    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    metadata = m.MetadataResponse(error_code=ErrorCode.NONE, topics=[
        md.MetadataResponseTopic(name="a", error_code=unknown),
        md.MetadataResponseTopic(name="b", partitions=[
            md.MetadataResponsePartition(partition_index=i) for i in range(3)])])
    assert counted(metadata, 13) == {unknown: 1, ErrorCode.NONE: 4}
    create = m.CreateTopicsResponse(topics=[ct.CreatableTopicResult(
        name="a", error_code=ErrorCode.TOPIC_ALREADY_EXISTS,
        topic_config_error_code=ErrorCode.INVALID_REQUEST)])
    assert counted(create, 7) == {ErrorCode.TOPIC_ALREADY_EXISTS: 1}
    # OffsetFetch: the top-level code and topics up to v7, the groups' from v8.
    partitions = [of.OffsetFetchResponsePartitions(partition_index=0, error_code=unknown)]
    offsets = m.OffsetFetchResponse(
        error_code=ErrorCode.NOT_COORDINATOR,
        topics=[of.OffsetFetchResponseTopic(name="t", partitions=[
            of.OffsetFetchResponsePartition(partition_index=0)])],
        groups=[of.OffsetFetchResponseGroup(group_id="g", topics=[
            of.OffsetFetchResponseTopics(name="t", partitions=partitions)])])
    assert counted(offsets, 7) == {ErrorCode.NOT_COORDINATOR: 1, ErrorCode.NONE: 1}
    assert counted(offsets, 8) == {ErrorCode.NONE: 1, unknown: 1}
