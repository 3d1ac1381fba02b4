"""Kafka's quickstart, steps 3-5, with odradek's tools as processes (create and describe the
topic, write two events with the console producer, read them with the console consumer), then
the same events written and read with kcat."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

ODRADEK = [sys.executable, "-m", "odradek.cli.main"]
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
TOPIC = "quickstart-events"
EVENTS = ["This is my first event", "This is my second event"]


def run(*command: str, stdin: str | None = None, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), input=stdin, capture_output=True, text=True,
                          check=False, timeout=timeout)


@pytest.fixture(scope="module")
def quickstart(odradek_broker) -> str:
    """Steps 3 and 4: the topic exists and holds the two events."""
    bootstrap = odradek_broker.bootstrap
    created = run(*ODRADEK, "topics", "--create", "--topic", TOPIC, "--bootstrap-server",
                  bootstrap)
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"Created topic {TOPIC}.\n"
    produced = run(*ODRADEK, "console-producer", "--topic", TOPIC, "--bootstrap-server",
                   bootstrap, stdin="".join(f"{event}\n" for event in EVENTS))
    assert produced.returncode == 0, produced.stderr
    return bootstrap


def test_step3_describe_the_topic(quickstart):
    described = run(*ODRADEK, "topics", "--describe", "--topic", TOPIC, "--bootstrap-server",
                    quickstart)
    assert described.returncode == 0, described.stderr
    topic_line, partition_line = described.stdout.splitlines()
    assert re.fullmatch(rf"Topic: {TOPIC}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 1\t"
                        r"ReplicationFactor: 1\tConfigs: .*", topic_line)
    assert partition_line.startswith(f"\tTopic: {TOPIC}\tPartition: 0\tLeader: 1\t"
                                     "Replicas: 1\tIsr: 1")


def test_step5_read_the_events(quickstart):
    consumed = run(*ODRADEK, "console-consumer", "--topic", TOPIC, "--from-beginning",
                   "--max-messages", "2", "--bootstrap-server", quickstart)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == EVENTS
    assert "Processed a total of 2 messages" in consumed.stderr


def test_kcat_reads_what_odradek_wrote_and_odradek_reads_what_kcat_wrote(quickstart):
    more = ["kcat event one", "kcat event two"]
    produced = run(KCAT, "-b", quickstart, "-t", TOPIC, "-P", stdin="\n".join(more) + "\n")
    assert produced.returncode == 0, produced.stderr
    consumed = run(KCAT, "-b", quickstart, "-t", TOPIC, "-C", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == EVENTS + more
    ours = run(*ODRADEK, "console-consumer", "--topic", TOPIC, "--from-beginning",
               "--max-messages", "4", "--bootstrap-server", quickstart)
    assert ours.stdout.splitlines() == EVENTS + more
