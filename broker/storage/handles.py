"""A bounded cache of open segment files, shared by every log of the process.

Kafka keeps one descriptor per segment open and asks operators for a huge RLIMIT_NOFILE. A
broker with tens of thousands of partitions then runs out of descriptors (EMFILE) while loading
and crash-loops on every restart. Here a segment's `.log` descriptor is opened when the segment
is used and kept in an LRU of bounded size; the least recently used one is closed when the cache
is full. Index files are never held open (their entries live in memory; they are opened only to
be written). A descriptor in use is pinned, so another thread's open can never close it, nor can
its number be reused under the user's feet.

The capacity follows RLIMIT_NOFILE (half the soft limit: the rest is for connections,
checkpoints and index writes); :func:`raise_open_file_limit` lifts the soft limit to the hard one
at broker start, as far as the operator allows.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["HANDLES", "FileHandleCache", "TooManyOpenFilesError", "open_file_limit", "raise_open_file_limit"]

log = logging.getLogger(__name__)

_MIN_CAPACITY = 4
_RESERVED = 64  # descriptors always left outside the cache (interpreter, event loop, sockets, checkpoints)


class TooManyOpenFilesError(OSError):
    """EMFILE even with the segment-file cache emptied: the message says which limit and what to do."""


def open_file_limit() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE of this process."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_open_file_limit() -> tuple[int, int]:
    """Lift the soft RLIMIT_NOFILE to the hard limit (what an unprivileged process may do);
    returns the (soft, hard) limits in force afterwards."""
    soft, hard = open_file_limit()
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # e.g. a hard limit above the kernel's nr_open
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return open_file_limit()


def emfile_advice() -> str:
    soft, hard = open_file_limit()
    return (f"too many open files: the limit (RLIMIT_NOFILE) is {soft} (hard limit {hard}). Raise it for "
            "the broker's user or service (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=), or "
            "hold fewer partitions or connections on this broker")


def capacity_for(soft_limit: int) -> int:
    """Half the limit, and never so much that nothing is left for sockets and small files."""
    return max(_MIN_CAPACITY, min(soft_limit // 2, soft_limit - _RESERVED))


class _Entry:
    __slots__ = ("closing", "fd", "pins")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.closing = False


class FileHandleCache:
    """LRU of open descriptors keyed by their owner (a segment). Thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._lock = threading.Lock()
        self._open: OrderedDict[object, _Entry] = OrderedDict()
        self.opened = 0  # descriptors opened over the cache's life (tests and diagnostics)

    def __len__(self) -> int:
        return len(self._open)

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            doomed = self._evict(self.capacity)
        _close_all(doomed)

    @contextmanager
    def use(self, owner: object, opener: Callable[[], int]) -> Iterator[int]:
        """The owner's descriptor (opened with `opener` if needed), pinned for the block."""
        fd = self._acquire(owner, opener)
        try:
            yield fd
        finally:
            self._release(owner)

    def close(self, owner: object) -> None:
        """Close the owner's descriptor (now, or when its last user releases it)."""
        with self._lock:
            entry = self._open.get(owner)
            if entry is None:
                return
            if entry.pins:
                entry.closing = True
                return
            del self._open[owner]
        _close(entry.fd)

    def _acquire(self, owner: object, opener: Callable[[], int]) -> int:
        with self._lock:
            found = self._pin_existing(owner)
            if found is not None:
                return found
            doomed = self._evict(self.capacity - 1)
        _close_all(doomed)
        # Opened outside the lock: a slow open (a busy disk) must not stall every other thread's
        # reads, the event loop's included.
        try:
            fd = opener()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            # Out of descriptors (connections may hold the rest): give back every idle one of
            # ours and try once more before saying which limit to raise.
            with self._lock:
                doomed = self._evict(0)
            _close_all(doomed)
            try:
                fd = opener()
            except OSError as again:
                if again.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                raise TooManyOpenFilesError(again.errno, emfile_advice()) from again
        with self._lock:
            found = self._pin_existing(owner)  # another thread opened it meanwhile: use that one
            if found is None:
                entry = _Entry(fd)
                entry.pins = 1
                self._open[owner] = entry
                self.opened += 1
                return fd
        _close(fd)
        return found

    def _pin_existing(self, owner: object) -> int | None:
        """Pin and return the owner's open descriptor, if there is one (lock held)."""
        entry = self._open.get(owner)
        if entry is None:
            return None
        if entry.closing:
            raise OSError(errno.EBADF, "the file was closed")
        self._open.move_to_end(owner)
        entry.pins += 1
        return entry.fd

    def _release(self, owner: object) -> None:
        doomed: int | None = None
        with self._lock:
            entry = self._open.get(owner)
            if entry is None:
                return
            entry.pins -= 1
            if entry.closing and entry.pins == 0:
                del self._open[owner]
                doomed = entry.fd
        if doomed is not None:
            _close(doomed)

    def _evict(self, keep: int) -> list[int]:
        """Take least recently used, unpinned descriptors out until at most `keep` remain (lock
        held); the caller closes them after releasing the lock."""
        doomed: list[int] = []
        if len(self._open) <= keep:
            return doomed
        for owner in list(self._open):
            if len(self._open) <= keep:
                break
            entry = self._open[owner]
            if entry.pins:
                continue
            del self._open[owner]
            doomed.append(entry.fd)
        return doomed


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        _close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


# The process's cache; the broker sets its capacity from RLIMIT_NOFILE at start.
HANDLES = FileHandleCache(capacity_for(open_file_limit()[0]))
