"""Which thread makes a blocking call: a test wraps `os.fsync` (or any call on a file descriptor)
to show that the event loop's thread, the main one, never waits on the disk itself.

    calls = ThreadCalls()
    monkeypatch.setattr(os, "fsync", calls.wrap(os.fsync))
    ...
    assert calls.on_loop == []  # the files the loop itself synced, by path
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["ThreadCalls"]


class ThreadCalls:
    """Counts the calls a wrapped function gets from worker threads, and names the file of each
    one the main thread (trio's event loop) makes."""

    def __init__(self) -> None:
        self.on_loop: list[str] = []
        self.in_workers = 0

    def wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        """`real`, counted: a call on the main thread records the path its descriptor is open on."""

        def call(fd: int) -> None:
            if threading.current_thread() is threading.main_thread():
                self.on_loop.append(os.readlink(f"/proc/self/fd/{fd}"))
            else:
                self.in_workers += 1
            real(fd)

        return call
