"""Offset syncs: when to write one, and how a consumer group's offset is translated with them.

A sync says "upstream offset U was written downstream at D". MM2 writes one for the first record,
whenever the newest translation would be `offset.lag.max` or more behind, when the upstream skips
offsets (compaction, retention, transaction markers) and when the downstream goes backwards. The
mirror writes batches whole, so it applies the rule per batch (each batch's first offset is exact)
and, unlike MM2, also syncs the partition's last written offset when it goes idle, so a quiet
topic's consumers translate exactly instead of lagging by up to `offset.lag.max`.

Translation takes the newest sync at or below the group's offset: exactly D for U, D + 1 for any
later upstream offset. It can only be behind the true position (records re-read, never skipped).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["SyncEmitter", "SyncStore"]


@dataclass
class SyncEmitter:
    """One partition's emission rule (MM2's OffsetSyncWriter.PartitionState, per batch)."""

    max_offset_lag: int
    last_sync_downstream: int = -1
    previous_upstream: int = -1  # last upstream offset written
    previous_downstream: int = -1
    synced_through: int = -1  # upstream offset of the newest sync emitted

    def on_batch(self, upstream_base: int, downstream_base: int, last_delta: int) -> tuple[int, int] | None:
        """Record that a batch [upstream_base, +last_delta] landed at downstream_base; returns the
        (upstream, downstream) pair to emit, or None."""
        emit = (
            self.last_sync_downstream == -1
            or downstream_base - (self.last_sync_downstream + 1) >= self.max_offset_lag
            or upstream_base - self.previous_upstream != 1
            or downstream_base - self.previous_downstream != 1
        )
        self.previous_upstream = upstream_base + last_delta
        self.previous_downstream = downstream_base + last_delta
        if not emit:
            return None
        self.last_sync_downstream = downstream_base
        self.synced_through = upstream_base
        return upstream_base, downstream_base

    def on_idle(self) -> tuple[int, int] | None:
        """The partition is caught up: sync its last written record if no sync covers it."""
        if self.previous_upstream < 0 or self.synced_through == self.previous_upstream:
            return None
        self.last_sync_downstream = self.previous_downstream
        self.synced_through = self.previous_upstream
        return self.previous_upstream, self.previous_downstream


@dataclass
class _PartitionSyncs:
    upstream: list[int] = field(default_factory=list)
    downstream: list[int] = field(default_factory=list)


class SyncStore:
    """The syncs of every partition, in upstream order, for translation.

    Keeps at most `capacity` syncs per partition: the newest half exactly, and older ones thinned
    so that their spacing grows, as MM2's store does, so old group offsets still translate
    (less closely) instead of not at all.
    """

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 4:
            raise ValueError("capacity must be at least 4")
        self.capacity = capacity
        self._partitions: dict[tuple[str, int], _PartitionSyncs] = {}

    def add(self, topic: str, partition: int, upstream: int, downstream: int) -> None:
        syncs = self._partitions.setdefault((topic, partition), _PartitionSyncs())
        # A sync below an existing one means the upstream went back (topic re-created, mirror
        # restarted from an older position): later syncs no longer describe the same records.
        cut = bisect.bisect_left(syncs.upstream, upstream)
        del syncs.upstream[cut:], syncs.downstream[cut:]
        syncs.upstream.append(upstream)
        syncs.downstream.append(downstream)
        if len(syncs.upstream) > self.capacity:
            self._thin(syncs)

    def _thin(self, syncs: _PartitionSyncs) -> None:
        # Among the older half, drop the sync closest to its older neighbour: the gaps left grow
        # roughly geometrically with age.
        old = len(syncs.upstream) - self.capacity // 2
        best, best_gap = 1, None
        for i in range(1, old):
            gap = syncs.upstream[i] - syncs.upstream[i - 1]
            if best_gap is None or gap < best_gap:
                best, best_gap = i, gap
        del syncs.upstream[best], syncs.downstream[best]

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """The downstream offset to resume from for a group at `upstream_offset`, or None when
        no sync is at or below it (nothing safe to say)."""
        syncs = self._partitions.get((topic, partition))
        if syncs is None:
            return None
        i = bisect.bisect_right(syncs.upstream, upstream_offset) - 1
        if i < 0:
            return None
        step = 0 if syncs.upstream[i] == upstream_offset else 1
        return syncs.downstream[i] + step

    def latest(self, topic: str, partition: int) -> tuple[int, int] | None:
        """The newest (upstream, downstream) sync of the partition, if any."""
        syncs = self._partitions.get((topic, partition))
        if not syncs or not syncs.upstream:
            return None
        return syncs.upstream[-1], syncs.downstream[-1]

    def upstream_at_or_below(self, topic: str, partition: int, downstream_offset: int) -> int | None:
        """The upstream offset of the newest sync whose downstream offset is at or below
        `downstream_offset` (where to copy again from when the target ends there: what follows
        it may be repeated, nothing is skipped), or None."""
        syncs = self._partitions.get((topic, partition))
        if syncs is None:
            return None
        # Newest first, by scan: after the target went back, downstream offsets are not sorted.
        for upstream, downstream in zip(reversed(syncs.upstream), reversed(syncs.downstream), strict=True):
            if downstream <= downstream_offset:
                return upstream
        return None

    def count(self, topic: str, partition: int) -> int:
        syncs = self._partitions.get((topic, partition))
        return len(syncs.upstream) if syncs else 0
