"""Run a child process, wait for its ready line, restart it with backoff when it dies.

Every Causeway daemon prints one line on stdout when it is ready (`causeway broker 0 ready: ...`,
`causeway wan ready: ...`); the supervisor waits for that line, reports it through
`task_status.started(...)`, and from then on copies the child's stdout into its log file. When
the child exits, it is started again after a backoff that doubles up to a cap and resets once a
child has stayed up for a while, so a crash loop never spins.

A child dies with its supervisor: it is forked from the trio thread with a parent-death signal
(SIGTERM, so it still shuts down cleanly), so a supervisor that is SIGKILLed leaves no orphans.
The signal fires when the *thread* that forked exits, which is why the fork happens here and not
in one of trio's worker threads (`trio.lowlevel.open_process` forks in one, and those exit after
a few idle seconds). The trio thread lives as long as every supervisor running in it.

`hold` and `release` stop a supervised child on purpose and start it again (the chaos rig's
process faults): a held child is not restarted behind its caller's back, and its stop is no
restart in `Supervised.restarts`, which counts only the children that died on their own.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from broker.retry import Backoff
from deploy.process_identity import Identity, identity_of

__all__ = ["ProcessSpec", "Supervised", "StartFailed", "hold", "log_tail", "release", "supervise"]

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
    _process: _Child | None = field(default=None, repr=False)
    _held: trio.Event | None = field(default=None, repr=False)
    _gone: trio.Event = field(default_factory=trio.Event, repr=False)
    _up: trio.Event = field(default_factory=trio.Event, repr=False)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the forked child only calls it


def _die_with(parent: int) -> None:
    """Runs in the forked child before exec: only a system call, no lock another thread may hold."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died between fork and prctl: nobody would signal us
        os._exit(1)


class _Child:
    """A child process forked on this thread, waited for through a pidfd (no polling)."""

    def __init__(self, popen: subprocess.Popen[bytes], stdout: trio.lowlevel.FdStream) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self._pidfd: int | None = os.pidfd_open(popen.pid)

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    async def wait(self) -> int:
        if self._pidfd is not None and self.popen.returncode is None:
            await trio.lowlevel.wait_readable(self._pidfd)
        return self.popen.wait()

    def send_signal(self, sig: int) -> None:
        self.popen.send_signal(sig)  # does nothing once the child has been reaped

    def close(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


def _spawn(spec: ProcessSpec) -> _Child:
    """Fork and exec on the calling (trio) thread: see the module docstring for why. It blocks
    only until the exec has happened, a few milliseconds."""
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        with open(spec.log_path, "ab") as log_file:  # noqa: ASYNC230 - a local log file, handed to the child
            popen = subprocess.Popen(
                list(spec.argv), stdin=subprocess.DEVNULL, stdout=write_end, stderr=log_file,
                env={**os.environ, **spec.env}, start_new_session=True,
                preexec_fn=partial(_die_with, os.getpid()),  # noqa: PLW1509 - only a system call, see _die_with
            )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return _Child(popen, trio.lowlevel.FdStream(read_end))


async def _start(state: Supervised) -> tuple[_Child, bytes]:
    spec = state.spec
    process = state._process = _spawn(spec)
    # Recorded now, while the unreaped child holds its pid: nothing else can have it.
    state.pid = process.pid
    state.identity = identity_of(process.pid)
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
    return process, rest


async def _copy_to_log(stream: trio.abc.ReceiveStream, path: Path, first: bytes) -> None:
    with open(path, "ab") as f:  # noqa: ASYNC230 - a local log file, opened once
        if first:
            f.write(first)
        while chunk := await stream.receive_some(65536):
            f.write(chunk)
            f.flush()


async def _stop(process: _Child) -> None:
    """SIGTERM, a grace period, then SIGKILL; shielded so cancellation cannot orphan it."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(STOP_GRACE_S):
                await process.wait()
            if process.returncode is None:
                process.send_signal(signal.SIGKILL)
                await process.wait()
        process.close()
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
                    code = await process.wait()
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
    if process is not None and process.returncode is None:
        process.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        with trio.move_on_after(STOP_GRACE_S):
            await gone.wait()
        if not gone.is_set():
            process.send_signal(signal.SIGKILL)
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
