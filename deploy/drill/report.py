"""A drill's report: its timeline (each step, when it began and how long it took), RPO and RTO,
and the group's re-reads and skips; as a table for the terminal and as JSON."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from deploy.drill.verify import NO_OFFSET, Outcome
from deploy.drill.workload import TopicPartition

__all__ = ["Cut", "DrillReport", "FailbackOutcome", "Sample", "Step", "ThirdMove", "Timeline", "committed_text"]


@dataclass(frozen=True)
class Sample:
    """What the drill's clients had done at one moment (deploy/drill/chart.py samples and draws it)."""

    at_s: float  # from the drill's start
    acked_primary: int  # records acknowledged at the primary so far
    acked_dr: int  # ... at the DR site
    read: int  # records the group read so far, at both sites
    lag: int | None  # records acknowledged at the primary the DR site's logs lack (None: not measured)


@dataclass
class Step:
    name: str
    start_s: float  # from the drill's start
    duration_s: float | None = None  # None: under way (or interrupted)
    detail: str = ""


@dataclass
class Timeline:
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)

    def begin(self, name: str) -> Step:
        step = Step(name, time.monotonic() - self.started)
        self.steps.append(step)
        return step

    def end(self, step: Step, detail: str = "") -> None:
        step.duration_s = time.monotonic() - self.started - step.start_s
        step.detail = detail or step.detail

    def since_start(self, moment: float) -> float:
        return moment - self.started

    def under_way(self) -> str:
        """The step begun and not ended (where a failed drill stopped), else "the drill"."""
        return next((s.name for s in reversed(self.steps) if s.duration_s is None), "the drill")


@dataclass
class Cut:
    """One partition's tail that truncate-and-restore cut at the old primary, and where it is kept."""

    topic: str
    partition: int
    records: int
    first_offset: int
    last_offset: int
    quarantine: str
    acknowledged: int  # of those, records the drill's producers had acknowledged at the primary


@dataclass
class ThirdMove:
    """After the way back, the DR site once more (deploy/drill/failback.py run_third_move):
    reverse-and-start there, the forward mirror copying, a planned switch-over."""

    mirror: str  # the forward mirror, whose mirror topics the DR site's are again
    rto_produce_s: float | None = None  # from the producers stopping at home to the first produce at the DR site
    rto_consume_s: float | None = None  # ... to the group's first read there
    reread: int = 0  # records the group read at the DR site that it had read before (anywhere)
    skipped: int = 0  # records produced at home or at the DR site in this move that the group never read
    batches_compared: int = 0
    differing: list[str] = field(default_factory=list)
    # The group's committed offsets at home once it stopped there, and at the DR site right after
    # the promotion (which carried them): equal when it moved without re-read or skip.
    committed_home: dict[TopicPartition, int] = field(default_factory=dict)
    committed_dr: dict[TopicPartition, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"mirror": self.mirror,
                "rto": {"first_produce_s": _round(self.rto_produce_s), "first_consume_s": _round(self.rto_consume_s)},
                "group": {"reread": self.reread, "skipped": self.skipped},
                "logs": {"batches": self.batches_compared, "identical": not self.differing,
                         "differing": self.differing}}

    def lines(self) -> list[str]:
        same = "identical" if not self.differing else "DIFFERENT: " + "; ".join(self.differing)
        return [f"AGAIN      reverse-and-start at the DR site, mirror {self.mirror}, planned switch-over",
                f"RTO again  first produce at the DR site {_seconds(self.rto_produce_s)}, first consume "
                f"{_seconds(self.rto_consume_s)} (from the producers stopping at home)",
                f"group again re-read {self.reread}, skipped {self.skipped}",
                f"logs again {self.batches_compared} batch(es) at both sites: {same}"]


@dataclass
class FailbackOutcome:
    """`drill failback`'s way back: the restore, the switch back, and the state it left."""

    command: str  # truncate-and-restore or reverse-and-start
    reverse_mirror: str
    cuts: list[Cut] = field(default_factory=list)
    # The failover's RPO, record by record, is what the quarantine holds of the acknowledged ones.
    rpo_matches_quarantine: bool | None = None
    rto_produce_s: float | None = None  # from the producers stopping at the DR site to the first produce back home
    rto_consume_s: float | None = None  # ... to the group's first read back home
    reread: int = 0  # records the group read back home that it had read before (at either site)
    skipped: int = 0  # records produced at the DR site or back home that the group never read
    partitions_compared: int = 0
    batches_compared: int = 0
    differing: list[str] = field(default_factory=list)  # partitions whose logs differ, with where
    third: ThirdMove | None = None  # the DR site once more, when asked for

    @property
    def quarantined(self) -> int:
        return sum(cut.records for cut in self.cuts)

    @property
    def quarantined_acknowledged(self) -> int:
        return sum(cut.acknowledged for cut in self.cuts)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command, "reverse_mirror": self.reverse_mirror,
            "quarantine": {"records": self.quarantined, "acknowledged": self.quarantined_acknowledged,
                           "matches_rpo": self.rpo_matches_quarantine,
                           "partitions": [asdict(cut) for cut in self.cuts]},
            "rto": {"first_produce_s": _round(self.rto_produce_s), "first_consume_s": _round(self.rto_consume_s)},
            "group": {"reread": self.reread, "skipped": self.skipped},
            "logs": {"partitions": self.partitions_compared, "batches": self.batches_compared,
                     "identical": not self.differing, "differing": self.differing},
            "third_move": None if self.third is None else self.third.to_json(),
        }

    def lines(self, rpo: int | None) -> list[str]:
        lines = [f"FAILBACK   {self.command}, reverse mirror {self.reverse_mirror}"]
        if self.command == "truncate-and-restore":
            check = {True: "= the RPO, offset for offset", False: f"!= the RPO ({rpo})", None: "not checked"}
            lines.append(f"quarantine {self.quarantined} record(s) cut at the old primary, "
                         f"{self.quarantined_acknowledged} of them acknowledged {check[self.rpo_matches_quarantine]}")
            for cut in self.cuts:
                lines.append(f"           {cut.topic}-{cut.partition}: {cut.records} at offsets "
                             f"{cut.first_offset}-{cut.last_offset} in {cut.quarantine}")
        lines.append(f"RTO back   first produce at the old primary {_seconds(self.rto_produce_s)}, first consume "
                     f"{_seconds(self.rto_consume_s)} (from the producers stopping at the DR site)")
        lines.append(f"group back re-read {self.reread}, skipped {self.skipped}")
        same = "identical" if not self.differing else "DIFFERENT: " + "; ".join(self.differing)
        lines.append(f"logs       {self.partitions_compared} partition(s), {self.batches_compared} batch(es) at both "
                     f"sites: {same}")
        if self.third is not None:
            lines += self.third.lines()
        return lines


@dataclass
class DrillReport:
    kind: str  # switchover or failover
    disaster: str | None  # kill, partition, planned, or None (a switchover: planned too)
    mirror: str
    topics: list[str]
    rate: float
    timeline: Timeline
    run: str = ""  # the drill's name: its records are "<run>:<site>:<sequence>", its group "causeway-<run>"
    outcome: Outcome | None = None
    rto_produce_s: float | None = None  # from the disaster to the first record acknowledged at the DR site
    rto_consume_s: float | None = None  # ... to the first record the group read there
    limits_exceeded: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)  # every SAMPLE_EVERY_S, for the chart
    mode: str = "link"  # the mirror's: link (offsets kept) or mm2 (offsets translated)
    failback: FailbackOutcome | None = None  # `drill failback`: the way back
    # Not reported: what `drill failback` goes on from (deploy/drill/failback.py).
    acked_primary: dict[TopicPartition, dict[int, str]] = field(default_factory=dict, repr=False)
    read_names: list[str] = field(default_factory=list, repr=False)
    read_at_dr: dict[TopicPartition, dict[int, str]] = field(default_factory=dict, repr=False)  # by offset

    def to_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "run": self.run, "kind": self.kind, "disaster": self.disaster, "mirror": self.mirror, "mode": self.mode,
            "topics": self.topics,
            "rate": self.rate,
            "rpo": None if outcome is None else {
                "records": outcome.rpo, "acknowledged": outcome.acknowledged, "reached_dr": outcome.reached,
                "duplicates": outcome.duplicates,
                "partitions": [{"topic": lost.topic, "partition": lost.partition, "records": lost.count,
                                "offsets": [list(r) for r in lost.ranges]} for lost in outcome.lost]},
            "rto": {"first_produce_s": _round(self.rto_produce_s), "first_consume_s": _round(self.rto_consume_s)},
            "group": None if outcome is None else {
                "reread": outcome.reread, "skipped": outcome.skipped,
                # The re-reads' baseline, one OffsetFetch at the DR site right after the promotion,
                # and what it accounts for.
                "committed_at_promotion": [
                    {"topic": t, "partition": p, "committed_offset": outcome.committed.get((t, p), NO_OFFSET),
                     "log_end_offset": outcome.log_end.get((t, p))}
                    for t, p in sorted({*outcome.committed, *outcome.log_end})],
                "reread_expected": outcome.reread_expected,
                "reread_below_committed": outcome.reread_below_committed},
            "timeline": [{**asdict(step), "start_s": _round(step.start_s), "duration_s": _round(step.duration_s)}
                         for step in self.timeline.steps],
            "limits_exceeded": self.limits_exceeded,
            "samples": [{**asdict(s), "at_s": _round(s.at_s)} for s in self.samples],
            "failback": None if self.failback is None else self.failback.to_json(),
        }

    def table(self) -> str:
        title = f"drill {self.kind}" + (f" (disaster: {self.disaster})" if self.disaster else "")
        lines = [f"{title}, mirror {self.mirror} ({self.mode}), {self.rate:g} records/s over {', '.join(self.topics)}",
                 ""]
        lines += _timeline_lines(self.timeline.steps)
        lines.append("")
        outcome = self.outcome
        if outcome is not None:
            lines.append(f"RPO        {outcome.rpo} record(s) acknowledged at the primary never reached the DR site "
                         f"({outcome.reached} of {outcome.acknowledged} did; {outcome.duplicates} duplicate(s))")
            for lost in outcome.lost:
                ranges = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in lost.ranges)
                lines.append(f"           {lost.topic}-{lost.partition}: {lost.count} at offsets {ranges}")
        lines.append(f"RTO        first produce at the DR site {_seconds(self.rto_produce_s)}, "
                     f"first consume {_seconds(self.rto_consume_s)} (from the "
                     f"{'producers stopping' if self.disaster in (None, 'planned') else 'disaster'})")
        if outcome is not None:
            lines.append(f"group      re-read {outcome.reread}, skipped {outcome.skipped}"
                         + (" (mm2: from the offsets the mirror translated for it)" if self.mode == "mm2" else ""))
            lines += _baseline_lines(outcome)
        if self.failback is not None:
            lines += self.failback.lines(None if outcome is None else outcome.rpo)
        for limit in self.limits_exceeded:
            lines.append(f"EXCEEDED   {limit}")
        return "\n".join(lines)


def committed_text(committed: dict[TopicPartition, int], log_end: dict[TopicPartition, int]) -> str:
    """`orders-0 300/308, orders-1 none/5`: each partition's committed offset (none: the group has
    none) of its log end offset."""
    def one(tp: TopicPartition) -> str:
        offset = committed.get(tp, NO_OFFSET)
        return f"{tp[0]}-{tp[1]} {'none' if offset == NO_OFFSET else offset}/{log_end.get(tp, '?')}"
    return ", ".join(one(tp) for tp in sorted({*committed, *log_end}))


def _baseline_lines(outcome: Outcome) -> list[str]:
    """The group's committed offsets the DR site held at the promotion, and the re-reads they
    account for (the records the group read at the primary past them) beside those measured."""
    if not outcome.committed and not outcome.log_end:
        return []
    return [f"           committed at the DR site at the promotion, of the log end: "
            f"{committed_text(outcome.committed, outcome.log_end)}",
            f"           re-reads they account for {outcome.reread_expected} (read at the primary past them); "
            f"re-read below them {outcome.reread_below_committed}"]


def _timeline_lines(steps: list[Step]) -> list[str]:
    width = max((len(step.name) for step in steps), default=4)
    lines = [f"{'at':>8}  {'step':<{width}}  {'took':>8}  detail"]
    for step in steps:
        took = "-" if step.duration_s is None else f"{step.duration_s:.2f}s"
        lines.append(f"{step.start_s:>7.2f}s  {step.name:<{width}}  {took:>8}  {step.detail}".rstrip())
    return lines


def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.2f}s"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
