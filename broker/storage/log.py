"""A partition's log: ordered segments, offsets, the append path, reads and retention.

The append path touches batch headers only: split the request into batches, check each one's
magic, length, CRC and size, check the producer's sequence, patch the base offset (and leader
epoch, and LogAppendTime when the topic asks for it), write. No record is decoded.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from broker.protocol.control_records import ControlType, end_txn_marker, marker_of
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    BatchHeader,
    batch_crc_ok,
    decode_batch,
    patch_base_offset,
    patch_partition_leader_epoch,
    read_batch_header,
    set_log_append_time,
    set_max_timestamp,
    split_batches,
)
from broker.protocol.validation import LONG_MAX, check_copied, check_produced
from broker.storage.config import LogConfig
from broker.storage.epoch_cache import EpochSnapshot, LeaderEpochCache
from broker.storage.file_slice import FileSlice
from broker.storage.link_copy import LinkCopy, is_promotion_marker, promotion_marker
from broker.storage.producer_snapshot import (
    SnapshotError,
    delete_snapshots_after,
    read_snapshot,
    snapshot_offsets,
    snapshot_path,
    write_snapshot,
)
from broker.storage.producer_state import ProducerStateManager, VerificationGuard
from broker.storage.quarantine import Cut, count_missing, keep_cut
from broker.storage.segment import MAX_RELATIVE_OFFSET, Gaps, LogSegment, RecoveryResult, UnflushedIndexes
from broker.storage.truncation import Truncation, keep_truncated
from broker.storage.txn_index import AbortedTxn, read_entries

__all__ = ["AppendResult", "FlushJob", "FlushScheduler", "Log", "ReadResult", "RecordErrors", "TruncationPlan",
           "parse_partition_dir"]

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
# Segments scanned at open to rebuild idempotent-producer state: a producer whose last batch is
# older than this is treated as new (it may start at any sequence), as after Kafka's retention.
PRODUCER_STATE_SEGMENTS = 2


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a `<topic>-<partition>` directory name, None for other names."""
    match = _PARTITION_DIR.match(name)
    if match is None or "." in match.group(2):
        return None
    return match.group(1), int(match.group(2))


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False
    # flush.messages was reached and the flush was left to the log's scheduler: the caller
    # awaits it (in a worker thread) before acknowledging, as Kafka's append flushes inline.
    needs_flush: bool = False


class RecordErrors(KafkaError):
    """Records of a batch refused one by one (KIP-467): Produce v8+ answers each one's index in
    its batch and message in `record_errors`, so a client fails only those records."""

    def __init__(self, code: ErrorCode, errors: Sequence[tuple[int, str]]) -> None:
        # Kafka's InvalidRecordException text (LogValidator.processRecordErrors).
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        super().__init__(code, f"One or more records have been rejected due to {len(errors)} record errors in "
                               f"total, and only showing the first three errors at most: [{shown}]")
        self.record_errors = list(errors)


class FlushScheduler(Protocol):
    """Where a log sends the blocking work the event loop must not do (broker/storage/flusher.py):
    the fsync of finished segments after a roll, and the unlinking of deleted segments."""

    def request(self, log: Log, upto: int) -> None: ...

    def discard(self, segments: list[LogSegment]) -> None: ...

    async def flush(self, log: Log, upto: int | None = None, *, now_ms: int | None = None) -> None: ...


@dataclass(slots=True)
class FlushJob:
    """What one flush makes durable, taken on the log's thread (:meth:`Log.begin_flush`) and
    run in any thread (:meth:`run`); :meth:`Log.end_flush` then moves the recovery point."""

    upto: int
    segments: list[tuple[LogSegment, UnflushedIndexes]]
    epochs: EpochSnapshot | None
    epoch_cache: LeaderEpochCache
    truncations: int
    done: bool = field(default=False)

    def run(self) -> None:
        """fsync the segment files, append their new index entries and write the leader epoch
        checkpoint. Blocking; touches only files and thread-safe state."""
        for segment, indexes in self.segments:
            segment.sync(indexes)
        if self.epochs is not None:
            self.epoch_cache.write(self.epochs)
        self.done = True


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Where the batches of a read lie: ``length`` bytes of ``segment`` from ``position``, whole
    batches (the last may be cut by the size limit, as Kafka's fetch allows).

    Nothing is read into memory by :meth:`Log.read`: take :attr:`data` (read now) or
    :meth:`open_slice` (a descriptor for sendfile) right away, before the log can change.
    """

    segment: LogSegment | None = None
    position: int = 0
    length: int = 0

    @property
    def upper_bound_offset(self) -> int:
        """An offset none of the read's batches reaches (the first indexed batch after them, else
        the segment's end): what a read_committed fetch looks up aborted transactions below."""
        if self.segment is None:
            return -1
        found = self.segment.offset_index.offset_after(self.position + self.length)
        return found if found is not None else self.segment.next_offset

    @property
    def data(self) -> bytes:
        if self.segment is None or self.length <= 0:
            return b""
        return self.segment.read(self.position, self.length)

    def open_slice(self, *, within_budget: bool = False) -> FileSlice | None:
        """The bytes as a :class:`FileSlice` on its own descriptor; None when there are none
        (or, ``within_budget``, when the budget of pinned descriptors is spent: see
        :meth:`LogSegment.slice`)."""
        if self.segment is None or self.length <= 0:
            return None
        return self.segment.slice(self.position, self.length, within_budget=within_budget)


@dataclass(slots=True)
class TruncationPlan:
    """A truncation planned by :meth:`Log.plan_truncation`; :meth:`run` does its file work."""

    directory: Path
    topic: str
    partition: int
    offset: int  # the log ends here afterwards (or, `fully`, starts here)
    reason: str
    previous_end: int
    quarantine_from: int  # the first offset that goes
    last: LogSegment  # the segment that keeps its head (unused when `fully`)
    position: int  # where `last` is cut
    doomed: list[LogSegment]  # whole segments that go (already retired)
    fully: bool = False
    has_data: bool = True
    failback: bool = False  # a failback's cut of acknowledged records (broker/storage/truncation.py)
    cut: Truncation | None = None
    done: bool = False

    def run(self) -> Truncation | None:
        """Quarantine what goes and cut the files (blocking: copies, renames, fsyncs; any thread,
        while the log's thread leaves the partition alone)."""
        whole = [(s.base_offset, s.path) for s in self.doomed]
        if self.fully:
            if self.has_data:
                self.cut = keep_truncated(self.directory, self.topic, self.partition, offset=self.quarantine_from,
                                          previous_end=self.previous_end, reason=self.reason, tail=None, whole=whole)
            else:
                for segment in self.doomed:
                    segment.delete_files()
            self.done = True
            return self.cut
        last = self.last
        with last.pinned_fd() as fd:
            tail = (last.path, fd, self.position, last.size) if self.position < last.size else None
            self.cut = keep_truncated(self.directory, self.topic, self.partition, offset=self.offset,
                                      previous_end=self.previous_end, reason=self.reason, tail=tail, whole=whole,
                                      failback=self.failback)
        if last.base_offset > self.offset:
            last.detach()
            last.delete_files()
        elif last.base_offset == self.offset and last.size > 0:
            last.truncate_to(last.base_offset)
        elif self.position < last.size:
            last.truncate_to(self.offset)
        self.done = True
        return self.cut


class Log:
    """Not thread-safe: the broker calls it from one trio thread (or one worker at a time)."""

    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = directory
        self.config = config
        self.segments: list[LogSegment] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self.producers = ProducerStateManager()
        # Which batches are a link-mode copy (never producer state): broker/storage/link_copy.py.
        self.copy = LinkCopy(directory / "link-copy-checkpoint")
        self.epochs = LeaderEpochCache(directory / "leader-epoch-checkpoint")
        self._last_flush_ms: int | None = None
        self._scheduler: FlushScheduler | None = None
        self._truncations = 0  # a flush taken before a truncation must not move the recovery point
        self.closed = False
        self.cleaned_up_to = 0  # offsets below this have been through the cleaner (compaction)
        # Gaps opening the log saw, judged by the first config given after (`update_config`).
        self._gaps = Gaps()
        self.tombstones_expire_at: int | None = None  # when a kept tombstone becomes removable

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int | None = None,
        log_start_offset: int = 0,
        now_ms: int | None = None,
        high_watermark: int | None = None,
    ) -> Log:
        """Open (or create) the log in `directory`.

        `high_watermark` is what the broker last checkpointed (`replication-offset-checkpoint`;
        0 when it has none), kept within the log as Kafka does: only the ISR's progress may move
        it further (a leader of an ISR of one moves it to the log end, broker.replication). None
        means the log end: a log nobody else holds a copy of (tools, benchmarks).

        Segments at or after `recovery_point` (all of them when None: an unclean shutdown is
        assumed) are scanned batch by batch and cut at the first torn or corrupt batch, or the
        first whose offsets do not follow the log's, with their indexes rebuilt. Segments below
        it are trusted as Kafka trusts them, after checks that cost a header or two each: their
        indexes, their first and last batches, and that each segment starts after the previous
        one ends (`LogSegment.load`); a segment that fails them is scanned. What a cut removes
        (the rest of that segment, and the later segments when the cut leaves a gap before them
        or they overlap it) is moved to the partition's quarantine directory, logged with its
        offsets and counted (broker/storage/quarantine.py).

        Gaps between batches or segments are right only in compacted logs and copies, and the
        topic's config is not known yet: they are reported when it is (`update_config`). A
        segment file missing from the middle, whose indexes remain, is reported at once.
        """
        directory.mkdir(parents=True, exist_ok=True)
        self = cls(directory, config)
        # Half-written files of an interrupted checkpoint or compaction; the originals are intact.
        for leftover in [*directory.glob("*.tmp"), *directory.glob("*.cleaned")]:
            leftover.unlink()
        bases = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _SEGMENT_FILE.match(p.name)))
        recovery = recovery_point if recovery_point is not None else -1
        # (epoch, first offset) of every batch recovery checks: the epoch checkpoint may lag them.
        seen_epochs: list[tuple[int, int]] = []

        def note_epoch(header: BatchHeader) -> None:
            if not seen_epochs or header.partition_leader_epoch > seen_epochs[-1][0]:
                seen_epochs.append((header.partition_leader_epoch, header.base_offset))

        for i, base in enumerate(bases):
            segment = LogSegment(directory, base, index_max_bytes=config.segment_index_bytes, create=False)
            segment._index_interval = config.index_interval_bytes
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            clean = recovery_point is not None and next_base is not None and next_base <= recovery
            cuts: list[Cut] = []

            def before_cut(seg: LogSegment, result: RecoveryResult, later: list[int] = bases[i + 1 :],
                           cuts: list[Cut] = cuts) -> None:
                # The log is cut here; later segments would leave a gap (Kafka drops them) or
                # overlap, so they go to quarantine with the tail, unless they continue right
                # after the cut.
                gone = later if later and seg.next_offset != later[0] else []
                cuts.append(self._keep_cut(seg, result, gone))

            if clean:
                segment.load(trust_indexes=True, before_cut=before_cut, next_base=next_base, gaps=self._gaps)
            else:
                segment.recover(check_crc=True, before_cut=before_cut, on_batch=note_epoch, next_base=next_base,
                                gaps=self._gaps)
            self.segments.append(segment)
            if cuts and cuts[0].later_segments:
                break
            if next_base is not None and segment.next_offset < next_base:
                self._gaps.add(segment.next_offset, next_base)
        self._sort_out_orphan_indexes(set(bases))
        if not self.segments:
            self.segments.append(self._new_segment(log_start_offset))
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        if self.epochs.needs_rebuild:
            self.epochs.rebuild(h for segment in self.segments for _, h in segment.iter_headers())
        else:
            self._recover_epochs(seen_epochs)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.copy = LinkCopy.load(directory)
        if config.mirror_name:
            self.copy.start(self.log_end_offset)
        self.copy.reopen_if_cut(self.log_end_offset)  # a marker lost with a torn tail
        end = self.log_end_offset
        self.high_watermark = end if high_watermark is None else max(self.log_start_offset, min(high_watermark, end))
        self._rebuild_producer_state()
        if config.mirror_name and self.copy.start(self.log_end_offset):
            # A damaged checkpoint, closed by an earlier promotion's marker in the log: the topic
            # is a mirror topic again, its copy begins here at the latest.
            self.producers.clear()
        self.recovery_point = self.log_end_offset
        self._last_flush_ms = now_ms
        return self

    def _recover_epochs(self, seen: list[tuple[int, int]]) -> None:
        """Epochs of the batches past the recovery point, which the checkpoint may not hold yet
        (the broker writes it with the flush that moves the recovery point), as Kafka's segment
        recovery assigns them. Written once, at the end."""
        deferred, self.epochs.deferred = self.epochs.deferred, True
        try:
            for epoch, start_offset in seen:
                self.epochs.assign(epoch, start_offset)
        finally:
            self.epochs.deferred = deferred
        if self.epochs.dirty:
            self.epochs.flush()

    def _sort_out_orphan_indexes(self, present: set[int]) -> None:
        """Indexes whose segment file is gone. Before the first segment or after the last one, a
        crash between deleting a segment's files (retention, truncation) left them: Kafka drops
        them. Between two segments nothing deletes a segment: its file is missing from the
        middle of the log, and the offsets it held with it. That is reported at every start,
        and the indexes stay, as what tells which file is missing."""
        orphans: dict[int, list[Path]] = {}
        for path in [*self.directory.glob("*.index"), *self.directory.glob("*.timeindex"),
                     *self.directory.glob("*.txnindex")]:
            stem = path.name.split(".", 1)[0]
            if stem.isdigit() and len(stem) == 20 and int(stem) not in present:
                orphans.setdefault(int(stem), []).append(path)
        missing: dict[tuple[int, int], list[Path]] = {}  # the gap each orphan lies in
        for base, paths in sorted(orphans.items()):
            before = [s for s in self.segments if s.base_offset < base]
            after = [s for s in self.segments if s.base_offset > base]
            if not before or not after or before[-1].next_offset >= after[0].base_offset:
                for path in paths:  # at either end of the log, or nothing is missing
                    path.unlink()
                continue
            missing.setdefault((before[-1].next_offset, after[0].base_offset), []).extend(paths)
        for (start, end), paths in missing.items():
            self._gaps.remove(start, end)  # reported here, not again with the config
            files = sorted({f"{p.name.split('.', 1)[0]}.log" for p in paths})
            self._report_missing(f"segment file {', '.join(files)} is missing from the middle of the log (its "
                                 f"indexes remain): offsets {start}..{end - 1} are not in the log", end - start)

    def _report_missing(self, what: str, offsets: int) -> None:
        """Say, as an error, that offsets are missing from the middle of the log, and count them."""
        topic, partition = parse_partition_dir(self.directory.name) or (self.directory.name, -1)
        log.error("%s: %s; a fetch skips them. Restore the data, or see docs/operations/storage.md, "
                  "'Recovery and quarantined data'", self.directory.name, what)
        count_missing(topic, partition, offsets)

    def _keep_cut(self, segment: LogSegment, result: RecoveryResult, later: list[int]) -> Cut:
        """Quarantine what recovery is about to cut from `segment` (and the `later` segments),
        then say so: a torn tail is a warning, intact data after the damage is an error."""
        topic, partition = parse_partition_dir(self.directory.name) or (self.directory.name, -1)
        with segment.pinned_fd() as fd:
            cut = keep_cut(self.directory, topic, partition, segment.path, fd, segment.size, segment.next_offset,
                           result.valid_end, result.reason, later, offset_damage=result.offset_damage)
        if cut.mid_log:
            log.error("mid-log corruption: %s. See docs/operations/storage.md, 'Recovery and quarantined data'",
                      cut.describe())
        else:
            log.warning("torn tail: %s", cut.describe())
        return cut

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(self.directory, base_offset, index_max_bytes=self.config.segment_index_bytes,
                             create=True)
        segment._index_interval = self.config.index_interval_bytes
        return segment

    def _rebuild_producer_state(self) -> None:
        """Producer state (sequences and transactions) and every segment's aborted transaction
        index, as of the log end. From the newest usable producer state snapshot
        (broker/storage/producer_snapshot.py), the batches after it are replayed, and the index
        files of the segments before it are read as they are. Without one, as Kafka without
        snapshots: sequences from the last segments' batches (a producer whose last batch is
        older is treated as new), transactions from every batch header of the log, and the
        ``.txnindex`` files rewritten from what the log says.

        A link-mode copy's batches (an open copy, or before its promotion marker) carry another
        cluster's producer ids and never count for sequences; state seen before a marker is
        forgotten at it (broker/storage/link_copy.py). Their transactions count: a mirror
        topic's read_committed readers see what the source's see."""
        recent = self.segments[-PRODUCER_STATE_SEGMENTS:][0].base_offset
        snapshot = self._load_producer_snapshot()
        if snapshot is not None:
            # Promotion markers of the last segments are looked at all the same: the copy's
            # checkpoint may have missed one (LinkCopy.close_at), and a snapshot does not say.
            self._replay(sequences_from=snapshot, transactions_from=snapshot, markers_from=min(recent, snapshot))
            return
        self._replay(sequences_from=recent, transactions_from=-1, markers_from=recent)

    def _load_producer_snapshot(self) -> int | None:
        """Load the newest snapshot within the log (its offset), removing the ones that cannot
        serve: past the log end (the log was cut), below its first segment, or damaged."""
        for offset in reversed(snapshot_offsets(self.directory)):
            path = snapshot_path(self.directory, offset)
            if offset > self.log_end_offset or offset < self.segments[0].base_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = read_snapshot(path)
            except (SnapshotError, OSError) as exc:
                log.warning("%s: producer state snapshot not used: %s", self.directory.name, exc)
                path.unlink(missing_ok=True)
                continue
            self.producers.load_snapshot(entries)
            return offset
        return None

    def _replay(self, *, sequences_from: int, transactions_from: int, markers_from: int) -> None:
        """Replay the batches at or past the offsets into the producer state (see
        :meth:`_rebuild_producer_state`): sequences, transactions, link-mode promotion markers;
        index entries of markers below ``transactions_from`` come from the segments' files."""
        start = min(sequences_from, transactions_from, markers_from)
        for segment in self.segments:
            aborted: list[AbortedTxn] = []
            if segment.base_offset < transactions_from and segment.txn_index.path.exists():
                aborted = [e for e in read_entries(segment.txn_index.path) if e.last_offset < transactions_from]
            if segment.next_offset > start:
                for pos, header in segment.iter_headers():
                    if header.base_offset < start:
                        continue
                    if header.is_control and not header.has_producer_id:
                        if header.base_offset >= markers_from and is_promotion_marker(
                                segment.read(pos, header.size), 0, header):
                            if header.base_offset >= sequences_from:
                                self.producers.clear()
                            if self.copy.closes(header.base_offset) and (
                                    self.copy.open or self.copy.marker != header.base_offset):
                                self.copy.close_at(header.base_offset)
                        continue
                    if header.is_transactional and header.has_producer_id and header.base_offset >= transactions_from:
                        entry = self._replay_transaction(segment, pos, header)
                        if entry is not None:
                            aborted.append(entry)
                    if (header.has_producer_id and header.base_offset >= sequences_from
                            and self.copy.counts(header.base_offset)):
                        self.producers.update(header, header.base_offset, header.max_timestamp)
            segment.txn_index.replace(aborted)

    def _replay_transaction(self, segment: LogSegment, pos: int, header: BatchHeader) -> AbortedTxn | None:
        """A transactional batch found on disk: it opens its producer's transaction, or (a
        marker) ends it; the index entry of an abort."""
        if not header.is_control:
            self.producers.begin(header.producer_id, header.base_offset)
            return None
        try:
            marker = marker_of(segment.read(pos, header.size), 0, header)
        except KafkaError as exc:  # recovery checked the CRC: a marker nobody can read
            log.error("%s: transaction marker at offset %d cannot be read (%s); the producer's "
                      "transaction stays open", self.directory.name, header.base_offset, exc.message)
            return None
        return self._complete(header, marker[0], marker[1]) if marker is not None else None

    def _rebuild_transactions(self) -> None:
        """Every transaction and aborted transaction index entry from the whole log (after a cut
        below the high watermark: see :meth:`_after_truncation`)."""
        self.producers.forget_transactions()
        self._replay(sequences_from=LONG_MAX, transactions_from=-1, markers_from=LONG_MAX)

    def take_producer_snapshot(self) -> None:
        """Write the producer state as of the log end (at a roll, at close). A disk that refuses
        costs only the next open's time (it replays from an older snapshot): logged, not raised."""
        try:
            write_snapshot(self.directory, self.log_end_offset, self.producers.snapshot_entries())
        except OSError as exc:
            log.warning("%s: producer state snapshot at offset %d not written: %s", self.directory.name,
                        self.log_end_offset, exc)

    def _complete(self, header: BatchHeader, control_type: ControlType, coordinator_epoch: int) -> AbortedTxn | None:
        """The marker ``header`` ends its producer's transaction; the aborted transaction index
        entry it makes, None for a commit."""
        completed = self.producers.complete(header.producer_id, header.producer_epoch, coordinator_epoch,
                                            header.base_offset, aborted=control_type is ControlType.ABORT,
                                            high_watermark=self.high_watermark,
                                            local=self.copy.counts(header.base_offset))
        if not completed.aborted:
            return None
        undecided = self.producers.first_undecided_offset()
        last_stable = undecided if undecided is not None else completed.last_offset + 1
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, last_stable)

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop (Kafka's lastStableOffset): the first offset of
        the earliest transaction not yet decided for every replica of the ISR, else the high
        watermark; never below the log start."""
        first = self.producers.first_unstable_offset(self.high_watermark)
        if first is None:
            return self.high_watermark
        return max(self.log_start_offset, min(first, self.high_watermark))

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read from ``fetch_offset`` below ``upper_bound`` overlaps,
        from the segment holding ``fetch_offset`` on (Kafka's collectAbortedTransactions): index
        lookups only, no batch is read."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self._segment_for(fetch_offset):]:
            if segment.txn_index.collect(fetch_offset, upper_bound, found):
                break
        return found

    # -- the flush scheduler -------------------------------------------------------------

    @property
    def scheduler(self) -> FlushScheduler | None:
        return self._scheduler

    @scheduler.setter
    def scheduler(self, scheduler: FlushScheduler | None) -> None:
        """With a scheduler (the broker's), nothing here blocks on the disk but the write itself:
        the fsync of a rolled segment, the leader epoch checkpoint and the unlinking of deleted
        segments go to it, and flush.messages is left to the caller (`AppendResult.needs_flush`).
        Without one (a log used on its own) all of that happens inline, as it always did."""
        self._scheduler = scheduler
        self.epochs.deferred = scheduler is not None

    # -- offsets -------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        gaps, self._gaps = self._gaps, Gaps()
        if gaps.count and not (config.compacts or config.mirror_name or self.copy.open or self.copy.marker >= 0):
            # The first config since the log was opened: only compaction and a copy leave gaps.
            self._report_missing(f"{gaps.describe()} are missing from a log that is neither compacted nor a copy "
                                 f"(a segment file missing from the middle, or a damaged batch header)", gaps.offsets)
        if config.mirror_name and self.copy.start(self.log_end_offset):
            # Learnt late that this is a mirror topic (or a mirror topic again, after a
            # promotion): whatever it holds is copied, or history.
            self.producers.clear()
        for segment in self.segments:
            segment._index_interval = config.index_interval_bytes

    # -- appending -----------------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview, *, leader_epoch: int,
                         now_ms: int, transactional: bool = False, coordinator: bool = False,
                         verification: VerificationGuard | None = None) -> AppendResult:
        """Validate the batches in `records`, assign offsets and append them (`coordinator`:
        written by the group coordinator, whose transactional batches carry no sequence).

        A retried idempotent batch is answered with its original offsets and not written again
        (`duplicate=True`). Raises KafkaError: CORRUPT_MESSAGE (malformed, bad CRC),
        MESSAGE_TOO_LARGE (a batch above max.message.bytes), RECORD_LIST_TOO_LARGE (above
        segment.bytes), INVALID_RECORD (empty or inconsistent batch, records that do not add
        up), UNSUPPORTED_COMPRESSION_TYPE, INVALID_TIMESTAMP, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        (a transactional batch when `transactional` is false), INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE (a batch that would open a transaction
        whose `verification` went stale). Nothing is written unless every batch passes.
        """
        buf = bytearray(records)
        batches = split_batches(buf)
        if not batches:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request carries no record batch")
        if len(buf) > self.config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"{len(buf)} bytes exceed segment.bytes {self.config.segment_bytes}")
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) in this request
        recomputed: dict[int, int] = {}  # batch position -> its MaxTimestamp as Kafka stores it
        for pos, header in batches:
            if header.size > self.config.max_message_bytes:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"batch of {header.size} bytes exceeds max.message.bytes "
                                 f"{self.config.max_message_bytes}")
            if not batch_crc_ok(buf, pos, header):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch")
            # What Kafka's LogValidator refuses: codec, counts, framing, decompressibility,
            # attributes, the transactional bit, timestamps (broker/protocol/validation.py).
            largest = check_produced(buf, pos, header, transactional=transactional, now_ms=now_ms,
                                     before_max_ms=self.config.timestamp_before_max_ms,
                                     after_max_ms=self.config.timestamp_after_max_ms,
                                     log_append_time=self.config.log_append_time, coordinator=coordinator)
            if largest is not None:
                recomputed[pos] = largest
            if self.config.compacts and not header.is_control:
                # As Kafka does, and only for compacted topics: records are read to refuse
                # one without a key, which compaction could never resolve.
                _, decoded = decode_batch(buf, pos)
                keyless = [i for i, r in enumerate(decoded) if r.key is None]
                if keyless:
                    # Each record is named by its index in its batch (KIP-467), as Kafka does.
                    where = self.directory.name
                    raise RecordErrors(ErrorCode.INVALID_RECORD, [
                        (i, f"Compacted topic cannot accept message without key in topic partition {where}")
                        for i in keyless])
            self.producers.check_transactional(header)
            self.producers.check_verified(header, verification)
            original = self.producers.check(header, pending)
            if original is not None:
                return AppendResult(original.first_offset, original.last_offset, -1, self.log_start_offset,
                                    duplicate=True)

        offsets = sum(header.last_offset_delta + 1 for _, header in batches) + (1 if self.copy.open else 0)
        if self.log_end_offset + offsets > LONG_MAX:
            # The log end offset (and every checkpoint holding it) must stay an int64.
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"{self.directory.name}: the log end offset {self.log_end_offset} leaves no room for "
                             f"{offsets} more offsets (the largest offset is {LONG_MAX - 1})")
        if self.copy.open:
            # The first local append after a link-mode promotion: the marker first, so that every
            # replica tells the copied batches before it from the local ones after it.
            self._write_promotion_marker(leader_epoch, now_ms)
        log_append_time = now_ms if self.config.log_append_time else -1
        next_offset = self.log_end_offset
        first_offset = next_offset
        assigned: list[tuple[int, BatchHeader]] = []
        for pos, header in batches:
            patch_base_offset(buf, pos, next_offset)
            patch_partition_leader_epoch(buf, pos, leader_epoch)
            if log_append_time >= 0:
                set_log_append_time(buf, pos, log_append_time)
            elif pos in recomputed:
                # As Kafka's LogValidator: the batch's MaxTimestamp is its records' largest, which
                # its header did not say (librdkafka's records without a timestamp say 0).
                set_max_timestamp(buf, pos, recomputed[pos])
            assigned.append((pos, read_batch_header(buf, pos)))
            next_offset += header.last_offset_delta + 1

        self._maybe_roll(len(buf), now_ms)
        # The epoch first, as Kafka does: when its checkpoint cannot be written (a full disk)
        # nothing is appended, rather than a batch the producer is told failed.
        self.epochs.assign(leader_epoch, first_offset)
        self._write(buf, assigned, now_ms)
        needs_flush = self._flush_if_due()
        return AppendResult(first_offset, next_offset - 1, log_append_time, self.log_start_offset,
                            needs_flush=needs_flush)

    def _write_promotion_marker(self, leader_epoch: int, now_ms: int) -> None:
        offset = self.log_end_offset
        marker = promotion_marker(offset, leader_epoch=leader_epoch, now_ms=now_ms)
        self._maybe_roll(len(marker), now_ms)
        self.epochs.assign(leader_epoch, offset)
        self._write(marker, [(0, read_batch_header(marker, 0))], now_ms)
        log.info("%s: promoted mirror topic: local writes begin after the promotion marker at offset %d "
                 "(the copied batches' producers no longer count)", self.directory.name, offset)

    def append_marker(self, control_type: ControlType, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, leader_epoch: int, now_ms: int) -> AppendResult:
        """Write a transaction marker as leader (WriteTxnMarkers): it ends the producer's ongoing
        transaction (an empty one when it has none, as Kafka's), and an ABORT adds an entry to
        the active segment's aborted transaction index. Raises KafkaError INVALID_PRODUCER_EPOCH
        or TRANSACTION_COORDINATOR_FENCED (``ProducerStateManager.check_marker``), OFFSET_OUT_OF_RANGE
        when the log end has no room left."""
        if producer_id < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"a transaction marker for producer id {producer_id}")
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        offset = self.log_end_offset
        if offset + 1 > LONG_MAX:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{self.directory.name}: the log end offset {offset} "
                                                            f"leaves no room for a marker")
        marker = end_txn_marker(control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                                coordinator_epoch=coordinator_epoch, base_offset=offset,
                                partition_leader_epoch=leader_epoch, now_ms=now_ms)
        self._maybe_roll(len(marker), now_ms)
        self.epochs.assign(leader_epoch, offset)
        self._write(marker, [(0, read_batch_header(marker, 0))], now_ms)
        return AppendResult(offset, offset, -1, self.log_start_offset, needs_flush=self._flush_if_due())

    def append_as_follower(self, records: bytes | bytearray | memoryview, *, now_ms: int) -> AppendResult | None:
        """Append batches fetched from the leader as they are: their offsets, leader epochs and
        timestamps are the leader's (nothing is patched), the leader epoch cache follows each
        batch's partition leader epoch, producer state follows the batches (so a producer's
        retry finds its batch here after a leader change), and segments roll as usual.

        `records` must hold whole batches (the fetcher drops a partial last one). Raises
        KafkaError: CORRUPT_MESSAGE (malformed, CRC mismatch), UNKNOWN_SERVER_ERROR naming
        both offsets when the first batch does not start at the log end offset or the batches
        are out of order (Kafka's UnexpectedAppendOffsetException). Nothing is written unless
        every batch passes. Returns None when `records` holds no batch.
        """
        buf = records if isinstance(records, bytes) else bytes(records)
        batches = split_batches(buf)
        if not batches:
            return None
        first = batches[0][1]
        if first.base_offset < self.log_end_offset <= first.last_offset and self._is_empty():
            # The leader's log start lies inside its first batch (DeleteRecords moved it there):
            # an empty log starts at that batch, as Kafka's follower does.
            self._restart_empty_at(first.base_offset)
        expected = self.log_end_offset
        for pos, header in batches:
            # A batch may start past the end (a gap: the leader's log was compacted, or is a mirror
            # topic's copy of a compacted source), never before it (Kafka's follower check).
            if header.base_offset < expected:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"{self.directory.name}: follower append of a batch at offset {header.base_offset}, "
                                 f"expected the log end offset {expected}")
            if header.last_offset_delta < 0 or not batch_crc_ok(buf, pos, header):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"{self.directory.name}: fetched batch at offset {header.base_offset} is corrupt")
            if header.last_offset >= LONG_MAX:
                # The log end offset (and every checkpoint holding it) must stay an int64.
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"{self.directory.name}: fetched batch at offsets [{header.base_offset}, "
                                 f"{header.last_offset}] ends past the largest offset {LONG_MAX - 1}")
            expected = header.last_offset + 1
        first_offset = batches[0][1].base_offset
        self._append_runs(buf, batches, now_ms)
        if self.unflushed_messages >= self.config.flush_messages:
            if self._scheduler is None:
                self.flush()
            else:
                self._scheduler.request(self, self.log_end_offset)
        return AppendResult(first_offset, expected - 1, -1, self.log_start_offset)

    def _append_runs(self, buf: bytes | bytearray, batches: list[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Write batches that carry their own offsets and leader epochs (a follower's, a mirror
        topic's): runs that fit the segment size, rolling between them as the leader did, and a
        new segment at a batch past a gap wider than a segment's 32-bit relative offsets."""
        start = 0
        while start < len(batches):
            run_start = batches[start][0]
            first = batches[start][1]
            if first.last_offset - self.active.base_offset > MAX_RELATIVE_OFFSET:
                self.roll(first.base_offset)
            end = start + 1
            room = max(self.config.segment_bytes - self.active.size, 0)
            while (end < len(batches) and batches[end][0] + batches[end][1].size - run_start <= room
                   and batches[end][1].last_offset - first.base_offset <= MAX_RELATIVE_OFFSET):
                end += 1
            run_end = batches[end - 1][0] + batches[end - 1][1].size
            self._maybe_roll(run_end - run_start, now_ms)
            if batches[end - 1][1].last_offset - self.active.base_offset > MAX_RELATIVE_OFFSET:
                self.roll(first.base_offset)
            chunk = [(pos - run_start, header) for pos, header in batches[start:end]]
            for _, header in chunk:
                # The epoch first, as for the leader: no batch lands without its entry.
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
            self._write(buf[run_start:run_end], chunk, now_ms)
            start = end

    def append_copied(self, records: bytes | bytearray | memoryview, *, leader_epoch: int,
                      now_ms: int) -> AppendResult | None:
        """Append batches copied byte for byte from another cluster's log (a link-mode mirror's
        LinkAppend to a mirror topic): their base offsets, timestamps and producer fields are
        the source's and stay; only the partition leader epoch (outside the CRC) is stamped with
        `leader_epoch`, so this cluster's own replication and truncation work as for any topic.

        Each batch is validated as a produced one is, as a log holds it (CRC, codec, framing,
        decompressibility, max.message.bytes, a key in every record of a compacted topic:
        ``check_copied``). Offsets: a batch that ends below the log end offset is already here
        (a retried request) and is skipped; one that starts at or past it is appended (a gap is
        allowed: the source may be compacted; an empty log starts over at the first batch's base
        offset, as the source's log may start above 0). Raises KafkaError INVALID_RECORD naming
        the offsets when a batch straddles the log end or the batches are not in increasing
        order (the source's log diverged from the copy), and the codes of ``append_as_leader``
        for a bad batch. Nothing is written unless every batch passes. Returns None when every
        batch was already here.
        """
        buf = bytearray(records)
        batches = split_batches(buf)
        if not batches:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "the request carries no record batch")
        where = self.directory.name
        previous = -1
        for pos, header in batches:
            # The batches go to as many segments as they need (as a follower's do): only one
            # batch must fit a segment.
            if header.size > self.config.segment_bytes:
                raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                                 f"batch of {header.size} bytes exceeds segment.bytes {self.config.segment_bytes}")
            if header.size > self.config.max_message_bytes:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"batch of {header.size} bytes at offset {header.base_offset} exceeds "
                                 f"max.message.bytes {self.config.max_message_bytes}")
            if not batch_crc_ok(buf, pos, header):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"record batch at offset {header.base_offset}: CRC mismatch")
            if header.base_offset < 0 or header.last_offset >= LONG_MAX:
                raise KafkaError(ErrorCode.INVALID_RECORD, f"batch offsets [{header.base_offset}, "
                                                           f"{header.last_offset}] are outside a log's range")
            if header.base_offset <= previous:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 f"{where}: batches out of order: a batch at offset {header.base_offset} follows one "
                                 f"ending at {previous}")
            previous = header.last_offset
            check_copied(buf, pos, header)
            if self.config.compacts and not header.is_control:
                _, decoded = decode_batch(buf, pos)
                keyless = [i for i, r in enumerate(decoded) if r.key is None]
                if keyless:
                    raise RecordErrors(ErrorCode.INVALID_RECORD, [
                        (i, f"Compacted topic cannot accept message without key in topic partition {where}")
                        for i in keyless])
        end = self.log_end_offset
        # A promotion marker of the source's own (it was a promoted mirror topic) means nothing
        # here and would end this copy early: left out (a one-offset gap, as compaction leaves).
        new = [(pos, header) for pos, header in batches
               if header.last_offset >= end and not is_promotion_marker(buf, pos, header)]
        if not new:
            return None
        if self.copy.marker >= 0:
            # Promoted: local writes began after the marker; a copy after them would mix the two.
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"{where} was promoted (its promotion marker is at offset {self.copy.marker}): "
                             f"it is no longer a mirror topic's copy")
        self.copy.start(end)  # a copy's batches never enter producer state (a log used on its own)
        first = new[0][1]
        if self._is_empty() and first.base_offset != end:
            # An empty log starts at the first batch (the source's log starts above 0, or the
            # leader's log start lies inside this batch), as a follower's does.
            self._restart_empty_at(first.base_offset)
            self.high_watermark = self.log_start_offset  # within [log start, log end]
        elif first.base_offset < end:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"{where}: the batch at offsets [{first.base_offset}, {first.last_offset}] straddles "
                             f"the log end offset {end}: the source's log is not the one copied here")
        if any(pos + header.size != nxt for (pos, header), (nxt, _) in zip(new, new[1:], strict=False)):
            # A source's marker was left out between two batches: the writes go in runs of
            # contiguous bytes, so the kept batches are put together (rare: once per promotion).
            buf = bytearray(b"".join(buf[pos:pos + header.size] for pos, header in new))
            new = split_batches(buf)
        for pos, _ in new:
            patch_partition_leader_epoch(buf, pos, leader_epoch)
        self._append_runs(buf, [(pos, read_batch_header(buf, pos)) for pos, _ in new], now_ms)
        needs_flush = self._flush_if_due()
        return AppendResult(first.base_offset, new[-1][1].last_offset, -1, self.log_start_offset,
                            needs_flush=needs_flush)

    def _is_empty(self) -> bool:
        return len(self.segments) == 1 and self.active.size == 0

    def _restart_empty_at(self, offset: int) -> None:
        """An empty log starts over at `offset` (no data: nothing to quarantine)."""
        self._truncations += 1
        self.active.detach()
        self.active.delete_files()
        self.segments = [self._new_segment(offset)]
        self.log_start_offset = offset
        self.epochs.truncate_from_end(-1)
        self.producers.reset()
        self.copy.reopen_if_cut(offset)
        self.high_watermark = min(self.high_watermark, offset)
        self.recovery_point = offset

    def _flush_if_due(self) -> bool:
        """After an append: once flush.messages are unflushed, flush now when no scheduler
        runs the flushes, else return True for the caller (`AppendResult.needs_flush`)."""
        if self.unflushed_messages < self.config.flush_messages:
            return False
        if self._scheduler is None:
            self.flush()
            return False
        return True

    def _write(self, buf: bytes | bytearray, batches: list[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Batches (at their positions in `buf`) into the active segment, and into their
        producers' state: the same step for a leader's append and a follower's."""
        self.active.append(buf, batches, index_interval_bytes=self.config.index_interval_bytes, now_ms=now_ms)
        for pos, header in batches:
            if header.is_transactional and header.has_producer_id:
                self._track_transaction(buf, pos, header)
            if header.is_control and not header.has_producer_id:
                if is_promotion_marker(buf, pos, header):
                    self.producers.clear()  # what came before it is the copy
                    self.copy.close_at(header.base_offset)
            elif self.copy.counts(header.base_offset):
                self.producers.update(header, header.base_offset, header.max_timestamp)

    def _track_transaction(self, buf: bytes | bytearray, pos: int, header: BatchHeader) -> None:
        """A transactional batch just written: it opens its producer's transaction, or (a marker)
        ends it. Copied batches count too: a mirror topic's read_committed readers see what the
        source's see. A marker that cannot be read was refused before it was written (a
        leader's) or is the leader's as it is (a follower's, a copy's): it is logged and the
        transaction stays open, as nothing tells how it ended."""
        if not header.is_control:
            self.producers.begin(header.producer_id, header.base_offset)
            return
        try:
            marker = marker_of(buf, pos, header)
        except KafkaError as exc:
            log.error("%s: transaction marker at offset %d cannot be read (%s)", self.directory.name,
                      header.base_offset, exc.message)
            return
        if marker is not None:
            entry = self._complete(header, marker[0], marker[1])
            if entry is not None:
                self.active.txn_index.append(entry)

    @property
    def unflushed_messages(self) -> int:
        """Offsets appended past the recovery point (Kafka's unflushedMessages)."""
        return self.log_end_offset - self.recovery_point

    def _maybe_roll(self, incoming: int, now_ms: int) -> None:
        active = self.active
        if active.size == 0:
            return
        too_big = active.size + incoming > self.config.segment_bytes
        too_old = active.created_ms is not None and now_ms - active.created_ms >= self.config.segment_ms
        if too_big or too_old or active.index_full:
            self.roll()

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (or at `base_offset`, above it: the
        next batch lies past a gap too wide for the active segment's 32-bit relative offsets)."""
        if self.active.size == 0:
            if base_offset is not None and base_offset > self.active.base_offset:
                # An empty active segment: start it over at the new base instead (no offset lies
                # between; an empty log's start moves with it).
                empty = self.segments.pop()
                empty.detach()
                empty.delete_files()
                self.segments.append(self._new_segment(base_offset))
                if len(self.segments) == 1:
                    self.log_start_offset = max(self.log_start_offset, base_offset)
            return self.active
        # Flush the finished segment, as Kafka does at a roll: the recovery point moves past it,
        # so a crash later re-checks only the active segment. With a scheduler the fsync runs in
        # a worker thread after the swap (Kafka schedules it too: flushUptoOffsetExclusive), and
        # the recovery point moves when it has completed; until then recovery re-checks both.
        self.active.seal()
        base = self.log_end_offset if base_offset is None else max(base_offset, self.log_end_offset)
        if self._scheduler is None:
            self.active.flush()
            self.recovery_point = max(self.recovery_point, base)
        segment = self._new_segment(base)
        self.segments.append(segment)
        self.take_producer_snapshot()  # as Kafka's roll: a later open replays from here
        if self._scheduler is not None:
            self._scheduler.request(self, base)
        return segment

    # -- reading -------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> int:
        bases = [s.base_offset for s in self.segments]
        return max(0, bisect.bisect_right(bases, offset) - 1)

    def read(self, fetch_offset: int, max_bytes: int, *, upper_bound: int | None = None,
             min_one_batch: bool = True) -> ReadResult:
        """Batches from the one holding `fetch_offset`, at most `max_bytes` (the first whole
        batch is returned even when larger, if `min_one_batch`), never reaching `upper_bound`.

        Raises KafkaError(OFFSET_OUT_OF_RANGE) below the log start or past the log end.
        """
        end_offset = self.log_end_offset
        if fetch_offset < self.log_start_offset or fetch_offset > end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {fetch_offset} outside [{self.log_start_offset}, {end_offset}]")
        limit = end_offset if upper_bound is None else min(upper_bound, end_offset)
        if fetch_offset >= limit:
            return ReadResult()
        i = self._segment_for(fetch_offset)
        while i < len(self.segments):
            segment = self.segments[i]
            found = segment.find(fetch_offset)
            if found is not None:
                break
            i += 1  # the offset fell in a gap (deleted records): move to the next segment
            if i < len(self.segments):
                fetch_offset = self.segments[i].base_offset
        else:
            return ReadResult()
        start, first = found
        if first.base_offset >= limit:
            return ReadResult()
        end = segment.size if limit >= segment.next_offset else segment.position_of(limit)
        length = min(end - start, max_bytes)
        if min_one_batch and length < first.size:
            length = min(first.size, end - start)
        if length <= 0:
            return ReadResult()
        return ReadResult(segment, start, length)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or above the log start offset whose
        timestamp is >= `timestamp`; None when there is none (ListOffsets answers -1).

        The time index finds where to start; batch headers (max timestamp) say which batch may
        hold the record, and only that batch is decoded (ListOffsets is a cold path), as Kafka does.
        """
        start_offset = self.log_start_offset
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start_offset:
                continue
            begin = segment.position_of(max(segment.time_index.lookup(timestamp), start_offset))
            for pos, header in segment.iter_headers(begin):
                if header.max_timestamp < timestamp or header.last_offset < start_offset:
                    continue
                _, records = decode_batch(segment.read(pos, header.size))
                for record in records:
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return record.offset, record.timestamp
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3).

        Decodes one batch (a cold path) to name the exact record, as Kafka 3.8+ does.
        """
        best = max(self.segments, key=lambda s: s.max_timestamp)
        if best.max_timestamp < 0:
            return None
        found = best.find(best.offset_of_max_timestamp)
        if found is None:
            return None
        pos, header = found
        _, records = decode_batch(best.read(pos, header.size))
        for record in records:
            if record.timestamp == header.max_timestamp:
                return record.offset, record.timestamp
        return header.last_offset, header.max_timestamp

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    # -- deleting ------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> None:
        """Move the log start offset up to `offset` (DeleteRecords); whole segments below it go."""
        if offset > self.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is past the high watermark {self.high_watermark}")
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        self.epochs.truncate_from_start(offset)
        self._delete_segments(lambda s, nxt: nxt is not None and nxt <= offset)

    def _delete_segments(self, predicate: object) -> int:
        """Delete leading segments while predicate(segment, next_base) holds; never the last."""
        deleted = 0
        while len(self.segments) > 1:
            nxt = self.segments[1].base_offset
            if not predicate(self.segments[0], nxt):  # type: ignore[operator]
                break
            segment = self.segments.pop(0)
            if self._scheduler is None:
                segment.delete()
            else:
                segment.detach()  # off the list now; the scheduler unlinks its files in a worker
                self._scheduler.discard([segment])
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self.epochs.truncate_from_start(self.log_start_offset)
        return deleted

    def apply_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms (by their largest timestamp, or their last write
        when none of their records has a timestamp: `LogSegment.largest_timestamp`) or beyond
        retention.bytes; returns how many. Compacted-only topics keep everything."""
        if not self.config.deletes:
            return 0
        deleted = 0
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            # The active segment goes too once it is expired: roll first, as Kafka does.
            active = self.active
            expired = now_ms - active.largest_timestamp() > retention_ms
            if active.size and expired and active.next_offset <= self.high_watermark:
                self.roll()
            deleted += self._delete_segments(
                lambda s, nxt: now_ms - s.largest_timestamp() > retention_ms and nxt <= self.high_watermark
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes

            def over(segment: LogSegment, nxt: int) -> bool:
                nonlocal excess
                if excess >= segment.size and nxt <= self.high_watermark:
                    excess -= segment.size
                    return True
                return False

            deleted += self._delete_segments(over)
        return deleted

    def truncate_to(self, offset: int, *, reason: str = "divergent tail") -> Truncation | None:
        """Remove everything at or after `offset` (a follower cutting a divergent tail).

        A batch that straddles `offset` goes too (the log then ends at its base offset), as
        Kafka's segment truncation does: a log holds whole batches only. What is removed is
        moved to the partition's quarantine directory, logged and counted
        (broker/storage/truncation.py), never deleted. Blocking (copies and fsyncs): the broker
        runs the three steps itself, the file work in a worker thread (:meth:`plan_truncation`).
        Returns what was cut, None when nothing was.
        """
        plan = self.plan_truncation(offset, reason=reason)
        if plan is None:
            return None
        plan.run()
        return self.finish_truncation(plan)

    def truncate_fully_and_start_at(self, offset: int, *, reason: str) -> Truncation | None:
        """Empty the log and start it at `offset` (a follower whose fetch offset is below the
        leader's log start, Kafka's truncateFullyAndStartAt). Every segment is quarantined.
        Blocking, like :meth:`truncate_to`."""
        plan = self.plan_truncation(offset, reason=reason, fully=True)
        assert plan is not None
        plan.run()
        return self.finish_truncation(plan)

    def plan_truncation(self, offset: int, *, reason: str, fully: bool = False,
                        failback: bool = False) -> TruncationPlan | None:
        """Step one of a truncation, on the log's thread: where to cut, which segments go. They
        are retired at once (in-flight flushes write nothing to them). Step two,
        :meth:`TruncationPlan.run`, does the file work (in a worker thread: the copy to
        quarantine, renames, cutting the file); step three, :meth:`finish_truncation`, back on the
        log's thread, changes the segment list and offsets. Nothing else may append to the log
        meanwhile (a follower's partition is the fetcher's alone). None: nothing to cut."""
        topic, partition = parse_partition_dir(self.directory.name) or (self.directory.name, -1)
        if fully:
            doomed = list(self.segments)
            plan = TruncationPlan(self.directory, topic, partition, offset, reason, self.log_end_offset,
                                  self.log_start_offset, doomed[0], 0, doomed, fully=True,
                                  has_data=self.log_end_offset > self.log_start_offset or self.active.size > 0)
        else:
            if offset >= self.log_end_offset:
                return None
            offset = max(offset, 0)
            found = self.segments[self._segment_for(offset)].find(offset)
            if found is not None:
                offset = min(offset, found[1].base_offset)
            keep = [s for s in self.segments if s.base_offset < offset] or [self.segments[0]]
            last = keep[-1]
            position = last.position_of(offset) if last.base_offset < offset else 0
            plan = TruncationPlan(self.directory, topic, partition, offset, reason, self.log_end_offset, offset,
                                  last, position, self.segments[len(keep):], failback=failback)
        self._truncations += 1  # a flush taken before now must not move the recovery point
        for segment in plan.doomed:
            segment.detach()
        return plan

    def finish_truncation(self, plan: TruncationPlan) -> Truncation | None:
        """Step three (see :meth:`plan_truncation`): the log as the truncation left it."""
        assert plan.done, "TruncationPlan.run has not completed"
        self._truncations += 1
        doomed = {id(s) for s in plan.doomed}
        self.segments = [s for s in self.segments if id(s) not in doomed]
        if plan.fully or plan.last.base_offset > plan.offset:
            # The whole log went, or its first segment started past the new end: start over.
            self.segments = [self._new_segment(plan.offset)]
            self.log_start_offset = plan.offset
        if plan.fully:
            self.epochs.truncate_from_end(-1)
            self.producers.reset()
            self.copy.reopen_if_cut(plan.offset)
            self.high_watermark = plan.offset
            self.recovery_point = plan.offset
        else:
            self._after_truncation()
        return plan.cut

    def _after_truncation(self) -> None:
        # Below the high watermark, a cut marker may belong to a transaction that is no longer
        # tracked (completed, then forgotten once the high watermark passed it): rebuilt from the
        # log (a rare cut: followers truncate above it but after an unclean election).
        below_high_watermark = self.log_end_offset < self.high_watermark
        self.epochs.truncate_from_end(self.log_end_offset)
        self.producers.truncate_after(self.log_end_offset)
        if self.copy.reopen_if_cut(self.log_end_offset):
            self.producers.clear()  # the marker went: what is left is the copy
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        delete_snapshots_after(self.directory, self.log_end_offset)
        if below_high_watermark:
            self._rebuild_transactions()

    # -- durability ----------------------------------------------------------------------

    def begin_flush(self, upto: int | None = None, now_ms: int | None = None) -> FlushJob:
        """What must be made durable for the recovery point to reach `upto` (the log end offset
        by default): the segments holding unflushed offsets below it (or index entries not yet
        written), and the leader epoch checkpoint when it changed. Taken on the log's thread;
        the job may then run in a worker while appends go on."""
        upto = self.log_end_offset if upto is None else min(upto, self.log_end_offset)
        work = [(s, s.take_unflushed()) for s in self.segments
                if s.base_offset < upto and (s.next_offset > self.recovery_point or s.has_unflushed_indexes)]
        if now_ms is not None:
            self._last_flush_ms = now_ms
        return FlushJob(upto, work, self.epochs.snapshot(), self.epochs, self._truncations)

    def end_flush(self, job: FlushJob) -> None:
        """The job has run: move the recovery point to what it made durable (not when the log
        was truncated meanwhile: the truncation moved it back already)."""
        if job.done and job.truncations == self._truncations:
            self.recovery_point = max(self.recovery_point, min(job.upto, self.log_end_offset))

    def flush(self, now_ms: int | None = None) -> None:
        """fsync every segment with unflushed data; advances the recovery point (blocking)."""
        job = self.begin_flush(now_ms=now_ms)
        job.run()
        self.end_flush(job)

    def flush_due(self, now_ms: int) -> bool:
        """Whether flush.ms has passed since the last flush and there is something to flush."""
        if self.config.flush_ms >= 2**62 or self.unflushed_messages == 0:
            return False
        if self._last_flush_ms is None:
            self._last_flush_ms = now_ms
        return now_ms - self._last_flush_ms >= self.config.flush_ms

    def flush_if_due(self, now_ms: int) -> bool:
        """Flush (blocking) when :meth:`flush_due`."""
        if self.flush_due(now_ms):
            self.flush(now_ms)
            return True
        return False

    def close(self) -> None:
        if not self.closed:
            self.take_producer_snapshot()  # as Kafka's clean shutdown: the next open replays nothing
        self.closed = True
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        """Remove the partition directory (topic deletion): renamed first, as Kafka does."""
        self.close()
        doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}-delete")
        os.replace(self.directory, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"Log({self.directory.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
                f"hw={self.high_watermark}, segments={len(self.segments)})")

