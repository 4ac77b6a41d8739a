"""A process Causeway starts and owns: the one way to start it, know when it is ready, stop it,
kill it and show the tail of its log.

Every kind of child goes through `ChildProcess`: a `causeway broker` or `causeway wan` that a
test, a benchmark or a tool runs (deploy/broker_process.py, deploy/wan/process.py), a ZooKeeper
node (deploy/zookeeper/node.py), an Apache Kafka peer or one of Kafka's tools (bench/peers/), a
benchmark's `causeway mirror` (bench/mirror.py), every child the launcher supervises
(deploy/supervisor.py, which adds restarts) and the launcher itself under `causeway up --detach`
(deploy/cli/launch.py).

- **Start.** `ChildProcess.start`: stdin from /dev/null, stderr into the child's log file (or
  wherever stdout goes: `causeway up --detach` echoes both until its launcher is ready), stdout
  into a pipe (the ready line, or a tool's JSON lines), into the log as well, nowhere, or into a
  descriptor the caller made (the supervisor reads it with trio).
- **Ready.** A Causeway daemon prints one ready line on stdout (`causeway broker 0 ready: ...`):
  `read_ready_line`. A JVM prints nothing to trust, so it is ready once a probe answers (its
  `srvr`, an ApiVersions request): `wait_ready`, a bounded poll.
- **Stop.** `stop`: SIGTERM, a grace period, then SIGKILL (`aclose` is the same for trio code,
  waiting on a pidfd instead of blocking). `kill`: SIGKILL at once, a crash.
- **Log.** `log_tail`: the log's last lines, which every start failure shows.

A child started with `die_with_parent` gets a session of its own (a terminal's Ctrl-C reaches
only its parent, which stops it) and a parent-death signal (SIGTERM, so it still shuts down
cleanly), so a parent that is SIGKILLed leaves no orphans. The signal fires when the *thread*
that forked exits, so such a child must be started on a thread that lives as long as it should
(the main thread or the trio thread; never one of trio's worker threads, which exit after a few
idle seconds).

A child started with `own_group` gets a session, and so a process group, of its own, and every
signal the handle sends reaches the whole group: for a child that starts children of its own
(a Spark worker's executors), or that must outlive its parent (`causeway up --detach`'s launcher).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar, Literal

import trio

__all__ = ["NO_LOG", "ChildFailed", "ChildOwner", "ChildProcess", "Stderr", "Stdout", "fd_count", "log_tail",
           "rss_bytes"]

#: Where a child's stdout goes: a pipe the handle reads (`ChildProcess.stdout`), the log file
#: (with stderr), nowhere, or a descriptor the caller opened.
Stdout = Literal["pipe", "log", "discard"] | int
#: Where its stderr goes: the log file (nowhere without one), or wherever its stdout goes.
Stderr = Literal["log", "stdout"]


class ChildFailed(RuntimeError):
    """The child exited, or stayed silent, before it was ready (the message has its log's tail)."""


NO_LOG = "(no log)"  # what `log_tail` shows of a log it cannot read


def log_tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of the log at `path`; NO_LOG when it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return NO_LOG


PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the forked child only calls it


def _die_with(parent: int) -> None:
    """Runs in the forked child before exec: only a system call, no lock another thread may hold."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died between fork and prctl: nobody would signal us
        os._exit(1)


def _before_exec(die_with_parent: bool, nofile: int | None) -> Callable[[], None] | None:
    """What the forked child does before exec: only system calls (see `_die_with`)."""
    if not die_with_parent and nofile is None:
        return None
    parent = os.getpid()

    def prepare() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if die_with_parent:
            _die_with(parent)

    return prepare


@dataclass(eq=False)
class ChildProcess:
    """One running (or finished) child; `what` names it in errors ("broker", "WAN emulator").

    `log_offset` is the log's size when this child started: what follows is its own; `own_group`:
    its signals go to its whole process group.
    """

    what: str
    popen: subprocess.Popen[str]
    log_path: Path | None
    log_offset: int = 0
    own_group: bool = False

    @classmethod
    def start(cls, what: str, argv: Sequence[str], *, log_path: Path | None, stdout: Stdout = "pipe",
              stderr: Stderr = "log", cwd: Path | None = None, env: Mapping[str, str] | None = None,
              die_with_parent: bool = False, own_group: bool = False, nofile: int | None = None) -> ChildProcess:
        """Start `argv` and return at once (see the module docstring for `stdout`, `stderr`,
        `die_with_parent` and `own_group`). `env` adds to this process's environment; `nofile` sets
        the child's RLIMIT_NOFILE (soft and hard). Its stderr is appended to `log_path` (discarded
        when None) unless `stderr` is "stdout". Raises OSError when the program cannot be run."""
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        if stdout == "log" and log_path is None:
            raise ValueError("stdout='log' needs a log_path")
        with _open_log(log_path) as log:
            offset = 0 if isinstance(log, int) else log.tell()
            out = {"pipe": subprocess.PIPE, "log": log, "discard": subprocess.DEVNULL}[stdout] if isinstance(
                stdout, str) else stdout
            popen = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT if stdout == "log" or stderr == "stdout" else log, text=True, cwd=cwd,
                env={**os.environ, **env} if env else None, start_new_session=die_with_parent or own_group,
                preexec_fn=_before_exec(die_with_parent, nofile),  # noqa: PLW1509 - only system calls, see _die_with
            )
        return cls(what, popen, log_path, offset, own_group)

    # --- what it is now

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    @property
    def stdout(self) -> IO[str] | None:
        """The pipe of a child started with stdout="pipe"."""
        return self.popen.stdout

    def poll(self) -> int | None:
        """The exit code once it has exited (reaping it), else None."""
        return self.popen.poll()

    def running(self) -> bool:
        return self.popen.poll() is None

    def send_signal(self, sig: int) -> None:
        """`sig` to the child (its whole group when started with `own_group`); nothing once it has
        been reaped, when its pid may name another process."""
        if self.popen.poll() is not None:
            return
        if self.own_group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
        else:
            self.popen.send_signal(sig)

    def wait(self, timeout: float | None = None) -> int:
        """Block until it exits; its exit code (subprocess.TimeoutExpired after `timeout`)."""
        return self.popen.wait(timeout=timeout)

    # --- ready

    def read_ready_line(self, timeout_s: float) -> str:
        """The first line the child prints on its stdout pipe: its ready line, waited for up to
        `timeout_s`. Raises ChildFailed, with the log's tail, when it exits first or stays
        silent (then it is killed); either way the child has been waited for."""
        assert self.popen.stdout is not None, "started without stdout='pipe'"
        with selectors.DefaultSelector() as sel:
            sel.register(self.popen.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=timeout_s):
                self.kill()
                raise ChildFailed(f"{self.what} not ready in {timeout_s}s; log:\n{self.log_tail()}")
        line = self.popen.stdout.readline()
        if not line:
            code = self.popen.wait()
            raise ChildFailed(f"{self.what} exited with {code} before it was ready; log:\n{self.log_tail()}")
        return line

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float, interval_s: float) -> None:
        """Ask `ready()` every `interval_s` until it says yes; bounded by `timeout_s`. For a child
        with no ready line: polling another process, which has no way to tell us. Raises
        ChildFailed, with the log's tail, when the child exits first (waited for) or is still not
        ready at the deadline (then it is killed)."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            code = self.popen.poll()
            if code is not None:
                raise ChildFailed(f"{self.what} exited with {code} before it was ready:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise ChildFailed(f"{self.what} not ready in {timeout_s:g}s:\n{self.log_tail()}")
            time.sleep(interval_s)

    # --- stop

    def stop(self, timeout_s: float) -> int:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL; the exit code (negative when killed by a
        signal). A child that exited already is only reaped."""
        if self.popen.poll() is None:
            self.send_signal(signal.SIGTERM)
            try:
                return self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.send_signal(signal.SIGKILL)
        return self.popen.wait()

    def kill(self) -> int:
        """SIGKILL (a crash: no chance to flush) and reap; the exit code."""
        self.send_signal(signal.SIGKILL)
        return self.popen.wait()

    async def wait_exited(self) -> int:
        """Wait, without blocking trio's loop and without polling, until the child exits (its
        pidfd turns readable); the exit code."""
        if self.popen.returncode is None:
            try:
                pidfd = os.pidfd_open(self.popen.pid)  # unreaped, the child still holds its pid
            except ProcessLookupError:  # reaped meanwhile by a thread that waited for it
                pidfd = None
            if pidfd is not None:
                try:
                    await trio.lowlevel.wait_readable(pidfd)
                finally:
                    trio.lowlevel.notify_closing(pidfd)
                    os.close(pidfd)
        return self.popen.wait()

    async def aclose(self, grace_s: float) -> int:
        """`stop` for trio code: SIGTERM, up to `grace_s` for the child to exit, then SIGKILL;
        shielded, so a cancelled caller never leaves the child behind. The exit code."""
        with trio.CancelScope(shield=True):
            if self.popen.poll() is None:
                self.send_signal(signal.SIGTERM)
                with trio.move_on_after(grace_s):
                    await self.wait_exited()
                self.send_signal(signal.SIGKILL)
            code = await self.wait_exited()
        return code

    # --- log

    def log_tail(self, lines: int = 40) -> str:
        return NO_LOG if self.log_path is None else log_tail(self.log_path, lines)

    def own_log(self) -> str:
        """What this child (not an earlier one with the same log) wrote to its log."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""


class ChildOwner:
    """What a kind of child (a broker, the WAN emulator, a ZooKeeper node, a Kafka peer) offers
    whoever runs it: `proc` is its ChildProcess while it runs, None once `stop` or `kill` (or a
    failed start) has reaped it, so it can be started again."""

    proc: ChildProcess | None
    stop_timeout_s: ClassVar[float]  # how long `stop` waits after SIGTERM before it kills

    def stop(self, timeout_s: float | None = None) -> int:
        """SIGTERM and wait (SIGKILL after `timeout_s`, else `stop_timeout_s`): the clean shutdown
        path. The exit code; 0 when not running."""
        proc, self.proc = self.proc, None
        return 0 if proc is None else proc.stop(self.stop_timeout_s if timeout_s is None else timeout_s)

    def kill(self) -> None:
        """SIGKILL: a crash, no chance to flush or checkpoint."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()


def _open_log(log_path: Path | None) -> contextlib.AbstractContextManager[IO[bytes] | int]:
    """The child's log opened for appending while it starts (the child keeps its own descriptor),
    or /dev/null without one."""
    if log_path is None:
        return contextlib.nullcontext(subprocess.DEVNULL)
    return log_path.open("ab")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fd_count(pid: int) -> int:
    """Open file descriptors of a process, from /proc."""
    return len(os.listdir(f"/proc/{pid}/fd"))
