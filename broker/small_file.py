"""Read a small file whole, safely, when anyone may have put something else at its path.

State, status, topology and mirror files are small, and are read by commands (`causeway status`,
`causeway down`, `causeway topology check`) that must answer whatever sits at the path: a FIFO
would block a plain `open()` for ever (until a writer comes), a device or a file of hundreds of
megabytes would be read into memory whole. So the file is opened without blocking
(`O_NONBLOCK`: a FIFO opens at once for reading and is then refused; a regular file ignores the
flag), checked to be a regular file on the descriptor itself (no window between a check and the
open), and read up to one byte past its limit.

It sits at the top of ``broker`` beside atomic_file, its writing counterpart, so every side may
use it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["UnusableFile", "read_small_file"]

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


class UnusableFile(ValueError):
    """What sits at the path is not a small regular file; the message says what it is."""


def read_small_file(path: Path, max_bytes: int) -> bytes:
    """The whole content of the regular file `path`, which must hold at most `max_bytes`.

    Never blocks and never reads more than `max_bytes` + 1 bytes. Error handling: raises
    FileNotFoundError when there is no file, UnusableFile ("is a FIFO, not a regular file", "is
    larger than N bytes") when it is not one to read, and OSError for the rest (permissions).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnusableFile(f"is {_KINDS.get(stat.S_IFMT(mode), 'not a file')}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:  # a file that grows while it is read is still bounded
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise UnusableFile(f"is larger than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
