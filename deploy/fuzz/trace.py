"""Where each field of an encoded request lies: the map that makes mutations structure-aware.

The generated codec writes every message through one `Writer`. `TracingWriter` is that writer
with a note taken at each top-level call: the offset and width of every length prefix, element
count, integer and tagged-field count. A mutation can then set exactly the int32 that counts an
array's elements to -1 or 2**31-1, instead of hoping a random byte flip lands on it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.protocol.primitives import Writer

__all__ = ["Field", "Kind", "TracingWriter", "trace"]


class Kind(enum.Enum):
    INT = "int"  # a fixed-width integer: width 1, 2, 4 or 8
    LENGTH = "length"  # a fixed-width length or count (int16 string, int32 array or bytes)
    COMPACT_LENGTH = "compact_length"  # an unsigned varint holding length + 1 (0 is null)
    TAGS = "tags"  # the unsigned varint count that opens a flexible struct's tagged fields
    BATCH = "batch"  # a RecordBatch v2 inside a records field: `offset` is its first byte


@dataclass(frozen=True, slots=True)
class Field:
    kind: Kind
    offset: int  # first byte of the field in the encoded body
    width: int  # bytes of the prefix or integer itself (a batch: the whole batch)
    value: int  # the value written (for a length: the true length, or -1 for null)


class TracingWriter(Writer):
    """A Writer that records the fields it writes; nested calls (a string's own int16) are not
    recorded twice, the outermost call names the field."""

    __slots__ = ("_depth", "fields")

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[Field] = []
        self._depth = 0

    def _note(self, kind: Kind, width: int, value: int, write: Callable[[], None]) -> None:
        start = len(self.buf)
        self._depth += 1
        try:
            write()
        finally:
            self._depth -= 1
        if self._depth == 0:
            self.fields.append(Field(kind, start, width, value))

    # -- integers ---------------------------------------------------------------------------

    def int8(self, v: int) -> None:
        self._note(Kind.INT, 1, v, lambda: Writer.int8(self, v))

    def boolean(self, v: bool) -> None:
        self._note(Kind.INT, 1, int(v), lambda: Writer.boolean(self, v))

    def int16(self, v: int) -> None:
        self._note(Kind.INT, 2, v, lambda: Writer.int16(self, v))

    def int32(self, v: int) -> None:
        self._note(Kind.INT, 4, v, lambda: Writer.int32(self, v))

    def int64(self, v: int) -> None:
        self._note(Kind.INT, 8, v, lambda: Writer.int64(self, v))

    def unsigned_varint(self, v: int) -> None:
        # Called directly by generated code only to open an empty set of tagged fields.
        start = len(self.buf)
        self._note(Kind.TAGS, 0, v, lambda: Writer.unsigned_varint(self, v))
        self._fix_width(start)

    def tagged_fields(self, fields: list[tuple[int, Any]]) -> None:
        start = len(self.buf)
        self._note(Kind.TAGS, 0, len(fields), lambda: Writer.tagged_fields(self, fields))
        self._fix_width(start)

    # -- lengths ----------------------------------------------------------------------------

    def array_length(self, n: int, *, compact: bool) -> None:
        start = len(self.buf)
        kind = Kind.COMPACT_LENGTH if compact else Kind.LENGTH
        self._note(kind, 4, n, lambda: Writer.array_length(self, n, compact=compact))
        self._fix_width(start)

    def string(self, v: str) -> None:
        self._note(Kind.LENGTH, 2, len(v.encode()), lambda: Writer.string(self, v))

    def nullable_string(self, v: str | None) -> None:
        self._note(Kind.LENGTH, 2, -1 if v is None else len(v.encode()), lambda: Writer.nullable_string(self, v))

    def compact_string(self, v: str) -> None:
        start = len(self.buf)
        self._note(Kind.COMPACT_LENGTH, 0, len(v.encode()), lambda: Writer.compact_string(self, v))
        self._fix_width(start)

    def compact_nullable_string(self, v: str | None) -> None:
        start = len(self.buf)
        n = -1 if v is None else len(v.encode())
        self._note(Kind.COMPACT_LENGTH, 0, n, lambda: Writer.compact_nullable_string(self, v))
        self._fix_width(start)

    def bytes_(self, v: Any) -> None:
        self._note(Kind.LENGTH, 4, len(v), lambda: Writer.bytes_(self, v))
        self._maybe_batch(len(self.buf) - len(v), v)

    def nullable_bytes(self, v: Any) -> None:
        self._note(Kind.LENGTH, 4, -1 if v is None else len(v), lambda: Writer.nullable_bytes(self, v))
        if v is not None:
            self._maybe_batch(len(self.buf) - len(v), v)

    def compact_bytes(self, v: Any) -> None:
        start = len(self.buf)
        self._note(Kind.COMPACT_LENGTH, 0, len(v), lambda: Writer.compact_bytes(self, v))
        self._fix_width(start)
        self._maybe_batch(len(self.buf) - len(v), v)

    def compact_nullable_bytes(self, v: Any) -> None:
        start = len(self.buf)
        self._note(Kind.COMPACT_LENGTH, 0, -1 if v is None else len(v),
                   lambda: Writer.compact_nullable_bytes(self, v))
        self._fix_width(start)
        if v is not None:
            self._maybe_batch(len(self.buf) - len(v), v)

    # -- helpers ----------------------------------------------------------------------------

    def _fix_width(self, start: int) -> None:
        """Replace the last field's provisional width by the bytes its prefix really took."""
        if self._depth or not self.fields or self.fields[-1].offset != start:
            return
        last = self.fields[-1]
        if last.kind in (Kind.LENGTH, Kind.INT):
            return
        width = 1
        while self.buf[start + width - 1] & 0x80:
            width += 1
        self.fields[-1] = Field(last.kind, start, width, last.value)

    def _maybe_batch(self, start: int, data: Any) -> None:
        """Note each RecordBatch v2 (magic 2 at byte 16) in a records field."""
        if self._depth:
            return
        pos, end = start, start + len(data)
        while end - pos >= 61 and self.buf[pos + 16] == 2:
            size = int.from_bytes(self.buf[pos + 8 : pos + 12], "big", signed=True) + 12
            if size < 61 or pos + size > end:
                break
            self.fields.append(Field(Kind.BATCH, pos, size, 0))
            pos += size


def trace(message: Any, version: int) -> tuple[bytes, list[Field]]:
    """Encode `message` at `version`; return the bytes and the fields in write order."""
    w = TracingWriter()
    message.encode_into(w, version)
    return bytes(w.buf), w.fields
