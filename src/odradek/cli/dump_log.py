"""`odradek dump-log`: Kafka's kafka-dump-log.sh (DumpLogSegments).

Prints the batches of ``.log`` segments (and, with ``--deep-iteration`` or
``--print-data-log``, their records), the entries of ``.index`` and ``.timeindex`` files, in
Kafka 3.8's format::

    Dumping /data/t-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 0
    producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false
    deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 80 magic: 2
    compresscodec: none crc: 2889445389 isvalid: true
    | offset: 0 CreateTime: 1700000000000 keySize: -1 valueSize: 5 sequence: 0 headerKeys: []
    payload: hello

(one line per batch and per record), and the entries of producer-state ``.snapshot`` files::

    producerId: 0 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset:
    OptionalLong.empty lastTimestamp: 1700000000000 firstSequence: 0 lastSequence: 1
    lastOffset: 1 offsetDelta: 1 timestamp: 1700000000000

and the aborted transactions of ``.txnindex`` files::

    version: 0 producerId: 7 firstOffset: 10 lastOffset: 14 lastStableOffset: 15

``--offsets-decoder`` and ``--cluster-metadata-decoder``
print ``__consumer_offsets`` and ``__cluster_metadata`` records as JSON. KRaft snapshots
(``<offset>-<epoch>.checkpoint``, the same record-batch format) are dumped like segments, after a
``Snapshot end offset: N, epoch: E`` line. Control records show their content as Kafka's
DumpLogSegments does: ``LeaderChange: {json}``, ``SnapshotHeader {json}``,
``SnapshotFooter {json}``, ``KRaftVersion {json}``, ``KRaftVoters {json}``, transaction markers
as ``endTxnMarker: COMMIT coordinatorEpoch: 0``.
"""

from __future__ import annotations

import base64
import json
import mmap
import os
import re
import struct
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from odradek.cli.tool_options import Option, OptionParser, ParsedOptions, run
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError, ProtocolError
from odradek.protocol.ids import uuid_to_kafka_str
from odradek.protocol.records import (
    BatchHeader,
    ControlRecordType,
    Record,
    TimestampType,
    decode_control_key,
    decode_end_txn_marker,
    increment_sequence,
    iter_batches,
    iter_records,
    verify_crc,
)
from odradek.storage.producer_state import CorruptSnapshotError, read_snapshot_file
from odradek.storage.segment import TXN_INDEX_SUFFIX
from odradek.storage.txn_index import CorruptTxnIndexError, read_txn_index_file

RECORD_INDENT = "|"
_TIMESTAMP_TYPES = {TimestampType.CREATE_TIME: "CreateTime",
                    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
                    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType"}
_DEPRECATED_DECODERS = {"kafka.serializer.StringDecoder": "StringDecoder",
                        "kafka.serializer.LongDecoder": "LongDecoder",
                        "kafka.serializer.IntegerDecoder": "IntegerDecoder",
                        "kafka.serializer.DefaultDecoder": "DefaultDecoder"}

OPTIONS = [
    Option("cluster-metadata-decoder", "If set, log data will be parsed as cluster metadata "
           "records."),
    Option("deep-iteration", "If set, uses deep instead of shallow iteration. Automatically set "
           "if print-data-log is enabled."),
    Option("files", "REQUIRED: The comma separated list of data and index log files to be "
           "dumped.", "file1, file2, ..."),
    Option("index-sanity-check", "If set, just checks the index sanity without printing its "
           "content. This is the same check that is executed on broker startup to determine if "
           "an index needs rebuilding or not."),
    Option("key-decoder-class", "If set, used to deserialize the keys. This class should "
           "implement org.apache.kafka.tools.api.Decoder trait. Custom jar should be available "
           "in kafka/libs directory.", None, optional_argument=True,
           default="org.apache.kafka.tools.api.StringDecoder"),
    Option("max-bytes", "Limit the amount of total batches read in bytes avoiding reading the "
           "whole .log file(s).", "size", int, 2**31 - 1),
    Option("max-message-size", "Size of largest message.", "size", int, 5 * 1024 * 1024),
    Option("offsets-decoder", "If set, log data will be parsed as offset data from the "
           "__consumer_offsets topic."),
    Option("print-data-log", "If set, printing the messages content when dumping data logs. "
           "Automatically set if any decoder option is specified."),
    Option("skip-record-metadata", "Whether to skip printing metadata for each record."),
    Option("transaction-log-decoder", "If set, log data will be parsed as transaction metadata "
           "from the __transaction_state topic."),
    Option("value-decoder-class", "If set, used to deserialize the messages. This class should "
           "implement org.apache.kafka.tools.api.Decoder trait. Custom jar should be available "
           "in kafka/libs directory.", None, optional_argument=True,
           default="org.apache.kafka.tools.api.StringDecoder"),
    Option("verify-index-only", "If set, just verify the index log without printing its "
           "content."),
]
PARSER = OptionParser(OPTIONS, "This tool helps to parse a log file and dump its contents to "
                               "the console, useful for debugging a seemingly corrupt log "
                               "segment.")

Parser = Callable[[Record], tuple[str | None, str | None]]


# ------------------------------------------------------------------------------------------
# record parsers (Kafka's MessageParser implementations)


def _decoder(class_name: str | None) -> Callable[[bytes], str]:
    name = (class_name or "org.apache.kafka.tools.api.StringDecoder")
    if name in _DEPRECATED_DECODERS:
        new = _DEPRECATED_DECODERS[name]
        print(f"{name} is deprecated. Please use org.apache.kafka.tools.api.{new} instead")
        name = new
    simple = name.rsplit(".", 1)[-1]
    if simple == "IntegerDecoder":
        return lambda data: str(struct.unpack(">i", data)[0])
    if simple == "LongDecoder":
        return lambda data: str(struct.unpack(">q", data)[0])
    if simple in ("StringDecoder", "DefaultDecoder"):
        return lambda data: data.decode("utf-8", errors="replace")
    raise ValueError(f"Unknown decoder class {name}")


def decoder_parser(key_class: str | None, value_class: str | None) -> Parser:
    decode_key = _decoder(key_class)
    decode_value = _decoder(value_class)

    def parse(record: Record) -> tuple[str | None, str | None]:
        key = None if record.key is None else decode_key(record.key)
        value = None if record.value is None else decode_value(record.value)
        return key, value

    return parse


# Spec field names whose JSON name does not follow from the Python name (KRaft -> kRaft).
_JSON_NAMES = {"kraft_version": "kRaftVersion", "kraft_version_feature": "kRaftVersionFeature"}


def _camel(name: str) -> str:
    special = _JSON_NAMES.get(name)
    if special is not None:
        return special
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def message_json(value: Any, version: int | None = None) -> Any:
    """A generated message as Kafka's JSON converters write it (camelCase names); with a
    `version`, only the fields of that version."""
    if isinstance(value, m.Struct):
        names = value._FIELDS if version is None else value.fields_at(version)
        return {_camel(name): message_json(getattr(value, name), version) for name in names}
    if isinstance(value, list):
        return [message_json(item, version) for item in value]
    if isinstance(value, uuid.UUID):
        return uuid_to_kafka_str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    return value


def _json(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))


def offsets_parser(record: Record) -> tuple[str | None, str | None]:
    if record.key is None:
        raise ValueError(f"Failed to decode message at offset {record.offset} using offset "
                         "topic decoder (message had a missing key)")
    try:
        key, key_version = m.decode_consumer_offsets_key(record.key)
        value = m.decode_consumer_offsets_value(record.value, key_version)
    except ProtocolError as exc:
        return f"Error at offset {record.offset}, skipping. {exc}", None
    key_text = _json({"type": str(key_version), "data": message_json(key)})
    if value is None:
        return key_text, "<DELETE>"
    message, version = value
    return key_text, _json({"version": str(version), "data": message_json(message)})


def transaction_log_parser(record: Record) -> tuple[str | None, str | None]:
    try:
        key, key_version = m.decode_transaction_state_key(record.key or b"")
    except ProtocolError as exc:
        return f"Error at offset {record.offset}, skipping. {exc}", None
    key_text = _json({"type": str(key_version), "data": message_json(key)})
    if record.value is None:
        return key_text, "<DELETE>"
    value_cls = m.TRANSACTION_STATE_VALUE_BY_KEY_VERSION.get(key_version)
    try:
        message, version = m.decode_versioned(value_cls, record.value)
    except (ProtocolError, TypeError) as exc:
        return key_text, f"Error at offset {record.offset}, skipping. {exc}"
    return key_text, _json({"version": str(version), "data": message_json(message)})


def _record_type_name(message: Any) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(message).__name__).upper()


def cluster_metadata_parser(record: Record) -> tuple[str | None, str | None]:
    try:
        message, version = m.decode_metadata_record(record.value or b"")
        text = _json({"type": _record_type_name(message), "version": version,
                      "data": message_json(message)})
    except (ProtocolError, DecodeError) as exc:
        text = f"Error at {record.offset}, skipping. {exc}"
    return None, text


def message_parser(options: ParsedOptions) -> Parser:
    if options.has("offsets-decoder"):
        return offsets_parser
    if options.has("transaction-log-decoder"):
        return transaction_log_parser
    if options.has("cluster-metadata-decoder"):
        return cluster_metadata_parser
    return decoder_parser(options.value("key-decoder-class"), options.value("value-decoder-class"))


# ------------------------------------------------------------------------------------------
# dumping


def _base_offset(path: Path) -> int:
    return int(path.name.split(".")[0])


def _map(path: Path, limit: int | None = None) -> bytes | mmap.mmap:
    size = path.stat().st_size
    if size == 0:
        return b""
    with open(path, "rb") as file:
        data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    if limit is not None and limit < size:
        return data[:limit]
    return data


def batch_line(header: BatchHeader, position: int, valid: bool) -> str:
    last_sequence = header.last_sequence
    horizon = header.delete_horizon_ms
    horizon_text = "OptionalLong.empty" if horizon is None else f"OptionalLong[{horizon}]"
    codec = header.compression.name.lower()
    return (f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
            f"count: {header.records_count} baseSequence: {header.base_sequence} "
            f"lastSequence: {last_sequence} producerId: {header.producer_id} "
            f"producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.partition_leader_epoch} "
            f"isTransactional: {str(header.is_transactional).lower()} "
            f"isControl: {str(header.is_control).lower()} deleteHorizonMs: {horizon_text} "
            f"position: {position} {_TIMESTAMP_TYPES[header.timestamp_type]}: "
            f"{header.max_timestamp} size: {header.size} magic: {header.magic} "
            f"compresscodec: {codec} crc: {header.crc} isvalid: {str(valid).lower()}")


def record_line(header: BatchHeader, record: Record, print_contents: bool,
                skip_metadata: bool, parser: Parser) -> str:
    parts: list[str] = []
    prefix = f"{RECORD_INDENT} "
    if not skip_metadata:
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        sequence = -1 if header.base_sequence == -1 else \
            increment_sequence(header.base_sequence, record.offset - header.base_offset)
        header_keys = ",".join(name for name, _value in record.headers)
        parts.append(f"{prefix}offset: {record.offset} "
                     f"{_TIMESTAMP_TYPES[header.timestamp_type]}: {record.timestamp} "
                     f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
                     f"headerKeys: [{header_keys}]")
        prefix = " "
        if header.is_control:
            parts.append(_control_text(record))
    if print_contents and not header.is_control:
        key, payload = parser(record)
        if key is not None:
            parts.append(f"{prefix}key: {key}")
            prefix = " "
        if payload is not None:
            parts.append(f" payload: {payload}")
    return "".join(parts)


# KRaft control records: the message in the value and the label Kafka prints before its JSON.
# Kafka decodes and prints each at version 0 (LeaderChange v1's voter directory ids are not
# printed).
_KRAFT_CONTROL_RECORDS: dict[ControlRecordType, tuple[type[m.Message], str]] = {
    ControlRecordType.LEADER_CHANGE: (m.LeaderChangeMessage, "LeaderChange:"),
    ControlRecordType.SNAPSHOT_HEADER: (m.SnapshotHeaderRecord, "SnapshotHeader"),
    ControlRecordType.SNAPSHOT_FOOTER: (m.SnapshotFooterRecord, "SnapshotFooter"),
    ControlRecordType.KRAFT_VERSION: (m.KRaftVersionRecord, "KRaftVersion"),
    ControlRecordType.KRAFT_VOTERS: (m.VotersRecord, "KRaftVoters"),
}


def _control_text(record: Record) -> str:
    try:
        control_type = decode_control_key(record.key)
    except ProtocolError:
        return " controlType: UNKNOWN(-1)"
    if control_type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        marker = decode_end_txn_marker(record)
        name = "COMMIT" if marker.commit else "ABORT"
        return f" endTxnMarker: {name} coordinatorEpoch: {marker.coordinator_epoch}"
    kraft = _KRAFT_CONTROL_RECORDS.get(control_type)
    if kraft is not None:
        message_cls, label = kraft
        try:
            message = message_cls.decode(record.value or b"", 0)
        except (ProtocolError, DecodeError) as exc:
            return f" {label} <undecodable: {exc}>"
        return f" {label} {_json(message_json(message, 0))}"
    return f" controlType: {control_type.name}({control_type.value})"


class Report:
    """Problems printed on stderr after all files, as Kafka does."""

    def __init__(self) -> None:
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.offsets_not_found: dict[str, list[tuple[int, int]]] = {}

    def print(self) -> None:
        err = sys.stderr
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for index_offset, log_offset in pairs:
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for index_ts, log_ts in pairs:
                print(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", file=err)
        for name, pairs in self.out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=err)
            for index_ts, previous in pairs:
                print(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}",
                      file=err)
        for pairs in self.offsets_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for indexed, found in pairs:
                print(f"Indexed offset: {indexed}, found log offset: {found}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for first, second in pairs:
                print(f"  {first} is followed by {second}", file=err)


SNAPSHOT_SUFFIX = ".checkpoint"
BOOTSTRAP_SNAPSHOT = "bootstrap.checkpoint"
_SNAPSHOT_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")


def _starting_line(path: Path) -> str | None:
    """What Kafka prints before a file's batches: a segment's base offset, a snapshot's id."""
    if path.suffix == ".log":
        return f"Log starting offset: {_base_offset(path)}"
    if path.name == BOOTSTRAP_SNAPSHOT:
        return "KRaft bootstrap snapshot"
    snapshot = _SNAPSHOT_NAME.fullmatch(path.name)
    if snapshot is not None:
        return f"Snapshot end offset: {int(snapshot[1])}, epoch: {int(snapshot[2])}"
    return None


def dump_log(path: Path, options: ParsedOptions, parser: Parser, report: Report) -> None:
    print_contents = options.has("print-data-log") or any(options.has(o) for o in (
        "offsets-decoder", "transaction-log-decoder", "cluster-metadata-decoder",
        "value-decoder-class", "key-decoder-class"))
    deep = options.has("deep-iteration") or print_contents
    skip_metadata = options.has("skip-record-metadata")
    max_bytes = options.value("max-bytes")
    starting_line = _starting_line(path)
    if starting_line is not None:
        print(starting_line)
    data = _map(path, max_bytes)
    valid_bytes = 0
    last_offset = -1
    try:
        for position, header in iter_batches(data):
            try:
                verify_crc(data, position, header)
                valid = True
            except ProtocolError:
                valid = False
            print(batch_line(header, position, valid))
            if deep:
                for record in iter_records(data, position, header):
                    if last_offset != -1 and record.offset != last_offset + 1:
                        report.non_consecutive.setdefault(str(path.absolute()), []).append(
                            (last_offset, record.offset))
                    last_offset = record.offset
                    print(record_line(header, record, print_contents, skip_metadata, parser))
            valid_bytes += header.size
    except ProtocolError:
        pass  # a corrupt batch ends the valid part; reported below as trailing bytes
    trailing = len(data) - valid_bytes
    if trailing > 0 and max_bytes == 2**31 - 1:
        print(f"Found {trailing} invalid bytes at the end of {path.name}")


def _index_entries(path: Path, entry: struct.Struct) -> list[tuple[int, ...]]:
    data = path.read_bytes()
    return [entry.unpack_from(data, pos)
            for pos in range(0, len(data) - entry.size + 1, entry.size)]


def _batch_at(log: bytes | mmap.mmap, position: int) -> BatchHeader | None:
    try:
        for _pos, header in iter_batches(log, position):
            return header
    except ProtocolError:
        return None
    return None


def dump_index(path: Path, options: ParsedOptions, report: Report) -> None:
    base = _base_offset(path)
    log = _map(path.with_suffix(".log"))
    entries = _index_entries(path, struct.Struct(">ii"))
    if not entries:
        print(f"{path} is empty.")
        return
    if options.has("index-sanity-check"):
        print(f"{path} passed sanity check.")
        return
    for slot, (relative, position) in enumerate(entries):
        offset = base + relative
        if offset == base and slot > 0:
            return  # the preallocated, unused tail of the index
        header = _batch_at(log, position)
        if header is not None and header.last_offset != offset:
            report.index_mismatches.setdefault(str(path.absolute()), []).append(
                (offset, header.last_offset))
        if not options.has("verify-index-only"):
            print(f"offset: {offset} position: {position}")


def dump_time_index(path: Path, options: ParsedOptions, report: Report) -> None:
    base = _base_offset(path)
    if options.has("index-sanity-check"):
        print(f"{path} passed sanity check.")
        return
    log = _map(path.with_suffix(".log"))
    offsets = _index_entries(path.with_suffix(".index"), struct.Struct(">ii"))
    name = str(path.absolute())
    previous = -1
    for slot, (timestamp, relative) in enumerate(_index_entries(path, struct.Struct(">qi"))):
        offset = base + relative
        if offset == base and slot > 0:
            return
        position = 0
        for index_relative, index_position in offsets:
            if base + index_relative > offset:
                break
            position = index_position
        found = None
        try:
            for pos, header in iter_batches(log, position):
                if header.last_offset >= offset:
                    found = (pos, header)
                    break
        except ProtocolError:
            found = None
        if found is None:
            report.offsets_not_found.setdefault(name, []).append((offset, -1))
        elif found[1].last_offset != offset:
            report.offsets_not_found.setdefault(name, []).append((offset, found[1].last_offset))
        else:
            max_timestamp = max((r.timestamp for r in iter_records(log, *found)), default=-1)
            if max_timestamp != timestamp:
                report.time_mismatches.setdefault(name, []).append((timestamp, max_timestamp))
            if previous >= timestamp:
                report.out_of_order.setdefault(name, []).append((timestamp, previous))
        if not options.has("verify-index-only"):
            print(f"timestamp: {timestamp} offset: {offset}")
        previous = timestamp


def dump_producer_snapshot(path: Path) -> None:
    """Kafka's dumpProducerIdSnapshot: one line per entry; a corrupt file's error on stderr."""
    try:
        entries = read_snapshot_file(path)
    except CorruptSnapshotError as exc:
        print(exc, file=sys.stderr)
        return
    for entry in entries:
        txn_first = (f"OptionalLong[{entry.current_txn_first_offset}]"
                     if entry.current_txn_first_offset >= 0 else "OptionalLong.empty")
        print(f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
              f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: "
              f"{txn_first} lastTimestamp: {entry.timestamp} "
              f"firstSequence: {entry.first_sequence} lastSequence: {entry.last_sequence} "
              f"lastOffset: {entry.last_offset} offsetDelta: {entry.offset_delta} "
              f"timestamp: {entry.timestamp}")


def dump_txn_index(path: Path) -> None:
    """Kafka's dumpTxnIndex: one line per aborted transaction."""
    try:
        entries = read_txn_index_file(path)
    except CorruptTxnIndexError as exc:
        print(exc, file=sys.stderr)
        return
    for txn in entries:
        print(f"version: {txn.version} producerId: {txn.producer_id} firstOffset: "
              f"{txn.first_offset} lastOffset: {txn.last_offset} lastStableOffset: "
              f"{txn.last_stable_offset}")


def execute(options: ParsedOptions) -> int:
    PARSER.require(options, "files")
    try:
        parser = message_parser(options)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    report = Report()
    for name in options.value("files").split(","):
        path = Path(name)
        print(f"Dumping {name}")
        suffix = os.path.splitext(path.name)[1]
        try:
            if suffix in (".log", SNAPSHOT_SUFFIX):
                dump_log(path, options, parser, report)
            elif suffix == ".index":
                dump_index(path, options, report)
            elif suffix == ".timeindex":
                dump_time_index(path, options, report)
            elif suffix == ".snapshot":
                dump_producer_snapshot(path)
            elif suffix == TXN_INDEX_SUFFIX:
                dump_txn_index(path)
            else:
                print(f"Ignoring unknown file {name}", file=sys.stderr)
        except FileNotFoundError:
            print(f"java.nio.file.NoSuchFileException: {name}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            return 0
    report.print()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(PARSER, execute, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
