"""Topic auto-creation on Metadata requests, per `auto.create.topics.enable` and the request's
`allow_auto_topic_creation`, with `num.partitions` partitions."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from broker_process import BrokerProcess
from raw_client import RawClient

from odradek.protocol.errors import ErrorCode

KCAT = shutil.which("kcat") or "/usr/bin/kcat"


@pytest.fixture(scope="module")
def enabled(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("auto-on"), {"num.partitions": "3"}).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def disabled(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("auto-off"),
                           {"auto.create.topics.enable": "false"}).start()
    yield broker
    broker.stop()


def _topics(client: RawClient) -> set[str]:
    return {t.name for t in client.metadata(None).topics}


def test_metadata_creates_missing_topics_with_num_partitions(enabled):
    with RawClient(enabled.host, enabled.port) as client:
        created = client.metadata(["auto-created"]).topics[0]
        assert created.error_code == 0 and len(created.partitions) == 3
        assert all(p.leader_id == 1 for p in created.partitions)
        assert "auto-created" in _topics(client)

        refused = client.metadata(["not-asked"], allow_auto_topic_creation=False).topics[0]
        assert refused.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        invalid = client.metadata(["no spaces allowed"]).topics[0]
        assert invalid.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert not {"not-asked", "no spaces allowed"} & _topics(client)


def test_kcat_produces_into_a_topic_it_names_first(enabled):
    produced = subprocess.run([KCAT, "-b", enabled.bootstrap, "-t", "kcat-auto", "-P", "-p", "2"],
                              input="one\ntwo\n", capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([KCAT, "-b", enabled.bootstrap, "-t", "kcat-auto", "-C", "-e",
                               "-q", "-p", "2"], capture_output=True, text=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["one", "two"]


def test_disabled_auto_creation_creates_nothing(disabled):
    with RawClient(disabled.host, disabled.port) as client:
        missing = client.metadata(["never-created"]).topics[0]
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "never-created" not in _topics(client)
        client.create_topic("explicit")  # CreateTopics still works
        assert client.metadata(["explicit"]).topics[0].error_code == 0
