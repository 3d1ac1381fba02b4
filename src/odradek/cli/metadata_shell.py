"""`odradek metadata-shell`: Kafka's kafka-metadata-shell.sh (MetadataShell, Kafka 3.8).

    odradek metadata-shell --snapshot PATH [command...]

PATH is a ``__cluster_metadata`` log segment (``.log``), a KRaft snapshot (``.checkpoint``) or
(an Odradek extension) the ``__cluster_metadata-0`` directory itself: its newest snapshot, then
its segments. The records are replayed into a `MetadataImage` (with `MetadataDelta.replay`,
as a broker does) and shown as Kafka's metadata tree::

    /local/version, /local/commitId
    /image/provenance                         offset, epoch and time of the last record
    /image/features/metadataVersion           e.g. 4.0-IV3
    /image/cluster/brokers/<id>               BrokerRegistration(id=1, epoch=2, ...)
    /image/cluster/controllers/               (controller registrations: not in Odradek's image)
    /image/topics/byName/<name>/{name,id,<partition>}
    /image/topics/byId/<id>/...
    /image/configs/TOPIC:<name>/<config>, /image/configs/BROKER:<id>/..., /image/configs/BROKER
    /image/clientQuotas/<entity>/<key>
    /image/producerIds/nextProducerId
    /image/acls, /image/scram, /image/delegationToken (empty: not in Odradek's image)

With a command on the command line (``ls``, ``cat``, ``find``, ``tree``) it runs it and exits, as
Kafka's non-interactive mode does (``cd``, ``pwd``, ``help`` and ``exit`` are shell-only there
too). Otherwise it reads commands from stdin after a ``>> `` prompt (``cd``, ``pwd``, ``help``
and ``exit`` included) until ``exit`` or end of input.

Like Kafka's tool, it refuses to read a log directory a running node holds (its ``.lock``).
"""

from __future__ import annotations

import datetime
import decimal
import fcntl
import math
import mmap
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from odradek import __version__
from odradek.cli.common import ToolArgumentParser, UsageExit
from odradek.controller import features
from odradek.metadata.image import (
    METADATA_VERSION_FEATURE,
    BrokerRegistration,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import DecodeError, ProtocolError
from odradek.protocol.ids import uuid_to_kafka_str
from odradek.protocol.records import iter_batches, iter_records

PROG = "kafka-metadata-shell"
LOCK_FILE = ".lock"
UNASSIGNED_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's DirectoryId.UNASSIGNED
_SNAPSHOT_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
# metadata.version names by level (level = index + 1): the controller's feature table.
_METADATA_VERSION_NAMES = tuple(name for name, _changed in features.METADATA_VERSIONS)
# ConfigResource.Type names by id.
_CONFIG_RESOURCE_TYPES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER",
                          16: "CLIENT_METRICS", 32: "GROUP"}
_LEADER_RECOVERY_STATES = {0: "RECOVERED", 1: "RECOVERING"}


class ShellError(Exception):
    """A failure Kafka's shell reports as ``Unexpected error: <message>`` (exit code 1)."""


# ------------------------------------------------------------------------------------------
# loading


@dataclass
class LoadedImage:
    image: MetadataImage
    last_offset: int = -1
    last_epoch: int = -1
    last_time_ms: int = 0  # the append time of the batch holding the last record


def _segment_files(path: Path) -> list[Path]:
    """The files to replay: the file itself, or a directory's newest snapshot then the
    segments (in offset order)."""
    if not path.is_dir():
        return [path]
    snapshots = sorted(p for p in path.iterdir() if _SNAPSHOT_NAME.fullmatch(p.name))
    segments = sorted(p for p in path.iterdir() if p.suffix == ".log")
    return snapshots[-1:] + segments


def _read(path: Path) -> bytes | mmap.mmap:
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return b""
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def load_image(path: Path) -> LoadedImage:
    """Replays the metadata records of `path` into an image (control records are skipped, as
    Kafka's loader does; records already in a replayed snapshot are not replayed again)."""
    if not path.exists():
        raise ShellError(f"{path} (No such file or directory)")
    delta = MetadataDelta(MetadataImage())
    loaded = LoadedImage(delta.image)
    for file in _segment_files(path):
        data = _read(file)
        try:
            for position, header in iter_batches(data):
                if header.last_offset <= loaded.last_offset:
                    continue  # covered by the snapshot
                if not header.is_control:
                    for record in iter_records(data, position, header):
                        try:
                            message, _version = m.decode_metadata_record(record.value or b"")
                        except (ProtocolError, DecodeError) as exc:
                            raise ShellError(f"Unable to decode the record at offset "
                                             f"{record.offset} of {file}: {exc}") from None
                        delta.replay(message)
                loaded.last_offset = header.last_offset
                loaded.last_epoch = header.partition_leader_epoch
                loaded.last_time_ms = header.max_timestamp
        except ProtocolError:
            pass  # a torn tail (the active segment of a crashed node): what came before stands
    delta.offset, delta.epoch = loaded.last_offset, loaded.last_epoch
    loaded.image = delta.apply()
    return loaded


class DirectoryLock:
    """Kafka's takeDirectoryLockIfExists: the log directory's ``.lock``, if there is one."""

    def __init__(self, directory: Path) -> None:
        self.fd: int | None = None
        lock = directory / LOCK_FILE
        if not lock.exists():
            return
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ShellError(f"Unable to lock {directory.absolute()}. Please ensure that no "
                             "broker or controller process is using this directory before "
                             "proceeding.") from None
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def log_directory_of(path: Path) -> Path:
    """The log directory holding `path`: a file's grandparent, a partition directory's
    parent (Kafka's parentParent of the snapshot file)."""
    absolute = path.absolute()
    return absolute.parent if path.is_dir() else absolute.parent.parent


# ------------------------------------------------------------------------------------------
# the node tree (Kafka's MetadataNode implementations)


class Node:
    is_directory = True

    def child_names(self) -> list[str]:
        return []

    def child(self, name: str) -> Node | None:
        return None

    def print(self, printer: Printer) -> None:
        for name in sorted(self.child_names()):
            printer.enter_node(name)
            child = self.child(name)
            if child is not None:
                child.print(printer)
            printer.leave_node()


class Leaf(Node):
    is_directory = False

    def __init__(self, text: str) -> None:
        self.text = text

    def print(self, printer: Printer) -> None:
        printer.output(self.text)


class Directory(Node):
    """A directory whose children are computed on demand."""

    def __init__(self, children: dict[str, Callable[[], Node]]) -> None:
        self.children = children

    def child_names(self) -> list[str]:
        return list(self.children)

    def child(self, name: str) -> Node | None:
        make = self.children.get(name)
        return None if make is None else make()


def _java_list(values: Iterable[object]) -> str:
    return "[" + ", ".join(str(value) for value in values) + "]"


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _version_range(low: int, high: int) -> str:
    """Kafka's VersionRange.toString."""
    if low == high:
        return str(low)
    if high == 32767:
        return f"{low}+"
    return f"{low}-{high}"


def broker_registration_text(broker: BrokerRegistration) -> str:
    """Kafka's BrokerRegistration.toString (Odradek's image keeps no log directories)."""
    listeners = ", ".join(
        f"Endpoint(listenerName='{name}', securityProtocol={endpoint.security_protocol}, "
        f"host='{endpoint.host or ''}', port={endpoint.port})"
        for name, endpoint in sorted(broker.endpoints.items()))
    features = ", ".join(f"{name}: {_version_range(*versions)}"
                         for name, versions in sorted(broker.features.items()))
    rack = "Optional.empty" if broker.rack is None else f"Optional[{broker.rack}]"
    return (f"BrokerRegistration(id={broker.broker_id}, epoch={broker.epoch}, "
            f"incarnationId={uuid_to_kafka_str(broker.incarnation_id)}, "
            f"listeners=[{listeners}], supportedFeatures={{{features}}}, rack={rack}, "
            f"fenced={_java_bool(broker.fenced)}, "
            f"inControlledShutdown={_java_bool(broker.in_controlled_shutdown)}, "
            f"isMigratingZkBroker=false, directories=[])")


def partition_registration_text(partition: PartitionRegistration) -> str:
    """Kafka's PartitionRegistration.toString. Odradek's image keeps no replica directories
    nor ELR: they show as unassigned and empty."""
    recovery = _LEADER_RECOVERY_STATES.get(partition.leader_recovery_state,
                                           str(partition.leader_recovery_state))
    return (f"PartitionRegistration(replicas={_java_list(partition.replicas)}, "
            f"directories={_java_list(UNASSIGNED_DIRECTORY for _ in partition.replicas)}, "
            f"isr={_java_list(partition.isr)}, "
            f"removingReplicas={_java_list(partition.removing_replicas)}, "
            f"addingReplicas={_java_list(partition.adding_replicas)}, elr=[], lastKnownElr=[], "
            f"leader={partition.leader}, leaderRecoveryState={recovery}, "
            f"leaderEpoch={partition.leader_epoch}, partitionEpoch={partition.partition_epoch})")


def java_double(value: float) -> str:
    """Java's Double.toString (the quota values): shortest digits, positional within
    [1e-3, 1e7), else ``d.dddE<exp>``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digits, exponent = decimal.Decimal(repr(float(value))).normalize().as_tuple()
    text = "".join(str(d) for d in digits)
    assert isinstance(exponent, int)
    sign_text = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        point = len(text) + exponent  # digits before the decimal point
        if point <= 0:
            return f"{sign_text}0.{'0' * -point}{text}"
        if point >= len(text):
            return f"{sign_text}{text}{'0' * (point - len(text))}.0"
        return f"{sign_text}{text[:point]}.{text[point:]}"
    return f"{sign_text}{text[0]}.{text[1:] or '0'}E{len(text) - 1 + exponent}"


def _provenance_text(loaded: LoadedImage) -> str:
    """Kafka's ProvenanceNode: ``offset N, epoch E, time 2024-01-01T00:00:00.123Z[UTC]``."""
    moment = datetime.datetime.fromtimestamp(loaded.last_time_ms / 1000, datetime.UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    millis = loaded.last_time_ms % 1000
    if millis:
        text += f".{millis:03d}".rstrip("0")
    return f"offset {loaded.last_offset}, epoch {loaded.last_epoch}, time {text}Z[UTC]"


def _topic_node(topic: TopicImage) -> Node:
    children: dict[str, Callable[[], Node]] = {
        "name": lambda: Leaf(topic.name),
        "id": lambda: Leaf(uuid_to_kafka_str(topic.topic_id)),
    }
    for partition_id, partition in topic.partitions.items():
        children[str(partition_id)] = (lambda p=partition: Leaf(partition_registration_text(p)))
    return Directory(children)


def _config_resource_name(resource_type: int, name: str) -> str:
    type_name = _CONFIG_RESOURCE_TYPES.get(resource_type, str(resource_type))
    return type_name if name == "" else f"{type_name}:{name}"


def _quota_entity_name(entity: tuple[tuple[str, str | None], ...]) -> str:
    """Kafka's clientQuotaEntityToString: clientId(...)_ip(...)_user(...)."""
    def escape(text: str | None) -> str:
        return (text or "").replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    values = dict(entity)
    parts = [f"{label}({escape(values[key])})"
             for key, label in (("client-id", "clientId"), ("ip", "ip"), ("user", "user"))
             if key in values]
    return "_".join(parts)


def image_node(loaded: LoadedImage) -> Node:
    image = loaded.image

    def features() -> Node:
        level = image.features.get(METADATA_VERSION_FEATURE, 1)
        version = (_METADATA_VERSION_NAMES[level - 1] if 1 <= level <= len(_METADATA_VERSION_NAMES)
                   else f"UNKNOWN {level}")
        children: dict[str, Callable[[], Node]] = {"metadataVersion": lambda: Leaf(version)}
        for name, feature_level in image.features.items():
            if name != METADATA_VERSION_FEATURE:
                children[f"finalized_{name}"] = (lambda v=feature_level: Leaf(str(v)))
        return Directory(children)

    def cluster() -> Node:
        brokers = Directory({str(broker_id): (lambda b=broker: Leaf(broker_registration_text(b)))
                             for broker_id, broker in image.brokers.items()})
        return Directory({"brokers": lambda: brokers, "controllers": lambda: Directory({})})

    def topics() -> Node:
        by_name = Directory({name: (lambda t=topic: _topic_node(t))
                             for name, topic in image.topics_by_name.items()})
        by_id = Directory({uuid_to_kafka_str(topic_id): (lambda t=topic: _topic_node(t))
                           for topic_id, topic in image.topics_by_id.items()})
        return Directory({"byName": lambda: by_name, "byId": lambda: by_id})

    def configs() -> Node:
        def resource(values: dict[str, str]) -> Node:
            return Directory({key: (lambda v=value: Leaf(v)) for key, value in values.items()})

        return Directory({_config_resource_name(resource_type, name):
                          (lambda v=values: resource(dict(v)))
                          for (resource_type, name), values in image.configs.items()})

    def client_quotas() -> Node:
        def quotas(values: dict[str, float]) -> Node:
            return Directory({key: (lambda v=value: Leaf(java_double(v)))
                              for key, value in values.items()})

        return Directory({_quota_entity_name(entity): (lambda v=values: quotas(dict(v)))
                          for entity, values in image.client_quotas.items()})

    return Directory({
        "provenance": lambda: Leaf(_provenance_text(loaded)),
        "features": features,
        "cluster": cluster,
        "topics": topics,
        "configs": configs,
        "clientQuotas": client_quotas,
        "producerIds": lambda: Directory(
            {"nextProducerId": lambda: Leaf(str(image.next_producer_id))}),
        # Not kept by Odradek's image yet: shown empty, as on a cluster without any.
        "acls": lambda: Directory({}),
        "scram": lambda: Directory({}),
        "delegationToken": lambda: Directory({}),
    })


def root_node(loaded: LoadedImage) -> Node:
    local = Directory({"version": lambda: Leaf(__version__),
                       "commitId": lambda: Leaf("unknown")})
    image = image_node(loaded)
    return Directory({"local": lambda: local, "image": lambda: image})


# ------------------------------------------------------------------------------------------
# paths and globs (Kafka's CommandUtils and GlobVisitor)


def split_path(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def strip_dot_components(parts: list[str]) -> list[str]:
    result: list[str] = []
    for part in parts:
        if part == "..":
            if result:
                result.pop()
        elif part != ".":
            result.append(part)
    return result


_GLOB_SPECIAL = set("*?[]{}\\")


def _glob_regex(component: str) -> re.Pattern[str]:
    """Kafka's GlobComponent: ``*``, ``?``, ``[...]``, ``{a,b}`` and ``\\`` escapes."""
    out: list[str] = []
    in_braces = False
    index = 0
    while index < len(component):
        char = component[index]
        index += 1
        if char == "\\" and index < len(component):
            out.append(re.escape(component[index]))
            index += 1
        elif char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "{":
            out.append("(?:")
            in_braces = True
        elif char == "}" and in_braces:
            out.append(")")
            in_braces = False
        elif char == "," and in_braces:
            out.append("|")
        elif char in "[]":
            out.append(char)
        else:
            out.append(re.escape(char))
    return re.compile("".join(out))


@dataclass
class Match:
    path: list[str]
    node: Node

    @property
    def last_component(self) -> str:
        return self.path[-1] if self.path else "/"

    @property
    def absolute_path(self) -> str:
        return "/" + "/".join(self.path)


@dataclass
class ShellState:
    root: Node
    working_directory: str = "/"

    def glob(self, pattern: str) -> list[Match]:
        full = pattern if pattern.startswith("/") else f"{self.working_directory}/{pattern}"
        components = strip_dot_components(split_path(full))
        matches: list[Match] = []
        self._visit(components, 0, self.root, [], matches)
        return matches

    def _visit(self, components: list[str], index: int, node: Node, path: list[str],
               matches: list[Match]) -> None:
        if index >= len(components):
            matches.append(Match(path, node))
            return
        component = components[index]
        if not node.is_directory:
            return
        if not _GLOB_SPECIAL & set(component):
            child = node.child(component)
            if child is not None:
                self._visit(components, index + 1, child, [*path, component], matches)
            return
        pattern = _glob_regex(component)
        for name in sorted(node.child_names()):
            if pattern.fullmatch(name):
                child = node.child(name)
                if child is not None:
                    self._visit(components, index + 1, child, [*path, name], matches)


# ------------------------------------------------------------------------------------------
# commands


class Printer:
    """Kafka's ShellNodePrinter: ``name:`` lines entering nodes, values indented by two."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.level = 0

    def enter_node(self, name: str) -> None:
        self.out.write(f"{'  ' * self.level}{name}:\n")
        self.level += 1

    def leave_node(self) -> None:
        self.level -= 1

    def output(self, text: str) -> None:
        self.out.write(f"{'  ' * self.level}{text}\n")


class ExitShell(Exception):
    pass


def _effective_paths(paths: list[str]) -> list[str]:
    return [path for path in paths if path] or ["."]


def cmd_ls(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    files: list[str] = []
    directories: list[tuple[str, list[str]]] = []
    for target in _effective_paths(args):
        matches = state.glob(target)
        if not matches:
            out.write(f"ls: {target}: no such file or directory.\n")
        for match in matches:
            if match.node.is_directory:
                directories.append((match.last_component, sorted(match.node.child_names())))
            else:
                files.append(match.last_component)
    _print_entries(out, "", width, files)
    need_intro = bool(files) or len(directories) > 1
    first_intro = not files
    for name, children in directories:
        intro = ""
        if need_intro:
            intro = ("" if first_intro else "\n") + f"{name}:"
            first_intro = False
        _print_entries(out, intro, width, children)


def _print_entries(out: TextIO, intro: str, width: int | None, entries: list[str]) -> None:
    """Kafka's LsCommandHandler.printEntries: column layout on a terminal, else one per line."""
    if not entries:
        return
    if intro:
        out.write(intro + "\n")
    columns, per_column, widths = _column_schema(width, entries)
    lines = (len(entries) + columns - 1) // columns
    for line in range(lines):
        row = []
        for column in range(columns):
            index = line + column * per_column
            if index < len(entries):
                entry = entries[index]
                row.append(entry.ljust(widths[column]) if column < columns - 1 else entry)
        out.write("".join(row) + "\n")


def _column_schema(width: int | None, entries: list[str]) -> tuple[int, int, list[int]]:
    if width is None or width // 4 <= 1:
        return 1, len(entries), [0]
    best = (1, len(entries), [max(len(e) for e in entries) + 2])
    for columns in range(2, width // 4 + 1):
        per_column = (len(entries) + columns - 1) // columns
        widths = [0] * columns
        for index, entry in enumerate(entries):
            column = index // per_column
            widths[column] = max(widths[column], len(entry) + 2)
        if widths[-1] != 0 and sum(widths) <= width:
            best = (columns, per_column, widths)
    return best


def cmd_cat(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    for target in args:
        matches = state.glob(target)
        if not matches:
            out.write(f"cat: {target}: No such file or directory.\n")
        for match in matches:
            if match.node.is_directory:
                out.write(f"cat: {target}: Is a directory\n")
            else:
                match.node.print(Printer(out))


def cmd_tree(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    for target in args:
        matches = state.glob(target)
        if not matches:
            out.write(f"tree: {target}: No such file or directory.\n")
        for match in matches:
            match.node.print(Printer(out))


def cmd_find(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    def find(path: str, node: Node) -> None:
        out.write(path + "\n")
        if node.is_directory:
            for name in sorted(node.child_names()):
                child = node.child(name)
                if child is not None:
                    find(path + name if path == "/" else f"{path}/{name}", child)

    for path in _effective_paths(args):
        matches = state.glob(path)
        if not matches:
            out.write(f"find: {path}: no such file or directory.\n")
        for match in matches:
            find(path, match.node)


def cmd_cd(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    target = args[0] if args else "/"
    matches = state.glob(target)
    if not matches:
        out.write(f"cd: {target}: no such directory.\n")
    for match in matches:
        if not match.node.is_directory:
            out.write(f"cd: {target}: not a directory.\n")
        else:
            state.working_directory = match.absolute_path


def cmd_pwd(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    out.write(state.working_directory + "\n")


def cmd_exit(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    raise ExitShell


def cmd_help(state: ShellState, args: list[str], out: TextIO, width: int | None) -> None:
    names = sorted(COMMANDS)
    out.write("Welcome to the Apache Kafka metadata shell.\n\n")
    out.write(f"usage:  {{{','.join(names)}}} ...\n\npositional arguments:\n"
              f"  {{{','.join(names)}}}\n")
    out.writelines(f"    {name:<21}{COMMANDS[name].description}\n" for name in names)


@dataclass(frozen=True)
class Command:
    run: Callable[[ShellState, list[str], TextIO, int | None], None]
    description: str
    shell_only: bool
    min_args: int = 0
    max_args: int | None = None


COMMANDS: dict[str, Command] = {
    "cat": Command(cmd_cat, "Show the contents of metadata files.", False, 1),
    "cd": Command(cmd_cd, "Set the current working directory.", True, 0, 1),
    "exit": Command(cmd_exit, "Exit the metadata shell.", True, 0, 0),
    "find": Command(cmd_find, "Search for nodes in the directory hierarchy.", False),
    "help": Command(cmd_help, "Display this help message.", True, 0, 0),
    "ls": Command(cmd_ls, "List metadata nodes.", False),
    "pwd": Command(cmd_pwd, "Print the current working directory.", True, 0, 0),
    "tree": Command(cmd_tree, "Show the contents of metadata nodes in a tree structure.", False,
                    1),
}


def run_command(state: ShellState, words: list[str], out: TextIO, *, interactive: bool,
                width: int | None = None) -> None:
    """Parse and run one command; problems are reported on `out` as Kafka's shell does."""
    while words and not words[-1]:
        words = words[:-1]
    if not words:
        return
    available = sorted(name for name, command in COMMANDS.items()
                       if interactive or not command.shell_only)
    name, args = words[0], words[1:]
    command = COMMANDS.get(name)
    if command is None or name not in available:
        choices = ", ".join(f"'{choice}'" for choice in available)
        out.write(f"argument command: invalid choice: '{name}' (choose from {choices})\n")
        return
    if len(args) < command.min_args:
        out.write("too few arguments\n")
        return
    if command.max_args is not None and len(args) > command.max_args:
        out.write(f"unrecognized arguments: '{' '.join(args[command.max_args:])}'\n")
        return
    command.run(state, args, out, width)


# ------------------------------------------------------------------------------------------
# main


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog=PROG, description="The Apache Kafka metadata shell")
    parser.add_argument("--snapshot", "-s", required=True,
                        help="The metadata snapshot file to read.")
    parser.add_argument("command", nargs="*", help="The command to run.")
    return parser


def interactive(state: ShellState, stdin: TextIO, out: TextIO) -> None:
    """Kafka's InteractiveShell: a ``>> `` prompt per command until ``exit`` or end of input."""
    tty = stdin.isatty() and out.isatty()
    if tty:
        try:
            import readline  # noqa: F401  (line editing and history at the prompt)
        except ImportError:
            pass
    out.write("[ Kafka Metadata Shell ]\n")
    while True:
        try:
            if tty:
                line = input(">> ")
            else:
                out.write(">> ")
                out.flush()
                line = stdin.readline()
                if not line:
                    return
        except EOFError:
            return
        except KeyboardInterrupt:
            out.write("^C\n")
            continue
        try:
            words = shlex.split(line)
        except ValueError as exc:
            out.write(f"{exc}\n")
            continue
        width = os.get_terminal_size(out.fileno()).columns if tty else None
        try:
            run_command(state, words, out, interactive=True, width=width)
        except ExitShell:
            return
        finally:
            out.flush()


def _run(args: list[str], stdin: TextIO, out: TextIO) -> int:
    options = build_parser().parse_args(args)
    path = Path(options.snapshot)
    lock = DirectoryLock(log_directory_of(path)) if path.exists() else None
    try:
        if not options.command:
            out.write("Loading...\n")
        loaded = load_image(path)
        state = ShellState(root_node(loaded))
        if options.command:
            try:
                run_command(state, list(options.command), out, interactive=False)
            except ExitShell:
                pass
        else:
            out.write("Starting...\n")
            out.flush()
            interactive(state, stdin, out)
        out.flush()
        return 0
    finally:
        if lock is not None:
            lock.release()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        return _run(args, sys.stdin, sys.stdout)
    except UsageExit as exc:
        return exc.code
    except BrokenPipeError:
        return 0
    except (ShellError, OSError) as exc:
        print(f"Unexpected error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
