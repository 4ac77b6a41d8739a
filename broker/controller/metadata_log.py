"""Appending to ``cluster-metadata.log``: group commit in worker threads, compaction into the snapshot.

A change is applied to the :class:`MetadataImage` at once (a concurrent request sees it), queued,
and acknowledged once its batch is on disk. The changes that arrive while one batch is being
written and fsynced form the next batch: one ``write`` and one fsync however many requests wait
(Kafka's group commit; KRaft's controller appends each request's records as one batch, so a
CreateTopics of 100 topics is one write there too). No background task: the first waiter finds
nobody writing and writes, the others wait for it (leader and followers), so the controller needs
no nursery and a unit test needs no running broker.

The loop takes, a worker thread does, the loop applies (as ``broker/storage/flusher.py``): the
loop encodes a batch (small, proportional to the change), the thread writes and fsyncs it, the loop
acknowledges. A failed write (a full disk) is cut back off the file, and the batch, with every
change queued behind it, is undone newest first, so the image is again exactly what is on disk,
and each request answers KAFKA_STORAGE_ERROR. When even the cut fails, the log refuses every change
until a restart (Kafka takes a failed log dir offline).

Compaction: once the log holds more bytes than the snapshot (and at least
``MIN_LOG_BYTES_BEFORE_SNAPSHOT``), the writer, still holding its turn, writes the image as of its
batch as a new snapshot and empties the log. Each snapshot is at most twice the log bytes appended
since the one before, so creating N topics writes O(N) bytes in all, and the disk holds at most
about twice the image. KRaft snapshots every ``metadata.log.max.record.bytes.between.snapshots``
(20 MiB); a fixed interval would make the total quadratic in the number of topics.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from broker.atomic_file import fsync_path, write_atomically
from broker.controller import metadata_file
from broker.controller.metadata_file import LOG_FILE, SNAPSHOT_FILE, Loaded, MetadataImage, Record
from broker.controller.model import TopicInfo
from broker.faults import crash_point
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["MIN_LOG_BYTES_BEFORE_SNAPSHOT", "MetadataLog", "PendingChange"]

log = logging.getLogger(__name__)

MIN_LOG_BYTES_BEFORE_SNAPSHOT = 64 << 10
_DURABLE = "durable"


@dataclass(slots=True)
class PendingChange:
    record: Record
    undo: Callable[[], None]
    outcome: str | None = None  # _DURABLE, or why it was not written


@dataclass(frozen=True, slots=True)
class _Snapshot:
    topics: Mapping[str, TopicInfo]
    producer_id_block_end: int
    end_offset: int


class MetadataLog:
    """The standalone controller's durable metadata; see the module docstring."""

    def __init__(self, directory: Path, cluster_id: str, loaded: Loaded) -> None:
        self._path = directory / LOG_FILE
        self._snapshot_path = directory / SNAPSHOT_FILE
        self._cluster_id = cluster_id
        self.image: MetadataImage = loaded.image
        self._next_offset = loaded.next_offset
        self._log_bytes = loaded.log_bytes
        self._snapshot_bytes = loaded.snapshot_bytes
        self._pending: list[PendingChange] = []
        self._writing = False
        self._turn_over = trio.Event()
        self._broken: str | None = None
        # Statistics, for tests and the bench: what went to disk.
        self.batches_written = 0
        self.snapshots_written = 0

    async def commit(self, record: Record) -> None:
        """Apply ``record`` to the image now; return once it is on disk.

        Raises KafkaError(KAFKA_STORAGE_ERROR), with the record undone, when it cannot be
        written. Not cancellable once applied: the change ends on disk or undone, never half.
        """
        await self.wait_durable(self.append(record))

    def append(self, record: Record) -> PendingChange:
        """The first half of :meth:`commit`, for a caller that applies several changes in a row,
        each seeing the ones before (a CreateTopics request, decided topic by topic), and then
        waits for them all at once: one batch. Apply ``record`` to the image now and queue it;
        the caller then awaits :meth:`wait_durable` with what this returns (shielded from
        cancellation, as ``commit``: the change is in the image already). Raises
        KafkaError(KAFKA_STORAGE_ERROR) when the log refuses changes."""
        if self._broken is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self._broken)
        change = PendingChange(record, self.image.apply(record))
        self._pending.append(change)
        return change

    async def wait_durable(self, change: PendingChange) -> None:
        """The second half of :meth:`commit`: return once ``change`` is on disk; raises as it."""
        with trio.CancelScope(shield=True):
            while change.outcome is None:
                if self._writing:
                    await self._turn_over.wait()
                else:
                    await self._write_turn()
        if change.outcome != _DURABLE:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the cluster metadata: {change.outcome}")

    def compact_at_start(self) -> None:
        """Write the image as the snapshot and empty the log, before anything is appended: a
        restart folds in what the log held, and a new data dir gets its snapshot (in format
        version 2, which earlier versions refuse rather than start with no topics). Blocking;
        raises OSError."""
        assert not self._writing and not self._pending
        self._snapshot_bytes = self._write_snapshot(
            _Snapshot(self.image.topics, self.image.producer_id_block_end, self._next_offset))
        self._reset_log()
        self._log_bytes = 0
        self.snapshots_written += 1

    async def _write_turn(self) -> None:
        self._writing = True
        try:
            # Let every task that is already runnable queue its change first: the changes of one
            # request made concurrently (a Metadata request that auto-creates 100 topics) then
            # go in one batch, not in a batch of one followed by a batch of the rest.
            await trio.lowlevel.checkpoint()
            batch, self._pending = self._pending, []
            if not batch:
                return
            first = self._next_offset
            snapshot = None
            try:
                data = metadata_file.encode_batch(first, [c.record for c in batch])
                if self._log_bytes + len(data) > max(self._snapshot_bytes, MIN_LOG_BYTES_BEFORE_SNAPSHOT):
                    # The image as of this batch: every applied change is in it or already on disk.
                    snapshot = _Snapshot(dict(self.image.topics), self.image.producer_id_block_end,
                                         first + len(batch))
                await trio.to_thread.run_sync(self._append, data)
            except BaseException as exc:
                # Every change taken or queued since gets an outcome: none waits for a batch that
                # no writer holds any more.
                self._undo(batch + self._pending, exc)
                self._pending = []
                if not isinstance(exc, OSError):
                    raise
                return
            self._next_offset = first + len(batch)
            self._log_bytes += len(data)
            self.batches_written += 1
            for change in batch:
                change.outcome = _DURABLE
            self._wake()  # acknowledged before the compaction, which needs no waiter
            if snapshot is not None:
                await self._compact(snapshot)
        finally:
            self._writing = False
            self._wake()

    def _wake(self) -> None:
        self._turn_over.set()
        self._turn_over = trio.Event()

    def _undo(self, failed: list[PendingChange], exc: BaseException) -> None:
        """Newest first, so each undo finds the state its change was applied to."""
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
        for change in reversed(failed):
            change.undo()
            change.outcome = reason
        log.error("cannot write %s: %s; %d metadata changes refused (KAFKA_STORAGE_ERROR)", self._path, reason,
                  len(failed))

    def _append(self, data: bytes) -> None:
        """Write and fsync one batch; on failure cut the file back to its last whole batch.
        Runs in a worker thread."""
        created = not self._path.exists()
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fdatasync(fd)
            except OSError:
                self._cut_back(fd)
                raise
        finally:
            os.close(fd)
        if created:
            fsync_path(self._path.parent)  # the new file's name survives a crash too

    def _cut_back(self, fd: int) -> None:
        try:
            os.ftruncate(fd, self._log_bytes)
            os.fdatasync(fd)
        except OSError as exc:
            # Whatever follows would land after a partial batch, which a restart reads as damage.
            self._broken = (f"{self._path} could not be cut back to its last whole batch after a failed write "
                            f"({exc.strerror or exc}); metadata changes are refused until the broker restarts")
            log.error("%s", self._broken)

    async def _compact(self, snapshot: _Snapshot) -> None:
        def compact() -> int:
            size = self._write_snapshot(snapshot)
            # A crash here leaves log records the snapshot holds already: replay skips them by offset.
            crash_point("metadata-snapshot-before-log-reset")
            self._reset_log()
            return size

        try:
            size = await trio.to_thread.run_sync(compact)
        except OSError as exc:
            # Nothing lost: the log still holds every change; the next batch tries again.
            log.warning("cannot write the metadata snapshot %s: %s; the log %s keeps growing until it can",
                        self._snapshot_path, exc.strerror or exc, self._path)
            return
        self._snapshot_bytes = size
        self._log_bytes = 0
        self.snapshots_written += 1

    def _write_snapshot(self, snapshot: _Snapshot) -> int:
        """Write the snapshot file; its size. Blocking."""
        text = metadata_file.encode(self._cluster_id, snapshot.producer_id_block_end, snapshot.topics,
                                    snapshot.end_offset)
        write_atomically(self._snapshot_path, text)
        return len(text.encode("utf-8"))

    def _reset_log(self) -> None:
        """Empty the log once the snapshot holds what it held. Blocking."""
        if self._path.exists():
            with open(self._path, "r+b") as f:
                f.truncate(0)
                os.fsync(f.fileno())

