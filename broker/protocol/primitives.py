"""Kafka's primitive wire types: a bounds-checked Reader and its mirror image, the Writer.

Every read checks that the bytes it needs are there, and every length field is checked against
the bytes that remain before anything is allocated, so a hostile size field costs nothing.
Failures raise ProtocolError. Strings are UTF-8; `records` and `bytes` decode as zero-copy
memoryview slices of the input buffer where the caller asks for that.
"""

from __future__ import annotations

import struct
import uuid

from broker.protocol.errors import ProtocolError

__all__ = ["Reader", "Writer", "ZERO_UUID"]

ZERO_UUID = uuid.UUID(int=0)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

Buffer = bytes | bytearray | memoryview


class Reader:
    """Reads Kafka types from `buf` starting at `pos`; `pos` advances past what was read."""

    __slots__ = ("_buf", "pos", "end")

    def __init__(self, buf: Buffer, pos: int = 0, end: int | None = None) -> None:
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._buf = view
        self.pos = pos
        self.end = len(view) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        """Reserve `n` bytes; return where they start."""
        start = self.pos
        if n < 0 or start + n > self.end:
            raise ProtocolError(f"need {n} bytes at offset {start}, have {self.end - start}")
        self.pos = start + n
        return start

    # -- fixed width ------------------------------------------------------------------------

    def int8(self) -> int:
        return int(_I8.unpack_from(self._buf, self._take(1))[0])

    def boolean(self) -> bool:
        return self._buf[self._take(1)] != 0

    def int16(self) -> int:
        return int(_I16.unpack_from(self._buf, self._take(2))[0])

    def uint16(self) -> int:
        return int(_U16.unpack_from(self._buf, self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self._buf, self._take(4))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self._buf, self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self._buf, self._take(8))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self._buf, self._take(8))[0])

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(bytes=bytes(self._buf[start : start + 16]))

    # -- variable width integers ------------------------------------------------------------

    def _unsigned_var(self, max_bytes: int) -> int:
        """7 bits a byte, least significant group first, at most `max_bytes` bytes."""
        value = 0
        buf = self._buf
        for shift in range(0, 7 * max_bytes, 7):
            if self.pos >= self.end:
                raise ProtocolError("varint runs past the end of the buffer")
            byte = buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise ProtocolError(f"varint longer than {max_bytes} bytes")

    def unsigned_varint(self) -> int:
        return self._unsigned_var(5)

    def varint(self) -> int:
        raw = self._unsigned_var(5)
        return (raw >> 1) ^ -(raw & 1)

    def unsigned_varlong(self) -> int:
        return self._unsigned_var(10)

    def varlong(self) -> int:
        raw = self.unsigned_varlong()
        return (raw >> 1) ^ -(raw & 1)

    # -- lengths ----------------------------------------------------------------------------

    def _compact_length(self) -> int:
        """A compact length: the varint holds length + 1, 0 meaning null (returned as -1)."""
        return self.unsigned_varint() - 1

    def array_length(self, *, compact: bool) -> int:
        """An array's element count, -1 for null.

        Each element takes at least one byte, so a count above the remaining bytes is a lie
        told to make us allocate: refuse it before looping.
        """
        n = self._compact_length() if compact else self.int32()
        if n < -1 or n > self.remaining:
            raise ProtocolError(f"array length {n} with {self.remaining} bytes left")
        return n

    def _sized(self, n: int) -> memoryview:
        start = self._take(n)
        return self._buf[start : start + n]

    # -- strings and bytes ------------------------------------------------------------------

    def _decode_text(self, n: int) -> str:
        try:
            return str(self._sized(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise ProtocolError(f"negative string length {n}")
        return self._decode_text(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < -1:
            raise ProtocolError(f"bad string length {n}")
        return None if n == -1 else self._decode_text(n)

    def compact_string(self) -> str:
        n = self._compact_length()
        if n < 0:
            raise ProtocolError("null where a non-null compact string is required")
        return self._decode_text(n)

    def compact_nullable_string(self) -> str | None:
        n = self._compact_length()
        return None if n == -1 else self._decode_text(n)

    def bytes_view(self) -> memoryview:
        n = self.int32()
        if n < 0:
            raise ProtocolError(f"negative bytes length {n}")
        return self._sized(n)

    def nullable_bytes_view(self) -> memoryview | None:
        n = self.int32()
        if n < -1:
            raise ProtocolError(f"bad bytes length {n}")
        return None if n == -1 else self._sized(n)

    def compact_bytes_view(self) -> memoryview:
        n = self._compact_length()
        if n < 0:
            raise ProtocolError("null where non-null compact bytes are required")
        return self._sized(n)

    def compact_nullable_bytes_view(self) -> memoryview | None:
        n = self._compact_length()
        return None if n == -1 else self._sized(n)

    def raw(self, n: int) -> memoryview:
        """The next `n` bytes as a view."""
        return self._sized(n)

    # -- tagged fields ----------------------------------------------------------------------

    def tagged_fields(self) -> list[tuple[int, memoryview]]:
        """All tagged fields of a flexible struct, as (tag, payload) in wire order."""
        count = self.unsigned_varint()
        if count > self.remaining:
            raise ProtocolError(f"{count} tagged fields with {self.remaining} bytes left")
        fields: list[tuple[int, memoryview]] = []
        for _ in range(count):
            tag = self.unsigned_varint()
            size = self.unsigned_varint()
            fields.append((tag, self._sized(size)))
        return fields

    def skip_tagged_fields(self) -> None:
        count = self.unsigned_varint()
        for _ in range(count):
            self.unsigned_varint()
            self._take(self.unsigned_varint())


class Writer:
    """Appends Kafka types to one growing bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def getvalue(self) -> bytearray:
        return self.buf

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def unsigned_varint(self, v: int) -> None:
        if v < 0:
            raise ValueError(f"unsigned varint of negative {v}")
        buf = self.buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def varint(self, v: int) -> None:
        self.unsigned_varint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int) -> None:
        self.unsigned_varint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def array_length(self, n: int, *, compact: bool) -> None:
        """`n` = -1 writes null."""
        if compact:
            self.unsigned_varint(n + 1)
        else:
            self.int32(n)

    def string(self, v: str) -> None:
        data = v.encode()
        self.int16(len(data))
        self.buf += data

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self.int16(-1)
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        data = v.encode()
        self.unsigned_varint(len(data) + 1)
        self.buf += data

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self.unsigned_varint(0)
        else:
            self.compact_string(v)

    def bytes_(self, v: Buffer) -> None:
        self.int32(len(v))
        self.buf += v

    def nullable_bytes(self, v: Buffer | None) -> None:
        if v is None:
            self.int32(-1)
        else:
            self.bytes_(v)

    def compact_bytes(self, v: Buffer) -> None:
        self.unsigned_varint(len(v) + 1)
        self.buf += v

    def compact_nullable_bytes(self, v: Buffer | None) -> None:
        if v is None:
            self.unsigned_varint(0)
        else:
            self.compact_bytes(v)

    def raw(self, v: Buffer) -> None:
        self.buf += v

    def tagged_fields(self, fields: list[tuple[int, Buffer]]) -> None:
        """Write (tag, payload) pairs; tags must be ascending, as the protocol requires."""
        self.unsigned_varint(len(fields))
        for tag, payload in fields:
            self.unsigned_varint(tag)
            self.unsigned_varint(len(payload))
            self.buf += payload
