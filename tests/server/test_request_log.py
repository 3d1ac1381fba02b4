"""The request log (Kafka's kafka.request.logger) of a real broker process configured from a
log4j-style file: a DEBUG line per completed request, a WARN line for a connection closed
instead of answering, files rotated by size; and nothing formatted when it is off."""

from __future__ import annotations

import json
import logging
import re

from broker_process import BrokerProcess, wait_until
from raw_client import RawClient

from odradek.cli import log4j
from odradek.protocol import messages as m
from odradek.server import request_log

LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.requestAppender=org.apache.log4j.RollingFileAppender
log4j.appender.requestAppender.File=${kafka.logs.dir}/kafka-request.log
log4j.appender.requestAppender.MaxFileSize=4KB
log4j.appender.requestAppender.MaxBackupIndex=2
log4j.appender.requestAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.requestAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=DEBUG, requestAppender
log4j.additivity.kafka.request.logger=false
"""
COMPLETED = re.compile(r"\[.+\] DEBUG Completed request:(\{.*\}) \(kafka\.request\.logger\)")


def test_requests_logged_rotated_and_refusals_warned(tmp_path):
    config = tmp_path / "log4j.properties"
    config.write_text(LOG4J)
    logs = tmp_path / "logs"
    broker = BrokerProcess(tmp_path, env={
        "KAFKA_LOG4J_OPTS": f"-Dlog4j.configuration=file:{config}", "LOG_DIR": str(logs)})
    broker.start()
    try:
        request_file = logs / "kafka-request.log"
        with RawClient(broker.host, broker.port) as client:
            client.metadata([])

        def metadata_line():
            text = request_file.read_text() if request_file.exists() else ""
            return next((json.loads(match[1]) for match in COMPLETED.finditer(text)
                         if json.loads(match[1])["api"] == "Metadata"), None)

        wait_until(lambda: metadata_line() is not None, 20, message="the Metadata line")
        line = metadata_line()
        assert line["requestHeader"]["clientId"] == "raw-test"
        assert line["requestHeader"]["requestApiKey"] == 3
        assert (line["listener"], line["securityProtocol"], line["principal"],
                line["clientHost"]) == ("PLAINTEXT", "PLAINTEXT", "User:ANONYMOUS", "127.0.0.1")
        assert line["totalTimeMs"] >= 0 and line["connection"].startswith("PLAINTEXT-127.0.0.1:")

        # A controller-only API on a broker listener: Kafka closes the connection; logged WARN.
        with RawClient(broker.host, broker.port) as client:
            client.send(52, 0, m.VoteRequest(cluster_id=None, topics=[]))
            assert client.closed_by_peer()

        def warned() -> bool:
            texts = [p.read_text() for p in logs.glob("kafka-request.log*")]
            return any(re.search(r"WARN Closing connection PLAINTEXT-127\.0\.0\.1:\d+ "
                                 r"\(principal User:ANONYMOUS, client id raw-test\) after Vote "
                                 r"v0: ", text) for text in texts)

        wait_until(warned, 20, message="the WARN line")
        # Rotation: 4KB files, two backups kept.
        with RawClient(broker.host, broker.port) as client:
            for _ in range(60):
                client.metadata([])
        wait_until(lambda: (logs / "kafka-request.log.2").exists(), 20, message="rotation")
        assert not (logs / "kafka-request.log.3").exists()
        assert all(p.stat().st_size <= 4096 + 1024 for p in logs.glob("kafka-request.log*"))
        # additivity=false: request lines stay out of the broker's own log
        assert "Completed request" not in broker.log_path.read_text()
    finally:
        broker.stop()


def test_off_by_default_and_nothing_formatted():
    """Off unless configured (the root logger is at INFO); `enabled()` is the one check per
    request, and `closed` formats nothing below WARN."""
    logger = logging.getLogger(request_log.LOGGER_NAME)
    before = logger.level
    try:
        logger.setLevel(logging.INFO)
        assert not request_log.enabled()
        logger.setLevel(logging.ERROR)
        request_log.closed("c", "User:x", "reason", header=object())  # no header attribute read
        logger.setLevel(logging.DEBUG)
        assert request_log.enabled()
    finally:
        logger.setLevel(before)


def test_log4j_layout_and_options(tmp_path):
    assert log4j._format("[%d] %p %m (%c)%n") == \
        "[%(asctime)s] %(log4j_level)s %(message)s (%(name)s)"
    assert log4j._size("100MB") == 100 * 1024 * 1024
    assert log4j.config_path_from_env(
        {"KAFKA_LOG4J_OPTS": "-Dlog4j.configuration=file:/etc/odradek/log4j.properties"}) == \
        "/etc/odradek/log4j.properties"
    assert log4j.config_path_from_env({}) is None
