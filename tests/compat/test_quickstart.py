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


def test_kcat_describes_the_topic(quickstart):
    """kcat's view of step 3: the metadata listing of the topic."""
    listed = run(KCAT, "-L", "-b", quickstart, "-t", TOPIC)
    assert listed.returncode == 0, listed.stderr
    lines = [line.strip() for line in listed.stdout.splitlines()]
    assert f"broker 1 at {quickstart} (controller)" in lines
    assert f'topic "{TOPIC}" with 1 partitions:' in lines
    assert "partition 0, leader 1, replicas: 1, isrs: 1" in lines


def test_kcat_quickstart_on_a_topic_of_its_own(quickstart):
    """Steps 4-5 with kcat alone on a new topic (created by kcat's first produce, as Kafka's
    auto.create.topics.enable does), keys included, read back with keys and offsets."""
    topic = "kcat-quickstart"
    produced = run(KCAT, "-b", quickstart, "-t", topic, "-P", "-K", ":",
                   stdin="k1:This is my first event\nk2:This is my second event\n")
    assert produced.returncode == 0, produced.stderr
    consumed = run(KCAT, "-b", quickstart, "-t", topic, "-C", "-e", "-q", "-f", "%o %k %s\n")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["0 k1 This is my first event",
                                            "1 k2 This is my second event"]
    described = run(*ODRADEK, "topics", "--describe", "--topic", topic, "--bootstrap-server",
                    quickstart)
    assert described.returncode == 0, described.stderr
    assert described.stdout.startswith(f"Topic: {topic}\tTopicId: ")
