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

Pins normally last one read or one append. A fetch answer's file slices (``file_slice.py``) pin
their segment's descriptor until the answer has been sent, so one fetch of N partitions would pin
N descriptors, and the cache cannot evict a pinned one: a fetch of 256 partitions under
RLIMIT_NOFILE=256 once took every descriptor the process had. Slices therefore draw on a budget
(:attr:`FileHandleCache.slice_budget`, half the capacity: the other half stays free for appends,
reads and the files of the rest of the broker). The budget counts *descriptors* pinned by slices,
so any number of fetches answering the same partition cost one. :meth:`FileHandleCache.pin_slice`
never blocks: it says None when the budget is spent, and the fetch answers that partition without
records this time. A caller may go over the budget (``over_budget``) for the one slice that keeps
a fetch answer from being empty; each connection has at most one answer in flight, so that is at
most one descriptor per connection with a fetch in flight.
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

__all__ = [
    "HANDLES",
    "OUT_OF_FILES",
    "FileHandleCache",
    "TooManyOpenFilesError",
    "open_file_limit",
    "raise_open_file_limit",
    "slice_budget_for",
]

log = logging.getLogger(__name__)

# The errors of an open (or accept) when the process (EMFILE) or the system (ENFILE) has no
# descriptor left.
OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE})

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


def slice_budget_for(capacity: int) -> int:
    """Descriptors that file slices may keep pinned: half the cache, at least one."""
    return max(1, capacity // 2)


class _Entry:
    __slots__ = ("closing", "fd", "pins", "slices")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0  # every pin, slices' included
        self.slices = 0  # pins held by file slices
        self.closing = False


class FileHandleCache:
    """LRU of open descriptors keyed by their owner (a segment). Thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._lock = threading.Lock()
        self._open: OrderedDict[object, _Entry] = OrderedDict()
        self.opened = 0  # descriptors opened over the cache's life (tests and diagnostics)
        self._sliced = 0  # descriptors pinned by at least one file slice (or reserved for one)
        self.slice_refusals = 0  # pin_slice calls answered None: the budget was spent

    def __len__(self) -> int:
        return len(self._open)

    @property
    def slice_budget(self) -> int:
        return slice_budget_for(self.capacity)

    @property
    def sliced(self) -> int:
        """Descriptors pinned by file slices now."""
        return self._sliced

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            doomed = self._evict(self.capacity)
        _close_all(doomed)

    def shed_idle(self) -> int:
        """Close every descriptor no one is using (when the process is out of descriptors and
        something else needs one, e.g. accepting a connection); returns how many were closed."""
        with self._lock:
            doomed = self._evict(0)
        _close_all(doomed)
        return len(doomed)

    def pin_slice(self, owner: object, opener: Callable[[], int], *, over_budget: bool = False) -> int | None:
        """The owner's descriptor, pinned for a file slice until :meth:`unpin_slice`; None when
        slices already pin ``slice_budget`` descriptors (of other owners) and not ``over_budget``.

        Never blocks on the budget. Raises OSError when the file cannot be opened (EBADF when it
        is being closed: its segment was deleted or replaced).
        """
        with self._lock:
            entry = self._open.get(owner)
            if entry is not None and entry.slices:  # already counted: another slice costs nothing
                if entry.closing:
                    raise OSError(errno.EBADF, "the file was closed")
                self._open.move_to_end(owner)
                entry.pins += 1
                entry.slices += 1
                return entry.fd
            if self._sliced >= self.slice_budget and not over_budget:
                self.slice_refusals += 1
                return None
            self._sliced += 1  # reserved before the lock is let go: the open happens outside it
        try:
            fd = self._acquire(owner, opener)
        except BaseException:
            with self._lock:
                self._sliced -= 1
            raise
        with self._lock:
            entry = self._open[owner]  # present: pinned by the acquire
            entry.slices += 1
            if entry.slices > 1:
                self._sliced -= 1  # another thread counted this descriptor meanwhile
        return fd

    def unpin_slice(self, owner: object) -> None:
        """Undo one :meth:`pin_slice`."""
        with self._lock:
            entry = self._open.get(owner)
            if entry is not None and entry.slices:
                entry.slices -= 1
                if entry.slices == 0:
                    self._sliced -= 1
        self._release(owner)

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
            if exc.errno not in OUT_OF_FILES:
                raise
            # Out of descriptors (connections may hold the rest): give back every idle one of
            # ours and try once more before saying which limit to raise.
            with self._lock:
                doomed = self._evict(0)
            _close_all(doomed)
            try:
                fd = opener()
            except OSError as again:
                if again.errno not in OUT_OF_FILES:
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
        doomed: list[int] = []
        with self._lock:
            entry = self._open.get(owner)
            if entry is None:
                return
            entry.pins -= 1
            if entry.closing and entry.pins == 0:
                del self._open[owner]
                doomed.append(entry.fd)
            elif len(self._open) > self.capacity:
                # Pins let the cache grow past its capacity (a pinned descriptor cannot be
                # evicted); give the surplus back as soon as it is idle, not at the next open,
                # which may never come while the process is out of descriptors.
                doomed = self._evict(self.capacity)
        _close_all(doomed)

    def _evict(self, keep: int) -> list[int]:
        """Take least recently used, unpinned descriptors out until at most `keep` remain (lock
        held); the caller closes them after releasing the lock."""
        excess = len(self._open) - keep
        if excess <= 0:
            return []
        victims: list[object] = []
        for owner, entry in self._open.items():  # oldest first; stops as soon as enough are found
            if not entry.pins:
                victims.append(owner)
                if len(victims) == excess:
                    break
        return [self._open.pop(owner).fd for owner in victims]


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
