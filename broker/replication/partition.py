"""A partition replica hosted by this broker: its log, its leader epoch, its high watermark.

For now every replica is a leader of a one-replica ISR (standalone mode), so the high watermark
follows the log end offset after each append. Followers, ISR changes and ``acks=all`` waiting on
other replicas arrive with the ZooKeeper controller.

Fetches that found too little data wait on the partitions they asked for: they register a
``trio.Event`` here and every append sets the events registered at that moment.
"""

from __future__ import annotations

import trio

from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.dir_health import DirHealth
from broker.storage import AppendResult, Log, ReadResult

__all__ = ["Partition"]


class Partition:
    def __init__(self, topic: str, index: int, log: Log, *, leader_epoch: int, is_leader: bool,
                 health: DirHealth | None = None) -> None:
        self.topic = topic
        self._health = health if health is not None else DirHealth()
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self.is_leader = is_leader
        self._waiters: set[trio.Event] = set()
        if is_leader:
            log.high_watermark = log.log_end_offset

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, epoch={self.leader_epoch})"

    @property
    def high_watermark(self) -> int:
        return int(self.log.high_watermark)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a client that has newer or older metadata than ours (KIP-320).

        -1 means the client does not know the epoch and skips the check.
        """
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)

    def append(self, records: bytes | bytearray | memoryview, *, now_ms: int,
               transactional: bool = False) -> AppendResult:
        """Append a produce request's batches as leader; wakes waiting fetches.

        Raises KafkaError from the log (corrupt batch, too large, sequence errors),
        NOT_LEADER_OR_FOLLOWER when this replica does not lead, KAFKA_STORAGE_ERROR when the
        disk refuses the write (full, failing): the log keeps none of a failed batch.
        """
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        root = self.log.directory.parent
        try:
            result = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms,
                                               transactional=transactional)
        except OSError as exc:
            raise self._health.failed(root, exc, f"appending to {self.topic}-{self.index}") from exc
        self._health.succeeded(root)
        if not result.duplicate:
            # A one-replica ISR: everything appended is committed.
            self.log.high_watermark = self.log.log_end_offset
            self._wake()
        return result

    async def wait_flushed(self, result: AppendResult) -> None:
        """When `result`'s append reached flush.messages, return once it is fsynced.

        Kafka's append flushes inline, so a produce at flush.messages is acknowledged after
        the fsync. Here the fsync runs in a worker thread (broker/storage/flusher.py) while the
        event loop serves everyone else; only this request waits. Raises KAFKA_STORAGE_ERROR
        when the disk refuses (the records are in the log, as after a Kafka flush failure)."""
        scheduler = self.log.scheduler
        if not result.needs_flush or scheduler is None:
            return
        root = self.log.directory.parent
        try:
            await scheduler.flush(self.log, result.last_offset + 1)
        except OSError as exc:
            raise self._health.failed(root, exc, f"flushing {self.topic}-{self.index}") from exc

    def read(self, fetch_offset: int, max_bytes: int, *, min_one_batch: bool) -> ReadResult:
        """Read committed batches for a consumer (never past the high watermark)."""
        return self.log.read(
            fetch_offset, max_bytes, upper_bound=self.log.high_watermark, min_one_batch=min_one_batch
        )

    def add_waiter(self, event: trio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def _wake(self) -> None:
        if self._waiters:
            for event in self._waiters:
                event.set()
            self._waiters.clear()
