"""The cluster metadata image: an immutable picture of the cluster, built by replaying records.

Like Kafka's MetadataImage/MetadataDelta: the `__cluster_metadata` log is the source of truth;
`MetadataDelta` replays records on top of an image and `apply()` yields the next image. Readers
(request handlers) hold an image reference and never see a half-applied change.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from odradek.config.listeners import Endpoint
from odradek.protocol import messages as m
from odradek.security.acl import AclBinding, binding
from odradek.security.scram import ScramCredential

# ConfigResource types, as in DescribeConfigs / ConfigRecord.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32

NO_LEADER = -1
LEADER_NO_CHANGE = -2  # PartitionChangeRecord.Leader default: leader unchanged

METADATA_VERSION_FEATURE = "metadata.version"

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return _EMPTY


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: Mapping[str, Endpoint]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False
    features: Mapping[str, tuple[int, int]] = field(default_factory=_empty)

    def endpoint(self, listener: str) -> Endpoint | None:
        return self.endpoints.get(listener)


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    # KIP-966: replicas that left the ISR while it was below min.insync.replicas (still
    # eligible to lead), and the last known ELR / leader.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    def offline_replicas(self, live_brokers: Mapping[int, BrokerRegistration]) -> list[int]:
        return [r for r in self.replicas if r not in live_brokers or live_brokers[r].fenced]


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Everything a broker knows about the cluster, as of metadata log `offset`."""

    offset: int = -1
    epoch: int = -1
    features: Mapping[str, int] = field(default_factory=_empty)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=_empty)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=_empty)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=_empty)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=_empty)
    next_producer_id: int = 0
    client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(default_factory=_empty)
    # user -> SCRAM mechanism id (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) -> credential
    scram_credentials: Mapping[str, Mapping[int, ScramCredential]] = field(default_factory=_empty)
    # ACL id (AccessControlEntryRecord.Id) -> binding; a new mapping whenever ACLs change
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=_empty)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_config(self, name: str) -> Mapping[str, str]:
        return self.configs.get((RESOURCE_TOPIC, name), _EMPTY)

    def broker_config(self, broker_id: int | None) -> Mapping[str, str]:
        """Dynamic broker configs: cluster-wide defaults (empty name) overlaid by per-broker."""
        merged = dict(self.configs.get((RESOURCE_BROKER, ""), _EMPTY))
        if broker_id is not None:
            merged.update(self.configs.get((RESOURCE_BROKER, str(broker_id)), _EMPTY))
        return merged

    @property
    def metadata_version(self) -> int:
        return self.features.get(METADATA_VERSION_FEATURE, 0)


EMPTY_IMAGE = MetadataImage()


def _intern_tuple(values: Any) -> tuple[int, ...]:
    return tuple(values) if values is not None else ()


@dataclass
class MetadataDelta:
    """Accumulates replayed records over a base image; `apply()` builds the next image."""

    image: MetadataImage
    _features: dict[str, int] | None = None
    _brokers: dict[int, BrokerRegistration] | None = None
    _topics: dict[uuid.UUID, TopicImage] | None = None
    _changed_topics: dict[uuid.UUID, dict[int, PartitionRegistration]] = field(
        default_factory=dict
    )
    _topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    _configs: dict[tuple[int, str], dict[str, str]] | None = None
    _next_producer_id: int | None = None
    _client_quotas: dict | None = None
    _scram: dict[str, dict[int, ScramCredential]] | None = None
    _acls: dict[uuid.UUID, AclBinding] | None = None
    offset: int = -1
    epoch: int = -1

    # -- lazily copied sections (copy-on-write: untouched sections are shared with the base)
    def _features_w(self) -> dict[str, int]:
        if self._features is None:
            self._features = dict(self.image.features)
        return self._features

    def _brokers_w(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.image.brokers)
        return self._brokers

    def _topics_w(self) -> dict[uuid.UUID, TopicImage]:
        if self._topics is None:
            self._topics = dict(self.image.topics_by_id)
        return self._topics

    def _configs_w(self) -> dict[tuple[int, str], dict[str, str]]:
        if self._configs is None:
            self._configs = {k: dict(v) for k, v in self.image.configs.items()}
        return self._configs

    def _partitions_w(self, topic_id: uuid.UUID) -> dict[int, PartitionRegistration]:
        parts = self._changed_topics.get(topic_id)
        if parts is None:
            topic = self._topics_w().get(topic_id)
            if topic is None:
                raise KeyError(f"unknown topic id {topic_id}")
            parts = dict(topic.partitions)
            self._changed_topics[topic_id] = parts
        return parts

    # -- replay
    def replay(self, record: Any) -> None:
        handler = _REPLAYERS.get(type(record).__name__)
        if handler is not None:
            handler(self, record)
        # Records Odradek does not act on yet (delegation tokens...) are kept in
        # the log and skipped here, so a later version can replay them.

    def _replay_FeatureLevelRecord(self, r: m.FeatureLevelRecord) -> None:
        features = self._features_w()
        if r.feature_level == 0:
            features.pop(r.name, None)
        else:
            features[r.name] = r.feature_level

    def _replay_RegisterBrokerRecord(self, r: m.RegisterBrokerRecord) -> None:
        endpoints = {
            e.name: Endpoint.registered(e.name, e.host, e.port, e.security_protocol)
            for e in r.end_points
        }
        features = {
            f.name: (f.min_supported_version, f.max_supported_version) for f in r.features
        }
        self._brokers_w()[r.broker_id] = BrokerRegistration(
            broker_id=r.broker_id,
            incarnation_id=r.incarnation_id,
            epoch=r.broker_epoch,
            endpoints=MappingProxyType(endpoints),
            rack=r.rack,
            fenced=r.fenced,
            in_controlled_shutdown=r.in_controlled_shutdown,
            features=MappingProxyType(features),
        )

    def _replay_UnregisterBrokerRecord(self, r: m.UnregisterBrokerRecord) -> None:
        self._brokers_w().pop(r.broker_id, None)

    def _set_fenced(self, broker_id: int, fenced: bool) -> None:
        brokers = self._brokers_w()
        reg = brokers.get(broker_id)
        if reg is not None:
            brokers[broker_id] = replace(reg, fenced=fenced)

    def _replay_FenceBrokerRecord(self, r: m.FenceBrokerRecord) -> None:
        self._set_fenced(r.id, True)

    def _replay_UnfenceBrokerRecord(self, r: m.UnfenceBrokerRecord) -> None:
        self._set_fenced(r.id, False)

    def _replay_BrokerRegistrationChangeRecord(self, r: m.BrokerRegistrationChangeRecord) -> None:
        brokers = self._brokers_w()
        reg = brokers.get(r.broker_id)
        if reg is None:
            return
        changes: dict[str, Any] = {}
        # Kafka's BrokerRegistrationFencingChange: 1 fence, -1 unfence, 0 (default) no change.
        if r.fenced in (1, -1):
            changes["fenced"] = r.fenced == 1
        # BrokerRegistrationInControlledShutdownChange: 1 enters it, 0 (default) no change;
        # only a new registration leaves it.
        if r.in_controlled_shutdown == 1:
            changes["in_controlled_shutdown"] = True
        if changes:
            brokers[r.broker_id] = replace(reg, **changes)

    def _replay_TopicRecord(self, r: m.TopicRecord) -> None:
        self._topics_w()[r.topic_id] = TopicImage(r.name, r.topic_id, _EMPTY)
        self._changed_topics[r.topic_id] = {}

    def _replay_PartitionRecord(self, r: m.PartitionRecord) -> None:
        self._partitions_w(r.topic_id)[r.partition_id] = PartitionRegistration(
            replicas=_intern_tuple(r.replicas),
            isr=_intern_tuple(r.isr),
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch,
            removing_replicas=_intern_tuple(r.removing_replicas),
            adding_replicas=_intern_tuple(r.adding_replicas),
            leader_recovery_state=r.leader_recovery_state,
            elr=_intern_tuple(r.eligible_leader_replicas),
            last_known_elr=_intern_tuple(r.last_known_elr),
        )

    def _replay_PartitionChangeRecord(self, r: m.PartitionChangeRecord) -> None:
        parts = self._partitions_w(r.topic_id)
        old = parts[r.partition_id]
        changes: dict[str, Any] = {"partition_epoch": old.partition_epoch + 1}
        if r.isr is not None:
            changes["isr"] = tuple(r.isr)
        if r.replicas is not None:
            changes["replicas"] = tuple(r.replicas)
        if r.removing_replicas is not None:
            changes["removing_replicas"] = tuple(r.removing_replicas)
        if r.adding_replicas is not None:
            changes["adding_replicas"] = tuple(r.adding_replicas)
        if r.leader != LEADER_NO_CHANGE:
            changes["leader"] = r.leader
            changes["leader_epoch"] = old.leader_epoch + 1
        if r.leader_recovery_state != -1:
            changes["leader_recovery_state"] = r.leader_recovery_state
        if r.eligible_leader_replicas is not None:
            changes["elr"] = tuple(r.eligible_leader_replicas)
        if r.last_known_elr is not None:
            changes["last_known_elr"] = tuple(r.last_known_elr)
        parts[r.partition_id] = replace(old, **changes)

    def _replay_RemoveTopicRecord(self, r: m.RemoveTopicRecord) -> None:
        topic = self._topics_w().pop(r.topic_id, None)
        self._changed_topics.pop(r.topic_id, None)
        if topic is not None:
            self._configs_w().pop((RESOURCE_TOPIC, topic.name), None)

    def _replay_ConfigRecord(self, r: m.ConfigRecord) -> None:
        configs = self._configs_w()
        key = (r.resource_type, r.resource_name)
        if r.value is None:
            section = configs.get(key)
            if section is not None:
                section.pop(r.name, None)
                if not section:
                    del configs[key]
        else:
            configs.setdefault(key, {})[r.name] = r.value

    def _replay_ProducerIdsRecord(self, r: m.ProducerIdsRecord) -> None:
        self._next_producer_id = r.next_producer_id

    def _replay_ClientQuotaRecord(self, r: m.ClientQuotaRecord) -> None:
        if self._client_quotas is None:
            self._client_quotas = {k: dict(v) for k, v in self.image.client_quotas.items()}
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in r.entity))
        section = self._client_quotas.setdefault(entity, {})
        if r.remove:
            section.pop(r.key, None)
            if not section:
                del self._client_quotas[entity]
        else:
            section[r.key] = r.value

    def _scram_w(self) -> dict[str, dict[int, ScramCredential]]:
        if self._scram is None:
            self._scram = {user: dict(creds)
                           for user, creds in self.image.scram_credentials.items()}
        return self._scram

    def _replay_UserScramCredentialRecord(self, r: m.UserScramCredentialRecord) -> None:
        self._scram_w().setdefault(r.name, {})[r.mechanism] = ScramCredential(
            bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations)

    def _replay_RemoveUserScramCredentialRecord(
            self, r: m.RemoveUserScramCredentialRecord) -> None:
        credentials = self._scram_w()
        section = credentials.get(r.name)
        if section is not None:
            section.pop(r.mechanism, None)
            if not section:
                del credentials[r.name]

    def _acls_w(self) -> dict[uuid.UUID, AclBinding]:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        return self._acls

    def _replay_AccessControlEntryRecord(self, r: m.AccessControlEntryRecord) -> None:
        self._acls_w()[r.id] = binding(r.resource_type, r.resource_name, r.pattern_type,
                                       r.principal, r.host, r.operation, r.permission_type)

    def _replay_RemoveAccessControlEntryRecord(self, r: m.RemoveAccessControlEntryRecord) -> None:
        self._acls_w().pop(r.id, None)

    def apply(self) -> MetadataImage:
        image = self.image
        topics_by_id = image.topics_by_id
        topics_by_name = image.topics_by_name
        if self._topics is not None or self._changed_topics:
            topics = self._topics_w()
            for topic_id, parts in self._changed_topics.items():
                topic = topics.get(topic_id)
                if topic is not None:
                    topics[topic_id] = replace(topic, partitions=MappingProxyType(dict(parts)))
            topics_by_id = MappingProxyType(topics)
            topics_by_name = MappingProxyType({t.name: t for t in topics.values()})
        configs = image.configs
        if self._configs is not None:
            configs = MappingProxyType(
                {k: MappingProxyType(v) for k, v in self._configs.items()}
            )
        quotas = image.client_quotas
        if self._client_quotas is not None:
            quotas = MappingProxyType(
                {k: MappingProxyType(v) for k, v in self._client_quotas.items()}
            )
        return MetadataImage(
            offset=max(self.offset, image.offset),
            epoch=max(self.epoch, image.epoch),
            features=(
                MappingProxyType(self._features) if self._features is not None else image.features
            ),
            brokers=(
                MappingProxyType(self._brokers) if self._brokers is not None else image.brokers
            ),
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            configs=configs,
            next_producer_id=(
                self._next_producer_id
                if self._next_producer_id is not None
                else image.next_producer_id
            ),
            client_quotas=quotas,
            scram_credentials=(
                MappingProxyType({user: MappingProxyType(creds)
                                  for user, creds in self._scram.items()})
                if self._scram is not None else image.scram_credentials
            ),
            acls=MappingProxyType(self._acls) if self._acls is not None else image.acls,
        )


_REPLAYERS = {
    name[len("_replay_"):]: fn
    for name, fn in vars(MetadataDelta).items()
    if name.startswith("_replay_")
}


# ------------------------------------------------------------------------------------------------
# the image as records (metadata snapshots, KIP-630)


def image_records(image: MetadataImage) -> list[Any]:
    """The metadata records that rebuild `image` when replayed on an empty one (what a
    metadata snapshot holds, as Kafka's image writers): features, brokers (with their fenced
    and controlled-shutdown state), topics and partitions, configs, the producer id block,
    client quotas, SCRAM credentials and ACLs. `replay_records(image_records(img))` equals `img` but for offset and
    epoch, which the snapshot's id carries."""
    records: list[Any] = [
        m.FeatureLevelRecord(name=name, feature_level=level)
        for name, level in sorted(image.features.items())
    ]
    for broker_id in sorted(image.brokers):
        broker = image.brokers[broker_id]
        records.append(m.RegisterBrokerRecord(
            broker_id=broker.broker_id, incarnation_id=broker.incarnation_id,
            broker_epoch=broker.epoch,
            end_points=[
                m.RegisterBrokerRecord.BrokerEndpoint(
                    name=endpoint.name, host=endpoint.host or "", port=endpoint.port,
                    security_protocol=endpoint.security_protocol_id)
                for endpoint in broker.endpoints.values()
            ],
            features=[
                m.RegisterBrokerRecord.BrokerFeature(name=name, min_supported_version=low,
                                                     max_supported_version=high)
                for name, (low, high) in broker.features.items()
            ],
            rack=broker.rack, fenced=broker.fenced,
            in_controlled_shutdown=broker.in_controlled_shutdown))
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        records.append(m.TopicRecord(name=topic.name, topic_id=topic.topic_id))
        for partition_id in sorted(topic.partitions):
            partition = topic.partitions[partition_id]
            records.append(m.PartitionRecord(
                partition_id=partition_id, topic_id=topic.topic_id,
                replicas=list(partition.replicas), isr=list(partition.isr),
                removing_replicas=list(partition.removing_replicas),
                adding_replicas=list(partition.adding_replicas), leader=partition.leader,
                leader_recovery_state=partition.leader_recovery_state,
                leader_epoch=partition.leader_epoch,
                partition_epoch=partition.partition_epoch))
    for (resource_type, resource_name) in sorted(image.configs):
        section = image.configs[(resource_type, resource_name)]
        for name in sorted(section):
            records.append(m.ConfigRecord(resource_type=resource_type,
                                          resource_name=resource_name, name=name,
                                          value=section[name]))
    if image.next_producer_id != 0:
        records.append(m.ProducerIdsRecord(broker_id=-1, broker_epoch=-1,
                                           next_producer_id=image.next_producer_id))
    for entity in sorted(image.client_quotas, key=repr):
        for key, value in sorted(image.client_quotas[entity].items()):
            records.append(m.ClientQuotaRecord(
                entity=[m.ClientQuotaRecord.EntityData(entity_type=entity_type,
                                                       entity_name=entity_name)
                        for entity_type, entity_name in entity],
                key=key, value=value, remove=False))
    for user in sorted(image.scram_credentials):
        for mechanism, credential in sorted(image.scram_credentials[user].items()):
            records.append(m.UserScramCredentialRecord(
                name=user, mechanism=mechanism, salt=credential.salt,
                stored_key=credential.stored_key, server_key=credential.server_key,
                iterations=credential.iterations))
    for acl_id, acl in sorted(image.acls.items()):
        records.append(acl_record(acl_id, acl))
    return records


def acl_record(acl_id: uuid.UUID, acl: AclBinding) -> m.AccessControlEntryRecord:
    return m.AccessControlEntryRecord(
        id=acl_id, resource_type=acl.resource_type, resource_name=acl.resource_name,
        pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
        operation=acl.operation, permission_type=acl.permission)


def replay_records(records: Any, offset: int = -1, epoch: int = -1,
                   base: MetadataImage = EMPTY_IMAGE) -> MetadataImage:
    """The image `records` (decoded metadata records) make on top of `base`, as of
    `offset` and `epoch`."""
    delta = MetadataDelta(base)
    for record in records:
        delta.replay(record)
    delta.offset = offset
    delta.epoch = epoch
    return delta.apply()
