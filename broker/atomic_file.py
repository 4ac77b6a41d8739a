"""Replace a small file atomically: a crash leaves the old content or the new, whole.

Temporary file beside it, fsync, rename over it, fsync of the directory (so the rename itself
survives a crash). Blocking for as long as the disk takes: from trio, call it in a worker thread
(``await trio.to_thread.run_sync(write_atomically, path, text)``).

It sits at the top of ``broker`` so every side may use it: storage checkpoints, the controller's
metadata, the server's group configs, and the mirror's and launcher's status and state files.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["fsync_path", "write_atomically"]


def write_atomically(path: Path, content: str | bytes, *, mode: int = 0o666) -> None:
    """Replace `path` with `content` (text is written as UTF-8). Raises OSError.

    `mode` (less the umask) is the new file's from its creation on: a secret (a private key, a
    password) written with 0o600 is never readable by others, not even for a moment.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    tmp = path.with_name(path.name + ".tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        # A temporary file left by a crash keeps its own mode (O_CREAT applies ours only to a
        # new file): take away whatever `mode` does not grant before a byte is written.
        os.fchmod(f.fileno(), stat.S_IMODE(os.fstat(f.fileno()).st_mode) & mode)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """Make a directory's entries (a file created, renamed into it) or a file's data survive a
    crash: opened read-only, nothing read, fsynced. Raises OSError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
