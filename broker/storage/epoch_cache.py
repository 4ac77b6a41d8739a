"""The leader epoch cache of a partition: which epoch started at which offset.

Persisted as Kafka's `leader-epoch-checkpoint` (version 0, count, `epoch startOffset` lines) and
used to answer OffsetForLeaderEpoch, so a returning replica knows where its log diverged.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from broker.storage.checkpoints import read_checkpoint, write_checkpoint

__all__ = ["LeaderEpochCache", "UNDEFINED_EPOCH", "UNDEFINED_OFFSET"]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = [(int(e), int(o)) for e, o in read_checkpoint(path, 2)]

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that `epoch` began at `start_offset`; older or equal epochs change nothing."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries.append((epoch, start_offset))
        self.flush()

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
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: older epochs collapse into one entry there."""
        before = [i for i, (_, o) in enumerate(self.entries) if o <= start_offset]
        if not before:
            return
        last = before[-1]
        updated = [(self.entries[last][0], start_offset), *self.entries[last + 1 :]]
        if updated != self.entries:
            self.entries = updated
            self.flush()

    def flush(self) -> None:
        write_checkpoint(self.path, self.entries)
