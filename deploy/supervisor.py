"""Run a child process, wait for its ready line, restart it with backoff when it dies.

Every Causeway daemon prints one line on stdout when it is ready (`causeway broker 0 ready: ...`,
`causeway wan ready: ...`); the supervisor waits for that line, reports it through
`task_status.started(...)`, and from then on copies the child's stdout into its log file. When
the child exits, it is started again after a backoff that doubles up to a cap and resets once a
child has stayed up for a while, so a crash loop never spins.

A child dies with its supervisor: it is started (deploy/child_process.py) from the trio thread
with a parent-death signal, so a supervisor that is SIGKILLed leaves no orphans. The signal fires
when the *thread* that forked exits, which is why the fork happens here and not in one of trio's
worker threads (`trio.lowlevel.open_process` forks in one, and those exit after a few idle
seconds). The trio thread lives as long as every supervisor running in it.

`hold` and `release` stop a supervised child on purpose and start it again (the chaos rig's
process faults): a held child is not restarted behind its caller's back, and its stop is no
restart in `Supervised.restarts`, which counts only the children that died on their own.
"""

from __future__ import annotations

import logging
import os
import re
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from broker.retry import Backoff
from deploy.child_process import ChildProcess, log_tail
from deploy.process_identity import Identity, identity_of

__all__ = ["ProcessSpec", "Supervised", "StartFailed", "hold", "release", "supervise"]

log = logging.getLogger(__name__)

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
# No jitter: one supervisor per child, so nothing restarts in step with it.
RESTART_BACKOFF = Backoff(initial_s=INITIAL_BACKOFF_S, max_s=MAX_BACKOFF_S, jitter=0.0)
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
    """What the supervisor knows of its child; `on_change` hears of every start and exit.

    `on_ready` runs after each ready line, the first included, before the child counts as
    healthy: what must be redone for every new process (the launcher re-creates the WAN
    emulator's proxies and toxics there). If it raises, that start counts as failed.
    """

    spec: ProcessSpec
    pid: int | None = None
    identity: Identity | None = None  # pid, start time and command line, from /proc
    ready_line: str = ""
    restarts: int = 0
    healthy: bool = False
    on_change: Callable[[Supervised], None] | None = None
    on_ready: Callable[[Supervised], Awaitable[None]] | None = None
    # The supervisor's side of `hold`/`release`: the running child, set when held (released by
    # setting it), set once a held child is gone, and set while the child is healthy.
    _process: _Running | None = field(default=None, repr=False)
    _held: trio.Event | None = field(default=None, repr=False)
    _gone: trio.Event = field(default_factory=trio.Event, repr=False)
    _up: trio.Event = field(default_factory=trio.Event, repr=False)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)


class _Running:
    """The supervised child and the read end of its stdout, which trio reads."""

    def __init__(self, child: ChildProcess, stdout: trio.lowlevel.FdStream) -> None:
        self.child = child
        self.stdout = stdout


def _spawn(spec: ProcessSpec) -> _Running:
    """Start the child on the calling (trio) thread: see the module docstring for why. It blocks
    only until the exec has happened, a few milliseconds."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        child = ChildProcess.start(spec.name, spec.argv, log_path=spec.log_path, stdout=write_end, env=spec.env,
                                   die_with_parent=True)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return _Running(child, trio.lowlevel.FdStream(read_end))


async def _start(state: Supervised) -> tuple[_Running, bytes]:
    spec = state.spec
    process = state._process = _spawn(spec)
    # Recorded now, while the unreaped child holds its pid: nothing else can have it.
    state.pid = process.child.pid
    state.identity = identity_of(process.child.pid)
    buffered = b""
    try:
        with trio.move_on_after(spec.start_timeout_s) as timer:
            while b"\n" not in buffered:
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    break
                buffered += chunk
    except BaseException:
        # Cancelled before its ready line (`down` while a restarted broker still waits for
        # ZooKeeper to let go of its old registration): stopped now, like a running child,
        # rather than left running until the launcher's own exit takes it along.
        await _stop(process)
        raise
    line, _, rest = buffered.partition(b"\n")
    text = line.decode(errors="replace").strip()
    if timer.cancelled_caught or not spec.ready.search(text):
        await _stop(process)
        reason = "no ready line" if timer.cancelled_caught else f"exited or printed {text!r} instead of its ready line"
        raise StartFailed(spec.name, reason, spec.log_path)
    state.ready_line = text
    return process, rest


async def _copy_to_log(stream: trio.abc.ReceiveStream, path: Path, first: bytes) -> None:
    with open(path, "ab") as f:  # noqa: ASYNC230 - a local log file, opened once
        if first:
            f.write(first)
        while chunk := await stream.receive_some(65536):
            f.write(chunk)
            f.flush()


async def _stop(process: _Running) -> None:
    """SIGTERM, a grace period, then SIGKILL; shielded so cancellation cannot orphan it."""
    with trio.CancelScope(shield=True):
        await process.child.aclose(STOP_GRACE_S)
        await process.stdout.aclose()


async def supervise(state: Supervised, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Keep the child running until cancelled; the first ready line goes to `task_status`.

    Raises StartFailed when the first start fails (so `up` can report it); later failures are
    retried with backoff and counted in `state.restarts`.
    """
    failures = 0  # restarts since the child last stayed up for STABLE_AFTER_S
    first = True
    while True:
        if state._held is not None:  # stopped on purpose (`hold`): down until `release`
            state._gone.set()
            await state._held.wait()
            state._held = None
        try:
            process, rest = await _start(state)
        except StartFailed:
            if first:
                raise
            failures += 1
            pause = RESTART_BACKOFF.delay(failures)
            log.warning("%s failed to restart; retrying in %.1f s", state.spec.name, pause)
            await trio.sleep(pause)
            continue
        started_at = trio.current_time()
        failed: Exception | None = None
        code: int | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_copy_to_log, process.stdout, state.spec.log_path, rest)
                try:
                    if state.on_ready is not None:
                        await state.on_ready(state)
                except Exception as exc:  # noqa: BLE001 - reported below, as a failed start
                    failed = exc
                else:
                    state.healthy = True
                    state._up.set()
                    state._changed()
                    if first:
                        task_status.started(state.ready_line)
                        first = False
                    code = await process.child.wait_exited()
                nursery.cancel_scope.cancel()
        finally:
            await _stop(process)
            state.healthy = False
            if state._up.is_set():
                state._up = trio.Event()
            state._changed()
        if state._held is not None and failed is None:
            continue  # stopped by `hold`: no restart, no backoff
        if failed is not None:
            if first:
                raise StartFailed(state.spec.name, f"not ready after its ready line: {failed}",
                                  state.spec.log_path) from failed
            log.warning("%s (pid %s) was stopped: not ready after its ready line: %s", state.spec.name, state.pid,
                        failed)
        else:
            log.warning("%s (pid %s) exited with %s; restarting", state.spec.name, state.pid, code)
        if trio.current_time() - started_at > STABLE_AFTER_S:
            failures = 0
        failures += 1
        await trio.sleep(RESTART_BACKOFF.delay(failures))
        state.restarts += 1
        state._changed()


async def hold(state: Supervised, *, hard: bool = False) -> None:
    """Stop the supervised child on purpose and keep it down until `release`: SIGKILL when
    `hard` (a crash: no chance to flush), else SIGTERM (a clean shutdown; SIGKILL after
    STOP_GRACE_S). Returns once the child is gone. Raises RuntimeError if already held."""
    if state._held is not None:
        raise RuntimeError(f"{state.spec.name} is already held down")
    state._held = trio.Event()
    gone = state._gone = trio.Event()
    process = state._process
    if process is not None and process.child.poll() is None:
        process.child.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        with trio.move_on_after(STOP_GRACE_S):
            await gone.wait()
        if not gone.is_set():
            process.child.send_signal(signal.SIGKILL)
    await gone.wait()


async def release(state: Supervised) -> str:
    """Start a child held down by `hold` again; returns its ready line once it is healthy
    (a start that fails is retried with the supervisor's backoff: bound this with a deadline)."""
    held = state._held
    if held is None:
        raise RuntimeError(f"{state.spec.name} is not held down")
    up = state._up
    held.set()
    await up.wait()
    return state.ready_line
