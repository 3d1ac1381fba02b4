"""Cluster metadata the KRaft way: every admin change is a record in `__cluster_metadata`, and a
restart rebuilds the same cluster (topic ids, partitions, configs, deletions) by replaying them."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from odradek.protocol import messages as m
from odradek.protocol.records import iter_batches, iter_records


def _metadata_records(data_dir: Path) -> list[tuple[int, object]]:
    """(epoch, record) of every data record in the metadata log; control batches as
    (epoch, "LeaderChange")."""
    out: list[tuple[int, object]] = []
    for segment in sorted((data_dir / "__cluster_metadata-0").glob("*.log")):
        buf = segment.read_bytes()
        for pos, header in iter_batches(buf):
            if header.is_control:
                out.append((header.partition_leader_epoch, "LeaderChange"))
                continue
            for record in iter_records(buf, pos, header):
                out.append((header.partition_leader_epoch,
                            m.decode_metadata_record(record.value)[0]))
    return out


def _describe(admin: AdminClient, name: str):
    return admin.describe_topics(TopicCollection([name]))[name].result(30)


def _topic_id(admin: AdminClient, name: str) -> uuid.UUID:
    # librdkafka prints ids in standard base64, Kafka in URL-safe base64: compare the bits.
    topic_id = _describe(admin, name).topic_id
    bits = ((topic_id.get_most_significant_bits() << 64)
            | (topic_id.get_least_significant_bits() & (2**64 - 1)))
    return uuid.UUID(int=bits & (2**128 - 1))


def test_admin_changes_are_metadata_records_replayed_at_restart(fresh_broker):
    broker = fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("kept", 3, 1, config={"retention.ms": "1234567"})])[
        "kept"].result(30)
    admin.create_topics([NewTopic("dropped", 1, 1)])["dropped"].result(30)
    admin.delete_topics(["dropped"])["dropped"].result(30)
    admin.create_partitions([NewPartitions("kept", 5)])["kept"].result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "kept", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    kept_id = _topic_id(admin, "kept")
    del admin
    assert broker.stop() == 0

    records = _metadata_records(broker.data_dir)
    data = [r for _epoch, r in records if r != "LeaderChange"]
    kinds = [type(r).__name__ for r in data]
    # metadata.version, group.version and transaction.version (their 4.0-IV3 levels), then the
    # broker's registration
    assert kinds[:4] == ["FeatureLevelRecord"] * 3 + ["RegisterBrokerRecord"]
    assert {(r.name, r.feature_level) for r in data[:3]} == {
        ("metadata.version", 25), ("group.version", 1), ("transaction.version", 1)}
    topics = {r.name: r.topic_id for r in data if isinstance(r, m.TopicRecord)}
    assert set(topics) == {"kept", "dropped"}
    assert topics["kept"] == kept_id  # the id clients were given
    removed = [r.topic_id for r in data if isinstance(r, m.RemoveTopicRecord)]
    assert removed == [topics["dropped"]]
    kept_partitions = [r.partition_id for r in data
                       if isinstance(r, m.PartitionRecord) and r.topic_id == topics["kept"]]
    assert kept_partitions == [0, 1, 2, 3, 4]
    configs = [(r.resource_name, r.name, r.value) for r in data if isinstance(r, m.ConfigRecord)]
    assert ("kept", "retention.ms", "1234567") in configs
    assert configs[-1] == ("kept", "cleanup.policy", "compact")
    assert records[0] == (1, "LeaderChange")  # the first start is epoch 1
    epochs_before = max(epoch for epoch, _r in records)

    broker.start()
    assert max(epoch for epoch, _r in _metadata_records(broker.data_dir)) == epochs_before + 1
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_topics(timeout=10).topics
    assert "dropped" not in listed and len(listed["kept"].partitions) == 5
    assert _topic_id(admin, "kept") == kept_id
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "kept")])
    configs_now = next(iter(described.values())).result(30)
    assert configs_now["retention.ms"].value == "1234567"
    assert configs_now["cleanup.policy"].value == "compact"
    assert not (broker.data_dir / "dropped-0").exists()
    assert sorted(p.name for p in broker.data_dir.glob("kept-*")) == [
        f"kept-{i}" for i in range(5)]
