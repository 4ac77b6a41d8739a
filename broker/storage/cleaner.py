"""Log compaction for `cleanup.policy=compact`: keep the latest record of every key.

A pass has three steps so that it never blocks appends or reads:

1. `plan` (on the broker's thread, instant): which finished segments to clean.
2. `build_cleaned` (in a worker thread): read those immutable segment files through their own
   file descriptors, map every key to its latest offset, and write each segment's survivors to
   `<base>.log.cleaned`, fsynced. Offsets are kept; tombstones (null values) older than
   `delete.retention.ms` go; control batches stay.
3. `swap` (on the broker's thread, fast): per segment, delete its indexes, then rename the
   cleaned file over the segment (atomic), then rebuild the indexes.

A crash at any point leaves a readable log: a stray `.cleaned` file is deleted at open, and a
segment whose indexes are missing gets them rebuilt at open.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from broker.faults import crash_point
from broker.protocol.records import BatchHeader, Record, build_batch, decode_batch, read_batch_header
from broker.storage.log import Log
from broker.storage.segment import LogSegment

__all__ = ["CleanPlan", "CleanResult", "build_cleaned", "plan", "swap"]

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
_HEADER_BYTES = 61


@dataclass(frozen=True, slots=True)
class CleanPlan:
    directory: Path
    segments: tuple[tuple[int, Path], ...]  # (base offset, .log path) of finished segments
    end_offset: int  # the active segment's base: everything below it is cleanable
    delete_retention_ms: int


@dataclass(frozen=True, slots=True)
class CleanResult:
    cleaned: tuple[tuple[int, Path], ...]  # (base offset, .cleaned path)
    records_before: int
    records_after: int
    tombstones_expire_at: int | None  # when the oldest tombstone kept may go, None if none kept


def plan(partition_log: Log, now_ms: int) -> CleanPlan | None:
    """What a pass over this log would clean, or None when nothing is dirty and no tombstone
    kept by an earlier pass has outlived delete.retention.ms (KIP-534)."""
    if not partition_log.config.compacts or len(partition_log.segments) < 2:
        return None
    end = partition_log.active.base_offset
    expiry = partition_log.tombstones_expire_at
    if end <= partition_log.cleaned_up_to and (expiry is None or now_ms < expiry):
        return None
    return CleanPlan(
        partition_log.directory,
        tuple((s.base_offset, s.path) for s in partition_log.segments[:-1]),
        end,
        partition_log.config.delete_retention_ms,
    )


def _batches(path: Path) -> list[tuple[BatchHeader, bytes]]:
    """Every whole batch of a segment file, read through a descriptor of our own."""
    out: list[tuple[BatchHeader, bytes]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + _HEADER_BYTES <= size:
            header = read_batch_header(os.pread(fd, _HEADER_BYTES, pos))
            if pos + header.size > size:
                break
            out.append((header, os.pread(fd, header.size, pos)))
            pos += header.size
    finally:
        os.close(fd)
    return out


def build_cleaned(work: CleanPlan, now_ms: int) -> CleanResult:
    """Write the cleaned copy of every planned segment (worker thread; touches no Log)."""
    latest: dict[bytes, int] = {}
    for _, path in work.segments:
        for header, data in _batches(path):
            if header.is_control:
                continue
            for record in decode_batch(data)[1]:
                if record.key is not None:
                    latest[record.key] = record.offset
    horizon = now_ms - work.delete_retention_ms
    before = after = 0
    expire_at: int | None = None
    cleaned: list[tuple[int, Path]] = []
    for base, path in work.segments:
        out_path = path.with_name(path.name + CLEANED_SUFFIX)
        with open(out_path, "wb") as out:
            for header, data in _batches(path):
                if header.is_control:
                    out.write(data)
                    continue
                _, records = decode_batch(data)
                before += len(records)
                kept = [
                    r for r in records
                    if r.key is None  # unkeyed records cannot be compacted away; keep them
                    or (latest.get(r.key) == r.offset and (r.value is not None or header.max_timestamp >= horizon))
                ]
                after += len(kept)
                if any(r.value is None and r.key is not None for r in kept):
                    due = header.max_timestamp + work.delete_retention_ms
                    expire_at = due if expire_at is None else min(expire_at, due)
                if len(kept) == len(records):
                    out.write(data)  # nothing removed: the batch passes as it is
                elif kept:
                    first = kept[0].offset
                    out.write(build_batch(
                        [Record(r.key, r.value, r.headers, r.timestamp) for r in kept],
                        base_offset=first,
                        offset_deltas=[r.offset - first for r in kept],
                        compression=header.compression,
                        producer_id=header.producer_id,
                        producer_epoch=header.producer_epoch,
                        base_sequence=(header.base_sequence + first - header.base_offset
                                       if header.base_sequence >= 0 else -1),
                        partition_leader_epoch=header.partition_leader_epoch,
                        is_transactional=header.is_transactional,
                        base_timestamp=header.base_timestamp,
                        timestamp_type=header.timestamp_type,
                    ))
            out.flush()
            os.fsync(out.fileno())
        # The cleaned copy is as old as the segment it replaces (Kafka's cleaner sets its
        # lastModified so): time retention ages a segment without record timestamps by it.
        source = path.stat()
        os.utime(out_path, ns=(source.st_atime_ns, source.st_mtime_ns))
        cleaned.append((base, out_path))
    return CleanResult(tuple(cleaned), before, after, expire_at)


def swap(partition_log: Log, work: CleanPlan, result: CleanResult) -> int:
    """Put cleaned segments in place (broker thread). Returns how many were swapped."""
    swapped = 0
    by_base = {s.base_offset: i for i, s in enumerate(partition_log.segments[:-1])}
    for base, cleaned_path in result.cleaned:
        index = by_base.get(base)
        if index is None:
            cleaned_path.unlink(missing_ok=True)  # retention or DeleteRecords removed it meanwhile
            continue
        old = partition_log.segments[index]
        # Indexes first: should we crash after the rename, open() finds none and rebuilds them
        # instead of trusting positions that point into the old file.
        old.offset_index.delete()
        old.time_index.delete()
        crash_point("cleaner-mid-swap")
        os.replace(cleaned_path, old.path)
        old.close_quietly()
        new = LogSegment(partition_log.directory, base, index_max_bytes=partition_log.config.segment_index_bytes,
                         create=False)
        new._index_interval = partition_log.config.index_interval_bytes
        new.recover(check_crc=False)
        new.txn_index.entries = old.txn_index.entries  # the same file: the markers stay in the segment
        partition_log.segments[index] = new
        swapped += 1
    partition_log.cleaned_up_to = max(partition_log.cleaned_up_to, work.end_offset)
    partition_log.tombstones_expire_at = result.tombstones_expire_at
    if swapped:
        log.info("compacted %s: %d records kept of %d", partition_log.directory.name, result.records_after,
                 result.records_before)
    return swapped
