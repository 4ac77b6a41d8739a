"""Byte budgets shared by every connection: requests still arriving, and responses being sent.

:class:`RequestMemoryPool` counts the bytes of requests that have *arrived* and are not yet
answered, against ``queued.max.request.bytes``. A connection takes budget for what it is about to
read, right before reading it (after the socket says bytes are there), and gives it back once
the request is answered. A frame's size field never reserves anything by itself: two
connections announcing 100 MB frames and trickling a byte every few seconds hold a few bytes,
not the whole budget (they once made a 2 MB produce of another client wait 58 s).

Taking budget only as bytes arrive could deadlock (every connection holding half a frame, none
able to finish), so one connection is always able to finish its frame: the *head*, the one whose
unfinished frame started first. Everyone else shares ``capacity - socket.request.max.bytes``,
and while others wait for budget a connection that already holds some cannot take more than an
equal share of that. The head may trickle too: it still holds only what it sent, and the partial
frame deadline (``causeway.request.arrival.timeout.ms``) closes it in the end.

:class:`ResponseMemoryPool` bounds the bytes that responses being sent hold in memory (record
data read from segment files in chunks, when it cannot go out by ``sendfile``). Waiters are
served first come, first served; each connection holds one chunk at a time, so none can hold more
than its share.
"""

from __future__ import annotations

from collections import deque

import trio

__all__ = ["RequestMemoryPool", "ResponseMemoryPool"]


class RequestMemoryPool:
    """Counts reserved bytes against ``capacity`` per owner (a connection); ``-1`` is unbounded.

    ``max_request`` is the largest frame (``socket.request.max.bytes``): the part of the budget
    kept for the head so that its frame can always be completed.
    """

    def __init__(self, capacity: int, max_request: int | None = None) -> None:
        self.capacity = capacity
        self.max_request = capacity if max_request is None or capacity < 0 else min(max_request, capacity)
        self.reserved = 0
        self._held: dict[object, int] = {}
        # Owners with an unfinished frame, in the order their frames started: the first is the head.
        self._started: dict[object, None] = {}
        self._waiting: dict[object, int] = {}
        self._lot = trio.lowlevel.ParkingLot()

    def _head(self) -> object | None:
        return next(iter(self._started), None)

    def _fits(self, owner: object, size: int) -> bool:
        if self.capacity < 0:
            return True
        if self.reserved + size > self.capacity:
            return False
        head = self._head()
        if owner is head:
            return True
        shared = self.capacity - self.max_request
        head_held = self._held.get(head, 0) if head is not None else 0
        if self.reserved - head_held + size > shared:
            return False
        held = self._held.get(owner, 0)
        others_wait = len(self._waiting) > (1 if owner in self._waiting else 0)
        if held and others_wait:
            # Fair share: those holding or waiting split the shared part equally.
            owners = len(self._held.keys() | self._waiting.keys())
            if held + size > shared // max(owners, 1):
                return False
        return True

    async def reserve(self, owner: object, size: int) -> None:
        """Wait until ``size`` more bytes may be held by ``owner``, then take them.

        The first reservation after :meth:`frame_complete` (or the first ever) starts the owner's
        next frame, which sets its place in the queue for the head.
        """
        if size <= 0:
            return
        self._started.setdefault(owner, None)
        if not self._fits(owner, size):
            self._waiting[owner] = self._waiting.get(owner, 0) + 1
            try:
                while not self._fits(owner, size):
                    await self._lot.park()
            finally:
                count = self._waiting[owner] - 1
                if count:
                    self._waiting[owner] = count
                else:
                    del self._waiting[owner]
        self.reserved += size
        self._held[owner] = self._held.get(owner, 0) + size

    def release(self, owner: object, size: int) -> None:
        if size <= 0:
            return
        held = self._held.get(owner, 0) - size
        if held < 0:
            raise RuntimeError(f"releasing {size} bytes, more than the {held + size} held")
        self.reserved -= size
        if held:
            self._held[owner] = held
        else:
            self._held.pop(owner, None)
        self._wake()

    def frame_complete(self, owner: object) -> None:
        """The owner's frame has fully arrived: it stops being (or waiting to be) the head."""
        if owner in self._started:
            del self._started[owner]
            self._wake()

    def forget(self, owner: object) -> None:
        """The owner is gone (its connection closed): give back everything it held."""
        self.frame_complete(owner)
        self.release(owner, self._held.get(owner, 0))

    def held(self, owner: object) -> int:
        return self._held.get(owner, 0)

    def _wake(self) -> None:
        # Every waiter re-checks its own size; waking all is simplest and waiters are few.
        if self._lot:
            self._lot.unpark_all()

    def statistics(self) -> dict[str, int]:
        return {"capacity": self.capacity, "reserved": self.reserved, "waiting": len(self._lot),
                "owners": len(self._held)}


class ResponseMemoryPool:
    """Bytes held by responses being sent, at most ``capacity``; waiters served in order.

    A reservation larger than the capacity is cut to the capacity, so it can always be served.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.capacity = capacity
        self.reserved = 0
        self._queue: deque[tuple[int, trio.Event]] = deque()

    async def reserve(self, size: int) -> int:
        """Wait for ``size`` bytes (at most the capacity); returns what was taken, for release."""
        size = min(size, self.capacity)
        if not self._queue and self.reserved + size <= self.capacity:
            self.reserved += size
            return size
        entry = (size, trio.Event())
        self._queue.append(entry)
        try:
            await entry[1].wait()
        except BaseException:
            if entry[1].is_set():
                self.release(size)  # granted just as we were cancelled: give it back
            else:
                self._queue.remove(entry)
                self._grant()  # a smaller waiter behind us may fit now
            raise
        return size

    def release(self, size: int) -> None:
        self.reserved -= size
        self._grant()

    def _grant(self) -> None:
        while self._queue and self.reserved + self._queue[0][0] <= self.capacity:
            size, event = self._queue.popleft()
            self.reserved += size
            event.set()

    def statistics(self) -> dict[str, int]:
        return {"capacity": self.capacity, "reserved": self.reserved, "waiting": len(self._queue)}
