"""deploy/child_process.py: start a child, read its ready line or probe it, stop it, kill it, and
show its log's tail, against small real Python children."""

from __future__ import annotations

import os
import selectors
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from deploy.child_process import NO_LOG, ChildFailed, ChildOwner, ChildProcess, fd_count, log_tail, rss_bytes

# A child that logs a line on stderr, prints its ready line, then waits to be stopped.
READY_THEN_WAIT = "import sys, time; print('old', file=sys.stderr, flush=True); print('child ready: 1', flush=True); " \
                  "time.sleep(600)"


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_ready_line_comes_from_stdout_and_the_log_from_stderr(tmp_path: Path) -> None:
    child = ChildProcess.start("child", python(READY_THEN_WAIT), log_path=tmp_path / "child.log")
    try:
        assert child.read_ready_line(60).strip() == "child ready: 1"
        assert child.running() and child.poll() is None
        assert rss_bytes(child.pid) > 0 and fd_count(child.pid) >= 3
        assert child.log_tail() == "old"
    finally:
        assert child.stop(60) == -signal.SIGTERM
    assert not child.running() and child.returncode == -signal.SIGTERM


def test_a_child_that_exits_before_its_ready_line_fails_with_its_log(tmp_path: Path) -> None:
    child = ChildProcess.start("child", python("import sys; sys.exit('no config')"), log_path=tmp_path / "child.log")
    with pytest.raises(ChildFailed, match=r"child exited with 1 before it was ready; log:\nno config"):
        child.read_ready_line(60)
    assert child.returncode == 1


def test_a_silent_child_is_killed_when_its_ready_line_does_not_come(tmp_path: Path) -> None:
    child = ChildProcess.start("child", python("import time; time.sleep(600)"), log_path=None)
    with pytest.raises(ChildFailed, match=r"child not ready in 0.1s; log:\n\(no log\)"):
        child.read_ready_line(0.1)
    assert child.returncode == -signal.SIGKILL


def test_wait_ready_polls_until_the_probe_answers(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    child = ChildProcess.start("child", python(f"import pathlib, time; pathlib.Path({str(flag)!r}).touch(); "
                                               "time.sleep(600)"), log_path=tmp_path / "child.log", stdout="log")
    try:
        child.wait_ready(flag.exists, 60, interval_s=0.01)
    finally:
        assert child.kill() == -signal.SIGKILL


def test_wait_ready_fails_when_the_child_exits_first(tmp_path: Path) -> None:
    child = ChildProcess.start("child", python("print('bye')"), log_path=tmp_path / "child.log", stdout="log")
    with pytest.raises(ChildFailed, match=r"child exited with 0 before it was ready:\nbye"):
        child.wait_ready(lambda: False, 60, interval_s=0.01)


def test_own_log_is_what_this_child_wrote_after_an_earlier_one(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    log.write_text("an earlier run\n")
    child = ChildProcess.start("child", python("print('this run')"), log_path=log, stdout="log")
    assert child.wait() == 0
    assert child.own_log() == "this run\n"
    assert log_tail(log, 2) == "an earlier run\nthis run"


def test_env_cwd_and_nofile_reach_the_child(tmp_path: Path) -> None:
    code = ("import os, resource; print(os.environ['CHILD_MARK'], os.getcwd(), "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)")
    child = ChildProcess.start("child", python(code), log_path=None, cwd=tmp_path, env={"CHILD_MARK": "marked"},
                               nofile=256)
    assert child.read_ready_line(60).split() == ["marked", str(tmp_path), "256"]
    assert child.wait() == 0


def test_stderr_can_follow_stdout_into_the_pipe(tmp_path: Path) -> None:
    code = "import sys; print('warming up', file=sys.stderr, flush=True); print('child ready: 1', flush=True)"
    child = ChildProcess.start("child", python(code), log_path=tmp_path / "child.log", stderr="stdout")
    assert child.read_ready_line(60) == "warming up\n"
    assert child.read_ready_line(60) == "child ready: 1\n"
    assert child.wait() == 0
    assert child.log_tail() == ""  # nothing went to the log


def test_an_own_group_child_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    # The child starts a grandchild that shares its stdout pipe: the pipe ends only once both are gone.
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            "print('child ready: 1', flush=True); time.sleep(600)")
    child = ChildProcess.start("child", python(code), log_path=tmp_path / "child.log", own_group=True)
    try:
        child.read_ready_line(60)
        assert os.getsid(child.pid) == child.pid != os.getsid(0)
    finally:
        assert child.stop(60) == -signal.SIGTERM
    assert child.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(child.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=60), "the grandchild outlived the stop"
    assert child.stdout.read() == ""
    child.send_signal(signal.SIGTERM)  # reaped: nothing is signalled


def test_log_tail_of_a_missing_log() -> None:
    assert log_tail(Path("/nonexistent/child.log")) == NO_LOG


async def test_aclose_stops_the_child_and_wait_exited_sees_it(tmp_path: Path) -> None:
    child = ChildProcess.start("child", python(READY_THEN_WAIT), log_path=tmp_path / "child.log", stdout="discard",
                               die_with_parent=True)
    assert await child.aclose(60) == -signal.SIGTERM
    assert await child.wait_exited() == -signal.SIGTERM  # once exited, at once


async def test_aclose_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(600)"
    child = ChildProcess.start("child", python(code), log_path=None)
    child.read_ready_line(60)  # its handler is in place
    assert await child.aclose(0.1) == -signal.SIGKILL


@dataclass
class Sleeper(ChildOwner):
    proc: ChildProcess | None = None
    stop_timeout_s: ClassVar[float] = 60.0

    def start(self) -> Sleeper:
        self.proc = ChildProcess.start("sleeper", python(READY_THEN_WAIT), log_path=None)
        self.proc.read_ready_line(60)
        return self


def test_an_owner_forgets_its_child_once_stopped_or_killed() -> None:
    sleeper = Sleeper()
    assert sleeper.stop() == 0  # nothing runs
    first = sleeper.start().proc
    assert sleeper.stop() == -signal.SIGTERM and sleeper.proc is None
    assert first is not None and first.returncode == -signal.SIGTERM
    second = sleeper.start().proc
    sleeper.kill()
    assert sleeper.proc is None and second is not None and second.returncode == -signal.SIGKILL
