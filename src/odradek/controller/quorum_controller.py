"""The active controller: admin operations carried out through the metadata quorum.

Only the active controller (the quorum leader, caught up) carries out operations; on any other
node each one fails with NOT_CONTROLLER (admin results carry the error; bootstrap, registration
and producer-id blocks raise it). Forwarding to the active controller is a later step.

Kafka's QuorumController in one process: each operation computes its records from the current
image (`ControllerState`, pure), appends them to the quorum and returns only once they are
committed. Operations are serialised by one lock, so the next operation (and whoever reads the
image after one returns) sees an image that includes the previous one's records.

This is the seam brokers use to reach the controller (admin requests, broker registration,
producer-id blocks); a broker that is not the active controller will reach one over the
controller channel with the same calls.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.controller import (
    acl_control,
    client_quota_control,
    cluster_control,
    features,
    scram_control,
)
from odradek.controller.cluster_control import BrokerRegistrationRequest
from odradek.controller.controller import ControllerState, OpResult, TopicSpec
from odradek.controller.quorum import MetadataQuorum
from odradek.controller.replication_control import (
    ConfigLookup,
    ElectionResults,
    OngoingReassignment,
    ReassignmentResults,
    alter_partition,
    alter_partition_reassignments,
    balance_partition_leaders,
    elect_leaders,
    list_partition_reassignments,
)
from odradek.metadata.image import METADATA_VERSION_FEATURE, RESOURCE_BROKER, MetadataImage
from odradek.protocol import messages as m
from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("odradek.controller")

class QuorumController:
    def __init__(self, quorum: MetadataQuorum, state: ControllerState, *,
                 is_dynamic_broker_config: Callable[[str], bool],
                 cluster_id: str = "",
                 session_timeout_ms: int = 9000, clock: Clock = SYSTEM_CLOCK,
                 broker_config: ConfigLookup | None = None) -> None:
        self.quorum = quorum
        # The static config under topic and dynamic configs (unclean.leader.election.enable...)
        self.broker_config = broker_config
        self.cluster_id = cluster_id
        self.heartbeats = cluster_control.BrokerHeartbeatManager(session_timeout_ms, clock)
        # broker id -> the committed offset that put it in controlled shutdown
        self._controlled_shutdown_offsets: dict[int, int] = {}
        # While active: session expiry, and the auto leader rebalance if enabled.
        self._periodic: list[asyncio.Task[None]] = []
        self.state = state
        self._is_dynamic_broker_config = is_dynamic_broker_config
        self._lock = asyncio.Lock()

    @property
    def image(self) -> MetadataImage:
        return self.quorum.image

    def _check_active(self) -> None:
        if not self.quorum.is_active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER,
                             f"This node is not the active controller (the leader is "
                             f"{self.quorum.leader_id}).")

    async def _commit(self, records: list[Any]) -> None:
        """Append records to the metadata quorum and wait until they are committed."""
        if not records:
            return
        committed = self.quorum.append(records)
        try:
            await asyncio.shield(committed)
        except asyncio.CancelledError:
            # The caller went away (its connection closed), but the records are in the log
            # and will commit: keep the lock until they have, so the next operation does not
            # compute its records from an image that lacks them.
            await asyncio.wait([committed])
            if not committed.cancelled():
                committed.exception()  # retrieved: its failure is not logged as unhandled
            raise

    # -- cluster bootstrap and membership
    async def bootstrap_metadata_version(self, level: int,
                                         bootstrap_records: Sequence[Any] = ()) -> None:
        """Writes the metadata.version feature level (and the other features' starting levels)
        into a freshly formatted log, with the records `storage format` left for it (SCRAM
        credentials: `--add-scram`). When those records finalize metadata.version (`storage
        format` records the release version and features it was given), they are the
        bootstrap; else `level` and its default feature levels are."""
        async with self._lock:
            self._check_active()
            if self.image.metadata_version == 0:
                formatted = any(isinstance(record, m.FeatureLevelRecord)
                                and record.name == METADATA_VERSION_FEATURE
                                for record in bootstrap_records)
                levels = [] if formatted else [
                    m.FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=level),
                    *(m.FeatureLevelRecord(name=name, feature_level=feature) for name, feature
                      in features.bootstrap_feature_levels(level).items())]
                await self._commit([*levels, *bootstrap_records])

    async def register_broker(self, request: BrokerRegistrationRequest) -> int:
        """Registers (or re-registers) a broker, fenced; returns its broker epoch. Raises
        KafkaError when refused (see `cluster_control.registration_records`)."""
        async with self._lock:
            self._check_active()
            epoch = self.quorum.log.log_end_offset  # the offset its record will have
            records = cluster_control.registration_records(
                self.image, request, epoch, self.cluster_id, self.heartbeats,
                self.broker_config)
            await self._commit(records)
            self._controlled_shutdown_offsets.pop(request.broker_id, None)
            self.heartbeats.touch(request.broker_id)
            return epoch

    async def broker_heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int,
                               *, want_fence: bool = False,
                               want_shutdown: bool = False) -> cluster_control.HeartbeatReply:
        """A broker's heartbeat: renews its session and moves it between fenced, unfenced and
        controlled shutdown; the reply describes the state once the change is committed."""
        async with self._lock:
            self._check_active()
            records, reply = cluster_control.heartbeat(
                self.image, broker_id, broker_epoch, metadata_offset, want_fence,
                want_shutdown, self._controlled_shutdown_offsets.get(broker_id),
                self.broker_config)
            self.heartbeats.touch(broker_id)
            if records:
                await self._commit(records)
                if reply.in_controlled_shutdown:
                    self._controlled_shutdown_offsets.setdefault(broker_id,
                                                                 self.quorum.committed_offset)
            if reply.should_shut_down:
                self.heartbeats.remove(broker_id)
                self._controlled_shutdown_offsets.pop(broker_id, None)
            return reply

    async def unregister_broker(self, broker_id: int) -> None:
        """UnregisterBroker: raises KafkaError when refused (not the active controller, no
        such registration)."""
        async with self._lock:
            self._check_active()
            await self._commit(cluster_control.unregister_records(self.image, broker_id,
                                                                  self.broker_config))
            self.heartbeats.remove(broker_id)
            self._controlled_shutdown_offsets.pop(broker_id, None)

    async def fence_stale_brokers(self) -> list[int]:
        """Fences the unfenced brokers whose session expired; returns their ids."""
        async with self._lock:
            self._check_active()
            unfenced = [b for b, reg in self.image.brokers.items() if not reg.fenced]
            fenced = []
            for broker_id in self.heartbeats.expired(unfenced):
                # One commit per broker: each one's records are computed from an image that
                # has the previous one's leadership moves.
                await self._commit(cluster_control.fence_records(self.image, broker_id,
                                                                 self.broker_config))
                self.heartbeats.remove(broker_id)
                fenced.append(broker_id)
            return fenced

    def on_activation(self, active: bool) -> None:
        """Told by the quorum when this node becomes (or stops being) the active controller. A
        new active controller gives every unfenced broker a full session and starts expiring
        sessions; a former one stops."""
        for task in self._periodic:
            task.cancel()
        self._periodic = []
        if active:
            self.heartbeats.reset(broker_id for broker_id, registration
                                  in self.image.brokers.items() if not registration.fenced)
            self._controlled_shutdown_offsets.clear()
            loop = asyncio.get_running_loop()
            self._periodic.append(loop.create_task(self._expire_sessions()))
            if self._config_value("auto.leader.rebalance.enable", False):
                self._periodic.append(loop.create_task(self._rebalance_leaders()))

    def _config_value(self, key: str, default: Any) -> Any:
        value = self.broker_config.get(key) if self.broker_config is not None else None
        return default if value is None else value

    async def balance_partition_leaders(self) -> int:
        """Preferred leader elections for partitions whose preferred replica could lead but
        does not (Kafka's auto leader rebalance); returns how many partitions moved."""
        moved = 0
        more = True
        while more:
            async with self._lock:
                self._check_active()
                records, more = balance_partition_leaders(self.image,
                                                          broker_config=self.broker_config)
                await self._commit(records)
                moved += len(records)
        return moved

    async def _rebalance_leaders(self) -> None:
        """Every `leader.imbalance.check.interval.seconds` while active."""
        clock = self.heartbeats.clock
        interval_s = float(self._config_value("leader.imbalance.check.interval.seconds", 300))
        while True:
            await clock.sleep(interval_s)
            try:
                moved = await self.balance_partition_leaders()
            except KafkaError as exc:
                log.info("cannot rebalance partition leaders: %s", exc)
                continue
            if moved:
                log.info("auto leader rebalance: %d partition(s) back on their preferred "
                         "leader", moved)

    async def _expire_sessions(self) -> None:
        """Fence brokers as their sessions run out, for as long as this node is active."""
        clock = self.heartbeats.clock
        while True:
            next_expiry = self.heartbeats.next_expiry_ms()
            delay_ms = (self.heartbeats.session_timeout_ms if next_expiry is None
                        else max(next_expiry - clock.time_ms(), 0) + 1)
            await clock.sleep(delay_ms / 1000)
            try:
                fenced = await self.fence_stale_brokers()
            except KafkaError as exc:  # lost the leadership meanwhile: on_activation stops us
                log.info("cannot fence stale brokers: %s", exc)
                await clock.sleep(self.heartbeats.session_timeout_ms / 1000)
                continue
            if fenced:
                log.warning("fenced broker(s) %s: no heartbeat for %d ms", fenced,
                            self.heartbeats.session_timeout_ms)

    async def close(self) -> None:
        for task in self._periodic:
            task.cancel()
        await asyncio.gather(*self._periodic, return_exceptions=True)
        self._periodic = []

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """A block of producer ids for a broker: (first id, count)."""
        async with self._lock:
            self._check_active()
            registration = self.image.brokers.get(broker_id)
            if registration is None or registration.epoch != broker_epoch:
                raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                                 f"Broker {broker_id} has no registration at epoch "
                                 f"{broker_epoch}.")
            block, records = self.state.allocate_producer_ids(self.image, broker_id,
                                                              broker_epoch)
            await self._commit(records)
            return block

    # -- admin operations
    async def create_topics(self, specs: Sequence[TopicSpec],
                            validate_only: bool = False) -> list[OpResult]:
        try:
            async with self._lock:
                self._check_active()
                results, records = self.state.create_topics(self.image, specs)
                if not validate_only:
                    await self._commit(records)
                return results
        except KafkaError as exc:
            return [_failed(exc)] * len(specs)

    async def delete_topics(self, names: Sequence[str],
                            ids: Sequence[uuid.UUID]) -> list[OpResult]:
        try:
            async with self._lock:
                self._check_active()
                results, records = self.state.delete_topics(self.image, names, ids)
                await self._commit(records)
                return results
        except KafkaError as exc:
            return [_failed(exc)] * (len(names) + len(ids))

    async def create_partitions(self, name: str, count: int,
                                assignments: list[list[int]] | None,
                                validate_only: bool) -> OpResult:
        try:
            async with self._lock:
                self._check_active()
                result, records = self.state.create_partitions(self.image, name, count,
                                                               assignments)
                if not validate_only:
                    await self._commit(records)
                return result
        except KafkaError as exc:
            return _failed(exc)

    async def alter_configs(self, resource_type: int, resource_name: str,
                            ops: list[tuple[str, int, str | None]], *, incremental: bool,
                            validate_only: bool) -> OpResult:
        if resource_type == RESOURCE_BROKER:
            unknown = [k for k, _op, _v in ops if not self._is_dynamic_broker_config(k)]
            if unknown:
                return OpResult.fail(
                    ErrorCode.INVALID_REQUEST,
                    f"Cannot update these configs dynamically: {set(unknown)}")
        try:
            async with self._lock:
                self._check_active()
                result, records = self.state.alter_configs(
                    self.image, resource_type, resource_name, ops, incremental=incremental)
                if result.error == ErrorCode.NONE and not validate_only:
                    await self._commit(records)
                return result
        except KafkaError as exc:
            return _failed(exc)

    async def elect_leaders(self, election_type: int,
                            topic_partitions: Sequence[tuple[str, Sequence[int]]] | None, *,
                            broker_config: ConfigLookup | None = None) -> ElectionResults:
        """ElectLeaders (None: every partition). A failure of the whole request (not the active
        controller, unknown election type) raises KafkaError."""
        if topic_partitions is not None and not topic_partitions:
            return []  # nothing asked (None would mean everything)
        async with self._lock:
            self._check_active()
            results, records = elect_leaders(self.image, election_type, topic_partitions,
                                             broker_config=broker_config or self.broker_config)
            await self._commit(records)
            return results

    async def alter_partition_reassignments(
            self, topics: Sequence[tuple[str, Sequence[tuple[int, Sequence[int] | None]]]]
    ) -> ReassignmentResults:
        """AlterPartitionReassignments: an outcome per partition (see
        `replication_control.alter_partition_reassignments`). A failure of the whole request
        (not the active controller) raises KafkaError."""
        async with self._lock:
            self._check_active()
            results, records = alter_partition_reassignments(
                self.image, topics, broker_config=self.broker_config)
            await self._commit(records)
            return results

    async def list_partition_reassignments(
            self, topics: Sequence[tuple[str, Sequence[int]]] | None
    ) -> list[tuple[str, list[OngoingReassignment]]]:
        """ListPartitionReassignments (None: every partition), from the committed image: a
        read, so any controller answers it (Kafka's appendReadEvent), not only the active one."""
        async with self._lock:
            return list_partition_reassignments(self.image, topics)

    async def alter_partition(self, request: m.AlterPartitionRequest,
                              version: int) -> m.AlterPartitionResponse:
        """AlterPartition from a partition leader: its ISR (and leader recovery state)
        changes, validated as Kafka does; a change that puts every target replica of a
        reassignment in the ISR completes the reassignment in the same record. Answered once
        the records are committed, so the leader's next request sees the new partition epoch."""
        async with self._lock:
            self._check_active()
            response, records = alter_partition(
                self.image, request.broker_id, request.broker_epoch, request,
                version=version, broker_config=self.broker_config)
            await self._commit(records)
            return response

    async def update_features(self, updates: Sequence[features.FeatureUpdate],
                              validate_only: bool) -> dict[str, OpResult]:
        """UpdateFeatures: a result per feature, by name (see `controller.features`). A
        failure of the whole request (not the active controller) raises KafkaError."""
        async with self._lock:
            self._check_active()
            results, records = features.update_features(
                self.image, updates, node_id=self.quorum.node_id, validate_only=validate_only)
            await self._commit(records)
            return results

    async def alter_user_scram_credentials(self, deletions: Sequence[Any],
                                           upsertions: Sequence[Any]) -> dict[str, OpResult]:
        """AlterUserScramCredentials: a result per user (see `controller.scram_control`)."""
        try:
            async with self._lock:
                self._check_active()
                results, records = scram_control.alter_user_scram_credentials(
                    self.image, deletions, upsertions)
                await self._commit(records)
                return results
        except KafkaError as exc:
            return {alteration.name: _failed(exc) for alteration in [*deletions, *upsertions]}

    async def alter_client_quotas(self, entries: Sequence[Any],
                                  validate_only: bool) -> list[tuple[Any, OpResult]]:
        """AlterClientQuotas: each entry with its result (see `controller.client_quota_control`);
        validate_only checks without writing."""
        try:
            async with self._lock:
                self._check_active()
                results, records = client_quota_control.alter_client_quotas(self.image, entries)
                if not validate_only:
                    await self._commit(records)
                return results
        except KafkaError as exc:
            return [(entry, _failed(exc)) for entry in entries]
    async def create_acls(self, bindings: Sequence[Any]) -> list[OpResult]:
        """CreateAcls: a result per binding (see `controller.acl_control`)."""
        try:
            async with self._lock:
                self._check_active()
                results, records = acl_control.create_acls(self.image, bindings)
                await self._commit(records)
                return results
        except KafkaError as exc:
            return [_failed(exc) for _ in bindings]

    async def delete_acls(self, filters: Sequence[Any]) -> list[tuple[OpResult, list[Any]]]:
        """DeleteAcls: per filter, its result and the ACLs it removed."""
        try:
            async with self._lock:
                self._check_active()
                results, records = acl_control.delete_acls(self.image, filters)
                await self._commit(records)
                return results
        except KafkaError as exc:
            return [(_failed(exc), []) for _ in filters]


def _failed(exc: KafkaError) -> OpResult:
    """An operation the quorum did not take (not the active controller, the log failed)."""
    return OpResult.fail(exc.code, exc.message)
