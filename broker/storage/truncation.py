"""What a follower's truncation cuts off its log is kept, never deleted: moved to quarantine.

A replica that becomes a follower truncates the tail of its log that the new leader does not
have (KIP-101/279: found by OffsetForLeaderEpoch). Those batches were never committed (the high
watermark never passed them), but they were written and perhaps read by an operator's tools, so
DESIGN's rule holds for them as for recovery's cuts: nothing is deleted silently. The bytes cut
from the segment that holds the new log end, and every whole segment after it, are moved to
`<log dir>/<topic>-<partition>.quarantine/<UTC time>/` with a `quarantine.txt` saying what they
hold, logged with their offsets and counted (``causeway_log_truncations``,
``causeway_log_truncated_records``).

Blocking (copies, renames, fsyncs): the replica manager runs truncations in a worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from broker.storage.quarantine import (
    Survey,
    copy_range,
    move_in,
    new_destination,
    segment_files,
    survey_file,
    write_manifest,
)

__all__ = ["Truncation", "keep_truncated"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Truncation:
    """One truncation of a partition log, and where its bytes went."""

    partition: str  # `<topic>-<partition>`
    offset: int  # the log now ends here
    previous_end: int  # it ended here before
    reason: str
    tail_segment: Path | None = None  # the segment cut in the middle (its tail was copied)
    tail_position: int = 0
    tail_bytes: int = 0
    whole_segments: list[Path] = field(default_factory=list)
    whole_bytes: int = 0
    survey: Survey = field(default_factory=Survey)
    destination: Path | None = None
    # A failback's cut (mirror/failback.py): records the high watermark had passed, acknowledged
    # at this cluster and never copied to the new primary; not a follower's uncommitted tail.
    failback: bool = False

    @property
    def bytes(self) -> int:
        return self.tail_bytes + self.whole_bytes

    def describe(self) -> str:
        s = self.survey
        return (f"{self.partition}: truncated the log from offset {self.previous_end} to {self.offset} "
                f"({self.reason}); {s.records} records in {s.batches} batches, offsets "
                f"{s.first_offset}..{s.last_offset}, {self.bytes} bytes ({self.tail_bytes} from "
                f"{self.tail_segment.name if self.tail_segment else 'no segment'} and "
                f"{len(self.whole_segments)} whole segment(s)) moved to {self.destination}")


def _write_manifest(cut: Truncation) -> None:
    assert cut.destination is not None
    s = cut.survey
    kind = ("failback (truncate-and-restore: this cluster's log diverges from the new primary's)" if cut.failback
            else "follower truncation (the leader's log diverges from this replica's; KIP-101/279)")
    head = [
        f"partition: {cut.partition}",
        f"kind: {kind}",
        f"truncated from offset {cut.previous_end} to {cut.offset}: {cut.reason}",
        f"batches moved: {s.batches}, records {s.records}, offsets {s.first_offset}..{s.last_offset}",
    ]
    tail = None
    if cut.tail_bytes and cut.tail_segment is not None:
        tail = (f"{cut.offset:020d}.log: bytes {cut.tail_position}.. of {cut.tail_segment.name} "
                f"({cut.tail_bytes} bytes)")
    note = [
        "These batches were never committed (the high watermark never passed them): the partition's",
        "leader does not have them. Inspect them with kafka-dump-log.sh --files <file>.log, then delete",
        "this directory. See docs/operations/storage.md, 'Recovery and quarantined data'.",
    ]
    if cut.failback:
        note = [
            "These records were acknowledged here but never reached the new primary before the failover:",
            "the failover's RPO, kept. Read them with kafka-dump-log.sh --files <file>.log --print-data-log,",
            "produce again what must not be lost, then delete this directory. See docs/operations/failback.md.",
        ]
    write_manifest(cut.destination, head, cut.bytes, tail, cut.whole_segments, note)


def keep_truncated(directory: Path, topic: str, partition: int, *, offset: int, previous_end: int, reason: str,
                   tail: tuple[Path, int, int, int] | None, whole: list[tuple[int, Path]],
                   failback: bool = False) -> Truncation:
    """Copy what a truncation is about to remove into a new quarantine directory, and count it.

    `tail` is (segment path, its pinned descriptor, cut position, size) of the segment that keeps
    its head; `whole` the (base offset, path) of segments that go entirely: their three files are
    moved by rename (the caller has retired them). The tail is copied (fsynced) before the caller
    cuts the file, so the bytes always exist somewhere, at worst twice.
    """
    cut = Truncation(f"{topic}-{partition}", offset, previous_end, reason, failback=failback)
    cut.destination = new_destination(directory)
    if tail is not None:
        path, fd, position, size = tail
        cut.tail_segment, cut.tail_position, cut.tail_bytes = path, position, size - position
        if cut.tail_bytes > 0:
            cut.survey.merge(survey_file(path, position, offset)[0])
            copy_range(fd, position, size, cut.destination / f"{offset:020d}.log")
    moves: list[Path] = []
    for base, log_file in whole:
        if log_file.exists():
            cut.whole_segments.append(log_file)
            cut.whole_bytes += log_file.stat().st_size
            cut.survey.merge(survey_file(log_file, 0, base)[0])
        moves += segment_files(log_file)
    _write_manifest(cut)
    move_in(cut.destination, moves, directory)
    _count(topic, partition, cut)
    log.warning("%s: %s", "failback truncation" if failback else "follower truncation", cut.describe())
    return cut


def _count(topic: str, partition: int, cut: Truncation) -> None:
    from broker import metrics  # the storage layer counts; the server decides whether to serve them

    labels = (topic, str(partition))
    metrics.LOG_TRUNCATIONS.labels(*labels).inc()
    metrics.TRUNCATED_RECORDS.labels(*labels).inc(cut.survey.records)
