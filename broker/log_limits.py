"""Repeated warnings, logged once and then counted: hostile peers must not fill the disk.

A broker under attack (a port scanner, a client that speaks another protocol, thousands of
connections a second) would otherwise write one line per connection: ten minutes of that once
wrote 122 MB of log. :class:`RepeatLimiter` logs the first message of each *kind* in a window,
counts the rest, and when the window is over writes one summary line::

    closing connection from 127.0.0.1:40112 on PLAINTEXT: frame size -1 outside 0..104857600
    ... and 4,211 more like this (protocol error) in the last 60 s

The window is ``causeway.log.repeat.window.ms``. Summaries are written by the next message of the
same kind after the window or by :func:`summarise_forever`, whichever comes first.

Two layers, so that no line a peer can cause floods the log, including one written later:

- :class:`RepeatLimiter` (``limiter(log).warning(kind, ...)``): what a peer can cause by what it
  sends (a request, a znode, a connection's behaviour) is logged through it, once per kind and
  window. Every such line in the broker goes this way.
- :class:`CallSiteLimit`: a filter on the broker process's log handlers that lets through at
  most ``burst`` records per call site (file and line) and window, and cuts each message to
  ``MAX_MESSAGE_CHARS``, whatever logged it. A line nobody routed through a limiter is bounded
  too: the log grows by at most (call sites x burst) lines of bounded length per window. The
  burst is generous (a broker starting with hundreds of partitions still logs most of its
  per-partition lines); what it suppresses is summarised the same way, naming the call site.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import trio

__all__ = ["CallSiteLimit", "RepeatLimiter", "limit_call_sites", "limiter", "limiters", "set_window",
           "summarise_forever"]

DEFAULT_WINDOW_S = 60.0
DEFAULT_BURST = 100  # records per call site and window that CallSiteLimit lets through
MAX_MESSAGE_CHARS = 4096  # a longer message (a peer's 32 KiB group id, say) is cut to this
_SUMMARY = "... and %s more like this (%s) in the last %d s"


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
        return self._log(level, kind, msg, args, exc_info)

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        return self._log(logging.WARNING, kind, msg, args)

    def info(self, kind: str, msg: str, *args: object) -> bool:
        return self._log(logging.INFO, kind, msg, args)

    def error(self, kind: str, msg: str, *args: object, exc_info: bool = False) -> bool:
        return self._log(logging.ERROR, kind, msg, args, exc_info)

    def _log(self, level: int, kind: str, msg: str, args: tuple[object, ...], exc_info: bool = False) -> bool:
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
        # stacklevel 3: the record names the line that called warning() (or log()), not this one,
        # so that CallSiteLimit tells the kinds apart.
        self.logger.log(level, msg, *args, exc_info=exc_info, stacklevel=3)
        return True

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
            self.logger.log(state.level, _SUMMARY, f"{state.suppressed:,}", kind, seconds)
            state.suppressed = 0

    def suppressed(self, kind: str) -> int:
        state = self._kinds.get(kind)
        return state.suppressed if state is not None else 0


class _Site:
    __slots__ = ("level", "name", "passed", "since", "suppressed")

    def __init__(self, record: logging.LogRecord, since: float) -> None:
        self.level = record.levelno
        self.name = record.name
        self.since = since
        self.passed = 0
        self.suppressed = 0


class CallSiteLimit(logging.Filter):
    """A handler filter: at most ``burst`` records per call site and window reach ``handler``;
    the rest are counted and summarised (through ``handler``) when the window is over.

    Call sites are the lines of the program that log, so what this keeps is bounded by the code,
    not by what peers send. Messages are cut to ``MAX_MESSAGE_CHARS``.
    """

    def __init__(self, handler: logging.Handler, *, burst: int = DEFAULT_BURST, window_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.handler = handler
        self.burst = burst
        self._window_s = window_s
        self._clock = clock
        self._sites: dict[tuple[str, int], _Site] = {}
        self._lock = threading.Lock()  # records come from worker threads too (the flusher, the cleaner)

    @property
    def window_s(self) -> float:
        return self._window_s if self._window_s is not None else DEFAULT_WINDOW_S

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "causeway_summary", False):
            return True
        now = self._clock()
        key = (record.pathname, record.lineno)
        with self._lock:
            site = self._sites.get(key)
            summary = None
            if site is not None and now - site.since >= self.window_s:
                summary = self._summary(key, site, now)
                site = None
            if site is None:
                site = self._sites[key] = _Site(record, now)
            passed = site.passed < self.burst
            if passed:
                site.passed += 1
            else:
                site.suppressed += 1
        if summary is not None:
            self.handler.handle(summary)
        if passed:
            _cut(record)
        return passed

    def flush(self, *, force: bool = False) -> None:
        """Summarise (and forget) every call site whose window is over (every one, with ``force``)."""
        now = self._clock()
        summaries = []
        with self._lock:
            for key, site in list(self._sites.items()):
                if force or now - site.since >= self.window_s:
                    summaries.append(self._summary(key, site, now))
                    del self._sites[key]
        for summary in summaries:
            if summary is not None:
                self.handler.handle(summary)

    def _summary(self, key: tuple[str, int], site: _Site, now: float) -> logging.LogRecord | None:
        if not site.suppressed:
            return None
        seconds = max(1, round(min(now - site.since, self.window_s)))
        where = f"{os.path.basename(key[0])}:{key[1]}"
        record = logging.LogRecord(site.name, site.level, key[0], key[1], _SUMMARY,
                                   (f"{site.suppressed:,}", where, seconds), None)
        record.causeway_summary = True
        site.suppressed = 0
        return record


def _cut(record: logging.LogRecord) -> None:
    """Cut ``record``'s message to MAX_MESSAGE_CHARS, formatting it here if it is longer."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string is the handler's to report, as logging does
        return
    if len(message) > MAX_MESSAGE_CHARS:
        record.msg = f"{message[:MAX_MESSAGE_CHARS]} ... [{len(message) - MAX_MESSAGE_CHARS:,} more characters]"
        record.args = None


_LIMITERS: dict[str, RepeatLimiter] = {}
_SITE_LIMITS: list[CallSiteLimit] = []


def limit_call_sites(logger: logging.Logger | None = None, *, burst: int = DEFAULT_BURST) -> None:
    """Put a CallSiteLimit on each handler of ``logger`` (the root logger by default) that has none.

    For a broker process's own handlers (its entry point calls this); tests in one process with
    other code leave theirs alone."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, CallSiteLimit) for f in handler.filters):
            limit = CallSiteLimit(handler, burst=burst)
            handler.addFilter(limit)
            _SITE_LIMITS.append(limit)


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
            _flush_all(force=False)
    finally:
        _flush_all(force=True)


def _flush_all(*, force: bool) -> None:
    for item in limiters():
        item.flush(force=force)
    for site_limit in _SITE_LIMITS:
        site_limit.flush(force=force)
