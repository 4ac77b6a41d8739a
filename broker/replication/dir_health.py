"""Write failures of log dirs: answered KAFKA_STORAGE_ERROR, logged once per dir and episode; in
ZooKeeper mode the dir goes offline and comes back once it takes writes again.

A full disk (ENOSPC, EDQUOT) or a failing one (EIO, EROFS...) makes every append to a partition
in that log dir fail until space returns. Each produce gets KAFKA_STORAGE_ERROR, as Kafka
answers, but the log says it once: "log dir X is full", then once more when appends to X work
again. Reads never come here: a full disk still serves every fetch.

A standalone broker is the only replica of its partitions: it keeps them, refuses appends while
the disk refuses them, and takes them again at the first append that works. A ZooKeeper-mode
broker has in-sync followers elsewhere that can take the writes, so it does what Kafka's
LogDirFailureChannel and ReplicaManager.handleLogDirFailure do: the first failed write hands the
dir to :meth:`DirHealth.take_offline_on_failure`'s handler (the replica manager), which stops every
replica in it and tells the controller (``/log_dir_event_notification``), which moves their
leadership to in-sync replicas. Kafka keeps the dir offline until the broker restarts; here the
replica manager probes it (:func:`probe_writable`: enough free space for the largest batch the
broker accepts, and a real write of that size, fsynced) and brings it back when a probe works,
telling the controller again, whose LeaderAndIsr then makes its replicas followers that catch up.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["DirHealth", "probe_writable", "PROBE_FILE"]

log = logging.getLogger(__name__)

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# Written and removed by each probe of an offline dir; a leftover from a crash mid-probe is
# overwritten by the next one (it is no partition's directory: LogManager skips plain files).
PROBE_FILE = ".causeway-write-probe"


class DirHealth:
    """Which log dirs are failing writes now, and which are offline; one per broker (ReplicaManager
    owns it)."""

    def __init__(self) -> None:
        self._failing: dict[Path, str] = {}
        self._offline: set[Path] = set()
        self._on_failure: Callable[[Path], None] | None = None

    def take_offline_on_failure(self, handler: Callable[[Path], None]) -> None:
        """From now on the first failed write of a dir marks it offline and calls ``handler(root)``
        (on the event loop, at once: it only queues the dir), Kafka's LogDirFailureChannel."""
        self._on_failure = handler

    def failed(self, root: Path, exc: OSError, what: str) -> KafkaError:
        """Record a write failure under `root`; returns the KafkaError to answer with."""
        reason = exc.strerror or str(exc)
        if root not in self._failing:
            self._failing[root] = reason
            if self._on_failure is not None:
                log.error("log dir %s failed a write (%s, while %s): it goes offline; its replicas here stop "
                          "leading and following, the controller moves their leadership to in-sync replicas, "
                          "and it comes back once it takes writes again", root, reason, what)
                self._offline.add(root)
                self._on_failure(root)
            elif exc.errno in _FULL:
                log.error("log dir %s is full (%s): appends to its partitions answer KAFKA_STORAGE_ERROR "
                          "until space is freed; reads continue", root, reason)
            else:
                log.error("log dir %s failed a write (%s, while %s): appends to its partitions answer "
                          "KAFKA_STORAGE_ERROR until writes succeed again; reads continue", root, reason, what)
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {root}: {reason}")

    def succeeded(self, root: Path) -> None:
        """A write under `root` worked: say so once if it was failing (an offline dir comes back
        only through :meth:`back_online`)."""
        if self._failing and root not in self._offline and self._failing.pop(root, None) is not None:
            log.info("log dir %s accepts writes again", root)

    def back_online(self, root: Path) -> None:
        """An offline dir passed its probe: it serves its replicas again."""
        self._offline.discard(root)
        self._failing.pop(root, None)
        log.info("log dir %s accepts writes again: it is online, and the controller is told", root)

    def is_offline(self, root: Path) -> bool:
        return root in self._offline

    def failing(self) -> dict[Path, str]:
        return dict(self._failing)


def probe_writable(root: Path, size: int) -> bool:
    """Whether ``root`` takes writes again: free space for ``size`` bytes (the largest batch the
    broker accepts) and a real write of that many bytes, fsynced, then removed. Blocking: call it
    in a worker thread. False (never raises) while the disk refuses it."""
    path = root / PROBE_FILE
    try:
        stat = os.statvfs(root)
        if stat.f_bavail * stat.f_frsize < size:
            return False
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            chunk = b"\0" * min(size, 1 << 16)
            written = 0
            while written < size:
                written += os.write(fd, chunk[:size - written])
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    except OSError:
        return False
    finally:
        try:
            path.unlink()
        except OSError:
            pass
