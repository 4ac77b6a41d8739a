"""What a promotion reports and how long it waits on the source, in either mode: shared by
mirror/promote.py (link mode) and mirror/promote_mm2.py (mm2 mode)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from broker.client import TopicPartition
from broker.client.cluster import parse_bootstrap

__all__ = ["CONNECT_PROBE_S", "DEFERRED", "FAILOVER_SOURCE_S", "FIRST_ANSWER_S", "PartitionEnds", "PromotionError",
           "PromotionReport", "SOURCE_PROBE_S", "SOURCE_TIMEOUT_S", "Say", "quiet", "refused"]

#: The most a planned promotion waits for one answer of the source after the copy caught up
#: (its log ends again, the groups' offsets).
SOURCE_TIMEOUT_S = 10.0
#: The most a failover gives the source, for everything it asks of it (its log ends, the groups'
#: offsets), less when --timeout is shorter: the source is usually why one fails over, and a
#: dead or frozen one must not hold the failover up. The promotion does not wait for it at all.
FAILOVER_SOURCE_S = 2.0
#: The most a failover waits for a TCP connection to one of the source's bootstrap addresses:
#: every one refused (brokers killed, host gone) and the source is unreachable at once, instead
#: of the client's retries until its deadline.
CONNECT_PROBE_S = 1.0
#: How long a failover gives the source for its first answer (its log ends), the promotion going
#: on meanwhile: a few round trips of a long link. A source silent that long (frozen, cut off)
#: is left; one that answered gets the rest of FAILOVER_SOURCE_S for the groups' offsets.
FIRST_ANSWER_S = 1.0
#: What a failover says of what the source did not answer in time: it is not waited for.
DEFERRED = ("report deferred: the records not copied are counted when the source returns (`causeway mirror "
            "truncate-and-restore` cuts them into its quarantine)")
#: How long a planned promotion gives the source to answer at first before refusing (fail over).
SOURCE_PROBE_S = 5.0


async def refused(bootstrap: str, bound_s: float = CONNECT_PROBE_S) -> str | None:
    """Why the source cannot be reached when every bootstrap address refuses a TCP connection
    (or none connects within `bound_s`); None when one accepts (it may still not answer: a
    frozen process's kernel accepts for it)."""
    try:
        peers = parse_bootstrap(bootstrap)
    except ValueError as exc:
        return str(exc)
    errors: list[str] = []
    accepted = False

    async def attempt(host: str, port: int, done: trio.CancelScope) -> None:
        nonlocal accepted
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
            return
        await stream.aclose()
        accepted = True
        done.cancel()

    with trio.move_on_after(bound_s) as bound:
        async with trio.open_nursery() as nursery:
            for host, port in peers:
                nursery.start_soon(attempt, host, port, nursery.cancel_scope)
    if accepted:
        return None
    if bound.cancelled_caught and len(errors) < len(peers):
        return f"no connection within {bound_s:g} s"
    return "connection refused by every bootstrap address (" + "; ".join(errors) + ")"


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
