"""The leader epoch cache of a partition: which epoch started at which offset.

Persisted as Kafka's `leader-epoch-checkpoint` (version 0, count, `epoch startOffset` lines) and
used to answer OffsetForLeaderEpoch, so a returning replica knows where its log diverged.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from broker.protocol.records import BatchHeader
from broker.storage.checkpoints import CheckpointError, read_pairs, write_checkpoint

log = logging.getLogger(__name__)

__all__ = ["EpochSnapshot", "LeaderEpochCache", "UNDEFINED_EPOCH", "UNDEFINED_OFFSET"]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochSnapshot:
    """The entries as they stood at one change, to be written by :meth:`LeaderEpochCache.write`."""

    version: int
    entries: tuple[tuple[int, int], ...]


class LeaderEpochCache:
    """Entries in memory, changed on the owner's thread, and the checkpoint file.

    With ``deferred`` writes (the broker's logs), a change only marks the cache dirty and the
    owner writes a :meth:`snapshot` from a worker thread (with the log's flush, before the
    recovery point moves past the change, and at each offset checkpoint): the checkpoint costs
    two fsyncs, which must not stall the event loop on every new leader epoch. What a crash
    leaves unwritten is rebuilt from the batches recovery scans (every batch carries its
    leader's epoch), as Kafka's segment recovery does. Without ``deferred`` (a log used on its
    own, in tools and tests) every change is written at once.
    """

    def __init__(self, path: Path, *, deferred: bool = False) -> None:
        self.path = path
        self.deferred = deferred
        self._version = 0  # bumped by every change
        self._written = 0  # the version on disk
        self._write_lock = threading.Lock()  # one writer of the file at a time (shared .tmp name)
        # True when the file was damaged: the owner rebuilds the entries from the batch headers
        # (every batch carries the epoch of the leader that wrote it), as Kafka's recovery does.
        self.needs_rebuild = False
        try:
            entries = read_pairs(path)
            if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(entries, entries[1:], strict=False)):
                raise CheckpointError(f"{path}: epochs or start offsets are not increasing")
        except CheckpointError as exc:
            log.warning("ignoring damaged leader epoch checkpoint %s (%s): rebuilding it from the batch "
                        "headers of the log", path, exc)
            entries = []
            self.needs_rebuild = True
        self.entries: list[tuple[int, int]] = entries

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that `epoch` began at `start_offset`; older or equal epochs change nothing."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries.append((epoch, start_offset))
        if self.deferred:
            self._changed()
            return
        try:
            self.flush()
        except OSError:
            self.entries.pop()  # not on disk: the append that needed it fails too, and retries
            raise

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers for `epoch`."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        epochs = [e for e, _ in self.entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher >= len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return epoch, self.entries[0][1]
        return self.entries[higher - 1][0], self.entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after `end_offset` (the log was cut there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: older epochs collapse into one entry there."""
        before = [i for i, (_, o) in enumerate(self.entries) if o <= start_offset]
        if not before:
            return
        last = before[-1]
        updated = [(self.entries[last][0], start_offset), *self.entries[last + 1 :]]
        if updated != self.entries:
            self.entries = updated
            self._changed()

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Entries from the leader epochs stamped on the log's batches (in log order): an entry
        wherever the epoch goes up. Written once at the end."""
        entries: list[tuple[int, int]] = []
        for header in headers:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, header.base_offset))
        self.entries = entries
        self.needs_rebuild = False
        self.flush()

    def _changed(self) -> None:
        self._version += 1
        if not self.deferred:
            self.flush()

    @property
    def dirty(self) -> bool:
        return self._version != self._written

    def snapshot(self) -> EpochSnapshot | None:
        """What to write, when something changed since the last write (owner's thread)."""
        if not self.dirty:
            return None
        return EpochSnapshot(self._version, tuple(self.entries))

    def write(self, snapshot: EpochSnapshot) -> None:
        """Write `snapshot` unless a newer one is on disk already (any thread; blocking)."""
        with self._write_lock:
            if snapshot.version <= self._written:
                return
            write_checkpoint(self.path, snapshot.entries)
            self._written = snapshot.version

    def flush(self) -> None:
        """Write the entries now (blocking)."""
        self._version += 1
        self.write(EpochSnapshot(self._version, tuple(self.entries)))
