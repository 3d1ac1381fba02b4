"""Broker config definitions: Kafka 4.0's broker config table (names, types, defaults,
validators, importance, update modes, docs).

The broker-level defaults of topic configs (`log.segment.bytes`, `log.retention.ms`, ...) are
not written here: they are derived from the topic table (`odradek.config.topic.TOPIC_CONFIGS`)
by `_log_configs_from_topic_table`, so every key is defined once.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from odradek.config.definition import ConfigDef, Importance, UpdateMode, table
from odradek.config.listeners import (
    DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP,
    SECURITY_PROTOCOLS,
    validate_bootstrap_servers,
    validate_security_protocol_map,
    validate_voters,
)
from odradek.config.topic import BROKER_DEFAULTS, BROKER_UNIT_SCALE, TOPIC_CONFIGS
from odradek.config.types import INT_MAX, ConfigError, ConfigType
from odradek.config.validators import Validator, at_least, between, one_of

# The replica.selector.class values Odradek implements (server/replica_selector.py).
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

# authorizer.class.name values: Kafka's StandardAuthorizer (odradek.security.authorizer); the
# ZooKeeper-era AclAuthorizer's name is taken too, its ACL semantics being the same.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER_CLASSES = frozenset({STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer"})

BROKER_ROLE = "broker"
CONTROLLER_ROLE = "controller"

_B, _S, _I, _SH, _L, _D, _LST, _C, _P = (
    ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG,
    ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS, ConfigType.PASSWORD)
_HIGH, _MEDIUM, _LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_RO, _PB, _CW = UpdateMode.READ_ONLY, UpdateMode.PER_BROKER, UpdateMode.CLUSTER_WIDE

_DEFAULT_PRINCIPAL_BUILDER = \
    "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
# Kafka 4.0 names the built-in assignors by their short names (class names are accepted too).
_DEFAULT_ASSIGNORS = ["uniform", "range"]
_DOUBLE_MAX = 1.7976931348623157e308
_LONG_MAX = 9223372036854775807

# (name, type, default, validator, importance, update mode, doc). Kafka 4.0's defaults.
_BROKER_TABLE: list[tuple[str, ConfigType, Any, Validator | None, Importance, UpdateMode, str]] = [
    # --- KRaft: roles, ids, quorum ---
    ("process.roles", _LST, [], one_of(BROKER_ROLE, CONTROLLER_ROLE), _HIGH, _RO,
     "The roles this process plays: 'broker', 'controller', or 'broker,controller'."),
    ("node.id", _I, -1, None, _HIGH, _RO,
     "The node id of this process; required in KRaft mode."),
    ("broker.id", _I, -1, None, _HIGH, _RO,
     "The broker id of this server; must equal node.id when both are set."),
    ("controller.quorum.voters", _LST, [], validate_voters, _HIGH, _RO,
     "The static controller quorum: comma-separated `{id}@{host}:{port}` entries."),
    ("controller.quorum.bootstrap.servers", _LST, [], validate_bootstrap_servers, _HIGH, _RO,
     "Controller endpoints (`{host}:{port}`) used to discover the quorum (dynamic quorum)."),
    ("controller.quorum.election.timeout.ms", _I, 1000, None, _HIGH, _RO,
     "Maximum time without a leader fetch before a voter starts an election."),
    ("controller.quorum.fetch.timeout.ms", _I, 2000, None, _HIGH, _RO,
     "Maximum time without a successful fetch from the leader before becoming a candidate."),
    ("controller.quorum.election.backoff.max.ms", _I, 1000, None, _HIGH, _RO,
     "Maximum backoff before starting a new election."),
    ("controller.quorum.append.linger.ms", _I, 25, None, _MEDIUM, _RO,
     "How long the quorum leader waits for writes to accumulate before flushing."),
    ("controller.quorum.request.timeout.ms", _I, 2000, None, _MEDIUM, _RO,
     "Timeout of quorum requests between controllers."),
    ("controller.quorum.retry.backoff.ms", _I, 20, None, _LOW, _RO,
     "Backoff before retrying a failed quorum request."),
    ("controller.listener.names", _S, None, None, _HIGH, _RO,
     "Comma-separated names of the listeners used by the controller; required in KRaft mode."),
    ("sasl.mechanism.controller.protocol", _S, "GSSAPI", None, _HIGH, _RO,
     "SASL mechanism used to talk to controllers."),
    ("early.start.listeners", _S, None, None, _HIGH, _RO,
     "Listeners that may start before the authorizer has finished initializing."),
    ("broker.heartbeat.interval.ms", _I, 2000, None, _MEDIUM, _RO,
     "Time between broker heartbeats to the controller."),
    ("broker.session.timeout.ms", _I, 9000, None, _MEDIUM, _RO,
     "How long a broker lease lasts without heartbeats."),
    ("initial.broker.registration.timeout.ms", _I, 60000, None, _MEDIUM, _RO,
     "How long a starting broker waits for its registration before exiting."),
    ("metadata.log.dir", _S, None, None, _HIGH, _RO,
     "Directory of the metadata log; the first of log.dirs when unset."),
    ("metadata.log.segment.bytes", _I, 1073741824, at_least(12), _HIGH, _RO,
     "Maximum size of one metadata log segment."),
    ("metadata.log.segment.ms", _L, 604800000, None, _HIGH, _RO,
     "Maximum time before a new metadata log segment is rolled."),
    ("metadata.max.retention.bytes", _L, 104857600, None, _HIGH, _RO,
     "Maximum combined size of the metadata log and snapshots before old ones are deleted."),
    ("metadata.max.retention.ms", _L, 604800000, None, _HIGH, _RO,
     "How long a metadata log segment or snapshot is kept."),
    ("metadata.log.max.record.bytes.between.snapshots", _L, 20971520, at_least(1), _HIGH, _RO,
     "Bytes of metadata log after the latest snapshot that trigger a new snapshot."),
    ("metadata.log.max.snapshot.interval.ms", _L, 3600000, at_least(0), _HIGH, _RO,
     "Maximum time between snapshots when there are new committed records (0 disables)."),
    ("metadata.max.idle.interval.ms", _I, 500, at_least(0), _LOW, _RO,
     "How often the active controller writes no-op records (0 disables)."),
    ("broker.rack", _S, None, None, _MEDIUM, _RO,
     "Rack of the broker, used for rack-aware replica placement."),
    # --- socket server ---
    ("listeners", _S, "PLAINTEXT://:9092", None, _HIGH, _PB,
     "Comma-separated `NAME://host:port` URIs to listen on; an empty host binds all interfaces."),
    ("advertised.listeners", _S, None, None, _HIGH, _RO,
     "Listener addresses published to clients; defaults to the non-controller listeners."),
    ("listener.security.protocol.map", _S, DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP,
     validate_security_protocol_map, _LOW, _PB,
     "Map of listener names to security protocols, `NAME:PROTOCOL,...`."),
    ("inter.broker.listener.name", _S, None, None, _MEDIUM, _RO,
     ("Listener used between brokers; by default the one named after "
     "security.inter.broker.protocol.")),
    ("security.inter.broker.protocol", _S, "PLAINTEXT", one_of(*SECURITY_PROTOCOLS), _MEDIUM, _RO,
     "Security protocol between brokers; not to be set together with inter.broker.listener.name."),
    ("num.network.threads", _I, 3, at_least(1), _HIGH, _CW,
     "Threads receiving requests from the network and sending responses."),
    ("num.io.threads", _I, 8, at_least(1), _HIGH, _CW,
     "Threads processing requests, which may include disk I/O."),
    ("background.threads", _I, 10, at_least(1), _HIGH, _CW,
     "Threads for background tasks."),
    ("socket.send.buffer.bytes", _I, 102400, None, _HIGH, _RO,
     "SO_SNDBUF of the socket server sockets; -1 uses the OS default."),
    ("socket.receive.buffer.bytes", _I, 102400, None, _HIGH, _RO,
     "SO_RCVBUF of the socket server sockets; -1 uses the OS default."),
    ("socket.request.max.bytes", _I, 104857600, at_least(1), _HIGH, _RO,
     "Maximum size of a request the socket server accepts."),
    ("socket.listen.backlog.size", _I, 50, at_least(1), _MEDIUM, _RO,
     "Maximum number of pending connections on a listening socket."),
    ("connections.max.idle.ms", _L, 600000, None, _MEDIUM, _RO,
     "Idle connections are closed after this many milliseconds."),
    ("connection.failed.authentication.delay.ms", _I, 100, at_least(0), _LOW, _RO,
     "Delay before closing a connection after failed authentication."),
    ("queued.max.requests", _I, 500, at_least(1), _HIGH, _RO,
     "Queued requests allowed before the network threads stop reading."),
    ("queued.max.request.bytes", _L, -1, None, _MEDIUM, _RO,
     "Queued request bytes allowed before no more requests are read (-1: no limit)."),
    ("max.connections", _I, INT_MAX, at_least(0), _MEDIUM, _CW,
     "Maximum number of connections to the broker at any time."),
    ("max.connections.per.ip", _I, INT_MAX, at_least(0), _MEDIUM, _CW,
     "Maximum number of connections from one IP address."),
    ("max.connections.per.ip.overrides", _S, "", None, _MEDIUM, _CW,
     "Per-IP or hostname overrides of max.connections.per.ip, `host:count,...`."),
    ("max.connection.creation.rate", _I, INT_MAX, at_least(0), _MEDIUM, _CW,
     "Maximum rate of new connections per second."),
    ("request.timeout.ms", _I, 30000, None, _HIGH, _RO,
     "Timeout of requests the broker sends (e.g. to other brokers)."),
    # --- logs (broker-only settings; topic defaults come from the storage table) ---
    ("log.dir", _S, "/tmp/kafka-logs", None, _HIGH, _RO,
     "The directory for log data (used when log.dirs is not set)."),
    ("log.dirs", _S, None, None, _HIGH, _RO,
     "Comma-separated directories for log data; log.dir is used when unset."),
    ("num.partitions", _I, 1, at_least(1), _MEDIUM, _RO,
     "Default number of partitions of a new topic."),
    ("num.recovery.threads.per.data.dir", _I, 1, at_least(1), _HIGH, _CW,
     "Threads per data directory for log recovery at startup and flushing at shutdown."),
    ("auto.create.topics.enable", _B, True, None, _HIGH, _RO,
     "Create a topic automatically when a client asks for metadata of an unknown one."),
    ("log.retention.check.interval.ms", _L, 300000, at_least(1), _MEDIUM, _RO,
     "How often the log manager checks for logs eligible for deletion."),
    ("log.flush.offset.checkpoint.interval.ms", _I, 60000, at_least(0), _HIGH, _RO,
     "How often the recovery point checkpoint is written."),
    ("log.flush.start.offset.checkpoint.interval.ms", _I, 60000, at_least(0), _HIGH, _RO,
     "How often the log start offset checkpoint is written."),
    ("log.cleaner.enable", _B, True, None, _MEDIUM, _RO,
     "Run the log cleaner (needed for compacted topics such as __consumer_offsets)."),
    ("log.cleaner.threads", _I, 1, at_least(0), _MEDIUM, _CW,
     "Number of log cleaner threads."),
    ("log.cleaner.dedupe.buffer.size", _L, 134217728, None, _MEDIUM, _CW,
     "Total memory for the cleaners' key-to-offset maps."),
    ("log.cleaner.io.buffer.size", _I, 524288, at_least(0), _MEDIUM, _CW,
     "Total memory for the cleaners' I/O buffers."),
    ("log.cleaner.io.buffer.load.factor", _D, 0.9, None, _MEDIUM, _CW,
     "Load factor of the cleaner's dedupe map."),
    ("log.cleaner.io.max.bytes.per.second", _D, _DOUBLE_MAX, None, _MEDIUM, _CW,
     "Throttle of the cleaner's combined read and write I/O."),
    ("log.cleaner.backoff.ms", _L, 15000, at_least(0), _MEDIUM, _CW,
     "Sleep time of the cleaner when there is nothing to clean."),
    ("log.initial.task.delay.ms", _L, 30000, at_least(0), _LOW, _RO,
     "Initial delay of the log manager's background tasks (for testing)."),
    ("log.dir.failure.timeout.ms", _L, 30000, at_least(1), _LOW, _RO,
     "How long a broker may fail to report a failed log dir before shutting down."),
    ("create.topic.policy.class.name", _C, None, None, _LOW, _RO,
     "Class validating topic creation requests (accepted; not used by Odradek)."),
    ("alter.config.policy.class.name", _C, None, None, _LOW, _RO,
     "Class validating alter-config requests (accepted; not used by Odradek)."),
    # --- replication ---
    ("default.replication.factor", _I, 1, None, _MEDIUM, _RO,
     "Replication factor of automatically created topics."),
    ("replica.lag.time.max.ms", _L, 30000, None, _HIGH, _RO,
     "A follower that has not caught up for this long is removed from the ISR."),
    ("replica.socket.timeout.ms", _I, 30000, None, _HIGH, _RO,
     "Socket timeout of replica fetch requests; at least replica.fetch.wait.max.ms."),
    ("replica.socket.receive.buffer.bytes", _I, 65536, None, _HIGH, _RO,
     "Socket receive buffer of replica fetchers."),
    ("replica.fetch.max.bytes", _I, 1048576, at_least(0), _MEDIUM, _RO,
     "Bytes per partition a follower fetch asks for (not an absolute maximum)."),
    ("replica.fetch.wait.max.ms", _I, 500, None, _MEDIUM, _RO,
     "Maximum wait of a follower fetch; at most replica.lag.time.max.ms."),
    ("replica.fetch.min.bytes", _I, 1, None, _HIGH, _RO,
     "Minimum bytes a follower fetch waits for."),
    ("replica.fetch.response.max.bytes", _I, 10485760, at_least(0), _MEDIUM, _RO,
     "Maximum bytes of a whole follower fetch response."),
    ("replica.fetch.backoff.ms", _I, 1000, at_least(0), _MEDIUM, _RO,
     "Sleep after a replica fetch error."),
    ("num.replica.fetchers", _I, 1, None, _HIGH, _CW,
     "Fetcher threads per source broker."),
    ("replica.high.watermark.checkpoint.interval.ms", _L, 5000, None, _HIGH, _RO,
     "How often the high watermark is checkpointed."),
    ("fetch.purgatory.purge.interval.requests", _I, 1000, None, _MEDIUM, _RO,
     "Purge interval (in requests) of the fetch purgatory."),
    ("producer.purgatory.purge.interval.requests", _I, 1000, None, _MEDIUM, _RO,
     "Purge interval (in requests) of the produce purgatory."),
    ("delete.records.purgatory.purge.interval.requests", _I, 1, None, _MEDIUM, _RO,
     "Purge interval (in requests) of the delete-records purgatory."),
    ("auto.leader.rebalance.enable", _B, True, None, _HIGH, _RO,
     "Move leadership back to preferred replicas in the background."),
    ("leader.imbalance.check.interval.seconds", _L, 300, at_least(1), _HIGH, _RO,
     "How often the controller checks leader balance."),
    ("replica.selector.class", _S, None, one_of(LEADER_SELECTOR, RACK_AWARE_SELECTOR), _MEDIUM,
     _RO, "ReplicaSelector class choosing the preferred read replica (default: the leader)."),
    ("controlled.shutdown.enable", _B, True, None, _MEDIUM, _RO,
     "Move leadership away before shutting down."),
    ("delete.topic.enable", _B, True, None, _HIGH, _RO,
     "Allow topic deletion; when false, deletions are rejected."),
    ("fetch.max.bytes", _I, 57671680, at_least(1024), _MEDIUM, _RO,
     "Maximum bytes returned for a fetch request."),
    ("max.incremental.fetch.session.cache.slots", _I, 1000, at_least(0), _MEDIUM, _RO,
     "Maximum number of incremental fetch sessions kept."),
    # --- group coordinator and offsets ---
    ("group.min.session.timeout.ms", _I, 6000, None, _MEDIUM, _RO,
     "Minimum session timeout a consumer may register."),
    ("group.max.session.timeout.ms", _I, 1800000, None, _MEDIUM, _RO,
     "Maximum session timeout a consumer may register."),
    ("group.initial.rebalance.delay.ms", _I, 3000, None, _MEDIUM, _RO,
     "How long the coordinator waits for more members before the first rebalance of a new group."),
    ("group.max.size", _I, INT_MAX, at_least(1), _MEDIUM, _RO,
     "Maximum number of members of one group."),
    ("group.coordinator.rebalance.protocols", _LST, ["classic", "consumer"], one_of("classic", "consumer"),
     _MEDIUM, _RO, "Enabled rebalance protocols ('classic' is required)."),
    ("group.coordinator.threads", _I, 1, at_least(1), _MEDIUM, _RO,
     "Threads of the new group coordinator."),
    ("group.consumer.session.timeout.ms", _I, 45000, at_least(1), _MEDIUM, _RO,
     "Session timeout of consumer-protocol members."),
    ("group.consumer.min.session.timeout.ms", _I, 45000, at_least(1), _MEDIUM, _RO,
     "Minimum session timeout of consumer-protocol members."),
    ("group.consumer.max.session.timeout.ms", _I, 60000, at_least(1), _MEDIUM, _RO,
     "Maximum session timeout of consumer-protocol members."),
    ("group.consumer.heartbeat.interval.ms", _I, 5000, at_least(1), _MEDIUM, _RO,
     "Heartbeat interval of consumer-protocol members."),
    ("group.consumer.min.heartbeat.interval.ms", _I, 5000, at_least(1), _MEDIUM, _RO,
     "Minimum heartbeat interval of consumer-protocol members."),
    ("group.consumer.max.heartbeat.interval.ms", _I, 15000, at_least(1), _MEDIUM, _RO,
     "Maximum heartbeat interval of consumer-protocol members."),
    ("group.consumer.max.size", _I, INT_MAX, at_least(1), _MEDIUM, _RO,
     "Maximum number of members of one consumer-protocol group."),
    ("group.consumer.assignors", _LST, _DEFAULT_ASSIGNORS, None, _MEDIUM, _RO,
     "Server-side assignors of consumer-protocol groups; the first is the default."),
    ("group.consumer.migration.policy", _S, "bidirectional", None, _MEDIUM, _RO,
     ("The online migrations between classic and consumer groups allowed: bidirectional, "
      "upgrade, downgrade or disabled (case-insensitive).")),
    ("offset.metadata.max.bytes", _I, 4096, None, _HIGH, _RO,
     "Maximum size of the metadata string of an offset commit."),
    ("offsets.load.buffer.size", _I, 5242880, at_least(1), _HIGH, _RO,
     "Batch size when loading offsets from the offsets topic."),
    ("offsets.topic.replication.factor", _SH, 3, at_least(1), _HIGH, _RO,
     "Replication factor of __consumer_offsets; creation waits until enough brokers exist."),
    ("offsets.topic.num.partitions", _I, 50, at_least(1), _HIGH, _RO,
     "Number of partitions of __consumer_offsets (do not change after deployment)."),
    ("offsets.topic.segment.bytes", _I, 104857600, at_least(1), _HIGH, _RO,
     "Segment size of __consumer_offsets."),
    ("offsets.topic.compression.codec", _I, 0, None, _HIGH, _RO,
     "Compression codec id for __consumer_offsets (0: none)."),
    ("offsets.retention.minutes", _I, 10080, at_least(1), _HIGH, _RO,
     "How long committed offsets of an empty group are kept."),
    ("offsets.retention.check.interval.ms", _L, 600000, at_least(1), _HIGH, _RO,
     "How often stale offsets are checked for."),
    ("offsets.commit.timeout.ms", _I, 5000, at_least(1), _HIGH, _RO,
     "An offset commit waits this long for the offsets topic replicas."),
    # --- transactions and producer ids ---
    ("transactional.id.expiration.ms", _I, 604800000, at_least(1), _HIGH, _RO,
     "A transactional id without transaction status updates for this long expires."),
    ("transaction.max.timeout.ms", _I, 900000, at_least(1), _HIGH, _RO,
     "Maximum transaction timeout a producer may request."),
    ("transaction.state.log.min.isr", _I, 2, at_least(1), _HIGH, _RO,
     "min.insync.replicas of __transaction_state."),
    ("transaction.state.log.load.buffer.size", _I, 5242880, at_least(1), _HIGH, _RO,
     "Batch size when loading producer ids and transactions from __transaction_state."),
    ("transaction.state.log.replication.factor", _SH, 3, at_least(1), _HIGH, _RO,
     "Replication factor of __transaction_state."),
    ("transaction.state.log.num.partitions", _I, 50, at_least(1), _HIGH, _RO,
     "Number of partitions of __transaction_state."),
    ("transaction.state.log.segment.bytes", _I, 104857600, at_least(1), _HIGH, _RO,
     "Segment size of __transaction_state."),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, 10000, at_least(1),
     _LOW, _RO, "How often timed-out transactions are rolled back."),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", _I, 3600000, at_least(1),
     _LOW, _RO, "How often expired transactional ids are removed."),
    ("transaction.partition.verification.enable", _B, True, None, _LOW, _CW,
     "Verify that a partition was added to the transaction before a transactional write."),
    ("producer.id.expiration.ms", _I, 86400000, at_least(1), _LOW, _CW,
     "How long a producer id's state is kept after its last write."),
    ("producer.id.expiration.check.interval.ms", _I, 600000, at_least(1), _LOW, _RO,
     "How often expired producer ids are removed."),
    # --- quotas and metrics ---
    ("quota.window.num", _I, 11, at_least(1), _LOW, _RO, "Samples kept for client quotas."),
    ("quota.window.size.seconds", _I, 1, at_least(1), _LOW, _RO,
     "Time span of one client quota sample."),
    ("replication.quota.window.num", _I, 11, at_least(1), _LOW, _RO,
     "Samples kept for replication quotas."),
    ("replication.quota.window.size.seconds", _I, 1, at_least(1), _LOW, _RO,
     "Time span of one replication quota sample."),
    # Replication throttles (Kafka's QuotaConfigs: only set dynamically, per broker; the
    # reassign-partitions tool sets and clears them). Long.MAX_VALUE: no throttle.
    ("leader.replication.throttled.rate", _L, _LONG_MAX, at_least(0), _MEDIUM, _PB,
     ("A long representing the upper bound (bytes/sec) on replication traffic for leaders "
     "enumerated in the property leader.replication.throttled.replicas (for each topic). This "
     "property can be only set dynamically. It is suggested that the limit be kept above "
     "1MB/s for accurate behaviour.")),
    ("follower.replication.throttled.rate", _L, _LONG_MAX, at_least(0), _MEDIUM, _PB,
     ("A long representing the upper bound (bytes/sec) on replication traffic for followers "
     "enumerated in the property follower.replication.throttled.replicas (for each topic). "
     "This property can be only set dynamically. It is suggested that the limit be kept above "
     "1MB/s for accurate behaviour.")),
    ("replica.alter.log.dirs.io.max.bytes.per.second", _L, _LONG_MAX, at_least(0), _MEDIUM,
     _PB,
     ("A long representing the upper bound (bytes/sec) on disk IO used for moving replica "
     "between log directories on the same broker. This property can be only set dynamically. "
     "It is suggested that the limit be kept above 1MB/s for accurate behaviour.")),
    ("controller.quota.window.num", _I, 11, at_least(1), _LOW, _RO,
     "Samples kept for controller mutation quotas."),
    ("controller.quota.window.size.seconds", _I, 1, at_least(1), _LOW, _RO,
     "Time span of one controller mutation quota sample."),
    ("metric.reporters", _LST, ["org.apache.kafka.common.metrics.JmxReporter"], None, _LOW, _CW,
     ("Metric reporter classes (no effect in Odradek: it has no JMX; see "
     "metrics.prometheus.listener).")),
    ("metrics.num.samples", _I, 2, at_least(1), _LOW, _RO, "Samples kept to compute metrics."),
    ("metrics.sample.window.ms", _L, 30000, at_least(1), _LOW, _RO,
     "Window of one metrics sample."),
    ("metrics.recording.level", _S, "INFO", one_of("INFO", "DEBUG", "TRACE"), _LOW, _RO,
     "Highest recording level of metrics."),
    # --- security: authorization (StandardAuthorizer, odradek.security.authorizer) ---
    ("authorizer.class.name", _S, "", one_of("", *sorted(AUTHORIZER_CLASSES)), _LOW, _RO,
     "Authorizer class (StandardAuthorizer: ACLs in the metadata log); empty: none."),
    ("super.users", _S, None, None, _LOW, _RO,
     "Semicolon-separated principals allowed everything (read by the authorizer)."),
    ("allow.everyone.if.no.acl.found", _B, False, None, _LOW, _RO,
     "Whether a resource without ACLs is open to everyone (read by the authorizer)."),
    ("principal.builder.class", _C, _DEFAULT_PRINCIPAL_BUILDER, None, _MEDIUM, _PB,
     "Class building the KafkaPrincipal of a connection."),
    ("ssl.protocol", _S, "TLSv1.3", None, _MEDIUM, _PB, "TLS protocol used to create SSLContexts."),
    ("ssl.enabled.protocols", _LST, ["TLSv1.2", "TLSv1.3"], None, _MEDIUM, _PB,
     "TLS protocols enabled for connections."),
    ("ssl.provider", _S, None, None, _MEDIUM, _PB, "Security provider of the SSL connections."),
    ("ssl.cipher.suites", _LST, [], None, _MEDIUM, _PB, "Enabled cipher suites (empty: all)."),
    ("ssl.keystore.type", _S, "JKS", None, _MEDIUM, _PB, "File format of the key store."),
    ("ssl.keystore.location", _S, None, None, _HIGH, _PB, "Location of the key store file."),
    ("ssl.keystore.password", _P, None, None, _HIGH, _PB, "Password of the key store file."),
    ("ssl.keystore.key", _P, None, None, _HIGH, _PB, "Private key in PEM format."),
    ("ssl.keystore.certificate.chain", _P, None, None, _HIGH, _PB,
     "Certificate chain in PEM format."),
    ("ssl.key.password", _P, None, None, _HIGH, _PB, "Password of the private key."),
    ("ssl.truststore.type", _S, "JKS", None, _MEDIUM, _PB, "File format of the trust store."),
    ("ssl.truststore.location", _S, None, None, _HIGH, _PB, "Location of the trust store file."),
    ("ssl.truststore.password", _P, None, None, _HIGH, _PB, "Password of the trust store file."),
    ("ssl.truststore.certificates", _P, None, None, _HIGH, _PB,
     "Trusted certificates in PEM format."),
    ("ssl.keymanager.algorithm", _S, "SunX509", None, _MEDIUM, _PB, "Key manager algorithm."),
    ("ssl.trustmanager.algorithm", _S, "PKIX", None, _MEDIUM, _PB, "Trust manager algorithm."),
    ("ssl.endpoint.identification.algorithm", _S, "https", None, _LOW, _PB,
     "Endpoint identification algorithm used to validate server host names."),
    ("ssl.secure.random.implementation", _S, None, None, _LOW, _PB,
     "SecureRandom implementation for SSL."),
    ("ssl.client.auth", _S, "none", one_of("required", "requested", "none"), _MEDIUM, _PB,
     "Whether the broker requests or requires client certificates."),
    ("ssl.principal.mapping.rules", _S, "DEFAULT", None, _LOW, _RO,
     "Rules mapping certificate distinguished names to short principal names."),
    ("ssl.engine.factory.class", _C, None, None, _LOW, _PB, "Custom SslEngineFactory class."),
    ("sasl.enabled.mechanisms", _LST, ["GSSAPI"], None, _MEDIUM, _PB,
     "SASL mechanisms enabled in the broker."),
    ("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI", None, _MEDIUM, _PB,
     "SASL mechanism used between brokers."),
    ("sasl.jaas.config", _P, None, None, _MEDIUM, _PB, "JAAS login context for SASL."),
    ("sasl.kerberos.service.name", _S, None, None, _MEDIUM, _PB,
     "Kerberos principal name the broker runs as."),
    ("sasl.server.callback.handler.class", _C, None, None, _MEDIUM, _RO,
     "SASL server callback handler class."),
    # Kerberos and login-refresh settings: per-broker dynamic in Kafka (DynamicListenerConfig);
    # accepted, described and stored; Odradek has no GSSAPI or OAUTHBEARER login refresh.
    ("sasl.kerberos.kinit.cmd", _S, "/usr/bin/kinit", None, _MEDIUM, _PB,
     "Kerberos kinit command path."),
    ("sasl.kerberos.ticket.renew.window.factor", _D, 0.8, None, _LOW, _PB,
     ("Login thread will sleep until the specified window factor of time from last refresh to "
     "ticket's expiry has been reached, at which time it will try to renew the ticket.")),
    ("sasl.kerberos.ticket.renew.jitter", _D, 0.05, None, _LOW, _PB,
     "Percentage of random jitter added to the renewal time."),
    ("sasl.kerberos.min.time.before.relogin", _L, 60000, None, _LOW, _PB,
     "Login thread sleep time between refresh attempts."),
    ("sasl.kerberos.principal.to.local.rules", _LST, ["DEFAULT"], None, _MEDIUM, _PB,
     ("A list of rules for mapping from principal names to short names (typically operating "
     "system usernames).")),
    ("sasl.login.refresh.window.factor", _D, 0.8, between(0.5, 1.0), _LOW, _PB,
     ("Login refresh thread will sleep until the specified window factor relative to the "
     "credential's lifetime has been reached, at which time it will try to refresh the "
     "credential. Currently applies only to OAUTHBEARER.")),
    ("sasl.login.refresh.window.jitter", _D, 0.05, between(0.0, 0.25), _LOW, _PB,
     ("The maximum amount of random jitter relative to the credential's lifetime that is added "
     "to the login refresh thread's sleep time. Currently applies only to OAUTHBEARER.")),
    ("sasl.login.refresh.min.period.seconds", _SH, 60, between(0, 900), _LOW, _PB,
     ("The desired minimum time for the login refresh thread to wait before refreshing a "
     "credential, in seconds. Currently applies only to OAUTHBEARER.")),
    ("sasl.login.refresh.buffer.seconds", _SH, 300, between(0, 3600), _LOW, _PB,
     ("The amount of buffer time before credential expiration to maintain when refreshing a "
     "credential, in seconds. Currently applies only to OAUTHBEARER.")),
    # Tiered storage throttles and caches (Kafka's DynamicRemoteLogConfig: cluster-wide);
    # accepted, described and stored; Odradek has no remote storage.
    ("remote.log.index.file.cache.total.size.bytes", _L, 1073741824, at_least(1), _LOW, _CW,
     ("The total size of the space allocated to store index files fetched from remote storage "
     "in the local storage.")),
    ("remote.fetch.max.wait.ms", _I, 500, at_least(1), _MEDIUM, _CW,
     ("The maximum amount of time the server will wait before answering the remote fetch "
     "request.")),
    ("remote.log.manager.copy.max.bytes.per.second", _L, _LONG_MAX, at_least(1), _MEDIUM, _CW,
     ("The maximum number of bytes that can be copied from local storage to remote storage per "
     "second.")),
    ("remote.log.manager.fetch.max.bytes.per.second", _L, _LONG_MAX, at_least(1), _MEDIUM, _CW,
     ("The maximum number of bytes that can be read from remote storage to local storage per "
     "second.")),
    ("remote.list.offsets.request.timeout.ms", _L, 30000, at_least(1), _MEDIUM, _CW,
     ("The maximum amount of time the server will wait for the remote list offsets request to "
     "complete.")),
    ("connections.max.reauth.ms", _L, 0, None, _MEDIUM, _RO,
     ("Maximum lifetime of a SASL session before the client must re-authenticate (KIP-368); "
      "0 disables re-authentication. May be prefixed per listener and mechanism.")),
    ("sasl.server.max.receive.size", _I, 524288, None, _LOW, _RO,
     "Largest request accepted before and during SASL authentication."),
    ("sasl.login.class", _C, None, None, _MEDIUM, _RO, "Login class for SASL."),
    ("sasl.login.callback.handler.class", _C, None, None, _MEDIUM, _RO,
     "SASL login callback handler class."),
    ("delegation.token.secret.key", _P, None, None, _MEDIUM, _RO,
     "Secret to generate and verify delegation tokens; tokens are disabled when unset."),
    ("delegation.token.max.lifetime.ms", _L, 604800000, at_least(1), _MEDIUM, _RO,
     "Maximum lifetime of a delegation token."),
    ("delegation.token.expiry.time.ms", _L, 86400000, at_least(1), _MEDIUM, _RO,
     "Validity of a delegation token before it must be renewed."),
]


def _non_empty(name: str, value: Any) -> None:
    """Kafka's ConfigDef.NonEmptyString."""
    if value == "":
        raise ConfigError(f"Invalid value {value} for configuration {name}: "
                          "String must be non-empty")


_RLMM_CLASS = "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"

# --- Kafka 4.0's remaining broker keys (tests/config/kafka40_broker_configs.txt lists all 289
# that Kafka 4.0 documents and describes). Types, defaults, ranges, importance and update modes
# are Kafka 4.0's. Most configure subsystems Odradek does not have (share groups, tiered
# storage, OAUTHBEARER over HTTPS/JWKS, Yammer reporters, pluggable callbacks): they are
# parsed, validated, described and stored, and have no effect (docs/configuration.md lists
# them). ---
_KAFKA40_TABLE: list[tuple[str, ConfigType, Any, Validator | None, Importance, UpdateMode,
                           str]] = [
    # transactions
    ("add.partitions.to.txn.retry.backoff.max.ms", _I, 100, at_least(0), _HIGH, _RO,
     ("Upper bound of the broker's retries when adding a partition to a transaction on the "
     "producer's behalf (capped by request.timeout.ms).")),
    ("add.partitions.to.txn.retry.backoff.ms", _I, 20, at_least(1), _HIGH, _RO,
     "Backoff between those retries."),
    # network, requests, coordinators
    ("controller.socket.timeout.ms", _I, 30000, None, _MEDIUM, _RO,
     "Socket timeout of the channels from the controller to brokers."),
    ("socket.connection.setup.timeout.ms", _L, 10000, None, _MEDIUM, _RO,
     ("Initial time allowed for an outgoing connection to be established; doubles per "
     "consecutive failure.")),
    ("socket.connection.setup.timeout.max.ms", _L, 30000, None, _MEDIUM, _RO,
     "Cap of that growing connection setup timeout."),
    ("max.request.partition.size.limit", _I, 2000, at_least(1), _MEDIUM, _RO,
     "Most partitions one request may be served for (share fetches)."),
    ("num.replica.alter.log.dirs.threads", _I, None, None, _HIGH, _RO,
     "Threads moving replicas between log directories (default: one per log directory)."),
    ("group.coordinator.append.linger.ms", _I, 5, at_least(0), _MEDIUM, _RO,
     ("How long the group coordinator lets non-transactional writes accumulate before "
     "flushing them.")),
    ("delegation.token.expiry.check.interval.ms", _L, 3600000, at_least(1), _LOW, _RO,
     "How often expired delegation tokens are removed."),
    ("telemetry.max.bytes", _I, 1048576, at_least(1), _LOW, _RO,
     "Largest client telemetry payload (after compression) a PushTelemetry may carry."),
    # quotas and metrics
    ("alter.log.dirs.replication.quota.window.num", _I, 11, at_least(1), _LOW, _RO,
     "Samples kept for the quota on moving replicas between log directories."),
    ("alter.log.dirs.replication.quota.window.size.seconds", _I, 1, at_least(1), _LOW, _RO,
     "Time span of one such sample."),
    ("client.quota.callback.class", _C, None, None, _LOW, _RO,
     "Pluggable ClientQuotaCallback deciding quota limits."),
    ("kafka.metrics.polling.interval.secs", _I, 10, at_least(1), _LOW, _RO,
     "Polling interval offered to kafka.metrics.reporters."),
    ("kafka.metrics.reporters", _LST, [], None, _LOW, _RO,
     "Yammer metrics reporter classes."),
    # share groups (KIP-932, early access in Kafka 4.0)
    ("group.share.delivery.count.limit", _I, 5, between(2, 10), _MEDIUM, _RO,
     "Delivery attempts of a record to a share group before it is given up on."),
    ("group.share.heartbeat.interval.ms", _I, 5000, at_least(1), _MEDIUM, _RO,
     "Heartbeat interval given to share group members."),
    ("group.share.max.groups", _SH, 10, between(1, 100), _MEDIUM, _RO,
     "Most share groups a cluster may have."),
    ("group.share.max.heartbeat.interval.ms", _I, 15000, at_least(1), _MEDIUM, _RO,
     "Largest heartbeat interval a share group may be configured with."),
    ("group.share.max.record.lock.duration.ms", _I, 60000, between(30000, 3600000), _MEDIUM, _RO,
     "Largest record acquisition lock duration a share group may be configured with."),
    ("group.share.max.session.timeout.ms", _I, 60000, at_least(1), _MEDIUM, _RO,
     "Largest session timeout a share group may be configured with."),
    ("group.share.max.size", _I, 200, between(1, 1000), _MEDIUM, _RO,
     "Most members one share group may have."),
    ("group.share.min.heartbeat.interval.ms", _I, 5000, at_least(1), _MEDIUM, _RO,
     "Smallest heartbeat interval a share group may be configured with."),
    ("group.share.min.record.lock.duration.ms", _I, 15000, between(1000, 30000), _MEDIUM, _RO,
     "Smallest record acquisition lock duration a share group may be configured with."),
    ("group.share.min.session.timeout.ms", _I, 45000, at_least(1), _MEDIUM, _RO,
     "Smallest session timeout a share group may be configured with."),
    ("group.share.partition.max.record.locks", _I, 200, between(100, 10000), _MEDIUM, _RO,
     "Most records of one share-partition that may be locked at once."),
    ("group.share.record.lock.duration.ms", _I, 30000, between(1000, 3600000), _MEDIUM, _RO,
     "How long a share group member holds an acquired record by default."),
    ("group.share.session.timeout.ms", _I, 45000, at_least(1), _MEDIUM, _RO,
     "Session timeout of share group members by default."),
    ("share.coordinator.append.linger.ms", _I, 10, at_least(0), _MEDIUM, _RO,
     "How long the share coordinator lets writes accumulate before flushing them."),
    ("share.coordinator.load.buffer.size", _I, 5242880, at_least(1), _HIGH, _RO,
     "Batch size when loading share-group state from __share_group_state."),
    ("share.coordinator.snapshot.update.records.per.snapshot", _I, 500, at_least(0), _MEDIUM,
     _RO, "Update records the share coordinator writes between two snapshot records."),
    ("share.coordinator.state.topic.compression.codec", _I, 0, None, _HIGH, _RO,
     "Compression codec id for __share_group_state (0: none)."),
    ("share.coordinator.state.topic.min.isr", _SH, 2, at_least(1), _HIGH, _RO,
     "min.insync.replicas of __share_group_state."),
    ("share.coordinator.state.topic.num.partitions", _I, 50, at_least(1), _HIGH, _RO,
     "Number of partitions of __share_group_state."),
    ("share.coordinator.state.topic.replication.factor", _SH, 3, at_least(1), _HIGH, _RO,
     "Replication factor of __share_group_state."),
    ("share.coordinator.state.topic.segment.bytes", _I, 104857600, at_least(1), _HIGH, _RO,
     "Segment size of __share_group_state."),
    ("share.coordinator.threads", _I, 1, at_least(1), _MEDIUM, _RO,
     "Threads of the share coordinator."),
    ("share.coordinator.write.timeout.ms", _I, 5000, at_least(1), _HIGH, _RO,
     "How long a share-group state write waits for all replicas."),
    ("share.fetch.purgatory.purge.interval.requests", _I, 1000, None, _MEDIUM, _RO,
     "Purge interval (in requests) of the share fetch purgatory."),
    # tiered storage (KIP-405)
    ("remote.log.storage.system.enable", _B, False, None, _MEDIUM, _RO,
     "Start the tiered storage services on this broker."),
    ("remote.log.storage.manager.class.name", _S, None, _non_empty, _MEDIUM, _RO,
     "RemoteStorageManager implementation class."),
    ("remote.log.storage.manager.class.path", _S, None, None, _MEDIUM, _RO,
     "Class path searched first for the RemoteStorageManager and its dependencies."),
    ("remote.log.storage.manager.impl.prefix", _S, "rsm.config.", _non_empty, _MEDIUM, _RO,
     "Prefix of the properties handed to the RemoteStorageManager."),
    ("remote.log.metadata.manager.class.name", _S, _RLMM_CLASS, _non_empty, _MEDIUM, _RO,
     "RemoteLogMetadataManager implementation class."),
    ("remote.log.metadata.manager.class.path", _S, None, None, _MEDIUM, _RO,
     "Class path searched first for the RemoteLogMetadataManager and its dependencies."),
    ("remote.log.metadata.manager.impl.prefix", _S, "rlmm.config.", _non_empty, _MEDIUM, _RO,
     "Prefix of the properties handed to the RemoteLogMetadataManager."),
    ("remote.log.metadata.manager.listener.name", _S, None, _non_empty, _MEDIUM, _RO,
     "Local listener the RemoteLogMetadataManager connects to, if it needs one."),
    ("remote.log.metadata.custom.metadata.max.bytes", _I, 128, at_least(0), _LOW, _RO,
     "Largest custom segment metadata accepted from the remote storage plugin."),
    ("remote.log.manager.thread.pool.size", _I, 2, at_least(1), _MEDIUM, _RO,
     "Threads reading the highest uploaded remote offset for follower partitions."),
    ("remote.log.manager.copier.thread.pool.size", _I, 10, at_least(1), _MEDIUM, _CW,
     "Threads scheduling segment copies to remote storage."),
    ("remote.log.manager.expiration.thread.pool.size", _I, 10, at_least(1), _MEDIUM, _CW,
     "Threads scheduling the removal of expired remote segments."),
    ("remote.log.manager.task.interval.ms", _L, 30000, at_least(1), _LOW, _RO,
     "Interval of the remote log manager's copy and cleanup tasks."),
    ("remote.log.manager.copy.quota.window.num", _I, 11, at_least(1), _MEDIUM, _RO,
     "Samples kept for the remote copy quota."),
    ("remote.log.manager.copy.quota.window.size.seconds", _I, 1, at_least(1), _MEDIUM, _RO,
     "Time span of one remote copy quota sample."),
    ("remote.log.manager.fetch.quota.window.num", _I, 11, at_least(1), _MEDIUM, _RO,
     "Samples kept for the remote fetch quota."),
    ("remote.log.manager.fetch.quota.window.size.seconds", _I, 1, at_least(1), _MEDIUM, _RO,
     "Time span of one remote fetch quota sample."),
    ("remote.log.reader.threads", _I, 10, at_least(1), _MEDIUM, _CW,
     "Threads serving reads from remote storage."),
    ("remote.log.reader.max.pending.tasks", _I, 100, at_least(1), _MEDIUM, _RO,
     "Queue length of the remote reader pool; a fetch finding it full gets an error."),
    # SASL: client-side callback, OAUTHBEARER login and JWT validation, security providers
    ("sasl.client.callback.handler.class", _C, None, None, _MEDIUM, _RO,
     "SASL client callback handler class."),
    ("sasl.login.connect.timeout.ms", _I, None, None, _LOW, _RO,
     "Connect timeout towards an external OAUTHBEARER login provider."),
    ("sasl.login.read.timeout.ms", _I, None, None, _LOW, _RO,
     "Read timeout towards an external OAUTHBEARER login provider."),
    ("sasl.login.retry.backoff.ms", _L, 100, None, _LOW, _RO,
     "First wait between OAUTHBEARER login attempts (doubles per attempt)."),
    ("sasl.login.retry.backoff.max.ms", _L, 10000, None, _LOW, _RO,
     "Cap of the wait between OAUTHBEARER login attempts."),
    ("sasl.oauthbearer.jwks.endpoint.url", _S, None, None, _MEDIUM, _RO,
     "HTTP(S) or file URL of the JSON Web Key Set that verifies JWT signatures."),
    ("sasl.oauthbearer.token.endpoint.url", _S, None, None, _MEDIUM, _RO,
     "Token endpoint (or token file) of the OAuth/OIDC provider used to log in."),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", _L, 3600000, None, _LOW, _RO,
     "How often the cached JWKS is refreshed."),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _L, 100, None, _LOW, _RO,
     "First wait between JWKS retrieval attempts (doubles per attempt)."),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _L, 10000, None, _LOW, _RO,
     "Cap of the wait between JWKS retrieval attempts."),
    ("sasl.oauthbearer.clock.skew.seconds", _I, 30, None, _LOW, _RO,
     "Clock difference tolerated between the identity provider and the broker."),
    ("sasl.oauthbearer.expected.audience", _LST, None, None, _LOW, _RO,
     "Audiences a JWT's `aud` claim must match one of (unset: not checked)."),
    ("sasl.oauthbearer.expected.issuer", _S, None, None, _LOW, _RO,
     "Issuer a JWT's `iss` claim must equal (unset: not checked)."),
    ("sasl.oauthbearer.scope.claim.name", _S, "scope", None, _LOW, _RO,
     "Name of the JWT claim holding the scope."),
    ("sasl.oauthbearer.sub.claim.name", _S, "sub", None, _LOW, _RO,
     "Name of the JWT claim holding the subject."),
    ("security.providers", _S, None, None, _LOW, _RO,
     "SecurityProviderCreator classes registering security algorithm providers."),
    ("ssl.allow.dn.changes", _B, False, None, _LOW, _RO,
     "Whether a dynamically reloaded certificate may change its distinguished name."),
    ("ssl.allow.san.changes", _B, False, None, _LOW, _RO,
     "Whether a dynamically reloaded certificate may change its subject alternative names."),
]


def metrics_listener(value: str) -> tuple[str, int]:
    """`metrics.prometheus.listener`'s http://HOST:PORT as (host, port); "" host: every
    interface."""
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or port is None or parts.path not in ("", "/", "/metrics"):
        raise ConfigError(f"Invalid value {value} for configuration metrics.prometheus.listener:"
                          " expected http://HOST:PORT")
    return parts.hostname or "", port


def _check_metrics_listener(_name: str, value: Any) -> None:
    if value:
        metrics_listener(value)


# Odradek's own keys (no Kafka equivalent): diagnostics of the event loop every request
# shares (server/loop_monitor.py, server/request_metrics.py).
_ODRADEK_TABLE: list[tuple[str, ConfigType, Any, Validator | None, Importance, UpdateMode,
                           str]] = [
    ("event.loop.stall.warn.ms", _L, 500, at_least(0), _LOW, _RO,
     ("Odradek only: an event-loop stall or garbage collection longer than this is logged at "
     "WARN with the code the loop was in (0: not watched). Every request waits while the "
     "loop is held, so these are what a tail latency is made of.")),
    ("event.loop.fsync.check", _B, False, None, _LOW, _RO,
     ("Odradek only, a diagnostic: log at WARN every fsync made on the event loop's thread "
     "(where it delays every request), with its stack.")),
    ("metrics.prometheus.listener", _S, None, _check_metrics_listener, _LOW, _RO,
     ("Odradek only: where the broker serves its metrics in Prometheus' text format, as "
     "http://HOST:PORT (every path answers; an empty HOST listens on every interface), "
     "named as the Prometheus JMX exporter names Kafka's. Unset: no metrics endpoint.")),
    ("request.slow.log.ms", _L, 0, at_least(0), _LOW, _RO,
     ("Odradek only: a request whose time not spent waiting on purpose (queue + local + "
     "response send; a long poll's or acks=all's wait excluded) exceeds this is logged at "
     "INFO with its split, on logger odradek.request.slow (0: off).")),
]

# Log configs whose broker key is not their topic key's first synonym are read-only in Kafka
# (e.g. log.retention.hours); those given in hours/minutes are INTs with their own range.
_SCALED_SYNONYM_VALIDATORS: dict[str, Validator | None] = {
    "log.roll.hours": at_least(1),
    "log.roll.jitter.hours": at_least(0),
}
# Broker keys whose range Kafka 4.0 narrowed without narrowing their topic config's (KIP-1030:
# log.segment.bytes is at least 1 MiB, topic segment.bytes still at least 14 bytes).
_BROKER_ONLY_VALIDATORS: dict[str, Validator] = {
    "log.segment.bytes": at_least(1024 * 1024),
}
_HIGH_IMPORTANCE_LOG_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.retention.ms",
    "log.retention.minutes", "log.retention.hours", "log.retention.bytes", "log.cleanup.policy",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.flush.scheduler.interval.ms",
    "log.index.size.max.bytes", "message.max.bytes", "min.insync.replicas", "compression.type",
    "log.message.timestamp.type",
})


def _log_configs_from_topic_table() -> list[ConfigDef]:
    """Broker-level defaults of topic configs, derived from the topic table.

    `log.segment.bytes` is the broker default of topic config `segment.bytes`, etc. For keys with
    unit variants (`log.retention.ms` > `.minutes` > `.hours`) only the last, coarsest one has a
    default, so an explicitly set finer key always wins, as in Kafka.
    """
    defs = []
    for topic in TOPIC_CONFIGS.values():
        chain = topic.broker_synonyms
        for position, synonym in enumerate(chain):
            scaled = synonym in BROKER_UNIT_SCALE
            last = position == len(chain) - 1
            default = BROKER_DEFAULTS.get(synonym, topic.default) if last else None
            doc = f"Default of topic config `{topic.name}`: {topic.doc}"
            if len(chain) > 1:
                doc += f" Precedence: {' > '.join(chain)}."
            defs.append(ConfigDef(
                name=synonym,
                type=ConfigType.INT if scaled else topic.type,
                default=default,
                validator=_SCALED_SYNONYM_VALIDATORS.get(synonym) if scaled
                else _BROKER_ONLY_VALIDATORS.get(synonym, topic.validator),
                importance=_HIGH if synonym in _HIGH_IMPORTANCE_LOG_KEYS else _MEDIUM,
                update_mode=_CW if position == 0 else _RO,
                doc=doc,
                broker_synonyms=chain[position + 1:],
                topic_config=topic.name,
            ))
    return defs


BROKER_CONFIGS: dict[str, ConfigDef] = dict(sorted(table(
    [ConfigDef(name, ctype, default, validator, importance, mode, doc)
     for name, ctype, default, validator, importance, mode, doc in
     _BROKER_TABLE + _KAFKA40_TABLE + _ODRADEK_TABLE]
    + _log_configs_from_topic_table()).items()))
