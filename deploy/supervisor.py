"""Run a child process, wait for its ready line, restart it with backoff when it dies.

Every Causeway daemon prints one line on stdout when it is ready (`causeway broker 0 ready: ...`,
`causeway wan ready: ...`); the supervisor waits for that line, reports it through
`task_status.started(...)`, and from then on copies the child's stdout into its log file. When
the child exits, it is started again after a backoff that doubles up to a cap and resets once a
child has stayed up for a while, so a crash loop never spins.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

__all__ = ["ProcessSpec", "Supervised", "StartFailed", "supervise", "log_tail"]

log = logging.getLogger(__name__)

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_AFTER_S = 60.0  # a child up this long resets the backoff
STOP_GRACE_S = 20.0


class StartFailed(Exception):
    """The child exited or stayed silent before printing its ready line."""

    def __init__(self, name: str, reason: str, log_path: Path) -> None:
        super().__init__(f"{name}: {reason}\n--- last lines of {log_path} ---\n{log_tail(log_path)}")
        self.name = name
        self.log_path = log_path


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    argv: Sequence[str]
    log_path: Path
    ready: re.Pattern[str]
    env: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 60.0


@dataclass
class Supervised:
    """What the supervisor knows of its child; `on_change` hears of every start and exit."""

    spec: ProcessSpec
    pid: int | None = None
    ready_line: str = ""
    restarts: int = 0
    healthy: bool = False
    on_change: Callable[[Supervised], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def _start(state: Supervised) -> tuple[trio.Process, trio.abc.ReceiveStream, bytes]:
    spec = state.spec
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    # A local log file, opened once per start; handed to the child, closed below.
    log_file = open(spec.log_path, "ab")  # noqa: SIM115, ASYNC230
    try:
        process = await trio.lowlevel.open_process(
            list(spec.argv), stdout=subprocess.PIPE, stderr=log_file, env={**os.environ, **spec.env},
            start_new_session=True,
        )
    finally:
        log_file.close()
    assert process.stdout is not None
    buffered = b""
    with trio.move_on_after(spec.start_timeout_s) as timer:
        while b"\n" not in buffered:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                break
            buffered += chunk
    line, _, rest = buffered.partition(b"\n")
    text = line.decode(errors="replace").strip()
    if timer.cancelled_caught or not spec.ready.search(text):
        await _stop(process)
        reason = "no ready line" if timer.cancelled_caught else f"exited or printed {text!r} instead of its ready line"
        raise StartFailed(spec.name, reason, spec.log_path)
    state.ready_line = text
    return process, process.stdout, rest


async def _copy_to_log(stream: trio.abc.ReceiveStream, path: Path, first: bytes) -> None:
    with open(path, "ab") as f:  # noqa: ASYNC230 - a local log file, opened once
        if first:
            f.write(first)
        while chunk := await stream.receive_some(65536):
            f.write(chunk)
            f.flush()


async def _stop(process: trio.Process) -> None:
    """SIGTERM, a grace period, then SIGKILL; shielded so cancellation cannot orphan it."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(STOP_GRACE_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


async def supervise(state: Supervised, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Keep the child running until cancelled; the first ready line goes to `task_status`.

    Raises StartFailed when the first start fails (so `up` can report it); later failures are
    retried with backoff and counted in `state.restarts`.
    """
    backoff = INITIAL_BACKOFF_S
    first = True
    while True:
        try:
            process, stdout, rest = await _start(state)
        except StartFailed:
            if first:
                raise
            log.warning("%s failed to restart; retrying in %.1f s", state.spec.name, backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            continue
        state.pid = process.pid
        state.healthy = True
        state._changed()
        if first:
            task_status.started(state.ready_line)
            first = False
        started_at = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_copy_to_log, stdout, state.spec.log_path, rest)
                code = await process.wait()
                nursery.cancel_scope.cancel()
        finally:
            await _stop(process)
            state.healthy = False
            state._changed()
        log.warning("%s (pid %s) exited with %s; restarting", state.spec.name, state.pid, code)
        if trio.current_time() - started_at > STABLE_AFTER_S:
            backoff = INITIAL_BACKOFF_S
        await trio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
        state.restarts += 1
        state._changed()
