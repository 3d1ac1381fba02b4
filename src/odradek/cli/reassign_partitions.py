"""`odradek reassign-partitions`: Kafka's kafka-reassign-partitions.sh
(ReassignPartitionsCommand, 4.0).

    odradek reassign-partitions --bootstrap-server HOST:PORT ACTION [options]

with exactly one action:

* ``--generate --topics-to-move-json-file F --broker-list "1,2,3" [--disable-rack-aware]``:
  prints the topics' current assignment and a proposal spreading them over the brokers (Kafka's
  AdminUtils.assignReplicasToBrokers: random start, rack-aware when every broker has a rack)::

      Current partition replica assignment
      {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["any"]}]}

      Proposed partition reassignment configuration
      {"version":1,"partitions":[...]}

* ``--execute --reassignment-json-file F [--throttle BYTES/S] [--additional]``: prints the
  current assignment (to save for a rollback) and starts the reassignments
  (AlterPartitionReassignments). ``--throttle`` first sets
  ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas`` on the
  topics (``partition:broker`` of the sources and of the new replicas) and
  ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` on every
  broker involved.
* ``--verify --reassignment-json-file F [--preserve-throttles]``: each partition's state; once
  no reassignment is left in the cluster, removes the throttles.
* ``--cancel --reassignment-json-file F [--preserve-throttles]``: reverts the partitions'
  active reassignments, then removes the throttles.
* ``--list``: the active reassignments.

The JSON formats, the messages and the exit codes are Kafka's: a TerseException's message
alone on stdout, any other failure as ``Error: <message>`` and the head of its stack trace on
stdout, exit code 1; usage problems print the message and the options on stderr (exit 1).
Moving replicas between log directories (``log_dirs`` other than ``"any"``) needs
AlterReplicaLogDirs, which Odradek brokers do not serve: such a file is refused.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    admin_props,
    java_error,
    run,
)
from odradek.client import AdminClient, KafkaConfigError, KafkaError
from odradek.client.admin_types import AlterConfigOp, AlterConfigOpType, ConfigResource
from odradek.client.types import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.java import java_hashmap_order, topic_partition_hashcode
from odradek.server.quotas import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS

HELP_TEXT = "This tool helps to move topic partitions between replicas."
ANY_LOG_DIR = "any"
EARLIEST_VERSION = 1

LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_LEVEL_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)
TOPIC_LEVEL_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment.")
YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed.")

ADMIN_COMMAND_FAILED = "org.apache.kafka.server.common.AdminCommandFailedException"
ADMIN_OPERATION = "org.apache.kafka.server.common.AdminOperationException"
JSON_MAPPING = "com.fasterxml.jackson.databind.JsonMappingException"


def _long(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(1 << 63) <= int(text) < (1 << 63):
        raise ValueError(text)
    return int(text)


OPTIONS = [
    Option("verify", "Verify if the reassignment completed as specified by the "
           "--reassignment-json-file option. If there is a throttle engaged for the replicas "
           "specified, and the rebalance has completed, the throttle will be removed"),
    Option("generate", "Generate a candidate partition reassignment configuration. Note that "
           "this only generates a candidate assignment, it does not execute it."),
    Option("execute", "Kick off the reassignment as specified by the --reassignment-json-file "
           "option."),
    Option("cancel", "Cancel an active reassignment."),
    Option("list", "List all active partition reassignments."),
    Option("bootstrap-server", "REQUIRED: the server(s) to use for bootstrapping.",
           "Server(s) to use for bootstrapping"),
    Option("command-config", "Property file containing configs to be passed to Admin Client.",
           "Admin client property file"),
    Option("reassignment-json-file", "The JSON file with the partition reassignment "
           "configurationThe format to use is - \n{\"partitions\":\n\t[{\"topic\": \"foo\",\n\t"
           "  \"partition\": 1,\n\t  \"replicas\": [1,2,3],\n\t  \"log_dirs\": "
           "[\"dir1\",\"dir2\",\"dir3\"] }],\n\"version\":1\n}\nNote that \"log_dirs\" is "
           "optional. When it is specified, its length must equal the length of the replicas "
           "list. The value in this list can be either \"any\" or the absolution path of the "
           "log directory on the broker. If absolute log directory path is specified, the "
           "replica will be moved to the specified log directory on the broker.",
           "manual assignment json file path"),
    Option("topics-to-move-json-file", "Generate a reassignment configuration to move the "
           "partitions of the specified topics to the list of brokers specified by the "
           "--broker-list option. The format to use is - \n{\"topics\":\n\t[{\"topic\": "
           "\"foo\"},{\"topic\": \"foo1\"}],\n\"version\":1\n}",
           "topics to reassign json file path"),
    Option("broker-list", "The list of brokers to which the partitions need to be reassigned "
           "in the form \"0,1,2\". This is required if --topics-to-move-json-file is used to "
           "generate reassignment configuration", "brokerlist"),
    Option("disable-rack-aware", "Disable rack aware replica assignment"),
    Option("throttle", "The movement of partitions between brokers will be throttled to this "
           "value (bytes/sec). This option can be included with --execute when a reassignment "
           "is started, and it can be altered by resubmitting the current reassignment along "
           "with the --additional flag. The throttle rate should be at least 1 KB/s.",
           "throttle", type=_long, default=-1, type_name="Long"),
    Option("replica-alter-log-dirs-throttle", "The movement of replicas between log "
           "directories on the same broker will be throttled to this value (bytes/sec). This "
           "option can be included with --execute when a reassignment is started, and it can "
           "be altered by resubmitting the current reassignment along with the --additional "
           "flag. The throttle rate should be at least 1 KB/s.",
           "replicaAlterLogDirsThrottle", type=_long, default=-1, type_name="Long"),
    Option("timeout", "The maximum time in ms to wait for log directory replica assignment to "
           "begin.", "timeout", type=_long, default=10000, type_name="Long"),
    Option("additional", "Execute this reassignment in addition to any other ongoing ones. "
           "This option can also be used to change the throttle of an ongoing reassignment."),
    Option("preserve-throttles", "Do not modify broker or topic throttles."),
]
PARSER = OptionParser(OPTIONS, HELP_TEXT)
ACTIONS = ("generate", "execute", "verify", "cancel", "list")
REQUIRED_ARGS = {
    "verify": ("reassignment-json-file",),
    "generate": ("topics-to-move-json-file", "broker-list"),
    "execute": ("reassignment-json-file",),
    "cancel": ("reassignment-json-file",),
    "list": (),
}
PERMITTED_ARGS = {
    "verify": ("bootstrap-server", "command-config", "preserve-throttles"),
    "generate": ("bootstrap-server", "broker-list", "command-config", "disable-rack-aware"),
    "execute": ("additional", "bootstrap-server", "command-config", "throttle",
                "replica-alter-log-dirs-throttle", "timeout"),
    "cancel": ("bootstrap-server", "command-config", "preserve-throttles", "timeout"),
    "list": ("bootstrap-server", "command-config"),
}


class TerseError(Exception):
    """Kafka's TerseException: the message alone on stdout, exit code 1."""


class JavaFailure(Exception):
    """Any other exception ending Kafka's tool: ``Error: <message>`` then its stack trace."""

    def __init__(self, java_class: str, message: str) -> None:
        super().__init__(message)
        self.java_class = java_class
        self.message = message


def _execution_failure(error: KafkaError) -> JavaFailure:
    """An admin call's failure as Kafka's tool sees it: the ExecutionException of the future,
    whose message is the cause's toString."""
    return JavaFailure("java.util.concurrent.ExecutionException", java_error(error))


# ------------------------------------------------------------------------------------------
# ordering and formatting, as Kafka's Java collections iterate


def _tp_order(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    """compareTopicPartitions: by topic, then partition."""
    return sorted(tps, key=lambda tp: (tp.topic, tp.partition))


def _hash_set_of_tps(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    items = list(dict.fromkeys(tps))
    keys = java_hashmap_order([(tp.topic, tp.partition) for tp in items],
                              topic_partition_hashcode)
    return [TopicPartition(topic, partition) for topic, partition in keys]


def _hash_set_of_ints(values: Iterable[int]) -> list[int]:
    return java_hashmap_order(list(dict.fromkeys(values)), lambda v: v)


def _hash_set_of_strings(values: Iterable[str]) -> list[str]:
    return java_hashmap_order(list(dict.fromkeys(values)))


def _java_set(values: Iterable[Any]) -> str:
    """A Java Set's toString."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def _duplicates_ints(values: Sequence[int]) -> list[int]:
    return _hash_set_of_ints(v for v in values if values.count(v) > 1)


def format_as_reassignment_json(parts: dict[TopicPartition, Sequence[int]]) -> str:
    """Kafka's formatAsReassignmentJson (log_dirs all "any"), compact."""
    partitions = [{"topic": tp.topic, "partition": tp.partition, "replicas": list(parts[tp]),
                   "log_dirs": [ANY_LOG_DIR] * len(parts[tp])} for tp in _tp_order(parts)]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"),
                      ensure_ascii=False)


# ------------------------------------------------------------------------------------------
# the JSON files


def _jackson_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _mapping_error(message: str) -> JavaFailure:
    return JavaFailure(JSON_MAPPING, message)


def _parse_json(text: str) -> Any:
    """Kafka's Json.parseFull / tryParseFull: the document, or None when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _as_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _mapping_error(f"Expected JSON object, received {_jackson_text(value)}")
    return value


def _as_array(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _mapping_error(f"Expected JSON array, received {_jackson_text(value)}")
    return value


def _as_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and \
            -(1 << 31) <= value < (1 << 31):
        return value
    raise _mapping_error(f"Expected `Integer` value, received {_jackson_text(value)}")


def _as_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _mapping_error(f"Expected `String` value, received {_jackson_text(value)}")


def _apply(entry: dict[str, Any], name: str) -> Any:
    if name not in entry:
        raise _mapping_error(f"No such field exists: `{name}`")
    return entry[name]


def _version(document: dict[str, Any], default: int) -> int:
    return _as_int(document["version"]) if "version" in document else default


def parse_topics_data(text: str) -> list[str]:
    """Kafka's parseTopicsData: the topics of ``{"topics": [{"topic": "foo"}], "version": 1}``."""
    document = _parse_json(text)
    if document is None:
        raise JavaFailure(ADMIN_OPERATION, "The input string is not a valid JSON")
    document = _as_object(document)
    version = _version(document, 1)
    if version != 1:
        raise JavaFailure(ADMIN_OPERATION, f"Not supported version field value {version}")
    if "topics" not in document:
        return []
    return [_as_str(_apply(_as_object(entry), "topic"))
            for entry in _as_array(document["topics"])]


@dataclass
class ReassignmentData:
    """The partitions of a reassignment file, in file order (duplicates kept), and the replicas
    with a log directory other than "any"."""

    partitions: list[tuple[TopicPartition, list[int]]] = field(default_factory=list)
    log_dirs: dict[tuple[TopicPartition, int], str] = field(default_factory=dict)


def parse_reassignment_data(text: str) -> ReassignmentData:
    """Kafka's parsePartitionReassignmentData."""
    document = _parse_json(text)
    if document is None:
        raise JavaFailure(ADMIN_OPERATION, "com.fasterxml.jackson.core.JsonParseException: "
                                           "The input string is not a valid JSON")
    document = _as_object(document)
    version = _version(document, EARLIEST_VERSION)
    if version != 1:
        raise JavaFailure(ADMIN_OPERATION, f"Not supported version field value {version}")
    data = ReassignmentData()
    for entry in _as_array(document.get("partitions", [])):
        fields = _as_object(entry)
        tp = TopicPartition(_as_str(_apply(fields, "topic")), _as_int(_apply(fields, "partition")))
        replicas = [_as_int(r) for r in _as_array(_apply(fields, "replicas"))]
        if "log_dirs" in fields:
            log_dirs = [_as_str(d) for d in _as_array(fields["log_dirs"])]
        else:
            log_dirs = [ANY_LOG_DIR] * len(replicas)
        if len(replicas) != len(log_dirs):
            raise JavaFailure(ADMIN_COMMAND_FAILED,
                              f"Size of replicas list {_java_set(replicas)} is different from "
                              f"size of log dirs list {_java_set(log_dirs)} for partition {tp}")
        data.partitions.append((tp, replicas))
        for replica, log_dir in zip(replicas, log_dirs):
            if log_dir != ANY_LOG_DIR:
                data.log_dirs[(tp, replica)] = log_dir
    return data


def parse_execute_assignment(text: str) -> tuple[dict[TopicPartition, list[int]],
                                                 dict[tuple[TopicPartition, int], str]]:
    """Kafka's parseExecuteAssignmentArgs: the checks --execute makes on its file."""
    data = parse_reassignment_data(text)
    if not data.partitions:
        raise JavaFailure(ADMIN_COMMAND_FAILED, "Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in data.partitions):
        raise JavaFailure(ADMIN_COMMAND_FAILED, "Partition replica list cannot be empty")
    tps = [tp for tp, _ in data.partitions]
    duplicate_parts = _hash_set_of_tps(tp for tp in tps if tps.count(tp) > 1)
    if duplicate_parts:
        raise JavaFailure(ADMIN_COMMAND_FAILED,
                          "Partition reassignment contains duplicate topic partitions: "
                          + ",".join(str(tp) for tp in duplicate_parts))
    duplicate_entries = [(tp, dups) for tp, replicas in data.partitions
                         if (dups := _duplicates_ints(replicas))]
    if duplicate_entries:
        text = ". ".join(f"{tp} contains multiple entries for {','.join(map(str, dups))}"
                         for tp, dups in duplicate_entries)
        raise JavaFailure(ADMIN_COMMAND_FAILED,
                          f"Partition replica lists may not contain duplicate entries: {text}")
    return dict(data.partitions), data.log_dirs


def read_file(path: str) -> str:
    """Kafka's Utils.readFileAsString."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise JavaFailure("java.nio.file.NoSuchFileException", path) from None
    except OSError as exc:
        raise JavaFailure("java.io.IOException", f"{path}: {exc.strerror}") from None


# ------------------------------------------------------------------------------------------
# replica placement for --generate (Kafka's AdminUtils.assignReplicasToBrokers)


@dataclass(frozen=True)
class BrokerMetadata:
    id: int
    rack: str | None


def _replica_index(first: int, second_shift: int, index: int, brokers: int) -> int:
    shift = 1 + (second_shift + index) % (brokers - 1)
    return (first + shift) % brokers


def _rack_alternated(brokers: Sequence[BrokerMetadata]) -> list[int]:
    """AdminUtils.getRackAlternatedBrokerList: one broker of each rack (racks sorted) in turn."""
    by_rack: dict[str, list[int]] = {}
    for broker in brokers:
        by_rack.setdefault(broker.rack or "", []).append(broker.id)
    iterators = {rack: iter(sorted(ids)) for rack, ids in by_rack.items()}
    racks = sorted(iterators)
    result: list[int] = []
    index = 0
    while len(result) < len(brokers):
        broker = next(iterators[racks[index]], None)
        if broker is not None:
            result.append(broker)
        index = (index + 1) % len(racks)
    return result


def assign_replicas_to_brokers(brokers: Sequence[BrokerMetadata], partitions: int,
                               replication_factor: int, rng: random.Random,
                               fixed_start_index: int = -1) -> dict[int, list[int]]:
    """AdminUtils.assignReplicasToBrokers (start partition 0): the first replicas round-robin
    from a random broker, the others shifted, rack-aware when the brokers have racks."""
    if partitions <= 0:
        raise JavaFailure("org.apache.kafka.common.errors.InvalidPartitionsException",
                          "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise JavaFailure("org.apache.kafka.common.errors.InvalidReplicationFactorException",
                          "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise JavaFailure("org.apache.kafka.common.errors.InvalidReplicationFactorException",
                          f"Replication factor: {replication_factor} larger than available "
                          f"brokers: {len(brokers)}.")
    rack_aware = any(b.rack is not None for b in brokers)
    if rack_aware and any(b.rack is None for b in brokers):
        raise JavaFailure(ADMIN_OPERATION, "Not all brokers have rack information for replica "
                                           "rack aware assignment.")
    ids = _rack_alternated(brokers) if rack_aware else [b.id for b in brokers]
    racks = {b.id: b.rack for b in brokers}
    rack_count = len(set(racks.values()))
    count = len(ids)
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(count)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(count)
    assignment: dict[int, list[int]] = {}
    for partition in range(partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ids[first]]
        if not rack_aware:
            replicas += [ids[_replica_index(first, shift, j, count)]
                         for j in range(replication_factor - 1)]
        else:
            racks_used = {racks[ids[first]]}
            brokers_used = {ids[first]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    broker = ids[_replica_index(first, shift * rack_count, k, count)]
                    k += 1
                    rack = racks[broker]
                    # Skip a broker whose rack already has a replica while some rack has none,
                    # or that has one while some broker has none.
                    if ((rack not in racks_used or len(racks_used) == rack_count)
                            and (broker not in brokers_used or len(brokers_used) == count)):
                        replicas.append(broker)
                        racks_used.add(rack)
                        brokers_used.add(broker)
                        break
        assignment[partition] = replicas
    return assignment


# ------------------------------------------------------------------------------------------
# the actions


async def _describe_topics(admin: AdminClient, topics: Iterable[str]) -> dict[str, Any]:
    results = await admin.describe_topics(list(dict.fromkeys(topics)), raise_errors=False)
    for name, result in results.items():
        if isinstance(result, KafkaError):
            if result.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise _execution_failure(KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                    f"Topic {name} not found."))
            raise _execution_failure(result)
    return results


async def replica_assignment_for_topics(admin: AdminClient, topics: Iterable[str]
                                        ) -> dict[TopicPartition, list[int]]:
    descriptions = await _describe_topics(admin, topics)
    return {TopicPartition(name, info.partition): list(info.replicas)
            for name, description in descriptions.items() for info in description.partitions}


async def replica_assignment_for_partitions(admin: AdminClient,
                                            partitions: Iterable[TopicPartition]
                                            ) -> dict[TopicPartition, list[int]]:
    wanted = set(partitions)
    current = await replica_assignment_for_topics(admin, (tp.topic for tp in wanted))
    found = {tp: replicas for tp, replicas in current.items() if tp in wanted}
    missing = _hash_set_of_tps(tp for tp in wanted if tp not in found)
    if missing:
        raise _execution_failure(KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "Unable to find partition: " + ", ".join(str(tp) for tp in missing)))
    return found


async def _cluster_nodes(admin: AdminClient) -> list[Any]:
    return (await admin.describe_cluster()).nodes


async def generate(admin: AdminClient, topics_json: str, broker_list: str,
                   rack_aware: bool, out: Any, rng: random.Random | None = None
                   ) -> tuple[dict[TopicPartition, list[int]], dict[TopicPartition, list[int]]]:
    """--generate: (proposed, current) assignments, printed as Kafka prints them."""
    brokers: list[int] = []
    for text in broker_list.split(","):
        if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(1 << 31) <= int(text) < (1 << 31):
            raise JavaFailure("java.lang.NumberFormatException", f'For input string: "{text}"')
        brokers.append(int(text))
    duplicates = _duplicates_ints(brokers)
    if duplicates:
        raise JavaFailure(ADMIN_COMMAND_FAILED,
                          f"Broker list contains duplicate entries: {_java_set(duplicates)}")
    topics = parse_topics_data(topics_json)
    duplicate_topics = _hash_set_of_strings(t for t in topics if topics.count(t) > 1)
    if duplicate_topics:
        raise JavaFailure(ADMIN_COMMAND_FAILED, "List of topics to reassign contains duplicate "
                                                f"entries: {_java_set(duplicate_topics)}")
    current = await replica_assignment_for_topics(admin, topics)
    wanted = set(brokers)
    metadata = [BrokerMetadata(node.id, node.rack if rack_aware else None)
                for node in await _cluster_nodes(admin) if node.id in wanted]
    rackless = sum(1 for b in metadata if b.rack is None)
    if rack_aware and rackless not in (0, len(metadata)):
        raise JavaFailure(ADMIN_OPERATION, "Not all brokers have rack information. Add "
                                           "--disable-rack-aware in command line to make replica "
                                           "assignment without rack information.")
    rng = rng or random.Random()
    proposed: dict[TopicPartition, list[int]] = {}
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in current:
        by_topic.setdefault(tp.topic, []).append(tp)
    for topic, tps in by_topic.items():
        replication_factor = len(current[tps[0]])
        for partition, replicas in assign_replicas_to_brokers(
                metadata, len(tps), replication_factor, rng).items():
            proposed[TopicPartition(topic, partition)] = replicas
    print(f"Current partition replica assignment\n{format_as_reassignment_json(current)}\n",
          file=out)
    print(f"Proposed partition reassignment configuration\n"
          f"{format_as_reassignment_json(proposed)}", file=out)
    return proposed, current


@dataclass
class PartitionMove:
    sources: set[int]
    destinations: set[int]


def proposed_move_map(current_reassignments: dict[TopicPartition, Any],
                      proposed: dict[TopicPartition, list[int]],
                      current: dict[TopicPartition, list[int]]
                      ) -> dict[str, dict[int, PartitionMove]]:
    """Kafka's calculateProposedMoveMap: per topic and partition, the brokers the data comes
    from (the current replicas, or those of the reassignment in progress) and goes to."""
    moves: dict[str, dict[int, PartitionMove]] = {}
    for tp, reassignment in current_reassignments.items():
        sources = set(reassignment.replicas) - set(reassignment.adding_replicas)
        moves.setdefault(tp.topic, {})[tp.partition] = PartitionMove(
            sources, set(reassignment.adding_replicas))
    for tp, replicas in proposed.items():
        partition_moves = moves.setdefault(tp.topic, {})
        if tp.partition in partition_moves:
            sources = set(partition_moves[tp.partition].sources)
        elif tp in current:
            sources = set(current[tp])
        else:
            raise JavaFailure("java.lang.RuntimeException", f"Trying to reassign a topic "
                                                            f"partition {tp} with 0 replicas")
        partition_moves[tp.partition] = PartitionMove(sources, set(replicas) - sources)
    return moves


def leader_throttles(moves: dict[str, dict[int, PartitionMove]]) -> dict[str, str]:
    """calculateLeaderThrottles: "partition:source" of every source, sorted as strings."""
    return {topic: ",".join(sorted({f"{p}:{s}" for p, move in parts.items()
                                    for s in move.sources}))
            for topic, parts in moves.items()}


def follower_throttles(moves: dict[str, dict[int, PartitionMove]]) -> dict[str, str]:
    """calculateFollowerThrottles: "partition:destination" of every new replica."""
    return {topic: ",".join(sorted({f"{p}:{d}" for p, move in parts.items()
                                    for d in move.destinations if d not in move.sources}))
            for topic, parts in moves.items()}


def reassigning_brokers(moves: dict[str, dict[int, PartitionMove]]) -> list[int]:
    return sorted({b for parts in moves.values() for move in parts.values()
                   for b in move.sources | move.destinations})


async def _incremental_alter(admin: AdminClient,
                             changes: dict[ConfigResource, list[AlterConfigOp]]) -> None:
    if not changes:
        return
    results = await admin.incremental_alter_configs(changes, raise_errors=False)
    for result in results.values():
        if isinstance(result, KafkaError):
            raise _execution_failure(result)


async def modify_reassignment_throttle(admin: AdminClient,
                                       moves: dict[str, dict[int, PartitionMove]],
                                       throttle: int, out: Any) -> None:
    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    topic_changes = {
        ConfigResource.topic(topic): [
            AlterConfigOp(LEADER_REPLICAS, leaders[topic], AlterConfigOpType.SET),
            AlterConfigOp(FOLLOWER_REPLICAS, followers[topic], AlterConfigOpType.SET)]
        for topic in moves}
    await _incremental_alter(admin, topic_changes)
    broker_changes = {
        ConfigResource.broker(broker): [
            AlterConfigOp(LEADER_RATE, str(throttle), AlterConfigOpType.SET),
            AlterConfigOp(FOLLOWER_RATE, str(throttle), AlterConfigOpType.SET)]
        for broker in reassigning_brokers(moves)}
    await _incremental_alter(admin, broker_changes)
    print(f"The inter-broker throttle limit was set to {throttle} B/s", file=out)


async def execute_assignment(admin: AdminClient, additional: bool, reassignment_json: str,
                             throttle: int, log_dir_throttle: int, out: Any) -> None:
    """--execute (Kafka's executeAssignment)."""
    proposed, proposed_log_dirs = parse_execute_assignment(reassignment_json)
    current_reassignments = await admin.list_partition_reassignments()
    if not additional and current_reassignments:
        raise TerseError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    node_ids = {node.id for node in await _cluster_nodes(admin)}
    unknown = next((b for replicas in proposed.values() for b in replicas
                    if b not in node_ids), None)
    if unknown is not None:
        raise JavaFailure(ADMIN_COMMAND_FAILED, f"Unknown broker id {unknown}")
    current = await replica_assignment_for_partitions(admin, proposed)
    print("Current partition replica assignment\n\n"
          f"{format_as_reassignment_json(current)}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback", file=out)
    if throttle >= 0 or log_dir_throttle >= 0:
        print(YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE, file=out)
        if throttle >= 0:
            moves = proposed_move_map(current_reassignments, proposed, current)
            await modify_reassignment_throttle(admin, moves, throttle, out)
        if log_dir_throttle >= 0:
            brokers = sorted({broker for _tp, broker in proposed_log_dirs})
            await _incremental_alter(admin, {
                ConfigResource.broker(b): [AlterConfigOp(LOG_DIRS_RATE, str(log_dir_throttle),
                                                         AlterConfigOpType.SET)]
                for b in brokers})
            print(f"The replica-alter-dir throttle limit was set to {log_dir_throttle} B/s",
                  file=out)
    results = await admin.alter_partition_reassignments(proposed, raise_errors=False)
    errors = {tp: r for tp, r in results.items() if isinstance(r, KafkaError)}
    if errors:
        raise TerseError("Error reassigning partition(s):\n" + "\n".join(
            f"{tp}: {errors[tp].message}" for tp in _tp_order(errors)))
    print(f"Successfully started partition reassignment{'' if len(proposed) == 1 else 's'} "
          f"for {','.join(str(tp) for tp in _tp_order(proposed))}", file=out)
    if proposed_log_dirs:
        # Moving a replica to another directory of its broker is AlterReplicaLogDirs, which
        # Odradek brokers do not serve: Kafka's admin client fails such a call this way.
        raise _execution_failure(KafkaError(
            ErrorCode.UNSUPPORTED_VERSION, "The node does not support ALTER_REPLICA_LOG_DIRS"))


@dataclass(frozen=True)
class PartitionReassignmentState:
    current_replicas: list[int]
    target_replicas: list[int]
    done: bool


async def find_partition_reassignment_states(
        admin: AdminClient, targets: list[tuple[TopicPartition, list[int]]]
) -> tuple[dict[TopicPartition, PartitionReassignmentState], bool]:
    """Kafka's findPartitionReassignmentStates: (each target's state, whether any reassignment
    is in progress in the cluster)."""
    ongoing = await admin.list_partition_reassignments()
    states: dict[TopicPartition, PartitionReassignmentState] = {}
    not_found = [(tp, replicas) for tp, replicas in targets if tp not in ongoing]
    for tp, replicas in targets:
        if tp in ongoing:
            states[tp] = PartitionReassignmentState(list(ongoing[tp].replicas), replicas, False)
    if not_found:
        results = await admin.describe_topics(list(dict.fromkeys(tp.topic for tp, _ in not_found)),
                                              raise_errors=False)
        for tp, replicas in not_found:
            description = results.get(tp.topic)
            if isinstance(description, KafkaError):
                if description.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise _execution_failure(description)
                states[tp] = PartitionReassignmentState([], replicas, True)
                continue
            by_partition = {info.partition: info for info in description.partitions}
            if tp.partition not in by_partition:
                # Kafka's "Too few partitions found": an unknown partition has no replicas.
                states[tp] = PartitionReassignmentState([], replicas, True)
                continue
            states[tp] = PartitionReassignmentState(
                list(by_partition[tp.partition].replicas), replicas, True)
    return states, bool(ongoing)


def partition_reassignment_states_text(states: dict[TopicPartition,
                                                    PartitionReassignmentState]) -> str:
    lines = ["Status of partition reassignment:"]
    for tp in _tp_order(states):
        state = states[tp]
        if not state.done:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif state.current_replicas == state.target_replicas:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp}, but replica set "
                         f"is {','.join(map(str, state.current_replicas))} rather than "
                         f"{','.join(map(str, state.target_replicas))}.")
    return "\n".join(lines)


async def clear_all_throttles(admin: AdminClient,
                              targets: list[tuple[TopicPartition, list[int]]], out: Any,
                              *, end: str = "\n") -> None:
    brokers = _hash_set_of_ints([*(node.id for node in await _cluster_nodes(admin)),
                                 *(b for _, replicas in targets for b in replicas)])
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          f"{','.join(map(str, brokers))}", file=out)
    await _incremental_alter(admin, {
        ConfigResource.broker(b): [AlterConfigOp(name, None, AlterConfigOpType.DELETE)
                                   for name in BROKER_LEVEL_THROTTLES]
        for b in brokers})
    topics = _hash_set_of_strings(tp.topic for tp, _ in targets)
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} "
          f"{','.join(topics)}", file=out, end=end)
    await _incremental_alter(admin, {
        ConfigResource.topic(t): [AlterConfigOp(name, None, AlterConfigOpType.DELETE)
                                  for name in TOPIC_LEVEL_THROTTLES]
        for t in topics})


async def verify_assignment(admin: AdminClient, reassignment_json: str,
                            preserve_throttles: bool, out: Any
                            ) -> tuple[dict[TopicPartition, PartitionReassignmentState], bool]:
    """--verify (Kafka's verifyAssignment); (states, whether any reassignment is ongoing)."""
    data = parse_reassignment_data(reassignment_json)
    states, ongoing = await find_partition_reassignment_states(admin, data.partitions)
    print(partition_reassignment_states_text(states), file=out)
    # Kafka then prints the log directory moves' states: none here (no log_dirs moves are
    # made), which prints an empty line.
    print(file=out)
    if not ongoing and not preserve_throttles:
        await clear_all_throttles(admin, data.partitions, out)
    return states, ongoing


async def cancel_assignment(admin: AdminClient, reassignment_json: str,
                            preserve_throttles: bool, out: Any) -> list[TopicPartition]:
    """--cancel (Kafka's cancelAssignment); the partitions whose reassignment was cancelled."""
    data = parse_reassignment_data(reassignment_json)
    wanted = [tp for tp, _ in data.partitions]
    ongoing = await admin.list_partition_reassignments(wanted)
    cancelling = [tp for tp, r in ongoing.items()
                  if not r.adding_replicas or r.removing_replicas]
    if cancelling:
        results = await admin.alter_partition_reassignments({tp: None for tp in cancelling},
                                                            raise_errors=False)
        errors = {tp: r for tp, r in results.items() if isinstance(r, KafkaError)}
        if errors:
            raise TerseError(f"Error cancelling partition reassignment"
                             f"{'' if len(errors) == 1 else 's'} for:\n" + "\n".join(
                                 f"{tp}: {errors[tp].message}" for tp in _tp_order(errors)))
        print(f"Successfully cancelled partition reassignment"
              f"{'' if len(cancelling) == 1 else 's'} for: "
              f"{','.join(str(tp) for tp in _tp_order(cancelling))}", file=out)
    else:
        print("None of the specified partition reassignments are active.", file=out)
    # Kafka prints this without a line break (the throttle messages follow on the same line).
    print("None of the specified partition moves are active.", file=out, end="")
    if not preserve_throttles:
        await clear_all_throttles(admin, data.partitions, out)
    return cancelling


async def current_reassignments_text(admin: AdminClient) -> str:
    """Kafka's curReassignmentsToString (--list)."""
    ongoing = await admin.list_partition_reassignments()
    lines = []
    for tp in _tp_order(ongoing):
        r = ongoing[tp]
        line = f"{tp}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding_replicas:
            line += f" adding: {','.join(map(str, r.adding_replicas))}."
        if r.removing_replicas:
            line += f" removing: {','.join(map(str, r.removing_replicas))}."
        lines.append(line)
    if not lines:
        return "No partition reassignments found."
    return "Current partition reassignments:\n" + "\n".join(lines)


# ------------------------------------------------------------------------------------------
# main


def validate(options: ParsedOptions) -> str:
    """Kafka's validateAndParseArgs: the action."""
    actions = [a for a in ACTIONS if options.has(a)]
    if len(actions) != 1:
        PARSER.fail("Command must include exactly one action: "
                    + ", ".join(f"--{a}" for a in ACTIONS))
    action = actions[0]
    if not options.has("bootstrap-server"):
        PARSER.fail("Please specify either --bootstrap-server or --bootstrap-controller")
    PARSER.require(options, *REQUIRED_ARGS[action])
    allowed = {action, *REQUIRED_ARGS[action], *PERMITTED_ARGS[action]}
    for name in options.values:
        if name not in allowed:
            PARSER.fail(f'Option "[{name}]" can\'t be used with action "[{action}]"')
    return action


async def handle_action(options: ParsedOptions, action: str, out: Any) -> None:
    props = admin_props(options, options.value("bootstrap-server"))
    props.setdefault("client.id", "reassign-partitions-tool")
    async with AdminClient(props) as admin:
        if action == "verify":
            await verify_assignment(admin, read_file(options.value("reassignment-json-file")),
                                    options.has("preserve-throttles"), out)
        elif action == "generate":
            await generate(admin, read_file(options.value("topics-to-move-json-file")),
                           options.value("broker-list"), not options.has("disable-rack-aware"),
                           out)
        elif action == "execute":
            await execute_assignment(admin, options.has("additional"),
                                     read_file(options.value("reassignment-json-file")),
                                     options.value("throttle"),
                                     options.value("replica-alter-log-dirs-throttle"), out)
        elif action == "cancel":
            await cancel_assignment(admin, read_file(options.value("reassignment-json-file")),
                                    options.has("preserve-throttles"), out)
        else:
            print(await current_reassignments_text(admin), file=out)


def execute(options: ParsedOptions) -> int:
    action = validate(options)
    out = sys.stdout
    try:
        asyncio.run(handle_action(options, action, out))
    except TerseError as exc:
        print(exc, file=out)
        return 1
    except JavaFailure as exc:
        print(f"Error: {exc.message}", file=out)
        print(f"{exc.java_class}: {exc.message}", file=out)
        return 1
    except KafkaError as exc:
        print(f"Error: {java_error(exc)}", file=out)
        print(f"java.util.concurrent.ExecutionException: {java_error(exc)}", file=out)
        return 1
    except (KafkaConfigError, OSError) as exc:
        print(f"Error: {exc}", file=out)
        print(f"{type(exc).__name__}: {exc}", file=out)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
