"""One process per log dir: Kafka's `.lock` file, flock'd for the broker's whole life.

Two brokers on one data dir both acknowledge writes at the same offsets and corrupt each other's
segments. The lock is taken before anything in the dir is read or recovered; the holder writes its
pid into the file after locking, so a second broker can name it. An flock belongs to the open
file, so the kernel releases it when the process dies, however it dies: a stale `.lock` file left
by a crash never blocks a restart.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from broker.config import StartupError

__all__ = ["LOCK_FILE", "LogDirLock", "LogDirLockedError"]

LOCK_FILE = ".lock"
_PID_BYTES = 32  # more than any pid needs; bounds what we read back from a file anyone may write


class LogDirLockedError(StartupError):
    """The log dir is locked by another live process."""


class LogDirLock:
    """An exclusive, non-blocking flock on `<dir>/.lock`, held until `release()`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Lock the dir or raise LogDirLockedError naming the dir and the holder's pid.

        Nothing is written before the lock is held: a refused broker leaves the dir as it was.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            who = f"pid {holder}" if holder else "another process (pid unknown)"
            raise LogDirLockedError(
                f"log dir {self.directory} is in use by {who}, which holds {self.path}: two brokers on one "
                "data dir would overwrite each other's records. Stop that process first, or give this "
                "broker another --data-dir (log.dirs)."
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (closing the file releases the flock). The file stays, as Kafka's does."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
