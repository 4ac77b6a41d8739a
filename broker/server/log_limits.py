"""Repeated warnings, logged once and then counted: hostile peers must not fill the disk.

A broker under attack (a port scanner, a client that speaks another protocol, thousands of
connections a second) would otherwise write one line per connection: ten minutes of that once
wrote 122 MB of log. :class:`RepeatLimiter` logs the first message of each *kind* in a window,
counts the rest, and when the window is over writes one summary line::

    closing connection from 127.0.0.1:40112 on PLAINTEXT: frame size -1 outside 0..104857600
    ... and 4,211 more like this (protocol error) in the last 60 s

The window is ``causeway.log.repeat.window.ms``. Summaries are written by the next message of the
same kind after the window or by :meth:`RepeatLimiter.run`, whichever comes first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

__all__ = ["RepeatLimiter", "limiter", "limiters", "set_window", "summarise_forever"]

DEFAULT_WINDOW_S = 60.0


class _Kind:
    __slots__ = ("level", "since", "suppressed")

    def __init__(self, level: int, since: float) -> None:
        self.level = level
        self.since = since
        self.suppressed = 0


class RepeatLimiter:
    """Logs the first message of each kind per window to ``logger``; counts and summarises the rest."""

    def __init__(self, logger: logging.Logger, *, window_s: float = DEFAULT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.window_s = window_s
        self._clock = clock
        self._kinds: dict[str, _Kind] = {}

    def log(self, level: int, kind: str, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``msg % args`` unless a message of ``kind`` was logged in this window; True if logged."""
        if not self.logger.isEnabledFor(level):
            return False
        now = self._clock()
        state = self._kinds.get(kind)
        if state is not None and now - state.since < self.window_s:
            state.suppressed += 1
            return False
        if state is not None:
            self._summarise(kind, state, now)
        self._kinds[kind] = _Kind(level, now)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, kind, msg, *args)

    def info(self, kind: str, msg: str, *args: object) -> bool:
        return self.log(logging.INFO, kind, msg, *args)

    def error(self, kind: str, msg: str, *args: object, exc_info: bool = False) -> bool:
        return self.log(logging.ERROR, kind, msg, *args, exc_info=exc_info)

    def flush(self, *, force: bool = False) -> None:
        """Write the summary of every window that is over (every window, with ``force``)."""
        now = self._clock()
        for kind, state in list(self._kinds.items()):
            if force or now - state.since >= self.window_s:
                self._summarise(kind, state, now)
                del self._kinds[kind]

    def _summarise(self, kind: str, state: _Kind, now: float) -> None:
        if state.suppressed:
            seconds = max(1, round(min(now - state.since, self.window_s)))
            self.logger.log(state.level, "... and %s more like this (%s) in the last %d s",
                            f"{state.suppressed:,}", kind, seconds)
            state.suppressed = 0

    def suppressed(self, kind: str) -> int:
        state = self._kinds.get(kind)
        return state.suppressed if state is not None else 0


_LIMITERS: dict[str, RepeatLimiter] = {}


def limiter(logger: logging.Logger) -> RepeatLimiter:
    """The shared limiter of ``logger`` (one per logger, so its kinds are counted together)."""
    found = _LIMITERS.get(logger.name)
    if found is None:
        found = _LIMITERS[logger.name] = RepeatLimiter(logger, window_s=DEFAULT_WINDOW_S)
    return found


def limiters() -> list[RepeatLimiter]:
    return list(_LIMITERS.values())


def set_window(window_s: float) -> None:
    """Set the window of every shared limiter, present and future (from the broker's config)."""
    global DEFAULT_WINDOW_S
    DEFAULT_WINDOW_S = window_s
    for item in _LIMITERS.values():
        item.window_s = window_s


async def summarise_forever(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Write due summaries of every shared limiter, a few times per window, until cancelled."""
    task_status.started()
    try:
        while True:
            await trio.sleep(max(DEFAULT_WINDOW_S / 4, 0.05))
            for item in limiters():
                item.flush()
    finally:
        for item in limiters():
            item.flush(force=True)
