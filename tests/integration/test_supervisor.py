"""The supervisor with real child processes: ready lines, restarts with backoff, clean stops."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest
import trio

from deploy.supervisor import ProcessSpec, StartFailed, Supervised, supervise

READY = re.compile(r"^child ready: (\d+)$")
# A child that prints its ready line, then waits to be told to stop.
CHILD = "import os, time\nprint(f'child ready: {os.getpid()}', flush=True)\ntime.sleep(600)\n"


def spec(tmp_path: Path, code: str = CHILD, **kw: object) -> ProcessSpec:
    return ProcessSpec("child", [sys.executable, "-c", code], tmp_path / "child.log", READY, **kw)  # type: ignore[arg-type]


async def test_ready_line_reported_and_a_killed_child_restarted(tmp_path: Path) -> None:
    changes: list[tuple[int | None, bool, int]] = []
    restarted = trio.Event()

    def on_change(s: Supervised) -> None:
        changes.append((s.pid, s.healthy, s.restarts))
        if s.restarts >= 1 and s.healthy:
            restarted.set()

    state = Supervised(spec(tmp_path), on_change=on_change)
    async with trio.open_nursery() as nursery:
        line = await nursery.start(supervise, state)
        first_pid = state.pid
        assert line == f"child ready: {first_pid}"
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        await restarted.wait()
        assert state.pid != first_pid and state.restarts == 1 and state.healthy
        last_pid = state.pid
        nursery.cancel_scope.cancel()
    assert last_pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(last_pid, 0)  # cancelling the supervisor stopped the child: nothing left behind


async def test_a_child_that_dies_before_ready_is_reported_with_its_log(tmp_path: Path) -> None:
    code = "import sys\nprint('boom: config error', file=sys.stderr)\nsys.exit(2)\n"
    with pytest.raises(StartFailed) as exc:
        await supervise(Supervised(spec(tmp_path, code)))
    assert "boom: config error" in str(exc.value)


async def test_a_silent_child_times_out(tmp_path: Path) -> None:
    code = "import time\ntime.sleep(600)\n"
    with pytest.raises(StartFailed) as exc:
        await supervise(Supervised(spec(tmp_path, code, start_timeout_s=0.5)))
    assert "no ready line" in str(exc.value)
