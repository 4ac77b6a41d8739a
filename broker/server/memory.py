"""A byte budget for requests that are still arriving, shared by every connection.

A Kafka frame announces its size in its first four bytes. A connection that has seen the size of
a frame it has not finished reading reserves that many bytes here before it reads more; when the
budget is spent, connections simply stop reading (TCP pushes back on their clients) until
earlier requests are answered. So a thousand connections each announcing a 90 MiB frame hold at
most ``queued.max.request.bytes`` between them, never gigabytes. (Bytes are buffered as they
arrive, never preallocated from the announced size.)
"""

from __future__ import annotations

import trio

__all__ = ["RequestMemoryPool"]


class RequestMemoryPool:
    """Counts reserved bytes against ``capacity``; ``capacity=-1`` means unbounded."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.reserved = 0
        self._lot = trio.lowlevel.ParkingLot()

    async def reserve(self, size: int) -> None:
        """Wait until ``size`` bytes fit in the budget, then take them.

        A single request larger than the whole budget could never be satisfied; the config check
        (queued.max.request.bytes >= socket.request.max.bytes) rules that out.
        """
        while self.capacity >= 0 and self.reserved + size > self.capacity:
            await self._lot.park()
        self.reserved += size

    def release(self, size: int) -> None:
        self.reserved -= size
        # Every waiter re-checks its own size; waking all is simplest and waiters are few.
        self._lot.unpark_all()

    def statistics(self) -> dict[str, int]:
        return {"capacity": self.capacity, "reserved": self.reserved, "waiting": len(self._lot)}
