"""`odradek transactions`: Kafka's kafka-transactions.sh (TransactionsCommand).

    odradek transactions --bootstrap-server HOST:PORT [--command-config FILE] COMMAND ...

Commands (their options follow the command name, the global ones precede it):

* ``list``: every transactional id each broker coordinates;
* ``describe --transactional-id ID``: its coordinator's state for it;
* ``describe-producers --topic T --partition P [--broker-id N]``: the partition's active
  producers (from its leader, or from replica N);
* ``abort --topic T --partition P (--start-offset O | --producer-id I --producer-epoch E
  --coordinator-epoch C)``: write an ABORT marker for a hanging transaction;
* ``find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout M]``:
  open transactions older than M minutes (default 15) that their coordinator no longer knows.

Output is Kafka's: a table whose header and cells are padded to the column width and each
followed by a tab; failures print ``<what failed>: <message>. Enable debug logging for
additional detail.`` on stderr and exit with 1.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from odradek.cli.common import configure_logging
from odradek.cli.tool_options import (
    Option,
    OptionParser,
    ParsedOptions,
    ToolExit,
    UsageError,
    admin_props,
)
from odradek.client import (
    AbortTransactionSpec,
    AdminClient,
    KafkaConfigError,
    KafkaError,
    ProducerState,
    TopicPartition,
    TransactionDescription,
)
from odradek.protocol.errors import ErrorCode

GLOBAL_OPTIONS = [
    Option("bootstrap-server", "hostname and port for the broker to connect to, in the form "
           "`host:port`  (multiple comma-separated entries can be given)", "host:port"),
    Option("command-config", "property file containing configs to be passed to admin client",
           "FILE"),
]
DESCRIPTION = ("This tool is used to analyze the transactional state of producers in the "
               "cluster. It can be used to detect and recover from hanging transactions.")
GLOBAL_PARSER = OptionParser(GLOBAL_OPTIONS, DESCRIPTION + "\n\ncommands: list, describe, "
                             "describe-producers, abort, find-hanging")

_TOPIC = Option("topic", "topic name", "topic")
_PARTITION = Option("partition", "partition number", "partition", int)

COMMAND_PARSERS = {
    "list": OptionParser([], "list transactions", version=False),
    "describe": OptionParser(
        [Option("transactional-id", "transactional id", "transactional id")],
        "Describe the state of an active transactional-id.", version=False),
    "describe-producers": OptionParser(
        [Option("broker-id", "optional broker id to describe the producer state on a "
                "specific replica", "broker id", int), _TOPIC, _PARTITION],
        "describe the states of active producers for a topic partition", version=False),
    "abort": OptionParser(
        [_TOPIC, _PARTITION,
         Option("start-offset", "start offset of the transaction to abort", "offset", int),
         Option("producer-id", "producer id", "producer id", int),
         Option("producer-epoch", "producer epoch", "producer epoch", int),
         Option("coordinator-epoch", "coordinator epoch", "coordinator epoch", int)],
        "abort a hanging transaction (requires administrative privileges)", version=False),
    "find-hanging": OptionParser(
        [Option("broker-id", "broker id to search for hanging transactions", "broker id",
                int),
         Option("max-transaction-timeout", "maximum transaction timeout in minutes to limit "
                "the scope of the search", "minutes", int, default=15),
         Option("topic", "topic name to limit search to", "topic"), _PARTITION],
        "find hanging transactions", version=False),
}

DESCRIBE_PRODUCERS_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                              "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions"]
LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
FIND_HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                        "StartOffset", "LastTimestamp", "Duration(min)"]
#: Kafka's FindHangingTransactionsCommand.MAX_BATCH_SIZE: partitions per DescribeProducers
_MAX_BATCH_SIZE = 500


class CommandFailed(Exception):
    """Kafka's printErrorAndExit: the message on stderr, exit code 1."""


def _failed(message: str, error: BaseException | None = None) -> CommandFailed:
    if error is None:
        return CommandFailed(message)
    text = error.message if isinstance(error, KafkaError) else str(error)
    return CommandFailed(f"{message}: {text}. Enable debug logging for additional detail.")


def pretty_print_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                       out: TextIO) -> None:
    """Kafka's prettyPrintTable: each cell left-aligned to its column's width, then a tab."""
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row)]
    for row in [headers, *rows]:
        print("".join(f"{cell:<{width}}\t" for cell, width in zip(row, widths)), file=out)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------------- commands


async def list_transactions(admin: AdminClient, options: ParsedOptions, out: TextIO) -> None:
    try:
        by_broker = await admin.list_transactions_by_broker()
    except KafkaError as error:
        raise _failed("Failed to list transactions", error) from None
    rows = [[listing.transactional_id, str(broker), str(listing.producer_id), listing.state]
            for broker, listings in by_broker.items() for listing in listings]
    pretty_print_table(LIST_HEADERS, rows, out)


async def describe_transaction(admin: AdminClient, options: ParsedOptions,
                               out: TextIO) -> None:
    transactional_id = _required(options, "describe", "transactional-id")
    try:
        result = (await admin.describe_transactions([transactional_id]))[transactional_id]
    except KafkaError as error:
        raise _failed(f"Failed to describe transaction state of transactional-id "
                      f"`{transactional_id}`", error) from None
    assert isinstance(result, TransactionDescription)
    if result.transaction_start_time_ms is None:
        start = duration = "None"
    else:
        start = str(result.transaction_start_time_ms)
        duration = str(_now_ms() - result.transaction_start_time_ms)
    partitions = ",".join(str(tp) for tp in sorted(result.topic_partitions))
    pretty_print_table(DESCRIBE_HEADERS, [[
        str(result.coordinator_id), transactional_id, str(result.producer_id),
        str(result.producer_epoch), result.state, str(result.transaction_timeout_ms), start,
        duration, partitions]], out)


async def describe_producers(admin: AdminClient, options: ParsedOptions, out: TextIO) -> None:
    tp = TopicPartition(_required(options, "describe-producers", "topic"),
                        _required(options, "describe-producers", "partition"))
    broker_id = options.value("broker-id")
    try:
        states = (await admin.describe_producers([tp], broker_id=broker_id))[tp]
    except KafkaError as error:
        where = "leader" if broker_id is None else f"broker {broker_id}"
        raise _failed(f"Failed to describe producers for partition {tp} on {where}",
                      error) from None
    assert isinstance(states, list)
    rows = [[str(s.producer_id), str(s.producer_epoch),
             str(-1 if s.coordinator_epoch is None else s.coordinator_epoch),
             str(s.last_sequence), str(s.last_timestamp),
             "None" if s.current_transaction_start_offset is None
             else str(s.current_transaction_start_offset)]
            for s in states]
    pretty_print_table(DESCRIBE_PRODUCERS_HEADERS, rows, out)


async def abort_transaction(admin: AdminClient, options: ParsedOptions, out: TextIO) -> None:
    tp = TopicPartition(_required(options, "abort", "topic"),
                        _required(options, "abort", "partition"))
    start_offset = options.value("start-offset")
    producer_id = options.value("producer-id")
    if start_offset is None and producer_id is None:
        raise _failed("The transaction to abort must be identified either with --start-offset "
                      "(for brokers on 3.0 or above) or with --producer-id, --producer-epoch, "
                      "and --coordinator-epoch (for older brokers)")
    if start_offset is None:
        producer_epoch = options.value("producer-epoch")
        if producer_epoch is None:
            raise _failed("Missing required argument --producer-epoch")
        coordinator_epoch = options.value("coordinator-epoch")
        if coordinator_epoch is None:
            raise _failed("Missing required argument --coordinator-epoch")
        # A transaction that hung before its first marker shows coordinator epoch -1 in
        # DescribeProducers: 0 is no greater than any coordinator epoch.
        spec = AbortTransactionSpec(tp, producer_id, producer_epoch, max(coordinator_epoch, 0))
    else:
        spec = await _abort_spec_for_offset(admin, tp, start_offset)
    try:
        await admin.abort_transaction(spec)
    except KafkaError as error:
        raise _failed(f"Failed to abort transaction {_spec_text(spec)}", error) from None


async def _abort_spec_for_offset(admin: AdminClient, tp: TopicPartition,
                                 start_offset: int) -> AbortTransactionSpec:
    try:
        states = (await admin.describe_producers([tp]))[tp]
    except KafkaError as error:
        raise _failed(f"Failed to validate producer state for partition {tp}", error) from None
    assert isinstance(states, list)
    for state in states:
        if state.current_transaction_start_offset == start_offset:
            return AbortTransactionSpec(tp, state.producer_id, state.producer_epoch,
                                        state.coordinator_epoch or 0)
    raise _failed(f"Could not find any open transactions starting at offset {start_offset} "
                  f"on partition {tp}")


def _spec_text(spec: AbortTransactionSpec) -> str:
    """AbortTransactionSpec.toString."""
    return (f"AbortTransactionSpec(topicPartition={spec.topic_partition}, producerId="
            f"{spec.producer_id}, producerEpoch={spec.producer_epoch}, coordinatorEpoch="
            f"{spec.coordinator_epoch})")


async def find_hanging(admin: AdminClient, options: ParsedOptions, out: TextIO) -> None:
    broker_id = options.value("broker-id")
    topic = options.value("topic")
    partition = options.value("partition")
    if topic is None and broker_id is None:
        raise _failed("The `find-hanging` command requires either --topic or --broker-id to "
                      "limit the scope of the search")
    if partition is not None and topic is None:
        raise _failed("The --partition argument requires --topic to be provided")
    max_timeout_ms = options.value("max-transaction-timeout") * 60_000
    partitions = await _partitions_to_search(admin, topic, partition, broker_id)
    candidates: list[tuple[TopicPartition, ProducerState]] = []
    for start in range(0, len(partitions), _MAX_BATCH_SIZE):
        batch = partitions[start:start + _MAX_BATCH_SIZE]
        try:
            by_partition = await admin.describe_producers(batch, broker_id=broker_id)
        except KafkaError as error:
            where = "Optional.empty" if broker_id is None else f"Optional[{broker_id}]"
            raise _failed(f"Failed to describe producers for {len(batch)} partitions on "
                          f"broker {where}", error) from None
        now = _now_ms()
        for tp, states in by_partition.items():
            assert isinstance(states, list)
            candidates.extend((tp, s) for s in states
                              if s.current_transaction_start_offset is not None
                              and now - s.last_timestamp > max_timeout_ms)
    hanging: list[tuple[TopicPartition, ProducerState]] = []
    if candidates:
        by_producer: dict[int, list[tuple[TopicPartition, ProducerState]]] = {}
        for tp, state in candidates:
            by_producer.setdefault(state.producer_id, []).append((tp, state))
        try:
            listings = await admin.list_transactions(producer_ids=sorted(by_producer))
        except KafkaError as error:
            raise _failed(f"Failed to list transactions for {len(by_producer)} producers",
                          error) from None
        transactional_ids = {listing.producer_id: listing.transactional_id
                             for listing in listings if listing.producer_id in by_producer}
        try:
            descriptions = await admin.describe_transactions(
                sorted(set(transactional_ids.values())), raise_errors=False)
        except KafkaError as error:
            raise _failed(f"Failed to describe {len(transactional_ids)} transactions",
                          error) from None
        for producer_id, open_transactions in by_producer.items():
            transactional_id = transactional_ids.get(producer_id)
            description = descriptions.get(transactional_id) if transactional_id else None
            if isinstance(description, KafkaError):
                if description.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise _failed(f"Failed to describe {len(transactional_ids)} transactions",
                                  description)
                description = None
            if description is None:
                # The coordinator does not know the producer: nobody will write the marker.
                hanging.extend(open_transactions)
            else:
                # An ongoing or completing transaction still lists the partitions it will
                # write markers to; an open one elsewhere hangs.
                hanging.extend(t for t in open_transactions
                               if t[0] not in description.topic_partitions)
    now = _now_ms()
    rows = [[tp.topic, str(tp.partition), str(s.producer_id), str(s.producer_epoch),
             str(-1 if s.coordinator_epoch is None else s.coordinator_epoch),
             str(s.current_transaction_start_offset), str(s.last_timestamp),
             str((now - s.last_timestamp) // 60_000)]
            for tp, s in hanging]
    pretty_print_table(FIND_HANGING_HEADERS, rows, out)


async def _partitions_to_search(admin: AdminClient, topic: str | None, partition: int | None,
                                broker_id: int | None) -> list[TopicPartition]:
    if topic is not None and partition is not None:
        return [TopicPartition(topic, partition)]
    if topic is not None:
        topics = [topic]
    else:
        try:
            topics = sorted(await admin.list_topics())
        except KafkaError as error:
            raise _failed("Failed to list topics", error) from None
    partitions: list[TopicPartition] = []
    for start in range(0, len(topics), _MAX_BATCH_SIZE):
        batch = topics[start:start + _MAX_BATCH_SIZE]
        try:
            descriptions = await admin.describe_topics(batch)
        except KafkaError as error:
            raise _failed(f"Failed to describe {len(batch)} topics", error) from None
        for name, description in descriptions.items():
            for info in description.partitions:
                if broker_id is None or broker_id in info.replicas:
                    partitions.append(TopicPartition(name, info.partition))
    return partitions


def _required(options: ParsedOptions, command: str, name: str) -> Any:
    if not options.has(name):
        raise UsageError(f"argument --{name} is required")
    return options.value(name)


COMMANDS: dict[str, Callable[[AdminClient, ParsedOptions, TextIO], Any]] = {
    "list": list_transactions,
    "describe": describe_transaction,
    "describe-producers": describe_producers,
    "abort": abort_transaction,
    "find-hanging": find_hanging,
}


# ---------------------------------------------------------------------------------- entry


async def _execute(props: dict[str, Any], command: str, options: ParsedOptions,
                   out: TextIO) -> None:
    async with AdminClient(props) as admin:
        await COMMANDS[command](admin, options, out)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    args = sys.argv[1:] if argv is None else argv
    position = next((i for i, arg in enumerate(args) if arg in COMMANDS), None)
    global_args = args if position is None else args[:position]
    command = None if position is None else args[position]
    parser = GLOBAL_PARSER
    try:
        if command is None:
            GLOBAL_PARSER.parse_or_help(args)  # --help, --version, no arguments
            raise UsageError("too few arguments: a command is required (list, describe, "
                             "describe-producers, abort, find-hanging)")
        global_options = GLOBAL_PARSER.parse(global_args)
        if global_options.has("help") or global_options.has("version"):
            GLOBAL_PARSER.parse_or_help(global_args)
        if not global_options.has("bootstrap-server"):
            raise UsageError("argument --bootstrap-server is required")
        parser = COMMAND_PARSERS[command]
        options = parser.parse(args[position + 1:])
        if options.has("help"):
            raise UsageError(parser.description)
        props = admin_props(global_options, global_options.value("bootstrap-server"))
        asyncio.run(_execute(props, command, options, sys.stdout))
    except UsageError as exc:
        print(exc, file=sys.stderr)
        print(parser.usage(), file=sys.stderr)
        return 1
    except ToolExit as exc:
        return exc.code
    except CommandFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"Failed to load admin client properties: {exc}. Enable debug logging for "
              "additional detail.", file=sys.stderr)
        return 1
    except (KafkaError, KafkaConfigError) as exc:
        print(f'Exception in thread "main" {exc}', file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
