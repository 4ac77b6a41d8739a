"""Splitting a byte stream into Kafka frames: a 4-byte big-endian size, then that many bytes.

The reader never allocates by the size field: it keeps only the bytes that have arrived, and
rejects a size above `max_frame_size` (Kafka's socket.request.max.bytes) the moment the four
size bytes are in, before any of the body is read.
"""

from __future__ import annotations

import enum
import struct
from typing import Final, Literal

from broker.protocol.errors import ProtocolError

__all__ = ["NEED_DATA", "FrameReader", "FrameTooLarge", "NeedData"]

_SIZE = struct.Struct(">i")


class NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


class FrameTooLarge(ProtocolError):
    """A frame's size field is negative or above the limit."""


class FrameReader:
    """Feed bytes as they arrive; take whole frames out in order."""

    __slots__ = ("_buf", "_start", "max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._start = 0  # consumed prefix of _buf, compacted lazily

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._start and self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        self._buf += data

    def buffered(self) -> int:
        """Bytes held that do not yet form a whole frame (or frames not yet taken)."""
        return len(self._buf) - self._start

    def pending_frame_size(self) -> int | None:
        """The size the next frame claims (checked against the limit), once its 4 bytes are in."""
        if self.buffered() < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0 or size > self.max_frame_size:
            raise FrameTooLarge(f"frame size {size} outside 0..{self.max_frame_size}")
        return int(size)

    def next_frame(self) -> memoryview | Literal[NeedData.NEED_DATA]:
        """The next frame's body (without its size prefix), or NEED_DATA.

        The returned view stays valid: the buffer it points into is never mutated afterwards
        (compaction swaps in a new buffer instead).
        """
        size = self.pending_frame_size()
        if size is None or self.buffered() < 4 + size:
            if self._start > 65536 and self._start * 2 > len(self._buf):
                # Drop the consumed prefix; a fresh bytearray keeps earlier views intact.
                self._buf = self._buf[self._start :]
                self._start = 0
            return NEED_DATA
        begin = self._start + 4
        end = begin + size
        if self._start == 0 and end == len(self._buf):
            # The usual case, one whole frame buffered: hand the buffer over without a copy.
            frame = memoryview(self._buf)[4:]
            self._buf = bytearray()
            return frame
        frame = memoryview(bytes(self._buf[begin:end]))
        self._start = end
        return frame
