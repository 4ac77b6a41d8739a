"""What recovery cuts off a log is kept, never deleted: the partition's quarantine directory.

When recovery finds a bad batch it cuts the log there (a log cannot have a hole). The bytes cut
from the damaged segment, and every later segment that the cut leaves behind a gap, are moved to
`<log dir>/<topic>-<partition>.quarantine/<UTC time>/`, with a `quarantine.txt` that says what
each file holds. The name is no partition directory (`parse_partition_dir` refuses it) and sits
beside the partition, on the same file system, so whole segments move by rename.

Two cases are told apart, because they mean different things to an operator:
- a torn tail: the damage is the end of the log (a partial last batch, trailing junk), what a
  crash in the middle of a write leaves; nothing after it was ever whole;
- mid-log corruption: whole batches with good CRCs follow the bad one, so acknowledged records
  are now missing from the log; that is an error, and the quarantine holds them.

Runs on the thread that opens the log (a worker thread at broker start).
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker.atomic_file import fsync_path
from broker.protocol.errors import KafkaError
from broker.protocol.records import BATCH_HEADER_SIZE, BatchHeader, batch_crc_ok, read_batch_header

__all__ = ["QUARANTINE_SUFFIX", "Cut", "Survey", "count_missing", "quarantine_root", "survey_file"]

QUARANTINE_SUFFIX = ".quarantine"
MANIFEST = "quarantine.txt"
_COPY_CHUNK = 1 << 20
_MAGIC_AT = 16  # position of the magic byte in a batch header
# A batch found by scanning past damage must start within this many offsets of where the log was
# cut: random bytes that happen to look like a header almost never also carry such an offset.
_RESYNC_OFFSET_WINDOW = 1 << 31


def quarantine_root(partition_dir: Path) -> Path:
    return partition_dir.with_name(partition_dir.name + QUARANTINE_SUFFIX)


@dataclass(slots=True)
class Survey:
    """Whole batches (CRC checked) found in a region of a segment file."""

    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None

    def add(self, header: BatchHeader) -> None:
        self.batches += 1
        self.records += header.records_count
        if self.first_offset is None:
            self.first_offset = header.base_offset
        self.last_offset = header.last_offset

    def merge(self, other: Survey) -> None:
        self.batches += other.batches
        self.records += other.records
        if self.first_offset is None:
            self.first_offset = other.first_offset
        if other.last_offset is not None:
            self.last_offset = other.last_offset


@dataclass(slots=True)
class Damage:
    """What can be said about the bad batch where the log was cut."""

    claimed_first: int | None = None
    claimed_records: int = 0
    size: int = 0  # bytes of the bad region before the next whole batch (or the end)


def _header_at(mm: memoryview, pos: int, end: int, *, fit: bool = True) -> BatchHeader | None:
    """The header at `pos` if it parses (and, with `fit`, its batch ends within the file)."""
    if end - pos < BATCH_HEADER_SIZE:
        return None
    try:
        header = read_batch_header(mm, pos)
    except KafkaError:
        return None
    if fit and pos + header.size > end:
        return None
    return header


def _whole(mm: memoryview, pos: int, end: int, min_offset: int) -> BatchHeader | None:
    header = _header_at(mm, pos, end)
    if header is None or header.base_offset < min_offset or header.records_count <= 0:
        return None
    if header.base_offset - min_offset >= _RESYNC_OFFSET_WINDOW or not batch_crc_ok(mm, pos, header):
        return None
    return header


def survey_file(path: Path, start: int, min_offset: int, *, offset_damage: bool = False) -> tuple[Survey, Damage]:
    """The whole batches from `start` on, skipping damage: the first bad batch is stepped over by
    its own length when that is readable, else by scanning for the next batch with a good CRC.

    With `offset_damage` the batch at `start` is whole but claims the wrong offsets (recovery
    found them out of order; the base offset lies outside the CRC): it is the damaged batch, and
    what follows it is surveyed from `min_offset` on."""
    survey, damage = Survey(), Damage()
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size
        if end <= start:
            return survey, damage
        with mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as mm:
            pos = start
            bad_at: int | None = None
            claimed = _header_at(mm, pos, end) if offset_damage else None
            if claimed is not None:
                damage.claimed_first, damage.claimed_records = claimed.base_offset, max(0, claimed.records_count)
                damage.size = claimed.size
                bad_at, pos = start, start + claimed.size
            while pos < end:
                header = _whole(mm, pos, end, min_offset)
                if header is not None:
                    if bad_at is not None and damage.size == 0:
                        damage.size = pos - bad_at
                    survey.add(header)
                    min_offset = header.last_offset + 1
                    pos += header.size
                    continue
                if bad_at is None:
                    bad_at = pos
                    claimed = _header_at(mm, pos, end, fit=False)
                    if claimed is not None and claimed.base_offset >= min_offset:
                        damage.claimed_first = claimed.base_offset
                        damage.claimed_records = max(0, claimed.records_count)
                        after = pos + claimed.size  # its length looks right: try right after it
                        if after == end or (after < end and _whole(mm, after, end, min_offset) is not None):
                            pos = after
                            continue
                # Scan for the next magic byte that starts a whole batch.
                found = mapped.find(b"\x02", pos + 1 + _MAGIC_AT)
                pos = end if found < 0 else found - _MAGIC_AT
            if bad_at is not None and damage.size == 0:
                damage.size = end - bad_at
    return survey, damage


@dataclass(slots=True)
class Cut:
    """One recovery cut of a partition log, and where its bytes went."""

    partition: str  # `<topic>-<partition>`
    cut_offset: int  # the log now ends here
    segment: Path  # the damaged segment
    position: int  # where it was cut
    reason: str
    mid_log: bool = False
    tail_bytes: int = 0
    later_segments: list[Path] = field(default_factory=list)
    later_bytes: int = 0
    survey: Survey = field(default_factory=Survey)  # whole batches moved (tail and later segments)
    damage: Damage = field(default_factory=Damage)
    destination: Path | None = None

    @property
    def bytes(self) -> int:
        return self.tail_bytes + self.later_bytes

    @property
    def records(self) -> int:
        """Records moved: whole batches' counts, plus what the damaged batch claims to hold."""
        return self.survey.records + self.damage.claimed_records

    @property
    def files(self) -> int:
        """Segment files put in quarantine (the cut tail of the damaged segment counts as one)."""
        return (1 if self.tail_bytes else 0) + len(self.later_segments)

    def describe(self) -> str:
        s = self.survey
        parts = [f"{self.partition}: recovery cut the log at offset {self.cut_offset} "
                 f"({self.segment.name}, byte {self.position}: {self.reason})"]
        if self.damage.claimed_first is not None:
            parts.append(f"the damaged batch claims offsets {self.damage.claimed_first}.."
                         f"{self.damage.claimed_first + max(self.damage.claimed_records, 1) - 1} "
                         f"({self.damage.claimed_records} records)")
        if s.batches:
            parts.append(f"{s.records} records in {s.batches} intact batches after it, offsets "
                         f"{s.first_offset}..{s.last_offset}, are no longer in the log")
        parts.append(f"{self.bytes} bytes ({self.tail_bytes} from the damaged segment and "
                     f"{len(self.later_segments)} later segment(s)) moved to {self.destination}")
        return "; ".join(parts)


def new_destination(partition_dir: Path) -> Path:
    """A fresh `<partition>.quarantine/<UTC time>` directory."""
    root = quarantine_root(partition_dir)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate = root / stamp
    n = 1
    while candidate.exists():
        n += 1
        candidate = root / f"{stamp}-{n}"
    candidate.mkdir(parents=True)
    return candidate


def copy_range(src_fd: int, start: int, end: int, dest: Path) -> None:
    """Copy bytes [start, end) of an open file to `dest`, fsynced."""
    with open(dest, "wb") as out:
        pos = start
        while pos < end:
            chunk = os.pread(src_fd, min(_COPY_CHUNK, end - pos), pos)
            if not chunk:
                raise OSError(f"{dest}: source ended at byte {pos} of {end}")
            out.write(chunk)
            pos += len(chunk)
        out.flush()
        os.fsync(out.fileno())


def segment_files(log_file: Path) -> list[Path]:
    """A segment's `.log` and its two indexes, those of them that exist."""
    return [p for p in (log_file, log_file.with_suffix(".index"), log_file.with_suffix(".timeindex"),
                        log_file.with_suffix(".txnindex")) if p.exists()]


def write_manifest(destination: Path, head: list[str], moved_bytes: int, tail: str | None,
                   whole_segments: list[Path], advice: list[str]) -> None:
    """A plain-text note in the quarantine directory: what was cut and why (`head`), what each
    file is (`tail`, the line for the copied tail of a cut segment), and what to do (`advice`)."""
    lines = [*head, f"bytes moved: {moved_bytes}", "files:"]
    if tail is not None:
        lines.append(f"  {tail}")
    lines += [f"  {path.name}: a whole later segment, with its indexes" for path in whole_segments]
    lines += ["", *advice]
    (destination / MANIFEST).write_text("\n".join(lines) + "\n")


def move_in(destination: Path, paths: list[Path], partition_dir: Path) -> None:
    """Move whole segment files into `destination` by rename (same file system, atomic per
    file), then make the moves and the new directory durable."""
    for path in paths:
        os.replace(path, destination / path.name)
    fsync_path(destination)
    fsync_path(destination.parent)
    fsync_path(partition_dir)


def _write_cut_manifest(cut: Cut) -> None:
    assert cut.destination is not None
    s = cut.survey
    head = [
        f"partition: {cut.partition}",
        f"kind: {'mid-log corruption (intact batches followed the damage)' if cut.mid_log else 'torn tail'}",
        f"cut at offset: {cut.cut_offset}",
        f"damaged segment: {cut.segment.name}, cut at byte {cut.position}: {cut.reason}",
        f"damaged batch claims: first offset {cut.damage.claimed_first}, {cut.damage.claimed_records} records"
        if cut.damage.claimed_first is not None else "damaged batch: header unreadable",
        f"intact batches moved: {s.batches}, records {s.records}, offsets {s.first_offset}..{s.last_offset}",
    ]
    tail = (f"{cut.cut_offset:020d}.log: bytes {cut.position}.. of {cut.segment.name} "
            f"({cut.tail_bytes} bytes, starting with the damaged batch)") if cut.tail_bytes else None
    write_manifest(cut.destination, head, cut.bytes, tail, cut.later_segments, [
        "The log continues from the cut offset without these records. Inspect the files with",
        "kafka-dump-log.sh --files <file>.log (or any RecordBatch v2 reader), re-produce what",
        "you need, then delete this directory. See docs/operations/storage.md, 'Recovery and quarantined data'.",
    ])


def keep_cut(directory: Path, topic: str, partition: int, segment_path: Path, segment_fd: int,
             segment_size: int, cut_offset: int, position: int, reason: str, later: list[int], *,
             offset_damage: bool = False) -> Cut:
    """Move what a recovery cut is about to remove into a new quarantine directory, count it,
    and return what was moved. The caller then cuts the damaged segment at `position`.

    `later` are the base offsets of the segments after the damaged one that must go too (the
    cut leaves a gap before them, or they overlap it). `offset_damage`: the batch at `position`
    is whole but claims the wrong offsets (see `survey_file`). Order matters for a crash in the
    middle: the tail is copied (fsynced) before anything is moved or cut, so the bytes always
    exist somewhere, at worst twice.
    """
    cut = Cut(f"{topic}-{partition}", cut_offset, segment_path, position, reason)
    cut.tail_bytes = segment_size - position
    tail_survey, cut.damage = survey_file(segment_path, position, cut_offset, offset_damage=offset_damage)
    cut.survey.merge(tail_survey)
    later_files: list[Path] = []
    for base in later:
        log_file = directory / f"{base:020d}.log"
        later_files += segment_files(log_file)
        if log_file.exists():
            cut.later_segments.append(log_file)
            cut.later_bytes += log_file.stat().st_size
            cut.survey.merge(survey_file(log_file, 0, base)[0])
    cut.mid_log = cut.survey.batches > 0
    cut.destination = new_destination(directory)
    if cut.tail_bytes:
        copy_range(segment_fd, position, segment_size, cut.destination / f"{cut_offset:020d}.log")
    _write_cut_manifest(cut)
    move_in(cut.destination, later_files, directory)
    _count(topic, partition, cut)
    return cut


def count_missing(topic: str, partition: int, offsets: int) -> None:
    """Count offsets found missing from the middle of a log (reported, nothing to quarantine)."""
    from broker import metrics

    metrics.MISSING_OFFSETS.labels(topic, str(partition)).inc(offsets)


def _count(topic: str, partition: int, cut: Cut) -> None:
    from broker import metrics  # the storage layer counts; the server decides whether to serve them

    labels = (topic, str(partition))
    metrics.QUARANTINED_RECORDS.labels(*labels).inc(cut.records)
    metrics.QUARANTINED_BYTES.labels(*labels).inc(cut.bytes)
    metrics.QUARANTINED_SEGMENTS.labels(*labels).inc(cut.files)
    metrics.RECOVERY_CUTS.labels(*labels, "mid_log" if cut.mid_log else "torn_tail").inc()
