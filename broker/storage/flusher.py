"""The broker's disk waits, in worker threads: fsyncs, checkpoint writes, unlinking segments.

A partition log is not thread-safe and lives on the event loop; what makes it durable blocks
on the disk for milliseconds to seconds (an fsync behind a busy disk), which on the loop would
stall every client and, with replication, every follower. The split is always the same: the
loop takes what is to be done (:meth:`Log.begin_flush`: which segments, which index entries,
which epoch entries), a worker thread does it, and the loop then applies the outcome
(:meth:`Log.end_flush` moves the recovery point). One flush per log at a time; a caller that
wants offsets durable which another flush is already covering waits for that one.

Rolls ask for the finished segment's fsync (:meth:`Flusher.request`, answered by :meth:`run`
in the background, as Kafka schedules `flushUptoOffsetExclusive` at a roll); deleted segments'
files are unlinked by :meth:`run` too (:meth:`Flusher.discard`). A produce that reaches
flush.messages awaits :meth:`Flusher.flush` before it is acknowledged.
"""

from __future__ import annotations

import logging
import weakref

import trio

from broker.storage.log import Log
from broker.storage.segment import LogSegment

__all__ = ["Flusher"]

log = logging.getLogger(__name__)


def _delete_files(segments: list[LogSegment]) -> None:
    for segment in segments:
        try:
            segment.delete_files()
        except OSError as exc:  # a file already gone, a failing disk: recovery finds it next start
            log.warning("deleting the files of %s failed: %s", segment.path, exc)


class Flusher:
    """Runs the blocking half of log durability in worker threads (see the module doc)."""

    def __init__(self) -> None:
        self._requested: dict[Log, int] = {}  # log -> offset the recovery point should reach
        self._doomed: list[LogSegment] = []
        self._wake = trio.Event()
        self._locks: weakref.WeakKeyDictionary[Log, trio.Lock] = weakref.WeakKeyDictionary()

    # -- from the loop, synchronously (a log's roll and deletions) ----------------------------

    def request(self, partition_log: Log, upto: int) -> None:
        """Make `partition_log` durable up to `upto` soon (a segment was just rolled)."""
        self._requested[partition_log] = max(upto, self._requested.get(partition_log, 0))
        self._wake.set()

    def discard(self, segments: list[LogSegment]) -> None:
        """Unlink these detached segments' files soon (retention, DeleteRecords)."""
        self._doomed.extend(segments)
        self._wake.set()

    # -- awaited ----------------------------------------------------------------------------

    async def flush(self, partition_log: Log, upto: int | None = None, *, now_ms: int | None = None) -> None:
        """Return once `partition_log`'s recovery point is at `upto` (its end offset now, by
        default): fsync in a worker thread. Raises OSError when the disk refuses."""
        target = partition_log.log_end_offset if upto is None else upto
        lock = self._locks.get(partition_log)
        if lock is None:
            lock = self._locks[partition_log] = trio.Lock()
        async with lock:
            if partition_log.closed or (upto is not None and partition_log.recovery_point >= upto):
                return  # deleted meanwhile, or a flush that ran while we waited covered it
            job = partition_log.begin_flush(target, now_ms=now_ms)
            if job.segments or job.epochs is not None:
                await trio.to_thread.run_sync(job.run)
            else:
                job.done = True
            partition_log.end_flush(job)

    def delete_discarded_now(self) -> None:
        """Unlink what is still waiting (blocking: at shutdown, from a worker thread)."""
        doomed, self._doomed = self._doomed, []
        _delete_files(doomed)

    async def delete_discarded(self) -> None:
        doomed, self._doomed = self._doomed, []
        if doomed:
            await trio.to_thread.run_sync(_delete_files, doomed)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve :meth:`request` and :meth:`discard` until cancelled."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self.delete_discarded()
            while self._requested:
                partition_log, upto = self._requested.popitem()
                try:
                    await self.flush(partition_log, upto)
                except OSError as exc:
                    # The recovery point stays where it was (recovery re-checks those segments);
                    # the next roll or flush.ms tries again.
                    log.warning("flushing %s failed: %s", partition_log.directory.name, exc)
                except Exception:  # noqa: BLE001 - one log's failure must not stop the broker
                    log.exception("flushing %s failed", partition_log.directory.name)
            await self.delete_discarded()
