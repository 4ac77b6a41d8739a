"""A group coordinator whose __consumer_offsets is a list in memory, for the state-machine tests
(test_coordinator.py, test_rebalance.py): what it writes is kept in order, and a test can make
the next writes fail. `running` runs any coordinator for the length of a test's block."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from broker.config import BrokerConfig
from broker.coordinator.coordinator import GroupCoordinator
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["Store", "coordinator", "running"]


class Store:
    """What the coordinator writes to __consumer_offsets; `fail` makes the next appends fail."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.fail: ErrorCode | None = None

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """The records' place in the list stands for their log offset (one log for every partition)."""
        if self.fail is not None:
            raise KafkaError(self.fail, "injected")
        first = len(self.records)
        self.records += [(partition, k, v) for k, v in records]
        return first

    def replay(self) -> list[tuple[int, bytes | None, bytes | None]]:
        return [(offset, k, v) for offset, (_, k, v) in enumerate(self.records)]


def coordinator(tmp_path: Path, store: Store, **extra: str) -> GroupCoordinator:
    """A coordinator writing to `store`, its config the broker's defaults with no initial
    rebalance delay, and `extra` (Kafka's names) over them."""
    props = {"log.dirs": str(tmp_path), "group.initial.rebalance.delay.ms": "0", **extra}
    return GroupCoordinator(BrokerConfig.from_properties(props), store.append)


@asynccontextmanager
async def running(c: GroupCoordinator) -> AsyncIterator[trio.Nursery]:
    """`c` running (its timers and loads) in a nursery the block may start tasks in; stopped,
    with whatever the block started, when the block ends."""
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        yield nursery
        nursery.cancel_scope.cancel()
