"""Write failures of log dirs: answered KAFKA_STORAGE_ERROR, logged once per dir and episode.

A full disk (ENOSPC, EDQUOT) or a failing one (EIO, EROFS...) makes every append to a partition
in that log dir fail until space returns. Each produce gets KAFKA_STORAGE_ERROR, as Kafka
answers, but the log says it once: "log dir X is full", then once more when appends to X work
again. Reads never come here: a full disk still serves every fetch.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["DirHealth"]

log = logging.getLogger(__name__)

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class DirHealth:
    """Which log dirs are failing writes now; one per broker (ReplicaManager owns it)."""

    def __init__(self) -> None:
        self._failing: dict[Path, str] = {}

    def failed(self, root: Path, exc: OSError, what: str) -> KafkaError:
        """Record a write failure under `root`; returns the KafkaError to answer with."""
        reason = exc.strerror or str(exc)
        if root not in self._failing:
            self._failing[root] = reason
            if exc.errno in _FULL:
                log.error("log dir %s is full (%s): appends to its partitions answer KAFKA_STORAGE_ERROR "
                          "until space is freed; reads continue", root, reason)
            else:
                log.error("log dir %s failed a write (%s, while %s): appends to its partitions answer "
                          "KAFKA_STORAGE_ERROR until writes succeed again; reads continue", root, reason, what)
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {root}: {reason}")

    def succeeded(self, root: Path) -> None:
        """A write under `root` worked: say so once if it was failing."""
        if self._failing and self._failing.pop(root, None) is not None:
            log.info("log dir %s accepts writes again", root)

    def failing(self) -> dict[Path, str]:
        return dict(self._failing)
