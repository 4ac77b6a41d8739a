"""All partition logs of a broker, across its log dirs, and the checkpoint files at their roots."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from broker import metrics
from broker.protocol.errors import ErrorCode, KafkaError
from broker.storage.checkpoints import CheckpointError, read_offsets, write_offsets
from broker.storage.config import LogConfig
from broker.storage.epoch_cache import EpochSnapshot, LeaderEpochCache
from broker.storage.flusher import Flusher
from broker.storage.lock import LogDirLock
from broker.storage.log import Log, parse_partition_dir

__all__ = ["LogManager"]

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
REPLICATION_FILE = "replication-offset-checkpoint"


def _read_or_forget(path: Path, consequence: str) -> dict[tuple[str, int], int]:
    """An offset checkpoint, or {} with a warning naming it when it does not parse: a damaged
    checkpoint must never keep the broker from starting (the data is the truth; Kafka's
    checkpoints are hints for a faster start). The bad file is rewritten at the next checkpoint."""
    try:
        return read_offsets(path)
    except CheckpointError as exc:
        log.warning("ignoring damaged checkpoint %s (%s): %s", path, exc, consequence)
        return {}


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """The offsets of every log as they stood at one moment, taken on the loop and written by
    :meth:`LogManager.write_checkpoints` in a worker thread."""

    files: tuple[tuple[Path, dict[tuple[str, int], int]], ...]
    epochs: tuple[tuple[LeaderEpochCache, EpochSnapshot], ...]


class LogManager:
    def __init__(self, log_dirs: list[Path], default_config: LogConfig) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self._logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], Path] = {}
        # Logs per dir, kept as logs come and go: `place` reads it, so creating N partitions
        # costs O(N), not a count of every existing log for each new one.
        self._held: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)
        self._locks: list[LogDirLock] = []
        self.flusher: Flusher | None = None
        self._checkpoint_lock = threading.Lock()  # one writer of the checkpoint files at a time
        self._is_offline: Callable[[Path], bool] = lambda _root: False

    def place_only_online(self, is_offline: Callable[[Path], bool]) -> None:
        """From now on new partitions go only to log dirs for which ``is_offline(root)`` is false
        (ZooKeeper mode: the replica manager's DirHealth), as Kafka's LogManager creates logs only
        in its live dirs: a replica placed in an offline dir could neither lead nor follow."""
        self._is_offline = is_offline

    def use_flusher(self, flusher: Flusher) -> None:
        """From now on every log leaves its blocking disk work to `flusher` (worker threads)."""
        self.flusher = flusher
        for partition_log in self._logs.values():
            partition_log.scheduler = flusher

    def _own(self, partition_log: Log) -> Log:
        if self.flusher is not None:
            partition_log.scheduler = self.flusher
        return partition_log

    def lock_dirs(self) -> None:
        """Lock every log dir (Kafka's `.lock`) for this process's life, before anything in them
        is read. Raises LogDirLockedError naming the dir and the holder's pid; then no dir stays
        locked and nothing was written."""
        taken: list[LogDirLock] = []
        try:
            for root in self.log_dirs:
                lock = LogDirLock(root)
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in taken:
                lock.release()
            raise
        self._locks = taken

    def unlock_dirs(self) -> None:
        for lock in self._locks:
            lock.release()
        self._locks = []

    def load_all(self, now_ms: int) -> None:
        """Open every partition found in the log dirs, recovering what an unclean stop left.

        A partition absent from the recovery-point checkpoint (or every partition, when the
        checkpoint is missing after a crash) is fully recovered: every batch checked by CRC.
        """
        for root in self.log_dirs:
            root.mkdir(parents=True, exist_ok=True)
            recovery = _read_or_forget(root / RECOVERY_POINT_FILE, "every log of this dir is recovered from scratch")
            starts = _read_or_forget(root / LOG_START_FILE, "log start offsets fall back to the first segments")
            replication = _read_or_forget(root / REPLICATION_FILE, "high watermarks start at 0 and follow the ISR")
            for child in sorted(root.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith("-delete"):
                    # A deletion interrupted by a crash: the rename happened, the removal did not.
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                key = parse_partition_dir(child.name)
                if key is None:
                    continue
                # The high watermark is what was checkpointed, 0 without one (a crash before the
                # first checkpoint), never the log end: past the checkpoint, the records may not be
                # on the ISR (a follower's tail, an old leader's unacknowledged writes). Kafka's
                # rule; the replica's role moves it on: a leader of an ISR of one (a standalone
                # broker) at once to its log end, a bigger ISR as followers report, a follower
                # from its leader's fetch answers.
                opened = Log.open(child, self.default_config, recovery_point=recovery.get(key),
                                  log_start_offset=starts.get(key, 0), now_ms=now_ms,
                                  high_watermark=replication.get(key, 0))
                self._logs[key] = opened
                self._set_dir(key, root)
        log.info("loaded %d partition logs", len(self._logs))

    def get(self, topic: str, partition: int) -> Log:
        found = self._logs.get((topic, partition))
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        return found

    def get_or_create(self, topic: str, partition: int, config: LogConfig) -> Log:
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            existing.update_config(config)
            return existing
        root = self.place(1)[0]
        created = self._own(Log.open(root / f"{topic}-{partition}", config, recovery_point=0))
        self._logs[key] = created
        self._set_dir(key, root)
        return created

    # Creating many partitions without blocking the event loop (ReplicaManager): the loop picks
    # the dirs (`place`), a worker thread opens the logs (`Log.open`, no shared state touched),
    # the loop registers them (`adopt`).

    def place(self, count: int) -> list[Path]:
        """Log dirs for `count` new partitions, each to the online dir holding the fewest, as Kafka's
        LogManager.nextLogDirs (ties go to the first in ``log.dirs``).

        Raises KafkaError(KAFKA_STORAGE_ERROR) when no log dir is online, Kafka's answer for a log
        it cannot create; nothing is placed then."""
        online = [d for d in self.log_dirs if not self._is_offline(d)]
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"no log dir is online to create a partition in (offline: "
                             f"{', '.join(map(str, self.log_dirs))})")
        counts = {d: self._held.get(d, 0) for d in online}
        out = []
        for _ in range(count):
            root = min(online, key=lambda d: counts[d])
            counts[root] += 1
            out.append(root)
        return out

    def adopt(self, topic: str, partition: int, root: Path, opened: Log) -> Log:
        """Register a log opened elsewhere (an existing one wins: the caller closes `opened`)."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        self._logs[key] = self._own(opened)
        self._set_dir(key, root)
        return opened

    def _set_dir(self, key: tuple[str, int], root: Path) -> None:
        self._forget_dir(key)
        self._dir_of[key] = root
        self._held[root] = self._held.get(root, 0) + 1

    def _forget_dir(self, key: tuple[str, int]) -> None:
        root = self._dir_of.pop(key, None)
        if root is not None:
            self._held[root] -= 1

    def detach(self, topic: str, partition: int) -> Log | None:
        """Unregister a partition's log without touching its files (the caller deletes them,
        in a worker thread)."""
        key = (topic, partition)
        self._forget_dir(key)
        return self._logs.pop(key, None)

    def delete(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        doomed = self._logs.pop(key, None)
        self._forget_dir(key)
        if doomed is not None:
            doomed.delete()

    def logs(self) -> dict[tuple[str, int], Log]:
        return dict(self._logs)

    def checkpoint(self) -> None:
        """Write the three offset checkpoints of every log dir (blocking)."""
        self.write_checkpoints(self.take_checkpoints())

    def take_checkpoints(self) -> Checkpoints:
        """What :meth:`write_checkpoints` writes, as it stands now (on the logs' thread)."""
        files: list[tuple[Path, dict[tuple[str, int], int]]] = []
        for root in self.log_dirs:
            keys = [k for k, d in self._dir_of.items() if d == root]
            files.append((root / RECOVERY_POINT_FILE, {k: self._logs[k].recovery_point for k in keys}))
            files.append((root / LOG_START_FILE, {k: self._logs[k].log_start_offset for k in keys}))
            files.append((root / REPLICATION_FILE, {k: self._logs[k].high_watermark for k in keys}))
        # Leader epoch checkpoints changed since their last write (deferred by the logs).
        epochs = [(lg.epochs, snap) for lg in self._logs.values() if (snap := lg.epochs.snapshot()) is not None]
        return Checkpoints(tuple(files), tuple(epochs))

    def write_checkpoints(self, checkpoints: Checkpoints) -> None:
        """Write what :meth:`take_checkpoints` took (any thread; blocking: each file is fsynced)."""
        with self._checkpoint_lock:
            for path, offsets in checkpoints.files:
                write_offsets(path, offsets)
        for cache, snapshot in checkpoints.epochs:
            try:
                cache.write(snapshot)
            except FileNotFoundError:
                pass  # the partition was deleted meanwhile

    async def checkpoint_in_thread(self) -> None:
        """:meth:`checkpoint` with the writing in a worker thread."""
        await trio.to_thread.run_sync(self.write_checkpoints, self.take_checkpoints())

    def apply_retention(self, now_ms: int) -> int:
        deleted = 0
        for key, partition_log in list(self._logs.items()):
            count = partition_log.apply_retention(now_ms)
            if count:
                log.info("retention deleted %d segment(s) of %s-%d", count, *key)
            deleted += count
        metrics.RETENTION_CHECKS.inc()
        return deleted

    def flush_due(self, now_ms: int) -> int:
        """Flush (blocking) every log whose flush.ms has passed; returns how many."""
        return sum(1 for partition_log in self._logs.values() if partition_log.flush_if_due(now_ms))

    async def flush_due_in_thread(self, now_ms: int) -> int:
        """:meth:`flush_due` with the fsyncs in worker threads (through the flusher)."""
        flusher = self.flusher or Flusher()
        due = [lg for lg in self._logs.values() if lg.flush_due(now_ms)]
        for partition_log in due:
            await flusher.flush(partition_log, now_ms=now_ms)
        return len(due)

    def close(self) -> None:
        """Flush every log, write the checkpoints (a clean stop needs no recovery), close."""
        if self.flusher is not None:
            self.flusher.delete_discarded_now()
        for partition_log in self._logs.values():
            partition_log.flush()
        self.checkpoint()
        for partition_log in self._logs.values():
            partition_log.close()
