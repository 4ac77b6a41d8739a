"""Accepting under EMFILE: back off (doubling, capped), give idle segment files back, log once."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
import trio

from broker.config import ListenerSpec
from broker.log_limits import RepeatLimiter
from broker.server import listeners
from broker.storage.handles import FileHandleCache


class _Starved(trio.abc.Listener[trio.SocketStream]):
    """accept() fails with EMFILE `failures` times, then yields one connection, then waits."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[float] = []

    async def accept(self) -> trio.SocketStream:
        await trio.lowlevel.checkpoint()
        self.attempts.append(trio.current_time())
        if len(self.attempts) <= self.failures:
            raise OSError(errno.EMFILE, "Too many open files")
        if len(self.attempts) == self.failures + 1:
            return object()  # type: ignore[return-value]
        await trio.sleep_forever()
        raise AssertionError

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_accept_failures_back_off_and_shed_idle_segment_files(
        autojump_clock: trio.abc.Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    cache = FileHandleCache(8)
    monkeypatch.setattr(listeners, "HANDLES", cache)
    monkeypatch.setattr(listeners, "_limited", RepeatLimiter(listeners.log))  # no earlier test's window
    idle = tmp_path / "idle.log"
    idle.write_bytes(b"x")
    with cache.use(idle, lambda: os.open(idle, os.O_RDONLY)):
        pass
    assert len(cache) == 1
    listener = _Starved(failures=8)
    accepted = trio.Event()

    async def handler(stream: object, spec: ListenerSpec) -> None:
        accepted.set()

    with caplog.at_level(logging.ERROR, logger="broker.server.listeners"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listeners.accept_loop, listener,  # type: ignore[arg-type]
                               ListenerSpec("PLAINTEXT", "127.0.0.1", 0), handler, nursery)
            await accepted.wait()
            nursery.cancel_scope.cancel()
    gaps = [round(b - a, 3) for a, b in zip(listener.attempts, listener.attempts[1:], strict=False)]
    assert gaps[:8] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert len(cache) == 0  # the idle descriptor was given back for the connection
    lines = [r for r in caplog.records if "accept on" in r.getMessage()]
    assert len(lines) == 1 and "RLIMIT_NOFILE" in lines[0].getMessage()  # the rest are counted
