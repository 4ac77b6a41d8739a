"""Waiting for a condition that another process (or the mirror's tasks) will make true.

A broker in another process cannot tell this test when a record has arrived, so the test asks
again every `interval_s`, up to a deadline: a bounded poll of real state, never a sleep that hopes
something happened meanwhile.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable

import trio

__all__ = ["wait_for", "wait_until"]


async def wait_for(condition: Callable[[], bool | Awaitable[bool]], *, what: str, timeout_s: float = 60.0,
                   interval_s: float = 0.05) -> None:
    """Return once `condition()` is true; raise AssertionError naming `what` at the deadline."""
    with trio.move_on_after(timeout_s):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await trio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def wait_until(condition: Callable[[], bool], *, what: str, timeout_s: float = 60.0, interval_s: float = 0.05) -> None:
    """`wait_for` for synchronous tests (threads, subprocesses, librdkafka clients)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
