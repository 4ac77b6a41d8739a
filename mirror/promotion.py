"""What a promotion reports and how long it waits on the source, in either mode: shared by
mirror/promote.py (link mode) and mirror/promote_mm2.py (mm2 mode)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.client import TopicPartition

__all__ = ["FAILOVER_SOURCE_S", "PartitionEnds", "PromotionError", "PromotionReport", "SOURCE_PROBE_S",
           "SOURCE_TIMEOUT_S", "Say", "quiet"]

#: The most a planned promotion waits for one answer of the source after the copy caught up
#: (its log ends again, the groups' offsets).
SOURCE_TIMEOUT_S = 10.0
#: The most a failover gives the source, for everything it asks of it (its log ends, the groups'
#: offsets), less when --timeout is shorter: the source is usually why one fails over, and a
#: dead or frozen one must not hold the failover up. The promotion does not wait for it at all.
FAILOVER_SOURCE_S = 2.0
#: How long a planned promotion gives the source to answer at first before refusing (fail over).
SOURCE_PROBE_S = 5.0


class PromotionError(Exception):
    """Nothing can be promoted as asked (no mirror topic selected, no source to wait for)."""


@dataclass(frozen=True)
class PartitionEnds:
    """One partition's log end (high watermark) at the target and at the source."""

    topic: str
    partition: int
    target_end: int | None  # None: the partition is not at the target yet
    source_end: int | None  # None: unknown (source not asked, not answering, no such partition)

    @property
    def behind(self) -> int | None:
        """Records the source holds beyond the target's end (None: unknown)."""
        if self.source_end is None:
            return None
        return max(0, self.source_end - (self.target_end or 0))

    @property
    def caught_up(self) -> bool:
        return self.behind == 0 and self.target_end is not None

    def __str__(self) -> str:
        target = "absent" if self.target_end is None else str(self.target_end)
        source = "unknown" if self.source_end is None else str(self.source_end)
        behind = "unknown" if self.behind is None else str(self.behind)
        return f"{self.topic}-{self.partition}: target end {target}, source end {source}, not copied {behind}"


@dataclass
class PromotionReport:
    target: str
    source: str | None
    failover: bool
    selected: dict[str, str]  # topic -> the mirror it belonged to
    promoted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # topic -> why it was not promoted
    partitions: list[PartitionEnds] = field(default_factory=list)  # at promotion (failover: after)
    source_error: str | None = None  # why the source's ends are unknown
    timed_out: bool = False
    already: list[str] = field(default_factory=list)  # normal topics already (promoted by an earlier run)
    #: Groups whose offsets were copied one last time (the offsets the target holds for them now).
    groups_synced: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    #: Groups with consumers live at the target: their offsets are theirs, left alone.
    groups_active: list[str] = field(default_factory=list)
    #: Groups that could not be copied at the end (the source did not answer), with the offsets
    #: the target holds for them: the last copy, from which they resume.
    groups_unsynced: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    groups_error: str | None = None  # why they could not be

    @property
    def ok(self) -> bool:
        return not self.failed and bool(self.promoted or self.already)


Say = Callable[[str], None]


def quiet(_line: str) -> None:
    """A `Say` that prints nothing."""
    pass
