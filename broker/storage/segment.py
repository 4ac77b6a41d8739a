"""One segment of a partition log: `<base offset, 20 digits>.log` with its two indexes."""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from broker.protocol.errors import KafkaError
from broker.protocol.records import BATCH_HEADER_SIZE, BatchHeader, batch_crc_ok, read_batch_header
from broker.storage.file_slice import FileSlice
from broker.storage.handles import HANDLES
from broker.storage.index import IndexError_, OffsetIndex, TimeIndex
from broker.storage.txn_index import TransactionIndex

__all__ = ["MAX_RELATIVE_OFFSET", "Gaps", "LogSegment", "segment_name"]

log = logging.getLogger(__name__)

_SCAN_CHUNK = 1 << 20
# A segment's indexes hold offsets relative to its base offset in 32 bits (Kafka's
# canConvertToRelativeOffset): a batch further than this from the base goes to a new segment,
# and recovery refuses one that claims more (Kafka's ensureOffsetInRange).
MAX_RELATIVE_OFFSET = 2**31 - 1


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(slots=True)
class RecoveryResult:
    truncated_bytes: int
    batches: int
    valid_end: int = 0  # file position where the valid batches end (the cut, when there is one)
    reason: str = ""  # what was wrong at `valid_end`, when something was
    # The batch at `valid_end` is whole but claims the wrong offsets (its base offset lies
    # outside the CRC): what is cut is surveyed past it by its own length.
    offset_damage: bool = False
    # The next segment starts inside this one: nothing of this one is cut, the later segments go.
    overlap: bool = False

    @property
    def cuts(self) -> bool:
        return self.truncated_bytes > 0 or self.overlap


@dataclass(slots=True)
class Gaps:
    """Offsets that no batch holds, between batches or segments, as opening a log saw them.

    Right in a compacted log (the cleaner removes records) and in a link-mode copy (the source's
    own gaps); in any other log they mean records are missing (a segment file gone from the
    middle). The log's topic config is not known when it is opened, so its owner judges them
    later (:meth:`broker.storage.log.Log.update_config`). Bounded: a compacted log may have
    millions; the first few are kept for the report, the rest only counted.
    """

    KEEP = 8
    ranges: list[tuple[int, int]] = field(default_factory=list)  # [first missing, next held)
    count: int = 0
    offsets: int = 0

    def add(self, start: int, end: int) -> None:
        self.count += 1
        self.offsets += end - start
        if len(self.ranges) < self.KEEP:
            self.ranges.append((start, end))

    def remove(self, start: int, end: int) -> None:
        """Forget a gap already reported otherwise."""
        if (start, end) in self.ranges:
            self.ranges.remove((start, end))
        self.count -= 1
        self.offsets -= end - start

    def describe(self) -> str:
        shown = ", ".join(f"{a}..{b - 1}" for a, b in self.ranges)
        more = f" and {self.count - len(self.ranges)} more" if self.count > len(self.ranges) else ""
        return f"{self.offsets} offsets in {self.count} range(s) ({shown}{more})"


@dataclass(slots=True)
class _Held:
    """A batch recovery has read but not yet kept: offsets going back after it may show that it
    is the damaged one (see :meth:`LogSegment.recover`)."""

    position: int
    header: BatchHeader
    expected: int  # the offset the log continued at before it

    @property
    def jumped(self) -> bool:
        return self.header.base_offset > self.expected


# Called with the segment and what the scan found before a recovery cuts the file: the owner
# moves the bytes that are about to go somewhere safe (broker/storage/quarantine.py).
BeforeCut = Callable[["LogSegment", RecoveryResult], None]


class LogSegment:
    """Append-only batch file plus sparse offset and time indexes.

    Not thread-safe; the owning Log serialises access.
    """

    def __init__(self, directory: Path, base_offset: int, *, index_max_bytes: int, create: bool) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = directory / segment_name(base_offset, ".log")
        # The descriptor lives in the process's bounded cache (broker/storage/handles.py): it is
        # opened on use and may be closed while the segment sits idle.
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        with HANDLES.use(self, lambda: os.open(self.path, flags, 0o644)) as fd:
            stat = os.fstat(fd)
        self.size = stat.st_size
        # The file's last write (its mtime, then each append's time): the age of a segment none
        # of whose records has a timestamp (`largest_timestamp`).
        self.last_modified_ms = stat.st_mtime_ns // 1_000_000
        self.offset_index = OffsetIndex(directory / segment_name(base_offset, ".index"), base_offset,
                                        index_max_bytes // 8)
        self.time_index = TimeIndex(directory / segment_name(base_offset, ".timeindex"), base_offset,
                                    index_max_bytes // 12)
        # Aborted transactions whose markers are in this segment (made on its first entry).
        self.txn_index = TransactionIndex(directory / segment_name(base_offset, ".txnindex"))
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.created_ms: int | None = None
        self._bytes_since_index = 0
        # Index entries are written to their files by flushes that may run in a worker thread
        # (see `take_unflushed` / `sync`), while the loop may rewrite the same files (recovery,
        # truncation) or retire the segment (deletion, compaction). The lock orders those writes;
        # a flush taken before a rewrite (`_index_generation` moved) or after retirement writes
        # nothing, so stale entries never land in a rewritten or replaced index file.
        self._index_lock = threading.Lock()
        self._index_generation = 0
        self.retired = False  # deleted, replaced by the cleaner or closed: nothing to flush
        if create:
            self.offset_index.path.touch()
            self.time_index.path.touch()

    # -- the file ----------------------------------------------------------------------

    def _open_file(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)

    def pinned_fd(self) -> AbstractContextManager[int]:
        """The segment file's descriptor, kept open (never evicted, never reused) until the block
        ends. There is deliberately no unpinned accessor: another thread opening a file (a topic
        created in a worker thread) may evict an unpinned descriptor and get its number."""
        return HANDLES.use(self, self._open_file)

    def _pread(self, length: int, position: int) -> bytes:
        with HANDLES.use(self, self._open_file) as fd:
            return os.pread(fd, length, position)

    # -- loading -------------------------------------------------------------------------

    def load(self, *, trust_indexes: bool, before_cut: BeforeCut | None = None, next_base: int | None = None,
             gaps: Gaps | None = None) -> RecoveryResult | None:
        """Load indexes written earlier, or rebuild them by a scan when they fail their checks
        (then the scan's result is returned: it may have cut a bad tail, see `recover`).

        Trusted indexes are checked as Kafka's sanity check does, and the offsets that cost a
        header or two to read (no scan of the segment): the first index entry must point at the
        first batch, which starts at or after the segment's base offset; the last entry at its
        batch; the batches from there on must never go back, stay within the segment's relative
        offsets and end before `next_base`, the next segment's base offset.
        """
        if trust_indexes:
            try:
                self.offset_index.load(self.size)
                start = self.offset_index.lookup(2**63 - 1)
                tail = list(self.iter_headers(start))
                if self.offset_index.keys and (not tail or tail[0][1].last_offset != self.offset_index.keys[-1]):
                    raise IndexError_(f"{self.offset_index.path}: last entry does not point at its batch")
                self._check_trusted(tail, next_base, gaps)
                self.next_offset = tail[-1][1].last_offset + 1 if tail else self.base_offset
                self.time_index.load(self.next_offset)
                if self.time_index.keys:
                    self.max_timestamp = self.time_index.keys[-1]
                    self.offset_of_max_timestamp = self.time_index.values[-1]
                # The index is sparse: batches after its last entry may carry a larger timestamp,
                # and time retention must not see the segment as older than it is.
                for _, header in tail:
                    if header.max_timestamp > self.max_timestamp:
                        self.max_timestamp = header.max_timestamp
                        self.offset_of_max_timestamp = header.last_offset
                return None
            except (IndexError_, KafkaError) as exc:
                log.warning("rebuilding indexes of %s: %s", self.path, exc)
        return self.recover(check_crc=False, before_cut=before_cut, next_base=next_base, gaps=gaps)

    def _check_trusted(self, tail: list[tuple[int, BatchHeader]], next_base: int | None, gaps: Gaps | None) -> None:
        """The offset checks of a trusted segment (see :meth:`load`): raises IndexError_ when one
        fails (the caller then scans the segment, and the scan says what is wrong); notes the
        gaps it sees once every check passed."""
        if not tail:
            return
        headers = [h for _, h in tail]
        first = headers[0] if tail[0][0] == 0 else read_batch_header(self._pread(BATCH_HEADER_SIZE, 0))
        keys, values = self.offset_index.keys, self.offset_index.values
        # This broker indexes every segment's first batch; Kafka may not (an index it wrote).
        if keys and values[0] == 0 and keys[0] != first.last_offset:
            raise IndexError_(f"{self.offset_index.path}: first entry does not point at the first batch")
        if first.base_offset < self.base_offset:
            raise IndexError_(f"{self.path}: the first batch claims offset {first.base_offset}, below the base offset")
        found = [(self.base_offset, first.base_offset)] if first.base_offset > self.base_offset else []
        for before, after in zip(headers, headers[1:], strict=False):
            if after.base_offset <= before.last_offset:
                raise IndexError_(f"{self.path}: offsets go back from {before.last_offset} to {after.base_offset}")
            if after.base_offset > before.last_offset + 1:
                found.append((before.last_offset + 1, after.base_offset))
        last = headers[-1].last_offset
        if last - self.base_offset > MAX_RELATIVE_OFFSET or any(h.last_offset_delta < 0 for h in (first, *headers)):
            raise IndexError_(f"{self.path}: a batch claims offsets outside the segment's range")
        if next_base is not None and last >= next_base:
            raise IndexError_(f"{self.path}: the last batch ends at offset {last}, at or past the next segment's "
                              f"base offset {next_base}")
        if gaps is not None:
            for start, end in found:
                gaps.add(start, end)

    def recover(self, *, check_crc: bool = True, before_cut: BeforeCut | None = None,
                on_batch: Callable[[BatchHeader], None] | None = None, next_base: int | None = None,
                gaps: Gaps | None = None) -> RecoveryResult:
        """Scan every batch, rebuild both indexes, and cut the file at the first bad batch.

        A batch is bad when its header is short or malformed, it runs past the end of the file,
        (with `check_crc`) its CRC does not match, or its offsets do not follow the batch
        before it: a log's offsets never go back (each batch starts past the previous one's
        last offset, the first at or past the segment's base offset) and stay within the
        segment's 32-bit relative offsets. The base offset lies outside the CRC, so a raised
        one looks whole: when offsets go back, right after a batch that jumped ahead, to where
        that batch should have started, the jump is the damage and the cut is at that batch.
        `next_base`, the next segment's base offset, is checked after the last batch the same
        way (segments follow one another). A gap (a batch starting later than the previous
        one's end) is right in compacted logs and copies only: it is noted in `gaps`.

        `before_cut` sees the result before the file is cut, so the caller can keep what is cut
        off; without it the cut is only logged. `on_batch` sees the header of every batch kept,
        in order.
        """
        self.offset_index.keys.clear()
        self.offset_index.values.clear()
        self.time_index.keys.clear()
        self.time_index.values.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        valid_end = 0
        batches = 0
        pos = 0
        reason = ""
        offset_damage = overlap = False
        held: _Held | None = None  # the last batch read, kept once what follows agrees with it

        def keep(batch: _Held) -> None:
            nonlocal valid_end, batches
            if batch.jumped and gaps is not None:
                gaps.add(batch.expected, batch.header.base_offset)
            self._index(batch.header, batch.position)
            if on_batch is not None:
                on_batch(batch.header)
            valid_end = batch.position + batch.header.size
            batches += 1

        with self.pinned_fd() as fd:
            while pos < self.size:
                header_bytes = os.pread(fd, BATCH_HEADER_SIZE, pos)
                try:
                    header = read_batch_header(header_bytes)
                except KafkaError as exc:
                    reason = f"bad batch header at position {pos}: {exc}"
                    break
                if pos + header.size > self.size:
                    reason = f"the batch at position {pos} runs past the end of the file"
                    break
                if check_crc:
                    data = os.pread(fd, header.size, pos)
                    if not batch_crc_ok(data, 0, header):
                        reason = f"CRC mismatch in the batch at position {pos}"
                        break
                expected = held.header.last_offset + 1 if held is not None else self.next_offset
                wrong = self._offsets_wrong(header, expected) if header.base_offset < expected or (
                    header.last_offset_delta < 0 or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET) else ""
                if wrong:
                    offset_damage = True
                    backwards = header.base_offset < expected
                    if backwards and held is not None and self._jump_is_damage(held, header.base_offset):
                        reason = self._jump_reason(held, f"the next batch starts at {header.base_offset}")
                        held = None
                    else:
                        reason = (f"the batch at position {pos} claims offsets {header.base_offset}.."
                                  f"{header.last_offset}: {wrong}")
                    break
                if held is not None:
                    keep(held)
                held = _Held(pos, header, expected)
                pos += header.size
            if not reason and next_base is not None:
                end = held.header.last_offset + 1 if held is not None else self.next_offset
                if next_base < end:
                    if held is not None and self._jump_is_damage(held, next_base):
                        offset_damage = True
                        reason = self._jump_reason(held, f"the next segment starts at {next_base}")
                        held = None
                    else:
                        overlap = True
                        reason = (f"the next segment, {segment_name(next_base, '.log')}, starts at offset {next_base}, "
                                  f"inside this one (which ends at offset {end - 1}): segments never overlap")
            if held is not None:
                keep(held)
            result = RecoveryResult(self.size - valid_end, batches, valid_end, reason, offset_damage, overlap)
            if result.cuts:
                if before_cut is not None:
                    before_cut(self, result)
                else:
                    log.warning("%s: cut %d bytes at position %d: %s", self.path, result.truncated_bytes,
                                valid_end, reason)
            if result.truncated_bytes:
                os.ftruncate(fd, valid_end)
                self.size = valid_end
        with self._index_lock:
            self._index_generation += 1
            self.offset_index.rewrite()
            self.time_index.rewrite()
            self.offset_index._pending.clear()
            self.time_index._pending.clear()
        return result

    def _offsets_wrong(self, header: BatchHeader, expected: int) -> str:
        """What is wrong with the offsets a batch claims where the log continues at `expected`,
        or "" when nothing is."""
        if header.base_offset < expected:
            return f"the log continues at offset {expected} and offsets never go back"
        if header.last_offset_delta < 0 or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return f"beyond the relative offsets of a segment based at {self.base_offset}"
        return ""

    @staticmethod
    def _jump_is_damage(held: _Held, next_offset: int) -> bool:
        """Whether `held` jumped ahead and what follows it starts where it should have: its base
        offset was raised (what follows cannot start inside a batch it follows)."""
        return held.jumped and next_offset >= held.expected

    @staticmethod
    def _jump_reason(held: _Held, what_follows: str) -> str:
        h = held.header
        return (f"the batch at position {held.position} claims offsets {h.base_offset}..{h.last_offset}, but the log "
                f"continues at offset {held.expected} and {what_follows}: its base offset (outside the CRC) is corrupt")

    # -- appending -----------------------------------------------------------------------

    def _index(self, header: BatchHeader, position: int) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self._bytes_since_index >= self._index_interval or not self.offset_index.keys:
            self.offset_index.append(header.last_offset, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.next_offset = header.last_offset + 1

    _index_interval = 4096

    def append(self, data: bytes | bytearray, batches: list[tuple[int, BatchHeader]], *,
               index_interval_bytes: int, now_ms: int) -> None:
        """Write `data` (whole batches with offsets assigned) at the end; index its batches."""
        if self.created_ms is None:
            self.created_ms = now_ms
        self._index_interval = index_interval_bytes
        position = self.size
        with self.pinned_fd() as fd:
            try:
                written = os.pwrite(fd, data, position)
                if written != len(data):
                    # A full disk takes what fits; the next write says why (ENOSPC).
                    os.pwrite(fd, data[written:], position + written)
                    raise OSError(errno.ENOSPC, f"short write to {self.path}: {written} of {len(data)} bytes")
            except OSError:
                # Nothing of a failed batch may stay in the file (a later append at `position`
                # could leave its tail behind, and a crash would leave a torn batch): cut back.
                try:
                    os.ftruncate(fd, position)
                except OSError as exc:
                    log.error("%s: cannot cut a failed write back to %d bytes: %s", self.path, position, exc)
                raise
        self.last_modified_ms = now_ms
        for pos, header in batches:
            self._index(header, position + pos)
        self.size += len(data)

    # -- reading -------------------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        return self._pread(length, position)

    def slice(self, position: int, length: int, *, within_budget: bool = False) -> FileSlice | None:
        """``length`` bytes from ``position``, with the descriptor pinned until the slice is
        closed: it stays readable (and never means another file) while the slice is sent,
        even if the segment is deleted or replaced meanwhile.

        Slices draw on the broker-wide budget of pinned descriptors (``handles.py``); with
        ``within_budget`` the answer is None, at once, when it is spent.
        """
        fd = HANDLES.pin_slice(self, self._open_file, over_budget=not within_budget)
        if fd is None:
            return None
        return FileSlice(fd, position, length, lambda: HANDLES.unpin_slice(self))

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start` (a batch boundary) to `end`."""
        end = self.size if end is None else end
        pos = start
        while pos < end:
            header = read_batch_header(self._pread(BATCH_HEADER_SIZE, pos))
            yield pos, header
            pos += header.size

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The batch that holds `offset` (or the first after it), or None past the end."""
        for pos, header in self.iter_headers(self.offset_index.lookup(offset)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def position_of(self, offset: int) -> int:
        """File position where the batch holding `offset` starts; the size when past the end."""
        found = self.find(offset)
        return found[0] if found else self.size

    # -- maintenance ---------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch that starts at or after `offset`; returns bytes removed."""
        position = self.position_of(offset)
        found = self.find(offset)
        if found and found[1].base_offset < offset:
            position = found[0] + found[1].size  # keep the batch that straddles `offset`
        removed = self.size - position
        if removed <= 0:
            return 0
        with self.pinned_fd() as fd:
            os.ftruncate(fd, position)
        self.size = position
        with self._index_lock:
            self._index_generation += 1
            self.offset_index.truncate_to_position(position)
        self.txn_index.truncate_to(offset)
        # Rebuild the rest of the in-memory state from what remains.
        self.recover(check_crc=False)
        return removed

    def largest_timestamp(self) -> int:
        """The segment's age for time retention (Kafka's LogSegment.largestTimestamp): its
        records' largest timestamp, or the time of its last write when none of them has one.

        Unlike Kafka, a largest timestamp of 0 counts as none: it is what batches of records
        without a timestamp (-1) carry from librdkafka (MaxTimestamp 0), where they were stored
        before the produce path recomputed it, or were copied from such a log (a follower, a
        link-mode mirror); read as 1970, it made the next retention check delete records seconds
        after they were written. (Records really stamped 0 ms are kept one retention.ms
        after their last write instead.)"""
        return self.max_timestamp if self.max_timestamp > 0 else self.last_modified_ms

    def seal(self) -> None:
        """Index the largest timestamp once more as the segment stops being active, as Kafka
        does at a roll, so the time index of a finished segment ends at its true maximum."""
        if self.max_timestamp >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)

    @property
    def index_full(self) -> bool:
        return self.offset_index.full or self.time_index.full

    @property
    def has_unflushed_indexes(self) -> bool:
        return bool(self.offset_index._pending or self.time_index._pending)

    def take_unflushed(self) -> UnflushedIndexes:
        """The index entries made since the last flush, handed to :meth:`sync` (on the thread
        that owns the segment: appends add entries there)."""
        taken = UnflushedIndexes(self._index_generation, bytes(self.offset_index._pending),
                                 bytes(self.time_index._pending))
        self.offset_index._pending.clear()
        self.time_index._pending.clear()
        return taken

    def sync(self, indexes: UnflushedIndexes) -> None:
        """fsync the segment file and append `indexes` to the index files, fsynced. Safe in a
        worker thread while the owner goes on appending: only the file is touched, through a
        pinned descriptor, and a segment retired meanwhile (deleted, compacted) is skipped."""
        if self.retired:
            return
        try:
            # fsync through a descriptor opened after the write still flushes it: dirty pages
            # belong to the file, not to the descriptor that wrote them.
            with self.pinned_fd() as fd:
                os.fsync(fd)
        except OSError:
            if self.retired:  # deleted or replaced while we waited: nothing left to make durable
                return
            raise
        for index, data in ((self.offset_index, indexes.offset_entries), (self.time_index, indexes.time_entries)):
            if data:
                self._append_index(index.path, data, indexes.generation)
        self.txn_index.sync()

    def _append_index(self, path: Path, data: bytes, generation: int) -> None:
        with self._index_lock:
            if self.retired or generation != self._index_generation:
                return  # the file was rewritten from memory meanwhile; it holds these entries
            try:
                # No O_CREAT: a file deleted meanwhile (the cleaner replaces indexes) stays gone.
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            except FileNotFoundError:
                return
            try:
                os.write(fd, data)
            except BaseException:
                os.close(fd)
                raise
        try:
            os.fsync(fd)  # outside the lock: the loop may rewrite the file while this waits
        finally:
            os.close(fd)

    def flush(self) -> None:
        """fsync the file and write the index entries made since the last flush (blocking)."""
        self.sync(self.take_unflushed())

    def close(self) -> None:
        if not self.retired:
            self.flush_indexes()
        self.retired = True
        HANDLES.close(self)

    def flush_indexes(self) -> None:
        taken = self.take_unflushed()
        for index, data in ((self.offset_index, taken.offset_entries), (self.time_index, taken.time_entries)):
            if data:
                self._append_index(index.path, data, taken.generation)

    def close_quietly(self) -> None:
        """Close the file without touching the index files (they are being replaced)."""
        with self._index_lock:
            self.retired = True
        HANDLES.close(self)

    def detach(self) -> None:
        """Retire the segment ahead of :meth:`delete_files` (which may run in a worker thread):
        in-flight flushes stop writing to it. The descriptor closes once no fetch slice pins it."""
        with self._index_lock:
            self.retired = True
        HANDLES.close(self)

    def delete_files(self) -> None:
        """Unlink the segment's files (after :meth:`detach`; blocking, thread-safe)."""
        self.path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def delete(self) -> None:
        self.detach()
        self.delete_files()


@dataclass(frozen=True, slots=True)
class UnflushedIndexes:
    """Index entries made since a segment's last flush: what :meth:`LogSegment.sync` appends."""

    generation: int
    offset_entries: bytes
    time_entries: bytes
