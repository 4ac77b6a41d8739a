"""Generate broker/protocol/messages.py from Apache Kafka's JSON message schemas.

    python -m tools.gen_protocol [--schemas DIR] [--own-schemas DIR] [--allowlist FILE]
                                 [--output FILE] [--check]

The schemas (Kafka's clients/src/main/resources/common/message/*.json, with // comments) are
read from DIR (default: ../shared/kafka-protocol beside the repository), and Causeway's own APIs
(LinkAppend, key 10000: outside Kafka's range) from tools/causeway_protocol/ in the same format
(a name or an API key that is also Kafka's stops the generator). Only the APIs and
data schemas named in the allowlist (default: tools/protocol_allowlist.txt) are generated:
every class costs import time on every CLI call. Each becomes one dataclass with
`encode_into`/`decode_from` written out field by field, so the hot path runs straight-line
code rather than interpreting a schema. `--check` exits 1 when the checked-in file differs
from what the schemas produce.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import keyword
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SCHEMAS = REPO.parent / "shared" / "kafka-protocol"
DEFAULT_OUTPUT = REPO / "broker" / "protocol" / "messages.py"
DEFAULT_ALLOWLIST = REPO / "tools" / "protocol_allowlist.txt"
DEFAULT_OWN_SCHEMAS = REPO / "tools" / "causeway_protocol"

PRIMITIVES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "float64",
    "bool",
    "string",
    "bytes",
    "records",
    "uuid",
}
# The fixed-size types whose Reader and Writer methods bear the type's own name.
FIXED_SIZE = ("int8", "int16", "int32", "int64", "uint16", "float64", "uuid")
NEVER = 1 << 30  # upper bound of an open range such as "3+"


# -- schema model --------------------------------------------------------------------------


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int  # inclusive; NEVER for "n+"; lo > hi means "none"

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), NEVER)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def intersect(self, other: Versions) -> Versions:
        return Versions(max(self.lo, other.lo), min(self.hi, other.hi))

    def covers(self, other: Versions) -> bool:
        """Whether every version of `other` is in self."""
        return other.empty or (self.lo <= other.lo and other.hi <= self.hi)

    def disjoint(self, other: Versions) -> bool:
        return self.intersect(other).empty


@dataclass
class Field:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: object
    flexible_override: Versions | None
    fields: list[Field]

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    def scalar(self) -> Field:
        """The field as one of its elements is read or written: an array's element type, never
        null (nullability belongs to the array); any other field as it is."""
        if not self.is_array:
            return self
        return dataclasses.replace(self, nullable=Versions(1, 0), type=self.element)

    @property
    def is_struct(self) -> bool:
        return self.element not in PRIMITIVES

    @property
    def attr(self) -> str:
        return snake(self.name)


@dataclass
class Struct:
    name: str
    fields: list[Field]


@dataclass
class Message:
    name: str
    kind: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    fields: list[Field]
    structs: dict[str, Struct] = field(default_factory=dict)


def snake(name: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


def strip_comments(text: str) -> str:
    """Remove // comments, leaving // inside JSON strings alone."""
    out: list[str] = []
    in_string = False
    i = 0
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def parse_field(raw: dict[str, object]) -> Field:
    fields = [parse_field(f) for f in raw.get("fields", [])]  # type: ignore[attr-defined]
    flex = raw.get("flexibleVersions")
    tag = raw.get("tag")
    return Field(
        name=str(raw["name"]),
        type=str(raw["type"]).strip(),
        versions=Versions.parse(str(raw["versions"])),
        nullable=Versions.parse(raw.get("nullableVersions")),  # type: ignore[arg-type]
        tagged=Versions.parse(raw.get("taggedVersions")),  # type: ignore[arg-type]
        tag=int(tag) if tag is not None else None,  # type: ignore[call-overload]
        default=raw.get("default"),
        flexible_override=Versions.parse(str(flex)) if flex is not None else None,
        fields=fields,
    )


def load_message(path: Path) -> Message:
    raw = json.loads(strip_comments(path.read_text()))
    msg = Message(
        name=raw["name"],
        kind=raw["type"],
        api_key=raw.get("apiKey"),
        valid=Versions.parse(raw["validVersions"]),
        flexible=Versions.parse(raw.get("flexibleVersions", "none")),
        fields=[parse_field(f) for f in raw["fields"]],
    )
    for common in raw.get("commonStructs", []):
        msg.structs[common["name"]] = Struct(
            common["name"], [parse_field(f) for f in common["fields"]]
        )

    def collect(fields: list[Field]) -> None:
        for f in fields:
            if f.is_struct and f.fields:
                msg.structs.setdefault(f.element, Struct(f.element, f.fields))
                collect(f.fields)

    collect(msg.fields)
    for common in list(msg.structs.values()):
        collect(common.fields)
    return msg


# -- code emission -------------------------------------------------------------------------


class Emitter:
    """Writes one message class; `valid` narrows every condition to the versions that exist."""

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.lines: list[str] = []

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text if text else "")

    # conditions --------------------------------------------------------------------------

    def cond(self, versions: Versions, within: Versions) -> str | None:
        """A test of `version` against `versions`, or None when it holds for all of `within`."""
        v = versions.intersect(self.msg.valid)
        w = within.intersect(self.msg.valid)
        if v.covers(w):
            return None
        parts = []
        if v.lo > w.lo:
            parts.append(f"version >= {v.lo}")
        if v.hi < w.hi:
            parts.append(f"version <= {v.hi}")
        return " and ".join(parts) if parts else None

    def flex_of(self, f: Field) -> Versions:
        return f.flexible_override if f.flexible_override is not None else self.msg.flexible

    def choose(self, within: Versions, when: Versions, yes: str, no: str) -> str:
        """`yes` where `when` holds, `no` elsewhere, as one expression over `within`."""
        inside = when.intersect(within).intersect(self.msg.valid)
        outside_possible = not when.covers(within.intersect(self.msg.valid))
        if inside.empty:
            return no
        if not outside_possible:
            return yes
        test = self.cond(when, within)
        return f"({yes} if {test} else {no})"

    def compact_flag(self, within: Versions, flex: Versions) -> str:
        inside = flex.intersect(within).intersect(self.msg.valid)
        if inside.empty:
            return "False"
        if flex.covers(within.intersect(self.msg.valid)):
            return "True"
        return self.cond(flex, within) or "True"

    # types --------------------------------------------------------------------------------

    def py_type(self, f: Field) -> str:
        base = {
            "int8": "int",
            "int16": "int",
            "int32": "int",
            "int64": "int",
            "uint16": "int",
            "float64": "float",
            "bool": "bool",
            "string": "str",
            "bytes": "bytes",
            "records": "Records",
            "uuid": "uuid.UUID",
        }.get(f.element, f"{self.msg.name}.{f.element}")
        if f.is_array:
            base = f"list[{base}]"
        nullable = not f.nullable.intersect(self.msg.valid).empty
        if f.element == "records" or self.default_is_none(f) or nullable:
            base = f"{base} | None"
        return base

    def default_is_none(self, f: Field) -> bool:
        if f.element == "records" and not f.is_array:
            return True
        return f.default == "null"

    def default_expr(self, f: Field) -> str:
        if self.default_is_none(f):
            return "None"
        if f.is_array:
            return "field(default_factory=list)"
        t = f.element
        d = f.default
        if t in ("int8", "int16", "int32", "int64", "uint16"):
            return str(int(str(d), 0)) if d not in (None, "") else "0"
        if t == "float64":
            return repr(float(str(d))) if d not in (None, "") else "0.0"
        if t == "bool":
            return "True" if str(d).lower() == "true" else "False"
        if t == "string":
            return repr(str(d)) if d is not None else "''"
        if t == "bytes":
            return "b''"
        if t == "uuid":
            return "ZERO_UUID"
        return f"field(default_factory=lambda: {self.msg.name}.{t}())"

    def tagged_default_test(self, f: Field, value: str) -> str:
        """An expression that is true when `value` differs from the field's default."""
        if self.default_is_none(f):
            return f"{value} is not None"
        if f.is_array:
            return f"{value}"
        if f.is_struct:
            return f"{value} != {self.msg.name}.{f.element}()"
        return f"{value} != {self.default_expr(f)}"

    # reads --------------------------------------------------------------------------------

    def read_scalar(self, t: str, r: str, f: Field, within: Versions) -> str:
        flex = self.flex_of(f)
        f = f.scalar()
        if t in FIXED_SIZE:
            return f"{r}.{t}()"
        if t == "bool":
            return f"{r}.boolean()"
        if t == "string":
            plain = self.choose(within, f.nullable, f"{r}.nullable_string()", f"{r}.string()")
            compact = self.choose(
                within, f.nullable, f"{r}.compact_nullable_string()", f"{r}.compact_string()"
            )
            return self.choose(within, flex, compact, plain)
        if t == "bytes":
            plain = self.choose(
                within,
                f.nullable,
                f"_opt_bytes({r}.nullable_bytes_view())",
                f"bytes({r}.bytes_view())",
            )
            compact = self.choose(
                within,
                f.nullable,
                f"_opt_bytes({r}.compact_nullable_bytes_view())",
                f"bytes({r}.compact_bytes_view())",
            )
            return self.choose(within, flex, compact, plain)
        if t == "records":
            return self.choose(
                within, flex, f"{r}.compact_nullable_bytes_view()", f"{r}.nullable_bytes_view()"
            )
        raise AssertionError(t)

    def emit_read(self, indent: int, target: str, f: Field, r: str, within: Versions) -> None:
        """Emit statements that read field `f` from reader `r` into `target`."""
        flex = self.flex_of(f)
        cls = f"{self.msg.name}.{f.element}"
        if f.is_array:
            compact = self.compact_flag(within, flex)
            self.emit(indent, f"n = {r}.array_length(compact={compact})")
            if f.is_struct:
                item = f"{cls}.decode_from({r}, version)"
            else:
                item = self.read_scalar(f.element, r, f, within)
            if f.nullable.intersect(within).intersect(self.msg.valid).empty:
                self.emit(indent, "if n < 0:")
                self.emit(indent + 1, f"raise ProtocolError('null array for {f.name}')")
                self.emit(indent, f"{target} = [{item} for _ in range(n)]")
            else:
                self.emit(indent, f"{target} = None if n < 0 else [{item} for _ in range(n)]")
        elif f.is_struct:
            if f.nullable.intersect(within).intersect(self.msg.valid).empty:
                self.emit(indent, f"{target} = {cls}.decode_from({r}, version)")
            else:
                self.emit(
                    indent,
                    f"{target} = None if {r}.int8() < 0 else {cls}.decode_from({r}, version)",
                )
        else:
            self.emit(indent, f"{target} = {self.read_scalar(f.element, r, f, within)}")

    # writes -------------------------------------------------------------------------------

    def write_scalar(self, t: str, w: str, f: Field, value: str, within: Versions) -> str:
        flex = self.flex_of(f)
        f = f.scalar()
        if t in FIXED_SIZE:
            return f"{w}.{t}({value})"
        if t == "bool":
            return f"{w}.boolean({value})"
        if t in ("string", "bytes", "records"):
            name = {"string": "string", "bytes": "bytes_", "records": "bytes_"}[t]
            cname = {
                "string": "compact_string",
                "bytes": "compact_bytes",
                "records": "compact_bytes",
            }[t]
            nname = {
                "string": "nullable_string",
                "bytes": "nullable_bytes",
                "records": "nullable_bytes",
            }[t]
            cnname = {
                "string": "compact_nullable_string",
                "bytes": "compact_nullable_bytes",
                "records": "compact_nullable_bytes",
            }[t]
            if t == "records":
                plain, compact = f"{w}.{nname}({value})", f"{w}.{cnname}({value})"
            else:
                plain = self.choose(
                    within, f.nullable, f"{w}.{nname}({value})", f"{w}.{name}({value})"
                )
                compact = self.choose(
                    within, f.nullable, f"{w}.{cnname}({value})", f"{w}.{cname}({value})"
                )
            return self.choose(within, flex, compact, plain)
        raise AssertionError(t)

    def emit_write(self, indent: int, value: str, f: Field, w: str, within: Versions) -> None:
        flex = self.flex_of(f)
        if f.is_array:
            compact = self.compact_flag(within, flex)
            nullable = not f.nullable.intersect(within).intersect(self.msg.valid).empty
            if nullable:
                self.emit(indent, f"if {value} is None:")
                self.emit(indent + 1, f"{w}.array_length(-1, compact={compact})")
                self.emit(indent, "else:")
                indent += 1
            self.emit(indent, f"{w}.array_length(len({value}), compact={compact})")
            item = f"{f.attr}_item"  # a name per field keeps each loop variable's type apart
            self.emit(indent, f"for {item} in {value}:")
            if f.is_struct:
                self.emit(indent + 1, f"{item}.encode_into({w}, version)")
            else:
                self.emit(indent + 1, self.write_scalar(f.element, w, f, item, within))
        elif f.is_struct:
            nullable = not f.nullable.intersect(within).intersect(self.msg.valid).empty
            if nullable:
                self.emit(indent, f"if {value} is None:")
                self.emit(indent + 1, f"{w}.int8(-1)")
                self.emit(indent, "else:")
                self.emit(indent + 1, f"{w}.int8(1)")
                self.emit(indent + 1, f"{value}.encode_into({w}, version)")
            else:
                self.emit(indent, f"{value}.encode_into({w}, version)")
        else:
            self.emit(indent, self.write_scalar(f.element, w, f, value, within))

    # classes ------------------------------------------------------------------------------

    def emit_body(self, indent: int, name: str, fields: list[Field], top: bool) -> None:
        """Fields, encode_into and decode_from of one class (top-level or struct)."""
        valid = self.msg.valid
        qual = self.msg.name if top else f"{self.msg.name}.{name}"
        # What tests and tools need to know about a field without the schemas at hand.
        self.emit(indent, "FIELDS: ClassVar[tuple[FieldSpec, ...]] = (")
        for f in fields:
            v = f.versions.intersect(valid)
            n = f.nullable.intersect(valid)
            if f.element == "records" and not f.is_array and n.empty:
                n = v  # records are nullable in every version
            self.emit(
                indent + 1, f"FieldSpec({f.attr!r}, {f.type!r}, {v.lo}, {v.hi}, {n.lo}, {n.hi}),"
            )
        self.emit(indent, ")")
        for f in fields:
            self.emit(indent, f"{f.attr}: {self.py_type(f)} = {self.default_expr(f)}")
        self.emit(0, "")
        flexible = not self.msg.flexible.intersect(valid).empty
        flex_test = self.cond(self.msg.flexible, valid) if flexible else None
        regular = [f for f in fields if f.tag is None]
        tagged = sorted((f for f in fields if f.tag is not None), key=lambda f: f.tag or 0)

        # encode
        self.emit(indent, "def encode_into(self, w: Writer, version: int) -> None:")
        body_start = len(self.lines)
        self.emit_regular(indent + 1, regular, self.emit_write, "w")
        if flexible:
            ind = self.open_flexible(indent + 1, flex_test)
            if tagged:
                self.emit(ind, "tagged: list[tuple[int, bytes | bytearray | memoryview]] = []")
                for f in tagged:
                    within = f.versions.intersect(f.tagged)
                    test = self.cond(within, self.msg.flexible)
                    guard = self.tagged_default_test(f, f"self.{f.attr}")
                    self.emit(ind, f"if {test + ' and ' if test else ''}{guard}:")
                    self.emit(ind + 1, "t = Writer()")
                    self.emit_write(ind + 1, f"self.{f.attr}", f, "t", within)
                    self.emit(ind + 1, f"tagged.append(({f.tag}, t.buf))")
                self.emit(ind, "w.tagged_fields(tagged)")
            else:
                self.emit(ind, "w.unsigned_varint(0)")
        if len(self.lines) == body_start:
            self.emit(indent + 1, "pass")
        self.emit(0, "")

        # decode
        self.emit(indent, "@classmethod")
        self.emit(indent, f"def decode_from(cls, r: Reader, version: int) -> {qual}:")
        self.emit(indent + 1, "self = cls()")
        self.emit_regular(indent + 1, regular, self.emit_read, "r")
        if flexible:
            ind = self.open_flexible(indent + 1, flex_test)
            if tagged:
                self.emit(ind, "for tag, payload in r.tagged_fields():")
                self.emit(ind + 1, "t = Reader(payload)")
                first = True
                for f in tagged:
                    within = f.versions.intersect(f.tagged)
                    test = self.cond(within, self.msg.flexible)
                    kw = "if" if first else "elif"
                    first = False
                    self.emit(ind + 1, f"{kw} tag == {f.tag}{' and ' + test if test else ''}:")
                    self.emit_read(ind + 2, f"self.{f.attr}", f, "t", within)
            else:
                self.emit(ind, "r.skip_tagged_fields()")
        self.emit(indent + 1, "return self")

    def emit_regular(self, indent: int, regular: list[Field],
                     emit_field: Callable[[int, str, Field, str, Versions], None], stream: str) -> None:
        """Each untagged field present in the message's valid versions, through `emit_field`
        (emit_write to `stream` w, or emit_read from r), under an `if` of its versions where
        it is not in all of them. The encoder and the decoder share this walk."""
        valid = self.msg.valid
        for f in regular:
            if f.versions.intersect(valid).empty:
                continue
            test = self.cond(f.versions, valid)
            if test:
                self.emit(indent, f"if {test}:")
                emit_field(indent + 1, f"self.{f.attr}", f, stream, f.versions)
            else:
                emit_field(indent, f"self.{f.attr}", f, stream, valid)

    def open_flexible(self, indent: int, flex_test: str | None) -> int:
        """Open the tagged-fields section (under an `if` when only some versions are flexible);
        returns the indent of its body."""
        if flex_test:
            self.emit(indent, f"if {flex_test}:")
            return indent + 1
        return indent

    def emit_message(self) -> list[str]:
        m = self.msg
        self.emit(0, "")
        self.emit(0, "")
        self.emit(0, "@dataclass(slots=True)")
        self.emit(0, f"class {m.name}:")
        self.emit(1, f"API_KEY: ClassVar[int] = {m.api_key if m.api_key is not None else -1}")
        self.emit(1, f"MIN_VERSION: ClassVar[int] = {m.valid.lo}")
        self.emit(1, f"MAX_VERSION: ClassVar[int] = {m.valid.hi}")
        flex = m.flexible.intersect(m.valid)
        self.emit(1, f"FLEXIBLE_VERSION: ClassVar[int | None] = {None if flex.empty else flex.lo}")
        self.emit(0, "")
        for struct in m.structs.values():
            self.emit(1, "@dataclass(slots=True)")
            self.emit(1, f"class {struct.name}:")
            self.emit_body(2, struct.name, struct.fields, top=False)
            self.emit(0, "")
        self.emit_body(1, m.name, m.fields, top=True)
        self.emit(0, "")
        self.emit(1, "def encode(self, version: int) -> bytearray:")
        self.emit(2, "w = Writer()")
        self.emit(2, "self.encode_into(w, version)")
        self.emit(2, "return w.buf")
        self.emit(0, "")
        self.emit(1, "@classmethod")
        self.emit(
            1, f"def decode(cls, data: bytes | bytearray | memoryview, version: int) -> {m.name}:"
        )
        self.emit(2, "return cls.decode_from(Reader(data), version)")
        return self.lines


HEADER = '''\
# Generated by tools/gen_protocol.py from Apache Kafka's JSON message schemas; do not edit.
# Only the APIs and data schemas of tools/protocol_allowlist.txt are here; to add one, list it
# there and regenerate with: python -m tools.gen_protocol
"""Kafka's request, response and data messages as dataclasses with their wire codecs."""

# ruff: noqa
# mypy: disable-error-code="assignment,no-redef,arg-type"
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from broker.protocol.errors import ProtocolError
from broker.protocol.primitives import ZERO_UUID, Reader, Writer
from broker.protocol.schema import FieldSpec, Message

Records = bytes | bytearray | memoryview


def _opt_bytes(view: memoryview | None) -> bytes | None:
    return None if view is None else bytes(view)
'''


def api_enum_name(request_name: str) -> str:
    return snake(request_name.removesuffix("Request")).upper()


class AllowlistError(ValueError):
    """The allowlist names a schema that does not exist, or names one twice."""


def read_allowlist(path: Path) -> list[str]:
    """The names in an allowlist file: one a line, `#` starts a comment."""
    names = []
    for line in path.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(name)
    return names


def select(messages: list[Message], names: list[str]) -> list[Message]:
    """The messages `names` asks for, in `messages`' order: an API name (without Request or
    Response) brings both classes, a data schema comes by its own name."""
    by_name = {m.name: m for m in messages}
    wanted: set[str] = set()
    for name in names:
        if name in wanted or f"{name}Request" in wanted:
            raise AllowlistError(f"{name} is listed twice")
        if f"{name}Request" in by_name and f"{name}Response" in by_name:
            wanted |= {f"{name}Request", f"{name}Response"}
        elif by_name.get(name) is not None and by_name[name].kind == "data":
            wanted.add(name)
        else:
            raise AllowlistError(f"{name} is neither an API nor a data schema in the schemas")
    return [m for m in messages if m.name in wanted]


def load_all(schemas: Path, own: Path | None) -> list[Message]:
    """Kafka's schemas, then Causeway's own (which must not reuse a Kafka name or API key)."""
    messages = [load_message(p) for p in sorted(schemas.glob("*.json"))]
    if own is not None and own.is_dir():
        names = {m.name for m in messages}
        keys = {m.api_key for m in messages if m.api_key is not None}
        for path in sorted(own.glob("*.json")):
            m = load_message(path)
            if m.name in names:
                raise AllowlistError(f"{path}: {m.name} is also one of Kafka's schemas")
            if m.kind == "request" and m.api_key in keys:
                raise AllowlistError(f"{path}: API key {m.api_key} is also one of Kafka's")
            messages.append(m)
    return messages


def generate(schemas: Path, allowlist: Path = DEFAULT_ALLOWLIST, own: Path | None = DEFAULT_OWN_SCHEMAS) -> str:
    messages = load_all(schemas, own)
    messages = [m for m in messages if m.kind in ("request", "response", "data")]
    messages = select(messages, read_allowlist(allowlist))
    out = [HEADER]
    for m in messages:
        out.extend(Emitter(m).emit_message())
    requests = sorted((m for m in messages if m.kind == "request"), key=lambda m: m.api_key or 0)
    responses = {m.api_key: m for m in messages if m.kind == "response"}
    out += ["", "", "class ApiKey(enum.IntEnum):"]
    out += [f"    {api_enum_name(m.name)} = {m.api_key}" for m in requests]
    out += ["", "", "REQUESTS: dict[int, type[Message]] = {"]
    out += [f"    {m.api_key}: {m.name}," for m in requests]
    out += ["}", "", "RESPONSES: dict[int, type[Message]] = {"]
    out += [f"    {m.api_key}: {responses[m.api_key].name}," for m in requests]
    out += ["}", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS)
    parser.add_argument("--own-schemas", type=Path, default=DEFAULT_OWN_SCHEMAS,
                        help="Causeway's own API schemas (default: tools/causeway_protocol)")
    parser.add_argument(
        "--allowlist", type=Path, default=DEFAULT_ALLOWLIST, help="the APIs and data to generate"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the output is out of date")
    args = parser.parse_args(argv)
    if not args.schemas.is_dir():
        print(f"gen_protocol: no schema directory at {args.schemas}", file=sys.stderr)
        return 2
    try:
        code = generate(args.schemas, args.allowlist, args.own_schemas)
    except AllowlistError as exc:
        print(f"gen_protocol: {args.allowlist}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gen_protocol: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != code:
            print(
                f"gen_protocol: {args.output} is out of date; run python -m tools.gen_protocol",
                file=sys.stderr,
            )
            return 1
        return 0
    args.output.write_text(code)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
