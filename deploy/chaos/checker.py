"""Compare what a mirror wrote at the target with what the source holds, partition by partition.

In the manner of Jepsen's Kafka checker, but for a copy rather than for consumers: each source
partition is a totally ordered log of unique records (the chaos producer numbers them, see
`deploy.chaos.payload`), and the same partition of the remote topic should hold the same records
in the same order. Pure: records in, a report out, no IO.

Terms, per partition. The *reference* is the source partition in offset order; a record is
known by the (run, partition, sequence number) its payload names. A target record *arrives*
when its payload names a record of the reference; its first arrival is its *occurrence*.

- **lost**: a record the source holds (or the producer saw acknowledged) that never arrived,
  although a record after it in the source did (Jepsen's lost write: a gap below the highest
  record read). A record acknowledged to the producer but absent from the source is lost too,
  whatever arrived.
- **tail**: a record the source holds that never arrived and that no later record overtook: the
  mirror had not caught up when the target was read. Lost after a bounded catch-up wait all the
  same, but it points at lag rather than at a skipped record.
- **duplicated**: every arrival of a record after its first (`A B C B` counts one). Consecutive
  duplicates that repeat consecutive source records form a *duplicate run*: what a restarted
  mirror writes again from its last checkpoint. Given the points where a replay may legally start
  (`replay_starts`: source offsets just after each checkpoint a crashed mirror resumed from), a
  run that starts anywhere else is *unexplained*.
- **reordered**: occurrences out of source order. Counted as the fewest records that must move to
  put the occurrences in source order: all but a longest increasing subsequence of their source
  positions (so one record arriving early counts one, and a block of five arriving before the
  records it should follow counts five). Keys play no part: order is the partition's order.
- **corrupted**: a target record whose payload cannot be read, whose digest does not match its
  bytes, or whose key, value, headers or timestamp differ from the source record it names. One
  whose payload still names a record of the reference also counts as that record's arrival (a
  flipped byte in a value is corrupted, not also lost).
- **unexpected**: an intact record at the target that the source partition never held (another
  run's, another partition's, or one the mirror did not take from this source).
- **source anomalies**: the source itself breaking the producer's contract (a record repeated,
  out of sequence order, damaged, or someone else's). The mirror is not to blame, but the run
  proves nothing about it either.

Every category keeps its first few examples.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from deploy.chaos.payload import read_payload

__all__ = ["CATEGORIES", "Example", "PartitionReport", "RecordLike", "Report", "check", "check_partition"]

CATEGORIES = ("lost", "tail", "duplicated", "reordered", "corrupted", "unexpected", "unexplained_duplicates",
              "source_anomalies")
# What a verdict refuses whatever the scenario: everything but (explained) duplicates.
FATAL = ("lost", "tail", "reordered", "corrupted", "unexpected", "unexplained_duplicates", "source_anomalies")


class RecordLike(Protocol):
    """A record as read back (broker.protocol.records.DecodedRecord fits)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


@dataclass(frozen=True, slots=True)
class Example:
    """One anomaly: `seq` is the producer's sequence number when known; offsets are -1 when the
    record is absent on that side."""

    kind: str
    partition: int
    seq: int | None
    source_offset: int = -1
    target_offset: int = -1
    detail: str = ""

    def __str__(self) -> str:
        where = []
        if self.source_offset >= 0:
            where.append(f"source offset {self.source_offset}")
        if self.target_offset >= 0:
            where.append(f"target offset {self.target_offset}")
        seq = "?" if self.seq is None else str(self.seq)
        text = f"{self.kind} p{self.partition} seq {seq}"
        if where:
            text += f" ({', '.join(where)})"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass
class PartitionReport:
    partition: int
    source_records: int = 0
    target_records: int = 0
    lost: int = 0
    tail: int = 0
    duplicated: int = 0
    duplicate_runs: int = 0
    unexplained_duplicates: int = 0
    reordered: int = 0
    corrupted: int = 0
    unexpected: int = 0
    source_anomalies: int = 0
    examples: dict[str, list[Example]] = field(default_factory=dict)
    max_examples: int = 5

    def note(self, kind: str, example: Example) -> None:
        kept = self.examples.setdefault(kind, [])
        if len(kept) < self.max_examples:
            kept.append(example)

    def count(self, category: str) -> int:
        value: int = getattr(self, category)
        return value

    @property
    def ok(self) -> bool:
        """Nothing fatal (duplicates are judged by the caller, who knows about crashes)."""
        return all(self.count(c) == 0 for c in FATAL)


@dataclass
class Report:
    partitions: dict[int, PartitionReport]

    def total(self, category: str) -> int:
        return sum(p.count(category) for p in self.partitions.values())

    @property
    def source_records(self) -> int:
        return self.total("source_records")

    @property
    def target_records(self) -> int:
        return self.total("target_records")

    @property
    def duplicate_runs(self) -> int:
        return self.total("duplicate_runs")

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.partitions.values())

    def examples(self, kind: str | None = None) -> list[Example]:
        return [e for p in sorted(self.partitions) for k, kept in sorted(self.partitions[p].examples.items())
                if kind is None or k == kind for e in kept]

    def summary(self, *, skip: Collection[str] = ()) -> str:
        """Counts per category, then the examples (but those of the `skip` categories): what a
        failing test or run prints."""
        counts = ", ".join(f"{c} {self.total(c)}" for c in CATEGORIES)
        lines = [f"{self.source_records} source records, {self.target_records} target records: {counts}; "
                 f"{self.duplicate_runs} duplicate runs"]
        lines += [f"  {e}" for e in self.examples() if e.kind not in skip]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Ref:
    index: int  # position in the source partition (first occurrence)
    offset: int
    fingerprint: tuple[object, ...]


def _fingerprint(r: RecordLike) -> tuple[object, ...]:
    return (r.key, r.value, tuple(r.headers), r.timestamp)


def _not_in_lis(values: Sequence[int]) -> list[int]:
    """Indexes (into `values`) of the elements outside one longest strictly increasing
    subsequence: the fewest elements whose removal leaves `values` sorted. O(n log n)."""
    tails: list[int] = []  # tails[k]: smallest last value of an increasing run of length k+1
    tail_at: list[int] = []  # the index in `values` of that value
    parent = [-1] * len(values)
    for i, v in enumerate(values):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[k] = v
            tail_at[k] = i
        parent[i] = tail_at[k - 1] if k > 0 else -1
    keep: set[int] = set()
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        keep.add(i)
        i = parent[i]
    return [i for i in range(len(values)) if i not in keep]


def check_partition(
    partition: int,
    source: Sequence[RecordLike],
    target: Sequence[RecordLike],
    *,
    acked: Iterable[int] = (),
    run: str | None = None,
    replay_starts: Collection[int] | None = None,
    max_examples: int = 5,
) -> PartitionReport:
    """Check one partition: `source` and `target` in offset order, `acked` the sequence numbers
    the producer saw acknowledged for it, `run` the producer's run name (None: any run),
    `replay_starts` the source offsets where a duplicate run may start (None: not judged).
    """
    report = PartitionReport(partition, len(source), len(target), max_examples=max_examples)

    def ours(run_name: str, part: int) -> bool:
        return (run is None or run_name == run) and part == partition

    # The reference: the source, first occurrence of each record.
    refs: dict[int, _Ref] = {}
    last_seq = -1
    for r in source:
        p = read_payload(r.key, r.value, r.headers, r.timestamp)
        if p is None or not p.intact or not ours(p.run, p.partition):
            report.source_anomalies += 1
            what = "unreadable" if p is None else ("damaged" if not p.intact else f"of run {p.run!r} partition "
                                                                                    f"{p.partition}")
            report.note("source_anomalies", Example("source_anomalies", partition, p.seq if p else None,
                                                    r.offset, detail=f"a source record {what}"))
            continue
        if p.seq in refs:
            report.source_anomalies += 1
            report.note("source_anomalies", Example("source_anomalies", partition, p.seq, r.offset,
                                                    detail=f"repeated at the source (first at offset "
                                                           f"{refs[p.seq].offset})"))
            continue
        if p.seq < last_seq:
            report.source_anomalies += 1
            report.note("source_anomalies", Example("source_anomalies", partition, p.seq, r.offset,
                                                    detail=f"after seq {last_seq} at the source"))
        last_seq = max(last_seq, p.seq)
        refs[p.seq] = _Ref(len(refs), r.offset, _fingerprint(r))
    by_index = sorted(refs.items(), key=lambda item: item[1].index)

    # The target, in its order.
    seen: dict[int, int] = {}  # seq -> target offset of its occurrence
    occurrences: list[tuple[int, int, int]] = []  # (source index, seq, target offset)
    run_start: tuple[int, int] | None = None  # (seq, target offset) starting the current duplicate run
    run_length = 0
    previous_dup_index: int | None = None

    def close_run() -> None:
        nonlocal run_start, run_length
        if run_start is not None:
            report.duplicate_runs += 1
            seq, target_offset = run_start
            start_offset = refs[seq].offset
            if replay_starts is not None and start_offset not in replay_starts:
                report.unexplained_duplicates += run_length
                report.note("unexplained_duplicates", Example(
                    "unexplained_duplicates", partition, seq, start_offset, target_offset,
                    f"a run of {run_length} repeated records starts here, not just after a checkpoint "
                    f"(allowed: {sorted(replay_starts)[:5]})"))
        run_start, run_length = None, 0

    for r in target:
        p = read_payload(r.key, r.value, r.headers, r.timestamp)
        ref = refs.get(p.seq) if p is not None and ours(p.run, p.partition) else None
        if p is None or ref is None:
            close_run()
            previous_dup_index = None
            if p is None or not p.intact:
                report.corrupted += 1
                report.note("corrupted", Example("corrupted", partition, p.seq if p else None, -1, r.offset,
                                                 "unreadable payload" if p is None else "digest mismatch"))
            else:
                report.unexpected += 1
                report.note("unexpected", Example("unexpected", partition, p.seq, -1, r.offset,
                                                  f"run {p.run!r} partition {p.partition}: never at this source "
                                                  "partition"))
            continue
        if not p.intact or _fingerprint(r) != ref.fingerprint:
            report.corrupted += 1
            report.note("corrupted", Example("corrupted", partition, p.seq, ref.offset, r.offset,
                                             "digest mismatch" if not p.intact else "differs from the source record"))
        if p.seq in seen:
            report.duplicated += 1
            if run_start is None or previous_dup_index is None or ref.index != previous_dup_index + 1:
                close_run()
                run_start = (p.seq, r.offset)
            run_length += 1
            previous_dup_index = ref.index
            report.note("duplicated", Example("duplicated", partition, p.seq, ref.offset, r.offset,
                                              f"first arrived at target offset {seen[p.seq]}"))
            continue
        close_run()
        previous_dup_index = None
        seen[p.seq] = r.offset
        occurrences.append((ref.index, p.seq, r.offset))
    close_run()

    # Order of first arrivals.
    moved = _not_in_lis([index for index, _, _ in occurrences])
    report.reordered = len(moved)
    for i in moved:
        index, seq, target_offset = occurrences[i]
        before = f"after seq {occurrences[i - 1][1]}" if i > 0 else "first"
        report.note("reordered", Example("reordered", partition, seq, by_index[index][1].offset, target_offset,
                                         f"arrived {before}, out of source order"))

    # What never arrived.
    highest = max((index for index, _, _ in occurrences), default=-1)
    for seq, ref in by_index:
        if seq in seen:
            continue
        if ref.index < highest:
            report.lost += 1
            report.note("lost", Example("lost", partition, seq, ref.offset,
                                        detail="never arrived, though later records did"))
        else:
            report.tail += 1
            report.note("tail", Example("tail", partition, seq, ref.offset, detail="not mirrored yet"))
    for seq in sorted(set(acked) - refs.keys()):
        report.lost += 1
        report.note("lost", Example("lost", partition, seq,
                                    detail="acknowledged to the producer, absent at the source"))
    return report


def check(
    source: Mapping[int, Sequence[RecordLike]],
    target: Mapping[int, Sequence[RecordLike]],
    *,
    acked: Mapping[int, Iterable[int]] | None = None,
    run: str | None = None,
    replay_starts: Mapping[int, Collection[int]] | None = None,
    max_examples: int = 5,
) -> Report:
    """Check every partition that either side (or the acknowledgements) names; a partition
    missing on one side reads as empty. See the module docstring for the categories."""
    partitions = sorted(set(source) | set(target) | set(acked or {}))
    return Report({
        p: check_partition(p, source.get(p, ()), target.get(p, ()), acked=(acked or {}).get(p, ()), run=run,
                           replay_starts=None if replay_starts is None else replay_starts.get(p, ()),
                           max_examples=max_examples)
        for p in partitions
    })
