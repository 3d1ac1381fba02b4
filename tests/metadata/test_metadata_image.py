"""MetadataDelta: replaying each kind of metadata record onto an image, removals, and the
copy-on-write contract (the base image never changes; untouched sections are shared)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from odradek.metadata.image import (
    EMPTY_IMAGE,
    LEADER_NO_CHANGE,
    METADATA_VERSION_FEATURE,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
)
from odradek.protocol import messages as m

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def replay(image: MetadataImage, *records: Any, offset: int = -1, epoch: int = -1
           ) -> MetadataImage:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    delta.offset = offset
    delta.epoch = epoch
    return delta.apply()


def register(broker_id: int, *, epoch: int = 10, fenced: bool = True) -> m.RegisterBrokerRecord:
    return m.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=uuid.UUID(int=broker_id), broker_epoch=epoch,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(
            name="PLAINTEXT", host=f"h{broker_id}", port=9092, security_protocol=0)],
        features=[m.RegisterBrokerRecord.BrokerFeature(
            name=METADATA_VERSION_FEATURE, min_supported_version=1, max_supported_version=20)],
        rack="r1", fenced=fenced)


def topic(name: str = "orders", topic_id: uuid.UUID = TOPIC_ID, partitions: int = 2
          ) -> list[Any]:
    return [m.TopicRecord(name=name, topic_id=topic_id)] + [
        m.PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[1, 2], isr=[1, 2],
                          leader=1, leader_epoch=0, partition_epoch=0)
        for p in range(partitions)]


def config(resource_type: int, name: str, key: str, value: str | None) -> m.ConfigRecord:
    return m.ConfigRecord(resource_type=resource_type, resource_name=name, name=key,
                          value=value)


def test_feature_levels_are_set_and_removed_by_level_zero():
    image = replay(EMPTY_IMAGE, m.FeatureLevelRecord(name=METADATA_VERSION_FEATURE,
                                                     feature_level=20),
                   m.FeatureLevelRecord(name="kraft.version", feature_level=1))
    assert image.metadata_version == 20 and image.features["kraft.version"] == 1
    image = replay(image, m.FeatureLevelRecord(name="kraft.version", feature_level=0))
    assert dict(image.features) == {METADATA_VERSION_FEATURE: 20}
    assert EMPTY_IMAGE.metadata_version == 0


def test_broker_registration_fencing_and_unregistration():
    image = replay(EMPTY_IMAGE, register(1), register(2))
    broker = image.brokers[1]
    assert broker.fenced and broker.epoch == 10 and broker.rack == "r1"
    assert broker.incarnation_id == uuid.UUID(int=1)
    endpoint = broker.endpoint("PLAINTEXT")
    assert endpoint is not None and (endpoint.host, endpoint.port) == ("h1", 9092)
    assert broker.endpoint("SSL") is None
    assert broker.features[METADATA_VERSION_FEATURE] == (1, 20)

    image = replay(image, m.UnfenceBrokerRecord(id=1, epoch=10))
    assert not image.brokers[1].fenced and image.brokers[2].fenced
    image = replay(image, m.FenceBrokerRecord(id=1, epoch=10))
    assert image.brokers[1].fenced
    image = replay(image, m.UnfenceBrokerRecord(id=99, epoch=1))  # unknown broker: ignored
    assert set(image.brokers) == {1, 2}

    # Kafka's BrokerRegistrationFencingChange: 1 fences, -1 unfences, 0 (the default) keeps.
    image = replay(image, m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10,
                                                           fenced=-1, in_controlled_shutdown=1))
    assert not image.brokers[1].fenced and image.brokers[1].in_controlled_shutdown
    image = replay(image, m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10))
    assert not image.brokers[1].fenced and image.brokers[1].in_controlled_shutdown
    image = replay(image, m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10,
                                                           fenced=1))
    assert image.brokers[1].fenced and image.brokers[1].in_controlled_shutdown

    image = replay(image, m.UnregisterBrokerRecord(broker_id=2, broker_epoch=10))
    assert set(image.brokers) == {1}
    # A re-registration replaces the old one (new epoch, fenced again).
    image = replay(image, register(1, epoch=42))
    assert image.brokers[1].epoch == 42 and image.brokers[1].fenced
    assert not image.brokers[1].in_controlled_shutdown


def test_topic_and_partition_records_build_a_topic():
    image = replay(EMPTY_IMAGE, *topic(partitions=3))
    orders = image.topic("orders")
    assert orders is not None and orders.topic_id == TOPIC_ID and not orders.internal
    assert image.topics_by_id[TOPIC_ID] is orders
    assert sorted(orders.partitions) == [0, 1, 2]
    assert orders.partitions[0] == PartitionRegistration(
        replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=0, partition_epoch=0)
    assert replay(EMPTY_IMAGE, m.TopicRecord(name="__consumer_offsets",
                                             topic_id=uuid.uuid4())).topic(
        "__consumer_offsets").internal


def test_partitions_added_by_a_later_delta_keep_the_earlier_ones():
    image = replay(EMPTY_IMAGE, *topic(partitions=1))
    image = replay(image, m.PartitionRecord(partition_id=1, topic_id=TOPIC_ID, replicas=[2],
                                            isr=[2], leader=2, leader_epoch=0,
                                            partition_epoch=0))
    assert sorted(image.topics_by_name["orders"].partitions) == [0, 1]
    assert image.topics_by_name["orders"].partitions[1].leader == 2


def test_partition_change_bumps_the_epochs():
    image = replay(EMPTY_IMAGE, *topic(partitions=1))
    image = replay(image, m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=[1]))
    part = image.topics_by_name["orders"].partitions[0]
    assert part.isr == (1,) and part.leader == 1
    assert (part.leader_epoch, part.partition_epoch) == (0, 1)  # leader unchanged (-2)
    image = replay(image, m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=2,
                                                  isr=[2], replicas=[2, 3],
                                                  adding_replicas=[3],
                                                  leader_recovery_state=1))
    part = image.topics_by_name["orders"].partitions[0]
    assert (part.leader, part.leader_epoch, part.partition_epoch) == (2, 1, 2)
    assert part.replicas == (2, 3) and part.adding_replicas == (3,)
    assert part.leader_recovery_state == 1
    assert LEADER_NO_CHANGE == -2


def test_partition_change_of_an_unknown_topic_is_an_error():
    with pytest.raises(KeyError):
        replay(EMPTY_IMAGE, m.PartitionChangeRecord(partition_id=0, topic_id=uuid.uuid4()))


def test_remove_topic_drops_the_topic_and_its_configs():
    other = uuid.uuid4()
    image = replay(EMPTY_IMAGE, *topic(), *topic("other", other),
                   config(RESOURCE_TOPIC, "orders", "retention.ms", "1000"),
                   config(RESOURCE_TOPIC, "other", "retention.ms", "2000"))
    image = replay(image, m.RemoveTopicRecord(topic_id=TOPIC_ID))
    assert set(image.topics_by_name) == {"other"} and set(image.topics_by_id) == {other}
    assert image.topic_config("orders") == {}
    assert image.topic_config("other") == {"retention.ms": "2000"}
    # Removing an unknown topic changes nothing.
    assert set(replay(image, m.RemoveTopicRecord(topic_id=uuid.uuid4())).topics_by_name) == {
        "other"}


def test_a_topic_created_and_removed_in_one_delta_leaves_nothing():
    image = replay(EMPTY_IMAGE, *topic(), m.RemoveTopicRecord(topic_id=TOPIC_ID))
    assert image.topics_by_name == {} and image.topics_by_id == {}


def test_config_records_set_and_delete_and_broker_configs_merge():
    image = replay(EMPTY_IMAGE, *topic(),
                   config(RESOURCE_TOPIC, "orders", "retention.ms", "1000"),
                   config(RESOURCE_TOPIC, "orders", "cleanup.policy", "compact"),
                   config(RESOURCE_BROKER, "", "log.retention.ms", "5"),
                   config(RESOURCE_BROKER, "", "num.io.threads", "4"),
                   config(RESOURCE_BROKER, "1", "log.retention.ms", "7"))
    assert image.topic_config("orders") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert image.broker_config(None) == {"log.retention.ms": "5", "num.io.threads": "4"}
    assert image.broker_config(1) == {"log.retention.ms": "7", "num.io.threads": "4"}
    assert image.broker_config(2) == {"log.retention.ms": "5", "num.io.threads": "4"}

    image = replay(image, config(RESOURCE_TOPIC, "orders", "retention.ms", None),
                   config(RESOURCE_BROKER, "1", "log.retention.ms", None),
                   config(RESOURCE_BROKER, "9", "absent", None))  # deleting nothing is fine
    assert image.topic_config("orders") == {"cleanup.policy": "compact"}
    assert (RESOURCE_BROKER, "1") not in image.configs  # an emptied section goes away
    assert (RESOURCE_BROKER, "9") not in image.configs
    assert image.topic_config("unknown") == {}


def test_producer_ids_record_moves_the_next_block():
    image = replay(EMPTY_IMAGE, m.ProducerIdsRecord(broker_id=1, broker_epoch=5,
                                                    next_producer_id=1000))
    assert image.next_producer_id == 1000
    image = replay(image, m.ProducerIdsRecord(broker_id=1, broker_epoch=5,
                                              next_producer_id=2000))
    assert image.next_producer_id == 2000
    assert replay(image, *topic()).next_producer_id == 2000


def test_client_quota_records_set_and_remove():
    user = [m.ClientQuotaRecord.EntityData(entity_type="user", entity_name="alice")]
    image = replay(EMPTY_IMAGE,
                   m.ClientQuotaRecord(entity=user, key="producer_byte_rate", value=1024.0),
                   m.ClientQuotaRecord(entity=user, key="consumer_byte_rate", value=2048.0))
    key = (("user", "alice"),)
    assert dict(image.client_quotas[key]) == {"producer_byte_rate": 1024.0,
                                              "consumer_byte_rate": 2048.0}
    image = replay(image, m.ClientQuotaRecord(entity=user, key="producer_byte_rate",
                                              remove=True))
    assert dict(image.client_quotas[key]) == {"consumer_byte_rate": 2048.0}
    image = replay(image, m.ClientQuotaRecord(entity=user, key="consumer_byte_rate",
                                              remove=True))
    assert key not in image.client_quotas


def test_records_the_image_does_not_track_are_skipped():
    image = replay(EMPTY_IMAGE, m.NoOpRecord(), offset=3)
    assert image.offset == 3 and image.topics_by_name == {} and image.brokers == {}


def test_the_base_image_is_never_changed_and_untouched_sections_are_shared():
    base = replay(EMPTY_IMAGE, register(1), *topic(),
                  config(RESOURCE_TOPIC, "orders", "retention.ms", "1"),
                  m.FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=20),
                  offset=5, epoch=1)
    snapshot = (dict(base.brokers), dict(base.topics_by_id), dict(base.configs[
        (RESOURCE_TOPIC, "orders")]), dict(base.features))

    changed = replay(base, m.UnfenceBrokerRecord(id=1, epoch=10),
                     config(RESOURCE_TOPIC, "orders", "retention.ms", "2"),
                     m.RemoveTopicRecord(topic_id=TOPIC_ID), offset=6)
    assert (dict(base.brokers), dict(base.topics_by_id), dict(base.configs[
        (RESOURCE_TOPIC, "orders")]), dict(base.features)) == snapshot
    assert base.brokers[1].fenced and not changed.brokers[1].fenced
    assert changed.topics_by_name == {} and "orders" in base.topics_by_name

    only_brokers = replay(base, m.UnfenceBrokerRecord(id=1, epoch=10))
    assert only_brokers.topics_by_id is base.topics_by_id
    assert only_brokers.topics_by_name is base.topics_by_name
    assert only_brokers.configs is base.configs and only_brokers.features is base.features
    assert only_brokers.client_quotas is base.client_quotas
    # An untouched topic keeps its partitions object when another topic changes.
    other = replay(base, *topic("other", uuid.uuid4()))
    assert other.topics_by_id[TOPIC_ID].partitions is base.topics_by_id[TOPIC_ID].partitions


def test_offset_and_epoch_only_move_forward():
    image = replay(EMPTY_IMAGE, *topic(), offset=10, epoch=3)
    assert (image.offset, image.epoch) == (10, 3)
    assert (replay(image, offset=12, epoch=4).offset, replay(image, epoch=4).epoch) == (12, 4)
    kept = replay(image)  # a delta without offset/epoch keeps the base's
    assert (kept.offset, kept.epoch) == (10, 3)
