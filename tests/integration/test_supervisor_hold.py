"""`hold` and `release`: a supervised child stopped on purpose stays down until released, and its
stop is no restart (what the chaos rig's process faults rely on)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import trio

from deploy.supervisor import ProcessSpec, Supervised, hold, release, supervise

READY = re.compile(r"^child ready: (\d+)$")
# Prints its ready line; on SIGTERM writes a marker (a clean shutdown) and exits.
CHILD = """import os, signal, sys, time
marker = sys.argv[1]
def stop(*_):
    open(marker, "w").write(str(os.getpid()))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print(f"child ready: {os.getpid()}", flush=True)
time.sleep(600)
"""


def spec(tmp_path: Path) -> ProcessSpec:
    return ProcessSpec("child", [sys.executable, "-c", CHILD, str(tmp_path / "stopped")], tmp_path / "child.log", READY)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("hard", [True, False], ids=["kill", "terminate"])
async def test_a_held_child_stays_down_until_released(tmp_path: Path, hard: bool) -> None:
    starts: list[int | None] = []

    def on_change(s: Supervised) -> None:
        if s.healthy:
            starts.append(s.pid)

    state = Supervised(spec(tmp_path), on_change=on_change)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervise, state)
        first = state.pid
        assert first is not None
        with trio.fail_after(30):
            await hold(state, hard=hard)
        assert gone(first) and not state.healthy
        # SIGKILL leaves no chance to clean up; SIGTERM lets the child shut down cleanly.
        assert (tmp_path / "stopped").exists() is not hard
        assert starts == [first]  # held: the supervisor started nothing in its place
        with pytest.raises(RuntimeError, match="already held"):
            await hold(state)
        with trio.fail_after(30):
            line = await release(state)
        assert state.healthy and state.pid != first and line == f"child ready: {state.pid}"
        assert starts == [first, state.pid]
        assert state.restarts == 0  # stopped on purpose: not a child that died on its own
        with pytest.raises(RuntimeError, match="not held"):
            await release(state)
        nursery.cancel_scope.cancel()
