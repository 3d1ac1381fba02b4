"""Which APIs this node serves on each kind of listener, at which versions, and the handler of
each.

Versions follow Kafka 4.0: every version its specs define (KIP-896 dropped the oldest ones),
and Produce advertised from v0 as Kafka 4.0 does.
An API missing here is not advertised in ApiVersions; a client that sends it anyway has its
connection closed, as Kafka does for requests its listener does not enable.

A listener is of one kind, broker or controller, and each kind has its own table: the APIs it
serves (`SERVED_VERSIONS`, `CONTROLLER_SERVED_VERSIONS`) and the handlers bound for it
(`handler_table`, `controller_handler_table`). The same API key may have a different handler
per kind: Fetch on a broker listener reads partitions, Fetch on a controller listener is Raft's
fetch of `__cluster_metadata`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.protocol.messages import API_BY_KEY
from odradek.server.handlers import sasl

if TYPE_CHECKING:
    from odradek.server.forwarding import EnvelopeApis
    from odradek.server.handlers.acls import AclApis
    from odradek.server.handlers.admin import AdminApis
    from odradek.server.handlers.client_quotas import ClientQuotaApis
    from odradek.server.handlers.controller import ControllerApis
    from odradek.server.handlers.fetch import FetchApis
    from odradek.server.handlers.groups import GroupApis
    from odradek.server.handlers.metadata import MetadataApis
    from odradek.server.handlers.produce import ProduceApis
    from odradek.server.handlers.producer_ids import ProducerIdApis
    from odradek.server.handlers.producers import ProducerStateApis
    from odradek.server.handlers.raft import RaftApis
    from odradek.server.handlers.scram import ScramApis
    from odradek.server.handlers.transactions import TransactionApis

#: handler(ctx, request) -> response (or an awaitable of it)
Handler = Callable[..., Any]

# Kafka 4.0 advertises Produce from v0 although it takes only v3 and up (KAFKA-18659):
# librdkafka before 2.10 turns compression off unless the broker advertises Produce v0
# (librdkafka issue 4956). A v0-2 request still fails to decode and closes the connection, as
# Kafka 4.0 does.
ADVERTISED_PRODUCE_MIN_VERSION = 0


def _from_spec_minimum(keys: set[int]) -> dict[int, int]:
    """api key -> the lowest version the Kafka 4.0 specs define (what KIP-896 left)."""
    return {key: API_BY_KEY[key].min_version for key in sorted(keys)}


# api key -> lowest version served on a broker listener (the highest is the spec's newest).
SERVED_VERSIONS: dict[int, int] = {
    **_from_spec_minimum({
        0, 1, 2, 3,  # Produce, Fetch, ListOffsets, Metadata
        8, 9, 10, 11, 12, 13, 14, 15, 16,  # offsets and classic groups
        28,  # TxnOffsetCommit
        29, 30, 31,  # DescribeAcls, CreateAcls, DeleteAcls (the writes forwarded)
        17, 18, 36,  # SaslHandshake, ApiVersions, SaslAuthenticate
        19, 20, 21, 22, 23, 32, 33, 35, 37, 42, 44, 47,
        24, 25, 26, 27,  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers
        65, 66,  # DescribeTransactions, ListTransactions
        43,  # ElectLeaders
        50, 51,  # DescribeUserScramCredentials, AlterUserScramCredentials (forwarded)
        48, 49,  # DescribeClientQuotas, AlterClientQuotas (forwarded)
        45, 46,  # AlterPartitionReassignments, ListPartitionReassignments (forwarded)
        55,  # DescribeQuorum (forwarded to the active controller, as Kafka does)
        57,  # UpdateFeatures (forwarded to the active controller)
        60, 75,  # DescribeCluster, DescribeTopicPartitions
        61,  # DescribeProducers
        68, 69,  # ConsumerGroupHeartbeat, ConsumerGroupDescribe (KIP-848)
        74,  # ListClientMetricsResources (KIP-714 subscriptions; no telemetry receiver)
        80, 81,  # AddRaftVoter, RemoveRaftVoter (forwarded to the active controller)
        64,  # UnregisterBroker (forwarded to the active controller)
    }),
    0: ADVERTISED_PRODUCE_MIN_VERSION,
}

# api key -> highest version served on a broker listener, where it is below the spec's newest.
# None today: AddPartitionsToTxn v5 and EndTxn v5 are advertised as Kafka 4.0 does; clients
# use their transactions-v2 meaning only when transaction.version 2 is finalized, which
# Odradek does not support (an EndTxn v5 is answered UNSUPPORTED_VERSION).
MAX_VERSION_OVERRIDES: dict[int, int] = {}

# api key -> lowest version served on a controller listener: the quorum's own APIs (Raft's
# Fetch of the metadata partition, Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum) and
# the connection-level ones.
CONTROLLER_SERVED_VERSIONS: dict[int, int] = {
    1: 13,  # Fetch of __cluster_metadata (by topic id)
    17: 0, 18: 0, 36: 0,  # SaslHandshake, ApiVersions, SaslAuthenticate
    52: 0, 53: 0, 54: 0, 55: 0,  # Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum
    56: 2,  # AlterPartition: partition leaders' ISR changes (Kafka 4.0 takes v2-3)
    58: 0,  # Envelope: admin requests forwarded by brokers
    59: 0,  # FetchSnapshot of __cluster_metadata (KIP-630)
    60: 0,  # DescribeCluster
    62: 0, 63: 0, 67: 0,  # BrokerRegistration, BrokerHeartbeat, AllocateProducerIds
    57: 0,  # UpdateFeatures (carried out by the active controller; NOT_CONTROLLER elsewhere)
    80: 0, 81: 0, 82: 0,  # AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter (KIP-853)
}

#: admin APIs a controller listener takes straight from admin clients (KIP-919,
#: `bootstrap.controllers`), as Kafka 4.0's ControllerApis: writes carried out by the active
#: controller (NOT_CONTROLLER on the others, which clients retry), reads answered from this
#: node's metadata image. Authorized with the connection's own principal.
CONTROLLER_ADMIN_APIS = frozenset({
    19, 20, 37,  # CreateTopics, DeleteTopics, CreatePartitions
    32, 33, 44,  # DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
    29, 30, 31,  # DescribeAcls, CreateAcls, DeleteAcls
    49,  # AlterClientQuotas
    50, 51,  # DescribeUserScramCredentials, AlterUserScramCredentials
    43, 45, 46,  # ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments
    64,  # UnregisterBroker
})
CONTROLLER_SERVED_VERSIONS.update(_from_spec_minimum(set(CONTROLLER_ADMIN_APIS)))
# APIs a controller listener answers (the rest belong to broker listeners).
CONTROLLER_APIS = frozenset(CONTROLLER_SERVED_VERSIONS)

#: what a broker forwards to the active controller in an Envelope (what the controller
#: carries out), and the versions the controller takes inside an Envelope
FORWARDED_APIS = frozenset({
    19,  # CreateTopics
    20,  # DeleteTopics
    30,  # CreateAcls
    31,  # DeleteAcls
    33,  # AlterConfigs
    37,  # CreatePartitions
    43,  # ElectLeaders
    44,  # IncrementalAlterConfigs
    45,  # AlterPartitionReassignments
    46,  # ListPartitionReassignments
    49,  # AlterClientQuotas
    51,  # AlterUserScramCredentials
    55,  # DescribeQuorum (answered by the leader, with every voter's and observer's progress)
    57,  # UpdateFeatures
    64,  # UnregisterBroker
    80,  # AddRaftVoter
    81,  # RemoveRaftVoter
})
FORWARDED_SERVED_VERSIONS: dict[int, int] = {
    key: low for key, low in SERVED_VERSIONS.items() if key in FORWARDED_APIS}

BROKER_LISTENER = "broker"
CONTROLLER_LISTENER = "controller"
FORWARDED = "forwarded"  # requests unwrapped from an Envelope on a controller listener
SERVED_BY_KIND: dict[str, dict[int, int]] = {
    BROKER_LISTENER: SERVED_VERSIONS,
    CONTROLLER_LISTENER: CONTROLLER_SERVED_VERSIONS,
    FORWARDED: FORWARDED_SERVED_VERSIONS,
}


def handler_table(*, metadata: MetadataApis, produce: ProduceApis, fetch: FetchApis,
                  groups: GroupApis, admin: AdminApis, producer_ids: ProducerIdApis,
                  raft: RaftApis, producers: ProducerStateApis,
                  transactions: TransactionApis, scram: ScramApis,
                  acls: AclApis, client_quotas: ClientQuotaApis | None = None,
                  controller: ControllerApis | None = None) -> dict[int, Handler]:
    """The handler of every API served on broker listeners, from the objects that answer each
    API family."""
    return {
        0: produce.produce,
        1: fetch.fetch,
        2: fetch.list_offsets,
        3: metadata.metadata,
        8: groups.offset_commit,
        9: groups.offset_fetch,
        10: groups.find_coordinator,
        11: groups.join_group,
        12: groups.heartbeat,
        13: groups.leave_group,
        14: groups.sync_group,
        15: groups.describe_groups,
        16: groups.list_groups,
        17: sasl.sasl_handshake,
        18: metadata.api_versions,
        22: producer_ids.init_producer_id,
        23: fetch.offset_for_leader_epoch,
        24: transactions.add_partitions_to_txn,
        25: transactions.add_offsets_to_txn,
        26: transactions.end_txn,
        27: transactions.write_txn_markers,
        28: groups.txn_offset_commit,
        29: acls.describe_acls,
        30: acls.create_acls,
        31: acls.delete_acls,
        36: sasl.sasl_authenticate,
        42: groups.delete_groups,
        47: groups.offset_delete,
        50: scram.describe_user_scram_credentials,
        51: scram.alter_user_scram_credentials,
        68: groups.consumer_group_heartbeat,
        69: groups.consumer_group_describe,
        55: raft.describe_quorum_on_broker,
        60: metadata.describe_cluster,
        61: producers.describe_producers,
        65: transactions.describe_transactions,
        66: transactions.list_transactions,
        75: metadata.describe_topic_partitions,
        80: raft.add_raft_voter,
        81: raft.remove_raft_voter,
        **admin_handler_table(admin),
        **client_quota_handlers(client_quotas),
        **unregister_broker_handlers(controller),
    }


def unregister_broker_handlers(controller: ControllerApis | None) -> dict[int, Handler]:
    return {} if controller is None else {64: controller.unregister_broker}


def client_quota_handlers(client_quotas: ClientQuotaApis | None) -> dict[int, Handler]:
    if client_quotas is None:
        return {}
    return {48: client_quotas.describe_client_quotas, 49: client_quotas.alter_client_quotas}


def admin_handler_table(admin: AdminApis) -> dict[int, Handler]:
    """The admin APIs (on broker listeners; those in FORWARDED_APIS also inside Envelopes)."""
    return {
        19: admin.create_topics,
        20: admin.delete_topics,
        21: admin.delete_records,
        32: admin.describe_configs,
        33: admin.alter_configs,
        35: admin.describe_log_dirs,
        37: admin.create_partitions,
        43: admin.elect_leaders,
        44: admin.incremental_alter_configs,
        45: admin.alter_partition_reassignments,
        46: admin.list_partition_reassignments,
        57: admin.update_features,
        74: admin.list_client_metrics_resources,
    }


def forwarded_handler_table(admin: AdminApis, raft: RaftApis,
                            scram: ScramApis, acls: AclApis,
                            client_quotas: ClientQuotaApis | None = None,
                            controller: ControllerApis | None = None) -> dict[int, Handler]:
    """The handlers of requests unwrapped from an Envelope: carried out by this node as the
    active controller, never forwarded again."""
    handlers = {**admin_handler_table(admin), 55: raft.describe_quorum,
                51: scram.alter_user_scram_credentials,
                30: acls.create_acls, 31: acls.delete_acls,
                80: raft.add_raft_voter, 81: raft.remove_raft_voter,
                **client_quota_handlers(client_quotas), **unregister_broker_handlers(controller)}
    return {key: handler for key, handler in handlers.items() if key in FORWARDED_APIS}


def controller_admin_handler_table(forwarded: dict[int, Handler], admin: AdminApis,
                                   scram: ScramApis, acls: AclApis) -> dict[int, Handler]:
    """The admin APIs of controller listeners: the writes run the handlers of forwarded
    requests (`forwarded`: as bound for FORWARDED, with their controller mutation quotas),
    the reads (from this node's metadata image) their own."""
    reads = {32: admin.describe_configs, 29: acls.describe_acls,
             50: scram.describe_user_scram_credentials}
    handlers = {**{key: forwarded[key] for key in CONTROLLER_ADMIN_APIS if key in forwarded},
                **reads}
    assert set(handlers) == CONTROLLER_ADMIN_APIS, sorted(CONTROLLER_ADMIN_APIS - set(handlers))
    return handlers


def controller_handler_table(*, metadata: MetadataApis, raft: RaftApis,
                             controller: ControllerApis, envelope: EnvelopeApis,
                             admin: AdminApis) -> dict[int, Handler]:
    """The handler of every API served on controller listeners."""
    return {
        1: raft.fetch,
        17: sasl.sasl_handshake,
        18: metadata.api_versions,
        36: sasl.sasl_authenticate,
        52: raft.vote,
        53: raft.begin_quorum_epoch,
        54: raft.end_quorum_epoch,
        55: raft.describe_quorum,
        56: controller.alter_partition,
        58: envelope.envelope,
        59: raft.fetch_snapshot,
        60: metadata.describe_cluster,
        62: controller.broker_registration,
        63: controller.broker_heartbeat,
        57: admin.update_features,
        67: controller.allocate_producer_ids,
        80: raft.add_raft_voter,
        81: raft.remove_raft_voter,
        82: raft.update_raft_voter,
    }


class ApiTable:
    """The served APIs of each listener kind: versions (what ApiVersions advertises on a
    listener of that kind) and a handler for each."""

    def __init__(self) -> None:
        self.handlers: dict[str, dict[int, Handler]] = {kind: {} for kind in SERVED_BY_KIND}
        self.versions_by_kind: dict[str, dict[int, tuple[int, int]]] = {
            kind: {key: (low, MAX_VERSION_OVERRIDES.get(key, API_BY_KEY[key].max_version))
                   for key, low in served.items()}
            for kind, served in SERVED_BY_KIND.items()
        }

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        """The versions served on broker listeners."""
        return self.versions_by_kind[BROKER_LISTENER]

    def bind(self, handlers: dict[int, Handler], listener_kind: str = BROKER_LISTENER) -> None:
        unknown = set(handlers) - set(SERVED_BY_KIND[listener_kind])
        if unknown:
            raise ValueError(f"handlers for APIs not served on {listener_kind} listeners: "
                             f"{sorted(unknown)}")
        self.handlers[listener_kind].update(handlers)

    def advertised(self, listener_kind: str) -> dict[int, tuple[int, int]]:
        """The APIs and versions a listener of this kind ("broker" or "controller") serves."""
        return self.versions_by_kind[listener_kind]

    def lookup(self, api_key: int, version: int,
               listener_kind: str = BROKER_LISTENER) -> Handler | None:
        handler = self.handlers[listener_kind].get(api_key)
        if handler is None:
            return None
        low, high = self.versions_by_kind[listener_kind][api_key]
        return handler if low <= version <= high else None
