"""Encoding a response whose record sets are not in memory: header bytes with gaps for them.

A fetch response is mostly record batches that already sit in segment files. Rather than read
them into the encoded frame, the encoder writes every other field as usual and, where a record
set goes, writes only its length prefix and leaves a *splice*: an object that stands for that
many bytes and that the server sends from the file (``sendfile``) after the bytes before it.
The bytes on the wire are exactly those of the all-in-memory encoding.

Anything with ``__len__`` that is not bytes, bytearray or memoryview is a splice; this module
never looks inside it (no IO here).
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

from broker.protocol.headers import start_response
from broker.protocol.primitives import Buffer, Writer

__all__ = ["Splice", "SplicingWriter", "encode_response_parts"]

_IN_MEMORY = (bytes, bytearray, memoryview)


class Splice(Protocol):
    """A run of bytes that the encoder does not hold: only its length matters here."""

    def __len__(self) -> int: ...


class SplicingWriter(Writer):
    """A Writer that leaves gaps for splices passed as ``bytes`` / ``records`` values."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[bytearray | Splice] = []

    def _splice(self, value: Splice) -> None:
        self.parts.append(self.buf)
        self.parts.append(value)
        self.buf = bytearray()

    def bytes_(self, v: Buffer) -> None:
        if isinstance(v, _IN_MEMORY):
            super().bytes_(v)
        else:
            self.int32(len(v))
            self._splice(v)

    def compact_bytes(self, v: Buffer) -> None:
        if isinstance(v, _IN_MEMORY):
            super().compact_bytes(v)
        else:
            self.unsigned_varint(len(v) + 1)
            self._splice(v)

    def finish(self) -> list[bytearray | Splice]:
        """The parts in wire order (empty byte runs left out)."""
        parts = [*self.parts, self.buf]
        self.parts = []
        self.buf = bytearray()
        return [p for p in parts if len(p)]


def encode_response_parts(correlation_id: int, header_version: int, message: Any,
                          version: int) -> list[bytearray | Splice]:
    """The whole response frame for ``message`` as parts: bytes, and splices between them.

    Identical on the wire to ``headers.encode_response`` of the same message with every splice
    replaced by its bytes; the size prefix counts the splices' lengths.
    """
    w = SplicingWriter()
    start_response(w, correlation_id, header_version)
    message.encode_into(w, version)
    parts = w.finish()
    first = parts[0]
    assert isinstance(first, bytearray)  # the size and correlation id are always there
    struct.pack_into(">i", first, 0, sum(len(p) for p in parts) - 4)
    return parts
