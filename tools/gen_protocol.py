#!/usr/bin/env python3
"""Generate ``odradek.protocol.messages.generated`` from Kafka's JSON message specs.

Usage: ``python tools/gen_protocol.py [--specs DIR] [--out DIR]``

One module per spec file. Every message becomes a ``__slots__`` class whose nested structs are
nested classes; for every struct and every version in which it can occur the generator writes a
decoder and an encoder function specialised for that version: straight-line code, runs of
fixed-size fields read and written with one precompiled ``struct.Struct``, no interpretation of
the spec at run time. Versions whose wire layout is identical share one function.

The output depends only on the specs (sorted inputs, no timestamps), so running the generator
twice gives identical files; a test regenerates into a temporary directory and compares.
"""

from __future__ import annotations

import argparse
import json
import keyword
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# The Kafka 4.0 specs, copied from the shared ../shared/kafka-protocol-4.0 so CI needs nothing
# outside the repository.
DEFAULT_SPECS = REPO_ROOT / "tools" / "kafka-protocol"
DEFAULT_OUT = REPO_ROOT / "src" / "odradek" / "protocol" / "messages" / "generated"

SPEC_DIRS = (
    "messages",
    "records/consumer_offsets",
    "records/transaction_state",
    "records/cluster_metadata",
)

# struct format code and size of each fixed-size type; "U" stands for a 16-byte uuid
FIXED_TYPES = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("U", 16),
}
VARIABLE_TYPES = ("string", "bytes", "records")
RESERVED_ATTRIBUTES = {
    "encode",
    "decode",
    "read",
    "write_to",
    "encode_chunks",
    "is_flexible",
    "unknown_tagged_fields",
}


# ------------------------------------------------------------------------------------------------
# spec model


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; `high` None means open ended; `low` None means no version."""

    low: int | None
    high: int | None

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(None, None)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        if self.low is None:
            return False
        return self.low <= version and (self.high is None or version <= self.high)


@dataclass
class FieldType:
    kind: str  # "fixed", "string", "bytes", "records", "struct", "array"
    code: str = ""  # struct code for fixed types
    size: int = 0  # bytes of a fixed type
    struct: str = ""  # struct name for struct types
    element: FieldType | None = None  # for arrays

    @classmethod
    def parse(cls, text: str) -> FieldType:
        if text.startswith("[]"):
            element = cls.parse(text[2:])
            if element.kind in ("array", "records"):
                raise ValueError(f"unsupported array element type {text}")
            return cls("array", element=element)
        if text in FIXED_TYPES:
            code, size = FIXED_TYPES[text]
            return cls("fixed", code=code, size=size)
        if text in VARIABLE_TYPES:
            return cls(text)
        if text[:1].isupper():
            return cls("struct", struct=text)
        raise ValueError(f"unknown field type {text!r}")


@dataclass
class FieldSpec:
    name: str
    attr: str
    type: FieldType
    type_text: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    ignorable: bool
    flexible_override: Versions | None
    has_default: bool
    raw_default: Any

    def is_nullable(self, version: int) -> bool:
        return version in self.nullable

    def nullable_somewhere(self) -> bool:
        return self.nullable.low is not None


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]


@dataclass
class MessageSpec:
    name: str
    spec_type: str
    source: str  # path relative to the specs dir
    api_key: int | None
    valid: Versions
    flexible: Versions
    listeners: tuple[str, ...]
    deprecated: Versions
    root: StructSpec
    structs: dict[str, StructSpec]  # nested structs in definition order (commonStructs last)

    @property
    def versions(self) -> range:
        assert self.valid.low is not None and self.valid.high is not None
        return range(self.valid.low, self.valid.high + 1)

    @property
    def flexible_min(self) -> int | None:
        return self.flexible.low

    @property
    def module(self) -> str:
        return snake_case(self.name)


def snake_case(name: str) -> str:
    """Kafka's own rule: an underscore before a capital that follows a non-capital."""
    out: list[str] = []
    previous_was_capital = True
    for char in name:
        if char.isupper():
            if not previous_was_capital:
                out.append("_")
            out.append(char.lower())
            previous_was_capital = True
        else:
            out.append(char)
            previous_was_capital = False
    return "".join(out)


def attribute_name(name: str) -> str:
    attr = snake_case(name)
    if keyword.iskeyword(attr) or attr in RESERVED_ATTRIBUTES:
        attr += "_"
    return attr


def parse_field(raw: dict[str, Any], structs: dict[str, StructSpec], common: dict) -> FieldSpec:
    ftype = FieldType.parse(raw["type"])
    spec = FieldSpec(
        name=raw["name"],
        attr=attribute_name(raw["name"]),
        type=ftype,
        type_text=raw["type"],
        # A tagged field may leave out "versions"; it then exists where it is tagged (as Kafka's
        # generator reads it).
        versions=Versions.parse(raw.get("versions", raw.get("taggedVersions"))),
        nullable=Versions.parse(raw.get("nullableVersions")),
        tagged=Versions.parse(raw.get("taggedVersions")),
        tag=None if raw.get("tag") is None else int(raw["tag"]),
        ignorable=bool(raw.get("ignorable", False)),
        flexible_override=(
            Versions.parse(raw["flexibleVersions"]) if "flexibleVersions" in raw else None
        ),
        has_default="default" in raw,
        raw_default=raw.get("default"),
    )
    if spec.tagged.low is not None and spec.tag is None:
        raise ValueError(f"{spec.name} has taggedVersions but no tag")
    struct_name = struct_of(ftype)
    if struct_name:
        if "fields" in raw:
            if struct_name in structs or struct_name in common:
                raise ValueError(f"struct {struct_name} defined twice")
            # reserve the slot first so the definition order is parents before children
            structs[struct_name] = StructSpec(struct_name, [])
            structs[struct_name].fields = [parse_field(f, structs, common) for f in raw["fields"]]
        elif struct_name not in common:
            raise ValueError(f"struct {struct_name} is neither defined inline nor common")
    return spec


def check_unique_attributes(struct: StructSpec) -> None:
    attrs = [f.attr for f in struct.fields]
    clashes = {a for a in attrs if attrs.count(a) > 1}
    if clashes:
        raise ValueError(f"{struct.name}: fields map to the same attribute: {sorted(clashes)}")


def struct_of(ftype: FieldType) -> str:
    if ftype.kind == "struct":
        return ftype.struct
    if ftype.kind == "array" and ftype.element is not None and ftype.element.kind == "struct":
        return ftype.element.struct
    return ""


def load_spec(path: Path, specs_dir: Path) -> MessageSpec:
    raw = json.loads(path.read_text())
    common_raw = {c["name"]: c for c in raw.get("commonStructs", [])}
    structs: dict[str, StructSpec] = {}
    root_fields = [parse_field(f, structs, common_raw) for f in raw["fields"]]
    for name, common in common_raw.items():
        structs[name] = StructSpec(name, [])
        structs[name].fields = [parse_field(f, structs, common_raw) for f in common["fields"]]
    for struct in [StructSpec(raw["name"], root_fields), *structs.values()]:
        check_unique_attributes(struct)
    deprecated = Versions.parse(raw.get("deprecatedVersions"))
    return MessageSpec(
        name=raw["name"],
        spec_type=raw["type"],
        source=path.relative_to(specs_dir).as_posix(),
        api_key=raw.get("apiKey"),
        valid=Versions.parse(raw["validVersions"]),
        flexible=Versions.parse(raw["flexibleVersions"]),
        listeners=tuple(sorted(raw.get("listeners", []))),
        deprecated=deprecated,
        root=StructSpec(raw["name"], root_fields),
        structs=structs,
    )


def load_specs(specs_dir: Path) -> list[MessageSpec]:
    messages: list[MessageSpec] = []
    for sub in SPEC_DIRS:
        for path in sorted((specs_dir / sub).glob("*.json")):
            if json.loads(path.read_text()).get("validVersions") == "none":
                continue  # an API Kafka removed (4.0 dropped the ZooKeeper-era controller APIs)
            messages.append(load_spec(path, specs_dir))
    names = [m.name for m in messages]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate message names: {sorted(duplicates)}")
    return messages


# ------------------------------------------------------------------------------------------------
# defaults


def default_value(f: FieldSpec) -> Any:
    """The Python default of a field; lists and struct instances are returned as markers."""
    kind = f.type.kind
    raw = f.raw_default
    if kind == "fixed":
        code = f.type.code
        if code == "U":
            return "ZERO_UUID"
        if code == "?":
            if isinstance(raw, bool):
                return raw
            return isinstance(raw, str) and raw.strip().lower() == "true"
        if code == "d":
            return float(raw) if raw not in (None, "") else 0.0
        if raw is None or raw == "":
            return 0
        if isinstance(raw, bool):
            return int(raw)
        if isinstance(raw, (int, float)):
            return int(raw)
        return int(raw.strip(), 0)
    is_null = f.has_default and (raw is None or raw == "null")
    if kind == "string":
        if is_null:
            return None
        return "" if raw is None else str(raw)
    if kind == "bytes":
        return None if is_null else b""
    if kind == "records":
        return None
    if kind == "array":
        return None if is_null else "LIST"
    if kind == "struct":
        return None if is_null else "INSTANCE"
    raise AssertionError(kind)


def default_expr(f: FieldSpec) -> str:
    """Python source for a fresh default value."""
    value = default_value(f)
    if value is None and f.type.kind != "records" and not f.nullable_somewhere():
        raise ValueError(f"{f.name}: default null but never nullable")
    if value == "ZERO_UUID" and f.type.kind == "fixed":
        return "_ZERO_UUID"
    if value == "LIST" and f.type.kind == "array":
        return "[]"
    if value == "INSTANCE" and f.type.kind == "struct":
        return f"{f.type.struct}()"
    return repr(value)


def is_default_expr(f: FieldSpec, value: str) -> str:
    """Python source testing whether `value` (a simple expression) equals the default."""
    default = default_value(f)
    kind = f.type.kind
    if kind == "fixed":
        if f.type.code == "U":
            return f"{value} == _ZERO_UUID"
        return f"{value} == {default!r}"
    if default is None:
        return f"{value} is None"
    if kind == "string":
        return f"{value} == {default!r}"
    if kind in ("bytes", "array"):
        return f"({value} is not None and len({value}) == 0)"
    if kind == "struct":
        return f"({value} is not None and _isdef_{f.type.struct}({value}))"
    raise AssertionError(kind)


def type_hint(f: FieldSpec) -> str:
    def base(ftype: FieldType) -> str:
        if ftype.kind == "fixed":
            return {"?": "bool", "d": "float", "U": "uuid.UUID"}.get(ftype.code, "int")
        if ftype.kind == "string":
            return "str"
        if ftype.kind == "bytes":
            return "bytes"
        if ftype.kind == "records":
            return "Any"
        if ftype.kind == "struct":
            return ftype.struct
        assert ftype.element is not None
        return f"list[{base(ftype.element)}]"

    hint = base(f.type)
    if f.type.kind != "records" and (f.nullable_somewhere() or default_value(f) is None):
        hint += " | None"
    return hint


# ------------------------------------------------------------------------------------------------
# code generation


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def add(self, line: str = "") -> None:
        self.lines.append(("    " * self.depth + line) if line else "")

    def extend(self, lines: list[str]) -> None:
        for line in lines:
            self.add(line)

    def indent(self) -> Lines:
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@dataclass
class FieldLayout:
    """How one field appears in one version."""

    spec: FieldSpec
    state: str  # "absent", "regular" or "tagged"
    compact: bool  # compact (flexible) encoding of strings/bytes/arrays
    nullable: bool


class ModuleWriter:
    """Generates one module (one message spec)."""

    def __init__(self, message: MessageSpec) -> None:
        self.message = message
        self.all_structs: dict[str, StructSpec] = {message.name: message.root, **message.structs}
        self.struct_formats: dict[str, str] = {}  # struct format -> constant name
        self.array_types: dict[str, str] = {}  # element struct code -> constant name
        self.tag_sets: dict[tuple[int, ...], str] = {}  # known tags -> constant name
        self.functions: list[str] = []  # generated function sources
        self.decoders: dict[tuple[str, int], str] = {}
        self.encoders: dict[tuple[str, int], str] = {}
        self._bodies: dict[tuple[str, str], str] = {}  # (kind+struct, body) -> function name
        self._counters: dict[str, int] = {}
        self._records_cache: dict[str, bool] = {}

    # -- helpers ------------------------------------------------------------------------------

    def flexible(self, version: int) -> bool:
        return version in self.message.flexible

    def layout(self, struct: StructSpec, version: int) -> list[FieldLayout]:
        flexible = self.flexible(version)
        result = []
        for f in struct.fields:
            if version not in f.versions:
                state = "absent"
            elif version in f.tagged:
                if not flexible:
                    raise ValueError(f"{f.name} is tagged in non-flexible version {version}")
                state = "tagged"
            else:
                state = "regular"
            compact = flexible and (f.flexible_override is None or version in f.flexible_override)
            result.append(FieldLayout(f, state, compact, f.is_nullable(version)))
        return result

    def contains_records(self, struct_name: str, seen: frozenset[str] = frozenset()) -> bool:
        cached = self._records_cache.get(struct_name)
        if cached is not None:
            return cached
        result = False
        for f in self.all_structs[struct_name].fields:
            if f.type.kind == "records":
                result = True
            nested = struct_of(f.type)
            if (
                nested
                and nested not in seen
                and self.contains_records(nested, seen | {struct_name})
            ):
                result = True
        self._records_cache[struct_name] = result
        return result

    def chunked(self, struct_name: str) -> bool:
        """Encoders of the root and of structs holding records take the chunk list too."""
        return struct_name == self.message.name or self.contains_records(struct_name)

    def struct_constant(self, codes: str) -> str:
        fmt = ">" + codes.replace("U", "16s")
        name = self.struct_formats.get(fmt)
        if name is None:
            name = "_S_" + codes.replace("?", "z")
            self.struct_formats[fmt] = name
        return name

    def tag_set(self, tags: Iterable[int]) -> str:
        """Name of a module constant holding a frozenset of tags."""
        ordered = tuple(sorted(tags))
        name = "_TAGS_" + "_".join(map(str, ordered))
        self.tag_sets[ordered] = name
        return name

    def array_type(self, code: str) -> str:
        name = "_A_" + code.replace("?", "z")
        self.array_types[code] = name
        return name

    def min_size(self, struct_name: str, version: int) -> int:
        total = 0
        for fl in self.layout(self.all_structs[struct_name], version):
            if fl.state == "regular":
                total += self.field_min_size(fl.spec.type, fl.compact, fl.nullable, version)
        if self.flexible(version):
            total += 1
        return total

    def field_min_size(self, ftype: FieldType, compact: bool, nullable: bool, version: int) -> int:
        if ftype.kind == "fixed":
            return ftype.size
        if ftype.kind == "string":
            return 1 if compact else 2
        if ftype.kind in ("bytes", "records", "array"):
            return 1 if compact else 4
        if ftype.kind == "struct":
            return 1 if nullable else self.min_size(ftype.struct, version)
        raise AssertionError(ftype.kind)

    def element_min_size(self, element: FieldType, compact: bool, version: int) -> int:
        return max(1, self.field_min_size(element, compact, False, version))

    def register(self, kind: str, struct_name: str, body: str) -> str:
        key = (kind + struct_name, body)
        name = self._bodies.get(key)
        if name is None:
            count = self._counters.get(kind + struct_name, 0)
            self._counters[kind + struct_name] = count + 1
            name = f"_{kind}_{struct_name}_{count}"
            self._bodies[key] = name
            self.functions.append(body.replace("__FUNCTION__", name))
        return name

    # -- value readers/writers ----------------------------------------------------------------

    def read_value(self, fl: FieldLayout, target: str, version: int, tagged: bool) -> list[str]:
        """Statements reading the field value at `p` into `target` (advancing `p`)."""
        ftype = fl.spec.type
        compact = True if tagged else fl.compact
        nullable = fl.nullable
        kind = ftype.kind
        if kind == "fixed":
            if ftype.code == "U":
                return [f"{target}, p = _read_uuid(b, p)"]
            constant = self.struct_constant(ftype.code)
            return [f"({target},) = {constant}.unpack_from(b, p)", f"p += {ftype.size}"]
        if kind in ("string", "bytes"):
            reader = READERS[(kind, compact, nullable)]
            return [f"{target}, p = {reader}(b, p)"]
        if kind == "records":
            return [
                f"{target}, p = {'_read_compact_records' if compact else '_read_records'}(b, p)"
            ]
        if kind == "struct":
            decoder = self.decoder(ftype.struct, version)
            if tagged:
                if nullable:
                    return [
                        "m, p = _read_uvarint(b, p)",
                        "if m == 0:",
                        f"    {target} = None",
                        "else:",
                        f"    {target}, p = {decoder}(b, p)",
                    ]
                return [f"{target}, p = {decoder}(b, p)"]
            if nullable:
                return [
                    "if b[p] > 127:",  # a negative int8 marks null
                    f"    {target} = None",
                    "    p += 1",
                    "else:",
                    f"    {target}, p = {decoder}(b, p + 1)",
                ]
            return [f"{target}, p = {decoder}(b, p)"]
        assert kind == "array" and ftype.element is not None
        element = ftype.element
        if element.kind == "fixed" and element.code != "U":
            reader = "_read_compact_fixed_array" if compact else "_read_fixed_array"
            return [f"{target}, p = {reader}(b, p, {self.array_type(element.code)}, {nullable})"]
        element_reader = self.element_reader(element, compact, version)
        min_size = self.element_min_size(element, compact, version)
        reader = "_read_compact_array" if compact else "_read_array"
        return [f"{target}, p = {reader}(b, p, {min_size}, {nullable}, {element_reader})"]

    def element_reader(self, element: FieldType, compact: bool, version: int) -> str:
        if element.kind == "fixed":
            return "_read_uuid"
        if element.kind in ("string", "bytes"):
            return READERS[(element.kind, compact, False)]
        if element.kind == "struct":
            return self.decoder(element.struct, version)
        raise AssertionError(element.kind)

    def write_value(
        self, fl: FieldLayout, value: str, version: int, tagged: bool, out: str = "out"
    ) -> list[str]:
        """Statements appending `value` to the bytearray `out`."""
        ftype = fl.spec.type
        compact = True if tagged else fl.compact
        nullable = fl.nullable
        kind = ftype.kind
        if kind == "fixed":
            if ftype.code == "U":
                return [f"{out} += {value}.bytes"]
            return [f"{out} += {self.struct_constant(ftype.code)}.pack({value})"]
        if kind in ("string", "bytes"):
            return [f"{WRITERS[(kind, compact, nullable)]}({out}, {value})"]
        if kind == "records":
            if tagged:
                raise ValueError("records cannot be tagged")
            return [f"_write_records({out}, chunks, {value}, {compact})"]
        if kind == "struct":
            encoder = self.encoder(ftype.struct, version)
            args = f"{out}, chunks, v" if self.chunked(ftype.struct) else f"{out}, v"
            if tagged and self.chunked(ftype.struct):
                raise ValueError("records cannot be inside a tagged struct")
            if nullable:
                marker = f"_write_uvarint({out}, 1)" if tagged else f"{out}.append(1)"
                lines = [f"v = {value}"]
                if not tagged:
                    lines += ["if v is None:", f"    {out}.append(255)", "else:"]
                else:  # a null tagged struct is only written when its default is not null
                    lines += ["if v is None:", f"    {out}.append(0)", "else:"]
                return lines + [f"    {marker}", f"    {encoder}({args})"]
            return [f"v = {value}", f"{encoder}({args})"]
        assert kind == "array" and ftype.element is not None
        element = ftype.element
        if element.kind == "fixed" and element.code != "U":
            writer = "_write_compact_fixed_array" if compact else "_write_fixed_array"
            return [f"{writer}({out}, {value}, {self.array_type(element.code)}, {nullable})"]
        if element.kind == "struct" and self.chunked(element.struct):
            if tagged:
                raise ValueError("records cannot be inside a tagged array")
            writer = "_write_compact_array_chunked" if compact else "_write_array_chunked"
            encoder = self.encoder(element.struct, version)
            return [f"{writer}({out}, chunks, {value}, {nullable}, {encoder})"]
        writer = "_write_compact_array" if compact else "_write_array"
        element_writer = self.element_writer(element, compact, version)
        return [f"{writer}({out}, {value}, {nullable}, {element_writer})"]

    def element_writer(self, element: FieldType, compact: bool, version: int) -> str:
        if element.kind == "fixed":
            return "_write_uuid"
        if element.kind in ("string", "bytes"):
            return WRITERS[(element.kind, compact, False)]
        if element.kind == "struct":
            return self.encoder(element.struct, version)
        raise AssertionError(element.kind)

    # -- per-version functions ----------------------------------------------------------------

    def decoder(self, struct_name: str, version: int) -> str:
        key = (struct_name, version)
        if key not in self.decoders:
            self.decoders[key] = self.register(
                "d", struct_name, self.decoder_body(struct_name, version)
            )
        return self.decoders[key]

    def encoder(self, struct_name: str, version: int) -> str:
        key = (struct_name, version)
        if key not in self.encoders:
            self.encoders[key] = self.register(
                "e", struct_name, self.encoder_body(struct_name, version)
            )
        return self.encoders[key]

    def runs(self, layouts: list[FieldLayout]) -> Iterator[list[FieldLayout]]:
        """Regular fields grouped: consecutive fixed-size fields form one run."""
        run: list[FieldLayout] = []
        for fl in layouts:
            if fl.state != "regular":
                continue
            if fl.spec.type.kind == "fixed":
                run.append(fl)
                continue
            if run:
                yield run
                run = []
            yield [fl]
        if run:
            yield run

    def decoder_body(self, struct_name: str, version: int) -> str:
        struct = self.all_structs[struct_name]
        layouts = self.layout(struct, version)
        code = Lines()
        code.add("def __FUNCTION__(b, p):")
        code.indent()
        code.add(f"o = _new({struct_name})")
        for fl in layouts:
            if fl.state != "regular":  # tagged fields start at their default too
                code.add(f"o.{fl.spec.attr} = {default_expr(fl.spec)}")
        for run in self.runs(layouts):
            first = run[0]
            if first.spec.type.kind != "fixed":
                code.extend(self.read_value(first, f"o.{first.spec.attr}", version, False))
                continue
            codes = "".join(fl.spec.type.code for fl in run)
            constant = self.struct_constant(codes)
            targets, post = [], []
            for index, fl in enumerate(run):
                if fl.spec.type.code == "U":
                    targets.append(f"u{index}")
                    post.append(f"o.{fl.spec.attr} = _uuid_from_bytes(u{index})")
                else:
                    targets.append(f"o.{fl.spec.attr}")
            trailer = "," if len(targets) == 1 else ""
            code.add(f"{', '.join(targets)}{trailer} = {constant}.unpack_from(b, p)")
            code.extend(post)
            code.add(f"p += {sum(fl.spec.type.size for fl in run)}")
        if self.flexible(version):
            tagged = sorted((fl for fl in layouts if fl.state == "tagged"), key=tag_of)
            if not tagged:
                code.extend(
                    [
                        "if b[p]:",
                        "    o.unknown_tagged_fields, p = _read_unknown_tagged_fields(b, p)",
                        "else:",
                        "    o.unknown_tagged_fields = None",
                        "    p += 1",
                    ]
                )
            else:
                code.extend(
                    [
                        "o.unknown_tagged_fields = None",
                        "if b[p] == 0:",
                        "    p += 1",
                        "else:",
                    ]
                )
                code.indent()
                code.add("count, p = _read_uvarint(b, p)")
                code.add("for _ in range(count):")
                code.indent()
                code.add("tag, size, p = _read_tagged_header(b, p)")
                code.add("end = p + size")
                for index, fl in enumerate(tagged):
                    code.add(f"{'if' if index == 0 else 'elif'} tag == {fl.spec.tag}:")
                    code.indent()
                    code.extend(self.read_value(fl, f"o.{fl.spec.attr}", version, True))
                    code.dedent()
                code.add("else:")
                code.indent()
                code.add("if o.unknown_tagged_fields is None:")
                code.add("    o.unknown_tagged_fields = {}")
                code.add("o.unknown_tagged_fields[tag] = b[p:end].tobytes()")
                code.add("p = end")
                code.dedent()
                code.add("if p != end:")
                code.add(
                    '    raise _DecodeError(f"tagged field {tag}: size {size} does not match")'
                )
                code.dedent()
                code.dedent()
        else:
            code.add("o.unknown_tagged_fields = None")
        code.add("return o, p")
        return code.text()

    def encoder_body(self, struct_name: str, version: int) -> str:
        struct = self.all_structs[struct_name]
        layouts = self.layout(struct, version)
        code = Lines()
        args = "out, chunks, o" if self.chunked(struct_name) else "out, o"
        code.add(f"def __FUNCTION__({args}):")
        code.indent()
        for fl in layouts:
            if fl.state == "absent" and not fl.spec.ignorable:
                check = is_default_expr(fl.spec, f"o.{fl.spec.attr}")
                code.add(f"if not ({check}):")
                code.add(
                    f'    raise ValueError("{struct_name}.{fl.spec.attr} is not in this version '
                    f'and not ignorable, but holds a non-default value")'
                )
        for run in self.runs(layouts):
            first = run[0]
            if first.spec.type.kind != "fixed":
                code.extend(self.write_value(first, f"o.{first.spec.attr}", version, False))
                continue
            codes = "".join(fl.spec.type.code for fl in run)
            constant = self.struct_constant(codes)
            values = [
                f"o.{fl.spec.attr}.bytes" if fl.spec.type.code == "U" else f"o.{fl.spec.attr}"
                for fl in run
            ]
            code.add(f"out += {constant}.pack({', '.join(values)})")
        if self.flexible(version):
            tagged = sorted((fl for fl in layouts if fl.state == "tagged"), key=tag_of)
            if not tagged:
                code.extend(
                    [
                        "if o.unknown_tagged_fields:",
                        "    _write_unknown_tagged_fields(out, o.unknown_tagged_fields)",
                        "else:",
                        "    out.append(0)",
                    ]
                )
            else:
                code.add("tagged = []")
                for fl in tagged:
                    attr = f"o.{fl.spec.attr}"
                    code.add(f"if not ({is_default_expr(fl.spec, attr)}):")
                    code.indent()
                    if fl.spec.type.kind == "fixed" and fl.spec.type.code != "U":
                        constant = self.struct_constant(fl.spec.type.code)
                        code.add(f"tagged.append(({fl.spec.tag}, {constant}.pack({attr})))")
                    else:
                        code.add("t = bytearray()")
                        code.extend(self.write_value(fl, attr, version, True, out="t"))
                        code.add(f"tagged.append(({fl.spec.tag}, t))")
                    code.dedent()
                known = self.tag_set(tag_of(fl) for fl in tagged)
                code.extend(
                    [
                        "if tagged or o.unknown_tagged_fields:",
                        f"    _write_tagged_fields(out, tagged, o.unknown_tagged_fields, {known})",
                        "else:",
                        "    out.append(0)",
                    ]
                )
        if len(code.lines) == 1:
            code.add("pass")
        return code.text()

    def is_default_function(self, struct: StructSpec) -> str:
        checks = [is_default_expr(f, f"o.{f.attr}") for f in struct.fields]
        checks.append("not o.unknown_tagged_fields")
        code = Lines()
        code.add(f"def _isdef_{struct.name}(o):")
        code.indent()
        code.add("return (")
        for index, check in enumerate(checks):
            code.add(f"    {'and ' if index else ''}{check}")
        code.add(")")
        return code.text()

    # -- classes ------------------------------------------------------------------------------

    def class_source(self, struct: StructSpec, is_message: bool) -> str:
        m = self.message
        code = Lines()
        base = "_Message" if is_message else "_Struct"
        code.add(f"class {struct.name}({base}):")
        code.indent()
        if is_message:
            code.add(f'"""{m.name} ({m.spec_type}, from {m.source})."""')
            code.add("")
        attrs = [f.attr for f in struct.fields]
        slots = attrs + ["unknown_tagged_fields"]
        code.add(f"__slots__ = {tuple(slots)!r}")
        code.add(f"_FIELDS = {tuple(attrs)!r}")
        # field -> (first, last) version it exists in (last None: open ended), for writers
        # that print a message as of a version (Kafka's JSON converters).
        versions = {f.attr: (f.versions.low, f.versions.high) for f in struct.fields}
        code.add(f"_FIELD_VERSIONS = {versions!r}")
        if is_message:
            code.add(f"NAME = {m.name!r}")
            code.add(f"SPEC_TYPE = {m.spec_type!r}")
            code.add(f"API_KEY = {m.api_key!r}")
            code.add(f"MIN_VERSION = {m.valid.low}")
            code.add(f"MAX_VERSION = {m.valid.high}")
            code.add(f"FLEXIBLE_MIN = {m.flexible_min!r}")
            code.add(f"HAS_RECORDS = {self.contains_records(m.name)}")
            for nested in m.structs:
                code.add(f"{nested} = {nested}")
        code.add("")
        params = []
        body = []
        for f in struct.fields:
            value = default_value(f)
            hint = type_hint(f)
            if value in ("LIST", "INSTANCE") and f.type.kind in ("array", "struct"):
                fresh = default_expr(f)
                if f.nullable_somewhere():  # None is a legal value: tell "not given" apart
                    params.append(f"{f.attr}: {hint} = _UNSET")
                    body.append(f"self.{f.attr} = {fresh} if {f.attr} is _UNSET else {f.attr}")
                else:
                    params.append(f"{f.attr}: {hint} | None = None")
                    body.append(f"self.{f.attr} = {fresh} if {f.attr} is None else {f.attr}")
            else:
                params.append(f"{f.attr}: {hint} = {default_expr(f)}")
                body.append(f"self.{f.attr} = {f.attr}")
        params.append("unknown_tagged_fields: dict[int, bytes] | None = None")
        body.append("self.unknown_tagged_fields = unknown_tagged_fields")
        code.add("def __init__(")
        code.add("    self,")
        code.add("    *,")
        for param in params:
            code.add(f"    {param},")
        code.add(") -> None:")
        code.indent()
        code.extend(body)
        return code.text()

    # -- module -------------------------------------------------------------------------------

    def reachable(self, version: int) -> list[str]:
        """Structs that occur at `version`, children before parents."""
        order: list[str] = []

        def visit(name: str) -> None:
            for fl in self.layout(self.all_structs[name], version):
                nested = struct_of(fl.spec.type)
                if fl.state != "absent" and nested and nested not in order:
                    visit(nested)
            if name not in order:
                order.append(name)

        visit(self.message.name)
        return order

    def module_source(self) -> str:
        m = self.message
        top_decoders, top_encoders = [], []
        for version in m.versions:
            for name in self.reachable(version):
                self.decoder(name, version)
                self.encoder(name, version)
            top_decoders.append(self.decoders[(m.name, version)])
            top_encoders.append(self.encoders[(m.name, version)])
        for nested in m.structs.values():
            self.functions.append(self.is_default_function(nested))

        out = Lines()
        out.add(f'"""Generated by tools/gen_protocol.py from {m.source}. Do not edit."""')
        out.add("# ruff: noqa")
        out.add("")
        out.add("from __future__ import annotations")
        out.add("")
        out.add("import uuid")
        out.add("from struct import Struct as _StructFormat")
        out.add("from typing import Any")
        out.add("")
        out.add("from odradek.protocol.errors import DecodeError as _DecodeError")
        out.add("from odradek.protocol.messages._base import Message as _Message")
        out.add("from odradek.protocol.messages._base import Struct as _Struct")
        out.add("from odradek.protocol.messages._base import UNSET as _UNSET")
        out.add("from odradek.protocol.primitives import ZERO_UUID as _ZERO_UUID")
        for name in PRIMITIVE_IMPORTS:
            out.add(f"from odradek.protocol.primitives import {name} as _{name}")
        out.add("")
        out.add("_new = object.__new__")
        out.add("")
        for fmt, name in sorted(self.struct_formats.items(), key=lambda item: item[1]):
            out.add(f"{name} = _StructFormat({fmt!r})")
        for code, name in sorted(self.array_types.items(), key=lambda item: item[1]):
            out.add(f"{name} = _FIXED_ARRAY_TYPES[{code!r}]")
        for tags, name in sorted(self.tag_sets.items()):
            out.add(f"{name} = frozenset({tags!r})")
        out.add("")
        for nested in m.structs.values():
            out.add("")
            out.lines.extend(self.class_source(nested, False).rstrip("\n").split("\n"))
            out.add("")
        out.add("")
        out.lines.extend(self.class_source(m.root, True).rstrip("\n").split("\n"))
        out.add("")
        for nested in m.structs:
            out.add(f"{nested}.__qualname__ = {m.name + '.' + nested!r}")
        out.add("")
        for function in self.functions:
            out.add("")
            out.lines.extend(function.rstrip("\n").split("\n"))
            out.add("")
        out.add("")
        out.add(f"{m.name}._DECODERS = ({', '.join(top_decoders)},)")
        out.add(f"{m.name}._ENCODERS = ({', '.join(top_encoders)},)")
        return out.text()


def tag_of(fl: FieldLayout) -> int:
    assert fl.spec.tag is not None
    return fl.spec.tag


READERS = {
    ("string", False, False): "_read_string",
    ("string", False, True): "_read_nullable_string",
    ("string", True, False): "_read_compact_string",
    ("string", True, True): "_read_compact_nullable_string",
    ("bytes", False, False): "_read_bytes",
    ("bytes", False, True): "_read_nullable_bytes",
    ("bytes", True, False): "_read_compact_bytes",
    ("bytes", True, True): "_read_compact_nullable_bytes",
}
WRITERS = {key: value.replace("_read_", "_write_") for key, value in READERS.items()}

PRIMITIVE_IMPORTS = sorted(
    {name[1:] for name in READERS.values()}
    | {name[1:] for name in WRITERS.values()}
    | {
        "read_uvarint",
        "read_uuid",
        "read_records",
        "read_compact_records",
        "read_array",
        "read_compact_array",
        "read_fixed_array",
        "read_compact_fixed_array",
        "read_tagged_header",
        "read_unknown_tagged_fields",
        "uuid_from_bytes",
        "FIXED_ARRAY_TYPES",
        "write_uvarint",
        "write_uuid",
        "write_records",
        "write_array",
        "write_compact_array",
        "write_array_chunked",
        "write_compact_array_chunked",
        "write_fixed_array",
        "write_compact_fixed_array",
        "write_tagged_fields",
        "write_unknown_tagged_fields",
    }
)


# ------------------------------------------------------------------------------------------------
# package index


def index_source(messages: list[MessageSpec]) -> str:
    out = Lines()
    out.add('"""Generated by tools/gen_protocol.py: every message class and the spec tables."""')
    out.add("# ruff: noqa")
    out.add("")
    for m in messages:
        out.add(f"from .{m.module} import {m.name}")
    out.add("")
    out.add("__all__ = [")
    for m in messages:
        out.add(f"    {m.name!r},")
    out.add("]")
    out.add("")
    out.add("#: Every generated top-level class, in spec-file order.")
    out.add("ALL_MESSAGES = (")
    for m in messages:
        out.add(f"    {m.name},")
    out.add(")")
    out.add("")

    requests = {m.api_key: m for m in messages if m.spec_type == "request"}
    responses = {m.api_key: m for m in messages if m.spec_type == "response"}
    if set(requests) != set(responses):
        raise ValueError("request and response specs do not pair up")
    out.add("#: (api_key, name, request, response, listeners, deprecated (low, high) or None)")
    out.add("APIS = (")
    for key in sorted(requests):
        request, response = requests[key], responses[key]
        if request.valid != response.valid or request.flexible != response.flexible:
            raise ValueError(f"{request.name} and {response.name} disagree on versions")
        name = request.name.removesuffix("Request")
        deprecated = request.deprecated
        dep = None if deprecated.low is None else (deprecated.low, deprecated.high)
        out.add(
            f"    ({key}, {name!r}, {request.name}, {response.name}, "
            f"{request.listeners!r}, {dep!r}),"
        )
    out.add(")")
    out.add("")

    out.add("#: __cluster_metadata record type -> record class")
    out.add("METADATA_RECORDS = {")
    for m in sorted((m for m in messages if m.spec_type == "metadata"), key=lambda m: m.api_key):
        out.add(f"    {m.api_key}: {m.name},")
    out.add("}")
    out.add("")

    def pairs(directory: str) -> list[tuple[MessageSpec, MessageSpec]]:
        keys = [m for m in messages if m.source.startswith(directory) and m.name.endswith("Key")]
        by_name = {m.name: m for m in messages}
        return [(k, by_name[k.name.removesuffix("Key") + "Value"]) for k in keys]

    out.add("#: __consumer_offsets (key class, value class) pairs; key versions tell them apart")
    out.add("CONSUMER_OFFSETS_RECORDS = (")
    for key, value in pairs("records/consumer_offsets/"):
        out.add(f"    ({key.name}, {value.name}),")
    out.add(")")
    out.add("")
    out.add("#: __transaction_state (key class, value class) pairs")
    out.add("TRANSACTION_STATE_RECORDS = (")
    for key, value in pairs("records/transaction_state/"):
        out.add(f"    ({key.name}, {value.name}),")
    out.add(")")
    return out.text()


# ------------------------------------------------------------------------------------------------
# driver


def generate(specs_dir: Path, out_dir: Path) -> list[Path]:
    messages = load_specs(specs_dir)
    files: dict[str, str] = {}
    for message in messages:
        files[f"{message.module}.py"] = ModuleWriter(message).module_source()
    files["__init__.py"] = index_source(messages)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.py"):
        if stale.name not in files:
            stale.unlink()
    written = []
    for name, text in sorted(files.items()):
        path = out_dir / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS, help="kafka-protocol dir")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output package dir")
    args = parser.parse_args(argv)
    written = generate(args.specs.resolve(), args.out)
    print(f"generated {len(written)} modules in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
