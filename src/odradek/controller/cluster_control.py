"""Broker membership on the active controller: registration, heartbeats, sessions and fencing
(Kafka's ClusterControlManager and BrokerHeartbeatManager).

A broker registers with the active controller (BrokerRegistration) and gets a broker epoch: the
offset of its RegisterBrokerRecord. It starts fenced (it may host replicas but leads nothing and
is not in any ISR chosen from now on) and is unfenced by the first heartbeat that shows it has
replayed the metadata log up to its own registration. A broker whose heartbeats stop for
`broker.session.timeout.ms` is fenced: the records remove it from ISRs and move its leaderships
(`replication_control`). A broker that asks to shut down (heartbeat `want_shutdown`) goes into
controlled shutdown: its leaderships move first, and it is told to shut down (and fenced) once it
leads nothing and has seen that change.

Sessions live only in the active controller's memory, as in Kafka: a new active controller gives
every registered broker a fresh session, so a failover does not fence anyone by itself.

Everything here is pure apart from the session clock: image in, records (and a reply) out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.clock import Clock
from odradek.controller import replication_control
from odradek.controller.replication_control import ConfigLookup
from odradek.metadata.image import METADATA_VERSION_FEATURE, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

# BrokerRegistrationChangeRecord.Fenced (Kafka's BrokerRegistrationFencingChange): 0 = no change.
FENCE = 1
UNFENCE = -1
# BrokerRegistrationChangeRecord.InControlledShutdown: 1 = now in controlled shutdown.
IN_CONTROLLED_SHUTDOWN = 1

#: (listener name, host, port, security protocol id) as a broker registers it
RegisteredEndpoint = tuple[str, str, int, int]


@dataclass(frozen=True)
class BrokerRegistrationRequest:
    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    endpoints: Sequence[RegisteredEndpoint]
    features: Mapping[str, tuple[int, int]]
    rack: str | None


@dataclass(frozen=True)
class HeartbeatReply:
    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


class BrokerHeartbeatManager:
    """When each broker was last heard from, on the active controller's clock."""

    def __init__(self, session_timeout_ms: int, clock: Clock) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.clock = clock
        self._last_contact_ms: dict[int, int] = {}

    def touch(self, broker_id: int) -> None:
        self._last_contact_ms[broker_id] = self.clock.time_ms()

    def remove(self, broker_id: int) -> None:
        self._last_contact_ms.pop(broker_id, None)

    def reset(self, broker_ids: Iterable[int]) -> None:
        """A new active controller: every broker given (the unfenced ones) gets a full
        session."""
        now = self.clock.time_ms()
        self._last_contact_ms = dict.fromkeys(broker_ids, now)

    def has_valid_session(self, broker_id: int) -> bool:
        last = self._last_contact_ms.get(broker_id)
        return last is not None and self.clock.time_ms() - last < self.session_timeout_ms

    def expired(self, broker_ids: Iterable[int]) -> list[int]:
        """The brokers among `broker_ids` whose session has run out (unknown ones count as
        expired only once a session was started for them: `reset` covers the registered)."""
        now = self.clock.time_ms()
        return sorted(b for b in broker_ids
                      if b in self._last_contact_ms
                      and now - self._last_contact_ms[b] >= self.session_timeout_ms)

    def next_expiry_ms(self) -> int | None:
        """When the next session runs out (None: no session)."""
        if not self._last_contact_ms:
            return None
        return min(self._last_contact_ms.values()) + self.session_timeout_ms


def registration_records(image: MetadataImage, request: BrokerRegistrationRequest,
                         epoch: int, cluster_id: str, heartbeats: BrokerHeartbeatManager,
                         broker_config: ConfigLookup | None = None) -> list[Any]:
    """The records of a (re-)registration at broker epoch `epoch`; KafkaError if refused."""
    if request.cluster_id != cluster_id:
        raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                         f"Expected cluster ID {cluster_id}, but got cluster ID "
                         f"{request.cluster_id}")
    level = image.metadata_version
    supported = request.features.get(METADATA_VERSION_FEATURE)
    if level and (supported is None or not supported[0] <= level <= supported[1]):
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                         f"Unable to register because the broker does not support finalized "
                         f"version {level} of {METADATA_VERSION_FEATURE}. The broker "
                         f"supports versions {supported or 'none'}.")
    records: list[Any] = []
    existing = image.brokers.get(request.broker_id)
    if existing is not None:
        # A fenced broker has no session to protect (Kafka's hasValidSession): after a clean
        # shutdown (fenced at its end) the next incarnation registers at once.
        if (existing.incarnation_id != request.incarnation_id and not existing.fenced
                and heartbeats.has_valid_session(request.broker_id)):
            raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                             f"Another broker is registered with that broker id "
                             f"{request.broker_id}.")
        if not existing.fenced:
            # The broker restarted: whatever it held in ISRs and leaderships it may no longer
            # have (an unclean stop loses the log tail), so it gives them up first.
            records.extend(_fence_records(image, request.broker_id, existing.epoch,
                                          broker_config))
    records.append(m.RegisterBrokerRecord(
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        broker_epoch=epoch,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name=n, host=h, port=p,
                                                          security_protocol=sp)
                    for n, h, p, sp in request.endpoints],
        features=[m.RegisterBrokerRecord.BrokerFeature(name=name, min_supported_version=lo,
                                                       max_supported_version=hi)
                  for name, (lo, hi) in sorted(request.features.items())],
        rack=request.rack,
        fenced=True,
    ))
    return records


def _fence_records(image: MetadataImage, broker_id: int, epoch: int,
                   broker_config: ConfigLookup | None) -> list[Any]:
    return [m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch,
                                             fenced=FENCE),
            *replication_control.handle_broker_fenced(image, broker_id,
                                                      broker_config=broker_config)]


def fence_records(image: MetadataImage, broker_id: int,
                  broker_config: ConfigLookup | None = None) -> list[Any]:
    """Fence a registered, unfenced broker (its session expired, or it asked to be)."""
    reg = image.brokers.get(broker_id)
    if reg is None or reg.fenced:
        return []
    return _fence_records(image, broker_id, reg.epoch, broker_config)


def unregister_records(image: MetadataImage, broker_id: int,
                       broker_config: ConfigLookup | None = None) -> list[Any]:
    """UnregisterBroker (Kafka's ReplicationControlManager.unregisterBroker): the broker leaves
    the ISRs, ELRs and leaderships it holds, and its registration is removed. Raises
    BROKER_ID_NOT_REGISTERED for a broker that has none."""
    reg = image.brokers.get(broker_id)
    if reg is None:
        raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                         f"Broker ID {broker_id} is not currently registered")
    return [*replication_control.handle_broker_unregistered(image, broker_id,
                                                            broker_config=broker_config),
            m.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.epoch)]


def heartbeat(image: MetadataImage, broker_id: int, broker_epoch: int, metadata_offset: int,
              want_fence: bool, want_shutdown: bool, controlled_shutdown_offset: int | None,
              broker_config: ConfigLookup | None = None) -> tuple[list[Any], HeartbeatReply]:
    """The records a heartbeat causes and the reply it gets once they are committed (Kafka's
    BrokerHeartbeatManager.calculateNextBrokerState). `controlled_shutdown_offset`: the offset
    of the records that put the broker in controlled shutdown, if the controller knows it."""
    reg = image.brokers.get(broker_id)
    if reg is None:  # Kafka's QuorumController answers this one STALE_BROKER_EPOCH too
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                         f"Receive a heartbeat from broker {broker_id} before registration")
    if reg.epoch != broker_epoch:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                         f"Expected broker epoch {reg.epoch}, but got broker epoch "
                         f"{broker_epoch}")
    caught_up = metadata_offset >= reg.epoch  # it has replayed its own registration
    records: list[Any] = []
    fenced, shutting_down, shut_down = reg.fenced, reg.in_controlled_shutdown, False
    if fenced:
        if want_shutdown:
            shut_down = True
        elif not want_fence and caught_up:
            records = [m.BrokerRegistrationChangeRecord(broker_id=broker_id,
                                                        broker_epoch=reg.epoch,
                                                        fenced=UNFENCE),
                       *replication_control.handle_broker_unfenced(
                           image, broker_id, broker_config=broker_config)]
            fenced = False
    elif want_fence:
        records, fenced = _fence_records(image, broker_id, reg.epoch, broker_config), True
    elif want_shutdown:
        if not shutting_down:
            records = [m.BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=reg.epoch,
                in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN),
                *replication_control.handle_broker_controlled_shutdown(
                    image, broker_id, broker_config=broker_config)]
            shutting_down = True
        elif (not leads_partitions(image, broker_id)
              and controlled_shutdown_offset is not None
              and metadata_offset >= controlled_shutdown_offset):
            # It leads nothing and has seen that: it may go. Fenced now, not after its
            # session expires, so nothing waits for it meanwhile.
            records = _fence_records(image, broker_id, reg.epoch, broker_config)
            fenced = shut_down = True
    return records, HeartbeatReply(is_caught_up=caught_up, is_fenced=fenced,
                                   in_controlled_shutdown=shutting_down,
                                   should_shut_down=shut_down)


def leads_partitions(image: MetadataImage, broker_id: int) -> bool:
    return any(partition.leader == broker_id for topic in image.topics_by_id.values()
               for partition in topic.partitions.values())
