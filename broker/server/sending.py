"""Writing a response to a peer: bytes, then record data straight from segment files.

A fetch answer is encoded as header bytes with gaps (``broker.protocol.spliced``); each gap is
a :class:`~broker.storage.file_slice.FileSlice` sent from the file. On plaintext socket streams
that is ``os.sendfile``: the kernel copies from the page cache to the socket and the broker holds
nothing. On other streams (TLS, once it exists, or in-memory test streams) the slice is read in
chunks of ``CHUNK`` bytes, each taken from the shared :class:`ResponseMemoryPool` for as long as
it is in flight.

A peer that stops reading must not hold a task, a descriptor or memory forever: every wait for
the socket to take more bytes has a deadline (``stall_timeout_s``, the broker's
``connections.max.idle.ms``, as Kafka closes a connection with no activity for that long), and
:class:`SendStalled` is raised when it passes. The connection then closes.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Sequence

import trio

from broker.protocol.spliced import Splice
from broker.server.memory import ResponseMemoryPool
from broker.storage.file_slice import FileSlice

__all__ = ["CHUNK", "SendStalled", "SliceTruncated", "close_parts", "send_parts"]

# Bytes read from a file per step when sendfile cannot be used, and bytes handed to the stream per
# deadline on the in-memory path: small enough to bound memory, big enough to keep syscalls few.
CHUNK = 256 * 1024
# One sendfile call moves at most what the socket buffer takes anyway; this only caps the ask.
_SENDFILE_MAX = 1 << 30
_GONE = {errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN, errno.EBADF}


class SendStalled(Exception):
    """The peer took no bytes for the whole stall timeout."""


class SliceTruncated(Exception):
    """A segment file ended before the slice did (a follower truncated its log meanwhile)."""


def close_parts(parts: Sequence[object]) -> None:
    for part in parts:
        if isinstance(part, FileSlice):
            part.close()


async def send_parts(
    stream: trio.abc.SendStream,
    parts: Sequence[bytes | bytearray | memoryview | Splice],
    *,
    use_sendfile: bool,
    pool: ResponseMemoryPool | None,
    stall_timeout_s: float,
) -> None:
    """Send every part in order; file slices are closed as soon as they are sent, and whatever
    happens.

    Raises SendStalled, SliceTruncated, or trio.BrokenResourceError when the peer is gone.
    """
    try:
        for part in parts:
            if isinstance(part, (bytes, bytearray, memoryview)):
                await send_bytes(stream, part, stall_timeout_s)
            elif not isinstance(part, FileSlice):
                raise TypeError(f"cannot send {part!r}")
            else:
                if use_sendfile and isinstance(stream, trio.SocketStream):
                    await _sendfile(stream, part, stall_timeout_s)
                else:
                    await _send_chunked(stream, part, pool, stall_timeout_s)
                # Its descriptor's pin goes back to the broker-wide budget now, not after the
                # rest of the answer: a slow reader of a big answer holds only what is unsent.
                part.close()
    finally:
        close_parts(parts)


async def send_bytes(stream: trio.abc.SendStream, data: bytes | bytearray | memoryview,
                     stall_timeout_s: float) -> None:
    """``stream.send_all(data)``, in pieces, each of which must go out within the stall timeout."""
    view = memoryview(data)
    if len(view) <= CHUNK:
        pieces: Sequence[memoryview] = (view,)
    else:
        pieces = [view[i : i + CHUNK] for i in range(0, len(view), CHUNK)]
    for piece in pieces:
        with trio.move_on_after(_timeout(stall_timeout_s)) as scope:
            await stream.send_all(piece)
        if scope.cancelled_caught:
            raise SendStalled


async def _sendfile(stream: trio.SocketStream, part: FileSlice, stall_timeout_s: float) -> None:
    sock = stream.socket
    out_fd = sock.fileno()
    offset = part.position
    remaining = part.length
    while remaining > 0:
        try:
            sent = os.sendfile(out_fd, part.fd, offset, min(remaining, _SENDFILE_MAX))
        except BlockingIOError:
            with trio.move_on_after(_timeout(stall_timeout_s)) as scope:
                await trio.lowlevel.wait_writable(sock)
            if scope.cancelled_caught:
                raise SendStalled from None
            continue
        except OSError as exc:
            if exc.errno in _GONE:
                raise trio.BrokenResourceError(str(exc)) from exc
            raise
        if sent == 0:
            raise SliceTruncated(f"file ended {remaining} bytes before the slice {part!r}")
        offset += sent
        remaining -= sent
        # Let other connections run between steps: one step can move megabytes.
        await trio.lowlevel.checkpoint()


async def _send_chunked(stream: trio.abc.SendStream, part: FileSlice, pool: ResponseMemoryPool | None,
                        stall_timeout_s: float) -> None:
    done = 0
    while done < part.length:
        want = min(CHUNK, part.length - done)
        taken = await pool.reserve(want) if pool is not None else 0
        try:
            # A page-cache read of at most CHUNK bytes: short enough for the trio thread.
            data = part.read(done, want)
            if len(data) < want:
                raise SliceTruncated(f"file ended {part.length - done - len(data)} bytes before the slice {part!r}")
            await send_bytes(stream, data, stall_timeout_s)
            done += want
            del data
        finally:
            if pool is not None:
                pool.release(taken)


def _timeout(seconds: float) -> float:
    return seconds if seconds >= 0 and math.isfinite(seconds) else math.inf
