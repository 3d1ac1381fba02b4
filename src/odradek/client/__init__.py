"""Odradek's Kafka clients: an asyncio core with blocking facades.

* `Connection`: one broker connection (pipelining, timeouts, ApiVersions negotiation).
* `Cluster`: bootstrap, metadata cache, connection pool and the retry rule, shared by all
  clients.
* `AdminClient` (async) and `Admin` (blocking): Kafka's Admin API.
* `AsyncProducer` / `Producer`: Kafka's producer (batching, compression, idempotence,
  transactions: see `transactions`).
* `AsyncConsumer` / `Consumer`: Kafka's consumer, with manual assignment or consumer group
  membership (`subscribe`, see `group` and `assignors`).

Imports only `odradek.protocol`, `odradek.config` (the config model) and `odradek.security`.
"""

from odradek.client.admin import Admin, AdminClient
from odradek.client.admin_quotas import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
)
from odradek.client.admin_scram import (
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from odradek.client.admin_transactions import (
    AbortTransactionSpec,
    ProducerState,
    TransactionDescription,
    TransactionListing,
)
from odradek.client.admin_types import (
    AlterConfigOp,
    AlterConfigOpType,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    CreatedTopic,
    DeletedRecords,
    IsolationLevel,
    ListOffsetsResultInfo,
    LogDirDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ReplicaInfo,
    TopicDescription,
    TopicListing,
    TopicPartitionInfo,
)
from odradek.client.cluster import Cluster, MetadataCache
from odradek.client.config import ADMIN_CONFIG, COMMON_CONFIG, ClientConfig, ConfigSchema
from odradek.client.connection import Connection
from odradek.client.consumer import (
    CONSUMER_CONFIG,
    AsyncConsumer,
    Consumer,
    ConsumerRecord,
    NoOffsetForPartitionError,
    OffsetAndTimestamp,
    OffsetOutOfRangeError,
)
from odradek.client.errors import (
    KafkaConfigError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
)
from odradek.client.group import ConsumerRebalanceListener
from odradek.client.producer import (
    PRODUCER_CONFIG,
    AsyncProducer,
    Producer,
    RecordFuture,
    RecordMetadata,
)
from odradek.client.subscription import (
    OffsetAndMetadata,
    OffsetResetStrategy,
    OffsetStore,
    SubscriptionPattern,
)
from odradek.client.transactions import (
    PreparedTransaction,
    TransactionAbortedError,
    TransactionState,
    TransactionStateError,
)
from odradek.client.types import (
    ConsumerGroupMetadata,
    Node,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
)

__all__ = [
    "ADMIN_CONFIG",
    "COMMON_CONFIG",
    "CONSUMER_CONFIG",
    "PRODUCER_CONFIG",
    "AbortTransactionSpec",
    "Admin",
    "AdminClient",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AsyncConsumer",
    "AsyncProducer",
    "ClientConfig",
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "ClientQuotaFilter",
    "ClientQuotaFilterComponent",
    "Cluster",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSchema",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Connection",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "CreatedTopic",
    "DeletedRecords",
    "IsolationLevel",
    "KafkaConfigError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "ListOffsetsResultInfo",
    "LogDirDescription",
    "MetadataCache",
    "NewPartitions",
    "NewTopic",
    "NoOffsetForPartitionError",
    "Node",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OffsetResetStrategy",
    "OffsetSpec",
    "OffsetStore",
    "PartitionMetadata",
    "PreparedTransaction",
    "Producer",
    "ProducerState",
    "RecordFuture",
    "RecordMetadata",
    "ReplicaInfo",
    "ScramCredentialInfo",
    "SubscriptionPattern",
    "TopicDescription",
    "TopicListing",
    "TopicMetadata",
    "TopicPartition",
    "TopicPartitionInfo",
    "TransactionAbortedError",
    "TransactionDescription",
    "TransactionListing",
    "TransactionState",
    "TransactionStateError",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]
