"""mm2 mode's exactly-once support (KIP-618's `exactly.once.support`): the copied records and the
mirror's source positions are written in one transaction at the target.

Partition writers write inside the open transaction (`slot`: the partition is added to it before
its first write); every offset.flush.interval.ms the mirror closes the gate, waits for the
writes in flight, writes the positions they reached into the positions topic in the same
transaction and commits. A writer that waits to try again with nothing of uncertain outcome
written (a parked partition) waits outside its slot (`Slot.sleep`), so the commits go on.

A crash leaves at most an open transaction, which the restarted mirror's InitProducerId (same
transactional id) aborts; the positions it then reads, read_committed, name exactly what was
committed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from broker.client import TopicPartition
from broker.client.transactions import TransactionalProducer

__all__ = ["Slot", "TransactionGate", "transactional_id"]


def transactional_id(mirror_name: str, source_alias: str, target_alias: str) -> str:
    """One id per mirror and direction: a restarted mirror fences the one it replaces."""
    return f"causeway-mirror-{mirror_name}-{source_alias}->{target_alias}"


@dataclass
class TransactionGate:
    """The open transaction the partition writers share with the committer."""

    producer: TransactionalProducer | None = None
    added: set[TopicPartition] = field(default_factory=set)
    positions_sequence: int = 0  # the positions partition's next base sequence in this epoch
    in_flight: int = 0
    _open: trio.Event = field(default_factory=trio.Event)
    _idle: trio.Event = field(default_factory=trio.Event)
    lock: trio.Lock = field(default_factory=trio.Lock)  # a commit and a renewal never overlap

    def __post_init__(self) -> None:
        self._open.set()
        self._idle.set()

    def renewed(self, producer: TransactionalProducer) -> None:
        """A new epoch: the previous transaction is gone (aborted or completed) with its partitions."""
        self.producer = producer
        self.added.clear()
        self.positions_sequence = 0

    @asynccontextmanager
    async def slot(self, tp: TopicPartition) -> AsyncIterator[Slot]:
        """Write to `tp` inside the open transaction (waits while a commit is under way).
        Raises KafkaError or ConnectionFailed when the partition cannot be added."""
        slot = Slot(self, tp)
        try:
            await self._enter(slot)
            yield slot
        finally:
            self._leave(slot)

    async def _enter(self, slot: Slot) -> None:
        while not self._open.is_set():
            await self._open.wait()  # a commit closed it; re-checked, as another may have begun
        # Counted with no checkpoint after the check, and before the partition is added: a
        # commit starting now waits for this write.
        self.in_flight += 1
        self._idle = trio.Event() if self.in_flight == 1 else self._idle
        slot.held = True
        if slot.tp not in self.added:  # not yet in this transaction (or a commit ended the last one)
            async with self.lock:
                if slot.tp not in self.added and self.producer is not None:
                    await self.producer.add_partitions([slot.tp])
                    self.added.add(slot.tp)

    def _leave(self, slot: Slot) -> None:
        if slot.held:
            slot.held = False
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    @asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        """Hold new writes back and wait for those in flight: what is written is then final."""
        self._open = trio.Event()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()


@dataclass
class Slot:
    """One writer's place in the open transaction (`TransactionGate.slot`)."""

    gate: TransactionGate
    tp: TopicPartition
    held: bool = False

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` outside the transaction, then take a place in the open one again (a
        commit may have ended the last). Only for a writer with nothing of uncertain outcome
        written: a commit meanwhile names the positions as they stand. Raises as `slot` does."""
        self.gate._leave(self)
        await trio.sleep(seconds)
        await self.gate._enter(self)
