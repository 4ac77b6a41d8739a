"""A run of bytes in a segment file, held on its own descriptor until it has been sent.

A fetch answer names where its batches lie rather than reading them into memory; the server
sends them from the file (``sendfile`` on plaintext listeners, small chunked reads otherwise).
Between the read and the send, retention may delete the segment or the cleaner replace it:
the slice holds the segment's descriptor pinned in the process's file-handle cache
(``broker.storage.handles``) until it is closed, so it still reads the file it was cut from (a
deleted file stays readable while open), and the descriptor is neither evicted nor reused
meanwhile. Slices of one segment share its one descriptor.

Pinned descriptors cannot be evicted, so slices draw on a broker-wide budget of them
(``FileHandleCache.pin_slice``): whoever cuts a slice must close it on every path (sent, send
failed, peer gone, cancelled), or the budget shrinks for every other fetch.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["FileSlice"]


class FileSlice:
    """``length`` bytes from ``position`` of the file open as ``fd``; :meth:`close` calls
    ``release`` once (it unpins the descriptor; None closes ``fd`` itself)."""

    __slots__ = ("_release", "fd", "length", "position")

    def __init__(self, fd: int, position: int, length: int, release: Callable[[], None] | None = None) -> None:
        self.fd = fd
        self.position = position
        self.length = length
        self._release = release

    def __len__(self) -> int:
        return self.length

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``offset`` within the slice (fewer if the file was cut)."""
        size = max(0, min(size, self.length - offset))
        return os.pread(self.fd, size, self.position + offset)

    def close(self) -> None:
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        if self._release is not None:
            self._release()
        else:
            os.close(fd)

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.fd}, position={self.position}, length={self.length})"
