"""The quorum controller's state machine: admin operations in, metadata records out.

Each operation validates against the current image and returns the records that carry it out;
the caller (the quorum) appends them to `__cluster_metadata` and replays them into the next
image. Nothing here touches the image directly, so the log stays the only source of truth.
"""

from __future__ import annotations

import functools
import random
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.config import client_metrics
from odradek.config import group as group_config
from odradek.config import schema as config_schema
from odradek.controller.placement import UsableBroker, place_replicas
from odradek.metadata.image import (
    NO_LEADER,
    RESOURCE_BROKER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    MetadataDelta,
    MetadataImage,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")
PRODUCER_ID_BLOCK_SIZE = 1000

# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


@dataclass
class OpResult:
    """Outcome of one item of an admin request (a topic, a resource...)."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fail(cls, error: ErrorCode, message: str) -> OpResult:
        return cls(error, message)


@dataclass
class TopicSpec:
    """A topic to create, as CreateTopics asks for it (-1 = broker default)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str | None] = field(default_factory=dict)


def validate_topic_name(name: str) -> str | None:
    """Kafka's topic name rules; returns the error message or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL_TOPIC_CHARS.match(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


class ControllerState:
    """Turns admin operations into metadata records, validated against an image.

    `config_validator(name, value)` raises ValueError for an invalid topic config;
    `group_config_validator(configs)` raises ValueError for an invalid set of group configs
    (Kafka's GroupConfig.validate against the broker's bounds);
    `defaults` holds the broker's num.partitions / default.replication.factor.
    """

    def __init__(
        self,
        *,
        num_partitions: int,
        default_replication_factor: int,
        config_validator: Callable[[Mapping[str, str]], None],
        group_config_validator: Callable[[Mapping[str, str]], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.num_partitions = num_partitions
        self.default_replication_factor = default_replication_factor
        self.config_validator = config_validator
        self.group_config_validator = group_config_validator or _validate_group_configs
        self.rng = rng or random.Random()

    # -- topics
    def create_topics(
        self, image: MetadataImage, specs: Iterable[TopicSpec]
    ) -> tuple[list[OpResult], list[Any]]:
        results: list[OpResult] = []
        records: list[Any] = []
        # Topics created earlier in this same request count as existing for later ones.
        names = set(image.topics_by_name)
        collisions = {_collision_key(n): n for n in names}
        for spec in specs:
            result, topic_records = self._create_topic(image, spec, names, collisions)
            results.append(result)
            if result.error == ErrorCode.NONE:
                records.extend(topic_records)
                names.add(spec.name)
                collisions[_collision_key(spec.name)] = spec.name
        return results, records

    def _create_topic(
        self,
        image: MetadataImage,
        spec: TopicSpec,
        names: set[str],
        collisions: dict[str, str],
    ) -> tuple[OpResult, list[Any]]:
        if (problem := validate_topic_name(spec.name)) is not None:
            return OpResult.fail(ErrorCode.INVALID_TOPIC_EXCEPTION, problem), []
        if spec.name in names:
            return OpResult.fail(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists."
            ), []
        other = collisions.get(_collision_key(spec.name))
        if other is not None:
            return OpResult.fail(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{spec.name}' collides with existing topic: {other}",
            ), []
        live = _unfenced_usable_brokers(image)
        if spec.assignments:
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                return OpResult.fail(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                ), []
            assignment = {p: list(r) for p, r in sorted(spec.assignments.items())}
            if sorted(assignment) != list(range(len(assignment))):
                return OpResult.fail(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "Partitions should be a consecutive 0-based integer sequence",
                ), []
            for p, replicas in assignment.items():
                if len(set(replicas)) != len(replicas) or not replicas:
                    return OpResult.fail(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Duplicate or empty replica assignment for partition {p}.",
                    ), []
                if unknown := [r for r in replicas if r not in image.brokers]:
                    return OpResult.fail(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes broker {unknown[0]}, "
                        "but no such broker is registered.",
                    ), []
                if not _active_replicas(image, replicas):
                    return OpResult.fail(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        "All brokers specified in the manual partition assignment for "
                        f"partition {p} are fenced or in controlled shutdown.",
                    ), []
        else:
            partitions = self.num_partitions if spec.num_partitions == -1 else spec.num_partitions
            rf = (
                self.default_replication_factor
                if spec.replication_factor == -1
                else spec.replication_factor
            )
            if partitions <= 0:
                return OpResult.fail(
                    ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
                ), []
            if rf <= 0:
                return OpResult.fail(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0.",
                ), []
            if rf > len(live):
                return OpResult.fail(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {rf} time(s): The target replication "
                    f"factor of {rf} cannot be reached because only {len(live)} broker(s) "
                    "are registered.",
                ), []
            assignment = dict(enumerate(self._place_replicas(image, partitions, rf)))
        configs = {k: v for k, v in spec.configs.items() if v is not None}
        try:
            self.config_validator(configs)
        except ValueError as exc:
            return OpResult.fail(ErrorCode.INVALID_CONFIG, str(exc)), []
        topic_id = uuid.uuid4()
        records: list[Any] = [m.TopicRecord(name=spec.name, topic_id=topic_id)]
        for key, value in sorted(configs.items()):
            records.append(
                m.ConfigRecord(
                    resource_type=RESOURCE_TOPIC, resource_name=spec.name, name=key, value=value
                )
            )
        records.extend(self._partition_records(image, topic_id, assignment))
        rf_out = len(next(iter(assignment.values()))) if assignment else 0
        return OpResult(
            data={
                "topic_id": topic_id,
                "num_partitions": len(assignment),
                "replication_factor": rf_out,
                "configs": configs,
            }
        ), records

    def _place_replicas(self, image: MetadataImage, count: int, rf: int,
                        existing: Sequence[Sequence[int]] = ()) -> list[list[int]]:
        """Kafka's striped, rack-aware placement (see odradek.controller.placement); callers
        have checked that there are at least `rf` unfenced brokers."""
        return place_replicas(self.rng, usable_brokers(image), count, rf, existing)

    @staticmethod
    def _partition_records(image: MetadataImage, topic_id: uuid.UUID,
                           assignment: Mapping[int, Sequence[int]]) -> list:
        """New partitions, as Kafka registers them: the ISR holds the replicas that are
        active (unfenced, not in controlled shutdown) and the first of them leads."""
        records = []
        for p, replicas in sorted(assignment.items()):
            isr = _active_replicas(image, replicas)
            records.append(m.PartitionRecord(
                partition_id=p,
                topic_id=topic_id,
                replicas=list(replicas),
                isr=isr,
                leader=isr[0] if isr else NO_LEADER,
                leader_epoch=0,
                partition_epoch=0,
            ))
        return records

    def delete_topics(
        self, image: MetadataImage, names: Iterable[str] = (), ids: Iterable[uuid.UUID] = ()
    ) -> tuple[list[OpResult], list[Any]]:
        results, records = [], []
        deleted: set[uuid.UUID] = set()
        for name in names:
            topic = image.topics_by_name.get(name)
            if topic is None:
                results.append(
                    OpResult.fail(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        "This server does not host this topic-partition.",
                    )
                )
                continue
            results.append(OpResult(data={"topic_id": topic.topic_id, "name": name}))
            if topic.topic_id not in deleted:
                deleted.add(topic.topic_id)
                records.append(m.RemoveTopicRecord(topic_id=topic.topic_id))
        for topic_id in ids:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                results.append(
                    OpResult.fail(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
                )
                continue
            results.append(OpResult(data={"topic_id": topic_id, "name": topic.name}))
            if topic_id not in deleted:
                deleted.add(topic_id)
                records.append(m.RemoveTopicRecord(topic_id=topic_id))
        return results, records

    def create_partitions(
        self, image: MetadataImage, name: str, count: int, assignments: Sequence[Sequence[int]] | None
    ) -> tuple[OpResult, list[Any]]:
        topic = image.topics_by_name.get(name)
        if topic is None:
            return OpResult.fail(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            ), []
        current = len(topic.partitions)
        if count < current:
            return OpResult.fail(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{count}.",
            ), []
        if count == current:
            return OpResult.fail(
                ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions."
            ), []
        rf = len(topic.partitions[0].replicas) if topic.partitions else 1
        live = _unfenced_usable_brokers(image)
        if assignments:
            if len(assignments) != count - current:
                return OpResult.fail(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - current} but "
                    f"{len(assignments)} assignments provided.",
                ), []
            new = {current + i: list(a) for i, a in enumerate(assignments)}
            for p, replicas in new.items():
                if not _active_replicas(image, replicas):
                    return OpResult.fail(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        "All brokers specified in the manual partition assignment for "
                        f"partition {p} are fenced or in controlled shutdown.",
                    ), []
        else:
            if rf > len(live):
                return OpResult.fail(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {rf} time(s): only {len(live)} broker(s) "
                    "are registered.",
                ), []
            existing = [topic.partitions[p].replicas for p in sorted(topic.partitions)]
            placed = self._place_replicas(image, count - current, rf, existing)
            new = {current + i: replicas for i, replicas in enumerate(placed)}
        return OpResult(), self._partition_records(image, topic.topic_id, new)

    # -- configs
    def alter_configs(
        self,
        image: MetadataImage,
        resource_type: int,
        resource_name: str,
        ops: Sequence[tuple[str, int, str | None]],
        *,
        incremental: bool,
    ) -> tuple[OpResult, list[Any]]:
        """Legacy AlterConfigs (replace all) or IncrementalAlterConfigs (ops per key).

        APPEND and SUBTRACT apply to list configs only and start from the resource's value of
        the key, else the key's default (Kafka's ConfigurationControlManager): APPEND of
        `compact` to a topic whose cleanup.policy is the default gives `delete,compact`."""
        if resource_type == RESOURCE_TOPIC:
            if resource_name not in image.topics_by_name:
                return OpResult.fail(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "This server does not host this topic-partition.",
                ), []
        elif resource_type == RESOURCE_GROUP:
            if not resource_name:
                return OpResult.fail(ErrorCode.INVALID_REQUEST,
                                     "Group name must not be empty"), []
        elif resource_type == RESOURCE_CLIENT_METRICS:
            pass  # any subscription name but the empty one (client_metrics.validate)
        elif resource_type != RESOURCE_BROKER:
            return OpResult.fail(
                ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}"
            ), []
        current = dict(image.configs.get((resource_type, resource_name), {}))
        wanted = dict(current) if incremental else {}
        for key, op, value in ops:
            if not incremental or op == OP_SET:
                if value is None:
                    wanted.pop(key, None)
                else:
                    wanted[key] = value
            elif op == OP_DELETE:
                wanted.pop(key, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                if not config_schema.is_list(resource_type, key):
                    return OpResult.fail(
                        ErrorCode.INVALID_CONFIG,
                        f"Can't {_OP_NAMES[op]} to key {key} because its type is not LIST.",
                    ), []
                start = wanted[key] if key in wanted else config_schema.default_text(
                    resource_type, key)
                items = [v for v in (start or "").split(",") if v]
                changes = (value or "").split(",")
                if op == OP_APPEND:
                    items += [c for c in dict.fromkeys(changes) if c not in items]
                else:
                    items = [i for i in items if i not in changes]
                wanted[key] = ",".join(items)
            else:
                return OpResult.fail(ErrorCode.INVALID_REQUEST, f"Unknown operation {op}"), []
        validator = {RESOURCE_TOPIC: self.config_validator,
                     RESOURCE_GROUP: self.group_config_validator,
                     RESOURCE_CLIENT_METRICS: functools.partial(client_metrics.validate,
                                                                resource_name),
                     }.get(resource_type)
        if validator is not None:
            try:
                validator(wanted)
            except ValueError as exc:
                # Kafka refuses some with INVALID_REQUEST (its InvalidRequestException)
                code = ErrorCode.INVALID_REQUEST if getattr(exc, "invalid_request", False) \
                    else ErrorCode.INVALID_CONFIG
                return OpResult.fail(code, str(exc)), []
        records = []
        # KAFKA-14136: a broker config SET to its current value is written again, so brokers
        # reload what it names (a TLS key store file replaced at the same path).
        resent = ({key for key, op, value in ops if value is not None and (
            not incremental or op == OP_SET)} if resource_type == RESOURCE_BROKER else set())
        for key in sorted(set(current) | set(wanted)):
            if current.get(key) != wanted.get(key) or (key in resent and key in wanted):
                records.append(
                    m.ConfigRecord(
                        resource_type=resource_type,
                        resource_name=resource_name,
                        name=key,
                        value=wanted.get(key),
                    )
                )
        return OpResult(), records

    # -- brokers and producer ids
    def register_broker(
        self,
        image: MetadataImage,
        broker_id: int,
        incarnation_id: uuid.UUID,
        epoch: int,
        endpoints: Sequence[tuple[str, str, int, int]],
        rack: str | None,
        features: Mapping[str, tuple[int, int]],
    ) -> list[Any]:
        reg = m.RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=epoch,
            end_points=[
                m.RegisterBrokerRecord.BrokerEndpoint(
                    name=n, host=h, port=p, security_protocol=sp
                )
                for n, h, p, sp in endpoints
            ],
            features=[
                m.RegisterBrokerRecord.BrokerFeature(
                    name=name, min_supported_version=lo, max_supported_version=hi
                )
                for name, (lo, hi) in sorted(features.items())
            ],
            rack=rack,
            fenced=True,
        )
        return [reg, m.UnfenceBrokerRecord(id=broker_id, epoch=epoch)]

    def allocate_producer_ids(self, image: MetadataImage, broker_id: int, epoch: int):
        first = image.next_producer_id
        record = m.ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=epoch, next_producer_id=first + PRODUCER_ID_BLOCK_SIZE
        )
        return (first, PRODUCER_ID_BLOCK_SIZE), [record]


def _validate_group_configs(configs: Mapping[str, str]) -> None:
    """Group configs against Kafka's default broker bounds (a controller built without the
    broker's config)."""
    def no_broker_key(key: str) -> Any:
        raise KeyError(key)
    group_config.validate(configs, no_broker_key)


def usable_brokers(image: MetadataImage) -> list[UsableBroker]:
    """Brokers new replicas may go to, as Kafka's: registered and not in controlled shutdown.
    Fenced ones are included: the placer gives them a follower replica only where a rack's
    unfenced brokers have run out for the partition."""
    return [UsableBroker(b, reg.rack, reg.fenced)
            for b, reg in sorted(image.brokers.items()) if not reg.in_controlled_shutdown]


def _unfenced_usable_brokers(image: MetadataImage) -> list[int]:
    return [b.broker_id for b in usable_brokers(image) if not b.fenced]


def _active_replicas(image: MetadataImage, replicas: Sequence[int]) -> list[int]:
    """The replicas that may be in an ISR and lead: unfenced, not in controlled shutdown."""
    active = []
    for r in replicas:
        reg = image.brokers.get(r)
        if reg is not None and not reg.fenced and not reg.in_controlled_shutdown:
            active.append(r)
    return active


def replay_all(image: MetadataImage, records: Iterable[Any], offset: int = -1) -> MetadataImage:
    """Apply records to an image in one delta (used by the quorum and by tests)."""
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    delta.offset = offset
    return delta.apply()
